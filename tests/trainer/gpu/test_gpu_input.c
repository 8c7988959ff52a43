/* test_gpu_input: GPU-decoded batches straight into the cuda backend (issue 16: the loader's
 * device output in the backend's input format, ops->forward_device); exits 77 (ctest:
 * SKIPPED) without a usable CUDA device or nvJPEG.  At fp32, tf32, mixed and bf16, on a JPEG
 * folder written here (48 files of 3 sizes, 4 classes, every image different), ResNet-50
 * width 1/8 at 64 px, batch 8, deterministic cuDNN algorithms chosen by heuristics (so two
 * backends pick the same ones):
 *  1. format: the loader negotiated with dpt_loader_opts_for_format delivers exactly the
 *     backend's ops->input_format (dpt_loader_format);
 *  2. no host copy: the device loader's host_copies stays 0 over every batch, while the
 *     same loader with device_out 0 (the old path: GPU batches copied back as fp32 NCHW)
 *     counts one per batch, so the counter counts;
 *  3. logits: every one of 6 batches (more than the loader's slots, so slots are refilled
 *     behind the release event) through forward_device equals the same batch through the
 *     host path (forward from the copied-back fp32 NCHW batch) on the same backend, within
 *     1e-5 of the largest logit (trainer.gpu.step's bound for two runs of the same
 *     deterministic algorithms; the inputs are the same bits: the loader's kernel rounds
 *     fp32 to fp16 / bf16 to nearest even as the backend's input cast does), labels equal;
 *     also through a copy made on another stream and handed over with its ready event;
 *  4. training: 6 steps forward_device + loss + backward (+ overflow check in mixed) +
 *     sgd_step on backend A and the
 *     same steps from the host path on backend B give the same parameters (1e-5 of the
 *     largest) and loss totals (1e-5): the loader does not refill a slot the backend still
 *     reads (its release event is recorded on the backend's stream behind backward, which
 *     reads the input in the first convolution's weight gradient); a refilled slot moves
 *     the loss by O(1);
 *  5. host waits: none in those steps on either path (ops->host_waits unchanged), the one
 *     of loss_totals after them;
 *  6. forward_device without a batch is refused (DPT_E_INPUT).
 * usage: trainer_gpu_test_gpu_input */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "cu_check.h"
#include "dpt_data.h"
#include "gpu_test.h"

#define B 8
#define SIDE 64
#define STEPS 6

/* DIR/train/c<k>/i<n>.jpg: 48 images of 500x375, 375x500 and 320x240 (quality 90, 4:2:0), each
 * a different smooth field (phase and colour from its index). */
static void make_folder(const char *dir)
{
  static const int sz[3][2] = {{500, 375}, {375, 500}, {320, 240}};
  char p[512];
  tjhandle t = tjInitCompress();
  unsigned char *px = malloc((size_t)500 * 500 * 3);
  if (!t || !px) exit(1);
  mkdir(dir, 0777);
  snprintf(p, sizeof p, "%s/train", dir);
  mkdir(p, 0777);
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/train/c%d", dir, k);
    mkdir(p, 0777);
  }
  for (int i = 0; i < 48; i++) {
    int w = sz[i % 3][0], h = sz[i % 3][1];
    unsigned char *buf = NULL;
    unsigned long len = 0;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        unsigned char *q = px + ((size_t)y * w + x) * 3;
        q[0] = (unsigned char)lrint(128 + 100 * sin(x / (7.0 + i) + i));
        q[1] = (unsigned char)lrint(128 + 100 * cos(y / (5.0 + 0.5 * i) - i));
        q[2] = (unsigned char)lrint((37 * i + 255.0 * (x + y) / (w + h))) % 256;
      }
    if (tjCompress2(t, px, w, 0, h, TJPF_RGB, &buf, &len, TJSAMP_420, 90, 0)) {
      fprintf(stderr, "tjCompress2: %s\n", tjGetErrorStr2(t));
      exit(1);
    }
    snprintf(p, sizeof p, "%s/train/c%d/i%02d.jpg", dir, i % 4, i);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
      fprintf(stderr, "cannot write %s\n", p);
      exit(1);
    }
    tjFree(buf);
  }
  tjDestroy(t);
  free(px);
}

static struct dpt_backend *backend(const struct dpt_model *m, enum dpt_cuda_precision p)
{
  struct dpt_backend_opts bo;
  struct dpt_cuda_opts co;
  struct dpt_backend *be = NULL;
  struct dpt_err err = {0};
  dpt_backend_opts_default(&bo);
  bo.batch = B;
  dpt_cuda_opts_default(&co);
  co.precision = p;
  co.deterministic = 1;
  co.algo_search = 0; /* heuristics: the same algorithms in every backend of this model */
  die_on(dpt_backend_cuda_create_ex(m, &bo, &co, &be, &err), &err, "cuda backend");
  die_on(be->ops->sgd_init(be, 0.9f, 1e-4f, 0, NULL, &err), &err, "sgd_init");
  return be;
}

/* One training step as dpt-train's: forward, loss, backward, (mixed) the overflow check, SGD. */
static void train_step(struct dpt_backend *be, const void *xd, const float *xh, const int *lab, struct dpt_err *err)
{
  die_on(xd ? be->ops->forward_device(be, xd, NULL, 1, NULL, err) : dpt_backend_forward(be, xh, 1, NULL, err), err,
         "forward");
  die_on(be->ops->loss(be, lab, 0.0f, 1.0f / B, err), err, "loss");
  die_on(dpt_backend_backward(be, NULL, NULL, err), err, "backward");
  if (!strcmp(be->precision, "mixed")) die_on(be->ops->overflow_check(be, NULL, err), err, "overflow check");
  die_on(be->ops->sgd_step(be, 0.05f, NULL, err), err, "sgd");
}

/* The training loader of dpt-train's options: device output negotiated with fmt (dev = 1),
 * or the GPU path copied back to the host (dev = 0). */
static struct dpt_loader *loader(const struct dpt_dataset *d, const struct dpt_input_format *fmt, int dev)
{
  struct dpt_loader_opts lo = {.batch = B, .size = 1, .seed = 11, .train = 1, .flip = 1, .out_size = SIDE,
                               .prefetch = 2, .workers = 2};
  struct dpt_loader *L = NULL;
  struct dpt_err err = {0};
  if (dev) {
    die_on(dpt_loader_opts_for_format(&lo, d, fmt, &err), &err, "negotiation");
  } else {
    lo.device = DPT_DATA_GPU;
    lo.gpu = fmt->device;
  }
  die_on(dpt_loader_create(&L, d, &lo, &err), &err, dev ? "device loader" : "host-copy loader");
  return L;
}

static void next_pair(struct dpt_loader *D, struct dpt_loader *H, void *stream, void **xd, const float **xh,
                      const int **ld, const int **lh, const char *name, int step)
{
  int nd = dpt_loader_next_device(D, xd, ld, stream, NULL), nh = dpt_loader_next(H, xh, lh, NULL);
  if (nd < 0) fprintf(stderr, "device loader: %s\n", dpt_loader_err(D)->msg);
  if (nh < 0) fprintf(stderr, "host-copy loader: %s\n", dpt_loader_err(H)->msg);
  if (nd < 0 || nh < 0) exit(1);
  CHECK(nd == nh && !memcmp(*ld, *lh, B * sizeof(int)), "%s step %d: the two loaders' labels differ", name, step);
}

static void test_precision(const char *dir, enum dpt_cuda_precision p)
{
  const char *name = dpt_cuda_precision_name(p);
  struct dpt_dataset dd, dh;
  struct dpt_data_opts o = {0};
  struct dpt_err err = {0};
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  struct dpt_input_format fa, fb, fl;
  char why[160];
  die_on(dpt_data_load(&dd, "imagenet", dir, 1, 0, 0, &o, &err), &err, "dataset");
  die_on(dpt_data_load(&dh, "imagenet", dir, 1, 0, 0, &o, &err), &err, "dataset");
  dpt_model_cfg_default(&cfg);
  cfg.image_size = SIDE;
  cfg.small_stem = 0;
  cfg.width = 0.125;
  cfg.num_classes = 4;
  cfg.seed = 3;
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  struct dpt_backend *A = backend(&m, p), *Bk = backend(&m, p);
  die_on(A->ops->input_format(A, &fa, &err), &err, "input_format");
  die_on(Bk->ops->input_format(Bk, &fb, &err), &err, "input_format");
  void *sa = fa.stream;

  /* 1-3: logits, one backend, both paths */
  struct dpt_loader *D = loader(&dd, &fa, 1), *H = loader(&dh, &fa, 0);
  dpt_loader_format(D, &fl);
  CHECK(dpt_input_format_equal(&fl, &fa, why, sizeof why), "%s: the device loader delivers %s (loader vs backend)",
        name, why);
  size_t K = (size_t)B * 4, bytes = dpt_input_format_bytes(&fa);
  float *od = malloc(K * 4), *oh = malloc(K * 4), *oe = malloc(K * 4);
  void *copy = NULL;
  cudaStream_t side;
  cudaEvent_t ready;
  CU(cudaSetDevice(fa.device));
  CU(cudaMalloc(&copy, bytes));
  CU(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CU(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  int exact = 0;
  for (int s = 0; s < STEPS; s++) {
    void *xd;
    const float *xh;
    const int *ld, *lh;
    next_pair(D, H, sa, &xd, &xh, &ld, &lh, name, s);
    die_on(A->ops->forward_device(A, xd, NULL, 0, od, &err), &err, "forward_device");
    die_on(dpt_backend_forward(A, xh, 0, oh, &err), &err, "forward (host path)");
    double e = nerr(od, oh, K);
    exact += !memcmp(od, oh, K * 4);
    CHECK(e <= 1e-5, "%s step %d: logits from the device batch differ from the host path's by %.3g of the largest",
          name, s, e);
    if (s == 0) { /* the same batch copied on another stream, handed over with its ready event */
      CU(cudaMemcpyAsync(copy, xd, bytes, cudaMemcpyDeviceToDevice, side));
      CU(cudaEventRecord(ready, side));
      die_on(A->ops->forward_device(A, copy, ready, 0, oe, &err), &err, "forward_device (ready event)");
      CHECK(nerr(oe, od, K) <= 1e-5, "%s: logits through the ready event differ by %.3g", name, nerr(oe, od, K));
    }
  }
  printf("%s: logits of %d batches: device input == host path (%d of them bit for bit)\n", name, STEPS, exact);
  struct dpt_loader_stats sd, sh;
  dpt_loader_stats(D, &sd);
  dpt_loader_stats(H, &sh);
  CHECK(sd.host_copies == 0, "%s: the device loader copied %ld batches to the host", name, sd.host_copies);
  CHECK(sh.host_copies >= STEPS, "%s: the host-copy loader counts %ld copies for %d batches (the counter is dead)", name,
        sh.host_copies, STEPS);
  CHECK(A->ops->forward_device(A, NULL, NULL, 0, NULL, &err) == DPT_E_INPUT, "%s: forward_device(NULL) accepted", name);
  die_on(A->ops->sync(A, &err), &err, "sync");
  dpt_loader_destroy(D);
  dpt_loader_destroy(H);

  /* 4-5: training, A from device batches, B from the host path */
  D = loader(&dd, &fa, 1);
  H = loader(&dh, &fb, 0);
  long wa = A->ops->host_waits(A), wb = Bk->ops->host_waits(Bk);
  for (int s = 0; s < STEPS; s++) {
    void *xd;
    const float *xh;
    const int *ld, *lh;
    next_pair(D, H, sa, &xd, &xh, &ld, &lh, name, s);
    train_step(A, xd, NULL, ld, &err);
    train_step(Bk, NULL, xh, lh, &err);
  }
  long wa1 = A->ops->host_waits(A), wb1 = Bk->ops->host_waits(Bk);
  CHECK(wa1 == wa && wb1 == wb, "%s: host waits in %d steps: device input %ld, host path %ld (want 0 and 0)", name,
        STEPS, wa1 - wa, wb1 - wb);
  struct dpt_loss_totals ta, tb;
  die_on(A->ops->loss_totals(A, &ta, &err), &err, "loss totals");
  die_on(Bk->ops->loss_totals(Bk, &tb, &err), &err, "loss totals");
  CHECK(A->ops->host_waits(A) == wa1 + 1, "%s: loss_totals waited %ld times (want 1)", name,
        A->ops->host_waits(A) - wa1);
  CHECK(fabs(ta.loss_sum - tb.loss_sum) <= 1e-5 * fabs(tb.loss_sum) && ta.rows == tb.rows && ta.top1 == tb.top1,
        "%s: loss totals %.9g (%ld rows, top-1 %ld) vs the host path's %.9g (%ld, %ld)", name, ta.loss_sum, ta.rows,
        ta.top1, tb.loss_sum, tb.rows, tb.top1);
  size_t np = m.n_params;
  float *pa = malloc(np * 4), *pb = malloc(np * 4);
  die_on(A->ops->copy_slab(A, DPT_SLAB_PARAMS, pa, 0, &err), &err, "params");
  die_on(Bk->ops->copy_slab(Bk, DPT_SLAB_PARAMS, pb, 0, &err), &err, "params");
  double ep = nerr(pa, pb, np);
  size_t nonfinite = 0;
  for (size_t i = 0; i < np; i++) nonfinite += !isfinite(pa[i]) || !isfinite(pb[i]);
  CHECK(nonfinite == 0, "%s: %zu parameters not finite after %d steps", name, nonfinite, STEPS);
  CHECK(ep <= 1e-5, "%s: parameters after %d steps from device batches differ from the host path's by %.3g", name,
        STEPS, ep);
  printf("%s: %d training steps: parameters %s (%.3g), loss %.6g vs %.6g, 0 host waits in the steps\n", name, STEPS,
         memcmp(pa, pb, np * 4) ? "within 1e-5" : "bit for bit", ep, ta.loss_sum / ta.rows, tb.loss_sum / tb.rows);
  die_on(A->ops->sync(A, &err), &err, "sync"); /* A reads D's batches in place: done before D goes */
  dpt_loader_destroy(D);
  dpt_loader_destroy(H);
  cudaFree(copy);
  cudaStreamDestroy(side);
  cudaEventDestroy(ready);
  free(pa), free(pb), free(od), free(oh), free(oe);
  dpt_backend_destroy(A);
  dpt_backend_destroy(Bk);
  dpt_model_free(&m);
  dpt_data_free(&dd);
  dpt_data_free(&dh);
}

int main(void)
{
  char why[256], dir[256], cmd[320];
  gpu_or_skip("trainer.gpu.input");
  if (!dpt_data_gpu_available(0, why, sizeof why)) {
    printf("SKIPPED trainer.gpu.input: %s\n", why);
    return SKIP_CODE;
  }
  snprintf(dir, sizeof dir, "/tmp/dpt-test-gpu-input-%d", (int)getpid());
  make_folder(dir);
  test_precision(dir, DPT_CUDA_FP32);
  test_precision(dir, DPT_CUDA_TF32);
  test_precision(dir, DPT_CUDA_MIXED);
  test_precision(dir, DPT_CUDA_BF16);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: device input == host path at fp32/tf32/mixed/bf16, no host copy, no host wait in the steps\n");
  return failures ? 1 : 0;
}
