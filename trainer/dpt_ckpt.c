/* dpt_ckpt.c — atomic checksummed checkpoints. */
#include "dpt_ckpt.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "DPTCKPT3"
#define MAGIC_V1 "DPTCKPT1" /* no loss-scaler fields: read, never written */
#define MAGIC_V2 "DPTCKPT2" /* no optimizer name (all "sgd"): read, never written */
/* Header bytes of a version-1 file: struct dpt_ckpt_meta up to the loss-scaler fields;
 * of a version-2 file: up to the optimizer name. */
#define HDR_V1 offsetof(struct dpt_ckpt_meta, loss_scale)
#define HDR_V2 offsetof(struct dpt_ckpt_meta, optimizer)
_Static_assert(HDR_V1 == 152, "version-1 checkpoint header is 152 bytes");
_Static_assert(HDR_V2 == 168, "version-2 checkpoint header is 168 bytes");
_Static_assert(sizeof(struct dpt_ckpt_meta) == 192, "version-3 checkpoint header is 192 bytes");

/* elements of the optimizer-state array ("velocity") */
static uint64_t opt_len(const struct dpt_ckpt_meta *m) { return m->n_opt_state ? m->n_opt_state : m->n_params; }
/* the optimizer a header names ("" before version 3, or unset by the caller: sgd) */
static const char *opt_name(const struct dpt_ckpt_meta *m) { return m->optimizer[0] ? m->optimizer : "sgd"; }

struct wr {
  FILE *f;
  uLong crc;
  int bad; /* errno of the first failure (EIO if the library gave none), 0: none */
};

static void failed(struct wr *w)
{
  if (!w->bad) w->bad = errno ? errno : EIO;
}

static void put(struct wr *w, const void *p, size_t n)
{
  if (!n) return;
  errno = 0;
  if (fwrite(p, 1, n, w->f) != n) failed(w);
  const unsigned char *b = p;
  while (n) { /* crc32 takes uInt lengths */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    w->crc = crc32(w->crc, b, k);
    b += k;
    n -= k;
  }
}

void dpt_ckpt_path(const char *dir, uint64_t step, char *path, size_t len)
{
  snprintf(path, len, "%s/ckpt-%010llu.dpt", dir, (unsigned long long)step);
}

int dpt_ckpt_save(const char *path, const struct dpt_ckpt_meta *m, const float *params,
                  const float *state, const float *velocity, const float *pending, struct dpt_err *err)
{
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  struct wr w = {fopen(tmp, "wb"), crc32(0L, Z_NULL, 0), 0};
  if (!w.f)
    return dpt_err_set(err, DPT_E_RUNTIME, "checkpoint %s: cannot create (%s): check --checkpoint-dir",
                       tmp, strerror(errno));
  struct dpt_ckpt_meta h = *m;
  h.n_opt_state = opt_len(m);
  put(&w, MAGIC, 8);
  put(&w, &h, sizeof h);
  put(&w, params, m->n_params * sizeof(float));
  put(&w, state, m->n_state * sizeof(float));
  put(&w, velocity, h.n_opt_state * sizeof(float));
  if (m->n_pending) put(&w, pending, m->n_pending * sizeof(float));
  uint32_t crc = (uint32_t)w.crc;
  errno = 0;
  if (fwrite(&crc, 4, 1, w.f) != 1) failed(&w);
  errno = 0;
  if (fflush(w.f) || fsync(fileno(w.f))) failed(&w);
  errno = 0;
  if (fclose(w.f)) failed(&w);
  if (w.bad) {
    /* The partial file goes; <path> and the checkpoints before it are untouched. */
    struct stat st;
    long long got = stat(tmp, &st) ? -1 : (long long)st.st_size;
    unlink(tmp);
    const char *why = w.bad == ENOSPC ? "the disk is full"
                      : w.bad == EFBIG ? "the file size limit (ulimit -f / RLIMIT_FSIZE) was reached"
                      : w.bad == EDQUOT ? "the disk quota is exhausted"
                      : "the file system refused the write";
    return dpt_err_set(err, DPT_E_RUNTIME, "checkpoint %s: write failed after %lld of %llu bytes (%s): %s. "
                       "The previous checkpoints in that directory are kept and --resume auto uses the newest "
                       "of them; free space there (or raise the limit, or give another --checkpoint-dir) "
                       "before resuming", path, got,
                       (unsigned long long)(8 + sizeof h + (m->n_params + h.n_opt_state + m->n_state + m->n_pending) * 4 + 4),
                       strerror(w.bad), why);
  }
  if (rename(tmp, path)) {
    int e = errno;
    unlink(tmp);
    return dpt_err_set(err, DPT_E_RUNTIME, "checkpoint: rename %s -> %s failed (%s)", tmp, path, strerror(e));
  }
  /* make the rename durable */
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  return 0;
}

int dpt_ckpt_load(const char *path, const struct dpt_ckpt_meta *expect, struct dpt_ckpt_meta *got,
                  float *params, float *state, float *velocity, float *pending, struct dpt_err *err)
{
  int rc = 0;
  unsigned char *buf = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: cannot open (%s)", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || st.st_size < (off_t)(8 + HDR_V1 + 4)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: truncated (%lld bytes): refusing it",
                     path, (long long)st.st_size);
    goto out;
  }
  size_t size = (size_t)st.st_size;
  buf = malloc(size);
  if (!buf) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "checkpoint %s: out of memory (%zu bytes)", path, size);
    goto out;
  }
  if (fread(buf, 1, size, f) != size) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: read error", path);
    goto out;
  }
  int v1 = !memcmp(buf, MAGIC_V1, 8), v2 = !memcmp(buf, MAGIC_V2, 8);
  if (!v1 && !v2 && memcmp(buf, MAGIC, 8)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: not a dpt checkpoint (bad magic)", path);
    goto out;
  }
  struct dpt_ckpt_meta h;
  size_t hdr = v1 ? HDR_V1 : v2 ? HDR_V2 : sizeof h;
  memset(&h, 0, sizeof h); /* version 1: no loss scaler (0 = start with the default) */
  if (size < 8 + hdr + 4) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: truncated (%zu bytes): refusing it", path, size);
    goto out;
  }
  memcpy(&h, buf + 8, hdr);
  h.optimizer[sizeof h.optimizer - 1] = '\0'; /* from the file: not necessarily terminated */
  if (!h.optimizer[0]) snprintf(h.optimizer, sizeof h.optimizer, "sgd"); /* versions 1 and 2: all sgd */
  if (!h.n_opt_state) h.n_opt_state = h.n_params; /* versions 1 and 2: the momentum buffer */
  size_t want = 8 + hdr + (h.n_params + h.n_opt_state + h.n_state + h.n_pending) * sizeof(float) + 4;
  if (h.n_params > (1ull << 34) || h.n_state > (1ull << 34) || h.n_pending > (1ull << 34) ||
      h.n_opt_state > (1ull << 36) || want != size) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: %zu bytes but the header describes %zu: "
                     "truncated or corrupt, refusing it", path, size, want);
    goto out;
  }
  uint32_t crc;
  memcpy(&crc, buf + size - 4, 4);
  uLong c = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < size - 4;) {
    uInt k = (size - 4 - off) > (1u << 30) ? (1u << 30) : (uInt)(size - 4 - off);
    c = crc32(c, buf + off, k);
    off += k;
  }
  if ((uint32_t)c != crc) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: checksum mismatch (stored %08x, computed %08x): "
                     "the file is corrupt, refusing it", path, crc, (uint32_t)c);
    goto out;
  }
  if (expect) {
    if (strncmp(h.model, expect->model, sizeof h.model) || h.n_params != expect->n_params ||
        h.n_state != expect->n_state) {
      /* h.model comes from the file: not necessarily NUL-terminated */
      rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s holds model '%.*s' (%llu parameters), this run "
                       "builds '%s' (%llu): use the same model options or another --checkpoint-dir",
                       path, (int)strnlen(h.model, sizeof h.model), h.model,
                       (unsigned long long)h.n_params, expect->model,
                       (unsigned long long)expect->n_params);
      goto out;
    }
    if (strcmp(h.optimizer, opt_name(expect))) {
      rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s was written with --optimizer %s, this run has --optimizer %s: "
                       "their momentum buffers mean different things; resume with --optimizer %s or use another "
                       "--checkpoint-dir", path, h.optimizer, opt_name(expect), h.optimizer);
      goto out;
    }
    if (h.n_opt_state != opt_len(expect)) {
      rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s holds %llu optimizer-state values for %llu parameters (--optimizer "
                       "%s), this run needs %llu: corrupt, or written by another dpt version; use another "
                       "--checkpoint-dir", path, (unsigned long long)h.n_opt_state, (unsigned long long)h.n_params,
                       h.optimizer, (unsigned long long)opt_len(expect));
      goto out;
    }
    if (h.world_size != expect->world_size || (expect->batch && h.batch != expect->batch) ||
        h.n_pending != expect->n_pending) {
      rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s was written by %d ranks x batch %d%s; this run "
                       "has %d x %d%s: resume with the same ranks, batch and --double-buffering",
                       path, h.world_size, h.batch, h.n_pending ? " with double buffering" : "",
                       expect->world_size, expect->batch, expect->n_pending ? " with double buffering" : "");
      goto out;
    }
  }
  if (!(h.loss_scale >= 0 && h.loss_scale < 1e38f) || h.scale_good_steps < 0 || h.scale_skipped < 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "checkpoint %s: loss scaler state out of range (scale %g, %d good steps, "
                     "%lld skipped): corrupt, refusing it", path, (double)h.loss_scale, (int)h.scale_good_steps,
                     (long long)h.scale_skipped);
    goto out;
  }
  const unsigned char *p = buf + 8 + hdr;
  if (params) memcpy(params, p, h.n_params * 4);
  p += h.n_params * 4;
  if (state) memcpy(state, p, h.n_state * 4);
  p += h.n_state * 4;
  if (velocity) memcpy(velocity, p, h.n_opt_state * 4);
  p += h.n_opt_state * 4;
  if (pending && h.n_pending) memcpy(pending, p, h.n_pending * 4);
  if (got) *got = h;
out:
  free(buf);
  fclose(f);
  return rc;
}

static int ckpt_cmp(const void *a, const void *b)
{
  return strcmp(*(char *const *)b, *(char *const *)a); /* newest first (zero-padded steps) */
}

static int list(const char *dir, char ***names)
{
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  int n = 0, cap = 0;
  *names = NULL;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (strncmp(e->d_name, "ckpt-", 5) || l < 9 || strcmp(e->d_name + l - 4, ".dpt")) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **nn = realloc(*names, cap * sizeof *nn);
      if (!nn) break;
      *names = nn;
    }
    (*names)[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (n) qsort(*names, n, sizeof **names, ckpt_cmp);
  return n;
}

int dpt_ckpt_find_latest(const char *dir, const struct dpt_ckpt_meta *expect, char *path, size_t len,
                         void (*warn)(const char *msg), struct dpt_err *err)
{
  char **names;
  int n = list(dir, &names), found = 0;
  (void)err;
  if (n < 0) return 0; /* no directory yet: nothing to resume */
  for (int i = 0; i < n && !found; i++) {
    struct dpt_err e = {0};
    snprintf(path, len, "%s/%s", dir, names[i]);
    if (dpt_ckpt_load(path, expect, NULL, NULL, NULL, NULL, NULL, &e) == 0) found = 1;
    else if (warn) warn(e.msg);
  }
  if (!found && len) path[0] = 0;
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  return found;
}

/* "ckpt-<step>.dpt.tmp.<pid>" of a writer that was killed mid-write (SIGKILL, a
 * node crash) is never read, but it holds disk space: remove those not ours. */
static void remove_stale_tmp(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char own[32], path[4200];
  if (!d) return;
  snprintf(own, sizeof own, ".tmp.%d", (int)getpid());
  while ((e = readdir(d))) {
    const char *t = strstr(e->d_name, ".dpt.tmp.");
    if (strncmp(e->d_name, "ckpt-", 5) || !t || !strcmp(t + 4, own)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
}

void dpt_ckpt_prune(const char *dir, int keep)
{
  char **names, path[4200];
  remove_stale_tmp(dir);
  int n = list(dir, &names);
  for (int i = 0; i < n; i++) {
    if (i >= keep) {
      snprintf(path, sizeof path, "%s/%s", dir, names[i]);
      unlink(path);
    }
    free(names[i]);
  }
  if (n > 0) free(names);
}

/* ---- the learning curve next to the checkpoints ---------------------------- */

#define CURVE_FILE "curve.txt"
#define CURVE_HEAD "dpt-curve 1 epoch step train_loss train_top1 val_loss val_top1 val_top5 lr elapsed_s"

int dpt_ckpt_curve_save(const char *dir, const struct dpt_ckpt_point *p, size_t n, struct dpt_err *err)
{
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/" CURVE_FILE, dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path); /* one writer per directory: a killed one's is overwritten */
  FILE *f = fopen(tmp, "w");
  if (!f)
    return dpt_err_set(err, DPT_E_RUNTIME, "learning curve %s: cannot create (%s): check --checkpoint-dir",
                       tmp, strerror(errno));
  int bad = fprintf(f, CURVE_HEAD "\n") < 0;
  for (size_t i = 0; i < n && !bad; i++)
    bad = fprintf(f, "%.17g %ld %.17g %.17g %.17g %.17g %.17g %.17g %.17g\n", p[i].epoch, p[i].step,
                  p[i].train_loss, p[i].train_top1, p[i].val_loss, p[i].val_top1, p[i].val_top5, p[i].lr,
                  p[i].elapsed_s) < 0;
  int e = bad ? errno : 0;
  if (!bad && (fflush(f) || fsync(fileno(f)))) bad = 1, e = errno;
  if (fclose(f) && !bad) bad = 1, e = errno;
  if (bad || rename(tmp, path)) {
    if (!bad) e = errno;
    unlink(tmp);
    return dpt_err_set(err, DPT_E_RUNTIME, "learning curve %s: write failed (%s): free space in --checkpoint-dir; "
                       "the checkpoints are not affected", path, strerror(e ? e : EIO));
  }
  return 0;
}

int dpt_ckpt_curve_load(const char *dir, long max_step, struct dpt_ckpt_point **out, size_t *n,
                        struct dpt_err *err)
{
  char path[4200], line[1024];
  struct dpt_ckpt_point *v = NULL;
  size_t cap = 0, k = 0;
  int rc = 0, ln = 1;
  *out = NULL;
  *n = 0;
  snprintf(path, sizeof path, "%s/" CURVE_FILE, dir);
  FILE *f = fopen(path, "r");
  if (!f)
    return errno == ENOENT ? 0
                           : dpt_err_set(err, DPT_E_INPUT, "learning curve %s: cannot open (%s)", path, strerror(errno));
  if (!fgets(line, sizeof line, f) || strncmp(line, CURVE_HEAD, strlen(CURVE_HEAD))) {
    rc = dpt_err_set(err, DPT_E_INPUT, "learning curve %s: line 1 is not \"" CURVE_HEAD "\": not written by "
                     "dpt-train, or damaged; remove it (the report then starts its curve at the resumed step)",
                     path);
    goto out;
  }
  while (fgets(line, sizeof line, f)) {
    struct dpt_ckpt_point p;
    int used = 0;
    ln++;
    if (sscanf(line, "%lf %ld %lf %lf %lf %lf %lf %lf %lf %n", &p.epoch, &p.step, &p.train_loss, &p.train_top1,
               &p.val_loss, &p.val_top1, &p.val_top5, &p.lr, &p.elapsed_s, &used) != 9 || line[used] ||
        !isfinite(p.epoch) || p.epoch < 0 || p.step < 0 || (k && p.step <= v[k - 1].step)) {
      line[strcspn(line, "\n")] = '\0';
      rc = dpt_err_set(err, DPT_E_INPUT, "learning curve %s: line %d is malformed or out of order: \"%.80s\"; "
                       "remove the file (the report then starts its curve at the resumed step)", path, ln, line);
      goto out;
    }
    if (p.step > max_step)
      break;
    if (k == cap) {
      size_t nc = cap ? 2 * cap : 64;
      struct dpt_ckpt_point *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "learning curve %s: out of memory at line %d", path, ln);
        goto out;
      }
      v = nv;
      cap = nc;
    }
    v[k++] = p;
  }
out:
  fclose(f);
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  *n = k;
  return 0;
}
