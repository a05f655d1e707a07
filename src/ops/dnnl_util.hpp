#pragma once
// Shared oneDNN (2.6, OpenMP runtime) plumbing for the CPU ops:
//  - one CPU engine per process (primitives and memory built on one thread can run on another) and
//    one in-order stream per thread (thread_local), both created once on first use;
//  - memory descriptors and zero-copy memory objects over ht::Tensor data (f32, plain row-major);
//  - a per-thread scratchpad shared by every primitive built with scratchpad_attr(), so primitives
//    cached per layer do not each hold their own scratch buffers;
//  - Staged: a cached pair of reorders between a user tensor in plain layout (e.g. NCHW) and the
//    layout a primitive picked for format_tag::any (e.g. nChw16c), with optional accumulation
//    (dst += result) on the way back.
// Threads: oneDNN parallelises each primitive with OpenMP over omp_get_max_threads() threads.
// Source: oneDNN 2.6 C++ API (dnnl.hpp): engine, stream, memory, reorder, primitive_attr.
#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "base/tensor.hpp"

namespace ht::dnnl_util {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

/// The process's CPU engine (index 0), shared by all threads.
dnnl::engine& engine();
/// The calling thread's in-order stream on engine().
dnnl::stream& stream();

/// Dims from a tensor shape.
memory::dims to_dims(const std::vector<int64_t>& shape);
/// Plain row-major tag for ndims 1..5 (a, ab, abc, abcd, abcde). Throws RuntimeError otherwise.
tag plain_tag(int ndims);
/// The oneDNN data type of a tensor dtype (f32, bf16, f16). Throws RuntimeError for others.
dt dnnl_dtype(DType t);
/// Descriptor of an activation of dtype t with dims (4-D: NCHW for float32, NHWC for bf16/fp16,
/// the memory orders of src/ops/op.hpp; other ranks plain row-major).
memory::desc act_desc(const memory::dims& dims, DType t);
/// f32 descriptor with the given dims and tag (tag::any lets a primitive choose).
memory::desc f32_desc(const memory::dims& dims, tag t);
/// f32 plain row-major descriptor of dims.
memory::desc plain_desc(const memory::dims& dims);

/// Zero-copy memory over a tensor's (or any host pointer's) data with descriptor md.
memory wrap(const memory::desc& md, const Tensor& t);
memory wrap(const memory::desc& md, void* ptr);

/// Attributes for every primitive built by the CPU ops: user-managed scratchpad (see scratchpad()).
dnnl::primitive_attr scratchpad_attr();
/// The calling thread's scratchpad, grown to at least md's size, as memory of descriptor md. Valid
/// until the next call on this thread (it may reallocate); pass it as DNNL_ARG_SCRATCHPAD.
memory scratchpad(const memory::desc& md);

/// Executes prim with args on stream() (synchronous for the CPU engine with OpenMP).
void execute(const dnnl::primitive& prim, const std::unordered_map<int, memory>& args);

/// dst[i] += src[i] for i < n (float), vectorised. Used for accumulate=true gradients.
void add_into(float* dst, const float* src, size_t n);

/// Number of per-thread workspace slots (see workspace()).
constexpr int kWorkspaceSlots = 8;
/// The calling thread's workspace buffer number `slot` (0..kWorkspaceSlots-1), grown to at least
/// `bytes` (64-byte aligned). Valid until the next call with the same slot on this thread. For
/// temporaries that live only within one op call (e.g. reordered copies), so their memory is the
/// maximum over layers instead of the sum.
void* workspace(int slot, size_t bytes);

/// A user tensor in plain layout staged for a primitive that wants layout `want`.
/// Build once per shape (init) and keep in the op's cache; per call, use in() for inputs, or
/// out() + finish() for outputs. When user and want descriptors are equal, no copy is made
/// (except for accumulating outputs, which go through an internal buffer and add_into).
/// The internal buffer is owned by the Staged object (slot -1) or is the thread's workspace(slot):
/// then it only lives within the op call, and two Staged objects used in one call need different
/// slots.
class Staged {
 public:
  /// user: the tensor's plain descriptor; want: the primitive's descriptor (query from its pd).
  void init(const memory::desc& user, const memory::desc& want, int slot = -1);
  bool reorders() const { return reorder_; }
  const memory::desc& want_desc() const { return want_; }

  /// Input: reorders ptr's data into the internal buffer when layouts differ; returns the memory
  /// to pass to the primitive (the internal buffer, or ptr wrapped).
  memory in(const void* ptr);
  /// Output: returns the memory the primitive should write. With accumulate, the result is added
  /// to the user's data by finish() instead of overwriting it.
  memory out(void* ptr, bool accumulate);
  /// Completes out(): reorders (and/or accumulates) the internal buffer into the user's data.
  void finish();

 private:
  memory buffer();
  memory::desc user_, want_;
  bool reorder_ = false;
  int slot_ = -1;
  memory buf_;                          // owned internal buffer in `want` layout (lazy, slot -1)
  memory cur_;                          // the buffer used by the pending out()
  dnnl::reorder to_want_, to_user_, to_user_acc_;  // lazily created
  void* pending_ = nullptr;             // user pointer awaiting finish()
  bool pending_acc_ = false;
  bool pending_active_ = false;
};

}  // namespace ht::dnnl_util
