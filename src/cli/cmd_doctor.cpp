// hpctrain doctor: placeholder until its issue lands; exits 1 so nothing mistakes it for success.
#include <iostream>

#include "src/cli/commands.hpp"

namespace ht {
int cmd_doctor(const Args&) {
  std::cerr << "hpctrain doctor: not implemented yet\n";
  return 1;
}
}  // namespace ht
