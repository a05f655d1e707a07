// hpctrain bench allreduce: placeholder until its issue lands; exits 1 so nothing mistakes it for success.
#include <iostream>

#include "src/cli/commands.hpp"

namespace ht {
int bench_allreduce(const Args&) {
  std::cerr << "hpctrain bench allreduce: not implemented yet\n";
  return 1;
}
}  // namespace ht
