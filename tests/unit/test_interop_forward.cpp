// Our forward pass on an imported checkpoint, for tests/interop/test_interop.py (hidden tag: only that
// script runs it). Reads the checkpoint with io/checkpoint/checkpoint_read (checksums verified), loads param/ and
// buffer/ tensors into the model by name, runs an evaluation-mode forward on the input file's /input
// [N,C,H,W] and writes /logits [N,classes] to the output file. Environment: HT_INTEROP_CKPT,
// HT_INTEROP_INPUT (also attributes model, num_classes, mlp_hidden), HT_INTEROP_OUTPUT.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "h5_test_util.hpp"
#include "io/checkpoint/checkpoint_format.hpp"
#include "src/nn/models.hpp"

using namespace ht;
using namespace ht::test;

namespace {
std::string read_str_attr(hid_t f, const char* name) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  hid_t t = H5Aget_type(a);
  std::string out;
  if (H5Tis_variable_str(t) > 0) {
    char* p = nullptr;
    H5Aread(a, t, &p);
    out = p ? p : "";
    H5free_memory(p);
  } else {
    std::string buf(H5Tget_size(t), '\0');
    H5Aread(a, t, buf.data());
    out = buf.c_str();
  }
  H5Tclose(t);
  H5Aclose(a);
  return out;
}
int64_t read_int_attr(hid_t f, const char* name) {
  int64_t v = 0;
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
  return v;
}
}  // namespace

TEST_CASE("interop: forward of an imported checkpoint", "[.interop]") {
  const char* ck = std::getenv("HT_INTEROP_CKPT");
  const char* in = std::getenv("HT_INTEROP_INPUT");
  const char* out = std::getenv("HT_INTEROP_OUTPUT");
  REQUIRE(ck);
  REQUIRE(in);
  REQUIRE(out);
  CheckpointData d = read_checkpoint_file(ck);
  hid_t f = H5Fopen(in, H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  std::vector<int64_t> xs;
  auto x = h5_read<float>(f, "input", &xs);
  REQUIRE(xs.size() == 4);
  ModelSpec spec;
  spec.name = read_str_attr(f, "model");
  spec.num_classes = static_cast<int>(read_int_attr(f, "num_classes"));
  spec.mlp_hidden = static_cast<int>(read_int_attr(f, "mlp_hidden"));
  spec.channels = static_cast<int>(xs[1]);
  spec.height = static_cast<int>(xs[2]);
  spec.width = static_cast<int>(xs[3]);
  H5Fclose(f);

  Model m(spec, Device::cpu, 99);  // every tensor is then overwritten from the checkpoint
  auto& ps = m.params();
  int loaded = 0;
  auto load = [&](const std::string& prefix, const auto& entries) {
    for (const auto& e : entries) {
      const Tensor* t = d.find(prefix + e.name);
      INFO(prefix << e.name);
      REQUIRE(t);
      REQUIRE(t->shape() == e.shape);
      e.value->copy_from(*t);
      ++loaded;
    }
  };
  load("param/", ps.params());
  load("buffer/", ps.buffers());
  CHECK(loaded == static_cast<int>(d.tensors.size()));  // nothing in the file left unused

  Tensor input = Tensor::empty(xs);
  std::copy(x.begin(), x.end(), input.data<float>());
  PassOptions po;
  po.training = false;
  po.need_input_grad = false;
  const Tensor& logits = m.forward(input, po);
  REQUIRE(logits.ndim() == 2);

  hid_t o = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(o >= 0);
  hsize_t dims[2] = {static_cast<hsize_t>(logits.shape()[0]), static_cast<hsize_t>(logits.shape()[1])};
  hid_t sp = H5Screate_simple(2, dims, nullptr);
  hid_t ds = H5Dcreate2(o, "logits", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, logits.data<float>()) >= 0);
  H5Dclose(ds);
  H5Sclose(sp);
  H5Fclose(o);
}
