/* test_data: Fashion-MNIST IDX reader (real files + corrupted copies), CIFAR-10
 * reader errors, and the loader's sharding / shuffle / augmentation / prefetch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dpt_data.h"

#include "dpt_check.h"

static char tmpdir[256];

static void put_be32(unsigned char *p, unsigned v)
{
  p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

/* IDX pair with n images of 4x4; tweaks: bad magic, truncation, a bad label */
static void write_idx(const char *tag, int n, unsigned magic, int truncate, int bad_label_at,
                      char *ip, char *lp)
{
  sprintf(ip, "%s/%s-images", tmpdir, tag);
  sprintf(lp, "%s/%s-labels", tmpdir, tag);
  unsigned char h[16];
  FILE *f = fopen(ip, "wb");
  put_be32(h, magic), put_be32(h + 4, n), put_be32(h + 8, 4), put_be32(h + 12, 4);
  fwrite(h, 1, 16, f);
  for (int i = 0; i < n * 16 - truncate; i++) fputc(i & 255, f);
  fclose(f);
  f = fopen(lp, "wb");
  put_be32(h, 0x801), put_be32(h + 4, n);
  fwrite(h, 1, 8, f);
  for (int i = 0; i < n; i++) fputc(i == bad_label_at ? 42 : i % 10, f);
  fclose(f);
}

static int decode(const float *x) { return (int)lrintf(x[0] * 255.0f) + 256 * (int)lrintf(x[1] * 255.0f); }

struct counting_alloc {
  void *block[16];
  int n, live, bad_free;
};
static void *counting_alloc(void *ctx, size_t bytes)
{
  struct counting_alloc *c = ctx;
  if (c->n == 16) return NULL;
  return c->block[c->n++] = malloc(bytes), c->live++, c->block[c->n - 1];
}
static void counting_free(void *ctx, void *p)
{
  struct counting_alloc *c = ctx;
  int k = -1;
  for (int i = 0; i < c->n; i++)
    if (c->block[i] == p) k = i;
  if (k < 0 || !p) {
    c->bad_free++;
    return;
  }
  free(p);
  c->block[k] = NULL; /* a second free of it is a bad one */
  c->live--;
}

int main(void)
{
  struct dpt_err err = {0};
  struct dpt_dataset d;
  struct dpt_data_opts o = {0};
  snprintf(tmpdir, sizeof tmpdir, "/tmp/dpt-test-data-%d", (int)getpid());
  char cmd[300];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", tmpdir);
  if (system(cmd)) return 1;

  /* 1. the real Debian files (gzip), if installed */
  if (access(DPT_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", R_OK) == 0) {
    CHECK(dpt_data_load(&d, "fashion-mnist", NULL, 0, 0, 0, &o, &err) == 0, "%s", err.msg);
    CHECK(d.n == 10000 && d.h == 28 && d.w == 28 && d.c == 1, "t10k: %d images %dx%d", d.n, d.h, d.w);
    int per[10] = {0};
    for (int i = 0; i < d.n; i++) per[d.labels[i]]++;
    for (int k = 0; k < 10; k++) CHECK(per[k] == 1000, "t10k class %d has %d images", k, per[k]);
    double mean = 0;
    for (size_t i = 0; i < (size_t)d.n * 784; i++) mean += d.pixels[i];
    mean /= d.n * 784.0 * 255.0;
    CHECK(fabs(mean - 0.2868) < 0.002, "t10k mean pixel %.4f (Fashion-MNIST test set: 0.2868)", mean);
    dpt_data_free(&d);
  } else {
    printf("note: dataset-fashion-mnist not installed, real-file checks skipped\n");
  }

  /* 2. corrupted inputs: each error names the file and the record */
  char ip[512], lp[512];
  write_idx("good", 30, 0x803, 0, -1, ip, lp);
  CHECK(dpt_data_load_idx(&d, ip, lp, &o, &err) == 0 && d.n == 30 && d.labels[13] == 3, "good: %s", err.msg);
  dpt_data_free(&d);
  /* the same through gzip */
  {
    char gz[600], buf[4096];
    snprintf(gz, sizeof gz, "%s/gzd-images.gz", tmpdir);
    FILE *f = fopen(ip, "rb");
    gzFile g = gzopen(gz, "wb");
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, f)) > 0) gzwrite(g, buf, (unsigned)k);
    fclose(f);
    gzclose(g);
    gz[strlen(gz) - 3] = 0; /* reader adds .gz when the plain file is missing */
    CHECK(dpt_data_load_idx(&d, gz, lp, &o, &err) == 0 && d.n == 30, "gz: %s", err.msg);
    dpt_data_free(&d);
  }
  write_idx("magic", 30, 0x802, 0, -1, ip, lp);
  CHECK(dpt_data_load_idx(&d, ip, lp, &o, &err) == DPT_E_INPUT && strstr(err.msg, ip) &&
            strstr(err.msg, "magic 0x00000802"), "wrong magic: %s", err.msg);
  write_idx("trunc", 30, 0x803, 20, -1, ip, lp);
  CHECK(dpt_data_load_idx(&d, ip, lp, &o, &err) == DPT_E_INPUT && strstr(err.msg, ip) &&
            strstr(err.msg, "image 28 of 30"), "truncated: %s", err.msg);
  write_idx("label", 30, 0x803, 0, 17, ip, lp);
  CHECK(dpt_data_load_idx(&d, ip, lp, &o, &err) == DPT_E_INPUT && strstr(err.msg, lp) &&
            strstr(err.msg, "record 17 has label 42"), "bad label: %s", err.msg);
  o.skip_bad = 1;
  CHECK(dpt_data_load_idx(&d, ip, lp, &o, &err) == 0 && d.n == 29 && d.skipped == 1 &&
            d.labels[17] == 8 && d.pixels[17 * 16] == (unsigned char)(18 * 16), "skip bad: n %d skipped %d", d.n, d.skipped);
  dpt_data_free(&d);
  o.skip_bad = 0;
  {
    char ip2[512], lp2[512];
    write_idx("other", 20, 0x803, 0, -1, ip2, lp2);
    write_idx("good", 30, 0x803, 0, -1, ip, lp);
    CHECK(dpt_data_load_idx(&d, ip, lp2, &o, &err) == DPT_E_INPUT && strstr(err.msg, "20 labels") &&
              strstr(err.msg, "30 images"), "count mismatch: %s", err.msg);
  }
  CHECK(dpt_data_load_idx(&d, "/nonexistent/x", lp, &o, &err) == DPT_E_INPUT && strstr(err.msg, "/nonexistent/x"),
        "missing: %s", err.msg);
  /* CIFAR-10: a truncated test batch */
  {
    char p[600];
    snprintf(p, sizeof p, "%s/test_batch.bin", tmpdir);
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 3073 * 5 + 100; i++) fputc(i % 3073 == 0 ? 1 : 7, f);
    fclose(f);
    CHECK(dpt_data_load_cifar10(&d, tmpdir, 0, &o, &err) == DPT_E_INPUT && strstr(err.msg, p) &&
              strstr(err.msg, "record 5"), "cifar truncated: %s", err.msg);
  }
  CHECK(dpt_data_load(&d, "imagenette", NULL, 1, 0, 0, &o, &err) == DPT_E_INPUT && strstr(err.msg, "known are"), "%s", err.msg);

  /* 3. loader: index-coded images (pixel 0 = i % 256, pixel 1 = i / 256) */
  struct dpt_dataset s = {0};
  int N = 1000;
  s.n = N, s.c = 1, s.h = s.w = 4, s.num_classes = 10;
  s.pixels = calloc((size_t)N * 16, 1);
  s.labels = malloc(N * sizeof(int));
  s.std[0] = 1.0f;
  for (int i = 0; i < N; i++) {
    s.pixels[i * 16] = i % 256;
    s.pixels[i * 16 + 1] = i / 256;
    s.labels[i] = i % 10;
  }
  struct dpt_loader_opts lo = {.batch = 16, .rank = 0, .size = 2, .seed = 9, .train = 1, .prefetch = 0};
  int seen[1000];
  memset(seen, 0, sizeof seen);
  for (int r = 0; r < 2; r++) {
    struct dpt_loader *L;
    lo.rank = r;
    lo.prefetch = r ? 3 : 0; /* threaded and synchronous must agree on the sharding */
    CHECK(dpt_loader_create(&L, &s, &lo, &err) == 0, "%s", err.msg);
    CHECK(dpt_loader_steps(L) == N / 32, "steps %d", dpt_loader_steps(L));
    const float *x;
    const int *lab;
    int n;
    while ((n = dpt_loader_next(L, &x, &lab, NULL)) > 0) {
      CHECK(n == 16, "short training batch");
      for (int b = 0; b < 16; b++) {
        int id = decode(x + b * 16);
        CHECK(id >= 0 && id < N && lab[b] == id % 10, "image %d label %d", id, lab[b]);
        seen[id]++;
      }
    }
    dpt_loader_destroy(L);
  }
  int dup = 0, tot = 0;
  for (int i = 0; i < N; i++) dup += seen[i] > 1, tot += seen[i];
  CHECK(dup == 0 && tot == (N / 32) * 32, "ranks overlap (%d duplicates) or miss images (%d)", dup, tot);
  /* shuffled (not identity order), different per epoch, identical when resumed */
  {
    struct dpt_loader *A, *B;
    lo.rank = 0, lo.prefetch = 2, lo.crop_pad = 1, lo.flip = 1;
    dpt_loader_create(&A, &s, &lo, &err);
    lo.prefetch = 0;
    dpt_loader_create(&B, &s, &lo, &err);
    const float *xa, *xb;
    const int *la, *lb;
    int inorder = 1, same_epochs = 1, resumed_same = 1;
    dpt_loader_start(A, 3, 0);
    float *keep = malloc(16 * 16 * sizeof(float));
    for (int st = 0; st < 10; st++) {
      dpt_loader_next(A, &xa, &la, NULL);
      if (st == 6) memcpy(keep, xa, 16 * 16 * sizeof(float));
      if (st == 0) inorder = la[0] == 0 && la[1] == 1;
    }
    dpt_loader_start(B, 3, 6); /* resume epoch 3 at step 6 */
    dpt_loader_next(B, &xb, &lb, NULL);
    resumed_same = !memcmp(keep, xb, 16 * 16 * sizeof(float));
    dpt_loader_start(A, 4, 6);
    dpt_loader_next(A, &xa, &la, NULL);
    same_epochs = !memcmp(keep, xa, 16 * 16 * sizeof(float));
    CHECK(!inorder, "epoch not shuffled");
    CHECK(resumed_same, "resuming at (epoch 3, step 6) gave a different batch (prefetch 2 vs sync)");
    CHECK(!same_epochs, "epochs 3 and 4 gave the same batch");
    free(keep);
    dpt_loader_destroy(A);
    dpt_loader_destroy(B);
  }
  /* host_alloc / host_free (dpt-train: the cuda backend's pinned memory): every slot from them,
   * every batch in one of those blocks, the same batches as malloc's, each block freed once */
  {
    struct dpt_loader *A, *B;
    struct counting_alloc ca = {0};
    lo.rank = 0, lo.prefetch = 2, lo.workers = 2, lo.crop_pad = 1, lo.flip = 1;
    dpt_loader_create(&A, &s, &lo, &err);
    lo.host_alloc = counting_alloc, lo.host_free = counting_free, lo.host_ctx = &ca;
    CHECK(dpt_loader_create(&B, &s, &lo, &err) == 0, "%s", err.msg);
    int n_alloc = ca.n, inside = 1, same = 1;
    CHECK(n_alloc >= 3 && ca.live == n_alloc, "slots from host_alloc: %d allocated, %d live", n_alloc, ca.live);
    for (int st = 0; st < 6; st++) {
      const float *xa, *xb;
      const int *la, *lb;
      dpt_loader_next(A, &xa, &la, NULL);
      dpt_loader_next(B, &xb, &lb, NULL);
      int in = 0;
      for (int i = 0; i < ca.n; i++) in |= (const void *)xb == ca.block[i];
      inside &= in;
      same &= !memcmp(xa, xb, 16 * 16 * sizeof(float)) && !memcmp(la, lb, 16 * sizeof(int));
    }
    CHECK(inside, "a batch outside the host_alloc blocks");
    CHECK(same, "batches from host_alloc slots differ from malloc's");
    dpt_loader_destroy(A);
    dpt_loader_destroy(B);
    CHECK(ca.n == n_alloc && ca.live == 0 && ca.bad_free == 0, "after destroy: %d allocated, %d live, %d bad frees",
          ca.n, ca.live, ca.bad_free);
    lo.host_alloc = NULL, lo.host_free = NULL, lo.host_ctx = NULL, lo.workers = 0;
  }
  /* augmentation: crop within +-pad, flip mirrors */
  {
    struct dpt_dataset g = {0};
    g.n = 64, g.c = 1, g.h = g.w = 8, g.num_classes = 10;
    g.pixels = malloc(64 * 64);
    g.labels = calloc(64, sizeof(int));
    g.std[0] = 1.0f;
    for (int i = 0; i < 64 * 64; i++) g.pixels[i] = (i % 64) + 1; /* pixel value = position + 1 */
    struct dpt_loader_opts ao = {.batch = 64, .size = 1, .seed = 1, .train = 1, .crop_pad = 2, .flip = 1};
    struct dpt_loader *L;
    CHECK(dpt_loader_create(&L, &g, &ao, &err) == 0, "%s", err.msg);
    const float *x;
    const int *lab;
    dpt_loader_next(L, &x, &lab, NULL);
    int flips = 0, shifts = 0, bad = 0;
    for (int b = 0; b < 64; b++) {
      /* find a non-padding pixel at output (y,x) and recover (sy,sx) */
      const float *im = x + b * 64;
      int dx = 99, dy = 99, fl = -1;
      for (int k = 0; k < 64 && fl < 0; k++) {
        int v = (int)lrintf(im[k] * 255.0f);
        if (!v) continue;
        int sy = (v - 1) / 8, sx = (v - 1) % 8, oy = k / 8, ox = k % 8;
        int v2 = k % 8 < 7 ? (int)lrintf(im[k + 1] * 255.0f) : 0;
        if (v2) fl = v2 == v - 1;
        else continue;
        dy = sy - oy;
        dx = fl ? sx - (7 - ox) : sx - ox;
      }
      if (fl < 0 || abs(dx) > 2 || abs(dy) > 2) bad++;
      flips += fl == 1;
      shifts += dx != 0 || dy != 0;
    }
    CHECK(!bad, "%d crops outside +-2 or unreadable", bad);
    CHECK(flips > 16 && flips < 48, "flip probability: %d of 64", flips);
    CHECK(shifts > 40, "crop offsets: only %d of 64 shifted", shifts);
    dpt_loader_destroy(L);
    dpt_data_free(&g);
  }
  /* validation: every image exactly once across ranks, padding labelled -1 */
  {
    memset(seen, 0, sizeof seen);
    struct dpt_loader_opts vo = {.batch = 64, .size = 3, .seed = 1, .train = 0, .prefetch = 1};
    int pads = 0;
    for (int r = 0; r < 3; r++) {
      struct dpt_loader *L;
      vo.rank = r;
      dpt_loader_create(&L, &s, &vo, &err);
      CHECK(dpt_loader_steps(L) == 6, "val steps %d", dpt_loader_steps(L));
      const float *x;
      const int *lab;
      int n;
      while ((n = dpt_loader_next(L, &x, &lab, NULL)) > 0 || dpt_loader_steps(L) < 0)
        for (int b = 0; b < 64; b++) {
          if (lab[b] < 0) pads++;
          else seen[decode(x + b * 16)]++;
        }
      dpt_loader_destroy(L);
    }
    int once = 0;
    for (int i = 0; i < N; i++) once += seen[i] == 1;
    CHECK(once == N && pads == 3 * 6 * 64 - N, "validation covers %d of %d once, %d pads", once, N, pads);
  }
  dpt_data_free(&s);
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd)) failures++;
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: IDX/CIFAR readers, corrupt inputs, sharding, shuffle, resume, augmentation, validation\n");
  return failures ? 1 : 0;
}
