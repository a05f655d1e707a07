#pragma once
// HT_HD marks element-wise math written once for both devices: __host__ __device__ under nvcc,
// plain inline functions in the CPU build, so CPU tests cover the arithmetic the GPU runs.
#if defined(__CUDACC__)
#define HT_HD __host__ __device__ __forceinline__
#else
#define HT_HD inline
#endif
