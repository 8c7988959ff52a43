/* dpt_plan.c — the topology-aware ring planner and its cost model.
 *
 * dpt_plan_compute() is a pure, deterministic function of its inputs (switch
 * tree, the job's hosts in Slurm's order, one node topology per host, options):
 * no clock, no environment, no global state.  Every caller gets the same plan
 * and the same digest.
 *
 * This file holds the node order (1), the plan's assembly step by step and
 * its digest (5); dpt_plan_bind.c the GPU order and binding inside a node (2,
 * 3); dpt_plan_cost.c the cost model (4); dpt_plan_view.c the JSON and text
 * views; dpt_plan_int.h the working state they share.
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
#include "dpt_plan_int.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------- working state */

static void work_free(struct dpt_plan_work *w)
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

/* w's arrays for the job's hosts on tree, zeroed.  0, or DPT_E_NOMEM. */
static int work_alloc(struct dpt_plan_work *w, const struct dpt_tree *tree,
                      const char *const *hosts, int n_hosts, struct dpt_err *err)
{
  size_t n = (size_t)n_hosts, ns = (size_t)(tree->n_switches > 0 ? tree->n_switches : 1);

  w->tree = tree;
  w->n = n_hosts;
  w->hosts = hosts;
  w->ns = tree->n_switches;
  w->tidx = calloc(n, sizeof *w->tidx);
  w->leaf = calloc(n, sizeof *w->leaf);
  w->depth = calloc(ns, sizeof *w->depth);
  w->sub = calloc(ns, sizeof *w->sub);
  w->order = calloc(n, sizeof *w->order);
  w->sw_walk = calloc(ns, sizeof *w->sw_walk);
  w->ch_off = calloc(ns + 1, sizeof *w->ch_off);
  w->ch = calloc(ns, sizeof *w->ch);
  w->hh_off = calloc(ns + 1, sizeof *w->hh_off);
  w->hh = calloc(n, sizeof *w->hh);
  w->up_h = calloc(n, sizeof *w->up_h);
  w->down_h = calloc(n, sizeof *w->down_h);
  w->up_s = calloc(ns, sizeof *w->up_s);
  w->down_s = calloc(ns, sizeof *w->down_s);
  w->bw_h = calloc(n, sizeof *w->bw_h);
  w->bw_s = calloc(ns, sizeof *w->bw_s);
  w->cache = calloc(n, sizeof *w->cache);
  if (!w->tidx || !w->leaf || !w->depth || !w->sub || !w->order || !w->sw_walk || !w->ch_off ||
      !w->ch || !w->hh_off || !w->hh || !w->up_h || !w->down_h || !w->up_s || !w->down_s ||
      !w->bw_h || !w->bw_s || !w->cache)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory for %d hosts", n_hosts);
  return 0;
}

/* ------------------------------------------------------ tree and hosts */

static int check_tree(struct dpt_plan_work *w, struct dpt_err *err)
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
static int map_hosts(struct dpt_plan_work *w, struct dpt_err *err)
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

static void walk(struct dpt_plan_work *w, int s)
{
  w->sw_walk[w->n_walk++] = s;
  for (int k = w->hh_off[s]; k < w->hh_off[s + 1]; k++)
    w->order[w->n_order++] = w->hh[k];
  for (int k = w->ch_off[s]; k < w->ch_off[s + 1]; k++)
    if (w->sub[w->ch[k]] > 0)
      walk(w, w->ch[k]);
}

static int plan_node_order(struct dpt_plan_work *w, struct dpt_err *err)
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

/* ------------------------------------------------------------ digest */

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

/* ------------------------------------------------- the plan, step by step */

/* *o: opts_in (NULL: every default) checked, its zeros made defaults. */
static int resolve_opts(struct dpt_plan_opts *o, const struct dpt_plan_opts *opts_in,
                        struct dpt_err *err)
{
  if (opts_in)
    *o = *opts_in;
  else
    dpt_plan_opts_init(o);
  if (o->ranks_per_node < 0 || o->threads_per_rank < 0 || o->host_gbps < 0 || o->uplink_gbps < 0 ||
      o->intra_gbps < 0 || o->alpha_us < 0 || isnan(o->host_gbps) || isnan(o->uplink_gbps) ||
      isnan(o->intra_gbps) || isnan(o->alpha_us))
    return dpt_err_set(err, DPT_E_INPUT, "planner options: negative or NaN value (ranks per node "
                       "%d, threads %d, host %g, uplink %g, intra %g Gb/s, alpha %g us)",
                       o->ranks_per_node, o->threads_per_rank, o->host_gbps, o->uplink_gbps,
                       o->intra_gbps, o->alpha_us);
  if (o->size_bytes == 0)
    o->size_bytes = DPT_RESNET50_GRAD_BYTES;
  if (o->host_gbps == 0)
    o->host_gbps = PLAN_DEFAULT_HOST_GBPS;
  if (o->uplink_gbps == 0)
    o->uplink_gbps = o->host_gbps;
  if (o->intra_gbps == 0)
    o->intra_gbps = PLAN_DEFAULT_INTRA_GBPS;
  if (o->alpha_us == 0)
    o->alpha_us = PLAN_DEFAULT_ALPHA_US;
  return 0;
}

/* Each job host's link speed (the tree's, else o->host_gbps) and each switch's
 * uplink (the tree's, else o->uplink_gbps); a host without a topology refused. */
static int work_links(struct dpt_plan_work *w, const struct dpt_node *const *topos,
                      const struct dpt_plan_opts *o, struct dpt_err *err)
{
  const struct dpt_tree *tree = w->tree;

  for (int i = 0; i < w->n; i++) {
    double gb = tree->hosts[w->tidx[i]].link_gbps;
    w->bw_h[i] = gb > 0 ? gb : o->host_gbps;
    if (!topos[i])
      return dpt_err_set(err, DPT_E_INPUT, "host '%s' has no node topology", w->hosts[i]);
  }
  for (int s = 0; s < w->ns; s++)
    w->bw_s[s] = tree->sw[s].link_gbps > 0 ? tree->sw[s].link_gbps : o->uplink_gbps;
  return 0;
}

/* plan->nodes in ring order with their ranks (a contiguous block each),
 * n_groups and n_ranks; *gmax: the most ranks on one node. */
static int plan_nodes(struct dpt_plan *plan, const struct dpt_plan_work *w,
                      const struct dpt_node *const *topos, int *gmax, struct dpt_err *err)
{
  const struct dpt_plan_opts *o = &plan->opts;
  int64_t total = 0;

  plan->n_nodes = w->n;
  plan->nodes = calloc((size_t)w->n, sizeof *plan->nodes);
  if (!plan->nodes)
    return dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
  for (int i = 0; i < w->n; i++)
    if (i == 0 || w->leaf[w->order[i]] != w->leaf[w->order[i - 1]])
      plan->n_groups++; /* leaves are contiguous in the walk */
  for (int k = 0; k < w->n; k++) {
    int h = w->order[k];
    const struct dpt_node *nd = topos[h];
    struct dpt_plan_node *pn = &plan->nodes[k];
    int r = o->ranks_per_node > 0 ? o->ranks_per_node : (nd->n_gpus > 0 ? nd->n_gpus : 1);
    if (nd->n_gpus < 0 || (nd->n_gpus > 0 && !nd->gpus))
      return dpt_err_set(err, DPT_E_INPUT, "host '%s': invalid node topology (%d GPUs)",
                         w->hosts[h], nd->n_gpus);
    if (nd->n_gpus > 0 && r > nd->n_gpus && !o->allow_oversubscribe)
      return dpt_err_set(err, DPT_E_INPUT,
                         "host '%s': %d ranks per node but its topology (%s) has %d GPU%s; use "
                         "at most %d ranks per node or allow oversubscription (dpt-topo plan "
                         "--oversubscribe)", w->hosts[h], r, nd->source[0] ? nd->source : "?",
                         nd->n_gpus, nd->n_gpus == 1 ? "" : "s", nd->n_gpus);
    snprintf(pn->host, sizeof pn->host, "%s", w->hosts[h]);
    pn->host_index = h;
    snprintf(pn->group, sizeof pn->group, "%s", w->tree->sw[w->leaf[h]].name);
    pn->first_rank = (int)total;
    pn->n_ranks = r;
    pn->n_gpus = nd->n_gpus;
    if (r > *gmax)
      *gmax = r;
    total += r;
    if (total > (1 << 24))
      return dpt_err_set(err, DPT_E_INPUT, "the job would have more than %d ranks", 1 << 24);
  }
  plan->n_ranks = (int)total;
  return 0;
}

/* Node k's ranks copied from node prev (same topology object, same rank
 * count): the same GPUs, cpusets and HCAs, renumbered. */
static void copy_node_ranks(struct dpt_plan *plan, int k, int prev)
{
  struct dpt_plan_node *pn = &plan->nodes[k];
  const struct dpt_plan_node *pp = &plan->nodes[prev];

  memcpy(pn->hcas, pp->hcas, sizeof pn->hcas);
  for (int j = 0; j < pn->n_ranks; j++) {
    struct dpt_plan_rank *rk = &plan->ranks[pn->first_rank + j];
    *rk = plan->ranks[pp->first_rank + j];
    rk->rank = pn->first_rank + j;
    rk->node = k;
  }
}

/* plan->ranks: every node's GPU order and binding, node by node (identical
 * topologies reuse results). */
static int plan_ranks(struct dpt_plan *plan, struct dpt_plan_work *w,
                      const struct dpt_node *const *topos, int gmax, struct dpt_err *err)
{
  int rc = 0, *gpu_of = NULL;

  plan->ranks = calloc((size_t)plan->n_ranks, sizeof *plan->ranks);
  gpu_of = calloc((size_t)gmax, sizeof *gpu_of);
  if (!plan->ranks || !gpu_of) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory for %d ranks", plan->n_ranks);
    goto fail;
  }
  for (int k = 0; k < plan->n_nodes && !rc; k++) {
    const struct dpt_node *nd = topos[plan->nodes[k].host_index];
    int r = plan->nodes[k].n_ranks, prev = -1;
    for (int q = 0; q < k && prev < 0; q++)
      if (topos[plan->nodes[q].host_index] == nd && plan->nodes[q].n_ranks == r)
        prev = q;
    if (prev >= 0) {
      copy_node_ranks(plan, k, prev);
      continue;
    }
    if (nd->n_gpus == 0) {
      for (int j = 0; j < r; j++)
        gpu_of[j] = -1;
    } else {
      const int *seq = NULL;
      int used = r < nd->n_gpus ? r : nd->n_gpus;
      if ((rc = dpt_plan_gpu_order(w, nd, used, plan->n_nodes == 1, &seq, err)))
        goto fail;
      for (int j = 0; j < r; j++)
        gpu_of[j] = r <= nd->n_gpus ? seq[j] : seq[(int)((int64_t)j * nd->n_gpus / r)];
    }
    rc = dpt_plan_bind_node(plan, k, nd, gpu_of, &plan->opts, err);
  }
fail:
  free(gpu_of);
  return rc;
}

/* The link speeds the model uses: host links, and the uplinks below the
 * lowest switch common to all job hosts (the ones rings cross). */
static void plan_link_range(struct dpt_plan *plan, const struct dpt_plan_work *w)
{
  for (int i = 0; i < w->n; i++) {
    if (i == 0 || w->bw_h[i] < plan->host_gbps_min)
      plan->host_gbps_min = w->bw_h[i];
    if (w->bw_h[i] > plan->host_gbps_max)
      plan->host_gbps_max = w->bw_h[i];
  }
  for (int k = 0; k < w->n_walk; k++) {
    int s = w->sw_walk[k];
    if (w->sub[s] == w->n) /* at or above the lowest common switch: no ring flow */
      continue;
    if (plan->uplink_gbps_min == 0 || w->bw_s[s] < plan->uplink_gbps_min)
      plan->uplink_gbps_min = w->bw_s[s];
    if (w->bw_s[s] > plan->uplink_gbps_max)
      plan->uplink_gbps_max = w->bw_s[s];
  }
}

/* The five alternatives: the planned ring, Slurm's order, a random order
 * (Fisher-Yates driven by splitmix64(seed)), hierarchical and 2d. */
static int plan_alternatives(struct dpt_plan *plan, struct dpt_plan_work *w, int gmax,
                             struct dpt_err *err)
{
  static const char *const names[] = {"planned", "slurm-order", "random", "hierarchical", "2d"};
  int n = w->n, rc = 0, *rnd = calloc((size_t)n, sizeof *rnd);
  uint64_t st = plan->opts.seed;
  const int n_alts = (int)(sizeof names / sizeof names[0]);

  plan->alts = calloc((size_t)n_alts, sizeof *plan->alts);
  if (!rnd || !plan->alts) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory");
    goto fail;
  }
  plan->n_alts = n_alts;
  for (int i = 0; i < n_alts; i++)
    snprintf(plan->alts[i].name, sizeof plan->alts[i].name, "%s", names[i]);
  if ((rc = dpt_plan_eval_alt(w, plan, &plan->alts[0], DPT_PLAN_RING, w->order, gmax, err)))
    goto fail;
  for (int i = 0; i < n; i++)
    rnd[i] = i;
  if ((rc = dpt_plan_eval_alt(w, plan, &plan->alts[1], DPT_PLAN_RING, rnd, gmax, err)))
    goto fail;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(splitmix64(&st) % (uint64_t)(i + 1));
    int tmp = rnd[i];
    rnd[i] = rnd[j];
    rnd[j] = tmp;
  }
  if (!(rc = dpt_plan_eval_alt(w, plan, &plan->alts[2], DPT_PLAN_RING, rnd, gmax, err)) &&
      !(rc = dpt_plan_eval_alt(w, plan, &plan->alts[3], DPT_PLAN_HIER, w->order, gmax, err)))
    rc = dpt_plan_eval_alt(w, plan, &plan->alts[4], DPT_PLAN_2D, w->order, gmax, err);
fail:
  free(rnd);
  return rc;
}

int dpt_plan_compute(struct dpt_plan **out, const struct dpt_tree *tree,
                     const char *const *hosts, int n_hosts,
                     const struct dpt_node *const *topos,
                     const struct dpt_plan_opts *opts_in, struct dpt_err *err)
{
  struct dpt_plan_work w;
  struct dpt_plan *plan = NULL;
  struct dpt_plan_opts o;
  int rc = 0, gmax = 1;

  memset(&w, 0, sizeof w);
  if (out)
    *out = NULL;
  if (!out || !tree || !hosts || !topos || n_hosts < 1)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_plan_compute: %s",
                       n_hosts < 1 ? "the job has no hosts" : "NULL argument");
  if ((rc = resolve_opts(&o, opts_in, err)))
    return rc;
  if ((rc = work_alloc(&w, tree, hosts, n_hosts, err)))
    goto fail;
  if (!(plan = calloc(1, sizeof *plan))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "planner: out of memory for %d hosts", n_hosts);
    goto fail;
  }
  plan->opts = o;
  snprintf(plan->tree_source, sizeof plan->tree_source, "%s", tree->source);
  plan->size_bytes = o.fp16 ? o.size_bytes / 2 : o.size_bytes;
  if ((rc = check_tree(&w, err)) || (rc = map_hosts(&w, err)) ||
      (rc = work_links(&w, topos, &o, err)) || (rc = plan_node_order(&w, err)) ||
      (rc = plan_nodes(plan, &w, topos, &gmax, err)) ||
      (rc = plan_ranks(plan, &w, topos, gmax, err)))
    goto fail;
  plan_link_range(plan, &w);
  if ((rc = plan_alternatives(plan, &w, gmax, err)) || (rc = plan_digest(plan, err)))
    goto fail;
  *out = plan;
  plan = NULL;
fail:
  dpt_plan_destroy(plan);
  work_free(&w);
  return rc;
}
