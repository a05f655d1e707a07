#include "src/ops/op.hpp"

namespace ht {
void op_check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw RuntimeError(std::string(op) + ": " + what);
}
}  // namespace ht
