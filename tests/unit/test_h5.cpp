// The shared HDF5 toolkit (io/h5.hpp): the lock held by a section and released by without_h5_lock,
// quiet error sections, the handle, the failure text, dataspace dims and the attribute readers.
#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "io/h5.hpp"

using namespace ht;

namespace {

// True when another thread can take hdf5_mutex() right now.
bool lock_free_elsewhere() {
  return std::async(std::launch::async, [] {
           std::unique_lock<std::recursive_mutex> l(hdf5_mutex(), std::try_to_lock);
           return l.owns_lock();
         }).get();
}

// An in-memory HDF5 file (core driver, no backing store).
H5Handle memory_file(const char* name) {
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  REQUIRE(H5Pset_fapl_core(fapl, 1 << 16, false) >= 0);
  return H5Handle(H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
}

}  // namespace

TEST_CASE("h5: a section holds the HDF5 lock; without_h5_lock releases and retakes it", "[h5]") {
  REQUIRE(lock_free_elsewhere());
  {
    H5Section section;
    REQUIRE_FALSE(lock_free_elsewhere());
    int r = without_h5_lock([] { return lock_free_elsewhere() ? 7 : 0; });
    REQUIRE(r == 7);
    REQUIRE_FALSE(lock_free_elsewhere());
    {
      H5Section inner;  // nested: the inner section's lock is the one released
      REQUIRE(without_h5_lock([] { return lock_free_elsewhere(); }) == false);  // the outer still holds it
    }
    REQUIRE(without_h5_lock([] { return lock_free_elsewhere(); }));
  }
  REQUIRE(lock_free_elsewhere());
  // Outside any section without_h5_lock just runs f.
  REQUIRE(without_h5_lock([] { return 3; }) == 3);
}

TEST_CASE("h5: a section turns HDF5's error printing off and restores it", "[h5]") {
  H5E_auto2_t before = nullptr;
  void* before_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &before, &before_data);
  {
    H5Section section;
    H5E_auto2_t inside = reinterpret_cast<H5E_auto2_t>(1);
    void* inside_data = nullptr;
    H5Eget_auto2(H5E_DEFAULT, &inside, &inside_data);
    REQUIRE(inside == nullptr);
  }
  H5E_auto2_t after = nullptr;
  void* after_data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &after, &after_data);
  REQUIRE(after == before);
  REQUIRE(after_data == before_data);
}

TEST_CASE("h5: handles close once, move ownership, and report failed closes", "[h5]") {
  H5Section section;
  hid_t raw = H5Screate(H5S_SCALAR);
  REQUIRE(raw >= 0);
  H5Handle a(raw, H5Sclose);
  REQUIRE(a.valid());
  H5Handle b(std::move(a));
  REQUIRE_FALSE(a.valid());
  REQUIRE(b.get() == raw);
  H5Handle c;
  c = std::move(b);
  REQUIRE_FALSE(b.valid());
  REQUIRE(H5Iis_valid(raw) > 0);
  c.reset();
  REQUIRE_FALSE(c.valid());
  REQUIRE(H5Iis_valid(raw) <= 0);

  H5Handle d(H5Screate(H5S_SCALAR), H5Sclose);
  d.close_checked("close space");  // succeeds
  REQUIRE_FALSE(d.valid());
  H5Handle wrong(H5Screate(H5S_SCALAR), H5Dclose);  // a dataspace closed as a dataset fails
  hid_t leaked = wrong.get();
  try {
    wrong.close_checked("close the thing");
    FAIL("no error");
  } catch (const H5Fail& e) {
    REQUIRE(std::string(e.what()).rfind("close the thing: ", 0) == 0);
  }
  REQUIRE_FALSE(wrong.valid());
  H5Sclose(leaked);
}

TEST_CASE("h5: h5() passes results through and names the call and HDF5's error", "[h5]") {
  H5Section section;
  REQUIRE(h5(5, "five") == 5);
  try {
    h5(H5Fopen("/nonexistent/dir/file.h5", H5F_ACC_RDONLY, H5P_DEFAULT), "open as HDF5");
    FAIL("no error");
  } catch (const H5Fail& e) {
    // The innermost error is the driver's open(2) failure, shortened to its system error.
    REQUIRE(std::string(e.what()) == "open as HDF5: No such file or directory (errno = 2)");
  }
}

TEST_CASE("h5: dataspace dims and attribute readers", "[h5]") {
  H5Section section;
  hsize_t dims[2] = {3, 4};
  H5Handle simple(H5Screate_simple(2, dims, nullptr), H5Sclose);
  REQUIRE(h5_space_dims(simple) == std::vector<hsize_t>{3, 4});
  H5Handle scalar(H5Screate(H5S_SCALAR), H5Sclose);
  REQUIRE(h5_space_dims(scalar).empty());

  H5Handle f = memory_file("ht-test-h5-attrs");
  REQUIRE(f.valid());
  {  // variable-length UTF-8 string, scalar
    H5Handle t = h5_vlen_string_type();
    H5Handle a(H5Acreate2(f, "vlen", t, scalar, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    const char* p = "hello";
    REQUIRE(H5Awrite(a, t, &p) >= 0);
  }
  {  // fixed-length, null-padded strings, 1-D
    H5Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
    REQUIRE(H5Tset_size(t, 4) >= 0);
    REQUIRE(H5Tset_strpad(t, H5T_STR_NULLPAD) >= 0);
    hsize_t n = 2;
    H5Handle s(H5Screate_simple(1, &n, nullptr), H5Sclose);
    H5Handle a(H5Acreate2(f, "fixed", t, s, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    const char text[8] = {'a', 'b', 0, 0, 'w', 'x', 'y', 'z'};
    REQUIRE(H5Awrite(a, t, text) >= 0);
  }
  {
    H5Handle a(H5Acreate2(f, "int", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    int32_t v = -12;
    REQUIRE(H5Awrite(a, H5T_NATIVE_INT32, &v) >= 0);
  }
  {
    hsize_t n = 3;
    H5Handle s(H5Screate_simple(1, &n, nullptr), H5Sclose);
    H5Handle a(H5Acreate2(f, "floats", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    float v[3] = {0.5f, -1.25f, 3.0f};
    REQUIRE(H5Awrite(a, H5T_NATIVE_FLOAT, v) >= 0);
  }
  std::string s;
  std::vector<std::string> ss;
  int64_t i = 0;
  std::vector<float> fl;
  REQUIRE(h5_attr_exists(f, "vlen"));
  REQUIRE_FALSE(h5_attr_exists(f, "absent"));
  REQUIRE(h5_read_attr_string(f, "vlen", s));
  REQUIRE(s == "hello");
  REQUIRE(h5_read_attr_strings(f, "fixed", ss));
  REQUIRE(ss == std::vector<std::string>{"ab", "wxyz"});
  REQUIRE_FALSE(h5_read_attr_string(f, "fixed", s));  // two strings, not one
  REQUIRE(h5_read_attr_int(f, "int", i));
  REQUIRE(i == -12);
  REQUIRE(h5_read_attr_floats(f, "floats", fl));
  REQUIRE(fl == std::vector<float>{0.5f, -1.25f, 3.0f});
  // Absent or of another type class: false, so the caller names the attribute itself.
  REQUIRE_FALSE(h5_read_attr_int(f, "vlen", i));
  REQUIRE_FALSE(h5_read_attr_floats(f, "int", fl));
  REQUIRE_FALSE(h5_read_attr_string(f, "int", s));
  REQUIRE_FALSE(h5_read_attr_string(f, "absent", s));
}
