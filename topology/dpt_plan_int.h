/* dpt_plan_int.h — private to the planner: dpt_plan.c (the node order, the
 * plan's assembly, the digest), dpt_plan_bind.c (GPU order and binding inside
 * a node), dpt_plan_cost.c (the cost model) and dpt_plan_view.c (JSON, text).
 * The planner's working state and the calls between those files.  Not
 * installed, not for other modules. */
#ifndef DPT_PLAN_INT_H
#define DPT_PLAN_INT_H

#include <stdint.h>

#include "dpt_plan.h"

/* One node content's GPU sequence, kept for the nodes that share it. */
struct dpt_plan_gpu_cache {
  const struct dpt_node *node; /* first node with this content */
  int r;                       /* ranks on it */
  int closed;
  int n;                       /* GPUs */
  uint64_t *w;                 /* [n * n] edge weights */
  uint64_t *e;                 /* [n] endpoint weights */
  int *order;                  /* [min(r, n)] GPU sequence */
};

struct dpt_plan_work {
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
  struct dpt_plan_gpu_cache *cache; /* [n] at most */
};

/* The GPU sequence for a node with r ranks (r <= n_gpus; the caller maps
 * oversubscribed ranks), closed when the ring closes inside the node (a
 * one-node job).  *order_out points into wk's cache (freed with the work).
 * 0, or DPT_E_NOMEM with err set. */
int dpt_plan_gpu_order(struct dpt_plan_work *wk, const struct dpt_node *node, int r, int closed,
                       const int **order_out, struct dpt_err *err);

/* Fill the ranks of plan->nodes[ni] (first_rank, n_ranks set; rank j on GPU
 * gpu_of[j], -1: none) and the node's HCA list.  0, or an error with err set. */
int dpt_plan_bind_node(struct dpt_plan *plan, int ni, const struct dpt_node *node,
                       const int *gpu_of, const struct dpt_plan_opts *opts, struct dpt_err *err);

enum dpt_plan_alt_kind { DPT_PLAN_RING, DPT_PLAN_HIER, DPT_PLAN_2D };

/* Evaluate one alternative (its node order: job host indexes, its kind, g
 * ranks on the largest node) into alt: order, link flows, inter-group hops,
 * predicted time, bound, bus bandwidth.  Uses w's flow counters as scratch.
 * 0, or DPT_E_NOMEM with err set (alt's arrays are freed with the plan). */
int dpt_plan_eval_alt(struct dpt_plan_work *w, struct dpt_plan *plan, struct dpt_plan_alt *alt,
                      enum dpt_plan_alt_kind kind, const int *order, int g, struct dpt_err *err);

#endif /* DPT_PLAN_INT_H */
