#pragma once
// op_check: the one-line guard of the op halves for what only they can see (a label value out of
// range, a limit of the library they call). Argument validation proper is done once per call by the
// dispatcher (OpArgs in src/ops/op.hpp).
#include <string>

#include "base/error.hpp"

namespace ht {

/// Throws RuntimeError "<op>: <what>" unless ok.
inline void op_check(bool ok, const char* op, const std::string& what) {
  if (!ok) throw RuntimeError(std::string(op) + ": " + what);
}

}  // namespace ht
