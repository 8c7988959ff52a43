/* dpt_tree_addr.c — switch trees from SLURM_TOPOLOGY_ADDR / SLURM_TOPOLOGY_ADDR_PATTERN
 * (see dpt_tree.h; the builder and the shared helpers are in dpt_tree.c). */
#include "dpt_tree_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  struct dpt_tree_itab names;
};

static const char *addr_host_name_fn(const void *ctx, int i)
{
  return ((const struct addr_hosts *)ctx)->h[i].name;
}

/* One SLURM_TOPOLOGY_ADDR list being read into a tree. */
struct addr_read {
  const char *const *addrs;    /* [n] */
  const char *const *patterns; /* [n] or NULL */
  int n;
  const struct addr_src *src;  /* NULL: entries of dpt_tree_from_addrs */
  struct dpt_tree *t;          /* being built */
  struct addr_hosts ah;        /* h[n]: distinct hosts, in input order */
  int *sw_level;               /* [sw_cap]: component (0 = the first) that named tree switch s */
  int *sw_entry;               /* [sw_cap]: entry that first named tree switch s */
  int sw_cap;
  char *prefix;                /* the switch components of the current entry, dots included */
  int n_noswitch;              /* hosts in no switch */
  int first_noswitch;          /* the first of them (index in ah.h), -1 if none */
};

static const char *addr_pattern(const struct addr_read *r, int i)
{
  return r->patterns && r->patterns[i] && *r->patterns[i] ? r->patterns[i] : NULL;
}

/* Entry i's number of switch components: all but the last when it has no pattern, else the pattern's
 * "switch" count.  Checks the characters and the pattern. */
static int addr_switch_count(const struct addr_read *r, int i, const char *lab, int *nsw,
                             struct dpt_err *err)
{
  const char *addr = r->addrs[i], *pat = addr_pattern(r, i), *p;
  int ncomp = 1;

  *nsw = 0;
  if (!addr || !*addr)
    return dpt_err_set(err, DPT_E_INPUT, "%s: empty SLURM_TOPOLOGY_ADDR", lab);
  for (p = addr; *p; p++) {
    if (*p == '.')
      ncomp++;
    if ((unsigned char)*p <= ' ' || (unsigned char)*p > 0x7e)
      return dpt_err_set(err, DPT_E_INPUT, "%s: SLURM_TOPOLOGY_ADDR '%.200s' has blanks or non-ASCII "
                         "characters", lab, addr);
  }
  if (!pat) {
    *nsw = ncomp - 1;
    return 0;
  }
  /* "switch" components then one "node" */
  for (p = pat;; p = strchr(p, '.') + 1) {
    const char *dot = strchr(p, '.');
    size_t l = dot ? (size_t)(dot - p) : strlen(p);
    if (l == 4 && strncasecmp(p, "node", 4) == 0 && !dot)
      break;
    if (!(l == 6 && strncasecmp(p, "switch", 6) == 0 && dot))
      return dpt_err_set(err, DPT_E_INPUT, "%s: SLURM_TOPOLOGY_ADDR_PATTERN '%.200s' is not \"switch.\"... "
                         "followed by \"node\" (what topology/tree writes)", lab, pat);
    (*nsw)++;
  }
  if (ncomp < *nsw + 1)
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: SLURM_TOPOLOGY_ADDR '%.200s' has %d components but its pattern '%.200s' has %d",
                       lab, addr, ncomp, pat, *nsw + 1);
  return 0;
}

/* Entry i names host hostp: a new host (0), the same host with the same address again (1: one line per
 * task), or the same host with another address (an error). */
static int addr_host_take(struct addr_read *r, int i, const char *hostp, const char *lab,
                          struct dpt_err *err)
{
  const char *addr = r->addrs[i];
  struct addr_hosts *ah = &r->ah;
  int dup;
  char lab2[300];

  if (!*hostp || strlen(hostp) > NAME_MAX_LEN || strpbrk(hostp, "[],"))
    return dpt_err_set(err, DPT_E_INPUT, "%s: SLURM_TOPOLOGY_ADDR '%.200s': host name '%.80s' is empty, "
                       "a hostlist or longer than %d characters", lab, addr, hostp, NAME_MAX_LEN);
  dup = dpt_tree_itab_find(&ah->names, ah, addr_host_name_fn, hostp);
  if (dup >= 0) {
    int j = ah->h[dup].entry;
    const char *pi = addr_pattern(r, i), *pj = addr_pattern(r, j);
    if (strcmp(r->addrs[j], addr) == 0 && !pi == !pj && (!pi || strcasecmp(pj, pi) == 0))
      return 1;
    addr_label(lab2, sizeof lab2, r->src, j);
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: host '%s' has SLURM_TOPOLOGY_ADDR '%.200s' here but '%.200s' at %s: the entries "
                       "come from different topologies", lab, hostp, addr, r->addrs[j], lab2);
  }
  snprintf(ah->h[ah->n].name, sizeof ah->h[ah->n].name, "%s", hostp);
  ah->h[ah->n].entry = i;
  ah->h[ah->n].leaf = -1;
  if (dpt_tree_itab_add(&ah->names, ah, addr_host_name_fn, ah->n) < 0)
    return dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
  ah->n++;
  return 0;
}

/* A new tree switch s, named at component `level` of entry i. */
static int addr_switch_note(struct addr_read *r, int s, int level, int i, struct dpt_err *err)
{
  if (s >= r->sw_cap) {
    int cap = r->sw_cap ? 2 * r->sw_cap : 64;
    void *a = realloc(r->sw_level, (size_t)cap * sizeof *r->sw_level);
    void *b = a ? realloc(r->sw_entry, (size_t)cap * sizeof *r->sw_entry) : NULL;
    if (a)
      r->sw_level = a;
    if (!b)
      return dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
    r->sw_entry = b;
    r->sw_cap = cap;
  }
  r->sw_level[s] = level;
  r->sw_entry[s] = i;
  r->t->sw[s].line = r->src && r->src->file ? r->src->lines[i] : 0;
  return 0;
}

/* Switch `name`, component `level` of entry i, under `parent` (-1: top level): its index, added if new;
 * a switch seen before must be at the same level under the same parent.  Entry i's host is the last one
 * taken (for messages). */
static int addr_switch_take(struct addr_read *r, int i, const char *name, int level, int parent,
                            const char *lab, struct dpt_err *err)
{
  const char *addr = r->addrs[i], *hostp = r->ah.h[r->ah.n - 1].name;
  struct dpt_tree *t = r->t;
  int s, rc, op;
  char lab2[300];

  if (strlen(name) > NAME_MAX_LEN || strpbrk(name, "[],"))
    return dpt_err_set(err, DPT_E_INPUT,
                       strpbrk(name, "[],")
                           ? "%s: SLURM_TOPOLOGY_ADDR '%.200s': host '%s' is under several switches at "
                             "level %d ('%.80s'); dpt needs a tree: fix topology.conf"
                           : "%s: SLURM_TOPOLOGY_ADDR '%.200s': host '%s': switch name at level %d "
                             "('%.80s') is longer than 63 characters",
                       lab, addr, hostp, level, name);
  if ((s = dpt_tree_find_switch(t, name)) < 0) {
    if ((s = dpt_tree_add_switch(t, name, parent, err)) < 0) {
      dpt_err_prefix(err, "%s", lab);
      return s;
    }
    return (rc = addr_switch_note(r, s, level, i, err)) < 0 ? rc : s;
  }
  if (r->sw_level[s] == level && t->sw[s].parent == parent)
    return s;
  addr_label(lab2, sizeof lab2, r->src, r->sw_entry[s]);
  if (r->sw_level[s] != level)
    return dpt_err_set(err, DPT_E_INPUT, "%s: switch '%s' is at level %d in '%.200s' but at level %d at %s "
                       "('%.200s'): the entries do not describe one tree",
                       lab, name, level, addr, r->sw_level[s], lab2, r->addrs[r->sw_entry[s]]);
  op = t->sw[s].parent;
  return dpt_err_set(err, DPT_E_INPUT,
                     "%s: switch '%s' has two parents: '%s' here ('%.200s') and '%s' at %s ('%.200s')",
                     lab, name, parent >= 0 ? t->sw[parent].name : "(top level)", addr,
                     op >= 0 ? t->sw[op].name : "(top level)", lab2, r->addrs[r->sw_entry[s]]);
}

/* The switch components of entry i (the first nsw, up to hostp), top down; an empty one skips a
 * level.  *leaf: the last switch, -1 if none. */
static int addr_switch_path(struct addr_read *r, int i, const char *hostp, int nsw, const char *lab,
                            int *leaf, struct dpt_err *err)
{
  size_t len = (size_t)(hostp - r->addrs[i]);
  char *c;

  *leaf = -1;
  free(r->prefix);
  if (!(r->prefix = malloc(len + 1)))
    return dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
  memcpy(r->prefix, r->addrs[i], len);
  r->prefix[len] = '\0';
  c = r->prefix;
  for (int level = 0; level < nsw; level++) {
    char *dot = strchr(c, '.');
    *dot = '\0';
    if (*c) {
      int s = addr_switch_take(r, i, c, level, *leaf, lab, err);
      if (s < 0)
        return s;
      *leaf = s;
    }
    c = dot + 1;
  }
  return 0;
}

/* Entry i: its host (everything after the nsw-th dot) and the switches above it. */
static int addr_read_entry(struct addr_read *r, int i, struct dpt_err *err)
{
  const char *hostp;
  int nsw, rc, leaf;
  char lab[300];

  addr_label(lab, sizeof lab, r->src, i);
  if ((rc = addr_switch_count(r, i, lab, &nsw, err)) < 0)
    return rc;
  hostp = r->addrs[i];
  for (int k = 0; k < nsw; k++)
    hostp = strchr(hostp, '.') + 1;
  if ((rc = addr_host_take(r, i, hostp, lab, err)) != 0)
    return rc < 0 ? rc : 0;
  if ((rc = addr_switch_path(r, i, hostp, nsw, lab, &leaf, err)) < 0)
    return rc;
  r->ah.h[r->ah.n - 1].leaf = leaf;
  if (leaf < 0 && r->n_noswitch++ == 0)
    r->first_noswitch = r->ah.n - 1;
  return 0;
}

/* Hosts under their leaves: all in switches, or none (then under one virtual "flat" switch). */
static int addr_place_hosts(struct addr_read *r, struct dpt_err *err)
{
  struct addr_hosts *ah = &r->ah;
  char lab[300];

  if (r->n_noswitch > 0 && r->n_noswitch < ah->n) {
    int i = ah->h[r->first_noswitch].entry;
    addr_label(lab, sizeof lab, r->src, i);
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: host '%s' is in no switch (SLURM_TOPOLOGY_ADDR '%.200s') while other hosts are: "
                       "add it to a leaf switch in topology.conf",
                       lab, ah->h[r->first_noswitch].name, r->addrs[i]);
  }
  if (r->n_noswitch == ah->n) { /* no topology at all: flat */
    int s = dpt_tree_add_virtual_switch(r->t, "flat", err);
    if (s < 0)
      return s;
    for (int k = 0; k < ah->n; k++)
      ah->h[k].leaf = s;
  }
  for (int k = 0; k < ah->n; k++) {
    int h = dpt_tree_add_host(r->t, ah->h[k].name, ah->h[k].leaf, err);
    if (h < 0) {
      addr_label(lab, sizeof lab, r->src, ah->h[k].entry);
      dpt_err_prefix(err, "%s", lab);
      return h;
    }
    r->t->hosts[h].line = r->src && r->src->file ? r->src->lines[ah->h[k].entry] : 0;
  }
  return 0;
}

static int addrs_build(struct dpt_tree **out, const char *const *addrs, const char *const *patterns, int n,
                       const struct addr_src *src, struct dpt_err *err)
{
  struct addr_read r = {.addrs = addrs, .patterns = patterns, .n = n, .src = src, .first_noswitch = -1};
  int rc;

  *out = NULL;
  if (n <= 0 || !addrs)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no SLURM_TOPOLOGY_ADDR entries",
                       src && src->file ? src->file : "SLURM_TOPOLOGY_ADDR list");
  if ((rc = dpt_tree_create(&r.t, "addr", err)) < 0)
    return rc;
  if (!(r.ah.h = calloc((size_t)n, sizeof *r.ah.h))) {
    rc = dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
    goto fail;
  }
  for (int i = 0; i < n; i++)
    if ((rc = addr_read_entry(&r, i, err)) < 0)
      goto fail;
  if ((rc = addr_place_hosts(&r, err)) < 0)
    goto fail;
  if ((rc = dpt_tree_finish(r.t, err)) < 0) {
    dpt_err_prefix(err, "%s", src && src->file ? src->file : "SLURM_TOPOLOGY_ADDR entries");
    goto fail;
  }
  *out = r.t;
  r.t = NULL;
  rc = 0;
fail:
  free(r.prefix);
  free(r.sw_level);
  free(r.sw_entry);
  free(r.ah.h);
  dpt_tree_itab_free(&r.ah.names);
  dpt_tree_destroy(r.t);
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
  while (dpt_tree_next_phys_line(buf, len, &pos, &l, &ln, &nul)) {
    char *tok[3], *p, *save = NULL;
    int nt = 0;
    lineno++;
    if (nul) {
      rc = dpt_tree_err_at(err, name, lineno, "NUL byte in the line: this is not a text address list");
      goto fail;
    }
    free(line);
    if (!(line = strndup(l, ln))) {
      rc = dpt_tree_err_nomem(err, "reading an address list");
      goto fail;
    }
    if ((p = strchr(line, '#')))
      *p = '\0';
    for (p = strtok_r(line, " \t\r\v\f", &save); p; p = strtok_r(NULL, " \t\r\v\f", &save)) {
      if (nt == 0 && p[strlen(p) - 1] == ':' && strspn(p, "0123456789") == strlen(p) - 1 && strlen(p) > 1)
        continue; /* srun -l label */
      if (nt == 2) {
        rc = dpt_tree_err_at(err, name, lineno, "expected 'SLURM_TOPOLOGY_ADDR [SLURM_TOPOLOGY_ADDR_PATTERN]', found "
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
        rc = dpt_tree_err_nomem(err, "reading an address list");
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
      rc = dpt_tree_err_nomem(err, "reading an address list");
      goto fail;
    }
  }
  if (n == 0) {
    rc = dpt_tree_err_at(err, name, 0, "no SLURM_TOPOLOGY_ADDR lines (the file is empty or all comments)");
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
  return dpt_tree_load_file(out, path, "SLURM_TOPOLOGY_ADDR list", dpt_tree_parse_addr_list, err);
}
