/* test_gpu_kprof: the CUPTI recorder (trainer/cuda/dpt_cupti.c) feeding the per-step breakdown
 * (dpt_kprof.c) on a device.  SKIPPED (77) without a device or when CUPTI refuses (another
 * profiler attached, profiling restricted to admins).
 *
 * Three recorded steps, each: an upload (memcpy), a memset, one fused-optimizer kernel
 * (dpt_cuda_optim.cu) and, on a second stream, another; one more optimizer kernel launched
 * between the steps (outside them).  Expected: 3 steps, 2 kernels each, both in class
 * "optimizer" (bench/gpu/kernel-classes.tsv), 2 copies each, span >= busy > 0, the kernel
 * between the steps in none of them, the step ids those given, records written as TSV. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cuda_optim.h"
#include "dpt_cupti.h"
#include "dpt_kprof.h"
#include "dpt_optim_layout.h"

#include "cu_check.h"
#include "dpt_check.h"

int main(void)
{
  device_or_skip("test_gpu_kprof");
  /* a flat 1M-parameter "model": one segment without copies */
  const size_t n = (size_t)1 << 20;
  struct dpt_optim_layout lay;
  memset(&lay, 0, sizeof lay);
  struct dpt_optim_seg seg = {0, n, 0, DPT_OSEG_NONE, -1, 0, 0, 0, 0};
  lay.n_params = n, lay.dtype = DPT_OPT_F32, lay.n_seg = 1, lay.seg = &seg;
  size_t nch = n / 4096;
  struct dpt_optim_chunk *ch = malloc(nch * sizeof *ch);
  for (size_t i = 0; i < nch; i++) ch[i] = (struct dpt_optim_chunk){i * 4096, 4096, 0};
  lay.n_chunk = (int)nch, lay.chunk = ch;
  float *w, *v, *g, *host;
  cudaStream_t s1, s2;
  struct dpt_cuda_optim_tables t;
  CU(cudaStreamCreate(&s1));
  CU(cudaStreamCreate(&s2));
  CU(cudaMalloc((void **)&w, n * 4));
  CU(cudaMalloc((void **)&v, n * 4));
  CU(cudaMalloc((void **)&g, n * 4));
  CU(cudaMallocHost((void **)&host, n * 4));
  memset(host, 0, n * 4);
  CU((cudaError_t)dpt_cuda_optim_upload(&lay, &t, s1));
  struct dpt_cuda_optim_args a = {w, v, g, NULL, NULL, 0.1f, NULL, 0.9f, 0.0f, 0, NULL, 0};
  struct dpt_cupti *rec;
  struct dpt_err err;
  int rc = dpt_cupti_start(&rec, &err);
  if (rc == DPT_E_UNSUPPORTED) {
    printf("SKIPPED test_gpu_kprof: %s\n", err.msg);
    return 77;
  }
  CHECK(rc == 0, "start: %s", err.msg);
  if (rc) return 1;
  for (int step = 10; step < 13; step++) {
    CHECK(!dpt_cupti_step_begin(rec, step, &err), "begin: %s", err.msg);
    CU(cudaMemcpyAsync(g, host, n * 4, cudaMemcpyHostToDevice, s1));
    CU(cudaMemsetAsync(v, 0, n * 4, s1));
    CU((cudaError_t)dpt_cuda_optim_step(&t, &a, s1));
    CU((cudaError_t)dpt_cuda_optim_step(&t, &a, s2));
    CHECK(!dpt_cupti_step_end(rec, &err), "end: %s", err.msg);
    CU((cudaError_t)dpt_cuda_optim_step(&t, &a, s1)); /* between the steps */
  }
  CU(cudaDeviceSynchronize());
  struct dpt_krec *r;
  size_t nr, dropped;
  rc = dpt_cupti_stop(rec, &r, &nr, &dropped, &err);
  CHECK(rc == 0 && dropped == 0, "stop: %s, %zu dropped", rc ? err.msg : "", dropped);
  struct dpt_kclasses k;
  struct dpt_kbreakdown b;
  CHECK(!dpt_kclasses_builtin(&k, &err), "%s", err.msg);
  rc = dpt_kprof_breakdown(&k, r, nr, &b, &err);
  CHECK(rc == 0, "breakdown: %s", err.msg);
  if (!rc) {
    int opt = -1, outside = 0;
    for (int c = 0; c < k.n_classes; c++)
      if (!strcmp(k.name[c], "optimizer")) opt = c;
    for (size_t i = 0; i < nr; i++) outside += r[i].step < 0 && r[i].kind == DPT_KREC_KERNEL;
    CHECK(b.n_steps == 3 && b.step[0].step == 10 && b.step[2].step == 12, "%d steps (first %d)", b.n_steps,
          b.n_steps ? b.step[0].step : -1);
    for (int s = 0; s < b.n_steps; s++)
      CHECK(b.step[s].kernels == 2 && opt >= 0 && b.step[s].class_n[opt] == 2 && b.step[s].copies == 2 &&
                b.step[s].span_ns >= b.step[s].busy_ns && b.step[s].busy_ns > 0,
            "step %d: %g kernels (%g optimizer), %g copies, span %g busy %g", b.step[s].step, b.step[s].kernels,
            opt >= 0 ? b.step[s].class_n[opt] : -1.0, b.step[s].copies, b.step[s].span_ns, b.step[s].busy_ns);
    CHECK(outside == 3, "%d kernels outside the steps (3 launched between them)", outside);
    dpt_kprof_write_json(&b, "test_gpu_kprof", stdout, &err);
    dpt_kprof_free(&b);
  }
  dpt_kclasses_free(&k);
  dpt_cupti_free(rec, r, nr);
  dpt_cuda_optim_tables_free(&t);
  cudaFree(w), cudaFree(v), cudaFree(g), cudaFreeHost(host);
  free(ch);
  if (!failures) printf("test_gpu_kprof: all checks passed\n");
  return failures != 0;
}
