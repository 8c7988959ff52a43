/* dpt_spank_task.c — see dpt_spank_task.h */
#include "dpt_spank_task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_bind.h"
#include "dpt_rdzv.h"
#include "dpt_spank_plan.h"

#define ENV_SMALL 4096

/* spank_getenv into a buffer; 1 found, 0 unset, <0 error (too long...). */
static int get_env(spank_t sp, const char *name, char *buf, int len, struct dpt_err *err)
{
  spank_err_t e = spank_getenv(sp, name, buf, len);
  if (e == ESPANK_SUCCESS)
    return 1;
  buf[0] = '\0';
  if (e == ESPANK_ENV_NOEXIST)
    return 0;
  return dpt_err_set(err, DPT_E_INPUT, "cannot read %s from the task's environment (%s%s)", name,
                     spank_strerror(e), e == ESPANK_NOSPACE ? ": value too long" : "");
}

static int set_env(spank_t sp, const char *name, const char *val, struct dpt_err *err)
{
  spank_err_t e = spank_setenv(sp, name, val, 1);
  if (e != ESPANK_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot set %s in the task's environment (%s)", name,
                       spank_strerror(e));
  return 0;
}

static int set_env_int(spank_t sp, const char *name, long v, struct dpt_err *err)
{
  char b[32];
  snprintf(b, sizeof b, "%ld", v);
  return set_env(sp, name, b, err);
}

/* dpt_bind_env() reads and writes the task's environment through these. */
struct task_env {
  spank_t sp;
  char buf[ENV_SMALL];
};

static const char *task_getenv(void *arg, const char *name)
{
  struct task_env *te = arg;
  return spank_getenv(te->sp, name, te->buf, sizeof te->buf) == ESPANK_SUCCESS ? te->buf : NULL;
}

static int task_setenv(void *arg, const char *name, const char *value)
{
  struct task_env *te = arg;
  spank_err_t e = value ? spank_setenv(te->sp, name, value, 1) : spank_unsetenv(te->sp, name);
  return e == ESPANK_SUCCESS ? 0 : DPT_E_RUNTIME;
}

/* Plan rank 0 hosts the frameworks' rendezvous store on MASTER_PORT: a port
 * already taken on its node fails their start ("address already in use").
 * Said here, naming the node and the way out; not an error, since a program
 * that does not use MASTER_PORT (dpt-train) runs fine. */
static void port_warn(struct task_env *te, const char *host)
{
  const char *v = task_getenv(te, "MASTER_PORT");
  struct dpt_err perr;
  int port = v ? atoi(v) : 0;
  dpt_err_clear(&perr);
  if (port > 0 && dpt_rdzv_port_check(port, &perr) < 0)
    slurm_error("dpt: rank 0 on %s: MASTER_PORT %d cannot be listened on there (%s): a PyTorch, "
                "Lightning or JAX rendezvous hosted by rank 0 will fail to start; export "
                "MASTER_PORT=<a free port> before srun", host, port, perr.msg);
}

int dpt_spank_task_apply(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_err *err)
{
  uint32_t node_id = 0, local_count = 0;
  int local_id = -1, rc = 0, found;
  char *plan_s = NULL;
  char host[256], cpus[1024], report[512], notes[512];
  struct dpt_spank_task t;
  struct dpt_plan *plan = NULL;
  struct task_env te;

  if (spank_get_item(sp, S_JOB_NODEID, &node_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_TASK_ID, &local_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_count) != ESPANK_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "slurmstepd did not say the node id, task id or task count");
  if ((rc = get_env(sp, "SLURMD_NODENAME", host, sizeof host, err)) < 0)
    return rc;
  if (!(plan_s = malloc(DPT_SPANK_PLAN_MAX + 2)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  if ((found = get_env(sp, DPT_SPANK_PLAN_ENV, plan_s, DPT_SPANK_PLAN_MAX + 2, err)) <= 0) {
    rc = found < 0 ? found
                   : dpt_err_set(err, DPT_E_INPUT,
                                 "--dpt is set for this step but srun computed no plan (%s is not in the "
                                 "environment): with srun --export=NONE or a variable list, add %s to "
                                 "--export; otherwise srun does not load spank_dpt.so (plugstack.conf on "
                                 "the submit host)", DPT_SPANK_PLAN_ENV, DPT_SPANK_PLAN_ENV);
    goto done;
  }
  if ((rc = dpt_spank_plan_decode(plan_s, (int)node_id, host[0] ? host : NULL, local_id, (int)local_count,
                                  &t, &plan, err)) < 0)
    goto done;

  /* the environment every dpt launcher sets (runtime/dpt_bind), into the task's env */
  te.sp = sp;
  if ((rc = dpt_bind_env_report(plan, t.rank.rank, task_getenv, &te, task_setenv, &te, notes,
                                sizeof notes, err)) < 0)
    goto done;
  if (notes[0])
    slurm_info("dpt: rank %d on %s: %s", t.rank.rank, t.node.host, notes);
  if (t.rank.rank == 0)
    port_warn(&te, t.node.host);
  /* the planning inputs dpt_boot needs to recompute and verify this plan */
  if (opts->topology[0] && (rc = set_env(sp, "DPT_PLAN_XML", opts->topology, err)) < 0)
    goto done;
  if ((rc = set_env(sp, "DPT_LAUNCHER", "spank", err)) < 0 || (rc = set_env(sp, "DPT_COMM", opts->comm, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_FP16", opts->fp16, err)) < 0 ||
      (opts->ranks_per_gpu > 0 && (rc = set_env(sp, "DPT_OVERSUBSCRIBE", "1", err)) < 0) ||
      (opts->report[0] && strcmp(opts->report, "none") &&
       (rc = set_env(sp, "DPT_REPORT", opts->report, err)) < 0))
    goto done;

  /* CPUs: the plan's cpuset within what Slurm gave (dpt_bind's within mode: never
   * wider; bind=auto keeps Slurm's binding when the two do not meet, bind=strict
   * fails); memory is bound only where the result lies in the plan's NUMA node */
  cpus[0] = '\0';
  if (opts->bind != DPT_SPANK_BIND_NONE && t.rank.cpuset[0]) {
    unsigned flags = DPT_BIND_WITHIN | (opts->bind == DPT_SPANK_BIND_STRICT ? 0u : DPT_BIND_KEEP_IF_EMPTY);
    if ((rc = dpt_bind_apply_cpu_ex(t.rank.cpuset, t.rank.numa, flags, cpus, sizeof cpus, report,
                                    sizeof report, err)) < 0) {
      dpt_err_prefix(err, "rank %d on %s (bind=%s)", t.rank.rank, t.node.host,
                     opts->bind == DPT_SPANK_BIND_STRICT ? "strict" : "auto");
      goto done;
    }
    if (opts->verbose)
      slurm_info("dpt: rank %d on %s: %s", t.rank.rank, t.node.host, report);
  }
  if ((rc = set_env(sp, "DPT_CPUS_BOUND", cpus, err)) < 0 ||
      (cpus[0] && (rc = set_env(sp, "DPT_BIND_APPLIED", report, err)) < 0)) /* for the job report */
    goto done;
  spank_unsetenv(sp, DPT_SPANK_PLAN_ENV); /* the task needs only its own entry, now in DPT_* */
  if (opts->verbose >= 3) {
    char line[512];
    dpt_bind_describe(plan, t.rank.rank, line, sizeof line);
    slurm_info("dpt: %s; bound to %s", line, cpus[0] ? cpus : "(Slurm's)");
  }
  rc = 0;
done:
  dpt_plan_destroy(plan);
  free(plan_s);
  return rc;
}
