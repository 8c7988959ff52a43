/* dpt_plan.c — the topology-aware ring planner and its cost model.
 *
 * dpt_plan_compute() is a pure, deterministic function of its inputs (switch
 * tree, the job's hosts in Slurm's order, one node topology per host, options):
 * no clock, no environment, no global state.  Every caller gets the same plan
 * and the same digest.
 *
 * 1. Node order (the ring across nodes).  A depth-first walk of the switch
 *    tree from its root.  At every switch the job hosts hanging directly off
 *    it come first, then its child switches; hosts and child switches are
 *    visited in natural name order ("n2" < "n10", ties by byte order), never
 *    in input order, so the ring does not depend on the order Slurm (or a
 *    tree file) lists them in, and topology.conf / SLURM_TOPOLOGY_ADDR /
 *    ibnetdiscover descriptions of one cluster give one ring.  Subtrees
 *    without job hosts are skipped.  A depth-first walk makes every subtree
 *    one contiguous run of the ring, so the cyclic ring enters and leaves each
 *    subtree exactly once: every link of the tree carries at most one ring
 *    flow per direction, and the ring crosses between leaf switches ("groups")
 *    exactly once per group (m groups: m inter-group hops, none if m == 1).
 *
 * 2. GPU order inside a node.  Ranks of a node are one contiguous block of
 *    the ring; their GPU sequence g_0..g_{r-1} minimises
 *        sum_i w(path(g_i, g_{i+1})) + e(g_0) + e(g_{r-1})
 *    where w() weighs the path classes NV < PIX < PXB < PHB < NODE < SYS by
 *    powers of 16 (so one farther hop outweighs all nearer ones; more NVLinks
 *    weigh less) and e(g) is w() of g's path to its nearest usable HCA: the
 *    ring enters and leaves the node through GPUs next to an HCA.  When the
 *    job has one node the ring closes inside it: the last->first edge counts
 *    instead of e().  Nodes with up to 8 GPUs are searched exhaustively
 *    (branch and bound over the ordered r-subsets in lexicographic order,
 *    keeping the first strict minimum: deterministic); larger nodes use a
 *    greedy walk from the GPU nearest an HCA, always to the nearest unused
 *    GPU, ties by index.  Identical node topologies are searched once.
 *    Unknown paths (a node known only by its GPU count) weigh 0: PCI order.
 *    More ranks than GPUs (allowed only with allow_oversubscribe): local rank
 *    j uses GPU order[j * n_gpus / r], so ranks sharing a GPU are adjacent.
 *
 * 3. Binding.  A rank's cpuset is the cpuset local to its GPU (or, for a node
 *    without GPUs, to NUMA node j * n_numa / r).  Ranks of a node whose local
 *    cpusets are equal share it fairly: the cores inside it (hwloc, when the
 *    node carries its hwloc topology; else its PUs) are cut into disjoint
 *    contiguous slices, [i*m/k, (i+1)*m/k) for the i-th of k ranks (one shared
 *    core each when m < k).  threads = cores in the slice unless
 *    opts.threads_per_rank says otherwise.  The node-wide HCA list is the
 *    union, over the node's GPUs in use, of the usable HCAs (port ACTIVE or
 *    state unknown) at the minimal path class from that GPU, in HCA index
 *    order: the same NCCL_IB_HCA on every rank of the node.
 *
 * 4. Cost model.  Links: host<->leaf and switch<->parent, each direction
 *    separately, bandwidth from the tree (link_gbps) or opts.host_gbps /
 *    opts.uplink_gbps.  A ring over nodes (cyclic; none when one node) routes
 *    each edge a->b up from a to the lowest common switch and down to b; the
 *    flows of a link direction are the edges routed over it, and an edge's
 *    bandwidth is min over its links of gbps / flows.  Bn = the slowest edge,
 *    Bi = opts.intra_gbps (every intra-node edge), a = opts.alpha_us, S the
 *    message (halved with fp16), p ranks, n nodes, g ranks per node (largest).
 *      ring (planned, slurm-order, random; same GPU order inside nodes, only
 *      the node order differs):
 *        t = 2(p-1) * (a + (S/p) / min(Bn, Bi))
 *      hierarchical (reduce to a leader per node = reduce-scatter + gather in
 *      the node; ring all-reduce of S among the n leaders in planned order;
 *      broadcast = scatter + all-gather in the node):
 *        t = 4(g-1) * (a + S/(g Bi)) + 2(n-1) * (a + S/(n Bn))
 *      2d (reduce-scatter in the node; g rings, one per local rank, each over
 *      the n nodes in planned order carrying S/g, all g rings on the same
 *      links so every link direction carries g times the ring's flows; then
 *      all-gather in the node):
 *        t = 2(g-1) * (a + S/(g Bi)) + 2(n-1) * (a + (S/g) / (n Bn'))
 *      with Bn' computed from the g-fold flows (= Bn/g for equal links).
 *    bound = 2(p-1)/p * S / B (B: slowest host link of the job; Bi on one
 *    node); busbw = (S/t) * 2(p-1)/p as nccl-tests.  Inter-group hops count
 *    ring edges between hosts on different leaf switches (2d: summed over its
 *    g rings).  The "random" order is a Fisher-Yates shuffle of Slurm's order
 *    driven by splitmix64(opts.seed): identical on every machine.
 *
 * 5. Digest: FNV-1a 64 over a canonical text of the node list, every rank's
 *    binding, and each alternative's order, hops and link flows (not the
 *    floating-point predictions, not the tree's switch indexes). */
#include "dpt_plan.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_EXACT_MAX_GPUS 8
#define PLAN_DEFAULT_HOST_GBPS 100.0
#define PLAN_DEFAULT_INTRA_GBPS 128.0
#define PLAN_DEFAULT_ALPHA_US 5.0

/* ---------------------------------------------------------------- helpers */

/* Natural order: digit runs compare by value, the rest byte by byte; ties by
 * strcmp so that distinct strings never compare equal. */
static int natcmp(const char *a, const char *b)
{
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  while (*x && *y) {
    if (isdigit(*x) && isdigit(*y)) {
      const unsigned char *xs = x, *ys = y;
      size_t lx, ly;
      while (*xs == '0' && isdigit(xs[1]))
        xs++;
      while (*ys == '0' && isdigit(ys[1]))
        ys++;
      x = xs;
      y = ys;
      while (isdigit(*x))
        x++;
      while (isdigit(*y))
        y++;
      lx = (size_t)(x - xs);
      ly = (size_t)(y - ys);
      if (lx != ly)
        return lx < ly ? -1 : 1;
      int c = memcmp(xs, ys, lx);
      if (c)
        return c < 0 ? -1 : 1;
      continue;
    }
    if (*x != *y)
      return *x < *y ? -1 : 1;
    x++;
    y++;
  }
  if (*x || *y)
    return *x ? 1 : -1;
  return strcmp(a, b);
}

struct named {
  const char *name;
  int idx;
};

static int named_natcmp(const void *pa, const void *pb)
{
  const struct named *a = pa, *b = pb;
  int c = natcmp(a->name, b->name);
  if (c)
    return c;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

static int named_strcmp(const void *pa, const void *pb)
{
  const struct named *a = pa, *b = pb;
  int c = strcmp(a->name, b->name);
  if (c)
    return c;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

static uint64_t splitmix64(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct fnv {
  uint64_t h;
};

static void fnv_bytes(struct fnv *f, const void *p, size_t n)
{
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) {
    f->h ^= c[i];
    f->h *= 0x100000001b3ULL;
  }
}

static void fnv_printf(struct fnv *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fnv_printf(struct fnv *f, const char *fmt, ...)
{
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n >= sizeof buf)
    n = (int)sizeof buf - 1;
  fnv_bytes(f, buf, (size_t)n);
  fnv_bytes(f, "\n", 1);
}

static double gbps_to_Bps(double gbps)
{
  return gbps * 1e9 / 8.0;
}

/* Path weight: one class farther outweighs any number (< 16) of nearer hops. */
static uint64_t path_weight(struct dpt_path p)
{
  switch (p.cls) {
  case DPT_PATH_X: return 0;
  case DPT_PATH_NV: return 16 - (uint64_t)(p.nvlinks < 1 ? 1 : p.nvlinks > 12 ? 12 : p.nvlinks);
  case DPT_PATH_PIX: return 1ULL << 8;
  case DPT_PATH_PXB: return 1ULL << 12;
  case DPT_PATH_PHB: return 1ULL << 16;
  case DPT_PATH_NODE: return 1ULL << 20;
  case DPT_PATH_SYS: return 1ULL << 24;
  default: return 0; /* unknown: no preference */
  }
}

static int hca_usable(const struct dpt_node_hca *h)
{
  return h->port_state[0] == '\0' || !strcmp(h->port_state, "ACTIVE");
}

/* ---------------------------------------------------------- working state */

struct gpu_order_cache {
  const struct dpt_node *node; /* first node with this content */
  int r;                       /* ranks on it */
  int closed;
  int n;                       /* GPUs */
  uint64_t *w;                 /* [n * n] edge weights */
  uint64_t *e;                 /* [n] endpoint weights */
  int *order;                  /* [min(r, n)] GPU sequence */
};

struct work {
  const struct dpt_tree *tree;
  int n;                       /* job hosts */
  const char *const *hosts;    /* [n] */
  int ns;                      /* switches */
  int *tidx;                   /* [n] tree host index of each job host */
  int *leaf;                   /* [n] leaf switch of each job host */
  int *depth;                  /* [ns] depth from the root (computed) */
  int *sub;                    /* [ns] job hosts in the subtree */
  int *order;                  /* [n] planned ring order of job hosts */
  int n_order;
  int *sw_walk;                /* [ns] switches with job hosts, in walk order */
  int n_walk;
  /* children in walk order (CSR) */
  int *ch_off, *ch;            /* [ns + 1], [ns]: child switches */
  int *hh_off, *hh;            /* [ns + 1], [n]: job hosts directly under */
  /* flow counters, per direction */
  int *up_h, *down_h;          /* [n] host <-> leaf */
  int *up_s, *down_s;          /* [ns] switch <-> parent */
  double *bw_h;                /* [n] Gbit/s */
  double *bw_s;                /* [ns] Gbit/s */
  int n_cache;
  struct gpu_order_cache *cache; /* [n] at most */
};

static void work_free(struct work *w)
{
  free(w->tidx);
  free(w->leaf);
  free(w->depth);
  free(w->sub);
  free(w->order);
  free(w->sw_walk);
  free(w->ch_off);
  free(w->ch);
  free(w->hh_off);
  free(w->hh);
  free(w->up_h);
  free(w->down_h);
  free(w->up_s);
  free(w->down_s);
  free(w->bw_h);
  free(w->bw_s);
  for (int i = 0; i < w->n_cache; i++) {
    free(w->cache[i].w);
    free(w->cache[i].e);
    free(w->cache[i].order);
  }
  free(w->cache);
}

/* ------------------------------------------------------ tree and hosts */

static int check_tree(struct work *w, struct dpt_err *err)
{
  const struct dpt_tree *t = w->tree;
  int roots = 0;

  if (t->n_switches < 1 || !t->sw)
    return dpt_err_set(err, DPT_E_INPUT, "switch tree (%s) has no switch", t->source);
  for (int s = 0; s < t->n_switches; s++) {
    int p = t->sw[s].parent;
    if (p < -1 || p >= t->n_switches || p == s)
      return dpt_err_set(err, DPT_E_INPUT, "switch tree (%s): switch '%s' has invalid parent %d",
                         t->source, t->sw[s].name, p);
    if (p == -1)
      roots++;
  }
  if (roots != 1)
    return dpt_err_set(err, DPT_E_INPUT,
                       "switch tree (%s) has %d roots; expected exactly one (dpt_tree adds a "
                       "virtual root above several top-level switches)", t->source, roots);
  for (int s = 0; s < t->n_switches; s++) {
    int d = 0, x = s;
    while (t->sw[x].parent >= 0) {
      x = t->sw[x].parent;
      if (++d > t->n_switches)
        return dpt_err_set(err, DPT_E_INPUT,
                           "switch tree (%s): switch '%s' is on a cycle of parents",
                           t->source, t->sw[s].name);
    }
    w->depth[s] = d;
  }
  for (int h = 0; h < t->n_hosts; h++)
    if (t->hosts[h].sw < 0 || t->hosts[h].sw >= t->n_switches)
      return dpt_err_set(err, DPT_E_INPUT, "switch tree (%s): host '%s' hangs off switch %d, "
                         "which does not exist", t->source, t->hosts[h].name, t->hosts[h].sw);
  return 0;
}

/* Map job hosts to tree hosts; reject duplicates and unknown hosts. */
static int map_hosts(struct work *w, struct dpt_err *err)
{
  const struct dpt_tree *t = w->tree;
  struct named *th = NULL, *jh = NULL;
  int rc = 0;

  th = malloc(sizeof *th * (size_t)(t->n_hosts ? t->n_hosts : 1));
  jh = malloc(sizeof *jh * (size_t)w->n);
  if (!th || !jh) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory mapping %d hosts", w->n);
    goto fail;
  }
  for (int i = 0; i < w->n; i++) {
    if (!w->hosts[i] || !w->hosts[i][0]) {
      rc = dpt_err_set(err, DPT_E_INPUT, "job host #%d has an empty name", i);
      goto fail;
    }
    jh[i].name = w->hosts[i];
    jh[i].idx = i;
  }
  qsort(jh, (size_t)w->n, sizeof *jh, named_strcmp);
  for (int i = 1; i < w->n; i++)
    if (!strcmp(jh[i - 1].name, jh[i].name)) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "host '%s' appears twice in the job's host list (positions %d and %d); "
                       "list every host once", jh[i].name, jh[i - 1].idx + 1, jh[i].idx + 1);
      goto fail;
    }
  for (int h = 0; h < t->n_hosts; h++) {
    th[h].name = t->hosts[h].name;
    th[h].idx = h;
  }
  qsort(th, (size_t)t->n_hosts, sizeof *th, named_strcmp);
  for (int h = 1; h < t->n_hosts; h++)
    if (!strcmp(th[h - 1].name, th[h].name)) {
      rc = dpt_err_set(err, DPT_E_INPUT, "switch tree (%s) lists host '%s' twice (under '%s' "
                       "and '%s')", t->source, th[h].name, t->sw[t->hosts[th[h - 1].idx].sw].name,
                       t->sw[t->hosts[th[h].idx].sw].name);
      goto fail;
    }
  for (int i = 0; i < w->n; i++) {
    struct named key = {w->hosts[i], -1};
    int lo = 0, hi = t->n_hosts;
    while (lo < hi) { /* first element >= key by name */
      int mid = lo + (hi - lo) / 2;
      if (strcmp(th[mid].name, key.name) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo >= t->n_hosts || strcmp(th[lo].name, key.name)) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "host '%s' (job host #%d) is in no switch of the tree (%s, %d hosts); "
                       "add it to the topology or drop it from the job", w->hosts[i], i + 1,
                       t->source, t->n_hosts);
      goto fail;
    }
    w->tidx[i] = th[lo].idx;
    w->leaf[i] = t->hosts[th[lo].idx].sw;
  }
fail:
  free(th);
  free(jh);
  return rc;
}

static void walk(struct work *w, int s)
{
  w->sw_walk[w->n_walk++] = s;
  for (int k = w->hh_off[s]; k < w->hh_off[s + 1]; k++)
    w->order[w->n_order++] = w->hh[k];
  for (int k = w->ch_off[s]; k < w->ch_off[s + 1]; k++)
    if (w->sub[w->ch[k]] > 0)
      walk(w, w->ch[k]);
}

static int plan_node_order(struct work *w, struct dpt_err *err)
{
  const struct dpt_tree *t = w->tree;
  struct named *tmp = malloc(sizeof *tmp * (size_t)(w->ns > w->n ? w->ns : w->n));
  int root = -1;

  if (!tmp)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
  for (int i = 0; i < w->n; i++)
    for (int s = w->leaf[i]; s >= 0; s = t->sw[s].parent)
      w->sub[s]++;
  /* child switches, sorted by name */
  for (int s = 0; s < w->ns; s++) {
    if (t->sw[s].parent >= 0)
      w->ch_off[t->sw[s].parent + 1]++;
    else
      root = s;
  }
  for (int s = 0; s < w->ns; s++)
    w->ch_off[s + 1] += w->ch_off[s];
  {
    int *fill = w->up_s; /* scratch, zeroed again below */
    memset(fill, 0, sizeof *fill * (size_t)w->ns);
    for (int s = 0; s < w->ns; s++) {
      int p = t->sw[s].parent;
      if (p >= 0)
        w->ch[w->ch_off[p] + fill[p]++] = s;
    }
    memset(fill, 0, sizeof *fill * (size_t)w->ns);
  }
  for (int s = 0; s < w->ns; s++) {
    int a = w->ch_off[s], b = w->ch_off[s + 1];
    for (int k = a; k < b; k++) {
      tmp[k - a].name = t->sw[w->ch[k]].name;
      tmp[k - a].idx = w->ch[k];
    }
    qsort(tmp, (size_t)(b - a), sizeof *tmp, named_natcmp);
    for (int k = a; k < b; k++)
      w->ch[k] = tmp[k - a].idx;
  }
  /* job hosts directly under each switch, sorted by name */
  for (int i = 0; i < w->n; i++)
    w->hh_off[w->leaf[i] + 1]++;
  for (int s = 0; s < w->ns; s++)
    w->hh_off[s + 1] += w->hh_off[s];
  {
    int *fill = w->up_s;
    for (int i = 0; i < w->n; i++)
      w->hh[w->hh_off[w->leaf[i]] + fill[w->leaf[i]]++] = i;
    memset(fill, 0, sizeof *fill * (size_t)w->ns);
  }
  for (int s = 0; s < w->ns; s++) {
    int a = w->hh_off[s], b = w->hh_off[s + 1];
    for (int k = a; k < b; k++) {
      tmp[k - a].name = w->hosts[w->hh[k]];
      tmp[k - a].idx = w->hh[k];
    }
    qsort(tmp, (size_t)(b - a), sizeof *tmp, named_natcmp);
    for (int k = a; k < b; k++)
      w->hh[k] = tmp[k - a].idx;
  }
  free(tmp);
  walk(w, root);
  return 0;
}

/* ------------------------------------------------------- GPU order */

struct search {
  int n, r, closed;
  const uint64_t *w, *e;
  int cur[PLAN_EXACT_MAX_GPUS];
  int used[PLAN_EXACT_MAX_GPUS];
  int best[PLAN_EXACT_MAX_GPUS];
  uint64_t best_cost;
};

static void bb(struct search *s, int depth, uint64_t cost)
{
  if (depth == s->r) {
    if (s->r < 1) /* nothing to order */
      return;
    int last = s->cur[s->r - 1], first = s->cur[0];
    uint64_t total = cost + (s->closed ? (s->r > 1 ? s->w[last * s->n + first] : 0) : s->e[last]);
    if (total < s->best_cost) {
      s->best_cost = total;
      memcpy(s->best, s->cur, sizeof s->best);
    }
    return;
  }
  for (int g = 0; g < s->n; g++) {
    if (s->used[g])
      continue;
    uint64_t c = cost + (depth == 0 ? (s->closed ? 0 : s->e[g]) : s->w[s->cur[depth - 1] * s->n + g]);
    if (c >= s->best_cost)
      continue; /* no completion can be strictly better */
    s->used[g] = 1;
    s->cur[depth] = g;
    bb(s, depth + 1, c);
    s->used[g] = 0;
  }
}

static void gpu_sequence(int n, int r, int closed, const uint64_t *w, const uint64_t *e, int *out)
{
  if (n <= PLAN_EXACT_MAX_GPUS) {
    struct search s;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.r = r;
    s.closed = closed;
    s.w = w;
    s.e = e;
    s.best_cost = UINT64_MAX;
    bb(&s, 0, 0);
    memcpy(out, s.best, sizeof *out * (size_t)r);
    return;
  }
  /* greedy: start next to an HCA, then always the nearest unused GPU */
  char *used = calloc((size_t)n, 1);
  int cur = 0;
  if (!closed)
    for (int g = 1; g < n; g++)
      if (e[g] < e[cur])
        cur = g;
  if (!used) { /* cannot allocate a few bytes: fall back to PCI order */
    for (int j = 0; j < r; j++)
      out[j] = j;
    return;
  }
  out[0] = cur;
  used[cur] = 1;
  for (int j = 1; j < r; j++) {
    int best = -1;
    for (int g = 0; g < n; g++)
      if (!used[g] && (best < 0 || w[cur * n + g] < w[cur * n + best]))
        best = g;
    out[j] = cur = best;
    used[best] = 1;
  }
  free(used);
}

/* The GPU sequence for a node with r ranks (r <= n_gpus; the caller maps
 * oversubscribed ranks).  Cached by node pointer and by content. */
static int node_gpu_order(struct work *wk, const struct dpt_node *node, int r, int closed,
                          const int **order_out, struct dpt_err *err)
{
  int n = node->n_gpus;
  uint64_t *w = NULL, *e = NULL;
  int *order = NULL;

  for (int i = 0; i < wk->n_cache; i++)
    if (wk->cache[i].node == node && wk->cache[i].r == r && wk->cache[i].closed == closed) {
      *order_out = wk->cache[i].order;
      return 0;
    }
  w = malloc(sizeof *w * (size_t)n * (size_t)n);
  e = malloc(sizeof *e * (size_t)n);
  order = malloc(sizeof *order * (size_t)r);
  if (!w || !e || !order)
    goto nomem;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      uint64_t x = node->gpu_gpu ? path_weight(node->gpu_gpu[a * n + b]) : 0;
      uint64_t y = node->gpu_gpu ? path_weight(node->gpu_gpu[b * n + a]) : 0;
      w[a * n + b] = a == b ? 0 : x > y ? x : y;
    }
  for (int g = 0; g < n; g++) {
    uint64_t best = UINT64_MAX;
    for (int h = 0; h < node->n_hcas; h++) {
      if (!hca_usable(&node->hcas[h]) || !node->gpu_hca)
        continue;
      uint64_t x = path_weight(node->gpu_hca[g * node->n_hcas + h]);
      if (x < best)
        best = x;
    }
    e[g] = best == UINT64_MAX ? 0 : best;
  }
  for (int i = 0; i < wk->n_cache; i++) {
    struct gpu_order_cache *c = &wk->cache[i];
    if (c->n == n && c->r == r && c->closed == closed &&
        !memcmp(c->w, w, sizeof *w * (size_t)n * (size_t)n) && !memcmp(c->e, e, sizeof *e * (size_t)n)) {
      memcpy(order, c->order, sizeof *order * (size_t)r);
      goto store;
    }
  }
  gpu_sequence(n, r, closed, w, e, order);
store:
  {
    struct gpu_order_cache *c = &wk->cache[wk->n_cache++];
    c->node = node;
    c->r = r;
    c->closed = closed;
    c->n = n;
    c->w = w;
    c->e = e;
    c->order = order;
    *order_out = order;
  }
  return 0;
nomem:
  free(w);
  free(e);
  free(order);
  return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory ordering %d GPUs", n);
}

/* ------------------------------------------------------------ binding */

static int bitmap_unknown(hwloc_const_bitmap_t b)
{
  return !b || hwloc_bitmap_iszero(b) || hwloc_bitmap_weight(b) < 0;
}

/* Slice i of k of the cores (or PUs) in base into rank->cpuset/threads. */
static int bind_slice(const struct dpt_node *node, hwloc_const_bitmap_t base, int i, int k,
                      const struct dpt_plan_opts *opts, struct dpt_plan_rank *rk,
                      const char *host, struct dpt_err *err)
{
  hwloc_bitmap_t set = NULL;
  int m = 0, lo, hi, rc = 0;

  rk->cpuset[0] = '\0';
  rk->threads = opts->threads_per_rank > 0 ? opts->threads_per_rank : 1;
  if (bitmap_unknown(base))
    return 0;
  set = hwloc_bitmap_alloc();
  if (!set)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory binding host '%s'", host);
  if (node->topo) {
    hwloc_obj_type_t type = HWLOC_OBJ_CORE;
    m = hwloc_get_nbobjs_inside_cpuset_by_type(node->topo, base, type);
    if (m <= 0) {
      type = HWLOC_OBJ_PU;
      m = hwloc_get_nbobjs_inside_cpuset_by_type(node->topo, base, type);
    }
    if (m > 0) {
      lo = (int)((int64_t)i * m / k);
      hi = (int)((int64_t)(i + 1) * m / k);
      if (hi <= lo)
        hi = lo + 1;
      for (int c = lo; c < hi; c++) {
        hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(node->topo, base, type, (unsigned)c);
        if (o && o->cpuset)
          hwloc_bitmap_or(set, set, o->cpuset);
      }
      hwloc_bitmap_and(set, set, base);
    }
  }
  if (m <= 0) { /* no hwloc topology: cut the PUs */
    int pus[4096], np = 0;
    int id;
    hwloc_bitmap_foreach_begin(id, base)
      if (np < (int)(sizeof pus / sizeof pus[0]))
        pus[np++] = id;
    hwloc_bitmap_foreach_end();
    m = np;
    lo = (int)((int64_t)i * m / k);
    hi = (int)((int64_t)(i + 1) * m / k);
    if (hi <= lo)
      hi = lo + 1;
    for (int c = lo; c < hi && c < m; c++)
      hwloc_bitmap_set(set, (unsigned)pus[c]);
  }
  if (opts->threads_per_rank <= 0)
    rk->threads = hi - lo;
  if (hwloc_bitmap_list_snprintf(rk->cpuset, sizeof rk->cpuset, set) >= (int)sizeof rk->cpuset) {
    rk->cpuset[0] = '\0';
    rc = dpt_err_set(err, DPT_E_INPUT, "host '%s' rank %d: cpuset does not fit in %zu characters",
                     host, rk->rank, sizeof rk->cpuset);
  }
  hwloc_bitmap_free(set);
  return rc;
}

static int bind_node(struct work *wk, struct dpt_plan *plan, int ni, const struct dpt_node *node,
                     const int *gpu_of, const struct dpt_plan_opts *opts, struct dpt_err *err)
{
  struct dpt_plan_node *pn = &plan->nodes[ni];
  int r = pn->n_ranks, rc = 0;
  hwloc_const_bitmap_t *base = calloc((size_t)r, sizeof *base);
  char *use_hca = calloc((size_t)(node->n_hcas ? node->n_hcas : 1), 1);

  (void)wk;
  if (!base || !use_hca) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory binding host '%s'", pn->host);
    goto fail;
  }
  for (int j = 0; j < r; j++) {
    struct dpt_plan_rank *rk = &plan->ranks[pn->first_rank + j];
    rk->rank = pn->first_rank + j;
    rk->node = ni;
    rk->local_rank = j;
    rk->gpu = gpu_of[j];
    rk->gpu_busid[0] = '\0';
    rk->numa = -1;
    if (rk->gpu >= 0) {
      const struct dpt_node_gpu *g = &node->gpus[rk->gpu];
      snprintf(rk->gpu_busid, sizeof rk->gpu_busid, "%s", g->busid);
      rk->numa = g->numa;
      base[j] = g->cpuset;
    } else if (node->n_numa > 0 && node->numa) {
      const struct dpt_node_numa *nm = &node->numa[(int)((int64_t)j * node->n_numa / r)];
      rk->numa = nm->os_index;
      base[j] = nm->cpuset;
    } else {
      base[j] = node->cpuset;
    }
  }
  for (int j = 0; j < r && !rc; j++) {
    int k = 0, pos = 0;
    for (int i = 0; i < r; i++) {
      int same = (base[i] == base[j]) ||
                 (base[i] && base[j] && hwloc_bitmap_isequal(base[i], base[j]));
      if (same) {
        k++;
        if (i < j)
          pos++;
      }
    }
    rc = bind_slice(node, base[j], pos, k, opts, &plan->ranks[pn->first_rank + j], pn->host, err);
  }
  if (rc)
    goto fail;
  /* node-wide HCA list: nearest usable HCAs of every GPU in use */
  for (int j = 0; j < r; j++) {
    int g = gpu_of[j];
    uint64_t best = UINT64_MAX;
    for (int h = 0; h < node->n_hcas; h++) {
      if (!hca_usable(&node->hcas[h]))
        continue;
      uint64_t x = (g >= 0 && node->gpu_hca) ? path_weight(node->gpu_hca[g * node->n_hcas + h]) : 0;
      if (x < best)
        best = x;
    }
    for (int h = 0; h < node->n_hcas; h++) {
      if (!hca_usable(&node->hcas[h]))
        continue;
      uint64_t x = (g >= 0 && node->gpu_hca) ? path_weight(node->gpu_hca[g * node->n_hcas + h]) : 0;
      if (x == best)
        use_hca[h] = 1;
    }
  }
  {
    size_t len = 0;
    pn->hcas[0] = '\0';
    for (int h = 0; h < node->n_hcas; h++) {
      if (!use_hca[h])
        continue;
      int n = snprintf(pn->hcas + len, sizeof pn->hcas - len, "%s%s", len ? "," : "",
                       node->hcas[h].name);
      if (n < 0 || (size_t)n >= sizeof pn->hcas - len) {
        rc = dpt_err_set(err, DPT_E_INPUT, "host '%s': HCA list does not fit in %zu characters",
                         pn->host, sizeof pn->hcas);
        goto fail;
      }
      len += (size_t)n;
    }
  }
fail:
  free(base);
  free(use_hca);
  return rc;
}

/* ---------------------------------------------------------- cost model */

/* Route one ring edge a -> b (job host indexes).  mode 0: add `mult` flows to
 * every link direction on the way; mode 1: return min over them of gbps/flows. */
static double route(struct work *w, int a, int b, int mode, int mult)
{
  const struct dpt_tree *t = w->tree;
  double bw = INFINITY;
  int x = w->leaf[a], y = w->leaf[b];

#define LINK(cnt, gb)                                                  \
  do {                                                                 \
    if (mode == 0)                                                     \
      (cnt) += mult;                                                   \
    else if ((gb) / (cnt) < bw)                                        \
      bw = (gb) / (cnt);                                               \
  } while (0)
  LINK(w->up_h[a], w->bw_h[a]);
  LINK(w->down_h[b], w->bw_h[b]);
  while (w->depth[x] > w->depth[y]) {
    LINK(w->up_s[x], w->bw_s[x]);
    x = t->sw[x].parent;
  }
  while (w->depth[y] > w->depth[x]) {
    LINK(w->down_s[y], w->bw_s[y]);
    y = t->sw[y].parent;
  }
  while (x != y) {
    LINK(w->up_s[x], w->bw_s[x]);
    LINK(w->down_s[y], w->bw_s[y]);
    x = t->sw[x].parent;
    y = t->sw[y].parent;
  }
#undef LINK
  return bw;
}

static int add_link(struct dpt_plan_alt *alt, int cap, const char *from, const char *to, int flows,
                    double gbps)
{
  if (flows <= 0 || alt->n_links >= cap)
    return 0;
  struct dpt_plan_link *l = &alt->links[alt->n_links++];
  snprintf(l->from, sizeof l->from, "%s", from);
  snprintf(l->to, sizeof l->to, "%s", to);
  l->flows = flows;
  l->gbps = gbps;
  if (flows > alt->busiest_flows) {
    alt->busiest_flows = flows;
    snprintf(alt->busiest_link, sizeof alt->busiest_link, "%s -> %s", from, to);
  }
  return 0;
}

enum alt_kind { ALT_RING, ALT_HIER, ALT_2D };

static int eval_alt(struct work *w, struct dpt_plan *plan, struct dpt_plan_alt *alt,
                    enum alt_kind kind, const int *order, int g, struct dpt_err *err)
{
  const struct dpt_tree *t = w->tree;
  const struct dpt_plan_opts *o = &plan->opts;
  int n = w->n, mult = kind == ALT_2D ? g : 1;
  int cap = 2 * (n + w->ns);
  double S = (double)plan->size_bytes, a = o->alpha_us * 1e-6;
  double Bi = gbps_to_Bps(o->intra_gbps), Bn = INFINITY;
  double p = plan->n_ranks;
  int any_intra = 0;

  alt->node_order = malloc(sizeof *alt->node_order * (size_t)n);
  alt->links = malloc(sizeof *alt->links * (size_t)cap);
  if (!alt->node_order || !alt->links)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory evaluating '%s'", alt->name);
  memcpy(alt->node_order, order, sizeof *order * (size_t)n);
  memset(w->up_h, 0, sizeof *w->up_h * (size_t)n);
  memset(w->down_h, 0, sizeof *w->down_h * (size_t)n);
  memset(w->up_s, 0, sizeof *w->up_s * (size_t)w->ns);
  memset(w->down_s, 0, sizeof *w->down_s * (size_t)w->ns);
  alt->inter_group_hops = 0;
  if (n >= 2) {
    for (int i = 0; i < n; i++) {
      int x = order[i], y = order[(i + 1) % n];
      route(w, x, y, 0, mult);
      if (w->leaf[x] != w->leaf[y])
        alt->inter_group_hops += mult;
    }
    for (int i = 0; i < n; i++) {
      double bw = route(w, order[i], order[(i + 1) % n], 1, mult);
      if (bw < Bn)
        Bn = bw;
    }
    Bn = gbps_to_Bps(Bn);
  }
  /* links with flows: switch uplinks in walk order, then host links in planned order */
  alt->busiest_flows = 0;
  alt->busiest_link[0] = '\0';
  for (int k = 0; k < w->n_walk; k++) {
    int s = w->sw_walk[k];
    int par = t->sw[s].parent;
    if (par < 0)
      continue;
    add_link(alt, cap, t->sw[s].name, t->sw[par].name, w->up_s[s], w->bw_s[s]);
    add_link(alt, cap, t->sw[par].name, t->sw[s].name, w->down_s[s], w->bw_s[s]);
  }
  for (int k = 0; k < n; k++) {
    int h = w->order[k];
    add_link(alt, cap, w->hosts[h], t->sw[w->leaf[h]].name, w->up_h[h], w->bw_h[h]);
    add_link(alt, cap, t->sw[w->leaf[h]].name, w->hosts[h], w->down_h[h], w->bw_h[h]);
  }
  for (int i = 0; i < plan->n_nodes; i++)
    if (plan->nodes[i].n_ranks > 1)
      any_intra = 1;

  double tt = 0;
  if (kind == ALT_RING) {
    if (p > 1) {
      double B = INFINITY;
      if (n >= 2)
        B = Bn;
      if (any_intra && Bi < B)
        B = Bi;
      tt = 2.0 * (p - 1) * (a + (S / p) / B);
    }
  } else {
    double gg = g;
    if (g > 1)
      tt += (kind == ALT_HIER ? 4.0 : 2.0) * (gg - 1) * (a + S / (gg * Bi));
    if (n >= 2) {
      double chunk = kind == ALT_2D ? S / (gg * n) : S / n;
      tt += 2.0 * (n - 1) * (a + chunk / Bn);
    }
  }
  alt->predicted_s = tt;
  alt->bound_s = 0;
  if (p > 1) {
    double B = Bi;
    if (n >= 2) {
      B = INFINITY;
      for (int i = 0; i < n; i++)
        if (gbps_to_Bps(w->bw_h[i]) < B)
          B = gbps_to_Bps(w->bw_h[i]);
    }
    alt->bound_s = 2.0 * (p - 1) / p * S / B;
  }
  alt->busbw_gbs = tt > 0 ? (S / tt) * 2.0 * (p - 1) / p / 1e9 : 0;
  return 0;
}

/* ------------------------------------------------------------ digest */

/* Host name of job host index h (nodes[] is in ring order). */
static const char *plan_host(const struct dpt_plan *plan, int h)
{
  for (int i = 0; i < plan->n_nodes; i++)
    if (plan->nodes[i].host_index == h)
      return plan->nodes[i].host;
  return "?";
}

static int plan_digest(struct dpt_plan *plan, struct dpt_err *err)
{
  struct fnv f = {0xcbf29ce484222325ULL};
  int *node_of = malloc(sizeof *node_of * (size_t)plan->n_nodes);
  if (!node_of)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
  for (int i = 0; i < plan->n_nodes; i++)
    node_of[plan->nodes[i].host_index] = i;
  fnv_printf(&f, "dpt.plan/1 %" PRIu64 " %d %d %d", plan->size_bytes, plan->n_nodes, plan->n_ranks,
             plan->n_alts);
  for (int i = 0; i < plan->n_nodes; i++) {
    const struct dpt_plan_node *nd = &plan->nodes[i];
    fnv_printf(&f, "N %s %s %d %d %d %s", nd->host, nd->group, nd->first_rank, nd->n_ranks,
               nd->n_gpus, nd->hcas);
  }
  for (int i = 0; i < plan->n_ranks; i++) {
    const struct dpt_plan_rank *r = &plan->ranks[i];
    fnv_printf(&f, "R %d %d %d %d %s %s %d %d", r->rank, r->node, r->local_rank, r->gpu,
               r->gpu_busid, r->cpuset, r->numa, r->threads);
  }
  for (int i = 0; i < plan->n_alts; i++) {
    const struct dpt_plan_alt *a = &plan->alts[i];
    fnv_printf(&f, "A %s %d %d", a->name, a->inter_group_hops, a->busiest_flows);
    for (int k = 0; k < plan->n_nodes; k++) /* by host name: input indexes may differ */
      fnv_printf(&f, "o %s", plan->nodes[node_of[a->node_order[k]]].host);
    for (int k = 0; k < a->n_links; k++)
      fnv_printf(&f, "L %s %s %d", a->links[k].from, a->links[k].to, a->links[k].flows);
  }
  snprintf(plan->digest, sizeof plan->digest, "%016" PRIx64, f.h);
  free(node_of);
  return 0;
}

/* ---------------------------------------------------------------- API */

void dpt_plan_opts_init(struct dpt_plan_opts *opts)
{
  memset(opts, 0, sizeof *opts);
}

void dpt_plan_destroy(struct dpt_plan *plan)
{
  if (!plan)
    return;
  for (int i = 0; i < plan->n_alts; i++) {
    free(plan->alts[i].node_order);
    free(plan->alts[i].links);
  }
  free(plan->alts);
  free(plan->nodes);
  free(plan->ranks);
  free(plan);
}

int dpt_plan_compute(struct dpt_plan **out, const struct dpt_tree *tree,
                     const char *const *hosts, int n_hosts,
                     const struct dpt_node *const *topos,
                     const struct dpt_plan_opts *opts_in, struct dpt_err *err)
{
  struct work w;
  struct dpt_plan *plan = NULL;
  struct dpt_plan_opts o;
  int rc = 0, *gpu_of = NULL, *rnd = NULL, gmax = 1;

  memset(&w, 0, sizeof w);
  if (out)
    *out = NULL;
  if (!out || !tree || !hosts || !topos || n_hosts < 1) {
    return dpt_err_set(err, DPT_E_INPUT, "dpt_plan_compute: %s",
                       n_hosts < 1 ? "the job has no hosts" : "NULL argument");
  }
  if (opts_in)
    o = *opts_in;
  else
    dpt_plan_opts_init(&o);
  if (o.ranks_per_node < 0 || o.threads_per_rank < 0 || o.host_gbps < 0 || o.uplink_gbps < 0 ||
      o.intra_gbps < 0 || o.alpha_us < 0 || isnan(o.host_gbps) || isnan(o.uplink_gbps) ||
      isnan(o.intra_gbps) || isnan(o.alpha_us))
    return dpt_err_set(err, DPT_E_INPUT, "planner options: negative or NaN value (ranks per node "
                       "%d, threads %d, host %g, uplink %g, intra %g Gb/s, alpha %g us)",
                       o.ranks_per_node, o.threads_per_rank, o.host_gbps, o.uplink_gbps,
                       o.intra_gbps, o.alpha_us);
  if (o.size_bytes == 0)
    o.size_bytes = DPT_RESNET50_GRAD_BYTES;
  if (o.host_gbps == 0)
    o.host_gbps = PLAN_DEFAULT_HOST_GBPS;
  if (o.uplink_gbps == 0)
    o.uplink_gbps = o.host_gbps;
  if (o.intra_gbps == 0)
    o.intra_gbps = PLAN_DEFAULT_INTRA_GBPS;
  if (o.alpha_us == 0)
    o.alpha_us = PLAN_DEFAULT_ALPHA_US;

  w.tree = tree;
  w.n = n_hosts;
  w.hosts = hosts;
  w.ns = tree->n_switches;
  {
    size_t n = (size_t)n_hosts, ns = (size_t)(w.ns > 0 ? w.ns : 1);
    w.tidx = calloc(n, sizeof *w.tidx);
    w.leaf = calloc(n, sizeof *w.leaf);
    w.depth = calloc(ns, sizeof *w.depth);
    w.sub = calloc(ns, sizeof *w.sub);
    w.order = calloc(n, sizeof *w.order);
    w.sw_walk = calloc(ns, sizeof *w.sw_walk);
    w.ch_off = calloc(ns + 1, sizeof *w.ch_off);
    w.ch = calloc(ns, sizeof *w.ch);
    w.hh_off = calloc(ns + 1, sizeof *w.hh_off);
    w.hh = calloc(n, sizeof *w.hh);
    w.up_h = calloc(n, sizeof *w.up_h);
    w.down_h = calloc(n, sizeof *w.down_h);
    w.up_s = calloc(ns, sizeof *w.up_s);
    w.down_s = calloc(ns, sizeof *w.down_s);
    w.bw_h = calloc(n, sizeof *w.bw_h);
    w.bw_s = calloc(ns, sizeof *w.bw_s);
    w.cache = calloc(n, sizeof *w.cache);
    plan = calloc(1, sizeof *plan);
    rnd = calloc(n, sizeof *rnd);
    if (!w.tidx || !w.leaf || !w.depth || !w.sub || !w.order || !w.sw_walk || !w.ch_off || !w.ch ||
        !w.hh_off || !w.hh || !w.up_h || !w.down_h || !w.up_s || !w.down_s || !w.bw_h || !w.bw_s ||
        !w.cache || !plan || !rnd) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory for %d hosts", n_hosts);
      goto fail;
    }
  }
  if ((rc = check_tree(&w, err)) || (rc = map_hosts(&w, err)))
    goto fail;
  for (int i = 0; i < n_hosts; i++) {
    double gb = tree->hosts[w.tidx[i]].link_gbps;
    w.bw_h[i] = gb > 0 ? gb : o.host_gbps;
    if (!topos[i]) {
      rc = dpt_err_set(err, DPT_E_INPUT, "host '%s' has no node topology", hosts[i]);
      goto fail;
    }
  }
  for (int s = 0; s < w.ns; s++)
    w.bw_s[s] = tree->sw[s].link_gbps > 0 ? tree->sw[s].link_gbps : o.uplink_gbps;
  if ((rc = plan_node_order(&w, err)))
    goto fail;

  plan->opts = o;
  snprintf(plan->tree_source, sizeof plan->tree_source, "%s", tree->source);
  plan->size_bytes = o.fp16 ? o.size_bytes / 2 : o.size_bytes;
  plan->n_nodes = n_hosts;
  plan->nodes = calloc((size_t)n_hosts, sizeof *plan->nodes);
  if (!plan->nodes) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
    goto fail;
  }
  for (int i = 0; i < n_hosts; i++)
    if (i == 0 || w.leaf[w.order[i]] != w.leaf[w.order[i - 1]])
      plan->n_groups++; /* leaves are contiguous in the walk */

  /* nodes and rank counts */
  {
    int64_t total = 0;
    for (int k = 0; k < n_hosts; k++) {
      int h = w.order[k];
      const struct dpt_node *nd = topos[h];
      struct dpt_plan_node *pn = &plan->nodes[k];
      int r = o.ranks_per_node > 0 ? o.ranks_per_node : (nd->n_gpus > 0 ? nd->n_gpus : 1);
      if (nd->n_gpus < 0 || (nd->n_gpus > 0 && !nd->gpus)) {
        rc = dpt_err_set(err, DPT_E_INPUT, "host '%s': invalid node topology (%d GPUs)", hosts[h],
                         nd->n_gpus);
        goto fail;
      }
      if (nd->n_gpus > 0 && r > nd->n_gpus && !o.allow_oversubscribe) {
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "host '%s': %d ranks per node but its topology (%s) has %d GPU%s; use "
                         "at most %d ranks per node or allow oversubscription (dpt-topo plan "
                         "--oversubscribe)", hosts[h], r, nd->source[0] ? nd->source : "?",
                         nd->n_gpus, nd->n_gpus == 1 ? "" : "s", nd->n_gpus);
        goto fail;
      }
      snprintf(pn->host, sizeof pn->host, "%s", hosts[h]);
      pn->host_index = h;
      snprintf(pn->group, sizeof pn->group, "%s", tree->sw[w.leaf[h]].name);
      pn->first_rank = (int)total;
      pn->n_ranks = r;
      pn->n_gpus = nd->n_gpus;
      if (r > gmax)
        gmax = r;
      total += r;
      if (total > (1 << 24)) {
        rc = dpt_err_set(err, DPT_E_INPUT, "the job would have more than %d ranks", 1 << 24);
        goto fail;
      }
    }
    plan->n_ranks = (int)total;
  }
  plan->ranks = calloc((size_t)plan->n_ranks, sizeof *plan->ranks);
  gpu_of = calloc((size_t)gmax, sizeof *gpu_of);
  if (!plan->ranks || !gpu_of) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory for %d ranks", plan->n_ranks);
    goto fail;
  }

  /* GPU order and binding, node by node (identical topologies reuse results) */
  for (int k = 0; k < n_hosts; k++) {
    struct dpt_plan_node *pn = &plan->nodes[k];
    const struct dpt_node *nd = topos[pn->host_index];
    int r = pn->n_ranks, prev = -1;
    for (int q = 0; q < k; q++)
      if (topos[plan->nodes[q].host_index] == nd && plan->nodes[q].n_ranks == r) {
        prev = q;
        break;
      }
    if (prev >= 0) {
      const struct dpt_plan_node *pp = &plan->nodes[prev];
      memcpy(pn->hcas, pp->hcas, sizeof pn->hcas);
      for (int j = 0; j < r; j++) {
        struct dpt_plan_rank *rk = &plan->ranks[pn->first_rank + j];
        *rk = plan->ranks[pp->first_rank + j];
        rk->rank = pn->first_rank + j;
        rk->node = k;
      }
      continue;
    }
    if (nd->n_gpus == 0) {
      for (int j = 0; j < r; j++)
        gpu_of[j] = -1;
    } else {
      const int *seq = NULL;
      int used = r < nd->n_gpus ? r : nd->n_gpus;
      if ((rc = node_gpu_order(&w, nd, used, n_hosts == 1, &seq, err)))
        goto fail;
      for (int j = 0; j < r; j++)
        gpu_of[j] = r <= nd->n_gpus ? seq[j] : seq[(int)((int64_t)j * nd->n_gpus / r)];
    }
    if ((rc = bind_node(&w, plan, k, nd, gpu_of, &o, err)))
      goto fail;
  }

  /* link speeds the model uses */
  for (int i = 0; i < n_hosts; i++) {
    if (i == 0 || w.bw_h[i] < plan->host_gbps_min)
      plan->host_gbps_min = w.bw_h[i];
    if (w.bw_h[i] > plan->host_gbps_max)
      plan->host_gbps_max = w.bw_h[i];
  }
  for (int k = 0; k < w.n_walk; k++) {
    int s = w.sw_walk[k];
    if (w.sub[s] == n_hosts) /* at or above the lowest common switch: no ring flow */
      continue;
    if (plan->uplink_gbps_min == 0 || w.bw_s[s] < plan->uplink_gbps_min)
      plan->uplink_gbps_min = w.bw_s[s];
    if (w.bw_s[s] > plan->uplink_gbps_max)
      plan->uplink_gbps_max = w.bw_s[s];
  }

  /* alternatives */
  plan->n_alts = 5;
  plan->alts = calloc(5, sizeof *plan->alts);
  if (!plan->alts) {
    plan->n_alts = 0;
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
    goto fail;
  }
  snprintf(plan->alts[0].name, sizeof plan->alts[0].name, "planned");
  snprintf(plan->alts[1].name, sizeof plan->alts[1].name, "slurm-order");
  snprintf(plan->alts[2].name, sizeof plan->alts[2].name, "random");
  snprintf(plan->alts[3].name, sizeof plan->alts[3].name, "hierarchical");
  snprintf(plan->alts[4].name, sizeof plan->alts[4].name, "2d");
  if ((rc = eval_alt(&w, plan, &plan->alts[0], ALT_RING, w.order, gmax, err)))
    goto fail;
  for (int i = 0; i < n_hosts; i++)
    rnd[i] = i;
  if ((rc = eval_alt(&w, plan, &plan->alts[1], ALT_RING, rnd, gmax, err)))
    goto fail;
  {
    uint64_t st = o.seed;
    for (int i = n_hosts - 1; i > 0; i--) {
      int j = (int)(splitmix64(&st) % (uint64_t)(i + 1));
      int tmp = rnd[i];
      rnd[i] = rnd[j];
      rnd[j] = tmp;
    }
  }
  if ((rc = eval_alt(&w, plan, &plan->alts[2], ALT_RING, rnd, gmax, err)) ||
      (rc = eval_alt(&w, plan, &plan->alts[3], ALT_HIER, w.order, gmax, err)) ||
      (rc = eval_alt(&w, plan, &plan->alts[4], ALT_2D, w.order, gmax, err)))
    goto fail;
  if ((rc = plan_digest(plan, err)))
    goto fail;
  *out = plan;
  plan = NULL;
fail:
  dpt_plan_destroy(plan);
  free(gpu_of);
  free(rnd);
  work_free(&w);
  return rc;
}

/* ------------------------------------------------------------- output */

json_t *dpt_plan_to_json(const struct dpt_plan *plan)
{
  json_t *root = json_object(), *nodes = json_array(), *ranks = json_array(), *alts = json_array();
  const struct dpt_plan_opts *o = &plan->opts;

  if (!root || !nodes || !ranks || !alts)
    goto fail;
  json_object_set_new(root, "schema", json_string("dpt.plan/1"));
  json_object_set_new(root, "digest", json_string(plan->digest));
  json_object_set_new(root, "tree_source", json_string(plan->tree_source));
  json_object_set_new(root, "size_bytes", json_integer((json_int_t)plan->size_bytes));
  json_object_set_new(root, "fp16", json_boolean(o->fp16));
  json_object_set_new(root, "n_nodes", json_integer(plan->n_nodes));
  json_object_set_new(root, "n_ranks", json_integer(plan->n_ranks));
  json_object_set_new(root, "n_groups", json_integer(plan->n_groups));
  json_object_set_new(root, "link_gbps",
                      json_pack("{s:f, s:f, s:f, s:f}", "host_min", plan->host_gbps_min, "host_max",
                                plan->host_gbps_max, "uplink_min", plan->uplink_gbps_min,
                                "uplink_max", plan->uplink_gbps_max));
  json_object_set_new(root, "model",
                      json_pack("{s:f, s:f, s:f, s:f, s:I, s:i, s:b, s:i}", "alpha_us", o->alpha_us,
                                "host_gbps", o->host_gbps, "uplink_gbps", o->uplink_gbps,
                                "intra_gbps", o->intra_gbps, "seed", (json_int_t)o->seed,
                                "ranks_per_node", o->ranks_per_node, "oversubscribe",
                                o->allow_oversubscribe, "threads_per_rank", o->threads_per_rank));
  for (int i = 0; i < plan->n_nodes; i++) {
    const struct dpt_plan_node *n = &plan->nodes[i];
    json_array_append_new(nodes, json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "host", n->host,
                                           "group", n->group, "first_rank", n->first_rank,
                                           "n_ranks", n->n_ranks, "n_gpus", n->n_gpus, "hcas",
                                           n->hcas));
  }
  for (int i = 0; i < plan->n_ranks; i++) {
    const struct dpt_plan_rank *r = &plan->ranks[i];
    json_array_append_new(ranks, json_pack("{s:i, s:s, s:i, s:i, s:i, s:s, s:s, s:i, s:i}",
                                           "rank", r->rank, "host", plan->nodes[r->node].host,
                                           "node", r->node, "local_rank", r->local_rank, "gpu",
                                           r->gpu, "gpu_busid", r->gpu_busid, "cpuset", r->cpuset,
                                           "numa", r->numa, "threads", r->threads));
  }
  for (int i = 0; i < plan->n_alts; i++) {
    const struct dpt_plan_alt *a = &plan->alts[i];
    json_t *order = json_array(), *links = json_array();
    for (int k = 0; k < plan->n_nodes; k++)
      json_array_append_new(order, json_string(plan_host(plan, a->node_order[k])));
    for (int k = 0; k < a->n_links; k++)
      json_array_append_new(links, json_pack("{s:s, s:s, s:i, s:f}", "from", a->links[k].from,
                                             "to", a->links[k].to, "flows", a->links[k].flows,
                                             "gbps", a->links[k].gbps));
    json_array_append_new(alts, json_pack("{s:s, s:o, s:i, s:i, s:s, s:f, s:f, s:f, s:o}", "name",
                                          a->name, "node_order", order, "inter_group_hops",
                                          a->inter_group_hops, "busiest_flows", a->busiest_flows,
                                          "busiest_link", a->busiest_link, "predicted_s",
                                          a->predicted_s, "bound_s", a->bound_s, "busbw_gbs",
                                          a->busbw_gbs, "links", links));
  }
  json_object_set_new(root, "nodes", nodes);
  json_object_set_new(root, "ranks", ranks);
  json_object_set_new(root, "alternatives", alts);
  return root;
fail:
  json_decref(root);
  json_decref(nodes);
  json_decref(ranks);
  json_decref(alts);
  return NULL;
}

static const struct dpt_plan_alt *find_alt(const struct dpt_plan *plan, const char *name)
{
  for (int i = 0; i < plan->n_alts; i++)
    if (!strcmp(plan->alts[i].name, name))
      return &plan->alts[i];
  return NULL;
}

void dpt_plan_print(FILE *f, const struct dpt_plan *plan)
{
  const struct dpt_plan_opts *o = &plan->opts;
  const struct dpt_plan_alt *pl = find_alt(plan, "planned"), *rnd = find_alt(plan, "random"),
                            *sl = find_alt(plan, "slurm-order");

  fprintf(f, "dpt plan %s (dpt.plan/1)\n", plan->digest);
  fprintf(f, "%d rank%s on %d node%s in %d group%s (tree: %s); all-reduce of %" PRIu64
             " bytes (%s)\n", plan->n_ranks, plan->n_ranks == 1 ? "" : "s", plan->n_nodes,
          plan->n_nodes == 1 ? "" : "s", plan->n_groups, plan->n_groups == 1 ? "" : "s",
          plan->tree_source, plan->size_bytes, o->fp16 ? "fp16" : "fp32");
  {
    char hl[64], ul[64];
    if (plan->host_gbps_min == plan->host_gbps_max)
      snprintf(hl, sizeof hl, "%g", plan->host_gbps_min);
    else
      snprintf(hl, sizeof hl, "%g-%g", plan->host_gbps_min, plan->host_gbps_max);
    if (plan->uplink_gbps_min == plan->uplink_gbps_max)
      snprintf(ul, sizeof ul, "%g", plan->uplink_gbps_min);
    else
      snprintf(ul, sizeof ul, "%g-%g", plan->uplink_gbps_min, plan->uplink_gbps_max);
    fprintf(f, "model: host links %s Gb/s, switch uplinks %s Gb/s, intra-node %g Gb/s, %g us per "
               "step (defaults where the tree gives no speed: host %g, uplink %g)\n\n",
            hl, plan->uplink_gbps_max > 0 ? ul : "-", o->intra_gbps, o->alpha_us, o->host_gbps,
            o->uplink_gbps);
  }

  int hw = 4, gw = 5, lw = 12;
  for (int i = 0; i < plan->n_nodes; i++) {
    int a = (int)strlen(plan->nodes[i].host), b = (int)strlen(plan->nodes[i].group);
    hw = a > hw ? a : hw;
    gw = b > gw ? b : gw;
  }
  for (int i = 0; i < plan->n_alts; i++) {
    int a = (int)strlen(plan->alts[i].busiest_link);
    lw = a > lw ? a : lw;
  }
  fprintf(f, "ring: nodes in ring order, each one contiguous block of ranks\n");
  fprintf(f, "  %5s  %-*s  %-*s  %-11s %4s  %s\n", "node", hw, "host", gw, "group", "ranks", "gpus",
          "NCCL_IB_HCA");
  for (int i = 0; i < plan->n_nodes; i++) {
    const struct dpt_plan_node *n = &plan->nodes[i];
    char rr[32];
    if (n->n_ranks == 1)
      snprintf(rr, sizeof rr, "%d", n->first_rank);
    else
      snprintf(rr, sizeof rr, "%d-%d", n->first_rank, n->first_rank + n->n_ranks - 1);
    fprintf(f, "  %5d  %-*s  %-*s  %-11s %4d  %s\n", i, hw, n->host, gw, n->group, rr, n->n_gpus,
            n->hcas[0] ? n->hcas : "-");
  }

  fprintf(f, "\nranks\n");
  fprintf(f, "  %6s  %-*s  %5s %4s  %-14s %4s %7s  %s\n", "rank", hw, "host", "local", "gpu", "busid",
          "numa", "threads", "cpuset");
  for (int i = 0; i < plan->n_ranks; i++) {
    const struct dpt_plan_rank *r = &plan->ranks[i];
    char gpu[16], numa[16];
    snprintf(gpu, sizeof gpu, r->gpu >= 0 ? "%d" : "-", r->gpu);
    snprintf(numa, sizeof numa, r->numa >= 0 ? "%d" : "-", r->numa);
    fprintf(f, "  %6d  %-*s  %5d %4s  %-14s %4s %7d  %s\n", r->rank, hw, plan->nodes[r->node].host,
            r->local_rank, gpu, r->gpu_busid[0] ? r->gpu_busid : "-", numa, r->threads,
            r->cpuset[0] ? r->cpuset : "-");
  }

  fprintf(f, "\nalternatives: all-reduce of %" PRIu64 " bytes over %d ranks\n", plan->size_bytes,
          plan->n_ranks);
  fprintf(f, "  %-13s %5s  %-*s  %5s  %11s %11s %6s %10s\n", "order", "hops", lw, "busiest link",
          "flows", "predicted", "bound", "ratio", "busbw");
  for (int i = 0; i < plan->n_alts; i++) {
    const struct dpt_plan_alt *a = &plan->alts[i];
    char ratio[16];
    if (a->bound_s > 0)
      snprintf(ratio, sizeof ratio, "%.2f", a->predicted_s / a->bound_s);
    else
      snprintf(ratio, sizeof ratio, "-");
    fprintf(f, "  %-13s %5d  %-*s  %5d  %8.3f ms %8.3f ms %6s %5.2f GB/s\n", a->name,
            a->inter_group_hops, lw, a->busiest_link[0] ? a->busiest_link : "-", a->busiest_flows,
            a->predicted_s * 1e3, a->bound_s * 1e3, ratio, a->busbw_gbs);
  }
  fprintf(f, "  (hops: ring edges between leaf switches, 2d summed over its rings; flows: ring "
             "flows on the busiest link direction)\n\n");
  if (plan->n_groups <= 1) {
    fprintf(f, "all nodes hang off one switch: no inter-group link to cross.\n");
  } else if (pl && rnd && sl) {
    fprintf(f, "random order crosses inter-group links %d times vs %d for the planned ring "
               "(Slurm's order: %d);\nbusiest link: %d flow%s planned, %d random, %d Slurm's order; "
               "predicted all-reduce %.3f ms planned, %.3f ms random, %.3f ms Slurm's order.\n",
            rnd->inter_group_hops, pl->inter_group_hops, sl->inter_group_hops, pl->busiest_flows,
            pl->busiest_flows == 1 ? "" : "s", rnd->busiest_flows, sl->busiest_flows,
            pl->predicted_s * 1e3, rnd->predicted_s * 1e3, sl->predicted_s * 1e3);
  }
}
