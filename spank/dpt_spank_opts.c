/* dpt_spank_opts.c — see dpt_spank_opts.h */
#include "dpt_spank_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 31 /* longest key we look at; longer ones are unknown by definition */

static const char *const known_keys =
    "comm, fp16, ranks-per-gpu, threads, report, topology, tree, bind, verbose";

static const char *const comm_names[] = {"auto", "mpi", "ring", "hierarchical", "nccl", NULL};
static const char *const bind_names[] = {"auto", "strict", "none", NULL};

void dpt_spank_opts_init(struct dpt_spank_opts *o)
{
  memset(o, 0, sizeof *o);
  snprintf(o->comm, sizeof o->comm, "auto");
  snprintf(o->tree, sizeof o->tree, "slurm");
  o->bind = DPT_SPANK_BIND_AUTO;
}

const char *dpt_spank_bind_name(enum dpt_spank_bind b)
{
  switch (b) {
  case DPT_SPANK_BIND_AUTO: return "auto";
  case DPT_SPANK_BIND_STRICT: return "strict";
  case DPT_SPANK_BIND_NONE: return "none";
  }
  return "?";
}

/* Bytes allowed anywhere in the value: printable ASCII except space. */
static int byte_ok(unsigned char c) { return c > 0x20 && c < 0x7f; }

/* Bytes allowed in a path value. */
static int path_byte_ok(unsigned char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("._-/+@%~:", c) != NULL;
}

static int name_index(const char *const *names, const char *v, size_t n)
{
  for (int i = 0; names[i]; i++)
    if (strlen(names[i]) == n && memcmp(names[i], v, n) == 0)
      return i;
  return -1;
}

static void join_names(const char *const *names, char *buf, size_t len)
{
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; names[i] && used < len; i++) {
    int n = snprintf(buf + used, len - used, "%s%s", i ? "|" : "", names[i]);
    if (n < 0)
      break;
    used += (size_t)n;
  }
}

/* Parse a decimal integer in [lo, hi] from v[0..n). */
static int parse_int(const char *v, size_t n, long lo, long hi, long *out)
{
  char tmp[24];
  char *end;
  long x;
  if (n == 0 || n >= sizeof tmp)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (v[i] < '0' || v[i] > '9')
      return -1;
  memcpy(tmp, v, n);
  tmp[n] = '\0';
  errno = 0;
  x = strtol(tmp, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return -1;
  *out = x;
  return 0;
}

static int parse_bool(const char *v, size_t n, int *out)
{
  static const char *const yes[] = {"1", "yes", "true", "on", NULL};
  static const char *const no[] = {"0", "no", "false", "off", NULL};
  if (name_index(yes, v, n) >= 0) {
    *out = 1;
    return 0;
  }
  if (name_index(no, v, n) >= 0) {
    *out = 0;
    return 0;
  }
  return -1;
}

static int set_path(char *dst, const char *v, size_t n, const char *what, const char *key,
                    size_t off, struct dpt_err *err)
{
  if (n == 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: '%s=' needs a path", what, key);
  if (n >= DPT_SPANK_PATH_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the value of '%s' is %zu characters long; the limit is %d",
                       what, key, n, DPT_SPANK_PATH_MAX - 1);
  for (size_t i = 0; i < n; i++)
    if (!path_byte_ok((unsigned char)v[i]))
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: character '%c' at offset %zu is not allowed in the '%s' path "
                         "(use letters, digits and ._-/+@%%~:)",
                         what, v[i], off + i, key);
  memcpy(dst, v, n);
  dst[n] = '\0';
  return 0;
}

/* One "key[=value]" item at s[0..n), offset off in the whole argument. */
static int apply_item(struct dpt_spank_opts *o, const char *s, size_t n, size_t off,
                      const char *what, struct dpt_err *err)
{
  const char *eq = memchr(s, '=', n);
  size_t klen = eq ? (size_t)(eq - s) : n;
  const char *v = eq ? eq + 1 : NULL;
  size_t vlen = eq ? n - klen - 1 : 0;
  size_t voff = off + klen + 1;
  char key[KEY_MAX + 1];
  char names[128];
  long x;

  if (klen == 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: item at offset %zu has no key (expected key=value; keys: %s)",
                       what, off, known_keys);
  if (klen > KEY_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "%s: unknown key of %zu characters at offset %zu (keys: %s)",
                       what, klen, off, known_keys);
  memcpy(key, s, klen);
  key[klen] = '\0';

  if (strcmp(key, "comm") == 0) {
    int i = v ? name_index(comm_names, v, vlen) : -1;
    if (i < 0) {
      join_names(comm_names, names, sizeof names);
      if (v && vlen > 32)
        return dpt_err_set(err, DPT_E_INPUT, "%s: the value of 'comm' is %zu characters long; expected one of %s",
                           what, vlen, names);
      return dpt_err_set(err, DPT_E_INPUT, "%s: comm=%.*s is not a communicator; expected one of %s",
                         what, (int)vlen, v ? v : "", names);
    }
    snprintf(o->comm, sizeof o->comm, "%s", comm_names[i]);
  } else if (strcmp(key, "fp16") == 0) {
    if (!v)
      o->fp16 = 1;
    else if (parse_bool(v, vlen, &o->fp16) < 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s: fp16=%.*s%s is not a boolean (use 1|0|yes|no|true|false|on|off)",
                         what, (int)(vlen > 32 ? 32 : vlen), v, vlen > 32 ? "..." : "");
  } else if (strcmp(key, "ranks-per-gpu") == 0) {
    if (!v || parse_int(v, vlen, 1, 64, &x) < 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s: ranks-per-gpu=%.*s%s: expected an integer from 1 to 64",
                         what, (int)(vlen > 32 ? 32 : vlen), v ? v : "", vlen > 32 ? "..." : "");
    o->ranks_per_gpu = (int)x;
  } else if (strcmp(key, "threads") == 0) {
    if (!v || parse_int(v, vlen, 0, 4096, &x) < 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s: threads=%.*s%s: expected an integer from 0 (the plan's) to 4096",
                         what, (int)(vlen > 32 ? 32 : vlen), v ? v : "", vlen > 32 ? "..." : "");
    o->threads = (int)x;
  } else if (strcmp(key, "report") == 0) {
    return set_path(o->report, v, v ? vlen : 0, what, key, voff, err);
  } else if (strcmp(key, "topology") == 0) {
    return set_path(o->topology, v, v ? vlen : 0, what, key, voff, err);
  } else if (strcmp(key, "tree") == 0) {
    return set_path(o->tree, v, v ? vlen : 0, what, key, voff, err); /* slurm | flat | path */
  } else if (strcmp(key, "bind") == 0) {
    int i = v ? name_index(bind_names, v, vlen) : -1;
    if (i < 0) {
      join_names(bind_names, names, sizeof names);
      return dpt_err_set(err, DPT_E_INPUT, "%s: bind=%.*s%s: expected one of %s", what,
                         (int)(vlen > 32 ? 32 : vlen), v ? v : "", vlen > 32 ? "..." : "", names);
    }
    o->bind = (enum dpt_spank_bind)i;
  } else if (strcmp(key, "verbose") == 0) {
    if (!v)
      o->verbose = 1;
    else if (parse_int(v, vlen, 0, 3, &x) < 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s: verbose=%.*s%s: expected 0, 1, 2 or 3", what,
                         (int)(vlen > 32 ? 32 : vlen), v, vlen > 32 ? "..." : "");
    else
      o->verbose = (int)x;
  } else {
    return dpt_err_set(err, DPT_E_INPUT, "%s: unknown key '%s' (keys: %s)", what, key, known_keys);
  }
  return 0;
}

int dpt_spank_opts_apply(struct dpt_spank_opts *o, const char *s, const char *what,
                         struct dpt_err *err)
{
  struct dpt_spank_opts tmp;
  size_t len, start = 0;

  if (!s || !*s)
    return 0;
  len = strnlen(s, DPT_SPANK_ARG_MAX + 1);
  if (len > DPT_SPANK_ARG_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the value is longer than the limit of %d characters",
                       what, DPT_SPANK_ARG_MAX);
  for (size_t i = 0; i < len; i++)
    if (!byte_ok((unsigned char)s[i]))
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: byte 0x%02X at offset %zu is not allowed (use printable ASCII, no spaces)",
                         what, (unsigned char)s[i], i);

  tmp = *o;
  while (start <= len) {
    const char *comma = memchr(s + start, ',', len - start);
    size_t end = comma ? (size_t)(comma - s) : len;
    if (end == start) {
      if (!comma && start == len && start > 0)
        return dpt_err_set(err, DPT_E_INPUT, "%s: trailing ',' at offset %zu", what, start - 1);
      return dpt_err_set(err, DPT_E_INPUT, "%s: empty item at offset %zu (expected key=value)", what, start);
    }
    if (apply_item(&tmp, s + start, end - start, start, what, err) < 0)
      return DPT_E_INPUT;
    start = end + 1;
  }
  *o = tmp;
  return 0;
}

int dpt_spank_opts_from_option(struct dpt_spank_opts *o, const struct dpt_spank_opts *defaults,
                               const char *s, struct dpt_err *err)
{
  struct dpt_spank_opts tmp = *defaults;
  if (dpt_spank_opts_apply(&tmp, s, "--dpt", err) < 0)
    return DPT_E_INPUT;
  tmp.enabled = 1;
  *o = tmp;
  return 0;
}

int dpt_spank_opts_format(const struct dpt_spank_opts *o, char *buf, size_t len)
{
  int n = snprintf(buf, len,
                   "comm=%s,fp16=%d,ranks-per-gpu=%d,threads=%d,report=%s,topology=%s,tree=%s,"
                   "bind=%s,verbose=%d",
                   o->comm, o->fp16, o->ranks_per_gpu, o->threads, o->report, o->topology,
                   o->tree, dpt_spank_bind_name(o->bind), o->verbose);
  return (n < 0 || (size_t)n >= len) ? DPT_E_RUNTIME : 0;
}
