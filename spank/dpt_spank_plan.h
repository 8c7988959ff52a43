/* dpt_spank_plan.h — carrying a step's plan from srun to its tasks.
 *
 * srun (local context) computes the plan once with dpt_plan_compute() and puts
 * this compact, ASCII-only form in the step's environment as DPT_SPANK_PLAN;
 * each task (remote context, task_init) decodes only its own entry.  The
 * environment, not a file: srun's host and the compute nodes need not share a
 * file system, and the environment already travels with the step launch.
 * Size is O(nodes + distinct node profiles): nodes with the same per-rank
 * binding (the usual case: identical servers) share one profile, so MN-1's
 * 128 x 8 ranks is ~2 KB.
 *
 *   dpt1;DIGEST;WORLD;NODES;PROFILES
 *   NODES    = NODE ("," NODE)*      in the step's node order (SLURM_NODEID)
 *   NODE     = host "/" first_ring_rank "/" profile_index
 *   PROFILES = PROFILE ("|" PROFILE)*
 *   PROFILE  = hcas ("/" RANK)+      hcas: node-wide NCCL_IB_HCA list, may be empty
 *   RANK     = gpu "+" busid "+" numa "+" threads "+" cpuset   (local ranks in ring order)
 *
 * The decoder runs in slurmstepd's task as the user, on a variable the user can
 * overwrite: every field is checked (characters, ranges, the ranks of all nodes
 * form a permutation of 0..WORLD-1) before anything is used. */
#ifndef DPT_SPANK_PLAN_H
#define DPT_SPANK_PLAN_H

#include "dpt_err.h"
#include "dpt_plan.h"

#define DPT_SPANK_PLAN_ENV "DPT_SPANK_PLAN"
#define DPT_SPANK_PLAN_MAX (1 << 20) /* longest accepted encoding (bytes) */

/* What one task needs from the plan. */
struct dpt_spank_task {
  char digest[17];            /* the plan's digest */
  int world;                  /* ranks in the plan */
  int n_nodes;                /* nodes in the plan */
  int node_ring;              /* index of this node in ring order (0..n_nodes-1) */
  struct dpt_plan_node node;  /* this node: host, first_rank, n_ranks, hcas */
  struct dpt_plan_rank rank;  /* this task: ring rank, local rank, GPU, cpuset, numa, threads */
};

/* Encode plan for a step whose nodes are hosts[0..n_hosts) in Slurm's order
 * (hosts[i] is SLURM_NODEID i).  *out is malloc'd. */
int dpt_spank_plan_encode(const struct dpt_plan *plan, const char *const *hosts, int n_hosts,
                          char **out, struct dpt_err *err);

/* Decode and check the whole encoding (every profile, ranks of all nodes a
 * permutation of 0..WORLD-1), then the entry of Slurm node node_id, local task
 * local_id, on a node that runs local_count tasks; host (SLURMD_NODENAME) must
 * be the node's name in the plan (NULL: not checked).  plan_out (may be NULL)
 * receives the plan itself -- nodes in ring order, every rank's binding, no
 * alternatives -- for dpt_bind_env(); destroy it with dpt_plan_destroy(). */
int dpt_spank_plan_decode(const char *s, int node_id, const char *host, int local_id,
                          int local_count, struct dpt_spank_task *out, struct dpt_plan **plan_out,
                          struct dpt_err *err);

#endif /* DPT_SPANK_PLAN_H */
