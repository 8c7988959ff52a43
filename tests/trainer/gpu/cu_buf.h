/* cu_buf.h — host values in a device buffer of the storage type and back, for the GPU tests that
 * drive kernels and cuDNN graphs directly: types 0 fp32, 1 fp16, 2 bf16 (DPT_DT_* = DPT_CG_*),
 * rounded to nearest even (dpt_fp16_from_float, dpt_optim_bf16).  as_type(v, t) is v as type t
 * holds it; put copies n host floats into d as type t; get synchronises the device and returns
 * n floats read from d (malloc'd).  CUDA errors exit through CU (cu_check.h). */
#ifndef CU_BUF_H
#define CU_BUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cu_check.h"
#include "dpt_fp16.h"
#include "dpt_optim_layout.h"

static inline float cu_bf16_to_float(uint16_t b)
{
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float as_type(float v, int t)
{
  return t == 1 ? dpt_fp16_to_float(dpt_fp16_from_float(v)) : t == 2 ? cu_bf16_to_float(dpt_optim_bf16(v)) : v;
}

static inline void put(void *d, const float *h, size_t n, int t)
{
  if (t == 0) {
    CU(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    return;
  }
  uint16_t *b = malloc(n * 2 + 2);
  if (!b) exit(1);
  for (size_t i = 0; i < n; i++) b[i] = t == 1 ? dpt_fp16_from_float(h[i]) : dpt_optim_bf16(h[i]);
  CU(cudaMemcpy(d, b, n * 2, cudaMemcpyHostToDevice));
  free(b);
}

static inline float *get(const void *d, size_t n, int t)
{
  float *h = malloc(n * sizeof *h + 4);
  if (!h) exit(1);
  CU(cudaDeviceSynchronize());
  if (t == 0) {
    CU(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    return h;
  }
  uint16_t *b = malloc(n * 2 + 2);
  if (!b) exit(1);
  CU(cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) h[i] = t == 1 ? dpt_fp16_to_float(b[i]) : cu_bf16_to_float(b[i]);
  free(b);
  return h;
}

#endif /* CU_BUF_H */
