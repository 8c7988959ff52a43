/* dpt_bind.c — see dpt_bind.h */
#include "dpt_bind.h"

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

int dpt_bind_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                 dpt_bind_setenv_fn set, void *set_arg, struct dpt_err *err)
{
  const struct dpt_plan_rank *rk;
  const struct dpt_plan_node *nd;
  const char *cvd;
  int rc = 0;

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
  P("DPT_PLAN_DIGEST", "%s", plan->digest);
  P("DPT_CPUSET", "%s", rk->cpuset);
  P("DPT_NUMA", "%d", rk->numa);
  P("OMP_NUM_THREADS", "%d", rk->threads > 0 ? rk->threads : 1);
  if (nd->hcas[0])
    P("NCCL_IB_HCA", "%s", nd->hcas);
  if (rk->gpu >= 0) {
    P("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    cvd = get ? get(get_arg, "CUDA_VISIBLE_DEVICES") : NULL;
    if (cvd && *cvd) {
      /* Already narrowed (e.g. Slurm gres): pick our GPU's index in the list. */
      char *copy = strdup(cvd), *save = NULL, *tok;
      int idx = 0, found = -1;
      if (!copy)
        return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save), idx++) {
        char *end;
        long g = strtol(tok, &end, 10);
        if (end != tok && !*end && g == rk->gpu)
          found = idx;
      }
      free(copy);
      if (found < 0)
        return dpt_err_set(err, DPT_E_INPUT,
                           "rank %d: the plan puts it on GPU %d of %s, but CUDA_VISIBLE_DEVICES="
                           "\"%s\" (set by the resource manager) does not contain it: request "
                           "the node's GPUs (--gres=gpu:N / --exclusive) or unset it",
                           rank, rk->gpu, nd->host, cvd);
      P("DPT_CUDA_DEVICE", "%d", found);
    } else {
      P("CUDA_VISIBLE_DEVICES", "%d", rk->gpu);
      P("DPT_CUDA_DEVICE", "0");
    }
  }
#undef P
  return 0;
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

int dpt_bind_apply_cpu(const char *cpuset, int numa, char *report, size_t report_len,
                       struct dpt_err *err)
{
  hwloc_topology_t topo = NULL;
  hwloc_bitmap_t set = NULL, allowed = NULL;
  char buf[256] = "", mem[64] = "memory not bound";
  int rc = 0;

  if (report && report_len)
    report[0] = '\0';
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
  if (!set) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if (cpuset && *cpuset) {
    allowed = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
    if (hwloc_bitmap_list_sscanf(set, cpuset) < 0 || hwloc_bitmap_iszero(set)) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "cpuset \"%s\" is not an hwloc list (\"0-3,8\"): check DPT_CPUSET",
                       cpuset);
      goto out;
    }
    if (!allowed || !hwloc_bitmap_isincluded(set, allowed)) {
      char have[128] = "?";
      if (allowed)
        hwloc_bitmap_list_snprintf(have, sizeof have, allowed);
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "the plan binds to CPUs %s but this machine (or cgroup) allows only %s: "
                       "was the plan computed from another machine's topology (--input)? use "
                       "--dry-run to only print it, or run it on that machine",
                       cpuset, have);
      goto out;
    }
    if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) < 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "hwloc_set_cpubind(%s) failed: %s", cpuset,
                       strerror(errno));
      goto out;
    }
    hwloc_bitmap_list_snprintf(buf, sizeof buf, set);
  }
  if (numa >= 0) {
    hwloc_obj_t nn = NULL;
    for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, NULL); o;
         o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o))
      if ((int)o->os_index == numa)
        nn = o;
    if (!nn) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "the plan binds memory to NUMA node %d, which this machine does not have",
                       numa);
      goto out;
    }
    if (hwloc_set_membind(topo, nn->nodeset, HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) < 0) {
      /* Single-node machines or restricted containers may refuse: say so, do not fail. */
      snprintf(mem, sizeof mem, "membind to NUMA %d refused (%s)", numa, strerror(errno));
    } else {
      snprintf(mem, sizeof mem, "memory bound to NUMA %d", numa);
    }
  }
  if (report)
    snprintf(report, report_len, "cpus %s, %s", buf[0] ? buf : "unchanged", mem);
out:
  hwloc_bitmap_free(set);
  hwloc_bitmap_free(allowed);
  if (topo)
    hwloc_topology_destroy(topo);
  return rc;
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
