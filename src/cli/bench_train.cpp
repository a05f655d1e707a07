// hpctrain bench train: placeholder until its issue lands; exits 1 so nothing mistakes it for success.
#include <iostream>

#include "src/cli/commands.hpp"

namespace ht {
int bench_train(const Args&) {
  std::cerr << "hpctrain bench train: not implemented yet\n";
  return 1;
}
}  // namespace ht
