/* dpt_data_loader.c — the per-rank prefetching batch loader: seeded shuffle and
 * disjoint shards, a pool of worker threads filling slots (CPU decode and
 * augmentation, or nvJPEG on the GPU into the backend's input format), and the
 * consumer's side (dpt_loader_next / _next_device). Datasets: dpt_data.c. */
#include "dpt_data.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt_augment.h"
#include "dpt_jpeg_hdr.h"
#include "dpt_model.h" /* dpt_rng */
#ifdef DPT_HAVE_NVJPEG
#include "dpt_jpeg_gpu.h"
#endif

/* ---- loader -------------------------------------------------------------------- */

enum { SLOT_EMPTY, SLOT_FILLING, SLOT_READY };

struct slot {
  float *x;          /* host [batch, c, out, out] (NULL on the GPU path with device_out) */
  void *dx;          /* GPU path: device batch (layout / dtype of the options) */
  void *released;    /* GPU path, device_out: cudaEvent_t the consumer's stream records on letting go */
  int release_pending; /* 1: released was recorded since the last fill: the refill waits for it */
  int *labels;       /* [batch] */
  int n_real;
  int step;
  int state;         /* SLOT_* */
  int failed;        /* a record could not be read: err */
  struct dpt_err err;
};

struct worker {
  struct dpt_loader *L;
  pthread_t th;
  int started;
  struct dpt_jpeg jpeg;  /* file-backed datasets: the CPU decoder (the GPU path's too, for its fallbacks) */
#ifdef DPT_HAVE_NVJPEG
  struct dpt_jpeg_gpu *gpu;          /* GPU path: this worker's nvJPEG states, stream and buffers */
  struct dpt_jpeg_gpu_item *items;   /* [batch] */
  size_t *boff;                      /* [batch] offset of record b's file in bytes */
  unsigned char *bytes;              /* the batch's files, back to back */
  size_t bytes_cap;
#endif
};

struct dpt_loader {
  const struct dpt_dataset *d;
  struct dpt_loader_opts o;
  struct dpt_augment aug; /* file-backed: crop boxes and flips (dpt_augment_crop) */
  int out;              /* output side */
  struct dpt_input_format fmt; /* what the batches are (dpt_loader_device_format of o) */
  size_t img_floats;    /* c * out * out */
  int gpu;              /* file-backed records decoded on the GPU (o.device == DPT_DATA_GPU) */
  int steps;
  int *perm;            /* [n] this epoch's permutation (train) */
  int epoch;
  int positioned;       /* dpt_loader_start has run (create's own call included) */
  int cons_step;        /* next step the consumer takes */
  int held;             /* slot the consumer holds, -1 */
  void *held_stream;    /* device_out: the consumer's stream while it holds the slot */
  int nslots;
  struct slot *slots;
  struct dpt_err err;   /* behind a -1 from dpt_loader_next */
  struct dpt_loader_stats st; /* atomics */
  char decoder[96];
  /* workers: [0] decodes for the consumer when synchronous; threads otherwise */
  int nworkers, threaded;
  struct worker *w;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int prod_step;
  int busy, stop;
};

static void count(long *field, long n) { __atomic_fetch_add(field, n, __ATOMIC_RELAXED); }

/* Record of batch slot b at step s (-1: validation padding). */
static long record_of(const struct dpt_loader *L, int step, int b)
{
  const struct dpt_loader_opts *o = &L->o;
  if (o->train) return L->perm[((long)step * o->size + o->rank) * o->batch + b];
  long i = ((long)step * o->batch + b) * o->size + o->rank;
  return i < L->d->n ? i : -1;
}

/* Record idx failed (s->err says why): 0 = skip it (skip_bad: marked and counted once),
 * -1 = the batch fails. */
static int record_failed(struct dpt_loader *L, long idx, struct slot *s)
{
  struct dpt_file_set *fs = L->d->files;
  count(&L->st.failed, 1);
  if (!fs->skip_bad) {
    s->failed = 1;
    return -1;
  }
  if (!__atomic_exchange_n(&fs->bad[idx], 1, __ATOMIC_RELAXED)) __atomic_fetch_add(&fs->bad_count, 1, __ATOMIC_RELAXED);
  return 0;
}

/* The CPU decode of record idx from buf (its file): header, crop box, DCT-scaled decode.
 * The decoded image is in j; *crop its box. */
static int decode_cpu(struct dpt_loader *L, struct dpt_jpeg *j, long idx, const unsigned char *buf, size_t len,
                      struct dpt_crop *crop, struct dpt_err *err)
{
  const char *path = dpt_data_path(L->d, idx);
  int rc;
  if ((rc = dpt_data_jpeg_header(j, buf, len, path, idx, err))) return rc;
  dpt_augment_crop(&L->aug, L->epoch, idx, j->src_w, j->src_h, crop);
  j->exact = L->o.exact_decode;
  int min_side = L->o.exact_decode ? 0 : dpt_augment_min_side(crop, L->out, j->src_w, j->src_h);
  if ((rc = dpt_data_jpeg_decode(j, buf, len, L->d->c, min_side, path, idx, err))) return rc;
  count(&L->st.cpu, 1);
  return 0;
}

/* The GPU path's decision for record idx from its file: route (dpt_jpeg_hdr_route; a
 * record nvJPEG refused before goes to the CPU), frame size and crop box (the CPU path's
 * dpt_augment_crop; for CPU routes decode_cpu draws it again from libjpeg's header, the
 * same size for every file libjpeg decodes). */
static void plan_record(const struct dpt_loader *L, long idx, const unsigned char *data, size_t len, int has_hw,
                        long max_pixels, int *route, const char **why, int *w, int *h, int *css,
                        struct dpt_crop *crop)
{
  struct dpt_jpeg_hdr hd;
  int prc = dpt_jpeg_hdr_parse(data, len, &hd);
  *route = (int)dpt_jpeg_hdr_route(&hd, prc, has_hw, max_pixels, why);
  if (__atomic_load_n(&L->d->files->cpu_only[idx], __ATOMIC_RELAXED)) {
    *route = DPT_JPEG_ROUTE_CPU;
    *why = "refused by nvJPEG before";
  }
  *w = hd.width;
  *h = hd.height;
  *css = hd.css;
  memset(crop, 0, sizeof *crop);
  if (!prc) dpt_augment_crop(&L->aug, L->epoch, idx, hd.width, hd.height, crop);
}

int dpt_loader_plan(struct dpt_loader *L, int step, int b, int have_hw, struct dpt_loader_plan *p,
                    struct dpt_err *err)
{
  struct dpt_jpeg j;
  int rc;
  memset(p, 0, sizeof *p);
  p->route = -1;
  p->why = "";
  if (!L->d->files || step < 0 || step >= L->steps || b < 0 || b >= L->o.batch)
    return dpt_err_set(err, DPT_E_INPUT, "loader plan: step %d slot %d of a %s loader", step, b, L->d->name);
  p->record = record_of(L, step, b);
  if (p->record < 0) return 0;
  if ((rc = dpt_data_jpeg_init(&j, err))) return rc;
  if (!(rc = dpt_data_jpeg_read(&j, dpt_data_path(L->d, p->record), p->record, err)))
    plan_record(L, p->record, j.file, j.file_len, have_hw, j.max_pixels, &p->route, &p->why, &p->src_w, &p->src_h,
                &p->css, &p->crop);
  dpt_data_jpeg_free(&j);
  return rc;
}

/* File-backed record idx into x (CPU path); -1 with s->err on failure (the caller decides to skip). */
static int fill_file(struct dpt_loader *L, struct worker *w, long idx, float *x, struct slot *s)
{
  const struct dpt_dataset *d = L->d;
  const char *path = dpt_data_path(d, idx);
  struct dpt_jpeg *j = &w->jpeg;
  struct dpt_crop crop;
  if (dpt_data_jpeg_read(j, path, idx, &s->err) || decode_cpu(L, j, idx, j->file, j->file_len, &crop, &s->err))
    return -1;
  if (dpt_data_jpeg_sample(j, &crop, L->out, d->mean, d->std, x)) {
    dpt_err_set(&s->err, DPT_E_NOMEM, "%s (record %ld): out of memory for the resampling tables", path, idx);
    return -1;
  }
  count(&L->st.images, 1);
  return 0;
}

#ifdef DPT_HAVE_NVJPEG
/* GPU path: read the batch's files, route each by its header, decode with nvJPEG, decode the
 * rest on this thread with libturbojpeg, then the GPU kernel fills the slot (dpt_jpeg_gpu.h). */
static void fill_gpu(struct dpt_loader *L, struct worker *w, int step, struct slot *s)
{
  const struct dpt_dataset *d = L->d;
  struct dpt_file_set *fs = d->files;
  struct dpt_jpeg *j = &w->jpeg;
  int B = L->o.batch, n_hw = 0, n_hy = 0, n_rgb = 0;
  size_t used = 0;
  for (int b = 0; b < B; b++) { /* 1. read */
    struct dpt_jpeg_gpu_item *it = &w->items[b];
    long idx = record_of(L, step, b);
    memset(it, 0, sizeof *it);
    it->route = DPT_JPEG_GPU_ROUTE_NONE;
    s->labels[b] = -1;
    w->boff[b] = (size_t)-1;
    if (idx < 0 || __atomic_load_n(&fs->bad[idx], __ATOMIC_RELAXED)) continue;
    if (dpt_data_jpeg_read(j, dpt_data_path(d, idx), idx, &s->err)) {
      if (record_failed(L, idx, s)) return;
      continue;
    }
    if (used + j->file_len > w->bytes_cap) {
      size_t nc = w->bytes_cap ? 2 * w->bytes_cap : (size_t)1 << 22;
      while (nc < used + j->file_len) nc *= 2;
      unsigned char *nb = realloc(w->bytes, nc);
      if (!nb) {
        dpt_err_set(&s->err, DPT_E_NOMEM, "GPU loader: out of memory for %zu bytes of files", nc);
        s->failed = 1;
        return;
      }
      w->bytes = nb;
      w->bytes_cap = nc;
    }
    memcpy(w->bytes + used, j->file, j->file_len);
    w->boff[b] = used;
    it->len = j->file_len;
    used += j->file_len;
    s->labels[b] = d->labels[idx];
  }
  int has_hw = dpt_jpeg_gpu_has_hw(w->gpu);
  for (int b = 0; b < B; b++) { /* 2. route (host, from the header) and the crop box */
    struct dpt_jpeg_gpu_item *it = &w->items[b];
    const char *why;
    if (w->boff[b] == (size_t)-1) continue;
    it->data = w->bytes + w->boff[b];
    plan_record(L, record_of(L, step, b), it->data, it->len, has_hw, j->max_pixels, &it->route, &why, &it->src_w,
                &it->src_h, &it->css, &it->crop);
  }
  if (dpt_jpeg_gpu_decode(w->gpu, w->items, B, &n_hw, &n_hy, &n_rgb, &s->err)) { /* 3. nvJPEG */
    s->failed = 1;
    return;
  }
  count(&L->st.gpu_hw, n_hw);
  count(&L->st.gpu_hybrid, n_hy);
  count(&L->st.gpu_rgb, n_rgb);
  for (int b = 0; b < B; b++) { /* 4. the host decoder for the rest */
    struct dpt_jpeg_gpu_item *it = &w->items[b];
    if (it->route == DPT_JPEG_GPU_ROUTE_NONE || (it->route != DPT_JPEG_ROUTE_CPU && !it->refused)) continue;
    long idx = record_of(L, step, b);
    if (it->refused) {
      count(&L->st.gpu_refused, 1);
      __atomic_store_n(&fs->cpu_only[idx], 1, __ATOMIC_RELAXED); /* later epochs: straight to the CPU */
    }
    if (decode_cpu(L, j, idx, it->data, it->len, &it->crop, &s->err)) {
      if (record_failed(L, idx, s)) return;
      it->route = DPT_JPEG_GPU_ROUTE_NONE;
      s->labels[b] = -1;
      continue;
    }
    it->src_w = j->src_w;
    it->src_h = j->src_h;
    if (dpt_jpeg_gpu_put(w->gpu, it, j->pix, j->w, j->h, &s->err)) {
      s->failed = 1;
      return;
    }
  }
  for (int b = 0; b < B; b++) s->n_real += s->labels[b] >= 0;
  count(&L->st.images, s->n_real);
  /* 5. the kernel (after the consumer let go of this slot's device batch) */
  if (dpt_jpeg_gpu_finish(w->gpu, w->items, B, s->dx, s->release_pending ? s->released : NULL,
                          L->o.device_out ? NULL : s->x, &s->err))
    s->failed = 1;
  else if (!L->o.device_out)
    count(&L->st.host_copies, 1); /* the batch went back to host memory */
  s->release_pending = 0;
}
#endif

static void fill(struct dpt_loader *L, struct worker *w, int step, struct slot *s)
{
  const struct dpt_dataset *d = L->d;
  const struct dpt_loader_opts *o = &L->o;
  int B = o->batch, C = d->c, H = d->h, W = d->w, S = L->out;
  s->n_real = 0;
  s->failed = 0;
  s->step = step;
#ifdef DPT_HAVE_NVJPEG
  if (L->gpu) {
    fill_gpu(L, w, step, s);
    return;
  }
#endif
  for (int b = 0; b < B; b++) {
    long idx = record_of(L, step, b);
    float *x = s->x + (size_t)b * L->img_floats;
    if (idx < 0) {
      memset(x, 0, L->img_floats * sizeof *x);
      s->labels[b] = -1;
      continue;
    }
    if (d->files) {
      if (__atomic_load_n(&d->files->bad[idx], __ATOMIC_RELAXED) || fill_file(L, w, idx, x, s)) {
        if (!__atomic_load_n(&d->files->bad[idx], __ATOMIC_RELAXED) && record_failed(L, idx, s)) break;
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
      dpt_augment_rng(&r, o->seed, L->epoch, idx);
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

/* The GPU path's per-worker contexts and per-slot device buffers. */
static int gpu_setup(struct dpt_loader *L, struct dpt_err *err)
{
#ifdef DPT_HAVE_NVJPEG
  const struct dpt_dataset *d = L->d;
  const struct dpt_loader_opts *o = &L->o;
  const struct dpt_input_format *f = &L->fmt; /* device_out: the consumer's format; else fp32 NCHW */
  struct dpt_jpeg_gpu_opts go = {.device = o->gpu, .channels = d->c, .out = L->out, .batch = o->batch,
                                 .layout = f->layout, .dtype = f->dtype, .c_stored = f->c_stored,
                                 .use_hw = o->gpu_no_hw ? 0 : -1, .hw_share = o->gpu_hw_share};
  int rc;
  for (int k = 0; k < d->c; k++) go.mean[k] = d->mean[k], go.std[k] = d->std[k];
  size_t bytes = dpt_input_format_bytes(f);
  for (int i = 0; i < L->nworkers; i++) {
    struct worker *w = &L->w[i];
    w->items = calloc((size_t)o->batch, sizeof *w->items);
    w->boff = calloc((size_t)o->batch, sizeof *w->boff);
    if (!w->items || !w->boff) return dpt_err_set(err, DPT_E_NOMEM, "GPU loader: out of memory");
    if ((rc = dpt_jpeg_gpu_create(&w->gpu, &go, err))) return rc;
  }
  for (int i = 0; i < L->nslots; i++) {
    if ((rc = dpt_jpeg_gpu_alloc(o->gpu, bytes, &L->slots[i].dx, err))) return rc;
    if (o->device_out && (rc = dpt_jpeg_gpu_event_create(o->gpu, &L->slots[i].released, err))) return rc;
  }
  snprintf(L->decoder, sizeof L->decoder, "nvJPEG %s", dpt_jpeg_gpu_describe(L->w[0].gpu));
  return 0;
#else
  (void)L;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "--data-device gpu: %s", DPT_DATA_GPU_UNAVAILABLE);
#endif
}

int dpt_data_gpu_available(int gpu, char *why, size_t why_len)
{
#ifdef DPT_HAVE_NVJPEG
  return dpt_jpeg_gpu_probe(gpu, why, why_len);
#else
  (void)gpu;
  snprintf(why, why_len, "%s", DPT_DATA_GPU_UNAVAILABLE);
  return 0;
#endif
}

int dpt_loader_create(struct dpt_loader **out, const struct dpt_dataset *d,
                      const struct dpt_loader_opts *o, struct dpt_err *err)
{
  int rc;
  *out = NULL;
  if (o->batch < 1 || o->size < 1 || o->rank < 0 || o->rank >= o->size)
    return dpt_err_set(err, DPT_E_INPUT, "loader: batch %d rank %d of %d", o->batch, o->rank, o->size);
  int S = o->out_size > 0 ? o->out_size : d->h;
  if (!d->files && (S > d->h + 2 * o->crop_pad || S > d->w + 2 * o->crop_pad))
    return dpt_err_set(err, DPT_E_INPUT, "loader: --image-size %d larger than the %dx%d images of %s (+%d padding)",
                       S, d->h, d->w, d->name, o->crop_pad);
  if (d->files && o->crop_pad > 0)
    return dpt_err_set(err, DPT_E_INPUT, "loader: --crop-pad does not apply to %s: its training crops are "
                       "random-resized crops of the whole image", d->name);
  if (o->device == DPT_DATA_GPU && !d->files)
    return dpt_err_set(err, DPT_E_INPUT, "loader: the GPU input path decodes JPEG records (imagenet), not %s: "
                       "use the CPU loader", d->name);
  if (o->device == DPT_DATA_GPU && o->device_out &&
      ((o->layout != DPT_DATA_NCHW && o->layout != DPT_DATA_NHWC) || o->dtype < DPT_DATA_F32 || o->dtype > DPT_DATA_BF16))
    return dpt_err_set(err, DPT_E_INPUT, "loader: device output layout %d / element type %d: NCHW or NHWC, "
                       "fp32, fp16 or bf16", o->layout, o->dtype);
  struct dpt_loader *L = calloc(1, sizeof *L);
  if (!L) return dpt_err_set(err, DPT_E_NOMEM, "loader: out of memory");
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv, NULL);
  L->d = d;
  L->o = *o;
  L->out = S;
  L->gpu = d->files && o->device == DPT_DATA_GPU;
  dpt_loader_device_format(d, o, &L->fmt); /* host batches are fp32 NCHW */
  L->o.layout = L->fmt.layout;
  L->o.dtype = L->fmt.dtype;
  L->o.c_stored = L->fmt.c_stored;
  dpt_augment_default(&L->aug, o->train, S, o->seed);
  L->aug.flip = o->train && o->flip;
  snprintf(L->decoder, sizeof L->decoder, "libturbojpeg");
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
  if (L->gpu && o->device_out && L->nslots < 2) L->nslots = 2; /* the consumer holds one while the next fills */
  L->slots = calloc((size_t)L->nslots, sizeof *L->slots);
  L->perm = malloc((size_t)d->n * sizeof *L->perm);
  L->w = calloc((size_t)L->nworkers, sizeof *L->w);
  if (!L->slots || !L->perm || !L->w) goto nomem;
  for (int i = 0; i < L->nslots; i++) {
    size_t xb = (size_t)o->batch * L->img_floats * sizeof(float);
    if (!(L->gpu && o->device_out) &&
        !(L->slots[i].x = o->host_alloc ? o->host_alloc(o->host_ctx, xb) : malloc(xb)))
      goto nomem;
    if (!(L->slots[i].labels = malloc((size_t)o->batch * sizeof(int)))) goto nomem;
  }
  for (int i = 0; i < L->nworkers; i++) {
    L->w[i].L = L;
    if (d->files && (rc = dpt_data_jpeg_init(&L->w[i].jpeg, err))) {
      dpt_loader_destroy(L);
      return rc;
    }
  }
  if (L->gpu && (rc = gpu_setup(L, err))) {
    dpt_loader_destroy(L);
    return rc;
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

void dpt_loader_stats(const struct dpt_loader *L, struct dpt_loader_stats *st)
{
  st->images = __atomic_load_n(&L->st.images, __ATOMIC_RELAXED);
  st->gpu_hw = __atomic_load_n(&L->st.gpu_hw, __ATOMIC_RELAXED);
  st->gpu_hybrid = __atomic_load_n(&L->st.gpu_hybrid, __ATOMIC_RELAXED);
  st->cpu = __atomic_load_n(&L->st.cpu, __ATOMIC_RELAXED);
  st->gpu_refused = __atomic_load_n(&L->st.gpu_refused, __ATOMIC_RELAXED);
  st->gpu_rgb = __atomic_load_n(&L->st.gpu_rgb, __ATOMIC_RELAXED);
  st->failed = __atomic_load_n(&L->st.failed, __ATOMIC_RELAXED);
  st->host_copies = __atomic_load_n(&L->st.host_copies, __ATOMIC_RELAXED);
}

void dpt_loader_format(const struct dpt_loader *L, struct dpt_input_format *f) { *f = L->fmt; }

const char *dpt_loader_decoder(const struct dpt_loader *L) { return L->decoder; }

static int release_held(struct dpt_loader *L);

void dpt_loader_start(struct dpt_loader *L, int epoch, int step)
{
  if (L->threaded) pthread_mutex_lock(&L->mu);
  /* Already there, nothing taken since (the caller's first start after dpt_loader_create's
   * own): what is prefetched or being decoded is exactly what a restart would decode again. */
  if (L->positioned && epoch == L->epoch && step == L->cons_step && L->held < 0) {
    if (L->threaded) pthread_mutex_unlock(&L->mu);
    return;
  }
  L->positioned = 1;
  while (L->threaded && L->busy) pthread_cond_wait(&L->cv, &L->mu);
  L->epoch = epoch;
  if (L->o.train) {
    struct dpt_rng r;
    dpt_rng_seed(&r, dpt_augment_mix(L->o.seed ^ 0xd1b54a32d192ed03ULL, (uint64_t)epoch));
    for (int i = 0; i < L->d->n; i++) L->perm[i] = i;
    for (int i = L->d->n - 1; i > 0; i--) {
      int j = (int)dpt_rng_below(&r, (uint64_t)i + 1);
      int t = L->perm[i];
      L->perm[i] = L->perm[j];
      L->perm[j] = t;
    }
  }
  release_held(L); /* device_out: the refills wait for the consumer's work on it (an error shows at the next take) */
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

/* Lets go of the held slot: device_out records the consumer's event first, so the
 * refill's kernel waits for the work the consumer enqueued on it. */
static int release_held(struct dpt_loader *L)
{
  if (L->held < 0) return 0;
  struct slot *h = &L->slots[L->held];
#ifdef DPT_HAVE_NVJPEG
  if (h->released) {
    if (dpt_jpeg_gpu_event_record(h->released, L->held_stream, &L->err)) return -1;
    h->release_pending = 1;
  }
#endif
  h->state = SLOT_EMPTY;
  L->held = -1;
  return 0;
}

/* The slot of the next step, filled (NULL past the end of the epoch; *rc = -1 on failure). */
static struct slot *take(struct dpt_loader *L, double *wait_s, int *rc)
{
  *rc = 0;
  if (L->cons_step >= L->steps) return NULL;
  int step = L->cons_step++;
  struct slot *s = &L->slots[step % L->nslots];
  if (!L->threaded) {
    if (release_held(L)) {
      *rc = -1;
      return NULL;
    }
    fill(L, &L->w[0], step, s);
    L->held = step % L->nslots;
  } else {
    double t0 = now();
    pthread_mutex_lock(&L->mu);
    if (L->held >= 0) {
      if (release_held(L)) *rc = -1;
      pthread_cond_broadcast(&L->cv);
    }
    while (!*rc && !(s->state == SLOT_READY && s->step == step)) pthread_cond_wait(&L->cv, &L->mu);
    if (!*rc) L->held = step % L->nslots;
    pthread_mutex_unlock(&L->mu);
    if (*rc) return NULL;
    if (wait_s) *wait_s += now() - t0;
  }
  if (s->failed) {
    L->err = s->err;
    *rc = -1;
    return NULL;
  }
  return s;
}

int dpt_loader_next(struct dpt_loader *L, const float **x, const int **labels, double *wait_s)
{
  int rc;
  if (L->gpu && L->o.device_out) {
    dpt_err_set(&L->err, DPT_E_INPUT, "loader: its batches stay on the GPU (device_out): use dpt_loader_next_device");
    return -1;
  }
  struct slot *s = take(L, wait_s, &rc);
  if (!s) return rc;
  *x = s->x;
  *labels = s->labels;
  return s->n_real;
}

int dpt_loader_next_device(struct dpt_loader *L, void **x, const int **labels, void *stream, double *wait_s)
{
  int rc;
  if (!L->gpu || !L->o.device_out) {
    dpt_err_set(&L->err, DPT_E_INPUT, "loader: its batches are host memory: use dpt_loader_next");
    return -1;
  }
  struct slot *s = take(L, wait_s, &rc);
  if (!s) return rc;
  L->held_stream = stream;
  *x = s->dx;
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
#ifdef DPT_HAVE_NVJPEG
      dpt_jpeg_gpu_destroy(L->w[i].gpu);
      free(L->w[i].items);
      free(L->w[i].boff);
      free(L->w[i].bytes);
#endif
    }
  }
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv);
  if (L->slots) {
    for (int i = 0; i < L->nslots; i++) {
      if (L->o.host_free && L->slots[i].x) L->o.host_free(L->o.host_ctx, L->slots[i].x);
      else if (!L->o.host_free) free(L->slots[i].x);
      free(L->slots[i].labels);
#ifdef DPT_HAVE_NVJPEG
      dpt_jpeg_gpu_free(L->slots[i].dx);
      dpt_jpeg_gpu_event_destroy(L->slots[i].released);
#endif
    }
  }
  free(L->w);
  free(L->slots);
  free(L->perm);
  free(L);
}
