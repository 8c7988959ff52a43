/* dpt_bind.c — see dpt_bind.h */
#include "dpt_bind.h"
#include "dpt_env.h"
#include "dpt_rdzv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

static int put(dpt_bind_setenv_fn set, void *arg, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int put(dpt_bind_setenv_fn set, void *arg, const char *name, const char *fmt, ...)
{
  char v[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  return set(arg, name, v);
}

/* Position of GPU `gpu` in a comma-separated list of integers, -1 if absent,
 * -2 on allocation failure. */
static int gpu_position(const char *list, int gpu)
{
  char *copy = strdup(list), *save = NULL, *tok;
  int idx = 0, found = -1;
  if (!copy)
    return -2;
  for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save), idx++) {
    char *end;
    long g = strtol(tok, &end, 10);
    if (end != tok && !*end && g == gpu && found < 0)
      found = idx;
  }
  free(copy);
  return found;
}

void dpt_bind_note(char *report, size_t len, const char *fmt, ...)
{
  size_t o;
  va_list ap;
  if (!report || !len)
    return;
  o = strlen(report);
  if (o && o + 2 < len) {
    snprintf(report + o, len - o, "; ");
    o += 2;
  }
  if (o + 1 >= len)
    return;
  va_start(ap, fmt);
  vsnprintf(report + o, len - o, fmt, ap);
  va_end(ap);
}

static int bind_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                    dpt_bind_setenv_fn set, void *set_arg, char *report, size_t report_len,
                    struct dpt_err *err)
{
  const struct dpt_plan_rank *rk;
  const struct dpt_plan_node *nd;
  const char *cvd, *user_hca;
  int rc = 0;

  if (report && report_len)
    report[0] = '\0';
  if (rank < 0 || rank >= plan->n_ranks)
    return dpt_err_set(err, DPT_E_INPUT, "rank %d is not in the plan (%d ranks)", rank,
                       plan->n_ranks);
  rk = &plan->ranks[rank];
  nd = &plan->nodes[rk->node];
#define P(name, ...)                                                                           \
  do {                                                                                         \
    if ((rc = put(set, set_arg, name, __VA_ARGS__)) < 0)                                       \
      return dpt_err_set(err, rc, "cannot set %s for rank %d", name, rank);                    \
  } while (0)
  P("RANK", "%d", rank);
  P("LOCAL_RANK", "%d", rk->local_rank);
  P("WORLD_SIZE", "%d", plan->n_ranks);
  P("LOCAL_WORLD_SIZE", "%d", nd->n_ranks);
  P("DPT_RANK", "%d", rank);
  P("DPT_SIZE", "%d", plan->n_ranks);
  P("DPT_LOCAL_RANK", "%d", rk->local_rank);
  P("DPT_LOCAL_SIZE", "%d", nd->n_ranks);
  P("DPT_NODE_ID", "%d", rk->node);
  P("DPT_N_NODES", "%d", plan->n_nodes);
  P("DPT_NODE_NAME", "%s", nd->host);
  P("DPT_HOST_INDEX", "%d", nd->host_index);
  P("DPT_PLAN_DIGEST", "%s", plan->digest);
  P("DPT_PLAN_THREADS", "%d", plan->opts.threads_per_rank);
  P("DPT_CPUSET", "%s", rk->cpuset);
  P("DPT_NUMA", "%d", rk->numa);
  P("OMP_NUM_THREADS", "%d", rk->threads > 0 ? rk->threads : 1);
  if (nd->hcas[0]) {
    user_hca = get ? get(get_arg, "NCCL_IB_HCA") : NULL;
    P("DPT_PLAN_IB_HCA", "%s", nd->hcas);
    if (user_hca && *user_hca) {
      /* The user knows their fabric (rails, a port to avoid): keep it, say so. */
      if (strcmp(user_hca, nd->hcas))
        dpt_bind_note(report, report_len, "NCCL_IB_HCA=%.128s kept (set by the user; the plan says %s)",
             user_hca, nd->hcas);
    } else {
      P("NCCL_IB_HCA", "%s", nd->hcas);
    }
  }
  if (rk->gpu >= 0) {
    P("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    cvd = get ? get(get_arg, "CUDA_VISIBLE_DEVICES") : NULL;
    if (cvd && *cvd) {
      /* Already narrowed (e.g. Slurm gres): our GPU's position in the list.  Slurm
       * names the node's GPU indices in SLURM_STEP_GPUS (same order); under
       * ConstrainDevices CUDA_VISIBLE_DEVICES is renumbered from 0. */
      const char *sg = get(get_arg, "SLURM_STEP_GPUS");
      char *step = sg && *sg ? strdup(sg) : NULL, *list;
      int found;
      if (sg && *sg && !step)
        return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      list = step ? step : (char *)cvd;
      found = gpu_position(list, rk->gpu);
      if (found == -2) {
        free(step);
        return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      }
      if (found < 0) {
        char cvd_copy[256];
        snprintf(cvd_copy, sizeof cvd_copy, "%s", cvd);
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "rank %d: the plan puts it on GPU %d of %s, but %s=\"%.200s\" (set by "
                         "the resource manager%s%s) does not contain it: request the node's GPUs "
                         "(--gres=gpu:N / --exclusive) or unset it",
                         rank, rk->gpu, nd->host, step ? "SLURM_STEP_GPUS" : "CUDA_VISIBLE_DEVICES",
                         list, step ? "; CUDA_VISIBLE_DEVICES=" : "", step ? cvd_copy : "");
        free(step);
        return rc;
      }
      if (step) {
        /* the two lists must be the same length for the position to mean the same GPU */
        int n_step = 1, n_cvd = 1;
        for (const char *c = step; *c; c++)
          n_step += *c == ',';
        for (const char *c = cvd; *c; c++)
          n_cvd += *c == ',';
        if (n_step != n_cvd) {
          rc = dpt_err_set(err, DPT_E_INPUT,
                           "rank %d: SLURM_STEP_GPUS=\"%.100s\" and CUDA_VISIBLE_DEVICES=\"%.100s\" "
                           "list different numbers of GPUs: cannot tell which device is GPU %d "
                           "(unset SLURM_STEP_GPUS if CUDA_VISIBLE_DEVICES was changed by hand)",
                           rank, step, cvd, rk->gpu);
          free(step);
          return rc;
        }
      }
      free(step);
      P("DPT_CUDA_DEVICE", "%d", found);
    } else {
      P("CUDA_VISIBLE_DEVICES", "%d", rk->gpu);
      P("DPT_CUDA_DEVICE", "0");
    }
  }
#undef P
  /* MASTER_ADDR/PORT and the rest of torchrun's variables (dpt_rdzv.h) */
  return dpt_rdzv_env(plan, rank, get, get_arg, set, set_arg, report, report_len, err);
}

int dpt_bind_env_report(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get,
                        void *get_arg, dpt_bind_setenv_fn set, void *set_arg, char *report,
                        size_t report_len, struct dpt_err *err)
{
  char kept[768];
  int rc = bind_env(plan, rank, get, get_arg, set, set_arg, kept, sizeof kept, err);
  if (rc < 0)
    return rc;
  if (report && report_len)
    snprintf(report, report_len, "%s", kept);
  /* what the user set and kept, for the program's job report (ranks[].env, binding.applied) */
  if (kept[0] && (rc = set(set_arg, "DPT_ENV_KEPT", kept)) < 0)
    return dpt_err_set(err, rc, "cannot set DPT_ENV_KEPT for rank %d", rank);
  return 0;
}

int dpt_bind_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                 dpt_bind_setenv_fn set, void *set_arg, struct dpt_err *err)
{
  return dpt_bind_env_report(plan, rank, get, get_arg, set, set_arg, NULL, 0, err);
}

static int real_set(void *arg, const char *name, const char *value)
{
  (void)arg;
  if (!value)
    return unsetenv(name) ? DPT_E_RUNTIME : 0;
  return setenv(name, value, 1) ? DPT_E_RUNTIME : 0;
}

static const char *real_get(void *arg, const char *name)
{
  (void)arg;
  return getenv(name);
}

int dpt_bind_env_self(const struct dpt_plan *plan, int rank, struct dpt_err *err)
{
  return dpt_bind_env(plan, rank, real_get, NULL, real_set, NULL, err);
}

int dpt_bind_apply_cpu_ex(const char *cpuset, int numa, unsigned flags, char *bound,
                          size_t bound_len, char *report, size_t report_len, struct dpt_err *err)
{
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t set = NULL, allowed = NULL, cur = NULL;
  char buf[256] = "", mem[160] = "memory not bound", kept[320] = "";
  int rc = 0, within = (flags & DPT_BIND_WITHIN) != 0;

  if (report && report_len)
    report[0] = '\0';
  if (bound && bound_len)
    bound[0] = '\0';
  if ((!cpuset || !*cpuset) && numa < 0) {
    if (report)
      snprintf(report, report_len, "no binding in the plan (cpuset unknown)");
    return 0;
  }
  if (hwloc_topology_init(&topo) < 0 || hwloc_topology_load(topo) < 0) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "hwloc cannot load this machine's topology: %s",
                     strerror(errno));
    goto out;
  }
  set = hwloc_bitmap_alloc();
  cur = hwloc_bitmap_alloc();
  if (!set || !cur) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if (within && hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) < 0 &&
      hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_THREAD) < 0) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "hwloc_get_cpubind failed: %s (cannot read the CPUs "
                     "this process may use)", strerror(errno));
    goto out;
  }
  if (cpuset && *cpuset) {
    char have[128] = "?";
    if (hwloc_bitmap_list_sscanf(set, cpuset) < 0 || hwloc_bitmap_iszero(set) ||
        hwloc_bitmap_last(set) > 65535) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "cpuset \"%.64s\" is not an hwloc list (\"0-3,8\"): check DPT_CPUSET",
                       cpuset);
      goto out;
    }
    if (within) {
      hwloc_bitmap_list_snprintf(have, sizeof have, cur);
      hwloc_bitmap_and(set, set, cur);
      if (hwloc_bitmap_iszero(set)) {
        if (!(flags & DPT_BIND_KEEP_IF_EMPTY)) {
          rc = dpt_err_set(err, DPT_E_INPUT,
                           "the plan binds to CPUs %.64s, outside the CPUs this process was "
                           "given (%s, by the resource manager or its parent): allocate whole "
                           "nodes, or keep the current binding (bind=auto)", cpuset, have);
          goto out;
        }
        snprintf(kept, sizeof kept, "the plan's CPUs %.64s are outside the current %s: kept the "
                 "current binding", cpuset, have);
        if (bound)
          snprintf(bound, bound_len, "%s", have);
        if (report)
          snprintf(report, report_len, "cpus %s (%s), memory not bound", have, kept);
        goto out;
      }
    } else {
      allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
      if (allowed)
        hwloc_bitmap_list_snprintf(have, sizeof have, allowed);
      if (!allowed || !hwloc_bitmap_isincluded(set, allowed)) {
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "the plan binds to CPUs %.64s but this machine (or cgroup) allows only "
                         "%s: was the plan computed from another machine's topology (--input)? "
                         "use --dry-run to only print it, or run it on that machine",
                         cpuset, have);
        goto out;
      }
    }
    if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) < 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "hwloc_set_cpubind(%.64s) failed: %s", cpuset,
                       strerror(errno));
      goto out;
    }
    hwloc_bitmap_list_snprintf(buf, sizeof buf, set);
  } else if (within) {
    hwloc_bitmap_copy(set, cur); /* memory only: judged against the current CPUs */
  }
  if (numa >= 0) {
    hwloc_obj_t nn = NULL;
    for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL); o;
         o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o))
      if ((int)o->os_index == numa)
        nn = o;
    if (!nn && !within) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "the plan binds memory to NUMA node %d, which this machine does not have",
                       numa);
      goto out;
    }
    if (!nn) {
      snprintf(mem, sizeof mem, "memory left to first touch (no NUMA node %d here)", numa);
    } else if (within && !hwloc_bitmap_iszero(set) && !hwloc_bitmap_isincluded(set, nn->cpuset)) {
      snprintf(mem, sizeof mem, "memory left to first touch (the CPUs bound are not all in NUMA "
               "node %d)", numa);
    } else if (hwloc_set_membind(topo, nn->nodeset, HWLOC_MEMBIND_BIND,
                                 HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) < 0) {
      /* Single-node machines or restricted containers may refuse: say so, do not fail. */
      snprintf(mem, sizeof mem, "membind to NUMA %d refused (%s)", numa, strerror(errno));
    } else {
      snprintf(mem, sizeof mem, "memory bound to NUMA %d", numa);
    }
  }
  if (bound && buf[0])
    snprintf(bound, bound_len, "%s", buf);
  if (report)
    snprintf(report, report_len, "cpus %s, %s", buf[0] ? buf : "unchanged", mem);
out:
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(allowed);
  if (topo)
    hwloc_topology_destroy(topo);
  return rc;
}

int dpt_bind_apply_cpu(const char *cpuset, int numa, char *report, size_t report_len,
                       struct dpt_err *err)
{
  return dpt_bind_apply_cpu_ex(cpuset, numa, 0, NULL, 0, report, report_len, err);
}

int dpt_bind_apply_from_env(char *report, size_t report_len, struct dpt_err *err)
{
  const char *cs = getenv("DPT_CPUSET"), *nm = getenv("DPT_NUMA");
  int numa = -1;
  if (nm && *nm) {
    char *end;
    long v = strtol(nm, &end, 10);
    if (end == nm || *end || v < -1 || v > 1 << 20)
      return dpt_err_set(err, DPT_E_INPUT, "DPT_NUMA=\"%s\" is not a NUMA node number", nm);
    numa = (int)v;
  }
  return dpt_bind_apply_cpu(cs ? cs : "", numa, report, report_len, err);
}

void dpt_bind_describe(const struct dpt_plan *plan, int rank, char *buf, size_t len)
{
  const struct dpt_plan_rank *rk = &plan->ranks[rank];
  const struct dpt_plan_node *nd = &plan->nodes[rk->node];
  char gpu[48];
  if (rk->gpu >= 0)
    snprintf(gpu, sizeof gpu, "%d (%s)", rk->gpu, rk->gpu_busid);
  else
    snprintf(gpu, sizeof gpu, "-");
  snprintf(buf, len, "rank %d  node %s  local %d/%d  gpu %s  cpus %s  numa %d  threads %d  hcas %s",
           rank, nd->host, rk->local_rank, nd->n_ranks, gpu, rk->cpuset[0] ? rk->cpuset : "-",
           rk->numa, rk->threads, nd->hcas[0] ? nd->hcas : "-");
}

/* The variables dpt_bind_env_report() may set (keep in step with it). */
const char *const dpt_bind_env_names[] = {
  "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "DPT_RANK", "DPT_SIZE", "DPT_LOCAL_RANK",
  "DPT_LOCAL_SIZE", "DPT_NODE_ID", "DPT_N_NODES", "DPT_NODE_NAME", "DPT_HOST_INDEX", "DPT_PLAN_DIGEST",
  "DPT_PLAN_THREADS", "DPT_CPUSET", "DPT_NUMA", "OMP_NUM_THREADS", "DPT_PLAN_IB_HCA", "NCCL_IB_HCA",
  "CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "DPT_CUDA_DEVICE", "MASTER_ADDR", "MASTER_PORT", "DPT_ENV_KEPT",
  NULL};

static const char *env_or(const char *name, const char *dflt)
{
  const char *v = dpt_env_str(name);
  return v ? v : dflt;
}

void dpt_bind_describe_applied(char *buf, size_t len)
{
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t cpus = NULL, nodes = NULL;
  hwloc_membind_policy_t pol;
  char cpu[256] = "unknown (hwloc cannot read them)", mem[160] = "memory binding unknown";
  const char *who = getenv("DPT_LAUNCHER");

  if (!buf || !len)
    return;
  buf[0] = '\0';
  if (!who || !*who)
    who = getenv("DPT_PLAN_DIGEST") && getenv("DPT_RANK") ? "dpt-launch" : NULL;
  if (hwloc_topology_init(&topo) == 0 && hwloc_topology_load(topo) == 0 &&
      (cpus = hwloc_bitmap_alloc()) && (nodes = hwloc_bitmap_alloc())) {
    if (hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0 ||
        hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_THREAD) == 0) {
      hwloc_bitmap_list_snprintf(cpu, sizeof cpu, cpus);
      if (hwloc_bitmap_isequal(cpus, hwloc_topology_get_topology_cpuset(topo)))
        snprintf(cpu + strlen(cpu), sizeof cpu - strlen(cpu), " (all)");
    }
    if (hwloc_get_membind(topo, nodes, &pol, HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) == 0 ||
        hwloc_get_membind(topo, nodes, &pol, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0) {
      char ns[64];
      hwloc_bitmap_list_snprintf(ns, sizeof ns, nodes);
      if (pol == HWLOC_MEMBIND_BIND)
        snprintf(mem, sizeof mem, "memory bound to NUMA %s", ns);
      else if (pol == HWLOC_MEMBIND_DEFAULT || pol == HWLOC_MEMBIND_FIRSTTOUCH)
        snprintf(mem, sizeof mem, "memory not bound (first touch)");
      else
        snprintf(mem, sizeof mem, "memory policy %d on NUMA %s", (int)pol, ns);
    }
  }
  hwloc_bitmap_free(cpus);
  hwloc_bitmap_free(nodes);
  if (topo)
    hwloc_topology_destroy(topo);

  dpt_bind_note(buf, len, "by %s", who ? who : "nobody (DPT_LAUNCHER and dpt-launch's variables unset: dpt bound nothing)");
  if (getenv("DPT_BIND_APPLIED") && *getenv("DPT_BIND_APPLIED"))
    dpt_bind_note(buf, len, "binder: %.300s", getenv("DPT_BIND_APPLIED"));
  dpt_bind_note(buf, len, "cpus %s (plan %s)", cpu, env_or("DPT_CPUSET", "-"));
  dpt_bind_note(buf, len, "%s (plan NUMA %s)", mem, env_or("DPT_NUMA", "-"));
  if (getenv("CUDA_VISIBLE_DEVICES") || getenv("DPT_CUDA_DEVICE"))
    dpt_bind_note(buf, len, "GPU CUDA_VISIBLE_DEVICES=%s device %s", env_or("CUDA_VISIBLE_DEVICES", "(unset)"),
         env_or("DPT_CUDA_DEVICE", "0"));
  else
    dpt_bind_note(buf, len, "GPU none");
  dpt_bind_note(buf, len, "HCAs %s", env_or("NCCL_IB_HCA", "none"));
  dpt_bind_note(buf, len, "threads OMP_NUM_THREADS=%s", env_or("OMP_NUM_THREADS", "(unset)"));
  /* the launcher's variables, as set */
  size_t o = strlen(buf);
  int first = 1;
  for (int i = 0; dpt_bind_env_names[i] && o + 2 < len; i++) {
    const char *v = getenv(dpt_bind_env_names[i]);
    if (!v)
      continue;
    int k = snprintf(buf + o, len - o, "%s%s=%.200s", first ? "; env " : " ", dpt_bind_env_names[i], v);
    if (k < 0 || (size_t)k >= len - o) {
      buf[o] = '\0'; /* no half variable */
      break;
    }
    o += (size_t)k;
    first = 0;
  }
}
