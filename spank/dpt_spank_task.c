/* dpt_spank_task.c — see dpt_spank_task.h */
#define _GNU_SOURCE
#include "dpt_spank_task.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "dpt_bind.h"
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

/* The plan's cpuset within the CPUs Slurm gave this task (its current
 * affinity: task/affinity or cgroup cpuset): out = the intersection in hwloc
 * list syntax, or "" when they do not meet.  slurm (list syntax) receives
 * Slurm's set for messages. */
static int within_slurm(const char *plan_cpuset, char *out, size_t outlen, char *slurm, size_t slen,
                        struct dpt_err *err)
{
  hwloc_bitmap_t want = hwloc_bitmap_alloc(), have = hwloc_bitmap_alloc();
  cpu_set_t *mask = NULL;
  size_t sz = 0;
  int rc = 0, max;

  out[0] = slurm[0] = '\0';
  if (!want || !have) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto done;
  }
  if (hwloc_bitmap_list_sscanf(want, plan_cpuset) < 0 || hwloc_bitmap_iszero(want) ||
      hwloc_bitmap_last(want) > 65535) {
    rc = dpt_err_set(err, DPT_E_INPUT, "the plan's cpuset '%.64s' is not a CPU list", plan_cpuset);
    goto done;
  }
  /* the current affinity, with a mask grown until the kernel accepts its size */
  for (max = 1024;; max *= 2) {
    sz = CPU_ALLOC_SIZE(max);
    if (!(mask = CPU_ALLOC(max))) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto done;
    }
    CPU_ZERO_S(sz, mask);
    if (sched_getaffinity(0, sz, mask) == 0)
      break;
    CPU_FREE(mask);
    mask = NULL;
    if (max >= (1 << 20)) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "sched_getaffinity failed");
      goto done;
    }
  }
  for (int c = 0; c < max; c++)
    if (CPU_ISSET_S(c, sz, mask))
      hwloc_bitmap_set(have, (unsigned)c);
  hwloc_bitmap_list_snprintf(slurm, slen, have);
  hwloc_bitmap_and(want, want, have);
  if (!hwloc_bitmap_iszero(want))
    hwloc_bitmap_list_snprintf(out, outlen, want);
done:
  if (mask)
    CPU_FREE(mask);
  hwloc_bitmap_free(want);
  hwloc_bitmap_free(have);
  return rc;
}

/* dpt_bind_env() reads and writes the task's environment through these. */
struct task_env {
  spank_t sp;
  char buf[ENV_SMALL];
};

static const char *task_getenv(void *arg, const char *name)
{
  struct task_env *te = arg;
  /* dpt_bind_env looks for the plan's GPU (a node GPU index) in CUDA_VISIBLE_DEVICES
   * to find its position there.  Slurm lists the node's GPU indices in that order
   * in SLURM_STEP_GPUS, while CUDA_VISIBLE_DEVICES itself may be renumbered from 0
   * (ConstrainDevices): answer with SLURM_STEP_GPUS when Slurm set both. */
  if (strcmp(name, "CUDA_VISIBLE_DEVICES") == 0) {
    if (spank_getenv(te->sp, "CUDA_VISIBLE_DEVICES", te->buf, sizeof te->buf) != ESPANK_SUCCESS)
      return NULL;
    if (spank_getenv(te->sp, "SLURM_STEP_GPUS", te->buf, sizeof te->buf) == ESPANK_SUCCESS && te->buf[0])
      return te->buf;
    spank_getenv(te->sp, "CUDA_VISIBLE_DEVICES", te->buf, sizeof te->buf);
    return te->buf;
  }
  return spank_getenv(te->sp, name, te->buf, sizeof te->buf) == ESPANK_SUCCESS ? te->buf : NULL;
}

static int task_setenv(void *arg, const char *name, const char *value)
{
  struct task_env *te = arg;
  spank_err_t e = value ? spank_setenv(te->sp, name, value, 1) : spank_unsetenv(te->sp, name);
  return e == ESPANK_SUCCESS ? 0 : DPT_E_RUNTIME;
}

int dpt_spank_task_apply(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_err *err)
{
  uint32_t node_id = 0, local_count = 0;
  int local_id = -1, rc = 0, found;
  char *plan_s = NULL;
  char host[256], cpus[1024], slurm_cpus[1024], report[256];
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
  if ((rc = dpt_bind_env(plan, t.rank.rank, task_getenv, &te, task_setenv, &te, err)) < 0)
    goto done;
  if ((rc = set_env(sp, "DPT_LAUNCHER", "spank", err)) < 0 || (rc = set_env(sp, "DPT_COMM", opts->comm, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_FP16", opts->fp16, err)) < 0 ||
      (opts->report[0] && (rc = set_env(sp, "DPT_REPORT", opts->report, err)) < 0))
    goto done;

  /* CPUs: the plan's cpuset within Slurm's, applied by dpt_bind; memory follows by
   * first touch on those CPUs (dpt_bind_apply_cpu's membind would insist on the
   * plan's NUMA node even where Slurm's cpuset lies elsewhere) */
  cpus[0] = '\0';
  if (opts->bind != DPT_SPANK_BIND_NONE && t.rank.cpuset[0]) {
    if ((rc = within_slurm(t.rank.cpuset, cpus, sizeof cpus, slurm_cpus, sizeof slurm_cpus, err)) < 0)
      goto done;
    if (cpus[0]) {
      if ((rc = dpt_bind_apply_cpu(cpus, -1, report, sizeof report, err)) < 0)
        goto done;
    } else if (opts->bind == DPT_SPANK_BIND_STRICT) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "rank %d on %s: the plan's CPUs %s are outside the CPUs Slurm gave this task (%s) "
                       "and bind=strict (allocate whole nodes, or --dpt=bind=auto)",
                       t.rank.rank, t.node.host, t.rank.cpuset, slurm_cpus);
      goto done;
    } else {
      snprintf(cpus, sizeof cpus, "%s", slurm_cpus);
      if (opts->verbose)
        slurm_info("dpt: rank %d on %s: the plan's CPUs %s are outside Slurm's %s: kept Slurm's binding",
                   t.rank.rank, t.node.host, t.rank.cpuset, slurm_cpus);
    }
  }
  if ((rc = set_env(sp, "DPT_CPUS_BOUND", cpus, err)) < 0)
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
