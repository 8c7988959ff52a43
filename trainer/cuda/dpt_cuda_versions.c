/* dpt_cuda_versions: see dpt_cuda_versions.h. */
#define _GNU_SOURCE
#include "dpt_cuda_versions.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

void dpt_cuda_versions_cudnn(long v, char *buf, size_t len)
{
  if (v <= 0) snprintf(buf, len, "?");
  else snprintf(buf, len, "%ld.%ld.%ld", v / 10000, v / 100 % 100, v % 100);
}

/* NVRTC through dlopen: cuDNN loads it itself (runtime fusion), so dpt does not link it; the
 * sonames of CUDA 13 and 12, then the unversioned name. */
static void nvrtc(struct dpt_cuda_versions *v)
{
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  typedef int (*ver_fn)(int *, int *);
  v->nvrtc_major = v->nvrtc_minor = -1;
  snprintf(v->nvrtc_why, sizeof v->nvrtc_why, "libnvrtc.so.13 / .12 not found by dlopen");
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *h = dlopen(names[i], RTLD_LAZY | RTLD_LOCAL);
    if (!h) continue;
    ver_fn f = (ver_fn)dlsym(h, "nvrtcVersion");
    int a = -1, b = -1;
    if (f && f(&a, &b) == 0) {
      v->nvrtc_major = a, v->nvrtc_minor = b;
      v->nvrtc_why[0] = '\0';
    } else {
      snprintf(v->nvrtc_why, sizeof v->nvrtc_why, "%s has no working nvrtcVersion", names[i]);
    }
    dlclose(h);
    return;
  }
}

void dpt_cuda_versions_get(int dev, struct dpt_cuda_versions *v)
{
  memset(v, 0, sizeof *v);
  struct cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) {
    snprintf(v->device, sizeof v->device, "%.95s", p.name);
    v->sm_major = p.major, v->sm_minor = p.minor;
  } else {
    cudaGetLastError(); /* not sticky: leave no error for the next call */
  }
  if (cudaDriverGetVersion(&v->driver) != cudaSuccess) v->driver = 0;
  if (cudaRuntimeGetVersion(&v->runtime) != cudaSuccess) v->runtime = 0;
  v->cudnn = (long)cudnnGetVersion();
  v->cudnn_built = (long)CUDNN_VERSION;
  int a = 0, b = 0, c = 0;
  if (cublasGetProperty(MAJOR_VERSION, &a) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &b) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &c) == CUBLAS_STATUS_SUCCESS)
    v->cublas = a * 10000 + b * 100 + c;
  nvrtc(v);
}

int dpt_cuda_versions_str(const struct dpt_cuda_versions *v, char *buf, size_t len)
{
  char dn[48], db[48], nv[224];
  dpt_cuda_versions_cudnn(v->cudnn, dn, sizeof dn);
  dpt_cuda_versions_cudnn(v->cudnn_built, db, sizeof db);
  if (v->nvrtc_major >= 0) snprintf(nv, sizeof nv, "NVRTC %d.%d", v->nvrtc_major, v->nvrtc_minor);
  else snprintf(nv, sizeof nv, "NVRTC not loadable (%s: cuDNN's runtime-fusion engines are off)", v->nvrtc_why);
  return snprintf(buf, len, "%s (sm %d.%d), driver %d.%d, runtime %d.%d, cuDNN %s%s%s%s, cuBLAS %d.%d.%d, %s",
                  v->device[0] ? v->device : "device ?", v->sm_major, v->sm_minor, v->driver / 1000,
                  v->driver % 1000 / 10, v->runtime / 1000, v->runtime % 1000 / 10, dn,
                  v->cudnn != v->cudnn_built ? " (built with " : "", v->cudnn != v->cudnn_built ? db : "",
                  v->cudnn != v->cudnn_built ? ")" : "", v->cublas / 10000, v->cublas / 100 % 100, v->cublas % 100,
                  nv);
}
