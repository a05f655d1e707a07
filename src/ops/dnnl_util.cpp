#include "src/ops/dnnl_util.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

namespace ht::dnnl_util {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

memory::dims to_dims(const std::vector<int64_t>& shape) { return memory::dims(shape.begin(), shape.end()); }

tag plain_tag(int ndims) {
  switch (ndims) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    default: throw RuntimeError("dnnl_util::plain_tag: unsupported rank " + std::to_string(ndims));
  }
}

dt dnnl_dtype(DType t) {
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    default: throw RuntimeError(std::string("oneDNN: no data type for dtype ") + dtype_name(t));
  }
}

memory::desc act_desc(const memory::dims& dims, DType t) {
  if (dims.size() == 4) return memory::desc(dims, dnnl_dtype(t), t == DType::f32 ? tag::nchw : tag::nhwc);
  return memory::desc(dims, dnnl_dtype(t), plain_tag(static_cast<int>(dims.size())));
}

memory::desc f32_desc(const memory::dims& dims, tag t) { return memory::desc(dims, dt::f32, t); }

memory::desc plain_desc(const memory::dims& dims) {
  return memory::desc(dims, dt::f32, plain_tag(static_cast<int>(dims.size())));
}

memory wrap(const memory::desc& md, const Tensor& t) { return memory(md, engine(), t.raw()); }
memory wrap(const memory::desc& md, void* ptr) { return memory(md, engine(), ptr); }

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

namespace {
struct ScratchBuf {
  void* p = nullptr;
  size_t n = 0;
  ~ScratchBuf() { std::free(p); }
};
}  // namespace

memory scratchpad(const memory::desc& md) {
  thread_local ScratchBuf buf;
  const size_t need = md.get_size();
  if (need > buf.n) {
    std::free(buf.p);
    const size_t rounded = (need + 4095) / 4096 * 4096;
    buf.p = std::aligned_alloc(4096, rounded);
    if (!buf.p) {
      buf.n = 0;
      throw RuntimeError("dnnl scratchpad: allocation of " + std::to_string(need) + " bytes failed");
    }
    buf.n = rounded;
  }
  return memory(md, engine(), buf.p);
}

void execute(const dnnl::primitive& prim, const std::unordered_map<int, memory>& args) {
  prim.execute(stream(), args);
}

namespace {
struct Workspace {
  void* p[kWorkspaceSlots] = {};
  size_t n[kWorkspaceSlots] = {};
  ~Workspace() {
    for (auto* q : p) std::free(q);
  }
};
}  // namespace

void* workspace(int slot, size_t bytes) {
  thread_local Workspace ws;
  if (slot < 0 || slot >= kWorkspaceSlots) throw RuntimeError("dnnl_util::workspace: bad slot " + std::to_string(slot));
  if (bytes > ws.n[slot]) {
    std::free(ws.p[slot]);
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    ws.p[slot] = std::aligned_alloc(64, rounded);
    if (!ws.p[slot]) {
      ws.n[slot] = 0;
      throw RuntimeError("dnnl workspace: allocation of " + std::to_string(bytes) + " bytes failed");
    }
    ws.n[slot] = rounded;
  }
  return ws.p[slot];
}

void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// ---- Staged -------------------------------------------------------------------------------------

void Staged::init(const memory::desc& user, const memory::desc& want, int slot) {
  *this = Staged{};
  user_ = user;
  want_ = want;
  reorder_ = !(user == want);
  slot_ = slot;
}

memory Staged::buffer() {
  if (slot_ >= 0) return memory(want_, engine(), workspace(slot_, want_.get_size()));
  if (!buf_) buf_ = memory(want_, engine());  // library-allocated, lives with the cache
  return buf_;
}

memory Staged::in(const void* ptr) {
  if (!reorder_) return memory(user_, engine(), const_cast<void*>(ptr));
  memory src(user_, engine(), const_cast<void*>(ptr));
  memory dst = buffer();
  if (!to_want_) to_want_ = dnnl::reorder(src, dst);
  to_want_.execute(stream(), src, dst);
  return dst;
}

memory Staged::out(void* ptr, bool accumulate) {
  pending_ = ptr;
  pending_acc_ = accumulate;
  pending_active_ = true;
  if (!reorder_ && !accumulate) return memory(user_, engine(), ptr);
  cur_ = buffer();
  return cur_;
}

void Staged::finish() {
  if (!pending_active_) throw RuntimeError("dnnl_util::Staged::finish without out()");
  pending_active_ = false;
  if (!reorder_ && !pending_acc_) return;
  memory dst(user_, engine(), pending_);
  if (!reorder_) {  // same layout, accumulate: plain add
    add_into(static_cast<float*>(pending_), static_cast<const float*>(cur_.get_data_handle()),
             user_.get_size() / sizeof(float));
    return;
  }
  if (pending_acc_) {
    if (!to_user_acc_) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      dnnl::primitive_attr attr;
      attr.set_post_ops(po);
      to_user_acc_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), want_, engine(), user_, attr));
    }
    to_user_acc_.execute(stream(), cur_, dst);
  } else {
    if (!to_user_) to_user_ = dnnl::reorder(cur_, dst);
    to_user_.execute(stream(), cur_, dst);
  }
}

}  // namespace ht::dnnl_util
