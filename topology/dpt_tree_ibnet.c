/* dpt_tree_ibnet.c — switch trees from an InfiniBand fabric dump (ibnetdiscover -p)
 * (see dpt_tree.h; the builder and the shared helpers are in dpt_tree.c). */
#define _GNU_SOURCE /* strverscmp, qsort_r */
#include "dpt_tree_int.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  struct dpt_tree_itab names;
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
  const char *p = dpt_tree_skip_blank(*pp);
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
  const char *p = dpt_tree_skip_blank(*pp);
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
  const char *p = dpt_tree_skip_blank(*pp), *s = p;
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
  const char *p = dpt_tree_skip_blank(*pp);
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
 * blank, comment, unconnected port); -1: not ibnetdiscover -p (why in *why);
 * -2: out of memory (the caller frees r->ld and r->rd in both failures). */
static int ib_parse_line(const char *s, struct ib_rec *r, const char **why)
{
  const char *p = dpt_tree_skip_blank(s), *q, *inner, *sep, *end;
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
  p = dpt_tree_skip_blank(p);
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
  p = dpt_tree_skip_blank(p);
  if (p[0] != '(')
    return -1;
  p = dpt_tree_skip_blank(p + 1);
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
  if (!r->ld || !r->rd)
    return -2;
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

  p = dpt_tree_skip_blank(p);
  h = p;
  while (isalnum((unsigned char)*p) || *p == '-' || *p == '_' || *p == '.')
    p++;
  he = p;
  if (he == h || !isalnum((unsigned char)*h))
    return 0;
  p = dpt_tree_skip_blank(p);
  if (*p) {
    if (p == he)
      return 0; /* other characters glued to the name */
    d = p;
    if (!isalpha((unsigned char)*d))
      return 0;
    while (isalnum((unsigned char)*p) || *p == '-' || *p == '_')
      p++;
    de = p;
    if (!isdigit((unsigned char)de[-1]) || *dpt_tree_skip_blank(p))
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

/* ------------------------------------------------------------------------ */
/* the fabric, step by step                                                 */

struct ib_fabric {
  const char *name;      /* the dump, for messages */
  struct ib_rec *rec;    /* [nrec] connected port lines, in file order */
  int nrec, caprec;
  struct ib_half *half;  /* [nhalf] one per cable once paired (ib_pair_cables) */
  int nhalf;
  struct ib_sw *sw;      /* [nsw] switches, by GUID */
  int nsw;
  struct ib_hosts hs;    /* hosts on leaf switches */
  int *adj_first;        /* [nsw + 1] switch graph (CSR): s's neighbours are adj[adj_first[s] ..] */
  int *adj;              /* [2 * nhalf] neighbour switch */
  double *adj_gbps;      /* [2 * nhalf] data rate of that link */
  int maxlevel;          /* highest switch level reached from a leaf */
  int collapsed_at;      /* first level with a switch of several upper neighbours, -1 none */
  int n_ignored;         /* CAs whose description names no host */
};

static int ib_nomem(struct dpt_err *err)
{
  return dpt_tree_err_nomem(err, "reading an ibnetdiscover dump");
}

static void ib_fabric_free(struct ib_fabric *f)
{
  for (int i = 0; i < f->nrec; i++) {
    free(f->rec[i].ld);
    free(f->rec[i].rd);
  }
  free(f->rec);
  free(f->half);
  free(f->sw);
  free(f->hs.h);
  dpt_tree_itab_free(&f->hs.names);
  free(f->adj_first);
  free(f->adj);
  free(f->adj_gbps);
}

/* Takes r's descriptions (freed on failure). */
static int ib_rec_push(struct ib_fabric *f, struct ib_rec *r, struct dpt_err *err)
{
  if (f->nrec == f->caprec) {
    int cap = f->caprec ? 2 * f->caprec : 256;
    void *q = realloc(f->rec, (size_t)cap * sizeof *f->rec);
    if (!q) {
      free(r->ld);
      free(r->rd);
      return ib_nomem(err);
    }
    f->rec = q;
    f->caprec = cap;
  }
  f->rec[f->nrec++] = *r;
  return 0;
}

/* 1. the connected port lines */
static int ib_read_records(struct ib_fabric *f, const char *buf, size_t len, struct dpt_err *err)
{
  char *line = NULL;
  size_t pos = 0, ln;
  const char *l;
  int nul, lineno = 0, rc = 0;

  while (dpt_tree_next_phys_line(buf, len, &pos, &l, &ln, &nul)) {
    struct ib_rec r = {0};
    const char *why = "";
    int k;
    lineno++;
    if (nul) {
      rc = dpt_tree_err_at(err, f->name, lineno,
                           "NUL byte in the line: this is not a text ibnetdiscover dump");
      goto fail;
    }
    free(line);
    if (!(line = strndup(l, ln))) {
      rc = ib_nomem(err);
      goto fail;
    }
    k = ib_parse_line(line, &r, &why);
    if (k < 0) {
      free(r.ld);
      free(r.rd);
      if (k == -2)
        rc = ib_nomem(err);
      else
        rc = dpt_tree_err_at(err, f->name, lineno, "not an `ibnetdiscover -p` line (%s): '%.120s'", why,
                             line);
      goto fail;
    }
    if (k == 0)
      continue;
    r.line = lineno;
    if ((rc = ib_rec_push(f, &r, err)) < 0)
      goto fail;
  }
  if (f->nrec == 0)
    rc = dpt_tree_err_at(err, f->name, 0,
                         "no connected port lines: is this the output of `ibnetdiscover -p`?");
fail:
  free(line);
  return rc;
}

/* 2. every port has one peer; the same cable seen from both ends counts once:
 * per cable, the half seen from its smaller end on the first line is kept */
static int ib_pair_cables(struct ib_fabric *f, struct dpt_err *err)
{
  const struct ib_rec *rec = f->rec;
  struct ib_half *half;
  int n = 0, k = 0;

  if (!(half = f->half = calloc((size_t)f->nrec * 2, sizeof *half)))
    return ib_nomem(err);
  for (int i = 0; i < f->nrec; i++) {
    const struct ib_rec *r = &rec[i];
    if (r->lt == r->rt && r->lg == r->rg && r->lp == r->rp)
      return dpt_tree_err_at(err, f->name, r->line, "port %d of 0x%016llx is linked to itself", r->lp,
                             (unsigned long long)r->lg);
    half[n++] = (struct ib_half){r->lt, r->rt, r->lg, r->rg, r->lp, r->rp, i};
    half[n++] = (struct ib_half){r->rt, r->lt, r->rg, r->lg, r->rp, r->lp, i};
  }
  qsort(half, (size_t)n, sizeof *half, ib_half_cmp);
  for (int i = 1; i < n; i++) {
    const struct ib_half *a = &half[i - 1], *b = &half[i];
    if (a->t == b->t && a->g == b->g && a->p == b->p && (a->pt != b->pt || a->pg != b->pg || a->pp != b->pp))
      return dpt_tree_err_at(err, f->name, rec[b->rec].line,
                             "port %d of 0x%016llx is linked to 0x%016llx port %d here but to 0x%016llx "
                             "port %d on line %d: the dump is inconsistent (re-run ibnetdiscover on a quiet "
                             "fabric)",
                             b->p, (unsigned long long)b->g, (unsigned long long)b->pg, b->pp,
                             (unsigned long long)a->pg, a->pp, rec[a->rec].line);
  }
  for (int i = 0; i < n; i++) {
    const struct ib_half *h = &half[i];
    int smaller = h->t != h->pt ? h->t < h->pt : h->g != h->pg ? h->g < h->pg : h->p < h->pp;
    if (!smaller)
      continue;
    if (k > 0 && half[k - 1].t == h->t && half[k - 1].g == h->g && half[k - 1].p == h->p)
      continue; /* same cable from the other end or printed twice */
    half[k++] = *h;
  }
  f->nhalf = k;
  return 0;
}

/* 3. switches, by GUID, each with the first record naming it */
static int ib_find_switches(struct ib_fabric *f, struct dpt_err *err)
{
  struct ib_sw *sw;
  int n = 0, k = 0;

  if (!(sw = f->sw = calloc((size_t)f->nrec * 2, sizeof *sw)))
    return ib_nomem(err);
  for (int i = 0; i < f->nrec; i++) {
    if (f->rec[i].lt == 'S')
      sw[n++] = (struct ib_sw){.guid = f->rec[i].lg, .rec = i, .side = 0};
    if (f->rec[i].rt == 'S')
      sw[n++] = (struct ib_sw){.guid = f->rec[i].rg, .rec = i, .side = 1};
  }
  qsort(sw, (size_t)n, sizeof *sw, ib_sw_cmp);
  for (int i = 0; i < n; i++)
    if (k == 0 || sw[k - 1].guid != sw[i].guid)
      sw[k++] = sw[i];
  for (int i = 0; i < k; i++) {
    sw[i].level = -1;
    sw[i].parent = -1;
    sw[i].tidx = -1;
  }
  f->nsw = k;
  return 0;
}

/* A host's HCA port on leaf switch s: a new host, or one more port of a known one. */
static int ib_host_add(struct ib_fabric *f, const char *hn, int s, int port, int recno, struct dpt_err *err)
{
  struct ib_hosts *hs = &f->hs;
  const struct ib_rec *r = &f->rec[recno];
  struct ib_host *h;
  int k = dpt_tree_itab_find(&hs->names, hs, ib_host_name_fn, hn);

  if (k >= 0) {
    h = &hs->h[k];
    if (h->sw != s)
      return dpt_tree_err_at(err, f->name, r->line,
                             "host '%s' has HCA ports on two leaf switches (0x%016llx here, 0x%016llx on "
                             "line %d): multi-rail hosts need a topology.conf that says which group they "
                             "belong to",
                             hn, (unsigned long long)f->sw[s].guid, (unsigned long long)f->sw[h->sw].guid,
                             f->rec[h->rec].line);
    h->gbps += r->gbps;
    if (port < h->port)
      h->port = port;
    return 0;
  }
  if (hs->n == hs->cap) {
    int cap = hs->cap ? 2 * hs->cap : 256;
    void *q = realloc(hs->h, (size_t)cap * sizeof *hs->h);
    if (!q)
      return ib_nomem(err);
    hs->h = q;
    hs->cap = cap;
  }
  h = &hs->h[hs->n];
  memset(h, 0, sizeof *h);
  snprintf(h->name, sizeof h->name, "%s", hn);
  h->sw = s;
  h->port = port;
  h->rec = recno;
  h->gbps = r->gbps;
  if (dpt_tree_itab_add(&hs->names, hs, ib_host_name_fn, hs->n) < 0)
    return ib_nomem(err);
  hs->n++;
  f->sw[s].nhosts++;
  return 0;
}

/* 4. hosts on leaf switches: CA-switch cables whose CA names a host */
static int ib_attach_hosts(struct ib_fabric *f, struct dpt_err *err)
{
  for (int i = 0; i < f->nhalf; i++) {
    const struct ib_half *h = &f->half[i];
    const struct ib_rec *r = &f->rec[h->rec];
    char hn[DPT_TREE_NAME_MAX];
    int h_is_local, ca_is_local, sw, rc;
    if (!((h->t == 'C' && h->pt == 'S') || (h->t == 'S' && h->pt == 'C')))
      continue; /* switch-switch below; CA-CA and router links are not used */
    h_is_local = r->lt == h->t && r->lg == h->g && r->lp == h->p;
    ca_is_local = h->t == 'C' ? h_is_local : !h_is_local;
    if (!ib_host_from_desc(ca_is_local ? r->ld : r->rd, hn)) {
      f->n_ignored++;
      continue;
    }
    sw = ib_find_sw(f->sw, f->nsw, h->t == 'S' ? h->g : h->pg);
    if ((rc = ib_host_add(f, hn, sw, h->t == 'S' ? h->p : h->pp, h->rec, err)) < 0)
      return rc;
  }
  if (f->hs.n == 0)
    return dpt_tree_err_at(err, f->name, 0,
                           "no host HCA is attached to a switch (%d CAs with descriptions that are not "
                           "'<host> <device>', e.g. 'node01 HCA-1', were ignored)",
                           f->n_ignored);
  return 0;
}

/* 5a. the switch graph in CSR, both directions: count, prefix-sum, fill */
static int ib_switch_graph(struct ib_fabric *f, struct dpt_err *err)
{
  int *fill = NULL;

  if (!(f->adj_first = calloc((size_t)f->nsw + 1, sizeof *f->adj_first)) ||
      !(f->adj = calloc((size_t)f->nhalf * 2 + 1, sizeof *f->adj)) ||
      !(f->adj_gbps = calloc((size_t)f->nhalf * 2 + 1, sizeof *f->adj_gbps)) ||
      !(fill = calloc((size_t)f->nsw + 1, sizeof *fill)))
    return ib_nomem(err);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      for (int i = 0; i < f->nsw; i++)
        f->adj_first[i + 1] += f->adj_first[i];
      memcpy(fill, f->adj_first, (size_t)f->nsw * sizeof *fill);
    }
    for (int i = 0; i < f->nhalf; i++) {
      const struct ib_half *h = &f->half[i];
      double gbps = f->rec[h->rec].gbps;
      int a, b;
      if (h->t != 'S' || h->pt != 'S' || h->g == h->pg)
        continue;
      a = ib_find_sw(f->sw, f->nsw, h->g);
      b = ib_find_sw(f->sw, f->nsw, h->pg);
      if (pass == 0) {
        f->adj_first[a + 1]++;
        f->adj_first[b + 1]++;
        continue;
      }
      f->adj_gbps[fill[a]] = gbps;
      f->adj[fill[a]++] = b;
      f->adj_gbps[fill[b]] = gbps;
      f->adj[fill[b]++] = a;
    }
  }
  free(fill);
  return 0;
}

/* 5b. levels: hops from the nearest leaf (breadth-first from every switch with hosts) */
static int ib_switch_levels(struct ib_fabric *f, struct dpt_err *err)
{
  struct ib_sw *sw = f->sw;
  int *queue, qh = 0, qt = 0;

  if (!(queue = calloc((size_t)f->nsw + 1, sizeof *queue)))
    return ib_nomem(err);
  for (int i = 0; i < f->nsw; i++)
    if (sw[i].nhosts > 0) {
      sw[i].level = 0;
      queue[qt++] = i;
    }
  while (qh < qt) {
    int s = queue[qh++];
    for (int e = f->adj_first[s]; e < f->adj_first[s + 1]; e++) {
      int n = f->adj[e];
      if (sw[n].level >= 0)
        continue;
      sw[n].level = sw[s].level + 1;
      if (sw[n].level > f->maxlevel)
        f->maxlevel = sw[n].level;
      queue[qt++] = n;
    }
  }
  free(queue);
  return 0;
}

/* 6. parents, level by level, until some switch has several upper neighbours:
 * from that level on, every switch hangs from one virtual core (-2) */
static void ib_switch_parents(struct ib_fabric *f)
{
  struct ib_sw *sw = f->sw;

  for (int k = 0; k < f->maxlevel && f->collapsed_at < 0; k++) {
    for (int s = 0; s < f->nsw; s++) {
      int up = -1;
      if (sw[s].level != k)
        continue;
      for (int e = f->adj_first[s]; e < f->adj_first[s + 1]; e++)
        if (sw[f->adj[e]].level == k + 1) {
          if (up >= 0 && f->adj[e] != up)
            f->collapsed_at = k;
          up = f->adj[e];
        }
    }
    for (int s = 0; s < f->nsw; s++) {
      if (sw[s].level != k)
        continue;
      for (int e = f->adj_first[s]; e < f->adj_first[s + 1]; e++)
        if (sw[f->adj[e]].level == k + 1) {
          sw[s].parent = f->collapsed_at >= 0 ? -2 : f->adj[e];
          sw[s].up_gbps += f->adj_gbps[e];
          sw[s].up_n++;
        }
    }
  }
}

static const char *ib_sw_desc(const struct ib_fabric *f, const struct ib_sw *x)
{
  return x->side == 0 ? f->rec[x->rec].ld : f->rec[x->rec].rd;
}

/* The tree's switches' names: the description when usable and unique among them, else the GUID. */
static void ib_name_switches(struct ib_fabric *f, const int *ord, int nk)
{
  for (int i = 0; i < nk; i++) {
    struct ib_sw *x = &f->sw[ord[i]];
    const char *d = ib_sw_desc(f, x);
    int uniq = dpt_tree_name_ok(d, 1);
    for (int j = 0; uniq && j < nk; j++)
      if (j != i && strcmp(d, ib_sw_desc(f, &f->sw[ord[j]])) == 0)
        uniq = 0;
    if (uniq)
      snprintf(x->name, sizeof x->name, "%s", d);
    else
      snprintf(x->name, sizeof x->name, "sw-0x%016llx", (unsigned long long)x->guid);
  }
}

/* 7. the tree: switches of the levels up to the collapse (or all reached ones),
 * top levels first, by name; then hosts by leaf and port */
static int ib_tree_make(struct ib_fabric *f, struct dpt_tree **out, struct dpt_err *err)
{
  struct ib_hosts *hs = &f->hs;
  struct dpt_tree *t = NULL;
  int top = f->collapsed_at >= 0 ? f->collapsed_at : f->maxlevel, nk = 0, vcore = -1, rc;
  int *ord;

  if (!(ord = calloc((size_t)f->nsw + 1, sizeof *ord)))
    return ib_nomem(err);
  for (int s = 0; s < f->nsw; s++)
    if (f->sw[s].level >= 0 && f->sw[s].level <= top)
      ord[nk++] = s;
  ib_name_switches(f, ord, nk);
  qsort_r(ord, (size_t)nk, sizeof *ord, ib_level_name_cmp, f->sw);
  if ((rc = dpt_tree_create(&t, "ibnetdiscover", err)) < 0)
    goto fail;
  if (f->collapsed_at >= 0 && (rc = vcore = dpt_tree_add_virtual_switch(t, "virtual-core", err)) < 0)
    goto fail;
  for (int i = 0; i < nk; i++) {
    struct ib_sw *x = &f->sw[ord[i]];
    int parent = x->parent == -2 ? vcore : x->parent >= 0 ? f->sw[x->parent].tidx : -1;
    if ((rc = x->tidx = dpt_tree_add_switch(t, x->name, parent, err)) < 0) {
      dpt_err_prefix(err, "%s:%d", f->name, f->rec[x->rec].line);
      goto fail;
    }
    t->sw[x->tidx].line = f->rec[x->rec].line;
    t->sw[x->tidx].link_gbps = x->up_gbps;
    t->sw[x->tidx].uplinks = x->up_n;
  }
  qsort_r(hs->h, (size_t)hs->n, sizeof *hs->h, ib_host_cmp, f->sw);
  for (int i = 0; i < hs->n; i++) {
    int h = dpt_tree_add_host(t, hs->h[i].name, f->sw[hs->h[i].sw].tidx, err);
    if ((rc = h) < 0) {
      dpt_err_prefix(err, "%s:%d", f->name, f->rec[hs->h[i].rec].line);
      goto fail;
    }
    t->hosts[h].link_gbps = hs->h[i].gbps;
    t->hosts[h].line = f->rec[hs->h[i].rec].line;
  }
  if ((rc = dpt_tree_finish(t, err)) < 0) {
    dpt_err_prefix(err, "%s", f->name);
    goto fail;
  }
  *out = t;
  t = NULL;
  rc = 0;
fail:
  free(ord);
  dpt_tree_destroy(t);
  return rc;
}

int dpt_tree_parse_ibnetdiscover(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                                 struct dpt_err *err)
{
  struct ib_fabric f = {.name = name ? name : "ibnetdiscover dump", .collapsed_at = -1};
  int rc;

  *out = NULL;
  if ((rc = ib_read_records(&f, buf, len, err)) < 0 || (rc = ib_pair_cables(&f, err)) < 0 ||
      (rc = ib_find_switches(&f, err)) < 0 || (rc = ib_attach_hosts(&f, err)) < 0 ||
      (rc = ib_switch_graph(&f, err)) < 0 || (rc = ib_switch_levels(&f, err)) < 0)
    goto fail;
  ib_switch_parents(&f);
  rc = ib_tree_make(&f, out, err);
fail:
  ib_fabric_free(&f);
  return rc;
}

int dpt_tree_load_ibnetdiscover(struct dpt_tree **out, const char *path, struct dpt_err *err)
{
  return dpt_tree_load_file(out, path, "ibnetdiscover dump", dpt_tree_parse_ibnetdiscover, err);
}
