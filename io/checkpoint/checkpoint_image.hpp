#pragma once
// The in-memory HDF5 file image of the checkpoint writer (io/checkpoint/checkpoint_encode.cpp): file image
// callbacks hand the core driver our own buffer, so the writer knows where each chunk lies and gets
// the file exactly as HDF5 leaves it after close. (H5Fget_file_image on an open 1.10-format file
// returns a superblock whose checksum does not match its cleared status flags.)
//
// One process-wide buffer is reused: after the first checkpoint its pages are already faulted in, so
// later checkpoints do not pay ~25k page faults per 100 MB. One capture takes it at a time.
#include <hdf5.h>

#include <cstddef>

namespace ht {

/// A malloc'ed buffer and its capacity in bytes.
struct ImageBuffer {
  void* ptr = nullptr;
  size_t cap = 0;
};

/// The image of one in-memory file. Takes the cached buffer on construction and gives it back (the
/// larger of it and any newer cached one is kept, up to 4 GiB) on destruction, unless HDF5 still
/// holds it (a file that failed to close: HDF5 frees it then).
struct ImageCapture {
  ImageBuffer buf;          ///< our buffer (from the cache or grown by the driver's realloc)
  bool in_use = false;      ///< handed to the core driver
  void* closed = nullptr;   ///< the buffer the driver released at file close (the finished image)

  ImageCapture();
  ~ImageCapture();
  ImageCapture(const ImageCapture&) = delete;
  ImageCapture& operator=(const ImageCapture&) = delete;

  /// Sets this capture's file image callbacks on the file access property list `fapl` (core
  /// driver). Must outlive every file opened with `fapl`. Throws H5Fail (io/h5.hpp) when HDF5 fails.
  void install(hid_t fapl);
};

}  // namespace ht
