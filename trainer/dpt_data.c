/* dpt_data.c — IDX / CIFAR-10 / synthetic datasets and the prefetching loader
 * (JPEG folders: dpt_data_jpeg.c). */
#include "dpt_data.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "dpt_model.h" /* dpt_rng */

void dpt_data_free(struct dpt_dataset *d)
{
  if (!d) return;
  free(d->pixels);
  free(d->labels);
  if (d->files) {
    free(d->files->pool);
    free(d->files->off);
    free(d->files->bad);
    free(d->files);
  }
  memset(d, 0, sizeof *d);
}

/* ---- IDX (MNIST / Fashion-MNIST) ------------------------------------------ */

static int gz_read_exact(gzFile g, void *buf, size_t n, size_t *got)
{
  size_t done = 0;
  while (done < n) {
    unsigned chunk = (n - done) > (1u << 30) ? (1u << 30) : (unsigned)(n - done);
    int r = gzread(g, (char *)buf + done, chunk);
    if (r <= 0) break;
    done += (size_t)r;
  }
  *got = done;
  return done == n ? 0 : -1;
}

static uint32_t be32(const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens path or path.gz. */
static gzFile open_maybe_gz(const char *path, char *used, size_t used_len)
{
  gzFile g = gzopen(path, "rb");
  snprintf(used, used_len, "%s", path);
  if (!g) {
    snprintf(used, used_len, "%s.gz", path);
    g = gzopen(used, "rb");
    if (!g) snprintf(used, used_len, "%s", path);
  }
  return g;
}

int dpt_data_load_idx(struct dpt_dataset *d, const char *images_path, const char *labels_path,
                      const struct dpt_data_opts *o, struct dpt_err *err)
{
  int rc = 0;
  gzFile gi = NULL, gl = NULL;
  unsigned char hdr[16], *lab = NULL;
  char ip[4096], lp[4096];
  size_t got;
  memset(d, 0, sizeof *d);
  gi = open_maybe_gz(images_path, ip, sizeof ip);
  if (!gi) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: cannot open (%s): install Debian's dataset-fashion-mnist "
                     "or pass --data-dir", ip, strerror(errno));
    goto fail;
  }
  gl = open_maybe_gz(labels_path, lp, sizeof lp);
  if (!gl) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: cannot open (%s)", lp, strerror(errno));
    goto fail;
  }
  if (gz_read_exact(gi, hdr, 16, &got)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: truncated IDX header (%zu of 16 bytes)", ip, got);
    goto fail;
  }
  if (be32(hdr) != 0x00000803) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: magic 0x%08x, expected 0x00000803 (IDX ubyte images, 3 dims): "
                     "not an IDX image file", ip, be32(hdr));
    goto fail;
  }
  uint32_t n = be32(hdr + 4), h = be32(hdr + 8), w = be32(hdr + 12);
  if (n == 0 || n > 100000000u || h == 0 || w == 0 || h > 4096 || w > 4096) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: implausible dimensions %u x %u x %u", ip, n, h, w);
    goto fail;
  }
  unsigned char lh[8];
  if (gz_read_exact(gl, lh, 8, &got)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: truncated IDX header (%zu of 8 bytes)", lp, got);
    goto fail;
  }
  if (be32(lh) != 0x00000801) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: magic 0x%08x, expected 0x00000801 (IDX ubyte labels, 1 dim)", lp, be32(lh));
    goto fail;
  }
  if (be32(lh + 4) != n) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s has %u labels but %s has %u images: files from different sets?",
                     lp, be32(lh + 4), ip, n);
    goto fail;
  }
  size_t img = (size_t)h * w, total = (size_t)n * img, cap = 0;
  /* The buffer grows with the data actually read: a header may claim far more
   * than the file holds (a 25-byte file must not make us allocate petabytes). */
  got = 0;
  while (got < total) {
    size_t want = cap ? (cap < total / 2 ? 2 * cap : total) : (total < ((size_t)1 << 24) ? total : (size_t)1 << 24);
    unsigned char *np = realloc(d->pixels, want);
    size_t r;
    if (!np) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory for %u images", ip, n);
      goto fail;
    }
    d->pixels = np;
    cap = want;
    gz_read_exact(gi, d->pixels + got, cap - got, &r);
    got += r;
    if (got < cap)
      break;
  }
  if (got < total) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: truncated: image %zu of %u is incomplete (%zu of %zu pixel bytes)",
                     ip, got / img, n, got, total);
    goto fail;
  }
  d->labels = malloc((size_t)n * sizeof *d->labels);
  lab = malloc(n);
  if (!d->labels || !lab) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory for %u labels", lp, n);
    goto fail;
  }
  if (gz_read_exact(gl, lab, n, &got)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: truncated: %zu of %u labels", lp, got, n);
    goto fail;
  }
  unsigned char extra;
  if (gzread(gi, &extra, 1) > 0 || gzread(gl, &extra, 1) > 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s / %s: trailing bytes after %u records: wrong header counts?", ip, lp, n);
    goto fail;
  }
  int kept = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (lab[i] > 9) {
      if (o && o->skip_bad) {
        d->skipped++;
        continue;
      }
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: record %u has label %u, expected 0..9 (use --skip-bad "
                       "to drop such records)", lp, i, lab[i]);
      goto fail;
    }
    if ((uint32_t)kept != i) memmove(d->pixels + (size_t)kept * img, d->pixels + (size_t)i * img, img);
    d->labels[kept++] = lab[i];
  }
  d->n = kept;
  d->c = 1;
  d->h = (int)h;
  d->w = (int)w;
  d->num_classes = 10;
  snprintf(d->name, sizeof d->name, "fashion-mnist");
  d->mean[0] = 0.2860f; /* Fashion-MNIST training-set statistics */
  d->std[0] = 0.3530f;
  goto out;
fail:
  dpt_data_free(d);
out:
  free(lab);
  if (gi) gzclose(gi);
  if (gl) gzclose(gl);
  return rc;
}

/* ---- CIFAR-10 binary ------------------------------------------------------ */

int dpt_data_load_cifar10(struct dpt_dataset *d, const char *dir, int train,
                          const struct dpt_data_opts *o, struct dpt_err *err)
{
  enum { REC = 1 + 3072, PER = 10000 };
  int nfiles = train ? 5 : 1, rc = 0;
  memset(d, 0, sizeof *d);
  d->pixels = malloc((size_t)nfiles * PER * 3072);
  d->labels = malloc((size_t)nfiles * PER * sizeof(int));
  unsigned char *rec = malloc(REC);
  if (!d->pixels || !d->labels || !rec) {
    free(rec);
    dpt_data_free(d);
    return dpt_err_set(err, DPT_E_NOMEM, "cifar10: out of memory");
  }
  int kept = 0;
  for (int f = 0; f < nfiles && !rc; f++) {
    char path[4096];
    if (train) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
    else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: cannot open (%s): --data-dir must hold the CIFAR-10 "
                       "binary version (cifar-10-batches-bin)", path, strerror(errno));
      break;
    }
    for (int r = 0; r < PER; r++) {
      size_t got = fread(rec, 1, REC, fp);
      if (got != REC) {
        rc = dpt_err_set(err, DPT_E_INPUT, "%s: truncated at record %d of %d (%zu of %d bytes)", path, r, PER, got, REC);
        break;
      }
      if (rec[0] > 9) {
        if (o && o->skip_bad) {
          d->skipped++;
          continue;
        }
        rc = dpt_err_set(err, DPT_E_INPUT, "%s: record %d has label %u, expected 0..9", path, r, rec[0]);
        break;
      }
      d->labels[kept] = rec[0];
      memcpy(d->pixels + (size_t)kept * 3072, rec + 1, 3072);
      kept++;
    }
    if (!rc && fgetc(fp) != EOF)
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: longer than %d records of %d bytes", path, PER, REC);
    fclose(fp);
  }
  free(rec);
  if (rc) {
    dpt_data_free(d);
    return rc;
  }
  d->n = kept;
  d->c = 3;
  d->h = d->w = 32;
  d->num_classes = 10;
  snprintf(d->name, sizeof d->name, "cifar10");
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
  memcpy(d->mean, mean, sizeof mean);
  memcpy(d->std, std, sizeof std);
  return 0;
}

/* ---- synthetic --------------------------------------------------------------- */

int dpt_data_synthetic(struct dpt_dataset *d, int n, int c, int hw, int num_classes, uint64_t seed,
                       struct dpt_err *err)
{
  memset(d, 0, sizeof *d);
  if (n < 1 || c < 1 || c > 3 || hw < 1 || num_classes < 1)
    return dpt_err_set(err, DPT_E_INPUT, "synthetic: bad shape n=%d c=%d size=%d classes=%d", n, c, hw, num_classes);
  size_t img = (size_t)c * hw * hw;
  d->pixels = malloc((size_t)n * img);
  d->labels = malloc((size_t)n * sizeof(int));
  if (!d->pixels || !d->labels) {
    dpt_data_free(d);
    return dpt_err_set(err, DPT_E_NOMEM, "synthetic: out of memory for %d images of %zu bytes", n, img);
  }
  struct dpt_rng r;
  dpt_rng_seed(&r, seed ^ 0x5157u);
  for (int i = 0; i < n; i++) {
    int y = (int)dpt_rng_below(&r, (uint64_t)num_classes);
    d->labels[i] = y;
    unsigned char *p = d->pixels + (size_t)i * img;
    for (size_t k = 0; k < img; k++) {
      /* class-dependent stripes + noise: learnable but not trivial */
      int stripe = ((int)(k % hw) * num_classes / hw) == y;
      int v = 64 + 96 * stripe + (int)dpt_rng_below(&r, 96);
      p[k] = (unsigned char)v;
    }
  }
  d->n = n;
  d->c = c;
  d->h = d->w = hw;
  d->num_classes = num_classes;
  snprintf(d->name, sizeof d->name, "synthetic");
  for (int k = 0; k < 3; k++) {
    d->mean[k] = 0.5f;
    d->std[k] = 0.25f;
  }
  return 0;
}

int dpt_data_load(struct dpt_dataset *d, const char *kind, const char *dir, int train, int n_synth,
                  uint64_t seed, const struct dpt_data_opts *o, struct dpt_err *err)
{
  if (!strcmp(kind, "fashion-mnist")) {
    char ip[4096], lp[4096];
    const char *base = dir ? dir : DPT_FASHION_MNIST_DIR, *pre = train ? "train" : "t10k";
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte", base, pre);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte", base, pre);
    return dpt_data_load_idx(d, ip, lp, o, err);
  }
  if (!strcmp(kind, "cifar10")) {
    if (!dir) return dpt_err_set(err, DPT_E_INPUT, "cifar10 needs --data-dir (the cifar-10-batches-bin folder)");
    return dpt_data_load_cifar10(d, dir, train, o, err);
  }
  if (!strcmp(kind, "imagenet"))
    return dpt_data_load_imagenet(d, dir, o ? (train ? o->train_list : o->val_list) : NULL, train, o, err);
  if (!strcmp(kind, "synthetic"))
    return dpt_data_synthetic(d, train ? n_synth : n_synth / 4 + 1, 3,
                              o && o->synth_size ? o->synth_size : 32,
                              o && o->synth_classes ? o->synth_classes : 10, seed + (train ? 0 : 1), err);
  return dpt_err_set(err, DPT_E_INPUT, "unknown dataset '%s': known are " DPT_DATASETS, kind);
}

/* ---- loader -------------------------------------------------------------------- */

enum { SLOT_EMPTY, SLOT_FILLING, SLOT_READY };

struct slot {
  float *x;      /* [batch, c, out, out] */
  int *labels;   /* [batch] */
  int n_real;
  int step;
  int state;     /* SLOT_* */
  int failed;    /* a record could not be read: err */
  struct dpt_err err;
};

struct worker {
  struct dpt_loader *L;
  pthread_t th;
  int started;
  struct dpt_jpeg jpeg;  /* file-backed datasets */
};

struct dpt_loader {
  const struct dpt_dataset *d;
  struct dpt_loader_opts o;
  int out;              /* output side */
  int side;             /* file-backed: shorter side after resizing */
  size_t img_floats;    /* c * out * out */
  int steps;
  int *perm;            /* [n] this epoch's permutation (train) */
  int epoch;
  int cons_step;        /* next step the consumer takes */
  int held;             /* slot the consumer holds, -1 */
  int nslots;
  struct slot *slots;
  struct dpt_err err;   /* behind a -1 from dpt_loader_next */
  /* workers: [0] decodes for the consumer when synchronous; threads otherwise */
  int nworkers, threaded;
  struct worker *w;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int prod_step;
  int busy, stop;
};

static uint64_t mix(uint64_t a, uint64_t b)
{
  uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 31);
}

/* File-backed record idx into x; -1 with s->err on failure (the caller decides to skip). */
static int fill_file(struct dpt_loader *L, struct worker *w, long idx, float *x, struct slot *s)
{
  const struct dpt_dataset *d = L->d;
  const struct dpt_loader_opts *o = &L->o;
  const char *path = dpt_data_path(d, idx);
  struct dpt_jpeg *j = &w->jpeg;
  int S = L->out, pad = o->train ? o->crop_pad : 0, rh, rw;
  if (dpt_data_jpeg_read(j, path, idx, &s->err) ||
      dpt_data_jpeg_decode(j, j->file, j->file_len, d->c, L->side, path, idx, &s->err))
    return -1;
  dpt_data_jpeg_resized(j, L->side, &rh, &rw);
  int oy = (rh - S) / 2, ox = (rw - S) / 2, flip = 0;
  if (o->train) {
    struct dpt_rng r;
    dpt_rng_seed(&r, mix(mix(o->seed, (uint64_t)L->epoch), (uint64_t)idx));
    oy = (int)dpt_rng_below(&r, (uint64_t)(rh + 2 * pad - S + 1)) - pad;
    ox = (int)dpt_rng_below(&r, (uint64_t)(rw + 2 * pad - S + 1)) - pad;
    flip = o->flip && (dpt_rng_next(&r) >> 63);
  }
  if (dpt_data_jpeg_sample(j, L->side, oy, ox, S, flip, d->mean, d->std, x)) {
    dpt_err_set(&s->err, DPT_E_NOMEM, "%s (record %ld): out of memory for the resampling tables", path, idx);
    return -1;
  }
  return 0;
}

static void fill(struct dpt_loader *L, struct worker *w, int step, struct slot *s)
{
  const struct dpt_dataset *d = L->d;
  const struct dpt_loader_opts *o = &L->o;
  int B = o->batch, C = d->c, H = d->h, W = d->w, S = L->out;
  s->n_real = 0;
  s->failed = 0;
  for (int b = 0; b < B; b++) {
    long idx;
    if (o->train) {
      long pos = ((long)step * o->size + o->rank) * B + b;
      idx = L->perm[pos];
    } else {
      long i = ((long)step * B + b) * o->size + o->rank;
      idx = i < d->n ? i : -1;
    }
    float *x = s->x + (size_t)b * L->img_floats;
    if (idx < 0) {
      memset(x, 0, L->img_floats * sizeof *x);
      s->labels[b] = -1;
      continue;
    }
    if (d->files) {
      struct dpt_file_set *fs = d->files;
      int bad = __atomic_load_n(&fs->bad[idx], __ATOMIC_RELAXED);
      if (bad || fill_file(L, w, idx, x, s)) {
        if (!fs->skip_bad) {
          s->failed = 1;
          break;
        }
        if (!bad && !__atomic_exchange_n(&fs->bad[idx], 1, __ATOMIC_RELAXED))
          __atomic_fetch_add(&fs->bad_count, 1, __ATOMIC_RELAXED);
        memset(x, 0, L->img_floats * sizeof *x);
        s->labels[b] = -1;
        continue;
      }
      s->labels[b] = d->labels[idx];
      s->n_real++;
      continue;
    }
    s->labels[b] = d->labels[idx];
    s->n_real++;
    int oy = (H - S) / 2, ox = (W - S) / 2, flip = 0, pad = 0;
    if (o->train) {
      struct dpt_rng r;
      dpt_rng_seed(&r, mix(mix(o->seed, (uint64_t)L->epoch), (uint64_t)idx));
      pad = o->crop_pad;
      if (pad > 0 || S < H) {
        oy = (int)dpt_rng_below(&r, (uint64_t)(H + 2 * pad - S + 1)) - pad;
        ox = (int)dpt_rng_below(&r, (uint64_t)(W + 2 * pad - S + 1)) - pad;
      }
      flip = o->flip && (dpt_rng_next(&r) >> 63);
    }
    const unsigned char *src = d->pixels + (size_t)idx * C * H * W;
    for (int c = 0; c < C; c++) {
      float sc = 1.0f / (255.0f * d->std[c]), sh = -d->mean[c] / d->std[c];
      for (int y = 0; y < S; y++) {
        int sy = y + oy;
        for (int xx = 0; xx < S; xx++) {
          int sx = (flip ? S - 1 - xx : xx) + ox;
          unsigned v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? src[((size_t)c * H + sy) * W + sx] : 0;
          x[((size_t)c * S + y) * S + xx] = v * sc + sh;
        }
      }
    }
  }
  s->step = step;
}

/* A worker takes the next step whose slot is free; several workers fill different
 * batches at once.  Every image depends only on (seed, epoch, index), so which
 * worker fills a batch changes nothing. */
static void *producer(void *arg)
{
  struct worker *w = arg;
  struct dpt_loader *L = w->L;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->stop && !(L->prod_step < L->steps && L->slots[L->prod_step % L->nslots].state == SLOT_EMPTY &&
                         (L->prod_step % L->nslots) != L->held))
      pthread_cond_wait(&L->cv, &L->mu);
    if (L->stop) break;
    int step = L->prod_step++;
    struct slot *s = &L->slots[step % L->nslots];
    s->state = SLOT_FILLING;
    L->busy++;
    pthread_mutex_unlock(&L->mu);
    fill(L, w, step, s);
    pthread_mutex_lock(&L->mu);
    L->busy--;
    s->state = SLOT_READY;
    pthread_cond_broadcast(&L->cv);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

int dpt_loader_create(struct dpt_loader **out, const struct dpt_dataset *d,
                      const struct dpt_loader_opts *o, struct dpt_err *err)
{
  *out = NULL;
  if (o->batch < 1 || o->size < 1 || o->rank < 0 || o->rank >= o->size)
    return dpt_err_set(err, DPT_E_INPUT, "loader: batch %d rank %d of %d", o->batch, o->rank, o->size);
  int S = o->out_size > 0 ? o->out_size : d->h;
  if (!d->files && (S > d->h + 2 * o->crop_pad || S > d->w + 2 * o->crop_pad))
    return dpt_err_set(err, DPT_E_INPUT, "loader: --image-size %d larger than the %dx%d images of %s (+%d padding)",
                       S, d->h, d->w, d->name, o->crop_pad);
  struct dpt_loader *L = calloc(1, sizeof *L);
  if (!L) return dpt_err_set(err, DPT_E_NOMEM, "loader: out of memory");
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv, NULL);
  L->d = d;
  L->o = *o;
  L->out = S;
  L->side = (S * 8 + 3) / 7; /* 224 -> 256, as the usual ImageNet recipe */
  L->img_floats = (size_t)d->c * S * S;
  if (o->train) L->steps = d->n / (o->batch * o->size);
  else {
    int per_rank = (d->n + o->size - 1) / o->size;
    L->steps = (per_rank + o->batch - 1) / o->batch;
  }
  if (L->steps < 1) {
    dpt_loader_destroy(L);
    return dpt_err_set(err, DPT_E_INPUT, "loader: %s has %d images, fewer than one global batch of %d x %d ranks",
                       d->name, d->n, o->batch, o->size);
  }
  L->nworkers = o->prefetch > 0 ? (o->workers > 0 ? o->workers : 1) : 1;
  L->nslots = o->prefetch > 0 ? (o->prefetch > L->nworkers ? o->prefetch : L->nworkers) + 1 : 1;
  L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
  L->perm = malloc((size_t)d->n * sizeof *L->perm);
  L->w = calloc((size_t)L->nworkers, sizeof *L->w);
  if (!L->slots || !L->perm || !L->w) goto nomem;
  for (int i = 0; i < L->nslots; i++) {
    L->slots[i].x = malloc((size_t)o->batch * L->img_floats * sizeof(float));
    L->slots[i].labels = malloc((size_t)o->batch * sizeof(int));
    if (!L->slots[i].x || !L->slots[i].labels) goto nomem;
  }
  for (int i = 0; i < L->nworkers; i++) {
    L->w[i].L = L;
    if (d->files) {
      int rc = dpt_data_jpeg_init(&L->w[i].jpeg, err);
      if (rc) {
        dpt_loader_destroy(L);
        return rc;
      }
    }
  }
  L->held = -1;
  L->prod_step = L->steps; /* idle until dpt_loader_start */
  if (o->prefetch > 0) {
    L->threaded = 1;
    for (int i = 0; i < L->nworkers; i++) {
      if (pthread_create(&L->w[i].th, NULL, producer, &L->w[i])) {
        dpt_loader_destroy(L);
        return dpt_err_set(err, DPT_E_RUNTIME, "loader: cannot start worker thread %d of %d: lower --data-threads",
                           i + 1, o->workers);
      }
      L->w[i].started = 1;
    }
  }
  *out = L;
  dpt_loader_start(L, 0, 0);
  return 0;
nomem:
  dpt_loader_destroy(L);
  return dpt_err_set(err, DPT_E_NOMEM, "loader: out of memory for %d prefetch batches", o->prefetch);
}

int dpt_loader_steps(const struct dpt_loader *L) { return L->steps; }

const struct dpt_err *dpt_loader_err(const struct dpt_loader *L) { return &L->err; }

void dpt_loader_start(struct dpt_loader *L, int epoch, int step)
{
  if (L->threaded) pthread_mutex_lock(&L->mu);
  while (L->threaded && L->busy) pthread_cond_wait(&L->cv, &L->mu);
  L->epoch = epoch;
  if (L->o.train) {
    struct dpt_rng r;
    dpt_rng_seed(&r, mix(L->o.seed ^ 0xd1b54a32d192ed03ULL, (uint64_t)epoch));
    for (int i = 0; i < L->d->n; i++) L->perm[i] = i;
    for (int i = L->d->n - 1; i > 0; i--) {
      int j = (int)dpt_rng_below(&r, (uint64_t)i + 1);
      int t = L->perm[i];
      L->perm[i] = L->perm[j];
      L->perm[j] = t;
    }
  }
  for (int i = 0; i < L->nslots; i++) L->slots[i].state = SLOT_EMPTY;
  L->held = -1;
  L->cons_step = step;
  L->prod_step = step;
  if (L->threaded) {
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
  }
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int dpt_loader_next(struct dpt_loader *L, const float **x, const int **labels, double *wait_s)
{
  if (L->cons_step >= L->steps) return 0;
  int step = L->cons_step++;
  struct slot *s = &L->slots[step % L->nslots];
  if (!L->threaded) {
    fill(L, &L->w[0], step, s);
  } else {
    double t0 = now();
    pthread_mutex_lock(&L->mu);
    if (L->held >= 0) {
      L->slots[L->held].state = SLOT_EMPTY;
      L->held = -1;
      pthread_cond_broadcast(&L->cv);
    }
    while (!(s->state == SLOT_READY && s->step == step)) pthread_cond_wait(&L->cv, &L->mu);
    L->held = step % L->nslots;
    pthread_mutex_unlock(&L->mu);
    if (wait_s) *wait_s += now() - t0;
  }
  if (s->failed) {
    L->err = s->err;
    return -1;
  }
  *x = s->x;
  *labels = s->labels;
  return s->n_real;
}

void dpt_loader_destroy(struct dpt_loader *L)
{
  if (!L) return;
  if (L->threaded) {
    pthread_mutex_lock(&L->mu);
    L->stop = 1;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
  }
  if (L->w) {
    for (int i = 0; i < L->nworkers; i++) {
      if (L->w[i].started) pthread_join(L->w[i].th, NULL);
      dpt_data_jpeg_free(&L->w[i].jpeg);
    }
  }
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv);
  if (L->slots) {
    for (int i = 0; i < L->nslots; i++) {
      free(L->slots[i].x);
      free(L->slots[i].labels);
    }
  }
  free(L->w);
  free(L->slots);
  free(L->perm);
  free(L);
}
