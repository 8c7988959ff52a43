/* dpt_data_jpeg.c — ImageNet-style JPEG datasets: folder scan / list file
 * (dpt_data_load_imagenet) and the per-record decode + resize + crop that the
 * loader's worker threads run (dpt_data_jpeg_*, libturbojpeg 2.1 API). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "dpt_augment.h"
#include "dpt_data.h"
#ifdef DPT_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif

/* ---- the record list -------------------------------------------------------- */

struct rec_list {
  struct dpt_file_set *fs;
  int *labels;
  size_t n, cap, pool_len, pool_cap;
};

static int rec_add(struct rec_list *r, const char *dir, const char *sub, const char *name, int label)
{
  size_t need = strlen(dir) + (sub ? strlen(sub) + 1 : 0) + strlen(name) + 2;
  if (r->n == r->cap) {
    size_t nc = r->cap ? 2 * r->cap : 1024;
    size_t *no = realloc(r->fs->off, nc * sizeof *no);
    if (!no) return -1;
    r->fs->off = no;
    int *nl = realloc(r->labels, nc * sizeof *nl);
    if (!nl) return -1;
    r->labels = nl;
    r->cap = nc;
  }
  if (r->pool_len + need > r->pool_cap) {
    size_t nc = r->pool_cap ? 2 * r->pool_cap : 65536;
    while (nc < r->pool_len + need) nc *= 2;
    char *np = realloc(r->fs->pool, nc);
    if (!np) return -1;
    r->fs->pool = np;
    r->pool_cap = nc;
  }
  char *p = r->fs->pool + r->pool_len;
  int k;
  if (name[0] == '/') k = snprintf(p, need, "%s", name);
  else if (sub) k = snprintf(p, need, "%s/%s/%s", dir, sub, name);
  else k = snprintf(p, need, "%s/%s", dir, name);
  r->fs->off[r->n] = r->pool_len;
  r->labels[r->n++] = label;
  r->pool_len += (size_t)k + 1;
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int is_jpeg_name(const char *s)
{
  const char *dot = strrchr(s, '.');
  return s[0] != '.' && dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

static int is_kind(const char *dir, const struct dirent *e, int want_dir)
{
  if (e->d_type == DT_DIR) return want_dir;
  if (e->d_type == DT_REG) return !want_dir;
  /* DT_LNK / DT_UNKNOWN: ask stat (follows symlinks) */
  char p[PATH_MAX];
  struct stat st;
  if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || stat(p, &st)) return 0;
  return want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
}

/* Sorted names of the sub-folders (want_dir) or JPEG files of dir; *out NULL-terminated. */
static int list_dir(const char *dir, int want_dir, char ***out, size_t *n_out, struct dpt_err *err)
{
  DIR *d = opendir(dir);
  char **v = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  *out = NULL;
  *n_out = 0;
  if (!d)
    return dpt_err_set(err, DPT_E_INPUT, "%s: cannot open folder (%s): --data-dir must hold train/<class>/*.JPEG "
                       "and val/<class>/*.JPEG (or give --train-list / --val-list)", dir, strerror(errno));
  errno = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (want_dir ? !is_kind(dir, e, 1) : !(is_jpeg_name(e->d_name) && is_kind(dir, e, 0))) continue;
    if (n + 1 >= cap) {
      size_t nc = cap ? 2 * cap : 64;
      char **nv = realloc(v, nc * sizeof *nv);
      if (!nv) goto nomem;
      v = nv;
      cap = nc;
    }
    if (!(v[n] = strdup(e->d_name))) goto nomem;
    v[++n] = NULL;
  }
  closedir(d);
  if (n) qsort(v, n, sizeof *v, cmp_str);
  *out = v;
  *n_out = n;
  return 0;
nomem:
  closedir(d);
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory listing %zu entries", dir, n);
}

static void free_names(char **v, size_t n)
{
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static int scan_folders(struct rec_list *r, const char *dir, int train, const struct dpt_data_opts *o,
                        int *num_classes, struct dpt_err *err)
{
  char tdir[PATH_MAX], sdir[PATH_MAX], cdir[PATH_MAX];
  char **classes = NULL, **sub = NULL, **files = NULL;
  size_t nc = 0, ns = 0, nf = 0;
  int rc;
  if (snprintf(tdir, sizeof tdir, "%s/train", dir) >= (int)sizeof tdir ||
      snprintf(sdir, sizeof sdir, "%s/%s", dir, train ? "train" : "val") >= (int)sizeof sdir)
    return dpt_err_set(err, DPT_E_INPUT, "--data-dir '%.200s...': path too long", dir);
  if ((rc = list_dir(tdir, 1, &classes, &nc, err))) goto out;
  if (nc == 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: no class folders: expected train/<class>/*.JPEG under --data-dir", tdir);
    goto out;
  }
  if (o && o->num_classes > 0 && nc > (size_t)o->num_classes) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s has %zu class folders but --num-classes is %d: raise it or drop it",
                     tdir, nc, o->num_classes);
    goto out;
  }
  if (train) {
    sub = classes;
    ns = nc;
  } else if ((rc = list_dir(sdir, 1, &sub, &ns, err))) {
    dpt_err_prefix(err, "validation");
    goto out;
  }
  for (size_t i = 0; i < ns; i++) {
    char **hit = bsearch(&sub[i], classes, nc, sizeof *classes, cmp_str);
    if (!hit) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s/%s: class '%s' has no folder in %s, so it has no label: "
                       "remove it or add %s/%s", sdir, sub[i], sub[i], tdir, tdir, sub[i]);
      goto out;
    }
    if (snprintf(cdir, sizeof cdir, "%s/%s", sdir, sub[i]) >= (int)sizeof cdir) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s/%.200s...: path too long", sdir, sub[i]);
      goto out;
    }
    if ((rc = list_dir(cdir, 0, &files, &nf, err))) goto out;
    if (nf == 0 && train) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: no .jpg/.jpeg files in this class folder", cdir);
      goto out;
    }
    for (size_t k = 0; k < nf; k++) {
      if (r->n >= INT_MAX - 1) {
        rc = dpt_err_set(err, DPT_E_INPUT, "%s: more than %d images", sdir, INT_MAX - 1);
        goto out;
      }
      if (rec_add(r, sdir, sub[i], files[k], (int)(hit - classes))) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory for %zu records", sdir, r->n);
        goto out;
      }
    }
    free_names(files, nf);
    files = NULL;
    nf = 0;
  }
  if (r->n == 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: no .jpg/.jpeg files in its class folders", sdir);
    goto out;
  }
  *num_classes = (int)nc;
out:
  free_names(files, nf);
  if (sub != classes) free_names(sub, ns);
  free_names(classes, nc);
  return rc;
}

static int read_list(struct rec_list *r, const char *list, const struct dpt_data_opts *o, int *skipped,
                     int *num_classes, struct dpt_err *err)
{
  char base[PATH_MAX];
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  long lineno = 0;
  int rc = 0, maxl = -1, bound = o && o->num_classes > 0 ? o->num_classes : 1000000;
  FILE *f = fopen(list, "r");
  if (!f)
    return dpt_err_set(err, DPT_E_INPUT, "%s: cannot open list file (%s)", list, strerror(errno));
  snprintf(base, sizeof base, "%s", list);
  char *slash = strrchr(base, '/');
  if (slash) *slash = 0;
  else snprintf(base, sizeof base, ".");
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                       line[len - 1] == '\t'))
      line[--len] = 0;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') continue;
    if ((size_t)len != strlen(line)) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%ld: NUL byte in the line: not a text list of \"path label\"",
                       list, lineno);
      goto out;
    }
    char *sp = p + strlen(p);
    while (sp > p && sp[-1] != ' ' && sp[-1] != '\t') sp--;
    char *lab = sp, *end;
    while (sp > p && (sp[-1] == ' ' || sp[-1] == '\t')) sp--;
    if (sp == p) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%ld: expected \"path label\", found one field '%.200s'", list,
                       lineno, p);
      goto out;
    }
    *sp = 0;
    errno = 0;
    long v = strtol(lab, &end, 10);
    if (errno || end == lab || *end || v < 0 || v >= bound) {
      if (o && o->skip_bad) {
        (*skipped)++;
        continue;
      }
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%ld: label '%.100s' of '%.200s' is not an integer in [0, %d) "
                       "(fix the line, or pass --skip-bad to drop and count such records)",
                       list, lineno, lab, p, bound);
      goto out;
    }
    if (r->n >= INT_MAX - 1) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s:%ld: more than %d records", list, lineno, INT_MAX - 1);
      goto out;
    }
    if (rec_add(r, base, NULL, p, (int)v)) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "%s:%ld: out of memory", list, lineno);
      goto out;
    }
    if (v > maxl) maxl = (int)v;
  }
  if (ferror(f)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: read error after line %ld (%s)", list, lineno, strerror(errno));
    goto out;
  }
  if (r->n == 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: no records (expected lines \"path label\")", list);
    goto out;
  }
  *num_classes = o && o->num_classes > 0 ? o->num_classes : maxl + 1;
  if (*num_classes < 2) *num_classes = 2;
out:
  free(line);
  fclose(f);
  return rc;
}

int dpt_data_load_imagenet(struct dpt_dataset *d, const char *dir, const char *list, int train,
                           const struct dpt_data_opts *o, struct dpt_err *err)
{
  struct rec_list r = {0};
  int rc, ncls = 0, skipped = 0, ch = o && o->channels ? o->channels : 3;
  memset(d, 0, sizeof *d);
  if (ch != 1 && ch != 3)
    return dpt_err_set(err, DPT_E_INPUT, "imagenet: %d channels: 1 (grayscale) or 3 (RGB)", ch);
  if (!list && !dir)
    return dpt_err_set(err, DPT_E_INPUT, "imagenet needs --data-dir DIR (DIR/%s/<class>/*.JPEG) or --%s-list FILE",
                       train ? "train" : "val", train ? "train" : "val");
#ifndef DPT_HAVE_TURBOJPEG
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "imagenet: this dpt-train was built without libturbojpeg: "
                     "install libturbojpeg0-dev (bash .ci/install-deps does) and rebuild");
#endif
  if (!(r.fs = calloc(1, sizeof *r.fs))) return dpt_err_set(err, DPT_E_NOMEM, "imagenet: out of memory");
  rc = list ? read_list(&r, list, o, &skipped, &ncls, err) : scan_folders(&r, dir, train, o, &ncls, err);
  if (rc) goto fail;
  if (!(r.fs->bad = calloc(r.n, 1)) || !(r.fs->cpu_only = calloc(r.n, 1))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "imagenet: out of memory for %zu records", r.n);
    goto fail;
  }
  r.fs->skip_bad = o && o->skip_bad;
  d->files = r.fs;
  d->labels = r.labels;
  d->n = (int)r.n;
  d->c = ch;
  d->h = d->w = 224;
  d->num_classes = ncls;
  d->skipped = skipped;
  snprintf(d->name, sizeof d->name, "imagenet");
  if (ch == 3) {
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(d->mean, mean, sizeof mean);
    memcpy(d->std, std, sizeof std);
  } else {
    d->mean[0] = 0.449f; /* the mean of the RGB statistics */
    d->std[0] = 0.226f;
  }
  return 0;
fail:
  free(r.fs->pool);
  free(r.fs->off);
  free(r.fs->bad);
  free(r.fs->cpu_only);
  free(r.fs);
  free(r.labels);
  return rc;
}

const char *dpt_data_path(const struct dpt_dataset *d, long i)
{
  return d->files && i >= 0 && i < d->n ? d->files->pool + d->files->off[i] : NULL;
}

int dpt_data_skipped(const struct dpt_dataset *d)
{
  return d->skipped + (d->files ? __atomic_load_n(&d->files->bad_count, __ATOMIC_RELAXED) : 0);
}

/* ---- one record ------------------------------------------------------------------ */

int dpt_data_jpeg_init(struct dpt_jpeg *j, struct dpt_err *err)
{
  memset(j, 0, sizeof *j);
#ifdef DPT_HAVE_TURBOJPEG
  if (!(j->tj = tjInitDecompress()))
    return dpt_err_set(err, DPT_E_NOMEM, "libturbojpeg: cannot create a decompressor (%s)", tjGetErrorStr2(NULL));
  return 0;
#else
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "JPEG: built without libturbojpeg: install libturbojpeg0-dev and rebuild");
#endif
}

void dpt_data_jpeg_free(struct dpt_jpeg *j)
{
  if (!j) return;
#ifdef DPT_HAVE_TURBOJPEG
  if (j->tj) tjDestroy(j->tj);
#endif
  free(j->pix);
  free(j->file);
  free(j->tab);
  free(j->wt);
  memset(j, 0, sizeof *j);
}

int dpt_data_jpeg_read(struct dpt_jpeg *j, const char *path, long record, struct dpt_err *err)
{
  int rc = 0;
  struct stat st;
  FILE *f = fopen(path, "rb");
  j->file_len = 0;
  if (!f)
    return dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): cannot open (%s)", path, record, strerror(errno));
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): not a regular file", path, record);
    goto out;
  }
  if (st.st_size > (1L << 30)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): %lld bytes, more than 1 GiB: not an image", path, record,
                     (long long)st.st_size);
    goto out;
  }
  size_t want = (size_t)st.st_size + 1; /* +1: notice a file that grew */
  if (want > j->file_cap) {
    unsigned char *nb = realloc(j->file, want);
    if (!nb) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "%s (record %ld): out of memory for %zu bytes", path, record, want);
      goto out;
    }
    j->file = nb;
    j->file_cap = want;
  }
  j->file_len = fread(j->file, 1, want, f);
  if (ferror(f))
    rc = dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): read error (%s)", path, record, strerror(errno));
out:
  fclose(f);
  return rc;
}

#ifdef DPT_HAVE_TURBOJPEG
static int grow(unsigned char **buf, size_t *cap, size_t need)
{
  if (need <= *cap) return 0;
  unsigned char *nb = realloc(*buf, need);
  if (!nb) return -1;
  *buf = nb;
  *cap = need;
  return 0;
}
#endif

#ifdef DPT_HAVE_TURBOJPEG
/* The error of the last libjpeg call; the handle is replaced: libjpeg-turbo 2.1 leaves a
 * handle whose header read failed ("Unsupported JPEG process: SOF type 0xc3") failing
 * every later file with the same message. */
static int tj_error(struct dpt_jpeg *j, const char *what, const char *name, long record, struct dpt_err *err)
{
  int rc = dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): corrupt or not a JPEG (%s: %s): replace the file, or pass "
                       "--skip-bad to skip and count such records", name, record, what, tjGetErrorStr2(j->tj));
  tjhandle fresh = tjInitDecompress();
  if (fresh) {
    tjDestroy(j->tj);
    j->tj = fresh;
  }
  return rc;
}
#endif

int dpt_data_jpeg_header(struct dpt_jpeg *j, const unsigned char *buf, size_t len, const char *name, long record,
                         struct dpt_err *err)
{
#ifdef DPT_HAVE_TURBOJPEG
  int w = 0, h = 0, sub = 0, cs = -1; /* set: a header-only file left them unset (valgrind) */
  long maxp = j->max_pixels > 0 ? j->max_pixels : 1L << 28;
  j->src_w = j->src_h = 0;
  j->cs = -1;
  if (len == 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): empty file (0 bytes), not a JPEG: replace it, or pass "
                       "--skip-bad to skip and count such records", name, record);
  if (len > (1UL << 30))
    return dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): %zu bytes, too large for a JPEG record", name, record, len);
  if (tjDecompressHeader3(j->tj, buf, (unsigned long)len, &w, &h, &sub, &cs)) return tj_error(j, "header", name, record, err);
  if (w < 1 || h < 1 || (long)w * h > maxp)
    return dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): %d x %d pixels, outside 1 .. %ld pixels: not a "
                       "training image (pass --skip-bad to skip and count it)", name, record, w, h, maxp);
  j->src_w = w;
  j->src_h = h;
  j->cs = cs;
  return 0;
#else
  (void)j, (void)buf, (void)len;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "%s (record %ld): built without libturbojpeg: install "
                     "libturbojpeg0-dev and rebuild", name, record);
#endif
}

int dpt_data_jpeg_decode(struct dpt_jpeg *j, const unsigned char *buf, size_t len, int channels,
                         int min_side, const char *name, long record, struct dpt_err *err)
{
#ifdef DPT_HAVE_TURBOJPEG
  int rc;
  j->w = j->h = 0;
  if (channels != 1 && channels != 3)
    return dpt_err_set(err, DPT_E_INPUT, "%s (record %ld): %d channels requested: 1 or 3", name, record, channels);
  if ((rc = dpt_data_jpeg_header(j, buf, len, name, record, err))) return rc;
  int w = j->src_w, h = j->src_h, cs = j->cs;
  /* the smallest DCT scaling factor <= 1 whose shorter side is still >= min_side */
  int nsf = 0, bw = w, bh = h, shorter = w < h ? w : h;
  tjscalingfactor *sf = tjGetScalingFactors(&nsf);
  if (sf && min_side > 0) {
    for (int i = 0; i < nsf; i++) {
      if (sf[i].num > sf[i].denom) continue;
      int s = TJSCALED(shorter, sf[i]), sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
      if (s >= min_side && (long)sw * sh < (long)bw * bh) bw = sw, bh = sh;
    }
  }
  int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  int pf = cmyk ? TJPF_CMYK : channels == 3 ? TJPF_RGB : TJPF_GRAY;
  size_t need = (size_t)bw * bh * (size_t)tjPixelSize[pf];
  if (grow(&j->pix, &j->pix_cap, need))
    return dpt_err_set(err, DPT_E_NOMEM, "%s (record %ld): out of memory for a %d x %d image", name, record, bw, bh);
  if (tjDecompress2(j->tj, buf, (unsigned long)len, j->pix, bw, 0, bh, pf, j->exact ? 0 : TJFLAG_FASTDCT)) {
    /* warnings: the image was decoded; only a premature end (a truncated file, grey
     * filled in) is an error.  Real ImageNet files with extraneous bytes pass. */
    if (tjGetErrorCode(j->tj) != TJERR_WARNING || strcasestr(tjGetErrorStr2(j->tj), "premature"))
      return tj_error(j, "data", name, record, err);
  }
  if (cmyk) { /* Adobe's inverted CMYK (what libjpeg hands back for CMYK/YCCK files) */
    const unsigned char *s = j->pix;
    unsigned char *dst = j->pix;
    for (size_t i = 0; i < (size_t)bw * bh; i++, s += 4) {
      unsigned k = s[3], r = s[0] * k / 255, g = s[1] * k / 255, b = s[2] * k / 255;
      if (channels == 3) {
        dst[0] = (unsigned char)r, dst[1] = (unsigned char)g, dst[2] = (unsigned char)b;
        dst += 3;
      } else {
        *dst++ = (unsigned char)((299 * r + 587 * g + 114 * b + 500) / 1000);
      }
    }
  }
  j->w = bw;
  j->h = bh;
  j->c = channels;
  return 0;
#else
  (void)j, (void)buf, (void)len, (void)channels, (void)min_side;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "%s (record %ld): built without libturbojpeg: install "
                     "libturbojpeg0-dev and rebuild", name, record);
#endif
}

int dpt_data_jpeg_sample(struct dpt_jpeg *j, const struct dpt_crop *crop, int out, const float *mean,
                         const float *std, float *x)
{
  int C = j->c, W = j->w;
  if (j->w < 1 || j->h < 1 || out < 1 || j->src_w < 1 || j->src_h < 1) return -1;
  size_t need = 4 * (size_t)out;
  if (need > j->tab_cap) {
    int *nt = realloc(j->tab, need * sizeof *nt);
    if (!nt) return -1;
    j->tab = nt;
    float *nw = realloc(j->wt, need * sizeof *nw);
    if (!nw) return -1;
    j->wt = nw;
    j->tab_cap = need;
  }
  /* columns: tab[2k], tab[2k+1], wt[k]; rows after them (the GPU kernel gets the same tables) */
  int *cx = j->tab, *cy = j->tab + 2 * out;
  float *wx = j->wt, *wy = j->wt + out;
  dpt_augment_tables(crop, out, j->src_w, j->src_h, j->w, j->h, cx, wx, cy, wy);
  for (int c = 0; c < C; c++) {
    float sc = 1.0f / (255.0f * std[c]), sh = -mean[c] / std[c];
    for (int y = 0; y < out; y++) {
      float *o = x + ((size_t)c * out + y) * out;
      const unsigned char *r0 = j->pix + (size_t)cy[2 * y] * W * C + c, *r1 = j->pix + (size_t)cy[2 * y + 1] * W * C + c;
      float fy = wy[y];
      for (int k = 0; k < out; k++) {
        size_t a = (size_t)cx[2 * k] * C, b = (size_t)cx[2 * k + 1] * C;
        float fx = wx[k];
        float top = r0[a] + (r0[b] - r0[a]) * fx, bot = r1[a] + (r1[b] - r1[a]) * fx;
        float v = top + (bot - top) * fy;
        o[k] = v * sc + sh;
      }
    }
  }
  return 0;
}
