#pragma once
// HDF5's Fletcher-32 checksum (the value its fletcher32 filter stores after each chunk), computed
// fast for the checkpoint writer, plus HDF5's own loop as the reference the tests compare against.
#include <cstddef>
#include <cstdint>

namespace ht {

/// HDF5's Fletcher-32 of `nbytes` bytes at `src` (big-endian 16-bit words; an odd last byte counts
/// as a word's high byte), in one pass that also copies the bytes to `dst` when `dst` is non-null
/// (dst and src must not overlap). 16 SSE2 lanes without multiplies on x86-64, a portable loop
/// elsewhere; bit-identical to fletcher32_reference for every input.
uint32_t fletcher32_copy(unsigned char* dst, const unsigned char* src, size_t nbytes);

/// HDF5's loop (H5checksum.c, H5_checksum_fletcher32) over `nbytes` bytes at `data`; slow, for tests.
uint32_t fletcher32_reference(const unsigned char* data, size_t nbytes);

}  // namespace ht
