/* dpt_spank_local.c — see dpt_spank_local.h (the pure part, no Slurm calls). */
#include "dpt_spank_local.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_node.h"
#include "dpt_spank_plan.h"

int dpt_spank_uniform_tasks(const char *s, int *out, struct dpt_err *err)
{
  char *end;
  long n, m = 1;
  if (!s || !*s)
    return dpt_err_set(err, DPT_E_INPUT, "tasks per node unknown (SLURM_TASKS_PER_NODE unset)");
  errno = 0;
  n = strtol(s, &end, 10);
  if (end != s && !errno && *end == '(' && end[1] == 'x') {
    char *e2;
    m = strtol(end + 2, &e2, 10);
    if (errno || e2 == end + 2 || *e2 != ')' || e2[1] || m < 1)
      goto bad;
    end = e2 + 1;
  }
  if (end == s || errno || *end || n < 1 || n > 4096)
    goto bad;
  *out = (int)n;
  return 0;
bad:
  return dpt_err_set(err, DPT_E_INPUT,
                     "the step's tasks per node are '%.64s': --dpt needs the same number of tasks on "
                     "every node (use --ntasks-per-node)", s);
}

int dpt_spank_local_compute(const struct dpt_spank_opts *opts, const struct dpt_tree *tree,
                            const char *const *hosts, int n_hosts, int tasks_per_node,
                            struct dpt_plan **plan, char **encoded, struct dpt_err *err)
{
  struct dpt_node *node = NULL;
  struct dpt_tree *flat = NULL;
  const struct dpt_node **topos = NULL; /* [n_hosts], all the same node */
  struct dpt_plan_opts po;
  int rc;

  *plan = NULL;
  *encoded = NULL;
  if (n_hosts < 1)
    return dpt_err_set(err, DPT_E_INPUT, "the step has no nodes");
  if ((rc = dpt_node_load(&node, opts->topology[0] ? opts->topology : NULL, err)) < 0) {
    dpt_err_prefix(err, "node topology (%s)", opts->topology[0] ? "--dpt topology=" : "srun's machine");
    goto fail;
  }
  if (!tree) {
    if ((rc = dpt_tree_flat(&flat, hosts, n_hosts, err)) < 0)
      goto fail;
    tree = flat;
  }
  if (!(topos = calloc((size_t)n_hosts, sizeof *topos))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < n_hosts; i++)
    topos[i] = node;

  dpt_plan_opts_init(&po);
  po.ranks_per_node = tasks_per_node;
  po.threads_per_rank = opts->threads;
  po.fp16 = opts->fp16;
  if (opts->ranks_per_gpu > 0) {
    if (tasks_per_node > opts->ranks_per_gpu * (node->n_gpus > 0 ? node->n_gpus : 1)) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "%d tasks per node but the node has %d GPUs and ranks-per-gpu=%d allows %d",
                       tasks_per_node, node->n_gpus, opts->ranks_per_gpu,
                       opts->ranks_per_gpu * (node->n_gpus > 0 ? node->n_gpus : 1));
      goto fail;
    }
    po.allow_oversubscribe = 1;
  }
  if ((rc = dpt_plan_compute(plan, tree, hosts, n_hosts, topos, &po, err)) < 0) {
    dpt_err_prefix(err, "planner");
    goto fail;
  }
  if ((rc = dpt_spank_plan_encode(*plan, hosts, n_hosts, encoded, err)) < 0) {
    dpt_plan_destroy(*plan);
    *plan = NULL;
    goto fail;
  }
  rc = 0;
fail:
  free(topos);
  dpt_tree_destroy(flat);
  dpt_node_destroy(node);
  return rc;
}
