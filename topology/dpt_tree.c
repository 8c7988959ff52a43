/* dpt_tree.c — switch trees from topology.conf, SLURM_TOPOLOGY_ADDR,
 * ibnetdiscover dumps, or nothing.  See dpt_tree.h for the semantics.
 *
 * Every parser works on a buffer (the file loaders read the file and call it),
 * reports the first problem as DPT_E_INPUT "NAME:LINE: what; what to do", and
 * builds its result through the public builder (dpt_tree_add_switch /
 * dpt_tree_add_host / dpt_tree_finish) so all sources share one set of
 * invariants.  Hostlists are expanded by libslurm only. */
#define _GNU_SOURCE /* strverscmp */
#include "dpt_tree.h"
#include "dpt_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

#define NAME_MAX_LEN (DPT_TREE_NAME_MAX - 1)
#define MAX_FILE_BYTES ((size_t)256 << 20)

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

/* "name:line: message" (line 0: "name: message"). */
static int err_at(struct dpt_err *err, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int err_at(struct dpt_err *err, const char *name, int line, const char *fmt, ...)
{
  char msg[DPT_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line > 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s:%d: %s", name, line, msg);
  return dpt_err_set(err, DPT_E_INPUT, "%s: %s", name, msg);
}

static int err_nomem(struct dpt_err *err, const char *what)
{
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory while %s", what);
}

/* ------------------------------------------------------------------------ */
/* Open-addressing hash of indices; names are looked up through a callback so
 * the table works over any array (which may be realloc'd).                 */

typedef const char *(*name_fn)(const void *ctx, int i);

struct itab {
  int *slot;      /* [mask + 1], -1 = empty */
  unsigned mask;
  int n;
};

static uint64_t hash_name(const char *s)
{
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static void itab_free(struct itab *t)
{
  free(t->slot);
  t->slot = NULL;
  t->mask = 0;
  t->n = 0;
}

static int itab_find(const struct itab *t, const void *ctx, name_fn fn, const char *name)
{
  if (!t->slot)
    return -1;
  for (unsigned h = (unsigned)hash_name(name) & t->mask;; h = (h + 1) & t->mask) {
    int i = t->slot[h];
    if (i < 0)
      return -1;
    if (strcmp(fn(ctx, i), name) == 0)
      return i;
  }
}

static void itab_put_raw(int *slot, unsigned mask, const char *name, int idx)
{
  unsigned h = (unsigned)hash_name(name) & mask;
  while (slot[h] >= 0)
    h = (h + 1) & mask;
  slot[h] = idx;
}

/* Add idx (its name must be absent).  0 or -1 (out of memory). */
static int itab_add(struct itab *t, const void *ctx, name_fn fn, int idx)
{
  if (!t->slot || (unsigned)(t->n + 1) * 2 > t->mask + 1) {
    unsigned size = t->slot ? (t->mask + 1) * 2 : 64;
    int *slot = malloc(size * sizeof *slot);
    if (!slot)
      return -1;
    memset(slot, 0xff, size * sizeof *slot);
    if (t->slot)
      for (unsigned h = 0; h <= t->mask; h++)
        if (t->slot[h] >= 0)
          itab_put_raw(slot, size - 1, fn(ctx, t->slot[h]), t->slot[h]);
    free(t->slot);
    t->slot = slot;
    t->mask = size - 1;
  }
  itab_put_raw(t->slot, t->mask, fn(ctx, idx), idx);
  t->n++;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Tree builder                                                             */

struct dpt_tree_index {
  int cap_sw, cap_hosts;  /* allocated lengths of tree->sw / tree->hosts */
  struct itab hosts;      /* name -> host index */
  struct itab sws;        /* name -> switch index */
};

static const char *host_name_fn(const void *ctx, int i)
{
  return ((const struct dpt_tree *)ctx)->hosts[i].name;
}

static const char *sw_name_fn(const void *ctx, int i)
{
  return ((const struct dpt_tree *)ctx)->sw[i].name;
}

/* 1..63 printable ASCII characters; hosts also without blanks. */
static int name_ok(const char *name, int allow_space)
{
  size_t n = 0;
  for (const char *p = name; *p; p++, n++) {
    unsigned char c = (unsigned char)*p;
    if (c < 0x20 || c > 0x7e || (!allow_space && c == ' ') || n >= NAME_MAX_LEN)
      return 0;
  }
  return n > 0;
}

int dpt_tree_create(struct dpt_tree **out, const char *source, struct dpt_err *err)
{
  struct dpt_tree *t = calloc(1, sizeof *t);
  if (!t || !(t->index = calloc(1, sizeof *t->index))) {
    free(t);
    return err_nomem(err, "creating a switch tree");
  }
  snprintf(t->source, sizeof t->source, "%s", source ? source : "");
  *out = t;
  return 0;
}

void dpt_tree_destroy(struct dpt_tree *tree)
{
  if (!tree)
    return;
  if (tree->index) {
    itab_free(&tree->index->hosts);
    itab_free(&tree->index->sws);
    free(tree->index);
  }
  free(tree->sw);
  free(tree->hosts);
  free(tree);
}

int dpt_tree_add_switch(struct dpt_tree *t, const char *name, int parent, struct dpt_err *err)
{
  struct dpt_tree_index *ix = t->index;
  struct dpt_tree_switch *s;

  if (!ix)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_tree_add_switch: tree was not made by dpt_tree_create()");
  if (!name || !name_ok(name, 1))
    return dpt_err_set(err, DPT_E_INPUT,
                       "switch name '%.80s' is empty, longer than %d characters or not printable ASCII",
                       name ? name : "(null)", NAME_MAX_LEN);
  if (parent < -1 || parent >= t->n_switches)
    return dpt_err_set(err, DPT_E_INPUT, "switch '%s': parent index %d out of range (0..%d)", name,
                       parent, t->n_switches - 1);
  if (itab_find(&ix->sws, t, sw_name_fn, name) >= 0)
    return dpt_err_set(err, DPT_E_INPUT, "switch '%s' added twice", name);
  if (t->n_switches >= DPT_TREE_MAX_HOSTS)
    return dpt_err_set(err, DPT_E_INPUT, "more than %d switches", DPT_TREE_MAX_HOSTS);
  if (t->n_switches == ix->cap_sw) {
    int cap = ix->cap_sw ? 2 * ix->cap_sw : 16;
    void *p = realloc(t->sw, (size_t)cap * sizeof *t->sw);
    if (!p)
      return err_nomem(err, "adding a switch");
    t->sw = p;
    ix->cap_sw = cap;
  }
  s = &t->sw[t->n_switches];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->parent = parent;
  s->uplinks = parent >= 0 ? 1 : 0;
  if (itab_add(&ix->sws, t, sw_name_fn, t->n_switches) < 0)
    return err_nomem(err, "indexing switch names");
  return t->n_switches++;
}

int dpt_tree_add_host(struct dpt_tree *t, const char *name, int sw, struct dpt_err *err)
{
  struct dpt_tree_index *ix = t->index;
  struct dpt_tree_host *h;

  if (!ix)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_tree_add_host: tree was not made by dpt_tree_create()");
  if (!name || !name_ok(name, 0))
    return dpt_err_set(err, DPT_E_INPUT,
                       "host name '%.80s' is empty, longer than %d characters, or has blanks or "
                       "non-ASCII characters",
                       name ? name : "(null)", NAME_MAX_LEN);
  if (sw < 0 || sw >= t->n_switches)
    return dpt_err_set(err, DPT_E_INPUT, "host '%s': switch index %d out of range (0..%d)", name, sw,
                       t->n_switches - 1);
  if (itab_find(&ix->hosts, t, host_name_fn, name) >= 0)
    return dpt_err_set(err, DPT_E_INPUT, "host '%s' added twice", name);
  if (t->n_hosts >= DPT_TREE_MAX_HOSTS)
    return dpt_err_set(err, DPT_E_INPUT, "more than %d hosts", DPT_TREE_MAX_HOSTS);
  if (t->n_hosts == ix->cap_hosts) {
    int cap = ix->cap_hosts ? 2 * ix->cap_hosts : 64;
    void *p = realloc(t->hosts, (size_t)cap * sizeof *t->hosts);
    if (!p)
      return err_nomem(err, "adding a host");
    t->hosts = p;
    ix->cap_hosts = cap;
  }
  h = &t->hosts[t->n_hosts];
  memset(h, 0, sizeof *h);
  snprintf(h->name, sizeof h->name, "%s", name);
  h->sw = sw;
  if (itab_add(&ix->hosts, t, host_name_fn, t->n_hosts) < 0)
    return err_nomem(err, "indexing host names");
  return t->n_hosts++;
}

/* A switch name not used yet: base, base-2, base-3, ... */
static void unique_switch_name(const struct dpt_tree *t, const char *base, char out[DPT_TREE_NAME_MAX])
{
  snprintf(out, DPT_TREE_NAME_MAX, "%s", base);
  for (int k = 2; dpt_tree_find_switch(t, out) >= 0; k++)
    snprintf(out, DPT_TREE_NAME_MAX, "%s-%d", base, k);
}

/* Add a virtual switch (parent -1).  Index or negative code. */
static int add_virtual_switch(struct dpt_tree *t, const char *base, struct dpt_err *err)
{
  char name[DPT_TREE_NAME_MAX];
  int i;
  unique_switch_name(t, base, name);
  i = dpt_tree_add_switch(t, name, -1, err);
  if (i >= 0)
    t->sw[i].is_virtual = 1;
  return i;
}

static int sibling_cmp(const void *a, const void *b, void *ctx)
{
  const struct dpt_tree *t = ctx;
  const char *x = t->sw[*(const int *)a].name, *y = t->sw[*(const int *)b].name;
  int c = strverscmp(x, y);
  return c ? c : strcmp(x, y);
}

int dpt_tree_finish(struct dpt_tree *t, struct dpt_err *err)
{
  int rc = DPT_E_NOMEM, n, roots = 0, root = -1, vroot;
  int *below = NULL, *nchild = NULL, *first = NULL, *kids = NULL, *order = NULL, *newidx = NULL,
      *stack = NULL;
  struct dpt_tree_switch *perm = NULL;

  if (!t->index)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_tree_finish: tree was not made by dpt_tree_create()");
  if (t->n_hosts == 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the switch tree has no hosts", t->source);
  n = t->n_switches;
  for (int i = 0; i < n; i++) {
    int p = t->sw[i].parent;
    if (p < -1 || p >= n || p == i)
      return dpt_err_set(err, DPT_E_INPUT, "%s: switch '%s' has an invalid parent index %d", t->source,
                         t->sw[i].name, p);
  }
  /* Several roots: a virtual one above them. */
  for (int i = 0; i < n; i++)
    if (t->sw[i].parent < 0)
      roots++;
  if (roots == 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the switches form a cycle (no top-level switch)", t->source);
  if (roots > 1) {
    vroot = add_virtual_switch(t, "virtual-root", err);
    if (vroot < 0)
      return vroot;
    for (int i = 0; i < vroot; i++)
      if (t->sw[i].parent < 0) {
        t->sw[i].parent = vroot;
        if (t->sw[i].uplinks == 0)
          t->sw[i].uplinks = 1;
      }
    n = t->n_switches;
  }
  for (int i = 0; i < n; i++)
    if (t->sw[i].parent < 0)
      root = i;

  below = calloc((size_t)n, sizeof *below);
  nchild = calloc((size_t)n, sizeof *nchild);
  first = calloc((size_t)n + 1, sizeof *first);
  kids = calloc((size_t)n, sizeof *kids);
  order = calloc((size_t)n, sizeof *order);
  newidx = calloc((size_t)n, sizeof *newidx);
  stack = calloc((size_t)n, sizeof *stack);
  perm = calloc((size_t)n, sizeof *perm);
  if (!below || !nchild || !first || !kids || !order || !newidx || !stack || !perm) {
    err_nomem(err, "ordering switches");
    goto fail;
  }
  /* Children lists (CSR), siblings in index order. */
  for (int i = 0; i < n; i++)
    if (t->sw[i].parent >= 0)
      nchild[t->sw[i].parent]++;
  for (int i = 0; i < n; i++)
    first[i + 1] = first[i] + nchild[i];
  {
    int *fill = newidx; /* reused as a cursor */
    memcpy(fill, first, (size_t)n * sizeof *fill);
    for (int i = 0; i < n; i++)
      if (t->sw[i].parent >= 0)
        kids[fill[t->sw[i].parent]++] = i;
  }
  /* Siblings in natural name order: the same cluster gives the same tree
   * (and the same ring) whatever the source and the input order. */
  for (int i = 0; i < n; i++)
    if (nchild[i] > 1)
      qsort_r(kids + first[i], (size_t)nchild[i], sizeof *kids, sibling_cmp, t);
  for (int h = 0; h < t->n_hosts; h++) {
    int s = t->hosts[h].sw;
    if (s < 0 || s >= n) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: host '%s' has an invalid switch index %d", t->source,
                       t->hosts[h].name, s);
      goto fail;
    }
    if (nchild[s] > 0) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "%s: switch '%s' has both hosts (e.g. '%s') and child switches (e.g. '%s'); "
                       "Slurm's topology/tree does not allow this either: put the hosts under a leaf "
                       "switch of their own",
                       t->source, t->sw[s].name, t->hosts[h].name, t->sw[kids[first[s]]].name);
      goto fail;
    }
  }
  /* Preorder walk from the root. */
  {
    int sp = 0, k = 0;
    stack[sp++] = root;
    while (sp > 0) {
      int s = stack[--sp];
      order[k++] = s;
      for (int c = first[s + 1] - 1; c >= first[s]; c--)
        stack[sp++] = kids[c];
    }
    if (k != n) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: %d switches are not below the root (cycle)", t->source, n - k);
      goto fail;
    }
  }
  for (int k = 0; k < n; k++)
    newidx[order[k]] = k;
  for (int k = 0; k < n; k++) {
    perm[k] = t->sw[order[k]];
    perm[k].parent = perm[k].parent >= 0 ? newidx[perm[k].parent] : -1;
    perm[k].depth = perm[k].parent >= 0 ? perm[perm[k].parent].depth + 1 : 0;
    if (perm[k].parent < 0) {
      perm[k].link_gbps = 0;
      perm[k].uplinks = 0;
    } else if (perm[k].uplinks <= 0) {
      perm[k].uplinks = 1;
    }
  }
  memcpy(t->sw, perm, (size_t)n * sizeof *perm);
  for (int h = 0; h < t->n_hosts; h++) {
    t->hosts[h].sw = newidx[t->hosts[h].sw];
    below[t->hosts[h].sw]++;
  }
  for (int k = n - 1; k > 0; k--)
    below[t->sw[k].parent] += below[k];
  for (int k = 0; k < n; k++)
    if (below[k] == 0) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: switch '%s' has no hosts below it", t->source, t->sw[k].name);
      goto fail;
    }
  /* Rebuild the name index (switch indices changed). */
  itab_free(&t->index->sws);
  for (int k = 0; k < n; k++)
    if (itab_add(&t->index->sws, t, sw_name_fn, k) < 0) {
      err_nomem(err, "indexing switch names");
      goto fail;
    }
  rc = 0;
fail:
  free(below);
  free(nchild);
  free(first);
  free(kids);
  free(order);
  free(newidx);
  free(stack);
  free(perm);
  return rc;
}

int dpt_tree_find_host(const struct dpt_tree *t, const char *name)
{
  if (!t || !name)
    return -1;
  if (t->index && t->index->hosts.n == t->n_hosts)
    return itab_find(&t->index->hosts, t, host_name_fn, name);
  for (int i = 0; i < t->n_hosts; i++)
    if (strcmp(t->hosts[i].name, name) == 0)
      return i;
  return -1;
}

int dpt_tree_find_switch(const struct dpt_tree *t, const char *name)
{
  if (!t || !name)
    return -1;
  if (t->index && t->index->sws.n == t->n_switches)
    return itab_find(&t->index->sws, t, sw_name_fn, name);
  for (int i = 0; i < t->n_switches; i++)
    if (strcmp(t->sw[i].name, name) == 0)
      return i;
  return -1;
}

int dpt_tree_flat(struct dpt_tree **out, const char *const *hosts, int n, struct dpt_err *err)
{
  struct dpt_tree *t = NULL;
  int rc, s;

  *out = NULL;
  if (n <= 0 || !hosts)
    return dpt_err_set(err, DPT_E_INPUT, "flat switch tree: no hosts given");
  if ((rc = dpt_tree_create(&t, "flat", err)) < 0)
    return rc;
  if ((s = rc = add_virtual_switch(t, "flat", err)) < 0)
    goto fail;
  for (int i = 0; i < n; i++) {
    if (hosts[i] && dpt_tree_find_host(t, hosts[i]) >= 0) {
      rc = dpt_err_set(err, DPT_E_INPUT, "flat switch tree: host '%s' is listed twice (entries %d and %d)",
                       hosts[i], dpt_tree_find_host(t, hosts[i]), i);
      goto fail;
    }
    if ((rc = dpt_tree_add_host(t, hosts[i], s, err)) < 0)
      goto fail;
  }
  if ((rc = dpt_tree_finish(t, err)) < 0)
    goto fail;
  *out = t;
  return 0;
fail:
  dpt_tree_destroy(t);
  return rc;
}

json_t *dpt_tree_to_json(const struct dpt_tree *t)
{
  json_t *doc = json_object(), *sws = json_array(), *hosts = json_array();
  if (!doc || !sws || !hosts)
    goto fail;
  json_object_set_new(doc, "schema", json_string("dpt.tree/1"));
  json_object_set_new(doc, "source", json_string(t->source));
  json_object_set_new(doc, "switches", sws);
  json_object_set_new(doc, "hosts", hosts);
  for (int i = 0; i < t->n_switches; i++) {
    const struct dpt_tree_switch *s = &t->sw[i];
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:i, s:b}", "name", s->name, "parent", s->parent,
                          "depth", s->depth, "link_gbps", s->link_gbps, "link_speed", s->link_speed,
                          "uplinks", s->uplinks, "virtual", s->is_virtual);
    if (!o || json_array_append_new(sws, o) < 0)
      goto fail_doc;
  }
  for (int i = 0; i < t->n_hosts; i++) {
    const struct dpt_tree_host *h = &t->hosts[i];
    json_t *o = json_pack("{s:s, s:i, s:f}", "name", h->name, "switch", h->sw, "link_gbps", h->link_gbps);
    if (!o || json_array_append_new(hosts, o) < 0)
      goto fail_doc;
  }
  return doc;
fail:
  json_decref(sws);
  json_decref(hosts);
fail_doc:
  json_decref(doc);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Hostlists (libslurm)                                                     */

void dpt_tree_hostlist_free(char **hosts, int n)
{
  if (!hosts)
    return;
  for (int i = 0; i < n; i++)
    free(hosts[i]);
  free(hosts);
}

int dpt_tree_hostlist_expand(const char *hostlist, char ***out, int *n, struct dpt_err *err)
{
  hostlist_t hl = NULL;
  char **v = NULL, *s;
  int cnt, k = 0, depth = 0, rc;

  *out = NULL;
  *n = 0;
  if (!hostlist)
    return dpt_err_set(err, DPT_E_INPUT, "hostlist is NULL");
  /* libslurm accepts "n[1-" and "n1]" and returns mangled names: reject
   * unbalanced or nested brackets before handing the string over. */
  for (const char *p = hostlist; *p; p++) {
    if (*p == '[') {
      if (depth++)
        return dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s': nested '[' at offset %d", hostlist,
                           (int)(p - hostlist));
    } else if (*p == ']') {
      if (!depth--)
        return dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s': ']' without '[' at offset %d", hostlist,
                           (int)(p - hostlist));
    }
  }
  if (depth)
    return dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s': '[' is never closed", hostlist);
  hl = slurm_hostlist_create(hostlist);
  if (!hl)
    return dpt_err_set(err, DPT_E_INPUT,
                       "hostlist '%.200s' is invalid (libslurm rejects it: bad or reversed range, or "
                       "more than 65536 names in one range)",
                       hostlist);
  cnt = slurm_hostlist_count(hl);
  if (cnt < 0 || cnt > DPT_TREE_MAX_HOSTS) {
    rc = dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s' names %d hosts, more than dpt's limit of %d",
                     hostlist, cnt, DPT_TREE_MAX_HOSTS);
    goto fail;
  }
  v = calloc((size_t)cnt + 1, sizeof *v);
  if (!v) {
    rc = err_nomem(err, "expanding a hostlist");
    goto fail;
  }
  while (k < cnt && (s = slurm_hostlist_shift(hl))) {
    v[k++] = s;
    if (strpbrk(s, "[]")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s': libslurm could not expand '%.80s'", hostlist, s);
      goto fail;
    }
  }
  slurm_hostlist_destroy(hl);
  *out = v;
  *n = k;
  return 0;
fail:
  dpt_tree_hostlist_free(v, k);
  slurm_hostlist_destroy(hl);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Files and lines                                                          */

/* A growable NUL-terminated string. */
struct sbuf {
  char *s;
  size_t n, cap;
};

static int sbuf_add(struct sbuf *b, const char *p, size_t n)
{
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    void *q;
    while (cap < b->n + n + 1)
      cap *= 2;
    q = realloc(b->s, cap);
    if (!q)
      return -1;
    b->s = q;
    b->cap = cap;
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
  b->s[b->n] = '\0';
  return 0;
}

/* Next physical line of buf: [*pos, end of line) without "\n" / "\r\n";
 * returns 0 at the end of the buffer.  A NUL byte inside makes *has_nul 1. */
static int next_phys_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n,
                          int *has_nul)
{
  size_t p = *pos, e;
  if (p >= len)
    return 0;
  e = p;
  *has_nul = 0;
  while (e < len && buf[e] != '\n') {
    if (buf[e] == '\0')
      *has_nul = 1;
    e++;
  }
  *pos = e < len ? e + 1 : e;
  *line = buf + p;
  *n = e - p;
  if (*n > 0 && buf[p + *n - 1] == '\r')
    (*n)--;
  return 1;
}

static const char *skip_blank(const char *p)
{
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')
    p++;
  return p;
}

/* ------------------------------------------------------------------------ */
/* topology.conf                                                            */

struct conf_sw {
  char *name;       /* SwitchName */
  int line;         /* line of the SwitchName= entry */
  char *nodes;      /* Nodes= hostlist, NULL if absent */
  char *switches;   /* Switches= hostlist, NULL if absent */
  double speed;     /* LinkSpeed, 0 if absent */
  int parent;       /* conf index of the switch listing it in Switches=, -1 */
  int *kids;        /* [n_kids] conf indices, in Switches= order */
  int n_kids;
  int tree_idx;     /* index in the tree being built */
  int walk;         /* cycle detection: 0 new, walk id while walking, -1 done */
};

struct conf {
  struct conf_sw *sw; /* [n] */
  int n, cap;
  struct itab names;
};

static const char *conf_name_fn(const void *ctx, int i)
{
  return ((const struct conf *)ctx)->sw[i].name;
}

static void conf_free(struct conf *c)
{
  for (int i = 0; i < c->n; i++) {
    free(c->sw[i].name);
    free(c->sw[i].nodes);
    free(c->sw[i].switches);
    free(c->sw[i].kids);
  }
  free(c->sw);
  itab_free(&c->names);
}

/* One logical line, Slurm style: comments ('#' not escaped by an odd number
 * of backslashes) removed, continuation lines (odd number of trailing
 * backslashes) joined, then escapes removed ("\x" -> "x").  Returns 1 with the
 * line in b, 0 at the end, negative on error. */
static int conf_logical_line(const char *buf, size_t len, size_t *pos, int *lineno, int *first_line,
                             struct sbuf *b, const char *name, struct dpt_err *err)
{
  const char *l;
  size_t n;
  int nul, got = 0;

  b->n = 0;
  if (b->s)
    b->s[0] = '\0';
  while (next_phys_line(buf, len, pos, &l, &n, &nul)) {
    size_t cut = n, end;
    int bs = 0, cont = 0;

    (*lineno)++;
    if (!got)
      *first_line = *lineno;
    got = 1;
    if (nul)
      return err_at(err, name, *lineno, "NUL byte in the line: this is not a text topology.conf");
    for (size_t i = 0; i < n; i++) {
      if (l[i] == '#' && bs % 2 == 0) {
        cut = i;
        break;
      }
      bs = l[i] == '\\' ? bs + 1 : 0;
    }
    /* continuation: trailing blanks, then an odd run of backslashes */
    end = cut;
    while (end > 0 && isspace((unsigned char)l[end - 1]))
      end--;
    bs = 0;
    while (end > 0 && l[end - 1] == '\\') {
      end--;
      bs++;
    }
    if (bs % 2 == 1) {
      cont = 1;
      cut = end + (size_t)bs - 1; /* drop the last backslash and what follows */
    }
    if (sbuf_add(b, l, cut) < 0)
      return err_nomem(err, "reading topology.conf");
    if (!cont)
      break;
  }
  if (!got)
    return 0;
  if (!b->s && sbuf_add(b, "", 0) < 0)
    return err_nomem(err, "reading topology.conf");
  /* strip escapes */
  {
    size_t i, j;
    for (i = 0, j = 0; i < b->n; i++, j++) {
      if (b->s[i] == '\\' && i + 1 < b->n)
        i++;
      else if (b->s[i] == '\\')
        break;
      b->s[j] = b->s[i];
    }
    b->s[j] = '\0';
    b->n = j;
  }
  return 1;
}

static const char *const conf_keys[] = {"SwitchName", "Switches", "Nodes", "LinkSpeed"};
enum { K_SWITCHNAME, K_SWITCHES, K_NODES, K_LINKSPEED, K_N };

/* Parse the Key=Value pairs of one logical line into a new conf entry. */
static int conf_parse_line(struct conf *c, char *s, int line, const char *name, struct dpt_err *err)
{
  char *val[K_N] = {0};
  int nkeys = 0, rc = DPT_E_INPUT;
  struct conf_sw *e;
  char *p = s;

  for (;;) {
    char *key, *v;
    size_t klen;
    int k;

    p = (char *)skip_blank(p);
    if (!*p)
      break;
    key = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.')
      p++;
    klen = (size_t)(p - key);
    if (klen == 0) {
      rc = err_at(err, name, line, "syntax error at '%.40s': expected Key=Value", key);
      goto fail;
    }
    if (nkeys == 0 && klen == 7 && strncasecmp(key, "include", 7) == 0 && (*p == ' ' || *p == '\t')) {
      rc = err_at(err, name, line, "'Include' is not supported by dpt: put all switches in one file");
      goto fail;
    }
    {
      char *q = (char *)skip_blank(p);
      if (*q && strchr("-*+/", *q) && q[1] == '=') {
        rc = err_at(err, name, line, "'%.*s%c=' is not valid in topology.conf: use '%.*s='", (int)klen,
                    key, *q, (int)klen, key);
        goto fail;
      }
      if (*q != '=') {
        rc = err_at(err, name, line, "syntax error after '%.*s': expected '=' (Key=Value)",
                    (int)(klen > 40 ? 40 : klen), key);
        goto fail;
      }
      p = (char *)skip_blank(q + 1);
    }
    for (k = 0; k < K_N; k++)
      if (strlen(conf_keys[k]) == klen && strncasecmp(conf_keys[k], key, klen) == 0)
        break;
    if (k == K_N) {
      rc = err_at(err, name, line,
                  "unknown key '%.*s' (topology.conf for topology/tree knows SwitchName, Switches, "
                  "Nodes, LinkSpeed)",
                  (int)(klen > 40 ? 40 : klen), key);
      goto fail;
    }
    if (nkeys == 0 && k != K_SWITCHNAME) {
      rc = err_at(err, name, line, "a line must start with SwitchName=, not %s=", conf_keys[k]);
      goto fail;
    }
    if (val[k]) {
      rc = err_at(err, name, line,
                  k == K_SWITCHNAME ? "SwitchName= given twice on one line: one switch per line"
                                    : "%s= given twice for one switch",
                  conf_keys[k]);
      goto fail;
    }
    if (*p == '"') {
      v = ++p;
      while (*p && *p != '"')
        p++;
      if (!*p) {
        rc = err_at(err, name, line, "%s=: unterminated '\"'", conf_keys[k]);
        goto fail;
      }
      *p++ = '\0';
      if (*p && !isspace((unsigned char)*p)) {
        rc = err_at(err, name, line, "%s=: text right after the closing '\"'", conf_keys[k]);
        goto fail;
      }
    } else {
      v = p;
      while (*p && !isspace((unsigned char)*p))
        p++;
      if (p == v) {
        rc = err_at(err, name, line, "%s= has no value", conf_keys[k]);
        goto fail;
      }
      if (*p)
        *p++ = '\0';
    }
    val[k] = v;
    nkeys++;
  }
  if (nkeys == 0)
    return 0; /* blank or comment line */

  /* SwitchName: one plain name */
  if (!*val[K_SWITCHNAME]) {
    rc = err_at(err, name, line, "SwitchName= is empty");
    goto fail;
  }
  if (strlen(val[K_SWITCHNAME]) > NAME_MAX_LEN || !name_ok(val[K_SWITCHNAME], 0)) {
    rc = err_at(err, name, line, "SwitchName '%.80s' is longer than %d characters or not printable ASCII",
                val[K_SWITCHNAME], NAME_MAX_LEN);
    goto fail;
  }
  if (strpbrk(val[K_SWITCHNAME], "[],")) {
    rc = err_at(err, name, line,
                "SwitchName '%s' is a hostlist: Slurm takes one switch name per SwitchName= line",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (val[K_NODES] && val[K_SWITCHES]) {
    rc = err_at(err, name, line,
                "switch '%s' has both Nodes= and Switches= (Slurm rejects this too): put its nodes "
                "under a separate leaf switch",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (!val[K_NODES] && !val[K_SWITCHES]) {
    rc = err_at(err, name, line, "switch '%s' has neither Nodes= nor Switches=: give it children",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    void *q = realloc(c->sw, (size_t)cap * sizeof *c->sw);
    if (!q)
      return err_nomem(err, "reading topology.conf");
    c->sw = q;
    c->cap = cap;
  }
  e = &c->sw[c->n];
  memset(e, 0, sizeof *e);
  e->line = line;
  e->parent = -1;
  e->name = strdup(val[K_SWITCHNAME]);
  e->nodes = val[K_NODES] ? strdup(val[K_NODES]) : NULL;
  e->switches = val[K_SWITCHES] ? strdup(val[K_SWITCHES]) : NULL;
  if (!e->name || (val[K_NODES] && !e->nodes) || (val[K_SWITCHES] && !e->switches)) {
    free(e->name);
    free(e->nodes);
    free(e->switches);
    return err_nomem(err, "reading topology.conf");
  }
  c->n++;
  if (val[K_LINKSPEED]) {
    const char *v = val[K_LINKSPEED];
    char *endp;
    unsigned long long x;
    errno = 0;
    x = strtoull(v, &endp, 10);
    if (!isdigit((unsigned char)v[0]) || *endp || errno || x >= UINT32_MAX) {
      rc = err_at(err, name, line,
                  "LinkSpeed '%.40s' of switch '%s' is not an integer between 0 and 4294967294 "
                  "(dpt reads it as Gbit/s)",
                  v, e->name);
      goto fail;
    }
    e->speed = (double)x;
  }
  {
    int prev = itab_find(&c->names, c, conf_name_fn, e->name);
    if (prev >= 0) {
      rc = err_at(err, name, line, "switch '%s' is defined twice (lines %d and %d): keep one SwitchName= line",
                  e->name, c->sw[prev].line, line);
      goto fail;
    }
    if (itab_add(&c->names, c, conf_name_fn, c->n - 1) < 0)
      return err_nomem(err, "reading topology.conf");
  }
  return 0;
fail:
  return rc;
}

static double min_known(double a, double b)
{
  if (a > 0 && b > 0)
    return a < b ? a : b;
  return a > 0 ? a : b;
}

int dpt_tree_parse_topology_conf(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                                 struct dpt_err *err)
{
  struct conf c = {0};
  struct sbuf b = {0};
  struct dpt_tree *t = NULL;
  size_t pos = 0;
  int lineno = 0, first_line = 0, rc, *stack = NULL;
  char **hl = NULL;
  int nhl = 0;
  struct dpt_err dummy;

  *out = NULL;
  if (!err)
    err = &dummy; /* messages of inner calls are quoted below */
  if (!name)
    name = "topology.conf";
  if (!buf && len)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no buffer", name);
  for (;;) {
    rc = conf_logical_line(buf, len, &pos, &lineno, &first_line, &b, name, err);
    if (rc < 0)
      goto fail;
    if (rc == 0)
      break;
    if ((rc = conf_parse_line(&c, b.s, first_line, name, err)) < 0)
      goto fail;
  }
  if (c.n == 0) {
    rc = err_at(err, name, 0,
                "no SwitchName= lines: the file is empty; describe the switches "
                "(SwitchName=leaf1 Nodes=n[1-16]) or use no topology");
    goto fail;
  }

  /* Switches=: children, unknown names, two parents. */
  for (int i = 0; i < c.n; i++) {
    struct conf_sw *e = &c.sw[i];
    if (!e->switches)
      continue;
    if ((rc = dpt_tree_hostlist_expand(e->switches, &hl, &nhl, err)) < 0) {
      err_at(err, name, e->line, "switch '%s': Switches=%.200s: %s", e->name, e->switches, err->msg);
      goto fail;
    }
    if (nhl == 0) {
      rc = err_at(err, name, e->line, "switch '%s': Switches= is empty", e->name);
      goto fail;
    }
    if (!(e->kids = calloc((size_t)nhl, sizeof *e->kids))) {
      rc = err_nomem(err, "reading topology.conf");
      goto fail;
    }
    for (int k = 0; k < nhl; k++) {
      int ch = itab_find(&c.names, &c, conf_name_fn, hl[k]);
      if (ch < 0) {
        rc = err_at(err, name, e->line,
                    "switch '%s': Switches= names unknown switch '%.80s': define it with its own "
                    "SwitchName= line or fix the name",
                    e->name, hl[k]);
        goto fail;
      }
      if (ch == i) {
        rc = err_at(err, name, e->line, "switch '%s' lists itself in Switches= (cycle)", e->name);
        goto fail;
      }
      if (c.sw[ch].parent == i) {
        rc = err_at(err, name, e->line, "switch '%s' lists switch '%s' twice in Switches=", e->name, hl[k]);
        goto fail;
      }
      if (c.sw[ch].parent >= 0) {
        rc = err_at(err, name, e->line,
                    "switch '%s' has two parents: '%s' (line %d) and '%s' (line %d); a tree gives "
                    "each switch one parent",
                    hl[k], c.sw[c.sw[ch].parent].name, c.sw[c.sw[ch].parent].line, e->name, e->line);
        goto fail;
      }
      c.sw[ch].parent = i;
      e->kids[e->n_kids++] = ch;
    }
    dpt_tree_hostlist_free(hl, nhl);
    hl = NULL;
    nhl = 0;
  }

  /* Cycles: walk up from every switch. */
  for (int i = 0; i < c.n; i++) {
    int s = i;
    while (s >= 0 && c.sw[s].walk == 0) {
      c.sw[s].walk = i + 1;
      s = c.sw[s].parent;
    }
    if (s >= 0 && c.sw[s].walk == i + 1) {
      char chain[600] = "";
      size_t used = 0;
      int x = s;
      do {
        int w = snprintf(chain + used, sizeof chain - used, "%s (line %d) -> ", c.sw[x].name, c.sw[x].line);
        if (w < 0 || (size_t)w >= sizeof chain - used)
          break;
        used += (size_t)w;
        x = c.sw[x].parent;
      } while (x != s);
      rc = err_at(err, name, c.sw[s].line,
                  "cycle in Switches= (child -> parent): %s%s; a switch cannot be below itself", chain, c.sw[s].name);
      goto fail;
    }
    for (s = i; s >= 0 && c.sw[s].walk == i + 1; s = c.sw[s].parent)
      c.sw[s].walk = -1;
  }

  /* Switches into the tree: roots in line order, then depth first in
   * Switches= order (so siblings keep that order). */
  if ((rc = dpt_tree_create(&t, "topology.conf", err)) < 0)
    goto fail;
  if (!(stack = calloc(c.n > 0 ? (size_t)c.n : 1, sizeof *stack))) {
    rc = err_nomem(err, "reading topology.conf");
    goto fail;
  }
  for (int r = 0; r < c.n; r++) {
    int sp = 0;
    if (c.sw[r].parent >= 0)
      continue;
    stack[sp++] = r;
    while (sp > 0) {
      int s = stack[--sp];
      struct conf_sw *e = &c.sw[s];
      int parent = e->parent >= 0 ? c.sw[e->parent].tree_idx : -1;
      if ((rc = e->tree_idx = dpt_tree_add_switch(t, e->name, parent, err)) < 0)
        goto fail;
      t->sw[e->tree_idx].line = e->line;
      t->sw[e->tree_idx].link_speed = e->speed;
      t->sw[e->tree_idx].link_gbps = e->parent >= 0 ? min_known(e->speed, c.sw[e->parent].speed) : e->speed;
      for (int k = e->n_kids - 1; k >= 0; k--)
        stack[sp++] = e->kids[k];
    }
  }

  /* Nodes=, in line order. */
  for (int i = 0; i < c.n; i++) {
    struct conf_sw *e = &c.sw[i];
    if (!e->nodes)
      continue;
    if ((rc = dpt_tree_hostlist_expand(e->nodes, &hl, &nhl, err)) < 0) {
      err_at(err, name, e->line, "switch '%s': Nodes=%.200s: %s", e->name, e->nodes, err->msg);
      goto fail;
    }
    if (nhl == 0) {
      rc = err_at(err, name, e->line, "switch '%s': Nodes= is empty", e->name);
      goto fail;
    }
    for (int k = 0; k < nhl; k++) {
      int h = dpt_tree_find_host(t, hl[k]);
      if (h >= 0) {
        const struct dpt_tree_switch *o = &t->sw[t->hosts[h].sw];
        if (o->line == e->line)
          rc = err_at(err, name, e->line, "node '%s' is listed twice in Nodes= of switch '%s'", hl[k],
                      e->name);
        else
          rc = err_at(err, name, e->line,
                      "node '%s' is under two switches: '%s' (line %d) and '%s' (line %d); a node "
                      "hangs off one leaf switch",
                      hl[k], o->name, o->line, e->name, e->line);
        goto fail;
      }
      if (strlen(hl[k]) > NAME_MAX_LEN || !name_ok(hl[k], 0)) {
        rc = err_at(err, name, e->line, "switch '%s': node name '%.80s' is longer than %d characters or "
                    "not printable ASCII", e->name, hl[k], NAME_MAX_LEN);
        goto fail;
      }
      if ((rc = h = dpt_tree_add_host(t, hl[k], e->tree_idx, err)) < 0)
        goto fail;
      t->hosts[h].line = e->line;
      t->hosts[h].link_gbps = e->speed;
    }
    dpt_tree_hostlist_free(hl, nhl);
    hl = NULL;
    nhl = 0;
  }
  if ((rc = dpt_tree_finish(t, err)) < 0) {
    dpt_err_prefix(err, "%s", name);
    goto fail;
  }
  *out = t;
  t = NULL;
  rc = 0;
fail:
  dpt_tree_hostlist_free(hl, nhl);
  free(stack);
  free(b.s);
  conf_free(&c);
  dpt_tree_destroy(t);
  return rc;
}

int dpt_tree_load_topology_conf(struct dpt_tree **out, const char *path, struct dpt_err *err)
{
  char *buf;
  size_t len;
  int rc;
  *out = NULL;
  if ((rc = dpt_file_read(path, "topology.conf file", NULL, MAX_FILE_BYTES, &buf, &len, err)) < 0)
    return rc;
  rc = dpt_tree_parse_topology_conf(out, buf, len, path, err);
  free(buf);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* SLURM_TOPOLOGY_ADDR / SLURM_TOPOLOGY_ADDR_PATTERN                         */

/* Where an entry came from, for messages: "FILE:LINE" or "entry I". */
struct addr_src {
  const char *file;  /* NULL: entries of dpt_tree_from_addrs */
  const int *lines;  /* [n] */
};

static void addr_label(char *out, size_t sz, const struct addr_src *src, int i)
{
  if (src && src->file)
    snprintf(out, sz, "%s:%d", src->file, src->lines[i]);
  else
    snprintf(out, sz, "SLURM_TOPOLOGY_ADDR entry %d", i);
}

struct addr_host {
  char name[DPT_TREE_NAME_MAX];
  int entry;   /* first entry naming it */
  int leaf;    /* tree switch index, -1 if in no switch */
};

struct addr_hosts {
  struct addr_host *h;
  int n;
  struct itab names;
};

static const char *addr_host_name_fn(const void *ctx, int i)
{
  return ((const struct addr_hosts *)ctx)->h[i].name;
}

static int addrs_build(struct dpt_tree **out, const char *const *addrs, const char *const *patterns, int n,
                       const struct addr_src *src, struct dpt_err *err)
{
  struct dpt_tree *t = NULL;
  struct addr_hosts ah = {0};
  int *sw_level = NULL, *sw_entry = NULL, sw_cap = 0, rc, n_noswitch = 0, first_noswitch = -1;
  char *tmp = NULL, lab[300], lab2[300];

  *out = NULL;
  if (n <= 0 || !addrs)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no SLURM_TOPOLOGY_ADDR entries",
                       src && src->file ? src->file : "SLURM_TOPOLOGY_ADDR list");
  if ((rc = dpt_tree_create(&t, "addr", err)) < 0)
    return rc;
  if (!(ah.h = calloc((size_t)n, sizeof *ah.h))) {
    rc = err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
    goto fail;
  }
  for (int i = 0; i < n; i++) {
    const char *addr = addrs[i], *pat = patterns ? patterns[i] : NULL, *hostp;
    int nsw, ncomp = 1, parent = -1, dup;
    size_t alen;
    char *c;

    addr_label(lab, sizeof lab, src, i);
    if (!addr || !*addr) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: empty SLURM_TOPOLOGY_ADDR", lab);
      goto fail;
    }
    for (const char *p = addr; *p; p++) {
      if (*p == '.')
        ncomp++;
      if ((unsigned char)*p <= ' ' || (unsigned char)*p > 0x7e) {
        rc = dpt_err_set(err, DPT_E_INPUT, "%s: SLURM_TOPOLOGY_ADDR '%.200s' has blanks or non-ASCII characters",
                         lab, addr);
        goto fail;
      }
    }
    /* pattern: "switch" components then one "node" */
    if (pat && *pat) {
      const char *p = pat;
      nsw = 0;
      for (;;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (l == 6 && strncasecmp(p, "switch", 6) == 0 && dot) {
          nsw++;
        } else if (l == 4 && strncasecmp(p, "node", 4) == 0 && !dot) {
          break;
        } else {
          rc = dpt_err_set(err, DPT_E_INPUT,
                           "%s: SLURM_TOPOLOGY_ADDR_PATTERN '%.200s' is not \"switch.\"... followed by "
                           "\"node\" (what topology/tree writes)",
                           lab, pat);
          goto fail;
        }
        p = dot + 1;
      }
      if (ncomp < nsw + 1) {
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "%s: SLURM_TOPOLOGY_ADDR '%.200s' has %d components but its pattern '%.200s' "
                         "has %d",
                         lab, addr, ncomp, pat, nsw + 1);
        goto fail;
      }
    } else {
      nsw = ncomp - 1;
    }
    /* the host: everything after the nsw-th dot */
    hostp = addr;
    for (int k = 0; k < nsw; k++)
      hostp = strchr(hostp, '.') + 1;
    if (!*hostp || strlen(hostp) > NAME_MAX_LEN || strpbrk(hostp, "[],")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s: SLURM_TOPOLOGY_ADDR '%.200s': host name '%.80s' is empty, "
                       "a hostlist or longer than %d characters", lab, addr, hostp, NAME_MAX_LEN);
      goto fail;
    }
    dup = itab_find(&ah.names, &ah, addr_host_name_fn, hostp);
    if (dup >= 0) {
      int j = ah.h[dup].entry;
      const char *pj = patterns ? patterns[j] : NULL;
      if (strcmp(addrs[j], addr) == 0 && ((!pj || !*pj) == (!pat || !*pat)) &&
          (!pat || !*pat || strcasecmp(pj, pat) == 0))
        continue; /* the same host again (one line per task): fine */
      addr_label(lab2, sizeof lab2, src, j);
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "%s: host '%s' has SLURM_TOPOLOGY_ADDR '%.200s' here but '%.200s' at %s: the "
                       "entries come from different topologies",
                       lab, hostp, addr, addrs[j], lab2);
      goto fail;
    }
    snprintf(ah.h[ah.n].name, sizeof ah.h[ah.n].name, "%s", hostp);
    ah.h[ah.n].entry = i;
    ah.h[ah.n].leaf = -1;
    if (itab_add(&ah.names, &ah, addr_host_name_fn, ah.n) < 0) {
      rc = err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
      goto fail;
    }
    ah.n++;

    /* switch components, level by level; empty ones skip a level */
    alen = (size_t)(hostp - addr);
    free(tmp);
    if (!(tmp = malloc(alen + 1))) {
      rc = err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
      goto fail;
    }
    memcpy(tmp, addr, alen);
    tmp[alen] = '\0';
    c = tmp;
    for (int level = 0; level < nsw; level++) {
      char *dot = strchr(c, '.');
      int s;
      *dot = '\0';
      if (!*c) {
        c = dot + 1;
        continue;
      }
      if (strlen(c) > NAME_MAX_LEN || strpbrk(c, "[],")) {
        rc = dpt_err_set(err, DPT_E_INPUT,
                         strpbrk(c, "[],")
                             ? "%s: SLURM_TOPOLOGY_ADDR '%.200s': host '%s' is under several switches at "
                               "level %d ('%.80s'); dpt needs a tree: fix topology.conf"
                             : "%s: SLURM_TOPOLOGY_ADDR '%.200s': host '%s': switch name at level %d "
                               "('%.80s') is longer than 63 characters",
                         lab, addr, hostp, level, c);
        goto fail;
      }
      s = dpt_tree_find_switch(t, c);
      if (s < 0) {
        if ((rc = s = dpt_tree_add_switch(t, c, parent, err)) < 0) {
          dpt_err_prefix(err, "%s", lab);
          goto fail;
        }
        if (s >= sw_cap) {
          int cap = sw_cap ? 2 * sw_cap : 64;
          void *a = realloc(sw_level, (size_t)cap * sizeof *sw_level);
          void *b = a ? realloc(sw_entry, (size_t)cap * sizeof *sw_entry) : NULL;
          if (a)
            sw_level = a;
          if (!b) {
            rc = err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
            goto fail;
          }
          sw_entry = b;
          sw_cap = cap;
        }
        sw_level[s] = level;
        sw_entry[s] = i;
        t->sw[s].line = src && src->file ? src->lines[i] : 0;
      } else if (sw_level[s] != level) {
        addr_label(lab2, sizeof lab2, src, sw_entry[s]);
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "%s: switch '%s' is at level %d in '%.200s' but at level %d at %s ('%.200s'): "
                         "the entries do not describe one tree",
                         lab, c, level, addr, sw_level[s], lab2, addrs[sw_entry[s]]);
        goto fail;
      } else if (t->sw[s].parent != parent) {
        int op = t->sw[s].parent;
        addr_label(lab2, sizeof lab2, src, sw_entry[s]);
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "%s: switch '%s' has two parents: '%s' here ('%.200s') and '%s' at %s "
                         "('%.200s')",
                         lab, c, parent >= 0 ? t->sw[parent].name : "(top level)", addr,
                         op >= 0 ? t->sw[op].name : "(top level)", lab2, addrs[sw_entry[s]]);
        goto fail;
      }
      parent = s;
      c = dot + 1;
    }
    ah.h[ah.n - 1].leaf = parent;
    if (parent < 0 && n_noswitch++ == 0)
      first_noswitch = ah.n - 1;
  }

  if (n_noswitch > 0 && n_noswitch < ah.n) {
    int i = ah.h[first_noswitch].entry;
    addr_label(lab, sizeof lab, src, i);
    rc = dpt_err_set(err, DPT_E_INPUT,
                     "%s: host '%s' is in no switch (SLURM_TOPOLOGY_ADDR '%.200s') while other hosts are: "
                     "add it to a leaf switch in topology.conf",
                     lab, ah.h[first_noswitch].name, addrs[i]);
    goto fail;
  }
  if (n_noswitch == ah.n) { /* no topology at all: flat */
    int s = add_virtual_switch(t, "flat", err);
    if ((rc = s) < 0)
      goto fail;
    for (int k = 0; k < ah.n; k++)
      ah.h[k].leaf = s;
  }
  for (int k = 0; k < ah.n; k++) {
    int h = dpt_tree_add_host(t, ah.h[k].name, ah.h[k].leaf, err);
    if ((rc = h) < 0) {
      addr_label(lab, sizeof lab, src, ah.h[k].entry);
      dpt_err_prefix(err, "%s", lab);
      goto fail;
    }
    t->hosts[h].line = src && src->file ? src->lines[ah.h[k].entry] : 0;
  }
  if ((rc = dpt_tree_finish(t, err)) < 0) {
    dpt_err_prefix(err, "%s", src && src->file ? src->file : "SLURM_TOPOLOGY_ADDR entries");
    goto fail;
  }
  *out = t;
  t = NULL;
  rc = 0;
fail:
  free(tmp);
  free(sw_level);
  free(sw_entry);
  free(ah.h);
  itab_free(&ah.names);
  dpt_tree_destroy(t);
  return rc;
}

int dpt_tree_from_addrs(struct dpt_tree **out, const char *const *addrs, const char *const *patterns, int n,
                        struct dpt_err *err)
{
  return addrs_build(out, addrs, patterns, n, NULL, err);
}

int dpt_tree_parse_addr_list(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                             struct dpt_err *err)
{
  char **addr = NULL, **pat = NULL, *line = NULL;
  int *lines = NULL, n = 0, cap = 0, lineno = 0, rc = 0;
  size_t pos = 0, ln;
  const char *l;
  int nul;

  *out = NULL;
  if (!name)
    name = "addr list";
  while (next_phys_line(buf, len, &pos, &l, &ln, &nul)) {
    char *tok[3], *p, *save = NULL;
    int nt = 0;
    lineno++;
    if (nul) {
      rc = err_at(err, name, lineno, "NUL byte in the line: this is not a text address list");
      goto fail;
    }
    free(line);
    if (!(line = strndup(l, ln))) {
      rc = err_nomem(err, "reading an address list");
      goto fail;
    }
    if ((p = strchr(line, '#')))
      *p = '\0';
    for (p = strtok_r(line, " \t\r\v\f", &save); p; p = strtok_r(NULL, " \t\r\v\f", &save)) {
      if (nt == 0 && p[strlen(p) - 1] == ':' && strspn(p, "0123456789") == strlen(p) - 1 && strlen(p) > 1)
        continue; /* srun -l label */
      if (nt == 2) {
        rc = err_at(err, name, lineno, "expected 'SLURM_TOPOLOGY_ADDR [SLURM_TOPOLOGY_ADDR_PATTERN]', found "
                    "a third word '%.80s'", p);
        goto fail;
      }
      tok[nt++] = p;
    }
    if (nt == 0)
      continue;
    if (n == cap) {
      int c2 = cap ? 2 * cap : 64;
      void *a = realloc(addr, (size_t)c2 * sizeof *addr);
      if (a)
        addr = a;
      void *b = a ? realloc(pat, (size_t)c2 * sizeof *pat) : NULL;
      if (b)
        pat = b;
      void *c = b ? realloc(lines, (size_t)c2 * sizeof *lines) : NULL;
      if (!c) {
        rc = err_nomem(err, "reading an address list");
        goto fail;
      }
      lines = c;
      cap = c2;
    }
    addr[n] = strdup(tok[0]);
    pat[n] = nt > 1 ? strdup(tok[1]) : NULL;
    lines[n] = lineno;
    n++;
    if (!addr[n - 1] || (nt > 1 && !pat[n - 1])) {
      rc = err_nomem(err, "reading an address list");
      goto fail;
    }
  }
  if (n == 0) {
    rc = err_at(err, name, 0, "no SLURM_TOPOLOGY_ADDR lines (the file is empty or all comments)");
    goto fail;
  }
  {
    struct addr_src src = {name, lines};
    rc = addrs_build(out, (const char *const *)addr, (const char *const *)pat, n, &src, err);
  }
fail:
  for (int i = 0; i < n; i++) {
    free(addr[i]);
    free(pat[i]);
  }
  free(addr);
  free(pat);
  free(lines);
  free(line);
  return rc;
}

int dpt_tree_load_addr_list(struct dpt_tree **out, const char *path, struct dpt_err *err)
{
  char *buf;
  size_t len;
  int rc;
  *out = NULL;
  if ((rc = dpt_file_read(path, "SLURM_TOPOLOGY_ADDR list", NULL, MAX_FILE_BYTES, &buf, &len, err)) < 0)
    return rc;
  rc = dpt_tree_parse_addr_list(out, buf, len, path, err);
  free(buf);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* ibnetdiscover -p                                                         */

struct ib_rec {      /* one connected port line */
  int line;
  char lt, rt;       /* node types: 'S' switch, 'C' channel adapter, 'R' router */
  uint64_t lg, rg;   /* port GUIDs (a switch's ports share one) */
  int lp, rp;        /* port numbers */
  double gbps;       /* data rate of the link, 0 = unknown */
  char *ld, *rd;     /* node descriptions */
};

struct ib_half {     /* one end of a link, seen from one line */
  char t, pt;
  uint64_t g, pg;
  int p, pp;
  int rec;           /* index in the records */
};

struct ib_sw {
  uint64_t guid;
  int rec, side;     /* first record naming it (side 0: local, 1: remote) */
  int level;         /* hops from the nearest leaf, -1 = unreachable */
  int parent;        /* ib_sw index, -1 none, -2 the virtual core */
  double up_gbps;
  int up_n;
  int tidx;          /* tree index, -1 if not in the tree */
  int nhosts;
  char name[DPT_TREE_NAME_MAX];
};

struct ib_host {
  char name[DPT_TREE_NAME_MAX];
  int sw;            /* ib_sw index */
  int port;          /* lowest leaf port */
  int rec;
  double gbps;
};

struct ib_hosts {
  struct ib_host *h;
  int n, cap;
  struct itab names;
};

static const char *ib_host_name_fn(const void *ctx, int i)
{
  return ((const struct ib_hosts *)ctx)->h[i].name;
}

static double ib_lane_gbps(const char *speed)
{
  static const struct {
    const char *name;
    double gbps;
  } tab[] = {{"SDR", 2},   {"DDR", 4},    {"QDR", 8},   {"FDR10", 10}, {"FDR", 13.64},
             {"EDR", 25},  {"HDR", 50},   {"NDR", 100}, {"XDR", 200}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (strcmp(speed, tab[i].name) == 0)
      return tab[i].gbps;
  return 0;
}

static int ib_num(const char **pp, long max, long *out)
{
  const char *p = skip_blank(*pp);
  long v = 0;
  if (!isdigit((unsigned char)*p))
    return -1;
  while (isdigit((unsigned char)*p)) {
    v = v * 10 + (*p++ - '0');
    if (v > max)
      return -1;
  }
  *out = v;
  *pp = p;
  return 0;
}

static int ib_guid(const char **pp, uint64_t *out)
{
  const char *p = skip_blank(*pp);
  uint64_t v = 0;
  int nd = 0;
  if (p[0] != '0' || (p[1] != 'x' && p[1] != 'X'))
    return -1;
  for (p += 2; isxdigit((unsigned char)*p); p++, nd++) {
    if (nd == 16)
      return -1;
    v = v * 16 + (uint64_t)(isdigit((unsigned char)*p) ? *p - '0' : (tolower((unsigned char)*p) - 'a' + 10));
  }
  if (nd == 0)
    return -1;
  *out = v;
  *pp = p;
  return 0;
}

static int ib_word(const char **pp, char *out, size_t sz)
{
  const char *p = skip_blank(*pp), *s = p;
  while (*p && *p != ' ' && *p != '\t')
    p++;
  if (p == s || (size_t)(p - s) >= sz)
    return -1;
  memcpy(out, s, (size_t)(p - s));
  out[p - s] = '\0';
  *pp = p;
  return 0;
}

static int ib_type(const char **pp, char *t)
{
  const char *p = skip_blank(*pp);
  if (strncmp(p, "SW", 2) == 0)
    *t = 'S';
  else if (strncmp(p, "CA", 2) == 0)
    *t = 'C';
  else if (strncmp(p, "RT", 2) == 0)
    *t = 'R';
  else
    return -1;
  if (p[2] != ' ' && p[2] != '\t')
    return -1;
  *pp = p + 2;
  return 0;
}

/* Parse one line.  1: a connected port line in *r; 0: nothing to use (DR path,
 * blank, comment, unconnected port); -1: not ibnetdiscover -p (why in *why). */
static int ib_parse_line(const char *s, struct ib_rec *r, const char **why)
{
  const char *p = skip_blank(s), *q, *inner, *sep, *end;
  long lid, port;
  char width[16], speed[16];

  if (!*p || *p == '#' || strncmp(p, "DR path", 7) == 0)
    return 0;
  *why = "expected a port line 'SW|CA|RT <lid> <port> <guid> <width> <speed> ...'";
  if (ib_type(&p, &r->lt) < 0)
    return -1;
  *why = "bad local lid, port or GUID";
  if (ib_num(&p, 0x7fffffff, &lid) < 0 || ib_num(&p, 65535, &port) < 0 || ib_guid(&p, &r->lg) < 0)
    return -1;
  r->lp = (int)port;
  *why = "missing link width/speed";
  if (ib_word(&p, width, sizeof width) < 0 || ib_word(&p, speed, sizeof speed) < 0)
    return -1;
  {
    int w = atoi(width);
    r->gbps = (w > 0 && w <= 32 && width[strspn(width, "0123456789")] == 'x') ? w * ib_lane_gbps(speed) : 0;
  }
  p = skip_blank(p);
  if (*p == '\'')
    return 0; /* port without a peer */
  *why = "expected '- <peer>' or the port's description";
  if (p[0] != '-' || (p[1] != ' ' && p[1] != '\t'))
    return -1;
  p++;
  if (ib_type(&p, &r->rt) < 0)
    return -1;
  *why = "bad peer lid, port or GUID";
  if (ib_num(&p, 0x7fffffff, &lid) < 0 || ib_num(&p, 65535, &port) < 0 || ib_guid(&p, &r->rg) < 0)
    return -1;
  r->rp = (int)port;
  *why = "expected \"( '<description>' - '<peer description>' )\"";
  p = skip_blank(p);
  if (p[0] != '(')
    return -1;
  p = skip_blank(p + 1);
  if (*p != '\'')
    return -1;
  inner = p + 1;
  end = inner + strlen(inner);
  while (end > inner && isspace((unsigned char)end[-1]))
    end--;
  if (end <= inner || end[-1] != ')')
    return -1;
  end--;
  while (end > inner && isspace((unsigned char)end[-1]))
    end--;
  if (end <= inner || end[-1] != '\'')
    return -1;
  end--; /* closing quote of the peer description */
  sep = NULL;
  for (q = inner; q + 5 <= end; q++)
    if (strncmp(q, "' - '", 5) == 0) {
      sep = q;
      break;
    }
  if (!sep)
    return -1;
  r->ld = strndup(inner, (size_t)(sep - inner));
  r->rd = strndup(sep + 5, (size_t)(end - (sep + 5)));
  *why = "out of memory";
  if (!r->ld || !r->rd)
    return -1;
  return 1;
}

static int ib_half_cmp(const void *a, const void *b)
{
  const struct ib_half *x = a, *y = b;
  if (x->t != y->t)
    return x->t < y->t ? -1 : 1;
  if (x->g != y->g)
    return x->g < y->g ? -1 : 1;
  if (x->p != y->p)
    return x->p < y->p ? -1 : 1;
  return x->rec < y->rec ? -1 : x->rec > y->rec;
}

static int ib_sw_cmp(const void *a, const void *b)
{
  const struct ib_sw *x = a, *y = b;
  if (x->guid != y->guid)
    return x->guid < y->guid ? -1 : 1;
  return x->rec < y->rec ? -1 : x->rec > y->rec;
}

static int ib_find_sw(const struct ib_sw *sw, int n, uint64_t guid)
{
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (sw[mid].guid == guid)
      return mid;
    if (sw[mid].guid < guid)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* "<host>" or "<host> <device>" -> host (domain dropped); 0 if not a host. */
static int ib_host_from_desc(const char *desc, char out[DPT_TREE_NAME_MAX])
{
  const char *p = desc, *h, *he, *d, *de;
  size_t n;

  p = skip_blank(p);
  h = p;
  while (isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.')
    p++;
  he = p;
  if (he == h || !isalnum((unsigned char)*h))
    return 0;
  p = skip_blank(p);
  if (*p) {
    if (p == he)
      return 0; /* other characters glued to the name */
    d = p;
    if (!isalpha((unsigned char)*d))
      return 0;
    while (isalnum((unsigned char)*p) || *p == '-' || *p == '_')
      p++;
    de = p;
    if (!isdigit((unsigned char)de[-1]) || *skip_blank(p))
      return 0;
  }
  for (p = h; p < he && *p != '.'; p++)
    ;
  n = (size_t)(p - h);
  if (n == 0 || n > NAME_MAX_LEN)
    return 0;
  memcpy(out, h, n);
  out[n] = '\0';
  return 1;
}

static int ib_level_name_cmp(const void *a, const void *b, void *ctx)
{
  const struct ib_sw *sw = ctx;
  const struct ib_sw *x = &sw[*(const int *)a], *y = &sw[*(const int *)b];
  int c;
  if (x->level != y->level)
    return x->level > y->level ? -1 : 1; /* top levels first */
  c = strverscmp(x->name, y->name);
  return c ? c : strcmp(x->name, y->name);
}

static int ib_host_cmp(const void *a, const void *b, void *ctx)
{
  const struct ib_sw *sw = ctx;
  const struct ib_host *x = a, *y = b;
  int tx = sw[x->sw].tidx, ty = sw[y->sw].tidx;
  if (tx != ty)
    return tx < ty ? -1 : 1;
  if (x->port != y->port)
    return x->port < y->port ? -1 : 1;
  return strcmp(x->name, y->name);
}

int dpt_tree_parse_ibnetdiscover(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                                 struct dpt_err *err)
{
  struct ib_rec *rec = NULL;
  struct ib_half *half = NULL;
  struct ib_sw *sw = NULL;
  struct ib_hosts hs = {0};
  struct dpt_tree *t = NULL;
  int nrec = 0, caprec = 0, nhalf = 0, nsw = 0, lineno = 0, rc = 0, vcore = -1, collapsed_at = -1,
      n_ignored = 0, maxlevel = 0;
  int *adj_first = NULL, *adj = NULL, *queue = NULL, *ord = NULL;
  double *adj_gbps = NULL;
  char *line = NULL;
  size_t pos = 0, ln;
  const char *l;
  int nul;

  *out = NULL;
  if (!name)
    name = "ibnetdiscover dump";

  /* 1. port lines */
  while (next_phys_line(buf, len, &pos, &l, &ln, &nul)) {
    struct ib_rec r = {0};
    const char *why = "";
    int k;
    lineno++;
    if (nul) {
      rc = err_at(err, name, lineno, "NUL byte in the line: this is not a text ibnetdiscover dump");
      goto fail;
    }
    free(line);
    if (!(line = strndup(l, ln))) {
      rc = err_nomem(err, "reading an ibnetdiscover dump");
      goto fail;
    }
    k = ib_parse_line(line, &r, &why);
    if (k < 0) {
      free(r.ld);
      free(r.rd);
      rc = err_at(err, name, lineno, "not an `ibnetdiscover -p` line (%s): '%.120s'", why, line);
      goto fail;
    }
    if (k == 0)
      continue;
    r.line = lineno;
    if (nrec == caprec) {
      int cap = caprec ? 2 * caprec : 256;
      void *q = realloc(rec, (size_t)cap * sizeof *rec);
      if (!q) {
        free(r.ld);
        free(r.rd);
        rc = err_nomem(err, "reading an ibnetdiscover dump");
        goto fail;
      }
      rec = q;
      caprec = cap;
    }
    rec[nrec++] = r;
  }
  if (nrec == 0) {
    rc = err_at(err, name, 0, "no connected port lines: is this the output of `ibnetdiscover -p`?");
    goto fail;
  }

  /* 2. every port has one peer; the same cable seen from both ends counts once */
  if (!(half = calloc((size_t)nrec * 2, sizeof *half))) {
    rc = err_nomem(err, "reading an ibnetdiscover dump");
    goto fail;
  }
  for (int i = 0; i < nrec; i++) {
    struct ib_rec *r = &rec[i];
    if (r->lt == r->rt && r->lg == r->rg && r->lp == r->rp) {
      rc = err_at(err, name, r->line, "port %d of 0x%016llx is linked to itself", r->lp,
                  (unsigned long long)r->lg);
      goto fail;
    }
    half[nhalf++] = (struct ib_half){r->lt, r->rt, r->lg, r->rg, r->lp, r->rp, i};
    half[nhalf++] = (struct ib_half){r->rt, r->lt, r->rg, r->lg, r->rp, r->lp, i};
  }
  qsort(half, (size_t)nhalf, sizeof *half, ib_half_cmp);
  for (int i = 1; i < nhalf; i++) {
    struct ib_half *a = &half[i - 1], *b = &half[i];
    if (a->t == b->t && a->g == b->g && a->p == b->p &&
        (a->pt != b->pt || a->pg != b->pg || a->pp != b->pp)) {
      rc = err_at(err, name, rec[b->rec].line,
                  "port %d of 0x%016llx is linked to 0x%016llx port %d here but to 0x%016llx port %d on "
                  "line %d: the dump is inconsistent (re-run ibnetdiscover on a quiet fabric)",
                  b->p, (unsigned long long)b->g, (unsigned long long)b->pg, b->pp,
                  (unsigned long long)a->pg, a->pp, rec[a->rec].line);
      goto fail;
    }
  }
  /* keep, per cable, the half seen from its smaller end on the first line */
  {
    int k = 0;
    for (int i = 0; i < nhalf; i++) {
      struct ib_half *h = &half[i];
      int smaller = h->t != h->pt ? h->t < h->pt : h->g != h->pg ? h->g < h->pg : h->p < h->pp;
      if (!smaller)
        continue;
      if (k > 0 && half[k - 1].t == h->t && half[k - 1].g == h->g && half[k - 1].p == h->p)
        continue; /* same cable from the other end or printed twice */
      half[k++] = *h;
    }
    nhalf = k;
  }

  /* 3. switches, by GUID */
  if (!(sw = calloc((size_t)nrec * 2, sizeof *sw))) {
    rc = err_nomem(err, "reading an ibnetdiscover dump");
    goto fail;
  }
  for (int i = 0; i < nrec; i++) {
    if (rec[i].lt == 'S')
      sw[nsw++] = (struct ib_sw){.guid = rec[i].lg, .rec = i, .side = 0};
    if (rec[i].rt == 'S')
      sw[nsw++] = (struct ib_sw){.guid = rec[i].rg, .rec = i, .side = 1};
  }
  qsort(sw, (size_t)nsw, sizeof *sw, ib_sw_cmp);
  {
    int k = 0;
    for (int i = 0; i < nsw; i++)
      if (k == 0 || sw[k - 1].guid != sw[i].guid)
        sw[k++] = sw[i];
    nsw = k;
  }
  for (int i = 0; i < nsw; i++) {
    sw[i].level = -1;
    sw[i].parent = -1;
    sw[i].tidx = -1;
  }

  /* 4. hosts on leaf switches */
  for (int i = 0; i < nhalf; i++) {
    struct ib_half *h = &half[i];
    const struct ib_rec *r = &rec[h->rec];
    char hn[DPT_TREE_NAME_MAX];
    const char *cadesc;
    int s, port, k;
    if (!((h->t == 'C' && h->pt == 'S') || (h->t == 'S' && h->pt == 'C')))
      continue; /* switch-switch below; CA-CA and router links are not used */
    s = ib_find_sw(sw, nsw, h->t == 'S' ? h->g : h->pg);
    port = h->t == 'S' ? h->p : h->pp;
    {
      int h_is_local = r->lt == h->t && r->lg == h->g && r->lp == h->p;
      int ca_is_local = h->t == 'C' ? h_is_local : !h_is_local;
      cadesc = ca_is_local ? r->ld : r->rd;
    }
    if (!ib_host_from_desc(cadesc, hn)) {
      n_ignored++;
      continue;
    }
    k = itab_find(&hs.names, &hs, ib_host_name_fn, hn);
    if (k >= 0) {
      if (hs.h[k].sw != s) {
        rc = err_at(err, name, r->line,
                    "host '%s' has HCA ports on two leaf switches (0x%016llx here, 0x%016llx on line "
                    "%d): multi-rail hosts need a topology.conf that says which group they belong to",
                    hn, (unsigned long long)sw[s].guid, (unsigned long long)sw[hs.h[k].sw].guid,
                    rec[hs.h[k].rec].line);
        goto fail;
      }
      hs.h[k].gbps += r->gbps;
      if (port < hs.h[k].port)
        hs.h[k].port = port;
      continue;
    }
    if (hs.n == hs.cap) {
      int cap = hs.cap ? 2 * hs.cap : 256;
      void *q = realloc(hs.h, (size_t)cap * sizeof *hs.h);
      if (!q) {
        rc = err_nomem(err, "reading an ibnetdiscover dump");
        goto fail;
      }
      hs.h = q;
      hs.cap = cap;
    }
    memset(&hs.h[hs.n], 0, sizeof hs.h[hs.n]);
    snprintf(hs.h[hs.n].name, sizeof hs.h[hs.n].name, "%s", hn);
    hs.h[hs.n].sw = s;
    hs.h[hs.n].port = port;
    hs.h[hs.n].rec = h->rec;
    hs.h[hs.n].gbps = r->gbps;
    if (itab_add(&hs.names, &hs, ib_host_name_fn, hs.n) < 0) {
      rc = err_nomem(err, "reading an ibnetdiscover dump");
      goto fail;
    }
    hs.n++;
    sw[s].nhosts++;
  }
  if (hs.n == 0) {
    rc = err_at(err, name, 0,
                "no host HCA is attached to a switch (%d CAs with descriptions that are not "
                "'<host> <device>', e.g. 'node01 HCA-1', were ignored)",
                n_ignored);
    goto fail;
  }

  /* 5. switch graph (CSR, both directions) and levels: hops from a leaf */
  if (!(adj_first = calloc((size_t)nsw + 1, sizeof *adj_first)) ||
      !(adj = calloc((size_t)nhalf * 2 + 1, sizeof *adj)) ||
      !(adj_gbps = calloc((size_t)nhalf * 2 + 1, sizeof *adj_gbps)) ||
      !(queue = calloc((size_t)nsw + 1, sizeof *queue))) {
    rc = err_nomem(err, "reading an ibnetdiscover dump");
    goto fail;
  }
  for (int pass = 0; pass < 2; pass++) {
    int *fill = queue;
    if (pass == 1) {
      for (int i = 0; i < nsw; i++)
        adj_first[i + 1] += adj_first[i];
      memcpy(fill, adj_first, (size_t)nsw * sizeof *fill);
    }
    for (int i = 0; i < nhalf; i++) {
      struct ib_half *h = &half[i];
      int a, b;
      if (h->t != 'S' || h->pt != 'S' || h->g == h->pg)
        continue;
      a = ib_find_sw(sw, nsw, h->g);
      b = ib_find_sw(sw, nsw, h->pg);
      if (pass == 0) {
        adj_first[a + 1]++;
        adj_first[b + 1]++;
      } else {
        adj_gbps[fill[a]] = rec[h->rec].gbps;
        adj[fill[a]++] = b;
        adj_gbps[fill[b]] = rec[h->rec].gbps;
        adj[fill[b]++] = a;
      }
    }
  }
  {
    int qh = 0, qt = 0;
    for (int i = 0; i < nsw; i++)
      if (sw[i].nhosts > 0) {
        sw[i].level = 0;
        queue[qt++] = i;
      }
    while (qh < qt) {
      int s = queue[qh++];
      for (int e = adj_first[s]; e < adj_first[s + 1]; e++)
        if (sw[adj[e]].level < 0) {
          sw[adj[e]].level = sw[s].level + 1;
          if (sw[adj[e]].level > maxlevel)
            maxlevel = sw[adj[e]].level;
          queue[qt++] = adj[e];
        }
    }
  }

  /* 6. parents, level by level, until some switch has several upper neighbours */
  for (int k = 0; k < maxlevel && collapsed_at < 0; k++) {
    for (int s = 0; s < nsw; s++) {
      int up = -1;
      if (sw[s].level != k)
        continue;
      for (int e = adj_first[s]; e < adj_first[s + 1]; e++)
        if (sw[adj[e]].level == k + 1) {
          if (up >= 0 && adj[e] != up)
            collapsed_at = k;
          up = adj[e];
        }
    }
    for (int s = 0; s < nsw; s++) {
      if (sw[s].level != k)
        continue;
      for (int e = adj_first[s]; e < adj_first[s + 1]; e++)
        if (sw[adj[e]].level == k + 1) {
          sw[s].parent = collapsed_at >= 0 ? -2 : adj[e];
          sw[s].up_gbps += adj_gbps[e];
          sw[s].up_n++;
        }
    }
  }
  /* switches in the tree: levels up to the collapse (or all reached ones) */
  {
    int top = collapsed_at >= 0 ? collapsed_at : maxlevel, nk = 0;
    if (!(ord = calloc((size_t)nsw + 1, sizeof *ord))) {
      rc = err_nomem(err, "reading an ibnetdiscover dump");
      goto fail;
    }
    for (int s = 0; s < nsw; s++)
      if (sw[s].level >= 0 && sw[s].level <= top)
        ord[nk++] = s;
    /* names: the description when usable and unique, else the GUID */
    for (int i = 0; i < nk; i++) {
      struct ib_sw *x = &sw[ord[i]];
      const struct ib_rec *r = &rec[x->rec];
      const char *d = x->side == 0 ? r->ld : r->rd;
      int uniq = name_ok(d, 1);
      for (int j = 0; uniq && j < nk; j++) {
        const struct ib_sw *y = &sw[ord[j]];
        const char *e = y->side == 0 ? rec[y->rec].ld : rec[y->rec].rd;
        if (j != i && strcmp(d, e) == 0)
          uniq = 0;
      }
      if (uniq)
        snprintf(x->name, sizeof x->name, "%s", d);
      else
        snprintf(x->name, sizeof x->name, "sw-0x%016llx", (unsigned long long)x->guid);
    }
    qsort_r(ord, (size_t)nk, sizeof *ord, ib_level_name_cmp, sw);
    if ((rc = dpt_tree_create(&t, "ibnetdiscover", err)) < 0)
      goto fail;
    if (collapsed_at >= 0 && (rc = vcore = add_virtual_switch(t, "virtual-core", err)) < 0)
      goto fail;
    for (int i = 0; i < nk; i++) {
      struct ib_sw *x = &sw[ord[i]];
      int parent = x->parent == -2 ? vcore : x->parent >= 0 ? sw[x->parent].tidx : -1;
      if ((rc = x->tidx = dpt_tree_add_switch(t, x->name, parent, err)) < 0) {
        dpt_err_prefix(err, "%s:%d", name, rec[x->rec].line);
        goto fail;
      }
      t->sw[x->tidx].line = rec[x->rec].line;
      t->sw[x->tidx].link_gbps = x->up_gbps;
      t->sw[x->tidx].uplinks = x->up_n;
    }
  }
  /* hosts: by leaf, then port */
  qsort_r(hs.h, (size_t)hs.n, sizeof *hs.h, ib_host_cmp, sw);
  for (int i = 0; i < hs.n; i++) {
    int h = dpt_tree_add_host(t, hs.h[i].name, sw[hs.h[i].sw].tidx, err);
    if ((rc = h) < 0) {
      dpt_err_prefix(err, "%s:%d", name, rec[hs.h[i].rec].line);
      goto fail;
    }
    t->hosts[h].link_gbps = hs.h[i].gbps;
    t->hosts[h].line = rec[hs.h[i].rec].line;
  }
  if ((rc = dpt_tree_finish(t, err)) < 0) {
    dpt_err_prefix(err, "%s", name);
    goto fail;
  }
  *out = t;
  t = NULL;
  rc = 0;
fail:
  for (int i = 0; i < nrec; i++) {
    free(rec[i].ld);
    free(rec[i].rd);
  }
  free(rec);
  free(half);
  free(sw);
  free(hs.h);
  itab_free(&hs.names);
  free(adj_first);
  free(adj);
  free(adj_gbps);
  free(queue);
  free(ord);
  free(line);
  dpt_tree_destroy(t);
  return rc;
}

int dpt_tree_load_ibnetdiscover(struct dpt_tree **out, const char *path, struct dpt_err *err)
{
  char *buf;
  size_t len;
  int rc;
  *out = NULL;
  if ((rc = dpt_file_read(path, "ibnetdiscover dump", NULL, MAX_FILE_BYTES, &buf, &len, err)) < 0)
    return rc;
  rc = dpt_tree_parse_ibnetdiscover(out, buf, len, path, err);
  free(buf);
  return rc;
}
