/* dpt_plan_bind.c — inside one node: the GPU order of its ranks and their
 * binding (cpuset slice, threads, NUMA node, the node-wide NCCL_IB_HCA list).
 * Parts 2 and 3 of the algorithm described at the top of dpt_plan.c; the
 * planner (dpt_plan_compute) calls dpt_plan_gpu_order and dpt_plan_bind_node
 * once per distinct node. */
#include "dpt_plan_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_EXACT_MAX_GPUS 8

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
int dpt_plan_gpu_order(struct dpt_plan_work *wk, const struct dpt_node *node, int r, int closed,
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
    struct dpt_plan_gpu_cache *c = &wk->cache[i];
    if (c->n == n && c->r == r && c->closed == closed &&
        !memcmp(c->w, w, sizeof *w * (size_t)n * (size_t)n) && !memcmp(c->e, e, sizeof *e * (size_t)n)) {
      memcpy(order, c->order, sizeof *order * (size_t)r);
      goto store;
    }
  }
  gpu_sequence(n, r, closed, w, e, order);
store:
  {
    struct dpt_plan_gpu_cache *c = &wk->cache[wk->n_cache++];
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

int dpt_plan_bind_node(struct dpt_plan *plan, int ni, const struct dpt_node *node,
                       const int *gpu_of, const struct dpt_plan_opts *opts, struct dpt_err *err)
{
  struct dpt_plan_node *pn = &plan->nodes[ni];
  int r = pn->n_ranks, rc = 0;
  hwloc_const_bitmap_t *base = calloc((size_t)r, sizeof *base);
  char *use_hca = calloc((size_t)(node->n_hcas ? node->n_hcas : 1), 1);

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
