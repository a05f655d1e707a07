#pragma once
// Minimal HDF5 reading for tests (fixtures written by h5py): whole datasets as float/int vectors.
#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace ht::test {

inline bool h5_exists(hid_t f, const std::string& name) {
  return H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0;
}

template <class T> std::vector<T> h5_read(hid_t f, const std::string& name, std::vector<int64_t>* shape = nullptr) {
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("fixture has no dataset " + name);
  hid_t s = H5Dget_space(d);
  int nd = H5Sget_simple_extent_ndims(s);
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  size_t n = 1;
  if (shape) shape->clear();
  for (auto v : dims) {
    n *= v;
    if (shape) shape->push_back(static_cast<int64_t>(v));
  }
  std::vector<T> out(n);
  hid_t mt = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT;
  if (n > 0 && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw std::runtime_error("cannot read dataset " + name);
  H5Sclose(s);
  H5Dclose(d);
  return out;
}

}  // namespace ht::test
