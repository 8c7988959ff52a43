/* test_jpeg: --dataset imagenet (trainer/dpt_data_jpeg.c + the loader's workers).
 * JPEGs are written here with libturbojpeg (tjCompress2): uniform images whose
 * colour encodes (record id, class), a gradient image for crop/flip, a CMYK file.
 * Checks: folder scan (sorted classes -> labels, non-JPEGs ignored, val classes
 * mapped through train/), list files (relative paths, bad lines name file:line,
 * --skip-bad counts), decode (RGB, grayscale, CMYK, DCT scaling), 2-rank sharding
 * (disjoint, complete), determinism per seed across worker counts, crop / flip
 * ranges, centred validation crop, corrupt files (truncated, wrong magic, 0 bytes)
 * -> errors naming the file and record, or skipped and counted once.
 * usage: trainer_test_jpeg            run the checks
 *        trainer_test_jpeg --fuzz-corpus DIR  write the seeds of tests/fuzz/corpus/jpeg
 *        trainer_test_jpeg --make DIR  write a small dataset for test_imagenet_cli.sh:
 *          DIR/train/<3 classes>/ 8 images each, DIR/val/ 2 each, DIR/train.txt +
 *          DIR/val.txt lists, DIR/bad/ (train/ with a truncated, a wrong-magic and a
 *          0-byte file added, val/) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "dpt_data.h"

#include "dpt_check.h"

static const char *classes[3] = {"n01_apple", "n02_bee", "n03_cat"}; /* sorted order = labels */

/* Compresses w x h pixels of format pf to path; returns the size, or exits. */
static unsigned long write_jpeg(const char *path, const unsigned char *px, int w, int h, int pf, int subsamp,
                                int quality)
{
  tjhandle t = tjInitCompress();
  unsigned char *buf = NULL;
  unsigned long len = 0;
  if (!t || tjCompress2(t, px, w, 0, h, pf, &buf, &len, subsamp, quality, 0)) {
    fprintf(stderr, "tjCompress2(%s): %s\n", path, tjGetErrorStr2(t));
    exit(1);
  }
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  tjFree(buf);
  tjDestroy(t);
  return len;
}

/* Uniform RGB image: R = 10 + 9 * id, G = 40 + 80 * class, B = 128. */
static void write_coded(const char *path, int id, int cls, int w, int h)
{
  unsigned char *px = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) px[3 * i] = (unsigned char)(10 + 9 * id), px[3 * i + 1] = (unsigned char)(40 + 80 * cls),
                                 px[3 * i + 2] = 128;
  write_jpeg(path, px, w, h, TJPF_RGB, TJSAMP_444, 95);
  free(px);
}

static void mkdirs(const char *a, const char *b, const char *c)
{
  char p[1024];
  snprintf(p, sizeof p, "%s", a);
  mkdir(p, 0777);
  if (!b) return;
  snprintf(p, sizeof p, "%s/%s", a, b);
  mkdir(p, 0777);
  if (!c) return;
  snprintf(p, sizeof p, "%s/%s/%s", a, b, c);
  mkdir(p, 0777);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

static unsigned char *read_all(const char *path, size_t *n)
{
  FILE *f = fopen(path, "rb");
  unsigned char *b = malloc(1 << 20);
  *n = f ? fread(b, 1, 1 << 20, f) : 0;
  if (f) fclose(f);
  return b;
}

/* A noisy 64x64 image (large scan, so that a cut lands inside the entropy-coded data). */
static void write_noisy(const char *path)
{
  unsigned char px[64 * 64 * 3];
  unsigned s = 12345;
  for (int i = 0; i < 64 * 64 * 3; i++) {
    s = s * 1103515245u + 12345u;
    px[i] = (unsigned char)(s >> 16);
  }
  write_jpeg(path, px, 64, 64, TJPF_RGB, TJSAMP_420, 90);
}

/* The dataset: ids 0..23 in train (8 per class, various sizes), 24..27 in val
 * (classes 1 and 2 only), lists with the same records. */
static void make_dataset(const char *dir)
{
  char p[1024], line[1200];
  mkdirs(dir, "train", NULL);
  mkdirs(dir, "val", NULL);
  FILE *tl, *vl;
  snprintf(p, sizeof p, "%s/train.txt", dir);
  tl = fopen(p, "w");
  snprintf(p, sizeof p, "%s/val.txt", dir);
  vl = fopen(p, "w");
  fprintf(tl, "# path label\n\n");
  int id = 0;
  for (int c = 0; c < 3; c++) {
    mkdirs(dir, "train", classes[c]);
    for (int k = 0; k < 8; k++, id++) {
      snprintf(p, sizeof p, "%s/train/%s/img_%02d.JPEG", dir, classes[c], k);
      write_coded(p, id, c, 40 + 8 * (k % 3), 36 + 12 * (k % 2));
      fprintf(tl, "train/%s/img_%02d.JPEG %d\n", classes[c], k, c);
    }
    snprintf(p, sizeof p, "%s/train/%s/README.txt", dir, classes[c]); /* ignored */
    write_bytes(p, "not an image\n", 13);
  }
  for (int c = 1; c < 3; c++) {
    mkdirs(dir, "val", classes[c]);
    for (int k = 0; k < 2; k++, id++) {
      snprintf(p, sizeof p, "%s/val/%s/v_%d.jpg", dir, classes[c], k);
      write_coded(p, id, c, 48, 48);
      snprintf(line, sizeof line, "val/%s/v_%d.jpg %d\n", classes[c], k, c);
      fputs(line, vl);
    }
  }
  fclose(tl);
  fclose(vl);
  /* bad/: the same plus three corrupt files in class 0 */
  char b[512];
  snprintf(b, sizeof b, "%s/bad", dir);
  mkdirs(b, "train", NULL);
  mkdirs(b, "val", NULL);
  id = 0;
  for (int c = 0; c < 3; c++) {
    mkdirs(b, "train", classes[c]);
    for (int k = 0; k < 8; k++, id++) {
      snprintf(p, sizeof p, "%s/train/%s/img_%02d.JPEG", b, classes[c], k);
      write_coded(p, id, c, 40, 40);
    }
  }
  mkdirs(b, "val", classes[1]);
  snprintf(p, sizeof p, "%s/val/%s/v.jpg", b, classes[1]);
  write_coded(p, 30, 1, 40, 40);
  size_t n;
  snprintf(p, sizeof p, "%s/train/%s/x_truncated.jpg", b, classes[0]);
  write_noisy(p);
  unsigned char *buf = read_all(p, &n);
  write_bytes(p, buf, n * 6 / 10);
  snprintf(p, sizeof p, "%s/train/%s/y_magic.jpg", b, classes[0]);
  buf[0] = 0x89, buf[1] = 'P', buf[2] = 'N', buf[3] = 'G';
  write_bytes(p, buf, n);
  snprintf(p, sizeof p, "%s/train/%s/z_empty.jpg", b, classes[0]);
  write_bytes(p, "", 0);
  free(buf);
}

static int id_of(const float *x, const struct dpt_dataset *d, int S, int *cls)
{
  /* centre pixel, denormalised */
  size_t c0 = (size_t)(S / 2) * S + S / 2, plane = (size_t)S * S;
  float r = (x[c0] * d->std[0] + d->mean[0]) * 255.0f, g = (x[plane + c0] * d->std[1] + d->mean[1]) * 255.0f;
  *cls = (int)lrintf((g - 40.0f) / 80.0f);
  return (int)lrintf((r - 10.0f) / 9.0f);
}

static void test_scan(const char *dir)
{
  struct dpt_dataset d, v;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {0};
  CHECK(dpt_data_load(&d, "imagenet", dir, 1, 0, 0, &o, &err) == 0, "scan: %s", err.msg);
  CHECK(d.n == 24 && d.num_classes == 3 && d.c == 3 && d.files && !d.pixels, "scan: n %d classes %d c %d", d.n,
        d.num_classes, d.c);
  for (int i = 0; i < d.n && i < 24; i++) {
    char want[1024];
    snprintf(want, sizeof want, "%s/train/%s/img_%02d.JPEG", dir, classes[i / 8], i % 8);
    CHECK(d.labels[i] == i / 8 && !strcmp(dpt_data_path(&d, i), want), "record %d: label %d path %s", i,
          d.labels[i], dpt_data_path(&d, i));
  }
  CHECK(dpt_data_load(&v, "imagenet", dir, 0, 0, 0, &o, &err) == 0, "val scan: %s", err.msg);
  CHECK(v.n == 4 && v.labels[0] == 1 && v.labels[3] == 2 && v.num_classes == 3, "val: n %d labels %d %d", v.n,
        v.n ? v.labels[0] : -9, v.n > 3 ? v.labels[3] : -9);
  dpt_data_free(&v);
  /* the list files give the same records */
  char p[1024];
  snprintf(p, sizeof p, "%s/train.txt", dir);
  o.train_list = p;
  struct dpt_dataset l;
  CHECK(dpt_data_load(&l, "imagenet", NULL, 1, 0, 0, &o, &err) == 0, "list: %s", err.msg);
  CHECK(l.n == 24 && l.num_classes == 3, "list: n %d classes %d", l.n, l.num_classes);
  for (int i = 0; i < l.n && i < 24; i++)
    CHECK(l.labels[i] == d.labels[i] && !strcmp(dpt_data_path(&l, i), dpt_data_path(&d, i)),
          "list record %d: %s vs %s", i, dpt_data_path(&l, i), dpt_data_path(&d, i));
  dpt_data_free(&l);
  dpt_data_free(&d);
  /* a val class unknown to train/, a missing folder, --num-classes too small */
  snprintf(p, sizeof p, "%s/val/n99_zebra", dir);
  mkdir(p, 0777);
  o.train_list = NULL;
  CHECK(dpt_data_load(&v, "imagenet", dir, 0, 0, 0, &o, &err) == DPT_E_INPUT && strstr(err.msg, "n99_zebra"),
        "unknown val class: %s", err.msg);
  rmdir(p);
  CHECK(dpt_data_load(&v, "imagenet", "/nonexistent/inet", 1, 0, 0, &o, &err) == DPT_E_INPUT &&
            strstr(err.msg, "/nonexistent/inet/train"), "missing dir: %s", err.msg);
  o.num_classes = 2;
  CHECK(dpt_data_load(&v, "imagenet", dir, 1, 0, 0, &o, &err) == DPT_E_INPUT && strstr(err.msg, "3 class folders"),
        "num-classes 2: %s", err.msg);
}

static void test_list_errors(const char *dir)
{
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {0};
  char p[1024];
  snprintf(p, sizeof p, "%s/bad-list.txt", dir);
  o.train_list = p;
  const char *cases[][2] = {
      {"train/n01_apple/img_00.JPEG 0\ntrain/n01_apple/img_01.JPEG zero\n", ":2: label 'zero'"},
      {"# c\ntrain/n01_apple/img_00.JPEG 0\n\ntrain/n01_apple/img_01.JPEG -1\n", ":4: label '-1'"},
      {"train/n01_apple/img_00.JPEG\n", ":1: expected \"path label\""},
      {"train/n01_apple/img_00.JPEG 0\ntrain/n01_apple/img_01.JPEG 5\n", "[0, 3)"},
      {"# nothing\n", "no records"},
  };
  for (int i = 0; i < 5; i++) {
    write_bytes(p, cases[i][0], strlen(cases[i][0]));
    o.num_classes = i == 3 ? 3 : 0;
    int rc = dpt_data_load(&d, "imagenet", NULL, 1, 0, 0, &o, &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, p) && strstr(err.msg, cases[i][1]), "list case %d: rc %d: %s", i, rc,
          err.msg);
    if (!rc) dpt_data_free(&d);
  }
  /* skip mode: bad labels dropped and counted; a path with a space is kept whole */
  const char *ok = "train/n01_apple/img_00.JPEG 0\nbad one.jpg x\n/abs/with space.jpg 2\nz.jpg 9999999\n";
  write_bytes(p, ok, strlen(ok));
  o.skip_bad = 1;
  o.num_classes = 0;
  CHECK(dpt_data_load(&d, "imagenet", NULL, 1, 0, 0, &o, &err) == 0, "skip list: %s", err.msg);
  CHECK(d.n == 2 && d.skipped == 2 && dpt_data_skipped(&d) == 2 && !strcmp(dpt_data_path(&d, 1), "/abs/with space.jpg") &&
            d.num_classes == 3, "skip list: n %d skipped %d path '%s'", d.n, d.skipped, d.n > 1 ? dpt_data_path(&d, 1) : "");
  dpt_data_free(&d);
}

static void test_decode(const char *dir)
{
  struct dpt_jpeg j;
  struct dpt_err err = {0};
  char p[1024];
  CHECK(dpt_data_jpeg_init(&j, &err) == 0, "init: %s", err.msg);
  /* gradient 64 x 48: R = x * 4, G = y * 5 */
  unsigned char px[64 * 48 * 3];
  for (int y = 0; y < 48; y++)
    for (int x = 0; x < 64; x++) px[(y * 64 + x) * 3] = (unsigned char)(x * 4), px[(y * 64 + x) * 3 + 1] = (unsigned char)(y * 5),
                                 px[(y * 64 + x) * 3 + 2] = 100;
  snprintf(p, sizeof p, "%s/grad.jpg", dir);
  write_jpeg(p, px, 64, 48, TJPF_RGB, TJSAMP_444, 100);
  CHECK(dpt_data_jpeg_read(&j, p, 7, &err) == 0 &&
            dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 0, p, 7, &err) == 0, "decode: %s", err.msg);
  CHECK(j.w == 64 && j.h == 48 && j.c == 3 && abs(j.pix[(10 * 64 + 20) * 3] - 80) <= 3 &&
            abs(j.pix[(10 * 64 + 20) * 3 + 1] - 50) <= 3, "decode: %dx%d px %d %d", j.w, j.h, j.pix[(10 * 64 + 20) * 3],
        j.pix[(10 * 64 + 20) * 3 + 1]);
  /* DCT scaling: min side 12 -> 1/4 (16 x 12) */
  CHECK(dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 12, p, 7, &err) == 0 && j.w == 16 && j.h == 12 &&
            j.src_w == 64, "scaled: %dx%d %s", j.w, j.h, err.msg);
  int rh, rw;
  dpt_data_jpeg_resized(&j, 24, &rh, &rw);
  CHECK(rh == 24 && rw == 32, "resized %dx%d", rh, rw);
  /* grayscale */
  CHECK(dpt_data_jpeg_decode(&j, j.file, j.file_len, 1, 0, p, 7, &err) == 0 && j.c == 1, "gray: %s", err.msg);
  {
    int want = (int)lrint(0.299 * 80 + 0.587 * 50 + 0.114 * 100);
    CHECK(abs(j.pix[10 * 64 + 20] - want) <= 3, "gray value %d want %d", j.pix[10 * 64 + 20], want);
  }
  /* CMYK (Adobe inverted): R = C * K / 255 */
  {
    unsigned char cm[16 * 16 * 4];
    for (int i = 0; i < 256; i++) cm[4 * i] = 200, cm[4 * i + 1] = 100, cm[4 * i + 2] = 50, cm[4 * i + 3] = 255;
    snprintf(p, sizeof p, "%s/cmyk.jpg", dir);
    write_jpeg(p, cm, 16, 16, TJPF_CMYK, TJSAMP_444, 100);
    CHECK(dpt_data_jpeg_read(&j, p, 3, &err) == 0 && dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 0, p, 3, &err) == 0 &&
              abs(j.pix[0] - 200) <= 3 && abs(j.pix[1] - 100) <= 3 && abs(j.pix[2] - 50) <= 3,
          "cmyk: %s px %d %d %d", err.msg, j.pix[0], j.pix[1], j.pix[2]);
  }
  /* corrupt: each names the file and the record */
  size_t n;
  snprintf(p, sizeof p, "%s/noisy.jpg", dir);
  write_noisy(p);
  unsigned char *buf = read_all(p, &n);
  const char *what[] = {"truncated", "magic", "empty", "header-only"};
  size_t lens[] = {n * 6 / 10, n, 0, 100};
  for (int k = 0; k < 4; k++) {
    unsigned char *c = malloc(n);
    memcpy(c, buf, n);
    if (k == 1) c[0] = 'G', c[1] = 'I', c[2] = 'F';
    snprintf(p, sizeof p, "%s/corrupt-%s.jpg", dir, what[k]);
    write_bytes(p, c, lens[k]);
    int rc = dpt_data_jpeg_read(&j, p, 41, &err);
    if (!rc) rc = dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 0, p, 41, &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, p) && strstr(err.msg, "record 41") && strstr(err.msg, "--skip-bad"),
          "%s: rc %d: %s", what[k], rc, err.msg);
    if (k == 0) CHECK(strstr(err.msg, "remature"), "truncated: %s", err.msg);
    if (k == 1) CHECK(strstr(err.msg, "Not a JPEG"), "magic: %s", err.msg);
    if (k == 2) CHECK(strstr(err.msg, "0 bytes"), "empty: %s", err.msg);
    free(c);
  }
  free(buf);
  CHECK(dpt_data_jpeg_read(&j, "/nonexistent/a.jpg", 2, &err) == DPT_E_INPUT && strstr(err.msg, "/nonexistent/a.jpg") &&
            strstr(err.msg, "record 2"), "missing: %s", err.msg);
  /* an oversized header is refused before any allocation */
  j.max_pixels = 100;
  snprintf(p, sizeof p, "%s/grad.jpg", dir);
  CHECK(dpt_data_jpeg_read(&j, p, 0, &err) == 0 && dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 0, p, 0, &err) ==
            DPT_E_INPUT && strstr(err.msg, "64 x 48"), "max pixels: %s", err.msg);
  dpt_data_jpeg_free(&j);
}

static void test_loader(const char *dir)
{
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {0};
  const int S = 16;
  CHECK(dpt_data_load(&d, "imagenet", dir, 1, 0, 0, &o, &err) == 0, "%s", err.msg);
  /* 2 ranks, batch 4: 3 steps each, disjoint; rank 0 threaded with 3 workers, rank 1 synchronous */
  int seen[24] = {0};
  for (int r = 0; r < 2; r++) {
    struct dpt_loader_opts lo = {.batch = 4, .rank = r, .size = 2, .seed = 3, .train = 1, .flip = 1, .out_size = S,
                                 .prefetch = r ? 0 : 2, .workers = 3};
    struct dpt_loader *L;
    CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "loader: %s", err.msg);
    if (!L) continue;
    CHECK(dpt_loader_steps(L) == 3, "steps %d", dpt_loader_steps(L));
    const float *x;
    const int *lab;
    int n;
    while ((n = dpt_loader_next(L, &x, &lab, NULL)) > 0) {
      CHECK(n == 4, "short batch %d", n);
      for (int b = 0; b < 4; b++) {
        int cls, id = id_of(x + (size_t)b * 3 * S * S, &d, S, &cls);
        CHECK(id >= 0 && id < 24 && cls == lab[b] && lab[b] == id / 8, "rank %d image id %d class %d label %d", r, id,
              cls, lab[b]);
        if (id >= 0 && id < 24) seen[id]++;
      }
    }
    CHECK(n == 0, "loader error: %s", dpt_loader_err(L)->msg);
    dpt_loader_destroy(L);
  }
  int dup = 0, tot = 0;
  for (int i = 0; i < 24; i++) dup += seen[i] > 1, tot += seen[i];
  CHECK(dup == 0 && tot == 24, "ranks overlap (%d duplicates) or miss images (%d seen)", dup, tot);
  /* determinism: same seed -> identical batches whatever the worker count; another seed differs */
  {
    struct dpt_loader_opts lo = {.batch = 8, .size = 1, .seed = 11, .train = 1, .flip = 1, .out_size = S,
                                 .prefetch = 3, .workers = 4};
    struct dpt_loader *A, *B, *C;
    dpt_loader_create(&A, &d, &lo, &err);
    lo.prefetch = 0;
    dpt_loader_create(&B, &d, &lo, &err);
    lo.seed = 12;
    dpt_loader_create(&C, &d, &lo, &err);
    size_t bytes = (size_t)8 * 3 * S * S * sizeof(float);
    int same = 1, differs = 0;
    for (int e = 1; e <= 2; e++) {
      dpt_loader_start(A, e, 0), dpt_loader_start(B, e, 0), dpt_loader_start(C, e, 0);
      const float *xa, *xb, *xc;
      const int *la, *lb, *lc;
      for (int st = 0; st < 3; st++) {
        dpt_loader_next(A, &xa, &la, NULL), dpt_loader_next(B, &xb, &lb, NULL), dpt_loader_next(C, &xc, &lc, NULL);
        same &= !memcmp(xa, xb, bytes) && !memcmp(la, lb, 8 * sizeof(int));
        differs |= memcmp(la, lc, 8 * sizeof(int)) != 0;
      }
    }
    CHECK(same, "seed 11: 4 workers and synchronous disagree");
    CHECK(differs, "seeds 11 and 12 gave the same order");
    dpt_loader_destroy(A), dpt_loader_destroy(B), dpt_loader_destroy(C);
  }
  dpt_data_free(&d);
  /* validation: every val image once across 2 ranks, padding -1 */
  {
    CHECK(dpt_data_load(&d, "imagenet", dir, 0, 0, 0, &o, &err) == 0, "%s", err.msg);
    int vs[32] = {0}, pads = 0;
    for (int r = 0; r < 2; r++) {
      struct dpt_loader_opts lo = {.batch = 3, .rank = r, .size = 2, .seed = 1, .train = 0, .out_size = S,
                                   .prefetch = 1, .workers = 2};
      struct dpt_loader *L;
      CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
      const float *x;
      const int *lab;
      for (int st = 0; st < dpt_loader_steps(L); st++) {
        CHECK(dpt_loader_next(L, &x, &lab, NULL) >= 0, "val: %s", dpt_loader_err(L)->msg);
        for (int b = 0; b < 3; b++) {
          int cls, id = id_of(x + (size_t)b * 3 * S * S, &d, S, &cls);
          if (lab[b] < 0) pads++;
          else if (id >= 24 && id < 28 && cls == lab[b]) vs[id]++;
        }
      }
      dpt_loader_destroy(L);
    }
    CHECK(vs[24] == 1 && vs[25] == 1 && vs[26] == 1 && vs[27] == 1 && pads == 2, "val coverage %d %d %d %d pads %d",
          vs[24], vs[25], vs[26], vs[27], pads);
    dpt_data_free(&d);
  }
}

/* crop / flip on the gradient image (64 x 48, out 24: shorter side resized to 27 -> 36 x 27) */
static void test_augment(const char *dir)
{
  char p[1024];
  snprintf(p, sizeof p, "%s/grad.txt", dir);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 64; i++) fprintf(f, "grad.jpg %d\n", i % 2);
  fclose(f);
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {.train_list = p};
  CHECK(dpt_data_load(&d, "imagenet", NULL, 1, 0, 0, &o, &err) == 0, "%s", err.msg);
  for (int k = 0; k < 3; k++) d.mean[k] = 0, d.std[k] = 1; /* raw [0, 1] values */
  const int S = 24, side = (S * 8 + 3) / 7, rw = (64 * side * 2 + 48) / 96, rh = side; /* 27, 36 */
  for (int train = 1; train >= 0; train--) {
    struct dpt_loader_opts lo = {.batch = 64, .size = 1, .seed = 5, .train = train, .flip = train, .out_size = S,
                                 .prefetch = 1, .workers = 2};
    struct dpt_loader *L;
    CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
    const float *x;
    const int *lab;
    CHECK(dpt_loader_next(L, &x, &lab, NULL) == 64, "augment batch: %s", dpt_loader_err(L)->msg);
    int flips = 0, bad = 0, oxs[64] = {0}, distinct = 0;
    for (int b = 0; b < 64; b++) {
      const float *im = x + (size_t)b * 3 * S * S;
      /* R = x_src * 4 / 255; resized column t samples x_src = (t + 0.5) * 64 / rw - 0.5 */
      float left = im[0] * 255.0f / 4.0f, right = im[S - 1] * 255.0f / 4.0f;
      int fl = left > right;
      float xs = fl ? right : left; /* source x of resized column ox */
      int ox = (int)lrintf((xs + 0.5f) * rw / 64.0f - 0.5f);
      float ys = im[S * S] * 255.0f / 5.0f; /* G of row 0 */
      int oy = (int)lrintf((ys + 0.5f) * rh / 48.0f - 0.5f);
      if (ox < 0 || ox > rw - S || oy < 0 || oy > rh - S) bad++;
      if (!train && (fl || abs(ox - (rw - S) / 2) > 1 || abs(oy - (rh - S) / 2) > 1)) bad++;
      flips += fl;
      oxs[b] = ox;
    }
    for (int b = 0; b < 64; b++) {
      int first = 1;
      for (int c = 0; c < b; c++) first &= oxs[c] != oxs[b];
      distinct += first;
    }
    CHECK(!bad, "%s: %d crops outside the resized %dx%d image or not centred", train ? "train" : "val", bad, rw, rh);
    if (train) {
      CHECK(flips > 16 && flips < 48, "flip probability: %d of 64", flips);
      CHECK(distinct >= 6, "crop offsets: only %d distinct x offsets", distinct);
    }
    dpt_loader_destroy(L);
  }
  dpt_data_free(&d);
}

static void test_corrupt(const char *dir)
{
  char b[512];
  snprintf(b, sizeof b, "%s/bad", dir);
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {0};
  CHECK(dpt_data_load(&d, "imagenet", b, 1, 0, 0, &o, &err) == 0 && d.n == 27, "bad scan: %d %s", d.n, err.msg);
  /* strict: the epoch stops with an error naming a corrupt file and its record */
  struct dpt_loader_opts lo = {.batch = 9, .size = 1, .seed = 2, .train = 1, .out_size = 16, .prefetch = 2,
                               .workers = 2};
  struct dpt_loader *L;
  CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
  const float *x;
  const int *lab;
  int n = 0, st;
  for (st = 0; st < 3 && (n = dpt_loader_next(L, &x, &lab, NULL)) >= 0; st++) {
  }
  const char *m = dpt_loader_err(L)->msg;
  CHECK(n == -1 && dpt_loader_err(L)->code == DPT_E_INPUT && strstr(m, "/bad/train/n01_apple/") && strstr(m, "(record ") &&
            (strstr(m, "x_truncated.jpg (record 8)") || strstr(m, "y_magic.jpg (record 9)") ||
             strstr(m, "z_empty.jpg (record 10)")), "strict: n %d: %s", n, m);
  dpt_loader_destroy(L);
  dpt_data_free(&d);
  /* --skip-bad: label -1, counted once per record over two epochs */
  o.skip_bad = 1;
  CHECK(dpt_data_load(&d, "imagenet", b, 1, 0, 0, &o, &err) == 0, "%s", err.msg);
  CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
  int real = 0, minus = 0, fails = 0;
  for (int e = 0; e < 2; e++) {
    dpt_loader_start(L, e, 0);
    for (st = 0; st < 3; st++) {
      n = dpt_loader_next(L, &x, &lab, NULL);
      if (n < 0) {
        fails++;
        continue;
      }
      real += n;
      for (int k = 0; k < 9; k++) minus += lab[k] < 0;
    }
  }
  CHECK(!fails && real == 48 && minus == 6 && dpt_data_skipped(&d) == 3, "skip: fails %d real %d minus %d skipped %d",
        fails, real, minus, dpt_data_skipped(&d));
  dpt_loader_destroy(L);
  dpt_data_free(&d);
}

/* Seeds for tests/fuzz/fuzz_jpeg.c: 3 flag bytes (see there) + a small JPEG. */
static void fuzz_seed(const char *dir, const char *name, const unsigned char *flags, const unsigned char *px, int w,
                      int h, int pf, int subsamp, int tjflags, size_t cut)
{
  char p[1024];
  tjhandle t = tjInitCompress();
  unsigned char *buf = NULL;
  unsigned long len = 0;
  if (!t || tjCompress2(t, px, w, 0, h, pf, &buf, &len, subsamp, 75, tjflags)) {
    fprintf(stderr, "tjCompress2(%s): %s\n", name, tjGetErrorStr2(t));
    exit(1);
  }
  unsigned char *f = malloc(len + 3);
  memcpy(f, flags, 3);
  memcpy(f + 3, buf, len);
  snprintf(p, sizeof p, "%s/%s", dir, name);
  write_bytes(p, f, 3 + (cut && cut < len ? cut : len));
  free(f);
  tjFree(buf);
  tjDestroy(t);
}

static void fuzz_corpus(const char *dir)
{
  unsigned char px[32 * 24 * 4];
  mkdir(dir, 0777);
  for (int i = 0; i < 32 * 24 * 4; i++) px[i] = (unsigned char)((i * 37) ^ (i >> 5) * 11);
  const unsigned char rgb_scaled[3] = {0x02, 15, 0x44}, gray_flip[3] = {0x11, 7, 0x53}, full[3] = {0x0e, 31, 0x00},
                      out_crop[3] = {0x17, 63, 0xf0};
  fuzz_seed(dir, "rgb420-32x24", rgb_scaled, px, 32, 24, TJPF_RGB, TJSAMP_420, 0, 0);
  fuzz_seed(dir, "gray-16x16-flip", gray_flip, px, 16, 16, TJPF_GRAY, TJSAMP_GRAY, 0, 0);
  fuzz_seed(dir, "rgb444-progressive-24x16", full, px, 24, 16, TJPF_RGB, TJSAMP_444, TJFLAG_PROGRESSIVE, 0);
  fuzz_seed(dir, "rgb422-to-gray-outside", out_crop, px, 32, 8, TJPF_RGB, TJSAMP_422, 0, 0);
  fuzz_seed(dir, "cmyk-8x8", rgb_scaled, px, 8, 8, TJPF_CMYK, TJSAMP_444, 0, 0);
  fuzz_seed(dir, "truncated-rgb420", rgb_scaled, px, 32, 24, TJPF_RGB, TJSAMP_420, 0, 400);
}

int main(int argc, char **argv)
{
  if (argc == 3 && !strcmp(argv[1], "--make")) {
    make_dataset(argv[2]);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "--fuzz-corpus")) {
    fuzz_corpus(argv[2]);
    return 0;
  }
  char dir[256], cmd[400];
  snprintf(dir, sizeof dir, "/tmp/dpt-test-jpeg-%d", (int)getpid());
  make_dataset(dir);
  test_scan(dir);
  test_list_errors(dir);
  test_decode(dir);
  test_loader(dir);
  test_augment(dir);
  test_corrupt(dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: imagenet folders / lists, decode (RGB, gray, CMYK, DCT scaling), sharding, determinism, "
              "crop/flip, corrupt JPEGs (error or skipped + counted)\n");
  return failures ? 1 : 0;
}
