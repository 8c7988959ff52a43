// dpt_comm_nccl_kernels.cu — fp32 <-> fp16 conversion on the GPU for the
// "nccl" communicator's fp16 wire format (round to nearest even, like
// dpt_fp16.c on the CPU).
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>

__global__ static void f32_to_f16(const float *in, __half *out, size_t n)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2half_rn(in[i]);
}

__global__ static void f16_to_f32(const __half *in, float *out, size_t n)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = __half2float(in[i]);
}

static unsigned blocks_for(size_t n)
{
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 4096 ? 4096 : (b ? b : 1));
}

extern "C" int dpt_nccl_f32_to_f16(const float *in, void *out, size_t n, cudaStream_t s)
{
  f32_to_f16<<<blocks_for(n), 256, 0, s>>>(in, (__half *)out, n);
  return (int)cudaGetLastError();
}

extern "C" int dpt_nccl_f16_to_f32(const void *in, float *out, size_t n, cudaStream_t s)
{
  f16_to_f32<<<blocks_for(n), 256, 0, s>>>((const __half *)in, out, n);
  return (int)cudaGetLastError();
}
