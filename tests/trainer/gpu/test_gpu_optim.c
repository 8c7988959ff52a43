/* test_gpu_optim: the fused optimizer kernel (trainer/cuda/dpt_cuda_optim.cu) against its
 * host reference (dpt_optim_ref_step, itself equal to dpt_sgd_step: trainer.test_optim_layout),
 * bit for bit: ResNet-50 (224 px) and the width-1/8 small-stem network at fp32/tf32 (fp32
 * copies), mixed (fp16) and bf16, plain and Nesterov, 3 steps with a weight-decay mask
 * without BN/bias, chunks of 4096 and of an odd 1000; the master weights, the momentum and
 * the whole weight-copy region (padding channels stay zero, the weight-gradient buffer
 * untouched).  The overflow flag set on the device skips everything; the learning rate read
 * from device memory (a captured graph's way) gives the host's result for that rate.  The
 * copy-only launch (what the cuda backend runs after the host puts parameters in the slab:
 * start-up, resume, broadcast) writes the copies of new weights equal to dpt_optim_ref_copies
 * and leaves the weights and the momentum alone.
 * LARS (issue 23, dpt_cuda_lars_step) against the host's dpt_lars_step, ResNet-50 at fp32 and bf16,
 * plain and Nesterov, 3 steps (the third at a rate read from device memory): the same rule with
 * the trust ratios' norms summed in another order (double), so within a few units in the last
 * place of each value, not bit for bit (bounds below); its weight copies equal the copies of its
 * own new weights (dpt_optim_ref_copies); the overflow flag skips it.  RMSprop warm-up
 * (dpt_cuda_rmsw_step) against dpt_rmsw_step bit for bit (both round every operation the same way:
 * no FMA, IEEE square root and division), 4 steps across the mix, at fp32 and fp16 copies.
 * SKIPPED (77) without a usable CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cuda_optim.h"
#include "dpt_cuda_plan.h"
#include "dpt_model.h"
#include "dpt_optim.h"
#include "dpt_optim_layout.h"

#include "cu_check.h"
#include "dpt_check.h"

static float frand(unsigned *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* What every case sets up: the plan's weight-copy region, the fused optimizer's layout (chunks of
 * `chunk`, 0: the default) and its tables on the device, the device buffers (weights from w,
 * momentum, second moment, copies and the skip flag zeroed; the decay mask from mask, none when
 * NULL), and the stream. */
struct fixture {
  struct dpt_cuda_plan plan;
  struct dpt_optim_layout lay;
  struct dpt_cuda_optim_tables tab;
  int *cs;                    /* [n_layers] stored input channels */
  size_t n, cb;               /* parameters, weight-copy bytes */
  cudaStream_t s;
  float *dw, *dv, *dg, *dm;   /* device [n]: weights, momentum, gradient, second moment */
  float *dlr;                 /* device [1]: a rate read by the kernel */
  unsigned char *dmask;       /* device [n] or NULL */
  void *dcopy;                /* device [cb] */
  int *dskip;                 /* device [1]: the overflow flag */
};

static void fixture_init(struct fixture *f, const struct dpt_model *m, enum dpt_cuda_precision prec, size_t chunk,
                         const float *w, const unsigned char *mask, const char *what)
{
  struct dpt_err err;
  if (dpt_cuda_plan_build(m, 1, prec, 0, &f->plan, &err)) {
    fprintf(stderr, "%s: plan: %s\n", what, err.msg);
    exit(1);
  }
  f->cs = malloc((size_t)m->n_layers * sizeof *f->cs);
  if (!f->cs) exit(1);
  for (int l = 0; l < m->n_layers; l++) f->cs[l] = f->plan.t[m->layers[l].in[0]].c_stored;
  int dt = prec == DPT_CUDA_MIXED ? DPT_OPT_F16 : prec == DPT_CUDA_BF16 ? DPT_OPT_BF16 : DPT_OPT_F32;
  if (dpt_optim_layout_build(m, f->plan.wcopy_off, f->cs, dt, chunk, &f->lay, &err)) {
    fprintf(stderr, "%s: layout: %s\n", what, err.msg);
    exit(1);
  }
  f->n = m->n_params, f->cb = f->plan.weight_copy_bytes;
  size_t n = f->n;
  f->dmask = NULL;
  CU(cudaStreamCreate(&f->s));
  CU(cudaMalloc((void **)&f->dw, n * 4));
  CU(cudaMalloc((void **)&f->dv, n * 4));
  CU(cudaMalloc((void **)&f->dg, n * 4));
  CU(cudaMalloc((void **)&f->dm, n * 4));
  CU(cudaMalloc(&f->dcopy, f->cb));
  CU(cudaMalloc((void **)&f->dlr, 4));
  CU(cudaMalloc((void **)&f->dskip, 4));
  if (mask) {
    CU(cudaMalloc((void **)&f->dmask, n));
    CU(cudaMemcpy(f->dmask, mask, n, cudaMemcpyHostToDevice));
  }
  CU(cudaMemcpy(f->dw, w, n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemset(f->dv, 0, n * 4));
  CU(cudaMemset(f->dm, 0, n * 4));
  CU(cudaMemset(f->dcopy, 0, f->cb));
  CU(cudaMemset(f->dskip, 0, 4));
  CU((cudaError_t)dpt_cuda_optim_upload(&f->lay, &f->tab, f->s));
}

static void fixture_free(struct fixture *f)
{
  dpt_cuda_optim_tables_free(&f->tab);
  cudaFree(f->dw), cudaFree(f->dv), cudaFree(f->dg), cudaFree(f->dm), cudaFree(f->dmask), cudaFree(f->dcopy);
  cudaFree(f->dlr), cudaFree(f->dskip);
  cudaStreamDestroy(f->s);
  free(f->cs);
  dpt_optim_layout_free(&f->lay);
  dpt_cuda_plan_free(&f->plan);
}

/* The step's rate: the launch argument, or (from_device: a captured graph's way) read from device
 * memory, with the argument a decoy. */
static void set_rate(struct dpt_cuda_optim_args *a, float *dlr, float lr, int from_device)
{
  a->lr_dev = NULL;
  a->lr = lr;
  if (from_device) {
    CU(cudaMemcpy(dlr, &lr, 4, cudaMemcpyHostToDevice));
    a->lr_dev = dlr;
    a->lr = -1.0f;
  }
}

static void run(const struct dpt_model *m, const char *mname, enum dpt_cuda_precision prec, int nesterov, size_t chunk)
{
  struct fixture f;
  char what[96];
  snprintf(what, sizeof what, "%s %s%s chunk %zu", mname, dpt_cuda_precision_name(prec), nesterov ? " nesterov" : "", chunk);
  size_t n = m->n_params;
  float *w = malloc(n * 4), *v = calloc(n, 4), *g = malloc(n * 4), *hw = malloc(n * 4), *hv = malloc(n * 4);
  unsigned char *mask = malloc(n);
  if (!w || !v || !g || !hw || !hv || !mask) exit(1);
  dpt_model_decay_mask(m, 1, mask);
  unsigned seed = 11;
  for (size_t i = 0; i < n; i++) w[i] = 0.1f * frand(&seed);
  fixture_init(&f, m, prec, chunk, w, mask, what);
  size_t cb = f.cb;
  cudaStream_t s = f.s;
  float *dw = f.dw, *dv = f.dv, *dlr = f.dlr;
  int *dskip = f.dskip;
  void *dcopy = f.dcopy;
  unsigned char *copy = calloc(cb, 1), *hcopy = malloc(cb);
  if (!copy || !hcopy) exit(1);
  struct dpt_cuda_optim_args a = {dw, dv, f.dg, f.dmask, dcopy, 0.1f, NULL, 0.9f, 5e-5f, nesterov, dskip, 0};
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < n; i++) g[i] = 0.01f * frand(&seed);
    CU(cudaMemcpy(f.dg, g, n * 4, cudaMemcpyHostToDevice));
    float lr = step == 2 ? 0.05f : 0.1f;
    set_rate(&a, dlr, lr, step == 2);
    CU((cudaError_t)dpt_cuda_optim_step(&f.tab, &a, s));
    dpt_optim_ref_step(&f.lay, lr, NULL, 0.9f, 5e-5f, nesterov, mask, w, v, g, copy, NULL);
  }
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hv, dv, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hcopy, dcopy, cb, cudaMemcpyDeviceToHost));
  size_t dw_bad = 0, dv_bad = 0, dc_bad = 0;
  for (size_t i = 0; i < n; i++) dw_bad += memcmp(&hw[i], &w[i], 4) != 0, dv_bad += memcmp(&hv[i], &v[i], 4) != 0;
  for (size_t i = 0; i < cb; i++) dc_bad += hcopy[i] != copy[i];
  CHECK(!dw_bad && !dv_bad && !dc_bad, "%s: %zu weights, %zu momenta, %zu copy bytes differ from the host reference",
        what, dw_bad, dv_bad, dc_bad);
  /* overflow: the flag on the device skips the whole step */
  int one = 1;
  CU(cudaMemcpy(dskip, &one, 4, cudaMemcpyHostToDevice));
  set_rate(&a, dlr, 0.1f, 0);
  CU((cudaError_t)dpt_cuda_optim_step(&f.tab, &a, s));
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hcopy, dcopy, cb, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(hw, w, n * 4) && !memcmp(hcopy, copy, cb), "%s: the skipped step changed weights or copies", what);
  /* copy only: new weights from the host, their copies written, nothing else touched */
  for (size_t i = 0; i < n; i++) w[i] = 0.2f * frand(&seed);
  CU(cudaMemcpy(dw, w, n * 4, cudaMemcpyHostToDevice));
  CU(cudaMemset(dskip, 0, 4));
  a.copy_only = 1;
  CU((cudaError_t)dpt_cuda_optim_step(&f.tab, &a, s));
  a.copy_only = 0;
  dpt_optim_ref_copies(&f.lay, w, copy);
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hv, dv, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hcopy, dcopy, cb, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(hw, w, n * 4) && !memcmp(hv, v, n * 4) && !memcmp(hcopy, copy, cb),
        "%s: the copy-only launch differs from dpt_optim_ref_copies (or touched weights / momentum)", what);
  printf("%s: %d chunks, bit-identical to the host reference; skip honoured; copy-only = reference\n", what,
         f.lay.n_chunk);
  fixture_free(&f);
  free(w), free(v), free(g), free(hw), free(hv), free(mask), free(copy), free(hcopy);
}

/* |a - b| <= k units of 2^-24 relative to |b| (at least the smallest normal's) */
static int ulps_close(float a, float b, double k)
{
  double d = fabs((double)a - (double)b), m = fabs((double)b);
  return d <= k * (m > 1e-30 ? m : 1e-30) / (1 << 24);
}

static void run_lars(const struct dpt_model *m, enum dpt_cuda_precision prec, int nesterov)
{
  struct fixture f;
  struct dpt_optim_lars ll;
  struct dpt_cuda_lars_tables ltab;
  struct dpt_sgd hs;
  struct dpt_lars hl;
  struct dpt_err err;
  char what[96];
  snprintf(what, sizeof what, "LARS resnet50 %s%s", dpt_cuda_precision_name(prec), nesterov ? " nesterov" : "");
  size_t n = m->n_params;
  int ns = dpt_model_param_segs(m, NULL, 0);
  struct dpt_param_seg *seg = malloc((size_t)ns * sizeof *seg);
  float *w = malloc(n * 4), *g = malloc(n * 4), *hw = malloc(n * 4), *hv = malloc(n * 4), *hr = malloc((size_t)ns * 4);
  if (!seg || !w || !g || !hw || !hv || !hr) exit(1);
  dpt_model_param_segs(m, seg, ns);
  unsigned seed = 23;
  for (size_t i = 0; i < n; i++) w[i] = 0.1f * frand(&seed);
  fixture_init(&f, m, prec, 0, w, NULL, what);
  const float eta = 0.001f, eps = 1e-7f, mom = 0.9f, wd = 5e-5f;
  if (dpt_optim_lars_build(&f.lay, seg, ns, 0, &ll, &err) || dpt_sgd_init(&hs, n, mom, wd, NULL, &err) ||
      dpt_lars_init(&hl, n, seg, ns, eta, eps, &err)) {
    fprintf(stderr, "%s: %s\n", what, err.msg);
    exit(1);
  }
  hs.nesterov = nesterov;
  size_t cb = f.cb;
  cudaStream_t s = f.s;
  float *dw = f.dw, *dv = f.dv, *dlr = f.dlr;
  int *dskip = f.dskip;
  unsigned char *copy = calloc(cb, 1), *hcopy = malloc(cb);
  if (!copy || !hcopy) exit(1);
  CU((cudaError_t)dpt_cuda_lars_upload(&ll, eta, eps, &ltab, s));
  struct dpt_cuda_optim_args a = {dw, dv, f.dg, NULL, f.dcopy, 0.1f, NULL, mom, wd, nesterov, dskip, 0};
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < n; i++) g[i] = 0.01f * frand(&seed);
    if (step == 0) /* a tensor with a zero gradient: trust ratio 1, decay only */
      memset(g + seg[0].off, 0, seg[0].len * 4);
    CU(cudaMemcpy(f.dg, g, n * 4, cudaMemcpyHostToDevice));
    float lr = step == 2 ? 2.5f : 5.0f;
    set_rate(&a, dlr, lr, step == 2);
    CU((cudaError_t)dpt_cuda_lars_step(&f.tab, &ltab, &a, s));
    dpt_lars_step(&hl, &hs, lr, w, g);
  }
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hv, dv, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hr, ltab.ratio, (size_t)ns * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hcopy, f.dcopy, cb, cudaMemcpyDeviceToHost));
  /* Bounds: the host and the kernel round the same float operations (no FMA on either side);
   * only the norms' summation order differs (double, relative difference ~1e-15), which moves
   * a trust ratio by at most 1 unit of 2^-24 after the cast to float.  That changes each step's
   * momentum term by <= 1 unit relative, so after 3 steps: ratios 2 units, momentum 8, weights 8
   * (a weight's increment is far smaller than the weight). */
  size_t bad_w = 0, bad_v = 0, bad_r = 0;
  for (size_t i = 0; i < n; i++) bad_w += !ulps_close(hw[i], w[i], 8), bad_v += !ulps_close(hv[i], hs.velocity[i], 8);
  for (int t = 0; t < ns; t++) bad_r += !ulps_close(hr[t], hl.ratio[t], 2);
  CHECK(!bad_w && !bad_v && !bad_r, "%s: %zu weights, %zu momenta, %zu trust ratios (of %d) off the host's dpt_lars_step",
        what, bad_w, bad_v, bad_r, ns);
  CHECK(hl.ratio[0] != 1.0f || hr[0] != 1.0f, "%s: the first tensor's ratio stayed 1 after nonzero gradients", what);
  /* the copies are those of the kernel's own new weights */
  dpt_optim_ref_copies(&f.lay, hw, copy);
  CHECK(!memcmp(hcopy, copy, cb), "%s: the weight copies differ from dpt_optim_ref_copies of the new weights", what);
  /* overflow: the flag skips all three launches */
  int one = 1;
  CU(cudaMemcpy(dskip, &one, 4, cudaMemcpyHostToDevice));
  set_rate(&a, dlr, 5.0f, 0);
  CU((cudaError_t)dpt_cuda_lars_step(&f.tab, &ltab, &a, s));
  CU(cudaStreamSynchronize(s));
  float *hw2 = malloc(n * 4);
  CU(cudaMemcpy(hw2, dw, n * 4, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(hw2, hw, n * 4), "%s: the skipped step changed weights", what);
  printf("%s: %d tensors in %d chunks, within %s of dpt_lars_step; copies = reference; skip honoured\n", what,
         ll.n_tensor, ll.n_chunk, "8 units in the last place");
  free(hw2);
  dpt_cuda_lars_tables_free(&ltab);
  fixture_free(&f);
  free(w), free(g), free(hw), free(hv), free(hr), free(copy), free(hcopy), free(seg);
  dpt_lars_free(&hl);
  dpt_sgd_free(&hs);
  dpt_optim_lars_free(&ll);
}

static void run_rmsw(const struct dpt_model *m, enum dpt_cuda_precision prec)
{
  struct fixture f;
  struct dpt_sgd hs;
  struct dpt_rmsw hr;
  struct dpt_err err;
  char what[96];
  snprintf(what, sizeof what, "RMSprop warm-up resnet50 %s", dpt_cuda_precision_name(prec));
  size_t n = m->n_params;
  float *w = malloc(n * 4), *g = malloc(n * 4), *mm = calloc(n, 4), *hw = malloc(n * 4), *hv = malloc(n * 4),
        *hm = malloc(n * 4);
  unsigned char *mask = malloc(n);
  if (!w || !g || !mm || !hw || !hv || !hm || !mask) exit(1);
  dpt_model_decay_mask(m, 1, mask);
  const float mom = 0.9f, wd = 5e-5f, rlr = 3e-4f, mu2 = 0.99f, eps = 1e-8f;
  if (dpt_sgd_init(&hs, n, mom, wd, mask, &err) || dpt_rmsw_init(&hr, n, mm, rlr, mu2, eps, 10, 5, &err)) {
    fprintf(stderr, "%s: %s\n", what, err.msg);
    exit(1);
  }
  unsigned seed = 31;
  for (size_t i = 0; i < n; i++) w[i] = 0.1f * frand(&seed);
  fixture_init(&f, m, prec, 0, w, mask, what);
  size_t cb = f.cb;
  cudaStream_t s = f.s;
  float *dw = f.dw, *dv = f.dv, *dm = f.dm;
  int *dskip = f.dskip;
  unsigned char *copy = calloc(cb, 1), *hcopy = malloc(cb);
  if (!copy || !hcopy) exit(1);
  struct dpt_cuda_optim_args a = {dw, dv, f.dg, f.dmask, f.dcopy, 0.1f, NULL, mom, wd, 0, dskip, 0};
  const double ep[4] = {0, 10, 12, 13};
  const float lrs[4] = {0.1f, 0.2f, 0.2f, 0.0f}; /* the last at rate 0: buffers move, weights do not */
  for (int step = 0; step < 4; step++) {
    for (size_t i = 0; i < n; i++) g[i] = 0.01f * frand(&seed);
    CU(cudaMemcpy(f.dg, g, n * 4, cudaMemcpyHostToDevice));
    a.lr = lrs[step];
    float al = (float)dpt_rmsw_alpha_sgd(ep[step], 10, 5), ar = lrs[step] > 0 ? (1.0f - al) * rlr / lrs[step] : 0.0f;
    CU((cudaError_t)dpt_cuda_rmsw_step(&f.tab, &a, dm, al, ar, mu2, eps, s));
    dpt_rmsw_step(&hr, &hs, lrs[step], ep[step], w, g);
  }
  dpt_optim_ref_copies(&f.lay, w, copy);
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hv, dv, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hm, dm, n * 4, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(hcopy, f.dcopy, cb, cudaMemcpyDeviceToHost));
  size_t bw = 0, bv = 0, bm = 0, bc = 0;
  for (size_t i = 0; i < n; i++)
    bw += memcmp(&hw[i], &w[i], 4) != 0, bv += memcmp(&hv[i], &hs.velocity[i], 4) != 0, bm += memcmp(&hm[i], &mm[i], 4) != 0;
  for (size_t i = 0; i < cb; i++) bc += hcopy[i] != copy[i];
  CHECK(!bw && !bv && !bm && !bc, "%s: %zu weights, %zu momenta, %zu second moments, %zu copy bytes differ from "
        "dpt_rmsw_step", what, bw, bv, bm, bc);
  int one = 1;
  CU(cudaMemcpy(dskip, &one, 4, cudaMemcpyHostToDevice));
  a.lr = 0.1f;
  CU((cudaError_t)dpt_cuda_rmsw_step(&f.tab, &a, dm, 0.5f, 1e-3f, mu2, eps, s));
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(hw, dw, n * 4, cudaMemcpyDeviceToHost));
  CHECK(!memcmp(hw, w, n * 4), "%s: the skipped step changed weights", what);
  printf("%s: %d chunks, bit-identical to dpt_rmsw_step (4 steps across the mix); skip honoured\n", what, f.lay.n_chunk);
  fixture_free(&f);
  free(w), free(g), free(mm), free(hw), free(hv), free(hm), free(mask), free(copy), free(hcopy);
  dpt_sgd_free(&hs);
}

int main(void)
{
  device_or_skip("test_gpu_optim");
  struct dpt_model_cfg cfg;
  struct dpt_model big, small;
  struct dpt_err err;
  dpt_model_cfg_default(&cfg);
  if (dpt_model_resnet50(&big, &cfg, &err)) return 1;
  cfg.image_size = 28, cfg.num_classes = 10, cfg.small_stem = 1, cfg.width = 0.125, cfg.in_channels = 1;
  if (dpt_model_resnet50(&small, &cfg, &err)) return 1;
  for (int p = DPT_CUDA_FP32; p <= DPT_CUDA_BF16; p++) {
    run(&big, "resnet50", p, 0, 4096);
    run(&small, "width-1/8", p, p == DPT_CUDA_MIXED, 1000);
  }
  run(&big, "resnet50", DPT_CUDA_BF16, 1, 1000);
  run_lars(&big, DPT_CUDA_FP32, 0);
  run_lars(&big, DPT_CUDA_BF16, 1);
  run_rmsw(&big, DPT_CUDA_FP32);
  run_rmsw(&big, DPT_CUDA_MIXED);
  dpt_model_free(&big);
  dpt_model_free(&small);
  if (!failures) printf("test_gpu_optim: all checks passed\n");
  return failures != 0;
}
