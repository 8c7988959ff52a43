/* dpt_spank_local.c — see dpt_spank_local.h (the pure part, no Slurm calls). */
#include "dpt_spank_local.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_job.h"
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
                            struct dpt_plan **plan, char **encoded, char *note, size_t note_len,
                            struct dpt_err *err)
{
  struct dpt_job job;
  int rc;

  *plan = NULL;
  *encoded = NULL;
  if (n_hosts < 1)
    return dpt_err_set(err, DPT_E_INPUT, "the step has no nodes");
  /* the step as a job (dpt_job.h): the plan every other caller would make of it */
  dpt_job_init(&job);
  job.hosts = hosts;
  job.n_hosts = n_hosts;
  job.tree_source = tree ? DPT_JOB_TREE_GIVEN : DPT_JOB_TREE_FLAT;
  job.tree = tree;
  job.node_source = opts->topology[0] ? DPT_JOB_NODE_XML : DPT_JOB_NODE_LOCAL;
  job.node_path = opts->topology;
  job.node_what = opts->topology[0] ? "node topology (--dpt topology=)" : "node topology (srun's machine)";
  job.ranks_per_node = tasks_per_node;
  job.ranks_per_gpu = opts->ranks_per_gpu; /* ranks-per-gpu=K: oversubscription asked for */
  job.threads_per_rank = opts->threads;
  job.model.fp16 = opts->fp16;
  if ((rc = dpt_job_plan(plan, &job, note, note_len, err)) < 0)
    return rc;
  if ((rc = dpt_spank_plan_encode(*plan, hosts, n_hosts, encoded, err)) < 0) {
    dpt_plan_destroy(*plan);
    *plan = NULL;
  }
  return rc;
}
