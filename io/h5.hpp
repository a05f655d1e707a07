#pragma once
// The HDF5 toolkit shared by the dataset shards and the checkpoints: the process-wide library lock,
// the RAII identifier handle, the section that holds the lock with HDF5's error printing off, the
// failure type of the checkpoint code with the innermost HDF5 error as its text, and small
// attribute/dataspace readers.
//
// Debian's HDF5 1.10 is built without thread safety, so every HDF5 call in the process (dataset
// prefetch, checkpoint writer thread, inspect) runs under hdf5_mutex().
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht {

/// The one process-wide lock around HDF5 calls (recursive: a holder may take it again).
std::recursive_mutex& hdf5_mutex();

/// A failure inside io/'s HDF5 file code: the HDF5 error text or the errno text, without the file's
/// name. The public functions convert it to RuntimeError (writes) or UsageError (reads) naming the file.
struct H5Fail : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The innermost HDF5 error of the current error stack, shortened to the system error when there is
/// one ("No space left on device (errno = 28)"); "unknown HDF5 error" when the stack is empty.
std::string h5_error_text();

/// Why H5Fopen just failed on `path`: HDF5's own innermost error, plus, when that error is about a file
/// lock, who is likely to hold it and the HDF5_USE_FILE_LOCKING remedy. Call right after the failure.
std::string h5_open_failure_text();

/// `rc` unchanged when >= 0; otherwise throws H5Fail("WHAT: <h5_error_text()>").
template <class T> T h5(T rc, const std::string& what) {
  if (rc < 0) throw H5Fail(what + ": " + h5_error_text());
  return rc;
}

/// RAII owner of an hid_t with its matching close function (H5Fclose, H5Dclose, ...). Movable.
class H5Handle {
 public:
  H5Handle() = default;
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  /// Closes the identifier (errors ignored) and leaves the handle empty.
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  /// Closes the identifier and throws H5Fail("WHAT: ...") when the close fails (closing a file
  /// flushes it: that is where a full disk often shows up). The handle is empty afterwards.
  void close_checked(const std::string& what) {
    if (id_ < 0) return;
    hid_t id = id_;
    id_ = -1;
    h5(close_(id), what);
  }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// RAII: holds hdf5_mutex() and turns off HDF5's automatic error-stack printing (we report our own
/// messages), restoring both at the end. without_h5_lock() inside a section releases its lock.
class H5Section {
 public:
  H5Section();
  ~H5Section();
  H5Section(const H5Section&) = delete;
  H5Section& operator=(const H5Section&) = delete;

 private:
  friend std::unique_lock<std::recursive_mutex>* h5_section_lock_held();
  std::unique_lock<std::recursive_mutex> lock_;
  H5Section* prev_;
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// The lock of this thread's innermost H5Section when that section holds it, else nullptr (for
/// without_h5_lock).
std::unique_lock<std::recursive_mutex>* h5_section_lock_held();

/// Runs f() (which must not call HDF5) with the lock of this thread's innermost H5Section (if it
/// holds it) released, so other threads may call HDF5 meanwhile; takes it back at the end, also when
/// f throws. Returns f()'s result.
template <class F> auto without_h5_lock(F&& f) {
  struct Relock {
    std::unique_lock<std::recursive_mutex>* lock;
    ~Relock() {
      if (lock) lock->lock();
    }
  } relock{h5_section_lock_held()};
  if (relock.lock) relock.lock->unlock();
  return f();
}

/// A new variable-length UTF-8 C string type (the string attributes of the dataset schema).
/// HDF5 failures are reported through HT_H5_CHECK.
H5Handle h5_vlen_string_type();

/// Dimensions of a simple dataspace; empty for a scalar dataspace or when HDF5 fails.
std::vector<hsize_t> h5_space_dims(hid_t space);

/// Attribute readers (caller holds hdf5_mutex). They return false when the attribute is absent or has
/// an incompatible type class, so callers can name the attribute in their own error.
/// Strings may be fixed or variable length, scalar or 1-D; integers are read as int64, floats as float.
bool h5_attr_exists(hid_t obj, const char* name);
bool h5_read_attr_string(hid_t obj, const char* name, std::string& out);
bool h5_read_attr_strings(hid_t obj, const char* name, std::vector<std::string>& out);
bool h5_read_attr_int(hid_t obj, const char* name, int64_t& out);
bool h5_read_attr_floats(hid_t obj, const char* name, std::vector<float>& out);

}  // namespace ht
