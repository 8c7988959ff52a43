/* dpt_tree_conf.c — switch trees from Slurm's topology.conf (topology/tree plugin syntax)
 * (see dpt_tree.h; the builder and the shared helpers are in dpt_tree.c). */
#include "dpt_tree_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

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
  struct dpt_tree_itab names;
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
  dpt_tree_itab_free(&c->names);
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
  while (dpt_tree_next_phys_line(buf, len, pos, &l, &n, &nul)) {
    size_t cut = n, end;
    int bs = 0, cont = 0;

    (*lineno)++;
    if (!got)
      *first_line = *lineno;
    got = 1;
    if (nul)
      return dpt_tree_err_at(err, name, *lineno, "NUL byte in the line: this is not a text topology.conf");
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
      return dpt_tree_err_nomem(err, "reading topology.conf");
    if (!cont)
      break;
  }
  if (!got)
    return 0;
  if (!b->s && sbuf_add(b, "", 0) < 0)
    return dpt_tree_err_nomem(err, "reading topology.conf");
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

    p = (char *)dpt_tree_skip_blank(p);
    if (!*p)
      break;
    key = p;
    while (isalnum((unsigned char)*p) || *p == '_' || *p == '.')
      p++;
    klen = (size_t)(p - key);
    if (klen == 0) {
      rc = dpt_tree_err_at(err, name, line, "syntax error at '%.40s': expected Key=Value", key);
      goto fail;
    }
    if (nkeys == 0 && klen == 7 && strncasecmp(key, "include", 7) == 0 && (*p == ' ' || *p == '\t')) {
      rc = dpt_tree_err_at(err, name, line, "'Include' is not supported by dpt: put all switches in one file");
      goto fail;
    }
    {
      char *q = (char *)dpt_tree_skip_blank(p);
      if (*q && strchr("-*+/", *q) && q[1] == '=') {
        rc = dpt_tree_err_at(err, name, line, "'%.*s%c=' is not valid in topology.conf: use '%.*s='", (int)klen,
                    key, *q, (int)klen, key);
        goto fail;
      }
      if (*q != '=') {
        rc = dpt_tree_err_at(err, name, line, "syntax error after '%.*s': expected '=' (Key=Value)",
                    (int)(klen > 40 ? 40 : klen), key);
        goto fail;
      }
      p = (char *)dpt_tree_skip_blank(q + 1);
    }
    for (k = 0; k < K_N; k++)
      if (strlen(conf_keys[k]) == klen && strncasecmp(conf_keys[k], key, klen) == 0)
        break;
    if (k == K_N) {
      rc = dpt_tree_err_at(err, name, line,
                  "unknown key '%.*s' (topology.conf for topology/tree knows SwitchName, Switches, "
                  "Nodes, LinkSpeed)",
                  (int)(klen > 40 ? 40 : klen), key);
      goto fail;
    }
    if (nkeys == 0 && k != K_SWITCHNAME) {
      rc = dpt_tree_err_at(err, name, line, "a line must start with SwitchName=, not %s=", conf_keys[k]);
      goto fail;
    }
    if (val[k]) {
      rc = dpt_tree_err_at(err, name, line,
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
        rc = dpt_tree_err_at(err, name, line, "%s=: unterminated '\"'", conf_keys[k]);
        goto fail;
      }
      *p++ = '\0';
      if (*p && !isspace((unsigned char)*p)) {
        rc = dpt_tree_err_at(err, name, line, "%s=: text right after the closing '\"'", conf_keys[k]);
        goto fail;
      }
    } else {
      v = p;
      while (*p && !isspace((unsigned char)*p))
        p++;
      if (p == v) {
        rc = dpt_tree_err_at(err, name, line, "%s= has no value", conf_keys[k]);
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
    rc = dpt_tree_err_at(err, name, line, "SwitchName= is empty");
    goto fail;
  }
  if (strlen(val[K_SWITCHNAME]) > NAME_MAX_LEN || !dpt_tree_name_ok(val[K_SWITCHNAME], 0)) {
    rc = dpt_tree_err_at(err, name, line, "SwitchName '%.80s' is longer than %d characters or not printable ASCII",
                val[K_SWITCHNAME], NAME_MAX_LEN);
    goto fail;
  }
  if (strpbrk(val[K_SWITCHNAME], "[],")) {
    rc = dpt_tree_err_at(err, name, line,
                "SwitchName '%s' is a hostlist: Slurm takes one switch name per SwitchName= line",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (val[K_NODES] && val[K_SWITCHES]) {
    rc = dpt_tree_err_at(err, name, line,
                "switch '%s' has both Nodes= and Switches= (Slurm rejects this too): put its nodes "
                "under a separate leaf switch",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (!val[K_NODES] && !val[K_SWITCHES]) {
    rc = dpt_tree_err_at(err, name, line, "switch '%s' has neither Nodes= nor Switches=: give it children",
                val[K_SWITCHNAME]);
    goto fail;
  }
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    void *q = realloc(c->sw, (size_t)cap * sizeof *c->sw);
    if (!q)
      return dpt_tree_err_nomem(err, "reading topology.conf");
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
    return dpt_tree_err_nomem(err, "reading topology.conf");
  }
  c->n++;
  if (val[K_LINKSPEED]) {
    const char *v = val[K_LINKSPEED];
    char *endp;
    unsigned long long x;
    errno = 0;
    x = strtoull(v, &endp, 10);
    if (!isdigit((unsigned char)v[0]) || *endp || errno || x >= UINT32_MAX) {
      rc = dpt_tree_err_at(err, name, line,
                  "LinkSpeed '%.40s' of switch '%s' is not an integer between 0 and 4294967294 "
                  "(dpt reads it as Gbit/s)",
                  v, e->name);
      goto fail;
    }
    e->speed = (double)x;
  }
  {
    int prev = dpt_tree_itab_find(&c->names, c, conf_name_fn, e->name);
    if (prev >= 0) {
      rc = dpt_tree_err_at(err, name, line, "switch '%s' is defined twice (lines %d and %d): keep one SwitchName= line",
                  e->name, c->sw[prev].line, line);
      goto fail;
    }
    if (dpt_tree_itab_add(&c->names, c, conf_name_fn, c->n - 1) < 0)
      return dpt_tree_err_nomem(err, "reading topology.conf");
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
    rc = dpt_tree_err_at(err, name, 0,
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
      dpt_err_prefix(err, "%s:%d: switch '%s': Switches=%.200s", name, e->line, e->name, e->switches);
      goto fail;
    }
    if (nhl == 0) {
      rc = dpt_tree_err_at(err, name, e->line, "switch '%s': Switches= is empty", e->name);
      goto fail;
    }
    if (!(e->kids = calloc((size_t)nhl, sizeof *e->kids))) {
      rc = dpt_tree_err_nomem(err, "reading topology.conf");
      goto fail;
    }
    for (int k = 0; k < nhl; k++) {
      int ch = dpt_tree_itab_find(&c.names, &c, conf_name_fn, hl[k]);
      if (ch < 0) {
        rc = dpt_tree_err_at(err, name, e->line,
                    "switch '%s': Switches= names unknown switch '%.80s': define it with its own "
                    "SwitchName= line or fix the name",
                    e->name, hl[k]);
        goto fail;
      }
      if (ch == i) {
        rc = dpt_tree_err_at(err, name, e->line, "switch '%s' lists itself in Switches= (cycle)", e->name);
        goto fail;
      }
      if (c.sw[ch].parent == i) {
        rc = dpt_tree_err_at(err, name, e->line, "switch '%s' lists switch '%s' twice in Switches=", e->name, hl[k]);
        goto fail;
      }
      if (c.sw[ch].parent >= 0) {
        rc = dpt_tree_err_at(err, name, e->line,
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
      rc = dpt_tree_err_at(err, name, c.sw[s].line,
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
    rc = dpt_tree_err_nomem(err, "reading topology.conf");
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
      dpt_err_prefix(err, "%s:%d: switch '%s': Nodes=%.200s", name, e->line, e->name, e->nodes);
      goto fail;
    }
    if (nhl == 0) {
      rc = dpt_tree_err_at(err, name, e->line, "switch '%s': Nodes= is empty", e->name);
      goto fail;
    }
    for (int k = 0; k < nhl; k++) {
      int h = dpt_tree_find_host(t, hl[k]);
      if (h >= 0) {
        const struct dpt_tree_switch *o = &t->sw[t->hosts[h].sw];
        if (o->line == e->line)
          rc = dpt_tree_err_at(err, name, e->line, "node '%s' is listed twice in Nodes= of switch '%s'", hl[k],
                      e->name);
        else
          rc = dpt_tree_err_at(err, name, e->line,
                      "node '%s' is under two switches: '%s' (line %d) and '%s' (line %d); a node "
                      "hangs off one leaf switch",
                      hl[k], o->name, o->line, e->name, e->line);
        goto fail;
      }
      if (strlen(hl[k]) > NAME_MAX_LEN || !dpt_tree_name_ok(hl[k], 0)) {
        rc = dpt_tree_err_at(err, name, e->line, "switch '%s': node name '%.80s' is longer than %d characters or "
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
  return dpt_tree_load_file(out, path, "topology.conf file", dpt_tree_parse_topology_conf, err);
}
