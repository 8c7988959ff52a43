/* dpt_tree.c — switch trees: the builder every source goes through
 * (dpt_tree_create / add_switch / add_host / finish), lookups, the flat tree,
 * libslurm hostlists, and the line helpers the parsers share.  The sources
 * themselves: dpt_tree_conf.c (topology.conf), dpt_tree_addr.c
 * (SLURM_TOPOLOGY_ADDR), dpt_tree_ibnet.c (ibnetdiscover -p); their private
 * interface is dpt_tree_int.h.  See dpt_tree.h for the semantics.
 *
 * Every parser works on a buffer (the file loaders read the file and call it),
 * reports the first problem as DPT_E_INPUT "NAME:LINE: what; what to do", and
 * builds its result through the public builder (dpt_tree_add_switch /
 * dpt_tree_add_host / dpt_tree_finish) so all sources share one set of
 * invariants.  Hostlists are expanded by libslurm only. */
#define _GNU_SOURCE /* strverscmp, qsort_r */
#include "dpt_tree_int.h"
#include "dpt_file.h"
#include "dpt_strv.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <slurm/slurm.h>

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

int dpt_tree_err_at(struct dpt_err *err, const char *name, int line, const char *fmt, ...)
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

int dpt_tree_err_nomem(struct dpt_err *err, const char *what)
{
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory while %s", what);
}

/* ------------------------------------------------------------------------ */
/* Open-addressing hash of indices; names are looked up through a callback so
 * the table works over any array (which may be realloc'd).                 */

static uint64_t hash_name(const char *s)
{
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

void dpt_tree_itab_free(struct dpt_tree_itab *t)
{
  free(t->slot);
  t->slot = NULL;
  t->mask = 0;
  t->n = 0;
}

int dpt_tree_itab_find(const struct dpt_tree_itab *t, const void *ctx, dpt_tree_name_fn fn, const char *name)
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

int dpt_tree_itab_add(struct dpt_tree_itab *t, const void *ctx, dpt_tree_name_fn fn, int idx)
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
  struct dpt_tree_itab hosts;      /* name -> host index */
  struct dpt_tree_itab sws;        /* name -> switch index */
};

static const char *host_name_fn(const void *ctx, int i)
{
  return ((const struct dpt_tree *)ctx)->hosts[i].name;
}

static const char *sw_name_fn(const void *ctx, int i)
{
  return ((const struct dpt_tree *)ctx)->sw[i].name;
}

int dpt_tree_name_ok(const char *name, int allow_space)
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
    return dpt_tree_err_nomem(err, "creating a switch tree");
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
    dpt_tree_itab_free(&tree->index->hosts);
    dpt_tree_itab_free(&tree->index->sws);
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
  if (!name || !dpt_tree_name_ok(name, 1))
    return dpt_err_set(err, DPT_E_INPUT,
                       "switch name '%.80s' is empty, longer than %d characters or not printable ASCII",
                       name ? name : "(null)", NAME_MAX_LEN);
  if (parent < -1 || parent >= t->n_switches)
    return dpt_err_set(err, DPT_E_INPUT, "switch '%s': parent index %d out of range (0..%d)", name,
                       parent, t->n_switches - 1);
  if (dpt_tree_itab_find(&ix->sws, t, sw_name_fn, name) >= 0)
    return dpt_err_set(err, DPT_E_INPUT, "switch '%s' added twice", name);
  if (t->n_switches >= DPT_TREE_MAX_HOSTS)
    return dpt_err_set(err, DPT_E_INPUT, "more than %d switches", DPT_TREE_MAX_HOSTS);
  if (t->n_switches == ix->cap_sw) {
    int cap = ix->cap_sw ? 2 * ix->cap_sw : 16;
    void *p = realloc(t->sw, (size_t)cap * sizeof *t->sw);
    if (!p)
      return dpt_tree_err_nomem(err, "adding a switch");
    t->sw = p;
    ix->cap_sw = cap;
  }
  s = &t->sw[t->n_switches];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->parent = parent;
  s->uplinks = parent >= 0 ? 1 : 0;
  if (dpt_tree_itab_add(&ix->sws, t, sw_name_fn, t->n_switches) < 0)
    return dpt_tree_err_nomem(err, "indexing switch names");
  return t->n_switches++;
}

int dpt_tree_add_host(struct dpt_tree *t, const char *name, int sw, struct dpt_err *err)
{
  struct dpt_tree_index *ix = t->index;
  struct dpt_tree_host *h;

  if (!ix)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_tree_add_host: tree was not made by dpt_tree_create()");
  if (!name || !dpt_tree_name_ok(name, 0))
    return dpt_err_set(err, DPT_E_INPUT,
                       "host name '%.80s' is empty, longer than %d characters, or has blanks or "
                       "non-ASCII characters",
                       name ? name : "(null)", NAME_MAX_LEN);
  if (sw < 0 || sw >= t->n_switches)
    return dpt_err_set(err, DPT_E_INPUT, "host '%s': switch index %d out of range (0..%d)", name, sw,
                       t->n_switches - 1);
  if (dpt_tree_itab_find(&ix->hosts, t, host_name_fn, name) >= 0)
    return dpt_err_set(err, DPT_E_INPUT, "host '%s' added twice", name);
  if (t->n_hosts >= DPT_TREE_MAX_HOSTS)
    return dpt_err_set(err, DPT_E_INPUT, "more than %d hosts", DPT_TREE_MAX_HOSTS);
  if (t->n_hosts == ix->cap_hosts) {
    int cap = ix->cap_hosts ? 2 * ix->cap_hosts : 64;
    void *p = realloc(t->hosts, (size_t)cap * sizeof *t->hosts);
    if (!p)
      return dpt_tree_err_nomem(err, "adding a host");
    t->hosts = p;
    ix->cap_hosts = cap;
  }
  h = &t->hosts[t->n_hosts];
  memset(h, 0, sizeof *h);
  snprintf(h->name, sizeof h->name, "%s", name);
  h->sw = sw;
  if (dpt_tree_itab_add(&ix->hosts, t, host_name_fn, t->n_hosts) < 0)
    return dpt_tree_err_nomem(err, "indexing host names");
  return t->n_hosts++;
}

/* A switch name not used yet: base, base-2, base-3, ... */
static void unique_switch_name(const struct dpt_tree *t, const char *base, char out[DPT_TREE_NAME_MAX])
{
  snprintf(out, DPT_TREE_NAME_MAX, "%s", base);
  for (int k = 2; dpt_tree_find_switch(t, out) >= 0; k++)
    snprintf(out, DPT_TREE_NAME_MAX, "%s-%d", base, k);
}

int dpt_tree_add_virtual_switch(struct dpt_tree *t, const char *base, struct dpt_err *err)
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
    vroot = dpt_tree_add_virtual_switch(t, "virtual-root", err);
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
    dpt_tree_err_nomem(err, "ordering switches");
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
  dpt_tree_itab_free(&t->index->sws);
  for (int k = 0; k < n; k++)
    if (dpt_tree_itab_add(&t->index->sws, t, sw_name_fn, k) < 0) {
      dpt_tree_err_nomem(err, "indexing switch names");
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
    return dpt_tree_itab_find(&t->index->hosts, t, host_name_fn, name);
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
    return dpt_tree_itab_find(&t->index->sws, t, sw_name_fn, name);
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
  if ((s = rc = dpt_tree_add_virtual_switch(t, "flat", err)) < 0)
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
  dpt_strv_free(hosts, n);
}

/* slurm_hostlist_create() with libslurm's own log kept off stderr.  libslurm
 * reports a bad range on stderr through its log ("prog: error:
 * _parse_single_range: Invalid range: `5-1'"), which no public call of Slurm
 * 22.05 turns off (log_init/log_alter and their options live in its private
 * log.h); so fd 2 points at an anonymous memory file while it parses, and what
 * it wrote comes back in said ("Invalid range: `5-1'", "" if nothing) for dpt's
 * own message.  Anything written there while the list was good (another
 * thread's line) goes back to stderr as it was. */
static hostlist_t hostlist_create_quiet(const char *hostlist, char *said, size_t len)
{
  hostlist_t hl;
  int mem = memfd_create("dpt-libslurm-log", MFD_CLOEXEC), saved = -1;
  ssize_t got = 0;

  said[0] = '\0';
  fflush(stderr);
  if (mem >= 0 && (saved = fcntl(2, F_DUPFD_CLOEXEC, 3)) >= 0 && dup2(mem, 2) < 0) {
    close(saved);
    saved = -1;
  }
  hl = slurm_hostlist_create(hostlist);
  if (saved >= 0) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    got = pread(mem, said, len - 1, 0);
    said[got > 0 ? got : 0] = '\0';
  }
  if (mem >= 0)
    close(mem);
  if (hl && said[0]) { /* not libslurm's complaint about this list: give it back */
    ssize_t w = write(2, said, strlen(said));
    (void)w;
    said[0] = '\0';
  } else if (said[0]) { /* "prog: error: _func: Reason\n" -> "Reason" */
    char *r = strstr(said, "error: ") ? strstr(said, "error: ") + 7 : said, *c;
    if (*r == '_' && (c = strstr(r, ": ")))
      r = c + 2;
    memmove(said, r, strlen(r) + 1);
    said[strcspn(said, "\n")] = '\0';
  }
  return hl;
}

int dpt_tree_hostlist_expand(const char *hostlist, char ***out, int *n, struct dpt_err *err)
{
  hostlist_t hl = NULL;
  char said[256];
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
  hl = hostlist_create_quiet(hostlist, said, sizeof said);
  if (!hl)
    return dpt_err_set(err, DPT_E_INPUT,
                       "hostlist '%.200s' is invalid: libslurm rejects it%s%s (ranges are LOW-HIGH "
                       "with LOW <= HIGH, at most 65536 names each)",
                       hostlist, said[0] ? ": " : "", said);
  cnt = slurm_hostlist_count(hl);
  if (cnt < 0 || cnt > DPT_TREE_MAX_HOSTS) {
    rc = dpt_err_set(err, DPT_E_INPUT, "hostlist '%.200s' names %d hosts, more than dpt's limit of %d",
                     hostlist, cnt, DPT_TREE_MAX_HOSTS);
    goto fail;
  }
  v = calloc((size_t)cnt + 1, sizeof *v);
  if (!v) {
    rc = dpt_tree_err_nomem(err, "expanding a hostlist");
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

int dpt_tree_next_phys_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n,
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

const char *dpt_tree_skip_blank(const char *p)
{
  while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')
    p++;
  return p;
}

int dpt_tree_load_file(struct dpt_tree **out, const char *path, const char *what, dpt_tree_parse_fn parse,
                       struct dpt_err *err)
{
  char *buf;
  size_t len;
  int rc;
  *out = NULL;
  if ((rc = dpt_file_read(path, what, NULL, MAX_FILE_BYTES, &buf, &len, err)) < 0)
    return rc;
  rc = parse(out, buf, len, path, err);
  free(buf);
  return rc;
}
