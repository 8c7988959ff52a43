/* dpt_engine_cache.c — the cuDNN engine-config cache file (see dpt_engine_cache.h). */
#include "dpt_engine_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "dpt_file.h"

#define MAX_FILE ((size_t)64 << 20)

int dpt_engine_cache_path(const struct dpt_engine_ident *id, const char *dir, char *out, size_t len,
                          struct dpt_err *err)
{
  char base[1024], gpu[sizeof id->gpu];
  const char *env = getenv("DPT_ENGINE_CACHE");
  out[0] = '\0';
  if (!dir || !*dir) dir = env && *env ? env : NULL;
  if (dir && !strcmp(dir, "off")) return 0;
  if (dir) {
    snprintf(base, sizeof base, "%s", dir);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg == '/')
      snprintf(base, sizeof base, "%s/dpt", xdg);
    else if (home && *home)
      snprintf(base, sizeof base, "%s/.cache/dpt", home);
    else
      return dpt_err_set(err, DPT_E_INPUT,
                         "engine cache: neither XDG_CACHE_HOME nor HOME is set: set DPT_ENGINE_CACHE to a directory "
                         "(or 'off')");
  }
  size_t k = 0;
  for (const char *s = id->gpu; *s && k + 1 < sizeof gpu; s++)
    gpu[k++] = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
                       *s == '_'
                   ? *s
                   : '_';
  gpu[k] = '\0';
  int n = snprintf(out, len, "%s/engines-%s-sm%d%d-cudnn%ld.json", base, k ? gpu : "gpu", id->cc_major, id->cc_minor,
                   id->cudnn);
  if (n < 0 || (size_t)n >= len) {
    out[0] = '\0';
    return dpt_err_set(err, DPT_E_INPUT, "engine cache: the path under '%s' is too long: set DPT_ENGINE_CACHE to a "
                                         "shorter directory", base);
  }
  return 0;
}

/* ---- entries in memory --------------------------------------------------------- */

static int find(const struct dpt_engine_cache *c, const char *key, int *at)
{
  int lo = 0, hi = c->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2, r = strcmp(c->e[mid].key, key);
    if (!r) {
      *at = mid;
      return 1;
    }
    if (r < 0) lo = mid + 1;
    else hi = mid;
  }
  *at = lo;
  return 0;
}

/* a's knob i set to the same value in b */
static int knob_in(const struct dpt_engine_choice *a, int i, const struct dpt_engine_choice *b)
{
  for (int j = 0; j < b->n_knobs; j++)
    if (b->knob_type[j] == a->knob_type[i]) return b->knob_value[j] == a->knob_value[i];
  return 0;
}

int dpt_engine_choice_same(const struct dpt_engine_choice *a, const struct dpt_engine_choice *b)
{
  if (a->engine != b->engine || a->n_knobs != b->n_knobs) return 0;
  for (int i = 0; i < a->n_knobs; i++)
    if (!knob_in(a, i, b) || !knob_in(b, i, a)) return 0;
  return 1;
}

static int check_choice(const char *key, const struct dpt_engine_choice *ch, struct dpt_err *err)
{
  size_t kl = key ? strlen(key) : 0;
  if (!kl || kl >= DPT_ENGINE_KEY_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "engine cache: key of %zu characters (1 to %d)", kl, DPT_ENGINE_KEY_MAX - 1);
  if (ch->n_knobs < 0 || ch->n_knobs > DPT_ENGINE_MAX_KNOBS || ch->engine < 0 || !(ch->time_ms >= 0))
    return dpt_err_set(err, DPT_E_INPUT, "engine cache: '%s': engine %lld with %d knobs, time %g ms", key, ch->engine,
                       ch->n_knobs, ch->time_ms);
  return 0;
}

int dpt_engine_cache_put(struct dpt_engine_cache *c, const char *key, const struct dpt_engine_choice *ch,
                         struct dpt_err *err)
{
  int at, rc;
  if ((rc = check_choice(key, ch, err))) return rc;
  c->dirty = 1;
  if (find(c, key, &at)) {
    free(c->e[at].none);
    c->e[at].none = NULL;
    c->e[at].c = *ch;
    return 0;
  }
  if (c->n == c->cap) {
    int nc = c->cap ? 2 * c->cap : 32;
    struct dpt_engine_entry *e = realloc(c->e, (size_t)nc * sizeof *e);
    if (!e) return dpt_err_set(err, DPT_E_NOMEM, "engine cache: out of memory for %d entries", nc);
    c->e = e;
    c->cap = nc;
  }
  char *k = strdup(key);
  if (!k) return dpt_err_set(err, DPT_E_NOMEM, "engine cache: out of memory");
  memmove(c->e + at + 1, c->e + at, (size_t)(c->n - at) * sizeof *c->e);
  c->e[at].key = k;
  c->e[at].c = *ch;
  c->e[at].none = NULL;
  c->n++;
  return 0;
}

int dpt_engine_cache_put_none(struct dpt_engine_cache *c, const char *key, const char *why, struct dpt_err *err)
{
  struct dpt_engine_choice ch = {0};
  int at, rc;
  char *w = strdup(why && why[0] ? why : "no engine");
  if (!w) return dpt_err_set(err, DPT_E_NOMEM, "engine cache: out of memory");
  if ((rc = dpt_engine_cache_put(c, key, &ch, err))) return free(w), rc; /* engine 0: placeholder */
  find(c, key, &at);
  c->e[at].none = w;
  return 0;
}

const char *dpt_engine_cache_none(const struct dpt_engine_cache *c, const char *key)
{
  int at;
  return key && find(c, key, &at) ? c->e[at].none : NULL;
}

const struct dpt_engine_choice *dpt_engine_cache_get(const struct dpt_engine_cache *c, const char *key)
{
  int at;
  return key && find(c, key, &at) && !c->e[at].none ? &c->e[at].c : NULL;
}

static void clear(struct dpt_engine_cache *c)
{
  for (int i = 0; i < c->n; i++) free(c->e[i].key), free(c->e[i].none);
  c->n = 0;
}

void dpt_engine_cache_close(struct dpt_engine_cache *c)
{
  if (!c) return;
  clear(c);
  free(c->e);
  memset(c, 0, sizeof *c);
}

/* ---- the file --------------------------------------------------------------------- */

static void cc_string(const struct dpt_engine_ident *id, char *s, size_t n)
{
  snprintf(s, n, "%d.%d", id->cc_major, id->cc_minor);
}

/* Parse a file's text into entries (added to c, which the caller cleared or wants merged
 * under).  keep_existing: entries already in c win (the store's merge).  Returns NULL or why
 * the file cannot be used. */
static const char *parse(struct dpt_engine_cache *c, const char *text, size_t len, int keep_existing, char *why,
                         size_t wl)
{
  json_error_t je;
  json_t *root = json_loadb(text, len, 0, &je);
  const char *r = NULL;
  if (!root) {
    snprintf(why, wl, "not valid JSON (line %d, column %d: %s): corrupt or truncated", je.line, je.column, je.text);
    return why;
  }
  const char *fmt = json_string_value(json_object_get(root, "format"));
  const char *gpu = json_string_value(json_object_get(root, "gpu"));
  const char *cc = json_string_value(json_object_get(root, "compute_capability"));
  json_t *drv = json_object_get(root, "driver"), *dnn = json_object_get(root, "cudnn");
  json_t *entries = json_object_get(root, "entries");
  char mycc[32];
  cc_string(&c->id, mycc, sizeof mycc);
  if (!fmt || strcmp(fmt, DPT_ENGINE_CACHE_FORMAT)) {
    snprintf(why, wl, "format '%s', this dpt reads '%s'", fmt ? fmt : "(none)", DPT_ENGINE_CACHE_FORMAT);
    r = why;
    goto out;
  }
  if (!gpu || !cc || !json_is_integer(drv) || !json_is_integer(dnn) || !json_is_object(entries)) {
    snprintf(why, wl, "no gpu / compute_capability / driver / cudnn / entries");
    r = why;
    goto out;
  }
  if (strcmp(gpu, c->id.gpu) || strcmp(cc, mycc) || json_integer_value(drv) != c->id.driver ||
      json_integer_value(dnn) != c->id.cudnn) {
    snprintf(why, wl, "made for %s (sm %s), driver %lld, cuDNN %lld; this is %s (sm %s), driver %d, cuDNN %ld", gpu,
             cc, (long long)json_integer_value(drv), (long long)json_integer_value(dnn), c->id.gpu, mycc, c->id.driver,
             c->id.cudnn);
    r = why;
    goto out;
  }
  /* every entry is checked before any is used: one bad entry discards the file */
  const char *key;
  json_t *v;
  json_object_foreach(entries, key, v) {
    json_t *eng = json_object_get(v, "engine"), *knobs = json_object_get(v, "knobs");
    json_t *t = json_object_get(v, "time_ms"), *ws = json_object_get(v, "workspace");
    int ok = json_is_object(v) && json_is_integer(eng) && json_integer_value(eng) >= 0 && json_is_array(knobs) &&
             json_array_size(knobs) <= DPT_ENGINE_MAX_KNOBS && json_is_number(t) && json_number_value(t) >= 0 &&
             json_is_integer(ws) && json_integer_value(ws) >= 0 && strlen(key) > 0 &&
             strlen(key) < DPT_ENGINE_KEY_MAX;
    size_t i;
    json_t *kv;
    json_array_foreach(knobs, i, kv) {
      ok = ok && json_is_array(kv) && json_array_size(kv) == 2 && json_is_integer(json_array_get(kv, 0)) &&
           json_is_integer(json_array_get(kv, 1));
    }
    if (!ok) {
      snprintf(why, wl, "entry '%.200s' is malformed", key);
      r = why;
      goto out;
    }
  }
  json_object_foreach(entries, key, v) {
    struct dpt_engine_choice ch;
    int at;
    if (keep_existing && find(c, key, &at)) continue;
    memset(&ch, 0, sizeof ch);
    json_t *knobs = json_object_get(v, "knobs"), *kv;
    size_t i;
    ch.engine = json_integer_value(json_object_get(v, "engine"));
    ch.time_ms = json_number_value(json_object_get(v, "time_ms"));
    ch.workspace = (size_t)json_integer_value(json_object_get(v, "workspace"));
    json_array_foreach(knobs, i, kv) {
      ch.knob_type[i] = json_integer_value(json_array_get(kv, 0));
      ch.knob_value[i] = json_integer_value(json_array_get(kv, 1));
    }
    ch.n_knobs = (int)json_array_size(knobs);
    if (dpt_engine_cache_put(c, key, &ch, NULL)) {
      snprintf(why, wl, "out of memory");
      r = why;
      goto out;
    }
  }
  json_t *none = json_object_get(root, "no_engine"); /* optional */
  json_object_foreach(none, key, v) {
    int at;
    if (!json_is_string(v) || (keep_existing && find(c, key, &at))) continue;
    if (dpt_engine_cache_put_none(c, key, json_string_value(v), NULL)) {
      snprintf(why, wl, "out of memory");
      r = why;
      goto out;
    }
  }
out:
  json_decref(root);
  return r;
}

/* Read path into c.  0: loaded or absent (*why NULL); 1: present but unusable (why set). */
static int load_file(struct dpt_engine_cache *c, const char *path, int keep_existing, char *why, size_t wl)
{
  struct stat st;
  char *buf = NULL;
  size_t len = 0;
  struct dpt_err e;
  if (stat(path, &st) && errno == ENOENT) return 0;
  if (dpt_file_read(path, "engine cache", NULL, MAX_FILE, &buf, &len, &e)) {
    snprintf(why, wl, "cannot be read: %.600s", e.msg);
    return 1;
  }
  const char *r = parse(c, buf, len, keep_existing, why, wl);
  free(buf);
  return r != NULL;
}

int dpt_engine_cache_open(struct dpt_engine_cache *c, const struct dpt_engine_ident *id, const char *dir,
                          struct dpt_err *err)
{
  int rc;
  char why[768];
  memset(c, 0, sizeof *c);
  c->id = *id;
  if ((rc = dpt_engine_cache_path(id, dir, c->path, sizeof c->path, err))) return rc;
  if (!c->path[0]) return 0;
  if (load_file(c, c->path, 0, why, sizeof why)) {
    clear(c);
    snprintf(c->warning, sizeof c->warning,
             "engine cache %.900s ignored: %.700s; the engines are timed again and the file rewritten (delete it if this "
             "repeats, or set DPT_ENGINE_CACHE=off)", c->path, why);
  }
  c->dirty = 0;
  return 0;
}

static json_t *to_json(const struct dpt_engine_cache *c)
{
  char cc[32];
  cc_string(&c->id, cc, sizeof cc);
  json_t *root = json_object(), *entries = json_object(), *none = json_object();
  if (!root || !entries || !none) goto fail;
  if (json_object_set_new(root, "format", json_string(DPT_ENGINE_CACHE_FORMAT)) ||
      json_object_set_new(root, "gpu", json_string(c->id.gpu)) ||
      json_object_set_new(root, "compute_capability", json_string(cc)) ||
      json_object_set_new(root, "driver", json_integer(c->id.driver)) ||
      json_object_set_new(root, "cudnn", json_integer(c->id.cudnn)))
    goto fail;
  for (int i = 0; i < c->n; i++) {
    const struct dpt_engine_choice *ch = &c->e[i].c;
    if (c->e[i].none) {
      if (json_object_set_new(none, c->e[i].key, json_string(c->e[i].none))) goto fail;
      continue;
    }
    json_t *o = json_object(), *knobs = json_array();
    if (!o || !knobs) {
      json_decref(o), json_decref(knobs);
      goto fail;
    }
    for (int k = 0; k < ch->n_knobs; k++)
      json_array_append_new(knobs, json_pack("[II]", (json_int_t)ch->knob_type[k], (json_int_t)ch->knob_value[k]));
    json_object_set_new(o, "engine", json_integer(ch->engine));
    json_object_set_new(o, "knobs", knobs);
    json_object_set_new(o, "time_ms", json_real(ch->time_ms));
    json_object_set_new(o, "workspace", json_integer((json_int_t)ch->workspace));
    if (json_object_set_new(entries, c->e[i].key, o)) goto fail;
  }
  if (json_object_set_new(root, "no_engine", none)) return json_decref(entries), json_decref(root), NULL;
  if (json_object_set_new(root, "entries", entries)) return json_decref(root), NULL;
  return root;
fail:
  json_decref(none);
  json_decref(entries);
  json_decref(root);
  return NULL;
}

static int mkdirs(const char *dir, char *failed, size_t fl)
{
  char p[1024];
  struct stat st;
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s) continue;
    char save = *s;
    *s = '\0';
    if ((mkdir(p, 0755) && errno != EEXIST) || stat(p, &st) || (!S_ISDIR(st.st_mode) && (errno = ENOTDIR))) {
      snprintf(failed, fl, "%s", p);
      return -1;
    }
    *s = save;
    if (!save) return 0;
  }
}

int dpt_engine_cache_store(struct dpt_engine_cache *c, struct dpt_err *err)
{
  char dir[1024], tmp[1100], lockp[1100], failed[1024], why[768];
  int lock = -1, fd = -1, rc = 0;
  FILE *f = NULL;
  tmp[0] = '\0';
  json_t *root = NULL;
  if (!c->path[0]) return 0;
  snprintf(dir, sizeof dir, "%s", c->path);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) *slash = '\0';
  else snprintf(dir, sizeof dir, "%s", slash ? "/" : ".");
  if (mkdirs(dir, failed, sizeof failed)) {
    return dpt_err_set(err, DPT_E_RUNTIME,
                       "engine cache %s not written: cannot make the directory %s: %s (set DPT_ENGINE_CACHE to a "
                       "writable directory, or 'off')", c->path, failed, strerror(errno));
  }
  snprintf(lockp, sizeof lockp, "%s.lock", c->path);
  if ((lock = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0 || flock(lock, LOCK_EX)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME,
                     "engine cache %s not written: cannot lock %s: %s (set DPT_ENGINE_CACHE to a writable directory, "
                     "or 'off')", c->path, lockp, strerror(errno));
    goto done;
  }
  /* merge what other ranks stored meanwhile (ours win); an unusable file is replaced */
  (void)load_file(c, c->path, 1, why, sizeof why);
  snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", c->path);
  if ((fd = mkstemp(tmp)) < 0) {
    rc = dpt_err_set(err, DPT_E_RUNTIME,
                     "engine cache %s not written: cannot create a file in %s: %s (set DPT_ENGINE_CACHE to a writable "
                     "directory, or 'off')", c->path, dir, strerror(errno));
    goto done;
  }
  if (fchmod(fd, 0644) || !(root = to_json(c)) || !(f = fdopen(fd, "w"))) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "engine cache %s not written: %s", c->path,
                     root ? strerror(errno) : "out of memory");
    goto done;
  }
  fd = -1;
  if (json_dumpf(root, f, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) || fputc('\n', f) == EOF ||
      fflush(f) || fsync(fileno(f))) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "engine cache %s not written: writing %s: %s (disk full?)", c->path, tmp,
                     strerror(errno ? errno : EIO));
    goto done;
  }
  if (fclose(f)) {
    f = NULL;
    rc = dpt_err_set(err, DPT_E_RUNTIME, "engine cache %s not written: closing %s: %s", c->path, tmp, strerror(errno));
    goto done;
  }
  f = NULL;
  if (rename(tmp, c->path)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "engine cache %s not written: rename from %s: %s", c->path, tmp,
                     strerror(errno));
    goto done;
  }
  tmp[0] = '\0';
  c->dirty = 0;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
done:
  if (f) fclose(f);
  if (fd >= 0) close(fd);
  if (rc && tmp[0] && !strstr(tmp, "XXXXXX")) unlink(tmp); /* a temporary file that was not renamed */
  json_decref(root);
  if (lock >= 0) close(lock); /* releases the flock */
  return rc;
}
