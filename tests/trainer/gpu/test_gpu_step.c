/* test_gpu_step: the training step as dpt-train runs it (dpt_backend.h: forward(out =
 * NULL), loss, backward(dout = NULL), overflow_check (mixed), sgd_step) waits for
 * nothing on the CUDA backend, and what it leaves is right:
 *
 *   host waits: 0 in 12 steps (dpt_backend_cuda_host_syncs, = ops->host_waits), then
 *     exactly 1 for loss_totals (the one wait of a log interval), at fp32, tf32, mixed
 *     and bf16; the staging waits (a slot's upload of 2 steps ago not done yet) are
 *     printed, not bounded: they are the host running ahead of the GPU;
 *   the pinned staging ring is not overwritten early: 12 steps with a different batch
 *     each, run without waits, give the parameters (1e-5 of their largest) and loss
 *     totals (1e-5) of the same steps with a host wait after each forward and loss (fp32,
 *     deterministic algorithms chosen by heuristics: the same in both; a batch read from
 *     a slot already refilled would move the loss by O(1));
 *   the device loss totals equal dpt_softmax_xent over the same logits (loss sum 1e-5
 *     relative, top-1 / top-5 / rows exact), an ignored label (-1) counting nothing;
 *   mixed precision: an inf in the gradient skips sgd_step on the device (parameters
 *     unchanged bit for bit), halves the loss scale and counts the skip (scaler_get);
 *     the next finite gradient applies and counts a good step; scaler_set / scaler_get
 *     round-trip (resume); overflow_check refuses a non-mixed backend;
 *   pinned host memory (ops->pinned_bytes): creation takes less than one batch (the labels'
 *     slots, the readback area); a host_alloc'd buffer adds its bytes, host_free takes them
 *     off; pinned batches (dpt-train's) go up in place, through forward and prefetch, and
 *     allocate no image staging, a pageable one adds the 2 slots once; the same batch gives the
 *     same logits both ways (1e-5 of the largest, as two runs of one backend), and STEPS
 *     training steps from one reused pinned buffer leave the parameters (1e-5) and totals of
 *     the same steps from pageable batches (a buffer read after its refill would move the loss
 *     by O(1)).
 * Exit 77 (SKIPPED) without a GPU. */
#include <string.h>

#include "dpt_optim.h"
#include "gpu_test.h"

#define N 8
#define STEPS 12

static struct dpt_model m;
static float *xs;    /* [STEPS, N, 3, 32, 32] */
static int *ys;      /* [STEPS, N] labels */
static size_t nx;

static struct dpt_backend *make(enum dpt_cuda_precision prec)
{
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = N;
  oracle_opts(&co);
  co.precision = prec;
  co.loss_scale = 1024.0f;
  co.algo_search = 0; /* heuristics: two backends pick the same algorithms (bit-for-bit comparison) */
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &be, &err), &err, "cuda backend");
  die_on(be->ops->sgd_init(be, 0.9f, 1e-4f, 0, NULL, &err), &err, "sgd_init");
  return be;
}

/* One step of dpt-train's loop; sync_each: a host wait after forward and loss (the reference). */
static void step(struct dpt_backend *be, int s, int sync_each, int mixed)
{
  struct dpt_err err = {0};
  die_on(dpt_backend_forward(be, xs + (size_t)s * nx, 1, NULL, &err), &err, "forward");
  if (sync_each) die_on(be->ops->sync(be, &err), &err, "sync");
  die_on(be->ops->loss(be, ys + (size_t)s * N, 0.1f, 1.0f / N, &err), &err, "loss");
  if (sync_each) die_on(be->ops->sync(be, &err), &err, "sync");
  die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
  if (mixed) die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check");
  die_on(be->ops->sgd_step(be, 0.05f, NULL, &err), &err, "sgd");
}

static void waits(enum dpt_cuda_precision prec)
{
  struct dpt_err err = {0};
  const char *name = dpt_cuda_precision_name(prec);
  int mixed = prec == DPT_CUDA_MIXED;
  struct dpt_backend *be = make(prec);
  struct dpt_loss_totals t;
  long w0 = be->ops->host_waits(be);
  CHECK(w0 == dpt_backend_cuda_host_syncs(be), "%s: host_waits is the sync counter", name);
  for (int s = 0; s < STEPS; s++) step(be, s, 0, mixed);
  long w1 = be->ops->host_waits(be);
  die_on(be->ops->loss_totals(be, &t, &err), &err, "loss totals");
  long w2 = be->ops->host_waits(be);
  printf("%s: %d steps: %ld host waits, then %ld for the loss totals; %ld staging waits; loss %.4f over %ld rows\n",
         name, STEPS, w1 - w0, w2 - w1, dpt_backend_cuda_stage_waits(be), t.loss_sum / t.rows, t.rows);
  CHECK(w1 == w0, "%s: %ld host waits in %d steps (want 0)", name, w1 - w0, STEPS);
  CHECK(w2 == w1 + 1, "%s: loss_totals waited %ld times (want 1)", name, w2 - w1);
  CHECK(t.rows == (long)STEPS * (N - 1) && isfinite(t.loss_sum), "%s: rows %ld loss %g", name, t.rows, t.loss_sum);
  die_on(be->ops->loss_totals(be, &t, &err), &err, "loss totals");
  CHECK(t.rows == 0 && t.loss_sum == 0 && t.top1 == 0, "%s: loss_totals did not reset", name);
  if (!mixed) {
    CHECK(be->ops->overflow_check(be, NULL, &err) == DPT_E_INPUT, "%s: overflow_check accepted", name);
  }
  dpt_backend_destroy(be);
}

/* No waits == a wait after every forward and loss: the staging slots hold each step's batch. */
static void staging(void)
{
  struct dpt_err err = {0};
  struct dpt_backend *a = make(DPT_CUDA_FP32), *b = make(DPT_CUDA_FP32);
  struct dpt_loss_totals ta, tb;
  size_t np = m.n_params;
  float *pa = malloc(np * 4), *pb = malloc(np * 4);
  for (int s = 0; s < STEPS; s++) {
    step(a, s, 0, 0);
    step(b, s, 1, 0);
  }
  die_on(a->ops->loss_totals(a, &ta, &err), &err, "totals");
  die_on(b->ops->loss_totals(b, &tb, &err), &err, "totals");
  die_on(a->ops->copy_slab(a, DPT_SLAB_PARAMS, pa, 0, &err), &err, "download");
  die_on(b->ops->copy_slab(b, DPT_SLAB_PARAMS, pb, 0, &err), &err, "download");
  double ep = nerr(pa, pb, np);
  CHECK(ep <= 1e-5, "staging: parameters after %d steps differ from the synchronised run by %.3g", STEPS, ep);
  CHECK(fabs(ta.loss_sum - tb.loss_sum) <= 1e-5 * fabs(tb.loss_sum) && ta.rows == tb.rows,
        "staging: totals %.9g/%ld vs %.9g/%ld", ta.loss_sum, ta.rows, tb.loss_sum, tb.rows);
  printf("staging: %d steps without waits vs with a wait after each forward and loss: parameters %.2e, loss "
         "%.9g vs %.9g\n", STEPS, ep, ta.loss_sum, tb.loss_sum);
  free(pa), free(pb);
  dpt_backend_destroy(a);
  dpt_backend_destroy(b);
}

/* The device totals against dpt_softmax_xent on the same logits. */
static void totals(void)
{
  struct dpt_err err = {0};
  struct dpt_backend *be = make(DPT_CUDA_FP32);
  const struct dpt_tensor_desc *ot = dpt_model_output(&m);
  int K = ot->c;
  float *lg = malloc((size_t)N * K * 4);
  struct dpt_loss_totals t;
  die_on(dpt_backend_forward(be, xs, 1, lg, &err), &err, "forward");
  die_on(be->ops->loss(be, ys, 0.1f, 1.0f / N, &err), &err, "loss");
  die_on(be->ops->loss_totals(be, &t, &err), &err, "totals");
  int c1, c5;
  double L = dpt_softmax_xent(lg, ys, N, K, 0.1f, 1.0f / N, NULL, &c1, &c5);
  printf("totals: device %.7f top-1 %ld top-5 %ld rows %ld; host %.7f %d %d\n", t.loss_sum, t.top1, t.top5, t.rows,
         L, c1, c5);
  CHECK(fabs(t.loss_sum - L) <= 1e-5 * fabs(L) && t.top1 == c1 && t.top5 == c5 && t.rows == N - 1,
        "totals: device %.9g/%ld/%ld/%ld vs host %.9g/%d/%d/%d", t.loss_sum, t.top1, t.top5, t.rows, L, c1, c5, N - 1);
  free(lg);
  dpt_backend_destroy(be);
}

/* Mixed precision: the skip and the scaler on the device. */
static void overflow(void)
{
  struct dpt_err err = {0};
  struct dpt_backend *be = make(DPT_CUDA_MIXED);
  size_t np = m.n_params;
  float *p0 = malloc(np * 4), *p1 = malloc(np * 4), *g = malloc(np * 4);
  struct dpt_loss_scaler s;
  die_on(be->ops->scaler_get(be, &s, &err), &err, "scaler");
  CHECK(s.scale == 1024.0f && s.skipped == 0 && s.good_steps == 0, "initial scaler %g/%ld/%d", s.scale, s.skipped,
        s.good_steps);
  die_on(dpt_backend_forward(be, xs, 1, NULL, &err), &err, "forward");
  die_on(be->ops->loss(be, ys, 0.1f, 1.0f / N, &err), &err, "loss");
  die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
  die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, g, 0, &err), &err, "download");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p0, 0, &err), &err, "download");
  int finite = 1;
  for (size_t i = 0; i < np; i++) finite &= isfinite(g[i]) != 0;
  CHECK(finite, "mixed: backward gave a non-finite gradient at scale 1024");
  g[np / 2] = INFINITY;
  die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, g, 1, &err), &err, "upload");
  long w0 = be->ops->host_waits(be);
  die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check");
  die_on(be->ops->sgd_step(be, 0.05f, NULL, &err), &err, "sgd");
  CHECK(be->ops->host_waits(be) == w0, "mixed: the overflow check or the skipped step waited");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p1, 0, &err), &err, "download");
  CHECK(!memcmp(p0, p1, np * 4), "mixed: an inf in the gradient did not skip the step");
  die_on(be->ops->scaler_get(be, &s, &err), &err, "scaler");
  CHECK(s.scale == 512.0f && s.skipped == 1 && s.good_steps == 0, "after overflow: scale %g skipped %ld good %d",
        s.scale, s.skipped, s.good_steps);
  g[np / 2] = 0.0f;
  die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, g, 1, &err), &err, "upload");
  die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check");
  die_on(be->ops->sgd_step(be, 0.05f, NULL, &err), &err, "sgd");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, p1, 0, &err), &err, "download");
  CHECK(memcmp(p0, p1, np * 4) != 0, "mixed: a finite gradient did not apply");
  die_on(be->ops->scaler_get(be, &s, &err), &err, "scaler");
  CHECK(s.scale == 512.0f && s.skipped == 1 && s.good_steps == 1, "after a good step: scale %g skipped %ld good %d",
        s.scale, s.skipped, s.good_steps);
  s.scale = 8.0f, s.good_steps = 1999, s.skipped = 7;
  die_on(be->ops->scaler_set(be, &s, &err), &err, "scaler set");
  die_on(be->ops->overflow_check(be, NULL, &err), &err, "overflow check"); /* the 2000th good step: growth */
  die_on(be->ops->sgd_step(be, 0.05f, NULL, &err), &err, "sgd");
  die_on(be->ops->scaler_get(be, &s, &err), &err, "scaler");
  CHECK(s.scale == 16.0f && s.good_steps == 0 && s.skipped == 7, "resumed scaler + growth: %g %d %ld", s.scale,
        s.good_steps, s.skipped);
  printf("mixed: inf -> step skipped on the device, scale 1024 -> 512, skipped 1; finite -> applied; resume + growth ok\n");
  free(p0), free(p1), free(g);
  dpt_backend_destroy(be);
}

/* The page-locked memory: image staging only for pageable batches; pinned ones go up in place. */
static size_t pinned_now(struct dpt_backend *be) { return be->ops->pinned_bytes(be); }

static void pinned(void)
{
  struct dpt_err err = {0};
  struct dpt_backend *be = make(DPT_CUDA_FP32), *ref = make(DPT_CUDA_FP32);
  size_t K = (size_t)N * dpt_model_output(&m)->c, xb = nx * sizeof(float), np = m.n_params, slots = 2 * xb;
  float *la = malloc(K * 4), *lb = malloc(K * 4), *pa = malloc(np * 4), *pb = malloc(np * 4);
  struct dpt_loss_totals ta, tb;
  CHECK(be->ops->pinned_bytes != NULL, "pinned: the cuda backend has no ops->pinned_bytes");
  if (!be->ops->pinned_bytes) return;
  size_t p0 = pinned_now(be);
  CHECK(p0 > 0 && p0 < xb, "pinned: creation holds %zu bytes (want the labels' slots and readback, < a batch "
        "of %zu)", p0, xb);
  float *xp = dpt_backend_host_alloc(be, xb);
  if (!xp) die_on(DPT_E_NOMEM, &err, "host_alloc");
  size_t p1 = pinned_now(be);
  CHECK(p1 >= p0 + xb && p1 <= p0 + xb + 4096, "pinned: host_alloc(%zu) took %zu -> %zu", xb, p0, p1);
  for (int s = 0; s < STEPS; s++) { /* dpt-train's path: the loader's pinned slot, refilled each step */
    memcpy(xp, xs + (size_t)s * nx, xb);
    if (s % 2) die_on(be->ops->prefetch(be, xp, &err), &err, "prefetch (pinned)");
    die_on(dpt_backend_forward(be, xp, 1, NULL, &err), &err, "forward (pinned)");
    die_on(be->ops->loss(be, ys + (size_t)s * N, 0.1f, 1.0f / N, &err), &err, "loss");
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    die_on(be->ops->sgd_step(be, 0.05f, NULL, &err), &err, "sgd");
    step(ref, s, 0, 0); /* the same step from the pageable batch */
  }
  size_t p2 = pinned_now(be);
  CHECK(p2 == p1, "pinned: %d steps from pinned batches changed the pinned bytes %zu -> %zu (staging allocated)",
        STEPS, p1, p2);
  die_on(be->ops->loss_totals(be, &ta, &err), &err, "totals");
  die_on(ref->ops->loss_totals(ref, &tb, &err), &err, "totals");
  die_on(be->ops->copy_slab(be, DPT_SLAB_PARAMS, pa, 0, &err), &err, "download");
  die_on(ref->ops->copy_slab(ref, DPT_SLAB_PARAMS, pb, 0, &err), &err, "download");
  double ep = nerr(pa, pb, np);
  CHECK(ep <= 1e-5 && fabs(ta.loss_sum - tb.loss_sum) <= 1e-5 * fabs(tb.loss_sum) && ta.rows == tb.rows,
        "pinned: %d steps from a reused pinned buffer vs pageable batches: parameters %.3g, totals %.9g/%ld vs "
        "%.9g/%ld", STEPS, ep, ta.loss_sum, ta.rows, tb.loss_sum, tb.rows);
  memcpy(xp, xs, xb);
  die_on(dpt_backend_forward(be, xp, 0, la, &err), &err, "forward (pinned, logits)");
  die_on(dpt_backend_forward(be, xs, 0, lb, &err), &err, "forward (pageable, logits)");
  size_t p3 = pinned_now(be);
  CHECK(p3 >= p2 + slots && p3 <= p2 + slots + 128, "pinned: the first pageable batch took %zu -> %zu (want 2 "
        "slots of %zu)", p2, p3, xb);
  double el = nerr(la, lb, K);
  CHECK(el <= 1e-5, "pinned: the same batch pinned and pageable gives logits %.3g of the largest apart", el);
  die_on(be->ops->prefetch(be, xs + nx, &err), &err, "prefetch (pageable)");
  die_on(dpt_backend_forward(be, xs + nx, 0, lb, &err), &err, "forward (pageable)");
  CHECK(pinned_now(be) == p3, "pinned: a second pageable batch took %zu -> %zu", p3, pinned_now(be));
  dpt_backend_host_free(be, xp);
  size_t p4 = pinned_now(be);
  CHECK(p4 == p3 - (p1 - p0), "pinned: host_free left %zu bytes (want %zu)", p4, p3 - (p1 - p0));
  printf("pinned: created %zu B; + host_alloc %zu B; %d pinned steps (parameters %.2e of the pageable run's) add "
         "nothing; the first pageable batch adds %zu B of staging (logits %.2e); host_free -> %zu B\n", p0, p1 - p0,
         STEPS, ep, p3 - p2, el, p4);
  free(la), free(lb), free(pa), free(pb);
  dpt_backend_destroy(be);
  dpt_backend_destroy(ref);
}

int main(void)
{
  gpu_or_skip("test_gpu_step");
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.width = 1.0 / 16;
  cfg.image_size = 32;
  cfg.num_classes = 10;
  cfg.small_stem = 1;
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  nx = (size_t)N * 3 * 32 * 32;
  xs = malloc(STEPS * nx * 4);
  ys = malloc(STEPS * N * sizeof(int));
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 5);
  for (size_t i = 0; i < STEPS * nx; i++) xs[i] = (float)dpt_rng_normal(&rng);
  for (int i = 0; i < STEPS * N; i++) ys[i] = i % N == 3 ? -1 : (int)dpt_rng_below(&rng, 10);
  waits(DPT_CUDA_FP32);
  waits(DPT_CUDA_TF32);
  waits(DPT_CUDA_MIXED);
  waits(DPT_CUDA_BF16);
  staging();
  totals();
  overflow();
  pinned();
  free(xs), free(ys);
  dpt_model_free(&m);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
