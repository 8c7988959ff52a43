/* dpt-loader-bench — the imagenet loader alone (issue 16's loader benchmark).
 *
 *   dpt-loader-bench make DIR [--images N] [--classes K] [--seed S] [--threads T]
 *       writes an ImageNet-like JPEG folder with libturbojpeg: DIR/train/<class>/img_N.JPEG,
 *       N images (default 3000) in K classes (default 10), sizes around 500 x 375
 *       (landscape and portrait, 4:2:0, quality 90), content with ImageNet-like JPEG
 *       sizes (smooth shapes, edges and grain: ~90 KB per file); image i depends only on
 *       (S, i), so T threads (default: all cores) write the same folder as one.
 *   dpt-loader-bench run --data-dir DIR [--device cpu|gpu] [--threads N] [--batch B]
 *       [--steps S] [--warmup W] [--size 224] [--prefetch P] [--host-copy]
 *       [--layout nchw|nhwc] [--dtype fp32|fp16|bf16] [--seed S] [--hw-share F] [--no-hw]
 *       the training loader of dpt-train (random-resized crop + flip + normalise,
 *       224 px) with N worker threads on the CPU path (libturbojpeg) or the GPU path
 *       (nvJPEG; batches stay on the device, as dpt-train's cuda backend reads them,
 *       unless --host-copy: copied back as host fp32, what a backend without device
 *       input gets; --hw-share: the hardware decoder's share of the baseline files,
 *       default 0.65; --no-hw: nvJPEG's CUDA decoders only); W batches of
 *       warm-up (default: prefetch + threads + 2, which drains what was prefetched),
 *       then S timed batches.  Prints
 *       one JSON object: images/s, the CPU time of the process over the wall time
 *       (cores used), the decoder counts.
 *   dpt-loader-bench probe   exit 0 when the GPU path works here, else 1 and why.
 * Exit: 0 ok, 1 runtime failure, 2 bad usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

#include <omp.h>

#include "dpt_augment.h" /* dpt_augment_mix */
#include "dpt_data.h"
#include "dpt_model.h" /* dpt_rng */

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void)
{
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static int usage(void)
{
  fprintf(stderr, "usage: dpt-loader-bench make DIR [--images N] [--classes K] [--seed S] [--threads T]\n"
                  "       dpt-loader-bench run --data-dir DIR [--device cpu|gpu] [--threads N] [--batch B]\n"
                  "                        [--steps S] [--warmup W] [--size 224] [--prefetch P] [--host-copy]\n"
                  "                        [--layout nchw|nhwc] [--dtype fp32|fp16|bf16] [--seed S]\n"
                  "                        [--hw-share F] [--no-hw]\n"
                  "       dpt-loader-bench probe\n");
  return 2;
}

static int num(const char *opt, const char *v, long lo, long hi, long *out)
{
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || errno || end == v || *end || x < lo || x > hi) {
    fprintf(stderr, "dpt-loader-bench: %s '%s' is not an integer in [%ld, %ld]\n", opt, v ? v : "", lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* One image: a few smooth colour shapes on a gradient, with grain. */
static void paint(unsigned char *px, int w, int h, struct dpt_rng *r)
{
  double base[3], gx[3], gy[3];
  for (int c = 0; c < 3; c++)
    base[c] = 40 + 170 * dpt_rng_uniform(r), gx[c] = 60 * (dpt_rng_uniform(r) - 0.5) / w,
    gy[c] = 60 * (dpt_rng_uniform(r) - 0.5) / h;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) px[((size_t)y * w + x) * 3 + c] = (unsigned char)(base[c] + gx[c] * x * w / 4 + gy[c] * y * h / 4);
  int shapes = 6 + (int)dpt_rng_below(r, 10);
  for (int s = 0; s < shapes; s++) {
    double cx = w * dpt_rng_uniform(r), cy = h * dpt_rng_uniform(r), rad = 15 + 120 * dpt_rng_uniform(r);
    double col[3], freq = 0.05 + 0.4 * dpt_rng_uniform(r);
    for (int c = 0; c < 3; c++) col[c] = 255 * dpt_rng_uniform(r);
    int x0 = (int)fmax(0, cx - rad), x1 = (int)fmin(w, cx + rad), y0 = (int)fmax(0, cy - rad), y1 = (int)fmin(h, cy + rad);
    for (int y = y0; y < y1; y++)
      for (int x = x0; x < x1; x++) {
        double d = hypot(x - cx, y - cy);
        if (d > rad) continue;
        double t = 0.5 + 0.5 * sin(freq * (x + 2 * y)); /* texture inside the shape */
        for (int c = 0; c < 3; c++) {
          unsigned char *p = &px[((size_t)y * w + x) * 3 + c];
          *p = (unsigned char)fmin(255, fmax(0, 0.3 * *p + 0.7 * col[c] * (0.6 + 0.4 * t)));
        }
      }
  }
  for (size_t i = 0; i < (size_t)w * h * 3; i++) { /* sensor grain */
    int v = px[i] + (int)dpt_rng_below(r, 31) - 15;
    px[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

static int make(int argc, char **argv)
{
  long n = 3000, k = 10, seed = 1, threads = 0;
  if (argc < 3) return usage();
  const char *dir = argv[2];
  for (int i = 3; i < argc; i += 2) { /* option value pairs */
    long *v = !strcmp(argv[i], "--images") ? &n : !strcmp(argv[i], "--classes") ? &k
            : !strcmp(argv[i], "--seed") ? &seed : !strcmp(argv[i], "--threads") ? &threads : NULL;
    long hi = v == &n ? 10000000 : v == &k ? 100000 : v == &threads ? 1024 : 1L << 40;
    if (!v) return usage();
    if (num(argv[i], i + 1 < argc ? argv[i + 1] : NULL, v == &n || v == &k ? 1 : 0, hi, v)) return 2;
  }
  char p[4096];
  snprintf(p, sizeof p, "%s", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/train", dir);
  mkdir(p, 0777);
  for (long c = 0; c < k && c < n; c++) {
    snprintf(p, sizeof p, "%s/train/n%08ld", dir, c);
    mkdir(p, 0777);
  }
  static const int sizes[][2] = {{500, 375}, {500, 375}, {500, 375}, {375, 500}, {500, 333}, {333, 500}, {500, 400},
                                 {640, 480}, {400, 300}, {500, 357}};
  double bytes = 0;
  int failed = 0;
  if (threads > 0) omp_set_num_threads((int)threads);
  /* image i depends only on (seed, i): the same folder whatever the thread count */
#pragma omp parallel reduction(+ : bytes)
  {
    tjhandle t = tjInitCompress();
    unsigned char *px = malloc((size_t)640 * 640 * 3), *buf = NULL;
    unsigned long len = 0;
    char path[4096];
#pragma omp for schedule(dynamic, 16)
    for (long i = 0; i < n; i++) {
      struct dpt_rng r;
      if (__atomic_load_n(&failed, __ATOMIC_RELAXED)) continue;
      dpt_rng_seed(&r, dpt_augment_mix((uint64_t)seed, (uint64_t)i));
      const int *sz = sizes[dpt_rng_below(&r, sizeof sizes / sizeof *sizes)];
      paint(px, sz[0], sz[1], &r);
      snprintf(path, sizeof path, "%s/train/n%08ld/img_%07ld.JPEG", dir, i % k, i);
      FILE *f = NULL;
      if (!t || !px || tjCompress2(t, px, sz[0], 0, sz[1], TJPF_RGB, &buf, &len, TJSAMP_420, 90, 0) ||
          !(f = fopen(path, "wb")) || fwrite(buf, 1, len, f) != len) {
#pragma omp critical
        fprintf(stderr, "dpt-loader-bench: cannot write %s: %s\n", path, t ? (f ? strerror(errno) : tjGetErrorStr2(t)) : "");
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      }
      if (f && fclose(f)) __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
      bytes += len;
    }
    tjFree(buf);
    if (t) tjDestroy(t);
    free(px);
  }
  if (failed) return 1;
  printf("{\"images\": %ld, \"classes\": %ld, \"mean_bytes\": %.0f, \"dir\": \"%s\"}\n", n, k, bytes / n, dir);
  return 0;
}

static int run(int argc, char **argv)
{
  const char *dir = NULL, *device = "cpu", *layout = "nchw", *dtype = "fp32";
  long threads = 1, batch = 64, steps = 20, warmup = -1, size = 224, prefetch = -1, seed = 1;
  int host_copy = 0, no_hw = 0;
  double hw_share = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "--host-copy") || !strcmp(a, "--no-hw")) {
      *(a[2] == 'h' ? &host_copy : &no_hw) = 1;
      continue;
    }
    if (!v) return usage();
    if (!strcmp(a, "--data-dir")) dir = v;
    else if (!strcmp(a, "--device")) device = v;
    else if (!strcmp(a, "--layout")) layout = v;
    else if (!strcmp(a, "--dtype")) dtype = v;
    else if (!strcmp(a, "--threads")) rc = num(a, v, 1, 256, &threads);
    else if (!strcmp(a, "--batch")) rc = num(a, v, 1, 4096, &batch);
    else if (!strcmp(a, "--steps")) rc = num(a, v, 1, 1000000, &steps);
    else if (!strcmp(a, "--warmup")) rc = num(a, v, 0, 1000, &warmup);
    else if (!strcmp(a, "--size")) rc = num(a, v, 8, 1024, &size);
    else if (!strcmp(a, "--prefetch")) rc = num(a, v, 0, 64, &prefetch);
    else if (!strcmp(a, "--seed")) rc = num(a, v, 0, 1L << 40, &seed);
    else if (!strcmp(a, "--hw-share")) {
      char *end;
      hw_share = strtod(v, &end);
      if (*end || !(hw_share > 0 && hw_share <= 1)) {
        fprintf(stderr, "dpt-loader-bench: --hw-share '%s' is not in (0, 1]\n", v);
        return 2;
      }
    } else return usage();
    if (rc) return 2;
    i++;
  }
  int gpu = !strcmp(device, "gpu");
  if (!dir || (!gpu && strcmp(device, "cpu")) || (strcmp(layout, "nchw") && strcmp(layout, "nhwc")) ||
      (strcmp(dtype, "fp32") && strcmp(dtype, "fp16") && strcmp(dtype, "bf16")))
    return usage();
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {0};
  if (dpt_data_load(&d, "imagenet", dir, 1, 0, 0, &o, &err)) {
    fprintf(stderr, "dpt-loader-bench: %s\n", err.msg);
    return dpt_err_exit_status(&err);
  }
  struct dpt_loader_opts lo = {
      .batch = (int)batch, .size = 1, .seed = (uint64_t)seed, .train = 1, .flip = 1, .out_size = (int)size,
      .prefetch = prefetch >= 0 ? (int)prefetch : (int)threads + 1, .workers = (int)threads,
      .device = gpu ? DPT_DATA_GPU : DPT_DATA_CPU, .device_out = gpu && !host_copy, .gpu_no_hw = no_hw,
      .gpu_hw_share = hw_share,
      .layout = strcmp(layout, "nhwc") ? DPT_DATA_NCHW : DPT_DATA_NHWC,
      .dtype = !strcmp(dtype, "fp16") ? DPT_DATA_F16 : !strcmp(dtype, "bf16") ? DPT_DATA_BF16 : DPT_DATA_F32};
  struct dpt_loader *L = NULL;
  int status = 0;
  if (dpt_loader_create(&L, &d, &lo, &err)) {
    fprintf(stderr, "dpt-loader-bench: %s\n", err.msg);
    dpt_data_free(&d);
    return dpt_err_exit_status(&err);
  }
  /* steady state: the warm-up drains the batches prefetched before the first request (and the
   * ones filled meanwhile), so the timed batches are produced while they are timed */
  if (warmup < 0) warmup = lo.prefetch + threads + 2;
  int spe = dpt_loader_steps(L), epoch = 0, st = 0;
  long images = 0;
  double t0 = 0, c0 = 0, wait = 0;
  for (long k = 0; k < warmup + steps; k++) {
    if (k == warmup) {
      t0 = now();
      c0 = cpu_seconds();
      wait = 0;
    }
    if (st == spe) dpt_loader_start(L, ++epoch, st = 0);
    const float *x;
    void *dx;
    const int *lab;
    int n = lo.device_out ? dpt_loader_next_device(L, &dx, &lab, NULL, &wait) : dpt_loader_next(L, &x, &lab, &wait);
    st++;
    if (n < 0) {
      fprintf(stderr, "dpt-loader-bench: %s\n", dpt_loader_err(L)->msg);
      status = 1;
      break;
    }
    if (k >= warmup) images += batch;
  }
  double wall = now() - t0, cpu = cpu_seconds() - c0;
  if (!status) {
    struct dpt_loader_stats s;
    dpt_loader_stats(L, &s);
    printf("{\"device\": \"%s\", \"decoder\": \"%s\", \"threads\": %ld, \"batch\": %ld, \"size\": %ld, \"steps\": %ld, "
           "\"images\": %ld, \"seconds\": %.4f, \"images_per_s\": %.1f, \"cpu_seconds\": %.3f, \"cores_used\": %.3f, "
           "\"images_per_core_s\": %.1f, \"hw_share\": %.2f, \"host_copy\": %s, \"layout\": \"%s\", \"dtype\": \"%s\", "
           "\"decoded_hw\": %ld, \"decoded_hybrid\": %ld, \"decoded_rgb\": %ld, \"decoded_cpu\": %ld, "
           "\"refused\": %ld, \"failed\": %ld}\n",
           device, dpt_loader_decoder(L), threads, batch, size, steps, images, wall, images / wall, cpu, cpu / wall,
           cpu > 0 ? images / cpu : 0.0, hw_share, host_copy ? "true" : "false", gpu ? layout : "nchw", gpu ? dtype : "fp32",
           s.gpu_hw, s.gpu_hybrid, s.gpu_rgb, s.cpu, s.gpu_refused, s.failed);
  }
  dpt_loader_destroy(L);
  dpt_data_free(&d);
  return status;
}

int main(int argc, char **argv)
{
  if (argc < 2) return usage();
  if (!strcmp(argv[1], "make")) return make(argc, argv);
  if (!strcmp(argv[1], "run")) return run(argc, argv);
  if (!strcmp(argv[1], "probe")) {
    char why[320];
    int ok = dpt_data_gpu_available(0, why, sizeof why);
    printf("%s\n", why);
    return ok ? 0 : 1;
  }
  return usage();
}
