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
    rc = dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
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
    dup = dpt_tree_itab_find(&ah.names, &ah, addr_host_name_fn, hostp);
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
    if (dpt_tree_itab_add(&ah.names, &ah, addr_host_name_fn, ah.n) < 0) {
      rc = dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
      goto fail;
    }
    ah.n++;

    /* switch components, level by level; empty ones skip a level */
    alen = (size_t)(hostp - addr);
    free(tmp);
    if (!(tmp = malloc(alen + 1))) {
      rc = dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
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
            rc = dpt_tree_err_nomem(err, "reading SLURM_TOPOLOGY_ADDR entries");
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
    int s = dpt_tree_add_virtual_switch(t, "flat", err);
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
  dpt_tree_itab_free(&ah.names);
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
