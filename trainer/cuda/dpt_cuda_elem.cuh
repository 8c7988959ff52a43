// dpt_cuda_elem.cuh — typed element access for the backend's own kernels (dpt_cuda_kernels.cu,
// dpt_cuda_dbn.cu): ld(p, i) reads element i of an fp32 / fp16 / bf16 buffer as a float, st(p, i, v)
// writes v rounded to nearest even.
#ifndef DPT_CUDA_ELEM_CUH
#define DPT_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stddef.h>

template <typename T> __device__ static inline float ld(const T *p, size_t i);
template <> __device__ inline float ld<float>(const float *p, size_t i) { return p[i]; }
template <> __device__ inline float ld<__half>(const __half *p, size_t i) { return __half2float(p[i]); }
template <> __device__ inline float ld<__nv_bfloat16>(const __nv_bfloat16 *p, size_t i)
{
  return __bfloat162float(p[i]);
}
template <typename T> __device__ static inline void st(T *p, size_t i, float v);
template <> __device__ inline void st<float>(float *p, size_t i, float v) { p[i] = v; }
template <> __device__ inline void st<__half>(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
template <> __device__ inline void st<__nv_bfloat16>(__nv_bfloat16 *p, size_t i, float v)
{
  p[i] = __float2bfloat16_rn(v);
}

#endif // DPT_CUDA_ELEM_CUH
