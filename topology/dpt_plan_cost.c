/* dpt_plan_cost.c — the cost model: the link flows of one ring (or of the
 * hierarchical / 2d all-reduce) over the switch tree, its predicted time, the
 * bound and bus bandwidth.  Part 4 of the description at the top of
 * dpt_plan.c, where the formulas are. */
#include "dpt_plan_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double gbps_to_Bps(double gbps)
{
  return gbps * 1e9 / 8.0;
}

/* Route one ring edge a -> b (job host indexes).  mode 0: add `mult` flows to
 * every link direction on the way; mode 1: return min over them of gbps/flows. */
static double route(struct dpt_plan_work *w, int a, int b, int mode, int mult)
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

int dpt_plan_eval_alt(struct dpt_plan_work *w, struct dpt_plan *plan, struct dpt_plan_alt *alt,
                      enum dpt_plan_alt_kind kind, const int *order, int g, struct dpt_err *err)
{
  const struct dpt_tree *t = w->tree;
  const struct dpt_plan_opts *o = &plan->opts;
  int n = w->n, mult = kind == DPT_PLAN_2D ? g : 1;
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
  if (kind == DPT_PLAN_RING) {
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
      tt += (kind == DPT_PLAN_HIER ? 4.0 : 2.0) * (gg - 1) * (a + S / (gg * Bi));
    if (n >= 2) {
      double chunk = kind == DPT_PLAN_2D ? S / (gg * n) : S / n;
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
