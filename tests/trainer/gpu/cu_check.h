/* cu_check.h — the CUDA runtime checks of the GPU tests that drive kernels and cuDNN graphs
 * directly (no backend): CU(call) exits 1 naming the call on any CUDA error; device_or_skip
 * exits 77 (ctest: SKIPPED) with CUDA's reason when no device works. */
#ifndef CU_CHECK_H
#define CU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define CU(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

static inline void device_or_skip(const char *test)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1 || cudaSetDevice(0) != cudaSuccess || cudaFree(0) != cudaSuccess) {
    printf("SKIPPED %s: no usable CUDA device (%s)\n", test, e != cudaSuccess ? cudaGetErrorString(e) : "none");
    fflush(stdout);
    exit(77);
  }
}

#endif /* CU_CHECK_H */
