/* dpt_cuda_versions — what the cuda backend runs with (issue 22): the device, the driver, the CUDA
 * runtime, cuDNN at run time and the headers it was built with, cuBLAS, NVRTC (cuDNN's
 * runtime-fusion engines compile with it: without it the fused step finds fewer engines).
 * dpt-train prints them on its start line and writes them into the job report.
 *
 *   struct dpt_cuda_versions v;
 *   dpt_cuda_versions_get(0, &v);
 *   char line[256]; dpt_cuda_versions_str(&v, line, sizeof line);
 *     -> "NVIDIA H200 (sm 9.0), driver 13.0, runtime 13.0, cuDNN 9.14.0 (built with 9.19.0),
 *        cuBLAS <major.minor.patch>, NVRTC 13.0" (the first GPU visit's machine) */
#ifndef DPT_CUDA_VERSIONS_H
#define DPT_CUDA_VERSIONS_H

#include <stddef.h>

struct dpt_cuda_versions {
  char device[96];   /* cudaGetDeviceProperties' name; "" when the device did not answer */
  int sm_major, sm_minor;
  int driver;        /* cudaDriverGetVersion, e.g. 13000; 0: unknown */
  int runtime;       /* cudaRuntimeGetVersion */
  long cudnn;        /* cudnnGetVersion() at run time, e.g. 91400 */
  long cudnn_built;  /* CUDNN_VERSION of the headers dpt was built with */
  int cublas;        /* cublasGetProperty major*10000 + minor*100 + patch; 0: unknown */
  int nvrtc_major, nvrtc_minor; /* nvrtcVersion through dlopen; -1: libnvrtc not loadable */
  char nvrtc_why[96];           /* why not, when -1 */
};

/* Fills v for CUDA device dev; never fails (unknown fields stay 0 / ""). */
void dpt_cuda_versions_get(int dev, struct dpt_cuda_versions *v);
/* One line as above; returns what snprintf returns. */
int dpt_cuda_versions_str(const struct dpt_cuda_versions *v, char *buf, size_t len);
/* "9.14.0" from 91400 (cuDNN 9's encoding: major*10000 + minor*100 + patch). */
void dpt_cuda_versions_cudnn(long v, char *buf, size_t len);

#endif
