/* dpt_data.c — IDX / CIFAR-10 / synthetic datasets and the batch formats a loader
 * delivers and a backend takes (JPEG folders: dpt_data_jpeg.c; the prefetching
 * loader: dpt_data_loader.c). */
#include "dpt_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    free(d->files->cpu_only);
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

/* Room for one more CIFAR-10 record (pixels [cap][3072], labels [cap]): the buffers grow by
 * doubling from 16 records up to max, so a short or bad file costs what it holds, not the 150 MB
 * of a full training set (glibc's realloc of large blocks moves pages, not bytes). */
static int cifar_room(struct dpt_dataset *d, int kept, int *cap, int max)
{
  if (kept < *cap) return 0;
  int n = *cap ? *cap * 2 : 16;
  if (n > max) n = max;
  unsigned char *px = realloc(d->pixels, (size_t)n * 3072);
  if (px) d->pixels = px;
  int *lb = realloc(d->labels, (size_t)n * sizeof(int));
  if (lb) d->labels = lb;
  if (!px || !lb) return -1;
  *cap = n;
  return 0;
}

int dpt_data_load_cifar10(struct dpt_dataset *d, const char *dir, int train,
                          const struct dpt_data_opts *o, struct dpt_err *err)
{
  enum { REC = 1 + 3072, PER = 10000 };
  int nfiles = train ? 5 : 1, rc = 0, cap = 0;
  memset(d, 0, sizeof *d);
  unsigned char *rec = malloc(REC);
  if (!rec) return dpt_err_set(err, DPT_E_NOMEM, "cifar10: out of memory");
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
      if (cifar_room(d, kept, &cap, nfiles * PER)) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "cifar10: out of memory for %d records of %s", kept + 1, path);
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
  if (!rc && !d->pixels && cifar_room(d, 0, &cap, 16)) /* every record skipped: buffers all the same */
    rc = dpt_err_set(err, DPT_E_NOMEM, "cifar10: out of memory");
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

/* ---- batch formats: what a loader delivers, what a backend takes ---------------- */

size_t dpt_input_format_bytes(const struct dpt_input_format *f)
{
  return (size_t)f->batch * f->c_stored * f->h * f->w * (f->dtype == DPT_DATA_F32 ? 4 : 2);
}

static const char *layout_name(int l) { return l == DPT_DATA_NCHW ? "NCHW" : l == DPT_DATA_NHWC ? "NHWC" : "?"; }
static const char *dtype_name(int t)
{
  return t == DPT_DATA_F32 ? "fp32" : t == DPT_DATA_F16 ? "fp16" : t == DPT_DATA_BF16 ? "bf16" : "?";
}

int dpt_input_format_equal(const struct dpt_input_format *a, const struct dpt_input_format *b, char *why,
                           size_t why_len)
{
  const char *field = NULL;
  int va = 0, vb = 0;
#define CMP(f)                                                                                                    \
  if (!field && a->f != b->f) field = #f, va = a->f, vb = b->f
  CMP(layout);
  CMP(dtype);
  CMP(batch);
  CMP(c);
  CMP(c_stored);
  CMP(h);
  CMP(w);
  CMP(device);
#undef CMP
  if (!field) return 1;
  if (!strcmp(field, "layout")) snprintf(why, why_len, "layout %s vs %s", layout_name(va), layout_name(vb));
  else if (!strcmp(field, "dtype")) snprintf(why, why_len, "element type %s vs %s", dtype_name(va), dtype_name(vb));
  else if (!strcmp(field, "device")) snprintf(why, why_len, "device %d vs %d (-1: host memory)", va, vb);
  else snprintf(why, why_len, "%s %d vs %d", field, va, vb);
  return 0;
}

const char *dpt_input_format_describe(const struct dpt_input_format *f, char *buf, size_t len)
{
  int o = snprintf(buf, len, "%s %s, %d channel%s", layout_name(f->layout), dtype_name(f->dtype), f->c_stored,
                   f->c_stored == 1 ? "" : "s");
  if (f->c_stored > f->c && o > 0 && (size_t)o < len)
    snprintf(buf + o, len - (size_t)o, " (%d + %d zero)", f->c, f->c_stored - f->c);
  return buf;
}

void dpt_loader_device_format(const struct dpt_dataset *d, const struct dpt_loader_opts *o,
                              struct dpt_input_format *f)
{
  int dev_out = d->files && o->device == DPT_DATA_GPU && o->device_out;
  memset(f, 0, sizeof *f);
  f->batch = o->batch;
  f->c = d->c;
  f->h = f->w = o->out_size > 0 ? o->out_size : d->h;
  f->layout = dev_out ? o->layout : DPT_DATA_NCHW;
  f->dtype = dev_out ? o->dtype : DPT_DATA_F32;
  f->c_stored = f->layout == DPT_DATA_NHWC && o->c_stored > d->c ? o->c_stored : d->c;
  f->device = dev_out ? o->gpu : -1;
}

int dpt_loader_opts_for_format(struct dpt_loader_opts *o, const struct dpt_dataset *d,
                               const struct dpt_input_format *f, struct dpt_err *err)
{
  struct dpt_loader_opts t = *o;
  struct dpt_input_format got;
  char why[128];
  if (!d->files)
    return dpt_err_set(err, DPT_E_INPUT, "input format: %s is held in memory; only JPEG records (imagenet) are "
                       "decoded on the GPU", d->name);
  if (f->device < 0)
    return dpt_err_set(err, DPT_E_INPUT, "input format: the backend takes host batches (no device given)");
  if (d->c != 1 && d->c != 3)
    return dpt_err_set(err, DPT_E_INPUT, "input format: the GPU path decodes 1 (gray) or 3 (RGB) channels, "
                       "not the %d of %s", d->c, d->name);
  t.device = DPT_DATA_GPU;
  t.gpu = f->device;
  t.device_out = 1;
  t.layout = f->layout;
  t.dtype = f->dtype;
  t.c_stored = f->c_stored;
  dpt_loader_device_format(d, &t, &got);
  if (!dpt_input_format_equal(&got, f, why, sizeof why))
    return dpt_err_set(err, DPT_E_INPUT, "input format: the loader of %s (batch %d, %d channel(s), side %d) "
                       "cannot deliver the backend's input: %s (loader vs backend)", d->name, got.batch, got.c,
                       got.h, why);
  *o = t;
  return 0;
}
