// hpctrain bench io: placeholder until its issue lands; exits 1 so nothing mistakes it for success.
#include <iostream>

#include "src/cli/commands.hpp"

namespace ht {
int bench_io(const Args&) {
  std::cerr << "hpctrain bench io: not implemented yet\n";
  return 1;
}
}  // namespace ht
