/* dpt_spank_task.c — see dpt_spank_task.h */
#define _GNU_SOURCE
#include "dpt_spank_task.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

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

/* Position of integer g in a comma-separated list of integers, -1 if absent
 * or the list is malformed. */
static int list_find(const char *list, int g)
{
  int pos = 0;
  const char *p = list;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ','))
      return -1;
    if (v == g)
      return pos;
    pos++;
    p = *end ? end + 1 : end;
  }
  return -1;
}

/* The n-th element of a comma-separated list into out. */
static int list_nth(const char *list, int n, char *out, size_t len)
{
  const char *p = list;
  for (int i = 0; i < n; i++) {
    p = strchr(p, ',');
    if (!p)
      return -1;
    p++;
  }
  size_t k = strcspn(p, ",");
  if (k == 0 || k >= len)
    return -1;
  memcpy(out, p, k);
  out[k] = '\0';
  return 0;
}

/* Restrict this process's CPU affinity to plan ∩ current.  *applied: 1 bound
 * to the intersection, 0 the intersection is empty (Slurm's set kept).  The
 * resulting set (list syntax) goes to out. */
static int bind_cpus(const char *plan_cpuset, int *applied, char *out, size_t outlen,
                     struct dpt_err *err)
{
  hwloc_bitmap_t want = hwloc_bitmap_alloc(), have = hwloc_bitmap_alloc();
  cpu_set_t *mask = NULL;
  size_t sz;
  int rc = 0, max, n = 0;

  *applied = 0;
  out[0] = '\0';
  if (!want || !have) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto done;
  }
  if (hwloc_bitmap_list_sscanf(want, plan_cpuset) < 0 || hwloc_bitmap_iszero(want) ||
      hwloc_bitmap_last(want) > 65535) {
    rc = dpt_err_set(err, DPT_E_INPUT, "the plan's cpuset '%.64s' is not a CPU list", plan_cpuset);
    goto done;
  }
  max = hwloc_bitmap_last(want) + 1;
  if (max < 1024)
    max = 1024;
  /* what Slurm gave: the current affinity, grown until the kernel accepts the size */
  for (;;) {
    sz = CPU_ALLOC_SIZE(max);
    mask = CPU_ALLOC(max);
    if (!mask) {
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
    max *= 2;
  }
  for (int c = 0; c < max; c++)
    if (CPU_ISSET_S(c, sz, mask))
      hwloc_bitmap_set(have, (unsigned)c);
  hwloc_bitmap_and(want, want, have);
  if (!hwloc_bitmap_iszero(want)) {
    int c;
    CPU_ZERO_S(sz, mask);
    hwloc_bitmap_foreach_begin(c, want) {
      if (c < max) {
        CPU_SET_S(c, sz, mask);
        n++;
      }
    }
    hwloc_bitmap_foreach_end();
    if (n > 0 && sched_setaffinity(0, sz, mask) != 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "sched_setaffinity to %s failed", plan_cpuset);
      goto done;
    }
    *applied = n > 0;
  }
  hwloc_bitmap_list_snprintf(out, outlen, *applied ? want : have);
done:
  if (mask)
    CPU_FREE(mask);
  hwloc_bitmap_free(want);
  hwloc_bitmap_free(have);
  return rc;
}

int dpt_spank_task_apply(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_err *err)
{
  uint32_t node_id = 0, local_count = 0;
  int local_id = -1, rc = 0, applied = 0, found;
  char *plan_s = NULL;
  char host[256], cvd[ENV_SMALL], step_gpus[ENV_SMALL], hca_user[ENV_SMALL], cpus[1024], one[64];
  struct dpt_spank_task t;

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
                                  &t, err)) < 0)
    goto done;

  /* CPUs: the plan's cpuset within Slurm's */
  cpus[0] = '\0';
  if (opts->bind != DPT_SPANK_BIND_NONE && t.rank.cpuset[0]) {
    if ((rc = bind_cpus(t.rank.cpuset, &applied, cpus, sizeof cpus, err)) < 0)
      goto done;
    if (!applied) {
      if (opts->bind == DPT_SPANK_BIND_STRICT) {
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "rank %d on %s: the plan's CPUs %s are outside the CPUs Slurm gave this task (%s) "
                         "and bind=strict (allocate whole nodes, or --dpt=bind=auto)",
                         t.rank.rank, t.node.host, t.rank.cpuset, cpus);
        goto done;
      }
      if (opts->verbose)
        slurm_info("dpt: rank %d on %s: the plan's CPUs %s are outside Slurm's %s: kept Slurm's binding",
                   t.rank.rank, t.node.host, t.rank.cpuset, cpus);
    }
  }

  /* GPU: narrow Slurm's CUDA_VISIBLE_DEVICES to the plan's GPU, never widen it */
  if ((rc = get_env(sp, "CUDA_VISIBLE_DEVICES", cvd, sizeof cvd, err)) < 0 ||
      (rc = get_env(sp, "SLURM_STEP_GPUS", step_gpus, sizeof step_gpus, err)) < 0)
    goto done;
  rc = 0;
  if (t.rank.gpu >= 0 && cvd[0]) {
    /* SLURM_STEP_GPUS holds the node's GPU indices in the order of CUDA_VISIBLE_DEVICES
     * (which cgroup device constraint may renumber from 0) */
    int pos = list_find(step_gpus[0] ? step_gpus : cvd, t.rank.gpu);
    if (pos >= 0 && list_nth(cvd, pos, one, sizeof one) == 0) {
      if ((rc = set_env(sp, "CUDA_VISIBLE_DEVICES", one, err)) < 0 ||
          (rc = set_env(sp, "CUDA_DEVICE_ORDER", "PCI_BUS_ID", err)) < 0)
        goto done;
    } else if (opts->bind == DPT_SPANK_BIND_STRICT) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "rank %d on %s: the plan's GPU %d is not among the GPUs Slurm gave the step (%s) "
                       "and bind=strict (use --gpus-per-node=<all GPUs>)", t.rank.rank, t.node.host,
                       t.rank.gpu, step_gpus[0] ? step_gpus : cvd);
      goto done;
    } else if (opts->verbose) {
      slurm_info("dpt: rank %d on %s: GPU %d is not among Slurm's GPUs %s: CUDA_VISIBLE_DEVICES kept",
                 t.rank.rank, t.node.host, t.rank.gpu, step_gpus[0] ? step_gpus : cvd);
    }
  }

  if ((rc = set_env_int(sp, "DPT_RANK", t.rank.rank, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_SIZE", t.world, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_LOCAL_RANK", t.rank.local_rank, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_LOCAL_SIZE", t.node.n_ranks, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_NODE_ID", t.node_ring, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_N_NODES", t.n_nodes, err)) < 0 ||
      (rc = set_env(sp, "DPT_NODE_NAME", t.node.host, err)) < 0 ||
      (rc = set_env(sp, "DPT_PLAN_DIGEST", t.digest, err)) < 0 ||
      (rc = set_env(sp, "DPT_LAUNCHER", "spank", err)) < 0 ||
      (rc = set_env_int(sp, "DPT_GPU", t.rank.gpu, err)) < 0 ||
      (rc = set_env(sp, "DPT_GPU_BUSID", t.rank.gpu_busid, err)) < 0 ||
      (rc = set_env(sp, "DPT_CPUSET", t.rank.cpuset, err)) < 0 ||
      (rc = set_env(sp, "DPT_CPUS_BOUND", cpus, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_NUMA", t.rank.numa, err)) < 0 ||
      (rc = set_env(sp, "DPT_COMM", opts->comm, err)) < 0 ||
      (rc = set_env_int(sp, "DPT_FP16", opts->fp16, err)) < 0 ||
      (rc = set_env(sp, "DPT_HCAS", t.node.hcas, err)) < 0 ||
      (rc = set_env_int(sp, "RANK", t.rank.rank, err)) < 0 ||
      (rc = set_env_int(sp, "LOCAL_RANK", t.rank.local_rank, err)) < 0 ||
      (rc = set_env_int(sp, "WORLD_SIZE", t.world, err)) < 0 ||
      (rc = set_env_int(sp, "LOCAL_WORLD_SIZE", t.node.n_ranks, err)) < 0)
    goto done;
  if (opts->report[0] && (rc = set_env(sp, "DPT_REPORT", opts->report, err)) < 0)
    goto done;
  if (t.rank.threads > 0 && (rc = set_env_int(sp, "OMP_NUM_THREADS", t.rank.threads, err)) < 0)
    goto done;
  /* node-wide HCA list; a user's own NCCL_IB_HCA (the same on every rank) wins */
  if ((rc = get_env(sp, "NCCL_IB_HCA", hca_user, sizeof hca_user, err)) < 0)
    goto done;
  if (rc == 0 && t.node.hcas[0] && (rc = set_env(sp, "NCCL_IB_HCA", t.node.hcas, err)) < 0)
    goto done;
  rc = 0;
  spank_unsetenv(sp, DPT_SPANK_PLAN_ENV); /* the task needs only its own entry, now in DPT_* */
  if (opts->verbose >= 3)
    slurm_info("dpt: rank %d/%d on %s local %d: GPU %d cpus %s (plan %s) HCAs %s", t.rank.rank, t.world,
               t.node.host, t.rank.local_rank, t.rank.gpu, cpus, t.rank.cpuset, t.node.hcas);
done:
  free(plan_s);
  return rc;
}
