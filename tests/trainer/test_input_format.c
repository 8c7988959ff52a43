/* test_input_format: the format negotiation between the GPU loader and a device backend
 * (issue 16's device input path), host-only: no device, no files.
 *
 *  - the backend side, dpt_cuda_plan_input_format (what the cuda backend's ops->input_format
 *    returns, plus its device and stream) for ResNet-50 at 224 px, batch 8, RGB and gray, at
 *    fp32 / tf32 / mixed / bf16 against a table written out here: NHWC always, fp32 / fp32 /
 *    fp16 / bf16, stored channels 3 / 3 / 8 / 8 (gray 1 / 1 / 8 / 8: the 16-bit stems are
 *    padded to 8, fp32 ones are not), and the batch's bytes equal to the plan's input tensor;
 *  - the negotiation, dpt_loader_opts_for_format: the loader options it sets make
 *    dpt_loader_device_format (the function dpt_loader_create sizes its batches with) equal
 *    the backend's format field by field and in bytes, device output on the backend's
 *    device; the banner's description ("NHWC fp16, 8 channels (3 + 5 zero)");
 *  - a model whose stem is not padded in 16 bits (8 input channels: already a multiple of
 *    8): the plan stores 8, and a 3-channel loader is refused naming the channels; an
 *    8-channel dataset is refused too (the GPU path decodes 1 or 3 channels);
 *  - refusals that leave the options unchanged: batch, side, a dataset held in memory, a
 *    host format; dpt_input_format_equal names each field that differs, ignores the stream;
 *  - the host formats: the CPU path and the GPU path without device_out deliver fp32 NCHW in
 *    host memory, NCHW is never padded; a real (synthetic, in-memory) loader reports the
 *    format dpt_loader_device_format gives;
 *  - the cpu backend has no device input (ops NULL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_backend.h"
#include "dpt_cuda_plan.h"
#include "dpt_data.h"
#include "dpt_model.h"

#include "dpt_check.h"

static void resnet(struct dpt_model *m, int in_channels, int image, double width)
{
  struct dpt_model_cfg cfg;
  struct dpt_err err;
  dpt_model_cfg_default(&cfg);
  cfg.in_channels = in_channels;
  cfg.image_size = image;
  cfg.small_stem = image <= 64;
  cfg.width = width;
  cfg.num_classes = 10;
  if (dpt_model_resnet50(m, &cfg, &err)) {
    fprintf(stderr, "resnet50: %s\n", err.msg);
    exit(1);
  }
}

/* The cuda backend's ops->input_format without a device: the plan's format, device 0, a stream. */
static void backend_format_ex(const struct dpt_model *m, int batch, enum dpt_cuda_precision p, int nchw,
                              struct dpt_input_format *f, size_t *plan_bytes)
{
  struct dpt_cuda_plan plan;
  struct dpt_err err;
  struct dpt_cuda_plan_opts po = {0, NULL, nchw}; /* nchw: the backend's fp32 default (DPT_CUDA_LAYOUT) */
  if (dpt_cuda_plan_build_ex(m, batch, p, 0, &po, &plan, &err)) {
    fprintf(stderr, "plan: %s\n", err.msg);
    exit(1);
  }
  dpt_cuda_plan_input_format(&plan, f);
  *plan_bytes = plan.t[0].bytes;
  dpt_cuda_plan_free(&plan);
  CHECK(f->device == -1 && f->stream == NULL, "the plan's format names no device (%d) and no stream", f->device);
  f->device = 0;
  static int a_stream;
  f->stream = &a_stream; /* any non-NULL cudaStream_t: not compared */
}

static void backend_format(const struct dpt_model *m, int batch, enum dpt_cuda_precision p, struct dpt_input_format *f,
                           size_t *plan_bytes)
{
  backend_format_ex(m, batch, p, 0, f, plan_bytes);
}

/* A file-backed (imagenet) dataset as dpt_data_load_imagenet leaves it: only what the
 * negotiation reads (name, channels, side, files). */
static void jpeg_set(struct dpt_dataset *d, struct dpt_file_set *fs, int c)
{
  memset(d, 0, sizeof *d);
  memset(fs, 0, sizeof *fs);
  snprintf(d->name, sizeof d->name, "imagenet");
  d->c = c;
  d->h = d->w = 224;
  d->files = fs;
}

static struct dpt_loader_opts train_opts(int batch, int side)
{
  struct dpt_loader_opts o = {.batch = batch, .size = 1, .seed = 5, .train = 1, .flip = 1, .out_size = side,
                              .prefetch = 2, .workers = 4};
  return o;
}

/* Field by field: the struct has padding (before seed, before gpu_hw_share) that a copy
 * leaves uninitialised, so memcmp would read undefined bytes (valgrind says so). */
static int opts_same(const struct dpt_loader_opts *a, const struct dpt_loader_opts *b)
{
  return a->batch == b->batch && a->rank == b->rank && a->size == b->size && a->seed == b->seed &&
         a->train == b->train && a->crop_pad == b->crop_pad && a->flip == b->flip &&
         a->out_size == b->out_size && a->prefetch == b->prefetch && a->workers == b->workers &&
         a->exact_decode == b->exact_decode && a->device == b->device && a->gpu == b->gpu &&
         a->gpu_no_hw == b->gpu_no_hw && a->gpu_hw_share == b->gpu_hw_share &&
         a->device_out == b->device_out && a->layout == b->layout && a->dtype == b->dtype &&
         a->c_stored == b->c_stored;
}

static void test_table(void)
{
  static const struct {
    enum dpt_cuda_precision p;
    int c, dtype, c_stored;
    const char *desc;
    int nchw;
  } want[] = {
      {DPT_CUDA_FP32, 3, DPT_DATA_F32, 3, "NCHW fp32, 3 channels", 1}, /* the backend's fp32 default */
      {DPT_CUDA_TF32, 3, DPT_DATA_F32, 3, "NCHW fp32, 3 channels", 1}, /* DPT_CUDA_LAYOUT=nchw */
      {DPT_CUDA_FP32, 1, DPT_DATA_F32, 1, "NCHW fp32, 1 channel", 1},
      {DPT_CUDA_FP32, 3, DPT_DATA_F32, 3, "NHWC fp32, 3 channels", 0},
      {DPT_CUDA_TF32, 3, DPT_DATA_F32, 3, "NHWC fp32, 3 channels", 0},
      {DPT_CUDA_MIXED, 3, DPT_DATA_F16, 8, "NHWC fp16, 8 channels (3 + 5 zero)", 0},
      {DPT_CUDA_BF16, 3, DPT_DATA_BF16, 8, "NHWC bf16, 8 channels (3 + 5 zero)", 0},
      {DPT_CUDA_FP32, 1, DPT_DATA_F32, 1, "NHWC fp32, 1 channel", 0},
      {DPT_CUDA_TF32, 1, DPT_DATA_F32, 1, "NHWC fp32, 1 channel", 0},
      {DPT_CUDA_MIXED, 1, DPT_DATA_F16, 8, "NHWC fp16, 8 channels (1 + 7 zero)", 0},
      {DPT_CUDA_BF16, 1, DPT_DATA_BF16, 8, "NHWC bf16, 8 channels (1 + 7 zero)", 0},
  };
  struct dpt_model m3, m1;
  resnet(&m3, 3, 224, 1.0);
  resnet(&m1, 1, 224, 1.0);
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    const char *pn = dpt_cuda_precision_name(want[i].p);
    struct dpt_input_format f, g;
    struct dpt_dataset d;
    struct dpt_file_set fs;
    struct dpt_err err = {0};
    size_t pb;
    char desc[96], why[128];
    backend_format_ex(want[i].c == 3 ? &m3 : &m1, 8, want[i].p, want[i].nchw, &f, &pb);
    CHECK(f.layout == (want[i].nchw ? DPT_DATA_NCHW : DPT_DATA_NHWC) && f.dtype == want[i].dtype && f.c == want[i].c && f.c_stored == want[i].c_stored &&
              f.batch == 8 && f.h == 224 && f.w == 224,
          "%s, %d channel(s): backend format layout %d dtype %d c %d c_stored %d batch %d %dx%d", pn, want[i].c,
          f.layout, f.dtype, f.c, f.c_stored, f.batch, f.h, f.w);
    CHECK(dpt_input_format_bytes(&f) == pb, "%s: format bytes %zu, the plan's input tensor %zu", pn,
          dpt_input_format_bytes(&f), pb);
    CHECK(!strcmp(dpt_input_format_describe(&f, desc, sizeof desc), want[i].desc), "%s: described as '%s', want '%s'",
          pn, desc, want[i].desc);
    /* the negotiation */
    jpeg_set(&d, &fs, want[i].c);
    struct dpt_loader_opts lo = train_opts(8, 224);
    int rc = dpt_loader_opts_for_format(&lo, &d, &f, &err);
    CHECK(rc == 0, "%s, %d channel(s): negotiation refused: %s", pn, want[i].c, err.msg);
    CHECK(lo.device == DPT_DATA_GPU && lo.gpu == 0 && lo.device_out == 1, "%s: loader device %d gpu %d device_out %d",
          pn, lo.device, lo.gpu, lo.device_out);
    CHECK(lo.batch == 8 && lo.out_size == 224 && lo.train == 1 && lo.workers == 4 && lo.prefetch == 2,
          "%s: the negotiation changed options it does not own", pn);
    dpt_loader_device_format(&d, &lo, &g);
    CHECK(dpt_input_format_equal(&g, &f, why, sizeof why), "%s: the loader delivers %s", pn, why);
    CHECK(dpt_input_format_bytes(&g) == pb, "%s: loader batch %zu bytes, the backend's input %zu", pn,
          dpt_input_format_bytes(&g), pb);
    /* the validation loader is a copy of the training one's options (dpt-train): the same format */
    struct dpt_loader_opts vo = lo;
    vo.train = 0;
    vo.flip = 0;
    vo.prefetch = 1;
    dpt_loader_device_format(&d, &vo, &g);
    CHECK(dpt_input_format_equal(&g, &f, why, sizeof why), "%s: validation loader: %s", pn, why);
  }
  dpt_model_free(&m3);
  dpt_model_free(&m1);
}

static void test_unpadded_stem(void)
{
  struct dpt_model m8;
  struct dpt_input_format f;
  struct dpt_dataset d;
  struct dpt_file_set fs;
  struct dpt_err err = {0};
  size_t pb;
  char desc[96];
  resnet(&m8, 8, 224, 0.25);
  for (int p = DPT_CUDA_MIXED; p <= DPT_CUDA_BF16; p++) {
    backend_format(&m8, 4, (enum dpt_cuda_precision)p, &f, &pb);
    CHECK(f.c == 8 && f.c_stored == 8 && pb == (size_t)4 * 8 * 224 * 224 * 2,
          "%s: an 8-channel stem is stored as %d channels (%zu bytes), want 8 (no padding)",
          dpt_cuda_precision_name((enum dpt_cuda_precision)p), f.c_stored, pb);
    CHECK(!strcmp(dpt_input_format_describe(&f, desc, sizeof desc), p == DPT_CUDA_MIXED ? "NHWC fp16, 8 channels"
                                                                                        : "NHWC bf16, 8 channels"),
          "unpadded stem described as '%s'", desc);
    jpeg_set(&d, &fs, 3);
    struct dpt_loader_opts lo = train_opts(4, 224), keep = lo;
    CHECK(dpt_loader_opts_for_format(&lo, &d, &f, &err) == DPT_E_INPUT && strstr(err.msg, "c 3 vs 8"),
          "3-channel images for an 8-channel stem: '%s'", err.msg);
    CHECK(opts_same(&lo, &keep), "a refused negotiation changed the options");
    jpeg_set(&d, &fs, 8);
    CHECK(dpt_loader_opts_for_format(&lo, &d, &f, &err) == DPT_E_INPUT && strstr(err.msg, "1 (gray) or 3 (RGB)"),
          "an 8-channel dataset on the GPU path: '%s'", err.msg);
  }
  dpt_model_free(&m8);
}

static void test_refusals(void)
{
  struct dpt_model m;
  struct dpt_input_format f;
  struct dpt_dataset d;
  struct dpt_file_set fs;
  struct dpt_err err = {0};
  size_t pb;
  resnet(&m, 3, 224, 0.25);
  backend_format(&m, 8, DPT_CUDA_MIXED, &f, &pb);
  jpeg_set(&d, &fs, 3);
  static const struct {
    int batch, side, in_memory, host;
    const char *msg;
  } bad[] = {
      {4, 224, 0, 0, "batch 4 vs 8"},
      {8, 192, 0, 0, "h 192 vs 224"},
      {8, 0, 0, 0, NULL}, /* side 0: the dataset's (224): accepted */
      {8, 224, 1, 0, "held in memory"},
      {8, 224, 0, 1, "host batches"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct dpt_loader_opts lo = train_opts(bad[i].batch, bad[i].side), keep = lo;
    struct dpt_input_format g = f;
    if (bad[i].host) g.device = -1;
    d.files = bad[i].in_memory ? NULL : &fs;
    err.msg[0] = '\0';
    int rc = dpt_loader_opts_for_format(&lo, &d, &g, &err);
    if (!bad[i].msg) {
      CHECK(rc == 0, "case %zu: refused: %s", i, err.msg);
      continue;
    }
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, bad[i].msg), "case %zu: rc %d '%s', want '%s'", i, rc, err.msg,
          bad[i].msg);
    CHECK(opts_same(&lo, &keep), "case %zu: a refused negotiation changed the options", i);
  }
  d.files = &fs;
  /* every field is compared (and named), the stream is not */
  static const char *const field[] = {"layout", "element type", "batch", "c ", "c_stored", "h ", "w ", "device"};
  for (int k = 0; k < 8; k++) {
    struct dpt_input_format g = f;
    char why[128] = "";
    int *v[] = {&g.layout, &g.dtype, &g.batch, &g.c, &g.c_stored, &g.h, &g.w, &g.device};
    *v[k] += 1;
    CHECK(!dpt_input_format_equal(&f, &g, why, sizeof why) && !strncmp(why, field[k], strlen(field[k])),
          "field %d changed: equal, or named '%s' (want '%s')", k, why, field[k]);
  }
  struct dpt_input_format g = f;
  char why[128];
  g.stream = NULL;
  CHECK(dpt_input_format_equal(&f, &g, why, sizeof why), "the stream is compared: %s", why);
  dpt_model_free(&m);
}

static void test_host_formats(void)
{
  struct dpt_dataset d;
  struct dpt_file_set fs;
  struct dpt_input_format f;
  struct dpt_err err = {0};
  char why[128];
  jpeg_set(&d, &fs, 3);
  struct dpt_loader_opts lo = train_opts(8, 224);
  /* the CPU path: host fp32 NCHW whatever the device options say */
  lo.layout = DPT_DATA_NHWC, lo.dtype = DPT_DATA_F16, lo.c_stored = 8, lo.device_out = 1;
  dpt_loader_device_format(&d, &lo, &f);
  CHECK(f.layout == DPT_DATA_NCHW && f.dtype == DPT_DATA_F32 && f.c_stored == 3 && f.device == -1 &&
            dpt_input_format_bytes(&f) == (size_t)8 * 3 * 224 * 224 * 4,
        "CPU path: layout %d dtype %d c_stored %d device %d", f.layout, f.dtype, f.c_stored, f.device);
  /* the GPU path copied back to the host (device_out 0): the same */
  lo.device = DPT_DATA_GPU, lo.gpu = 1, lo.device_out = 0;
  dpt_loader_device_format(&d, &lo, &f);
  CHECK(f.layout == DPT_DATA_NCHW && f.dtype == DPT_DATA_F32 && f.c_stored == 3 && f.device == -1,
        "GPU path with host copies: layout %d dtype %d c_stored %d device %d", f.layout, f.dtype, f.c_stored, f.device);
  /* device output: NCHW is never padded, NHWC at least the image's channels */
  lo.device_out = 1, lo.layout = DPT_DATA_NCHW, lo.c_stored = 8;
  dpt_loader_device_format(&d, &lo, &f);
  CHECK(f.layout == DPT_DATA_NCHW && f.dtype == DPT_DATA_F16 && f.c_stored == 3 && f.device == 1,
        "device NCHW: c_stored %d (want 3) device %d", f.c_stored, f.device);
  lo.layout = DPT_DATA_NHWC, lo.c_stored = 0;
  dpt_loader_device_format(&d, &lo, &f);
  CHECK(f.layout == DPT_DATA_NHWC && f.c_stored == 3, "device NHWC, c_stored 0: %d (want 3)", f.c_stored);
  /* a real loader (in memory: no file, no device) reports the function's format */
  struct dpt_dataset s;
  struct dpt_loader *L = NULL;
  struct dpt_input_format want, got;
  CHECK(dpt_data_synthetic(&s, 64, 3, 32, 10, 1, &err) == 0, "synthetic: %s", err.msg);
  struct dpt_loader_opts so = train_opts(8, 0);
  so.prefetch = 0;
  so.crop_pad = 4;
  CHECK(dpt_loader_create(&L, &s, &so, &err) == 0, "loader: %s", err.msg);
  if (L) {
    dpt_loader_device_format(&s, &so, &want);
    dpt_loader_format(L, &got);
    CHECK(dpt_input_format_equal(&got, &want, why, sizeof why) && got.layout == DPT_DATA_NCHW && got.h == 32 &&
              got.device == -1,
          "in-memory loader format: %s", why);
    struct dpt_loader_stats st;
    const float *x;
    const int *lab;
    CHECK(dpt_loader_next(L, &x, &lab, NULL) == 8, "in-memory loader: a batch");
    dpt_loader_stats(L, &st);
    CHECK(st.host_copies == 0, "the CPU path counts %ld host copies (only GPU batches copied back count)",
          st.host_copies);
    dpt_loader_destroy(L);
  }
  dpt_data_free(&s);
}

static void test_cpu_backend(void)
{
  struct dpt_model m;
  struct dpt_backend *be = NULL;
  struct dpt_backend_opts bo;
  struct dpt_err err = {0};
  resnet(&m, 3, 32, 0.0625);
  dpt_backend_opts_default(&bo);
  bo.batch = 2;
  bo.threads = 1;
  CHECK(dpt_backend_create("cpu", &m, &bo, &be, &err) == 0, "cpu backend: %s", err.msg);
  if (be) CHECK(!be->ops->input_format && !be->ops->forward_device, "the cpu backend claims device input");
  dpt_backend_destroy(be);
  dpt_model_free(&m);
}

int main(void)
{
  test_table();
  test_unpadded_stem();
  test_refusals();
  test_host_formats();
  test_cpu_backend();
  if (!failures) printf("test_input_format: all checks passed\n");
  return failures != 0;
}
