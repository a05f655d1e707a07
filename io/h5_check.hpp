#pragma once
// HT_H5_CHECK(H5Fclose(f)): HDF5 C API calls return a negative herr_t or hid_t on failure; the
// macro throws ht::RuntimeError naming rank, host, file:line and the call (base/check.hpp),
// and otherwise yields the call's value.
#include <hdf5.h>

#include "base/check.hpp"

#define HT_H5_CHECK(call)                                                             \
  ([&]() {                                                                            \
    auto ht_rc_ = (call);                                                             \
    if (ht_rc_ < 0) ::ht::check_failed("HDF5", __FILE__, __LINE__, #call, "returned a negative status"); \
    return ht_rc_;                                                                    \
  }())
