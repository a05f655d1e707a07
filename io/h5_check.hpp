#pragma once
// HT_H5_CHECK: checks an HDF5 C API call (a negative herr_t or hid_t is a failure) and reports it
// through check_failed, so the message names the call, rank, host and file:line like every other
// check macro. Usage: hid_t f = HT_H5_CHECK(H5Fopen(...)); HT_H5_CHECK(H5Fclose(f));
#include <hdf5.h>

#include <string>

namespace ht {
// TODO(base): include "src/base/check.hpp" instead once it is in main (same declaration).
[[noreturn]] void check_failed(const char* lib, const char* file, int line, const char* call,
                               const std::string& detail);
}  // namespace ht

// HDF5 C API calls return a negative value (herr_t or hid_t) on failure.
#define HT_H5_CHECK(call)                                                             \
  ([&]() {                                                                            \
    auto ht_rc_ = (call);                                                             \
    if (ht_rc_ < 0) ::ht::check_failed("HDF5", __FILE__, __LINE__, #call, "returned a negative status"); \
    return ht_rc_;                                                                    \
  }())
