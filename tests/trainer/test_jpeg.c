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

#include "dpt_augment.h"
#include "dpt_data.h"
#include "dpt_jpeg_hdr.h"

#include "dpt_check.h"
#include "jpeg_cases.h"

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

static int same_crop(const struct dpt_crop *a, const struct dpt_crop *b)
{
  return a->x0 == b->x0 && a->y0 == b->y0 && a->w == b->w && a->h == b->h && a->flip == b->flip;
}

/* Expected raw value of a gradient channel (value = gain x source coordinate) at output index
 * k of a box [b0, b0 + len) resized to S (half-pixel centres, clamped to n source pixels). */
static float grad_at(double b0, double len, int k, int S, int n, float gain)
{
  double s = b0 + (k + 0.5) * len / S - 0.5;
  if (s < 0) s = 0;
  if (s > n - 1) s = n - 1;
  return (float)(gain * s);
}

/* The loader's crops come from dpt_augment_crop (the function the GPU path uses too):
 * on the gradient image (64 x 48: R = 4 x, G = 5 y) every output pixel of the CPU
 * path sits where dpt_augment_crop's box puts it; dpt_loader_plan (the GPU path's
 * planner) reports the same box; random-resized crops vary in place, size and flip;
 * validation crops are centred; and the fast path (DCT scaling) is bit-identical to
 * decoding + sampling by hand with the same box. */
static void test_augment(const char *dir)
{
  char p[1024], img[1024];
  snprintf(p, sizeof p, "%s/grad.txt", dir);
  snprintf(img, sizeof img, "%s/grad.jpg", dir);
  FILE *f = fopen(p, "w");
  for (int i = 0; i < 64; i++) fprintf(f, "grad.jpg %d\n", i % 2);
  fclose(f);
  struct dpt_dataset d;
  struct dpt_err err = {0};
  struct dpt_data_opts o = {.train_list = p};
  CHECK(dpt_data_load(&d, "imagenet", NULL, 1, 0, 0, &o, &err) == 0, "%s", err.msg);
  for (int k = 0; k < 3; k++) d.mean[k] = 0, d.std[k] = 1; /* raw [0, 1] values */
  const int S = 24;
  for (int train = 1; train >= 0; train--) {
    struct dpt_loader_opts lo = {.batch = 64, .size = 1, .seed = 5, .train = train, .flip = train, .out_size = S,
                                 .prefetch = 1, .workers = 2, .exact_decode = 1};
    struct dpt_augment aug;
    dpt_augment_default(&aug, train, S, 5);
    struct dpt_loader *L;
    CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
    dpt_loader_start(L, 3, 0);
    const float *x;
    const int *lab;
    CHECK(dpt_loader_next(L, &x, &lab, NULL) == 64, "augment batch: %s", dpt_loader_err(L)->msg);
    int flips = 0, off = 0, plan_diff = 0, x0s[64] = {0}, distinct = 0;
    double amin = 1e9, amax = 0;
    float worst = 0;
    for (int b = 0; b < 64; b++) {
      struct dpt_loader_plan pl;
      struct dpt_crop c;
      CHECK(dpt_loader_plan(L, 0, b, 1, &pl, &err) == 0, "plan: %s", err.msg);
      dpt_augment_crop(&aug, 3, pl.record, 64, 48, &c);
      plan_diff += !same_crop(&c, &pl.crop) || pl.src_w != 64 || pl.src_h != 48 ||
                   pl.route != DPT_JPEG_ROUTE_GPU_HW;
      if (c.x0 < 0 || c.y0 < 0 || c.x0 + c.w > 64 + 1e-9 || c.y0 + c.h > 48 + 1e-9) off++;
      const float *im = x + (size_t)b * 3 * S * S;
      for (int k = 0; k < S; k++) { /* R along row 0, G along column 0 */
        float r = im[k] * 255.0f, g = im[S * S + (size_t)k * S] * 255.0f;
        float er = grad_at(c.x0, c.w, c.flip ? S - 1 - k : k, S, 64, 4.0f), eg = grad_at(c.y0, c.h, k, S, 48, 5.0f);
        worst = fmaxf(worst, fmaxf(fabsf(r - er), fabsf(g - eg)));
      }
      flips += c.flip;
      x0s[b] = (int)c.x0;
      amin = fmin(amin, c.w * c.h / (64.0 * 48));
      amax = fmax(amax, c.w * c.h / (64.0 * 48));
      if (!train) {
        /* shorter side 48 -> 27, 64 -> 36: centred 24 x 24 at (1, 6) of the resized image */
        const double rw = 36, rh = 27;
        CHECK(!c.flip && fabs(c.x0 - 6 * 64 / rw) < 1e-9 && fabs(c.y0 - 1 * 48 / rh) < 1e-9 &&
                  fabs(c.w - S * 64 / rw) < 1e-9 && fabs(c.h - S * 48 / rh) < 1e-9,
              "val box %g %g %g %g flip %d", c.x0, c.y0, c.w, c.h, c.flip);
      }
    }
    for (int b = 0; b < 64; b++) {
      int first = 1;
      for (int c = 0; c < b; c++) first &= x0s[c] != x0s[b];
      distinct += first;
    }
    const char *what = train ? "train" : "val";
    CHECK(!plan_diff, "%s: the GPU path's plan differs from dpt_augment_crop for %d of 64 images", what, plan_diff);
    CHECK(!off, "%s: %d boxes outside the 64 x 48 image", what, off);
    /* q100 4:4:4 gradient: the decoded values are within 3 of gain x coordinate */
    CHECK(worst <= 3.0f, "%s: output pixels %.2f away from where dpt_augment_crop's box puts them", what, worst);
    if (train) {
      CHECK(flips > 16 && flips < 48, "flip probability: %d of 64", flips);
      CHECK(distinct >= 6, "crop offsets: only %d distinct x offsets", distinct);
      CHECK(amin >= 0.08 * 0.9 && amax <= 1.0 && amax - amin > 0.3, "crop areas %.3f .. %.3f of the image", amin, amax);
    }
    dpt_loader_destroy(L);
  }
  /* the fast path (DCT scaling towards the box) = decode + sample by hand with the same box */
  {
    const int S2 = 8;
    struct dpt_loader_opts lo = {.batch = 64, .size = 1, .seed = 9, .train = 1, .flip = 1, .out_size = S2};
    struct dpt_augment aug;
    struct dpt_loader *L;
    struct dpt_jpeg j;
    dpt_augment_default(&aug, 1, S2, 9);
    CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0 && dpt_data_jpeg_init(&j, &err) == 0, "%s", err.msg);
    const float *x;
    const int *lab;
    CHECK(dpt_loader_next(L, &x, &lab, NULL) == 64, "fast batch: %s", dpt_loader_err(L)->msg);
    float *ref = malloc(3 * S2 * S2 * sizeof *ref);
    int differ = 0, scaled = 0;
    CHECK(dpt_data_jpeg_read(&j, img, 0, &err) == 0, "%s", err.msg);
    for (int b = 0; b < 64; b++) {
      struct dpt_loader_plan pl;
      struct dpt_crop c;
      dpt_loader_plan(L, 0, b, 1, &pl, &err);
      dpt_augment_crop(&aug, 0, pl.record, 64, 48, &c);
      int ms = dpt_augment_min_side(&c, S2, 64, 48);
      CHECK(dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, ms, img, 0, &err) == 0 &&
                dpt_data_jpeg_sample(&j, &c, S2, d.mean, d.std, ref) == 0, "ref: %s", err.msg);
      scaled += j.w < 64;
      differ += memcmp(ref, x + (size_t)b * 3 * S2 * S2, 3 * S2 * S2 * sizeof *ref) != 0;
    }
    CHECK(!differ, "DCT-scaled loader output differs from decode + sample with dpt_augment_crop's box in %d of 64",
          differ);
    CHECK(scaled > 0, "no crop was DCT-scaled (out %d): the fast path was not exercised", S2);
    free(ref);
    dpt_data_jpeg_free(&j);
    dpt_loader_destroy(L);
  }
  dpt_data_free(&d);
}

/* dpt_augment_crop's parameters: ImageNet's RandomResizedCrop ranges, determinism, the
 * fallback for extreme shapes, the validation box, the sampling tables. */
static void test_augment_params(void)
{
  struct dpt_augment a;
  struct dpt_crop c, c2;
  dpt_augment_default(&a, 1, 224, 42);
  CHECK(a.resize == 256 && a.scale_min == 0.08 && a.ratio_max > 1.333 && a.ratio_max < 1.334, "defaults");
  int flips = 0, off = 0, bad_area = 0, bad_ratio = 0, fallback = 0;
  for (long i = 0; i < 20000; i++) {
    dpt_augment_crop(&a, 1, i, 500, 375, &c);
    off += c.x0 < 0 || c.y0 < 0 || c.x0 + c.w > 500 || c.y0 + c.h > 375 || c.x0 != floor(c.x0) || c.w < 1;
    double area = c.w * c.h / (500.0 * 375), ratio = c.w / c.h;
    bad_area += area < 0.08 * 0.97 || area > 1.0;
    fallback += c.w == 500 && c.h == 375;
    bad_ratio += !(ratio > 0.75 * 0.97 && ratio < 4.0 / 3.0 * 1.03) && !(c.w == 500 && c.h == 375);
    flips += c.flip;
  }
  CHECK(!off && !bad_area && !bad_ratio, "20000 boxes: %d outside / not integer, %d area, %d ratio", off, bad_area,
        bad_ratio);
  CHECK(flips > 9700 && flips < 10300, "flips %d of 20000", flips);
  CHECK(fallback < 200, "%d whole-image fallbacks of 20000 (the 10 draws should nearly always fit)", fallback);
  dpt_augment_crop(&a, 1, 7, 500, 375, &c);
  dpt_augment_crop(&a, 1, 7, 500, 375, &c2);
  CHECK(same_crop(&c, &c2), "same (seed, epoch, record): different box");
  dpt_augment_crop(&a, 2, 7, 500, 375, &c2);
  CHECK(!same_crop(&c, &c2), "epoch 1 and 2 of record 7: the same box");
  /* 1000 x 10: no draw fits (h > 10), torchvision's fallback: h = 10, w = round(10 x 4/3) = 13, centred */
  dpt_augment_crop(&a, 0, 3, 1000, 10, &c);
  CHECK(c.w == 13 && c.h == 10 && c.x0 == (1000 - 13) / 2 && c.y0 == 0, "fallback box %g %g %g %g", c.x0, c.y0,
        c.w, c.h);
  dpt_augment_crop(&a, 0, 3, 10, 1000, &c);
  CHECK(c.w == 10 && c.h == 13 && c.y0 == (1000 - 13) / 2, "tall fallback box %g %g %g %g", c.x0, c.y0, c.w, c.h);
  /* validation 500 x 375 at 224: resize to 341 x 256, centred at (58, 16) */
  dpt_augment_default(&a, 0, 224, 42);
  dpt_augment_crop(&a, 5, 9, 500, 375, &c);
  CHECK(!c.flip && fabs(c.x0 - 58 * 500 / 341.0) < 1e-9 && fabs(c.y0 - 16 * 375 / 256.0) < 1e-9 &&
            fabs(c.w - 224 * 500 / 341.0) < 1e-9 && fabs(c.h - 224 * 375 / 256.0) < 1e-9,
        "val box %g %g %g %g", c.x0, c.y0, c.w, c.h);
  CHECK(dpt_augment_min_side(&c, 224, 500, 375) == 256, "val min side %d", dpt_augment_min_side(&c, 224, 500, 375));
  /* tables: the whole 6 x 4 image at its own size samples every pixel exactly; flipped, mirrored;
   * at half size (decoded 3 x 2) the positions scale */
  int cx[12], cy[12];
  float wx[6], wy[6];
  struct dpt_crop whole = {0, 0, 6, 4, 0};
  dpt_augment_tables(&whole, 4, 6, 4, 6, 4, cx, wx, cy, wy);
  CHECK(cy[0] == 0 && cy[2] == 1 && cy[6] == 3 && cy[7] == 3 && wy[0] == 0 && wy[3] == 0, "identity rows");
  dpt_augment_tables(&whole, 6, 6, 4, 6, 4, cx, wx, cy, wy);
  CHECK(cx[0] == 0 && cx[10] == 5 && wx[2] == 0, "identity columns");
  whole.flip = 1;
  dpt_augment_tables(&whole, 6, 6, 4, 6, 4, cx, wx, cy, wy);
  CHECK(cx[0] == 5 && cx[10] == 0 && wx[0] == 0, "flipped columns %d %d", cx[0], cx[10]);
  whole.flip = 0;
  dpt_augment_tables(&whole, 6, 6, 4, 3, 2, cx, wx, cy, wy);
  /* output column 1: source 1.0 -> decoded (1.5 * 0.5 - 0.5) = 0.25 */
  CHECK(cx[2] == 0 && cx[3] == 1 && fabsf(wx[1] - 0.25f) < 1e-6f, "half-size column 1: %d %d %g", cx[2], cx[3],
        (double)wx[1]);
}

/* The corner cases (jpeg_cases.h): which decoder the GPU path gives each file
 * (decided on the host from the header), what the CPU decoder makes of it, and the
 * loader's --skip-bad counts over a folder of them. */
static void test_corner_cases(const char *dir)
{
  char cdir[512], p[1024];
  snprintf(cdir, sizeof cdir, "%s/corner", dir);
  const struct jpeg_case *jc = jpeg_cases_make(cdir);
  struct dpt_jpeg j, ref;
  struct dpt_err err = {0};
  CHECK(dpt_data_jpeg_init(&j, &err) == 0 && dpt_data_jpeg_init(&ref, &err) == 0, "%s", err.msg);
  snprintf(p, sizeof p, "%s/train/c0/base420.jpg", cdir);
  CHECK(dpt_data_jpeg_read(&ref, p, 0, &err) == 0 &&
            dpt_data_jpeg_decode(&ref, ref.file, ref.file_len, 3, 0, p, 0, &err) == 0, "base420: %s", err.msg);
  for (int i = 0; i < JPEG_CASES_N; i++) {
    struct dpt_jpeg_hdr h;
    const char *why, *why_nohw;
    snprintf(p, sizeof p, "%s/train/c0/%s.jpg", cdir, jc[i].name);
    CHECK(dpt_data_jpeg_read(&j, p, i, &err) == 0, "%s", err.msg);
    int prc = dpt_jpeg_hdr_parse(j.file, j.file_len, &h);
    int r = (int)dpt_jpeg_hdr_route(&h, prc, 1, 0, &why), r0 = (int)dpt_jpeg_hdr_route(&h, prc, 0, 0, &why_nohw);
    CHECK(r == jc[i].route_hw && !strcmp(why, jc[i].why), "%s: route %d (%s), want %d (%s)", jc[i].name, r, why,
          jc[i].route_hw, jc[i].why);
    /* without the hardware decoder the hardware's files go to nvJPEG's hybrid decoder */
    CHECK(r0 == (r == DPT_JPEG_ROUTE_GPU_HW ? DPT_JPEG_ROUTE_GPU : r), "%s: no-hw route %d", jc[i].name, r0);
    CHECK(h.orientation == jc[i].orientation, "%s: orientation %d", jc[i].name, h.orientation);
    if (jc[i].decodes && strcmp(jc[i].name, "cmyk"))
      CHECK(!prc && h.width == 96 && h.height == 72 && h.complete && h.scans >= 1, "%s: header %dx%d complete %d",
            jc[i].name, h.width, h.height, h.complete);
    int rc = dpt_data_jpeg_decode(&j, j.file, j.file_len, 3, 0, p, i, &err);
    CHECK((rc == 0) == jc[i].decodes, "%s: decode rc %d (%s), want it %s", jc[i].name, rc, rc ? err.msg : "",
          jc[i].decodes ? "decoded" : "refused");
    if (rc) {
      CHECK(rc == DPT_E_INPUT && strstr(err.msg, p) && strstr(err.msg, "--skip-bad"), "%s: %s", jc[i].name, err.msg);
      continue;
    }
    size_t bytes = (size_t)96 * 72 * 3;
    if (!strcmp(jc[i].name, "exif6") || !strcmp(jc[i].name, "progressive"))
      /* the same coefficients as base420: the same pixels; EXIF rotation is not applied */
      CHECK(j.w == 96 && j.h == 72 && !memcmp(j.pix, ref.pix, bytes), "%s: %dx%d, pixels differ from base420",
            jc[i].name, j.w, j.h);
    if (!strcmp(jc[i].name, "gray")) {
      int same = 1;
      for (size_t k = 0; k < bytes; k += 3) same &= j.pix[k] == j.pix[k + 1] && j.pix[k] == j.pix[k + 2];
      CHECK(same, "gray JPEG decoded to RGB is not R = G = B");
    }
  }
  dpt_data_jpeg_free(&j);
  dpt_data_jpeg_free(&ref);

  /* the folder: 15 cases in c0 + 2 plain files in c1 = 17 records, 5 undecodable */
  struct dpt_dataset d;
  struct dpt_data_opts o = {0};
  CHECK(dpt_data_load(&d, "imagenet", cdir, 1, 0, 0, &o, &err) == 0 && d.n == 17, "corner scan: %d %s", d.n, err.msg);
  struct dpt_loader_opts lo = {.batch = 17, .size = 1, .seed = 4, .train = 1, .flip = 1, .out_size = 16,
                               .prefetch = 1, .workers = 2};
  struct dpt_loader *L;
  const float *x;
  const int *lab;
  CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
  /* the GPU path's routing of the batch (device-free): 7 to nvJPEG's hardware decoder, 2 to its
   * hybrid decoder, 8 to the CPU decoder; the crop boxes of the decodable ones are dpt_augment_crop's */
  int routes[3] = {0}, boxes = 0;
  for (int b = 0; b < 17; b++) {
    struct dpt_loader_plan pl;
    CHECK(dpt_loader_plan(L, 0, b, 1, &pl, &err) == 0 && pl.route >= 0, "plan %d: %s", b, err.msg);
    if (pl.route >= 0) routes[pl.route]++;
    if (pl.route != DPT_JPEG_ROUTE_CPU) {
      struct dpt_augment a;
      struct dpt_crop c;
      dpt_augment_default(&a, 1, 16, 4);
      dpt_augment_crop(&a, 0, pl.record, pl.src_w, pl.src_h, &c);
      boxes += same_crop(&c, &pl.crop);
    }
  }
  CHECK(routes[DPT_JPEG_ROUTE_GPU_HW] == 8 && routes[DPT_JPEG_ROUTE_GPU] == 2 && routes[DPT_JPEG_ROUTE_CPU] == 7,
        "routes hw %d gpu %d cpu %d, want 8 2 7", routes[0], routes[1], routes[2]);
  CHECK(boxes == 10, "%d of 10 GPU-routed boxes equal dpt_augment_crop's", boxes);
  /* strict: the batch fails, naming one of the undecodable files */
  CHECK(dpt_loader_next(L, &x, &lab, NULL) == -1 && strstr(dpt_loader_err(L)->msg, "/corner/train/c0/") &&
            strstr(dpt_loader_err(L)->msg, "(record "), "strict corner batch: %s", dpt_loader_err(L)->msg);
  dpt_loader_destroy(L);
  dpt_data_free(&d);
  /* --skip-bad: 12 images and 5 label -1 per epoch, each bad file counted once over 2 epochs */
  o.skip_bad = 1;
  CHECK(dpt_data_load(&d, "imagenet", cdir, 1, 0, 0, &o, &err) == 0, "%s", err.msg);
  CHECK(dpt_loader_create(&L, &d, &lo, &err) == 0, "%s", err.msg);
  /* the create's own start prefetches epoch 0's batch; the loop's dpt_loader_start(L, 0, 0) after
   * it is decoded must keep it (the stats below count every decode: 36 when it was thrown away) */
  struct dpt_loader_stats st;
  for (int t = 0; t < 12000; t++) { /* up to 120 s (valgrind on a loaded machine) */
    dpt_loader_stats(L, &st);
    if (st.images + st.failed >= 17) break;
    usleep(10000);
  }
  CHECK(st.images == 12 && st.failed == 5, "prefetch of epoch 0: images %ld failed %ld", st.images, st.failed);
  int real = 0, minus = 0;
  for (int e = 0; e < 2; e++) {
    dpt_loader_start(L, e, 0);
    int n = dpt_loader_next(L, &x, &lab, NULL);
    CHECK(n == 12, "epoch %d: %d real images: %s", e, n, n < 0 ? dpt_loader_err(L)->msg : "");
    real += n > 0 ? n : 0;
    for (int b = 0; b < 17; b++) minus += lab[b] < 0;
  }
  dpt_loader_stats(L, &st);
  CHECK(real == 24 && minus == 10 && dpt_data_skipped(&d) == 5, "skip: real %d minus %d skipped %d", real, minus,
        dpt_data_skipped(&d));
  CHECK(st.images == 24 && st.cpu == 24 && st.failed == 5 && st.gpu_hw == 0 && st.gpu_refused == 0,
        "stats: images %ld cpu %ld failed %ld hw %ld refused %ld", st.images, st.cpu, st.failed, st.gpu_hw,
        st.gpu_refused);
  CHECK(!strcmp(dpt_loader_decoder(L), "libturbojpeg"), "decoder %s", dpt_loader_decoder(L));
  dpt_loader_destroy(L);
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
  /* the router's cases (jpeg_cases.h edits): big-endian EXIF orientation, Adobe transform 0 with JFIF
   * (still YCbCr), lossless frame, 4:1:1; with the training recipe's random-resized crop (flag bit 5) */
  static const unsigned char exif[] = {0xFF, 0xE1, 0x00, 34,  'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                                       0,    1,    0x01, 0x12, 0,   3,   0,   0,   0, 1, 0,   3,   0,  0, 0, 0, 0, 0};
  static const unsigned char adobe[] = {0xFF, 0xEE, 0, 14, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, 0};
  const unsigned char rrc[3] = {0x20, 23, 0x05}, rrc_gray[3] = {0x21, 40, 0x31};
  unsigned long n;
  char p[1024];
  unsigned char *b = jc_jpeg(40, 30, TJPF_RGB, TJSAMP_420, 0, &n), *o = malloc(n + 64);
  memcpy(o, rrc, 3);
  memcpy(o + 3, b, 2);
  memcpy(o + 5, exif, sizeof exif);
  memcpy(o + 5 + sizeof exif, b + 2, n - 2);
  snprintf(p, sizeof p, "%s/exif3-bigendian-rrc", dir);
  write_bytes(p, o, 3 + n + sizeof exif);
  memcpy(o + 5, adobe, sizeof adobe);
  memcpy(o + 5 + sizeof adobe, b + 2, n - 2);
  snprintf(p, sizeof p, "%s/adobe0-with-jfif-rrc", dir);
  write_bytes(p, o, 3 + n + sizeof adobe);
  memcpy(o + 3, b, n);
  o[3 + jc_sof0(b, n) + 1] = 0xC3;
  snprintf(p, sizeof p, "%s/lossless-sof3", dir);
  write_bytes(p, o, 3 + n);
  free(b);
  b = jc_jpeg(40, 30, TJPF_RGB, TJSAMP_411, 0, &n);
  memcpy(o, rrc_gray, 3);
  memcpy(o + 3, b, n);
  snprintf(p, sizeof p, "%s/rgb411-gray-rrc", dir);
  write_bytes(p, o, 3 + n);
  free(b);
  free(o);
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
  test_augment_params();
  test_augment(dir);
  test_corrupt(dir);
  test_corner_cases(dir);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: imagenet folders / lists, decode (RGB, gray, CMYK, DCT scaling), sharding, determinism, "
              "crop/flip, corrupt JPEGs (error or skipped + counted)\n");
  return failures ? 1 : 0;
}
