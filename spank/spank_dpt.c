/* spank_dpt.c — `srun --dpt` / `#SBATCH --dpt`: dpt's plan and binding inside Slurm.
 *
 * One dispatch per SPANK context:
 *   every context      slurm_spank_init: site defaults from plugstack.conf
 *                      arguments, register --dpt (sbatch/salloc ignore static
 *                      option tables, so spank_option_register()).
 *   allocator (sbatch/salloc)  the option callback validates the value; Slurm
 *                      hands it to the job as SLURM_SPANK__SLURM_SPANK_OPTION_dpt_dpt
 *                      so inner sruns inherit it.
 *   local (srun, user) slurm_spank_local_user_init: the step's nodes and tasks,
 *                      the switch tree, the node topology -> dpt_job_plan()
 *                      once -> DPT_SPANK_PLAN in the step's environment.
 *   remote (slurmstepd) the option callback re-validates (this runs as root: the
 *                      parser checks lengths and bytes first); slurm_spank_task_init
 *                      (in the task, as the user, after Slurm's CPU binding and
 *                      CUDA_VISIBLE_DEVICES) decodes this task's entry, binds it
 *                      inside what Slurm gave, sets the environment, and forks
 *                      the task supervisor (dpt_spank_super.h: the job report).
 *   local again        slurm_spank_exit: after the step, srun writes the job report
 *                      (dpt_spank_report.h).
 * Inert without --dpt; batch, extern and interactive steps are skipped.  Every
 * message starts with "dpt:".  No callback keeps state that a second call
 * would double: each starts again from the defaults or recomputes. */
#define DPT_SPANK_WITH_SLURM 1 /* dpt_spank_local.h: declare the srun-side entry point */
#include <stdint.h> /* spank.h needs the fixed-width types first */

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt_err.h"
#include "dpt_spank_opts.h"
#include "dpt_spank_plan.h"
#include "dpt_spank_local.h"
#include "dpt_spank_report.h"
#include "dpt_spank_super.h"
#include "dpt_spank_task.h"

SPANK_PLUGIN(dpt, 1);

static struct dpt_spank_opts g_defaults; /* built-ins + plugstack.conf arguments */
static struct dpt_spank_opts g_opts;     /* what this job/step asked for */
static struct dpt_plan *g_plan;          /* srun: the step's plan, for the job report */
static char g_report[4096];              /* srun: the report's path ("" none) */
static double g_start;                   /* srun: when the step was planned */

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option dpt_option = {
    "dpt", "[k=v,...]",
    "Topology-aware ring ranks and GPU/CPU/HCA binding for data-parallel training (dpt). "
    "Keys: comm=auto|mpi|ring|hierarchical|nccl, fp16[=0|1], ranks-per-gpu=K, threads=N, "
    "report=PATH, topology=NODE.xml, tree=slurm|flat|topology.conf, bind=auto|strict|none, "
    "verbose[=0-3]",
    2, 0, opt_cb};

static int opt_cb(int val, const char *optarg, int remote)
{
  struct dpt_err err;
  dpt_err_clear(&err);
  if (dpt_spank_opts_from_option(&g_opts, &g_defaults, optarg, &err) < 0) {
    slurm_error("dpt: %s", err.msg);
    return -1;
  }
  return 0;
}

static const char *ctx_name(spank_context_t c)
{
  switch (c) {
  case S_CTX_LOCAL: return "srun";
  case S_CTX_REMOTE: return "slurmstepd";
  case S_CTX_ALLOCATOR: return "sbatch/salloc";
  case S_CTX_SLURMD: return "slurmd";
  case S_CTX_JOB_SCRIPT: return "prolog/epilog";
  default: return "?";
  }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
  spank_context_t ctx = spank_context();
  struct dpt_err err;
  char what[64];

  if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
    return 0;
  dpt_err_clear(&err);
  dpt_spank_opts_init(&g_defaults);
  for (int i = 0; i < ac; i++) {
    snprintf(what, sizeof what, "plugstack.conf argument %d", i + 1);
    if (dpt_spank_opts_apply(&g_defaults, av[i], what, &err) < 0) {
      slurm_error("dpt: %s (in %s)", err.msg, ctx_name(ctx));
      return -1;
    }
  }
  g_opts = g_defaults; /* not enabled until --dpt is seen */
  if (spank_option_register(sp, &dpt_option) != ESPANK_SUCCESS) {
    slurm_error("dpt: cannot register the --dpt option (in %s)", ctx_name(ctx));
    return -1;
  }
  return 0;
}

/* srun, as the user, once the allocation exists and before the tasks start. */
int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
  struct dpt_err err;
  if (spank_context() != S_CTX_LOCAL || !g_opts.enabled)
    return 0;
  dpt_err_clear(&err);
  dpt_plan_destroy(g_plan);
  g_plan = NULL;
  if (dpt_spank_local_plan(sp, &g_opts, &g_plan, &err) < 0 ||
      dpt_spank_report_setup(sp, &g_opts, g_report, sizeof g_report, &err) < 0) {
    slurm_error("dpt: %s", err.msg);
    return -1;
  }
  {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g_start = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
  }
  return 0;
}

static int step_is_skipped(spank_t sp)
{
  uint32_t step = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
    return 1;
  return step == SLURM_BATCH_SCRIPT || step == SLURM_EXTERN_CONT || step == SLURM_INTERACTIVE_STEP;
}

/* In the task (forked from slurmstepd), as the user, just before exec. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
  struct dpt_err err;
  if (spank_context() != S_CTX_REMOTE || !g_opts.enabled || step_is_skipped(sp))
    return 0;
  dpt_err_clear(&err);
  if (dpt_spank_task_apply(sp, &g_opts, &err) < 0 ||
      (strcmp(g_opts.report, "none") && dpt_spank_supervise(sp, &err) < 0)) {
    slurm_error("dpt: %s", err.msg);
    if (strcmp(g_opts.report, "none")) /* report=none: no part (nor an enclosing step's) */
      dpt_spank_supervise_failed(sp, &err); /* the job report says why this rank did not start */
    return -1;
  }
  return 0;
}

/* srun: the step has ended -- the job report (dpt_spank_report.h). */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
  if (spank_context() == S_CTX_LOCAL && g_opts.enabled && g_plan) {
    dpt_spank_report_finish(sp, g_plan, g_report, g_start);
    dpt_plan_destroy(g_plan);
    g_plan = NULL;
  }
  return 0;
}
