/* test_bind.c — dpt_bind's modes that the SPANK plugin relies on.
 *
 *   test_bind NODE.xml      (an 8-GPU, 4-HCA hwloc XML: the MN-1 fixture)
 *
 * (a) within the current affinity (DPT_BIND_WITHIN): run in a child bound to
 *     CPU 0 first; the plan's "0-1" becomes "0" (never wider); a plan cpuset
 *     outside it fails naming both sets, or keeps the binding with
 *     DPT_BIND_KEEP_IF_EMPTY; a NUMA node this machine lacks is skipped (not an
 *     error) within, and an error without WITHIN; without WITHIN the plan's CPU
 *     is taken as is.
 * (b) dpt_bind_env: the plan GPU is looked up in SLURM_STEP_GPUS (CUDA_VISIBLE_DEVICES
 *     renumbered from 0), in CUDA_VISIBLE_DEVICES without it; absent GPU and lists
 *     of different lengths are errors naming the variables.
 * (c) a user's NCCL_IB_HCA is kept and reported; otherwise the plan's list is set. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hwloc.h>

#include "dpt_bind.h"
#include "dpt_node.h"
#include "dpt_plan.h"
#include "dpt_tree.h"

#include "dpt_check.h"

/* ---------------------------------------------------------------- fake env */
#define NV 64
struct env {
  char name[NV][64];
  char value[NV][512];
  int set[NV]; /* 1 if value present */
  int n;
};

static int env_find(struct env *e, const char *name)
{
  for (int i = 0; i < e->n; i++)
    if (!strcmp(e->name[i], name))
      return i;
  return -1;
}

static int env_set(void *arg, const char *name, const char *value)
{
  struct env *e = arg;
  int i = env_find(e, name);
  if (i < 0) {
    if (e->n == NV)
      return DPT_E_NOMEM;
    i = e->n++;
    snprintf(e->name[i], sizeof e->name[i], "%s", name);
  }
  e->set[i] = value != NULL;
  snprintf(e->value[i], sizeof e->value[i], "%s", value ? value : "");
  return 0;
}

static const char *env_get(void *arg, const char *name)
{
  struct env *e = arg;
  int i = env_find(e, name);
  return i >= 0 && e->set[i] ? e->value[i] : NULL;
}

/* ---------------------------------------------------------------- (a) */
static int cur_cpus(hwloc_topology_t t, char *buf, size_t len)
{
  hwloc_bitmap_t s = hwloc_bitmap_alloc();
  int rc = hwloc_get_cpubind(t, s, HWLOC_CPUBIND_PROCESS);
  hwloc_bitmap_list_snprintf(buf, len, s);
  hwloc_bitmap_free(s);
  return rc;
}

static int bind_to(hwloc_topology_t t, const char *list)
{
  hwloc_bitmap_t s = hwloc_bitmap_alloc();
  int rc;
  hwloc_bitmap_list_sscanf(s, list);
  rc = hwloc_set_cpubind(t, s, HWLOC_CPUBIND_PROCESS);
  hwloc_bitmap_free(s);
  return rc;
}

/* In a child so that the test's own binding stays as it was. */
static int within_child(void)
{
  hwloc_topology_t t;
  char bound[256], report[512], now[64];
  struct dpt_err err;
  int rc;

  hwloc_topology_init(&t);
  hwloc_topology_load(t);
  if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) < 2 || bind_to(t, "0") < 0) {
    printf("test_bind: (a) needs 2 PUs and permission to bind: skipped\n");
    hwloc_topology_destroy(t);
    return 0;
  }
  /* plan 0-1 within {0}: bound to 0 only */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("0-1", -1, DPT_BIND_WITHIN, bound, sizeof bound, report,
                             sizeof report, &err);
  CHECK(rc == 0, "within: %s", err.msg);
  CHECK(!strcmp(bound, "0"), "within: bound \"%s\", expected \"0\"", bound);
  cur_cpus(t, now, sizeof now);
  CHECK(!strcmp(now, "0"), "within: affinity now %s, expected 0 (never wider)", now);
  /* plan 1 within {0}: error naming both */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("1", -1, DPT_BIND_WITHIN, bound, sizeof bound, report,
                             sizeof report, &err);
  CHECK(rc == DPT_E_INPUT, "within, disjoint: rc %d", rc);
  CHECK(strstr(err.msg, "CPUs 1, outside the CPUs this process was given (0"),
        "within, disjoint: message \"%s\"", err.msg);
  cur_cpus(t, now, sizeof now);
  CHECK(!strcmp(now, "0"), "within, disjoint: affinity changed to %s", now);
  /* ... or keep the current binding */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("1", -1, DPT_BIND_WITHIN | DPT_BIND_KEEP_IF_EMPTY, bound,
                             sizeof bound, report, sizeof report, &err);
  CHECK(rc == 0, "keep: %s", err.msg);
  CHECK(!strcmp(bound, "0"), "keep: bound \"%s\"", bound);
  CHECK(strstr(report, "kept the current binding"), "keep: report \"%s\"", report);
  /* a NUMA node this machine lacks: skipped within, an error without */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("0", 4095, DPT_BIND_WITHIN, bound, sizeof bound, report,
                             sizeof report, &err);
  CHECK(rc == 0 && strstr(report, "no NUMA node 4095"), "within numa: rc %d report \"%s\" %s",
        rc, report, err.msg);
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("0", 4095, 0, bound, sizeof bound, report, sizeof report, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "NUMA node 4095"), "numa: rc %d \"%s\"", rc,
        err.msg);
  /* NUMA 0 exists here: bound within (or refused by the kernel, reported) */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("0", 0, DPT_BIND_WITHIN, bound, sizeof bound, report,
                             sizeof report, &err);
  CHECK(rc == 0 && (strstr(report, "memory bound to NUMA 0") || strstr(report, "refused")),
        "numa 0: rc %d report \"%s\"", rc, report);
  /* without WITHIN the plan's CPU is taken as is (may widen) */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("1", -1, 0, bound, sizeof bound, report, sizeof report, &err);
  cur_cpus(t, now, sizeof now);
  CHECK(rc == 0 && !strcmp(now, "1") && !strcmp(bound, "1"), "plain: rc %d now %s bound %s",
        rc, now, bound);
  /* a cpuset that is not a list */
  dpt_err_clear(&err);
  rc = dpt_bind_apply_cpu_ex("zero", -1, DPT_BIND_WITHIN, bound, sizeof bound, report,
                             sizeof report, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "\"zero\" is not an hwloc list"), "bad list: %s",
        err.msg);
  hwloc_topology_destroy(t);
  return failures;
}

/* ---------------------------------------------------------------- plans */
static struct dpt_plan *plan_for(struct dpt_node *node, int rpn)
{
  const char *host = "h1";
  const struct dpt_node *topos[1] = {node};
  struct dpt_tree *tree = NULL;
  struct dpt_plan *plan = NULL;
  struct dpt_plan_opts po;
  struct dpt_err err;
  dpt_err_clear(&err);
  dpt_plan_opts_init(&po);
  po.ranks_per_node = rpn;
  if (dpt_tree_flat(&tree, &host, 1, &err) < 0 ||
      dpt_plan_compute(&plan, tree, &host, 1, topos, &po, &err) < 0)
    fprintf(stderr, "test_bind: plan: %s\n", err.msg);
  dpt_tree_destroy(tree);
  return plan;
}

int main(int argc, char **argv)
{
  struct dpt_node *node = NULL;
  struct dpt_plan *plan;
  struct dpt_err err;
  struct env e;
  char report[512], list[64];
  int rank = 3, g, rc, status = 0;
  pid_t pid;

  if (argc != 2) {
    fprintf(stderr, "usage: test_bind NODE.xml\n");
    return 2;
  }
  /* (a) */
  pid = fork();
  if (pid == 0)
    _exit(within_child() ? 1 : 0);
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "(a) within-affinity checks failed");

  dpt_err_clear(&err);
  if (dpt_node_load(&node, argv[1], &err) < 0) {
    fprintf(stderr, "test_bind: %s\n", err.msg);
    return 2;
  }
  plan = plan_for(node, 8);
  if (!plan)
    return 1;
  g = plan->ranks[rank].gpu;
  CHECK(g >= 0 && plan->nodes[0].hcas[0], "the fixture plan has GPUs and HCAs");

  /* (b) Slurm gave 4 GPUs, our GPU third in SLURM_STEP_GPUS; CVD renumbered 0-3 */
  memset(&e, 0, sizeof e);
  snprintf(list, sizeof list, "%d,%d,%d,%d", (g + 1) % 8, (g + 2) % 8, g, (g + 3) % 8);
  env_set(&e, "SLURM_STEP_GPUS", list);
  env_set(&e, "CUDA_VISIBLE_DEVICES", "0,1,2,3");
  rc = dpt_bind_env_report(plan, rank, env_get, &e, env_set, &e, report, sizeof report, &err);
  CHECK(rc == 0, "step gpus: %s", err.msg);
  CHECK(env_get(&e, "DPT_CUDA_DEVICE") && !strcmp(env_get(&e, "DPT_CUDA_DEVICE"), "2"),
        "DPT_CUDA_DEVICE=%s, expected 2 (GPU %d in SLURM_STEP_GPUS=%s)",
        env_get(&e, "DPT_CUDA_DEVICE"), g, list);
  CHECK(!strcmp(env_get(&e, "CUDA_VISIBLE_DEVICES"), "0,1,2,3"), "CUDA_VISIBLE_DEVICES changed");
  CHECK(env_get(&e, "DPT_HOST_INDEX") && !strcmp(env_get(&e, "DPT_HOST_INDEX"), "0"),
        "DPT_HOST_INDEX");
  /* without SLURM_STEP_GPUS: looked up in CUDA_VISIBLE_DEVICES */
  memset(&e, 0, sizeof e);
  env_set(&e, "CUDA_VISIBLE_DEVICES", list);
  rc = dpt_bind_env(plan, rank, env_get, &e, env_set, &e, &err);
  CHECK(rc == 0 && !strcmp(env_get(&e, "DPT_CUDA_DEVICE"), "2"), "cvd lookup: %s", err.msg);
  /* SLURM_STEP_GPUS without our GPU: error naming it */
  memset(&e, 0, sizeof e);
  snprintf(list, sizeof list, "%d", (g + 1) % 8);
  env_set(&e, "SLURM_STEP_GPUS", list);
  env_set(&e, "CUDA_VISIBLE_DEVICES", "0");
  rc = dpt_bind_env(plan, rank, env_get, &e, env_set, &e, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "SLURM_STEP_GPUS=\"") &&
            strstr(err.msg, "CUDA_VISIBLE_DEVICES=0"),
        "absent in step gpus: %s", err.msg);
  /* lists of different lengths */
  memset(&e, 0, sizeof e);
  snprintf(list, sizeof list, "%d,%d", g, (g + 1) % 8);
  env_set(&e, "SLURM_STEP_GPUS", list);
  env_set(&e, "CUDA_VISIBLE_DEVICES", "0");
  rc = dpt_bind_env(plan, rank, env_get, &e, env_set, &e, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "different numbers of GPUs"), "lengths: %s",
        err.msg);
  /* nothing narrowed: CUDA_VISIBLE_DEVICES = the plan's GPU */
  memset(&e, 0, sizeof e);
  rc = dpt_bind_env_report(plan, rank, env_get, &e, env_set, &e, report, sizeof report, &err);
  CHECK(rc == 0 && atoi(env_get(&e, "CUDA_VISIBLE_DEVICES")) == g &&
            !strcmp(env_get(&e, "DPT_CUDA_DEVICE"), "0"),
        "unnarrowed: %s", err.msg);
  /* (c) no user value: the plan's HCAs, nothing to report */
  CHECK(env_get(&e, "NCCL_IB_HCA") && !strcmp(env_get(&e, "NCCL_IB_HCA"), plan->nodes[0].hcas),
        "NCCL_IB_HCA=%s, plan %s", env_get(&e, "NCCL_IB_HCA"), plan->nodes[0].hcas);
  CHECK(report[0] == '\0', "report \"%s\" with nothing kept", report);
  /* the user's NCCL_IB_HCA is kept and reported */
  memset(&e, 0, sizeof e);
  env_set(&e, "NCCL_IB_HCA", "=mlx5_3:1");
  rc = dpt_bind_env_report(plan, rank, env_get, &e, env_set, &e, report, sizeof report, &err);
  CHECK(rc == 0 && !strcmp(env_get(&e, "NCCL_IB_HCA"), "=mlx5_3:1"), "user HCA overridden: %s",
        env_get(&e, "NCCL_IB_HCA"));
  CHECK(strstr(report, "NCCL_IB_HCA==mlx5_3:1 kept (set by the user; the plan says"),
        "report \"%s\"", report);
  CHECK(env_get(&e, "DPT_PLAN_IB_HCA") &&
            !strcmp(env_get(&e, "DPT_PLAN_IB_HCA"), plan->nodes[0].hcas),
        "DPT_PLAN_IB_HCA");
  dpt_plan_destroy(plan);
  dpt_node_destroy(node);
  if (!failures)
    printf("test_bind: within-affinity, SLURM_STEP_GPUS, user NCCL_IB_HCA: ok\n");
  return failures ? 1 : 0;
}
