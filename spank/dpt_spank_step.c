/* dpt_spank_step.c — srun side: the live step's inputs, then dpt_spank_local_compute().
 * Runs in srun as the user (S_CTX_LOCAL). */
#define _GNU_SOURCE /* dladdr */
#define DPT_SPANK_WITH_SLURM 1
#include <stdint.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hwloc.h>

#include "dpt_job.h"
#include "dpt_rdzv.h"
#include "dpt_spank_local.h"
#include "dpt_spank_plan.h"

/* sbuf-free appender for the topology.conf text */
static int append(char **buf, size_t *len, size_t *cap, const char *a, const char *b, const char *c)
{
  size_t need = strlen(a) + strlen(b) + strlen(c);
  if (*len + need + 1 > *cap) {
    size_t nc = *cap ? *cap : 4096;
    while (nc < *len + need + 1)
      nc *= 2;
    char *q = realloc(*buf, nc);
    if (!q)
      return -1;
    *buf = q;
    *cap = nc;
  }
  *len += (size_t)snprintf(*buf + *len, *cap - *len, "%s%s%s", a, b, c);
  return 0;
}

/* The switch tree Slurm's topology plugin knows (slurmctld), written as the
 * topology.conf it came from and parsed by the one topology.conf parser.
 * *tree = NULL when Slurm has no switch records (not topology/tree): flat. */
static int tree_from_slurm(struct dpt_tree **tree, struct dpt_err *err)
{
  topo_info_response_msg_t *msg = NULL;
  char *text = NULL, num[32];
  size_t len = 0, cap = 0;
  int rc = 0;

  *tree = NULL;
  if (slurm_load_topo(&msg) != SLURM_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME,
                       "cannot read the switch topology from slurmctld (slurm_load_topo: %s); "
                       "use --dpt=tree=flat or tree=/path/topology.conf",
                       slurm_strerror(slurm_get_errno()));
  if (!msg || msg->record_count == 0)
    goto done; /* no topology/tree plugin: one flat group */
  for (uint32_t i = 0; i < msg->record_count; i++) {
    const topo_info_t *t = &msg->topo_array[i];
    if (!t->name)
      continue;
    if (append(&text, &len, &cap, "SwitchName=", t->name, "") < 0)
      goto oom;
    if (t->switches && *t->switches && append(&text, &len, &cap, " Switches=", t->switches, "") < 0)
      goto oom;
    /* slurmctld lists every node below a switch in its nodes field: Nodes= only for leaves */
    if (!(t->switches && *t->switches) && t->nodes && *t->nodes &&
        append(&text, &len, &cap, " Nodes=", t->nodes, "") < 0)
      goto oom;
    /* Slurm fills LinkSpeed=1 when topology.conf does not say: treat 1 as unknown */
    snprintf(num, sizeof num, "%u", t->link_speed);
    if (t->link_speed > 1 && append(&text, &len, &cap, " LinkSpeed=", num, "") < 0)
      goto oom;
    if (append(&text, &len, &cap, "\n", "", "") < 0)
      goto oom;
  }
  if (text)
    rc = dpt_tree_parse_topology_conf(tree, text, len, "slurmctld topology (slurm_load_topo)", err);
  goto done;
oom:
  rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
done:
  free(text);
  if (msg)
    slurm_free_topo_info_msg(msg);
  return rc;
}

/* The step's node list, in SLURM_NODEID order. */
static int step_nodes(spank_t sp, char ***hosts, int *n, struct dpt_err *err)
{
  uint32_t job = 0, step = 0, nnodes = 0;
  job_step_info_response_msg_t *resp = NULL;
  int rc;

  *hosts = NULL;
  *n = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_NNODES, &nnodes) != ESPANK_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "srun did not say the job id, step id or node count");
  if (slurm_get_job_steps((time_t)0, job, step, &resp, SHOW_ALL) != SLURM_SUCCESS || !resp ||
      resp->job_step_count < 1 || !resp->job_steps[0].nodes) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "cannot read the node list of step %u.%u from slurmctld (%s)",
                     job, step, slurm_strerror(slurm_get_errno()));
    goto done;
  }
  if ((rc = dpt_tree_hostlist_expand(resp->job_steps[0].nodes, hosts, n, err)) < 0)
    goto done;
  if ((uint32_t)*n != nnodes) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "step %u.%u has nodes %s (%d) but srun says %u nodes", job, step,
                     resp->job_steps[0].nodes, *n, nnodes);
    dpt_tree_hostlist_free(*hosts, *n);
    *hosts = NULL;
    *n = 0;
  }
done:
  if (resp)
    slurm_free_job_step_info_response_msg(resp);
  return rc;
}

static void summary(const struct dpt_plan *plan, int verbose)
{
  const struct dpt_plan_alt *me = &plan->alts[0], *slurm = NULL;
  for (int i = 0; i < plan->n_alts; i++)
    if (strcmp(plan->alts[i].name, "slurm-order") == 0)
      slurm = &plan->alts[i];
  fprintf(stderr, "dpt: plan %s: %d ranks on %d nodes in %d groups; ring", plan->digest, plan->n_ranks,
          plan->n_nodes, plan->n_groups);
  for (int i = 0; i < plan->n_nodes && i < 16; i++)
    fprintf(stderr, " %s", plan->nodes[i].host);
  fprintf(stderr, "%s; inter-group hops %d (Slurm's order: %d); predicted all-reduce %.3f ms\n",
          plan->n_nodes > 16 ? " ..." : "", me->inter_group_hops, slurm ? slurm->inter_group_hops : -1,
          me->predicted_s * 1e3);
  if (verbose >= 2)
    dpt_plan_print(stderr, plan);
}

/* The rendezvous of the step for every framework's env:// path (dpt_rdzv.h):
 * DPT_MASTER_ADDR = Slurm's NodeAddr of plan rank 0's node (what the other
 * nodes reach it by; its node name when slurmctld does not say), DPT_MASTER_PORT
 * derived from the job and step ids, DPT_RUN_ID = slurm-JOB.STEP.  Into srun's
 * environment, which the step's tasks inherit; task_init turns them into
 * MASTER_ADDR/MASTER_PORT unless the user set those. */
static int rendezvous(spank_t sp, const struct dpt_plan *plan, struct dpt_err *err)
{
  const char *host = plan->nodes[plan->ranks[0].node].host;
  node_info_msg_t *msg = NULL;
  uint32_t job = 0, step = 0;
  char addr[256], port[16], id[64];

  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "srun did not say the job and step id");
  snprintf(addr, sizeof addr, "%s", host);
  if (slurm_load_node_single(&msg, (char *)host, SHOW_ALL) == SLURM_SUCCESS && msg &&
      msg->record_count == 1 && msg->node_array[0].node_addr && msg->node_array[0].node_addr[0])
    snprintf(addr, sizeof addr, "%s", msg->node_array[0].node_addr);
  else
    fprintf(stderr, "dpt: cannot read NodeAddr of %s from slurmctld (%s): MASTER_ADDR is its node "
            "name, which the other nodes must resolve\n", host, slurm_strerror(slurm_get_errno()));
  if (msg)
    slurm_free_node_info_msg(msg);
  snprintf(port, sizeof port, "%d", dpt_rdzv_port(job, step));
  snprintf(id, sizeof id, "slurm-%u.%u", job, step);
  if (setenv("DPT_MASTER_ADDR", addr, 1) != 0 || setenv("DPT_MASTER_PORT", port, 1) != 0 ||
      setenv("DPT_RUN_ID", id, 1) != 0)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot set DPT_MASTER_ADDR/PORT in srun's environment");
  return 0;
}

/* Slurm dlopen()s this plugin with local symbol scope, and libhwloc with it:
 * hwloc's own plugins (libxml2 XML import, PCI discovery) then fail to load
 * ("undefined symbol: hwloc_...") and hwloc silently falls back to its
 * minimalistic XML parser and no PCI devices -- no GPUs, no HCAs.  Promote the
 * already loaded libhwloc to global scope before using it. */
static void hwloc_global(void)
{
  static void *handle;
  Dl_info info;
  if (handle)
    return;
  if (dladdr((void *)&hwloc_topology_init, &info) && info.dli_fname)
    handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_GLOBAL | RTLD_NOLOAD);
}

int dpt_spank_local_plan(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_plan **keep,
                         struct dpt_err *err)
{
  char **hosts = NULL;
  int n = 0, tpn = 0, rc;
  uint32_t total = 0;
  struct dpt_tree *tree = NULL;
  struct dpt_plan *plan = NULL;
  char *enc = NULL, note[600];

  hwloc_global();
  if ((rc = step_nodes(sp, &hosts, &n, err)) < 0)
    goto fail;
  if ((rc = dpt_spank_uniform_tasks(getenv("SLURM_TASKS_PER_NODE"), &tpn, err)) < 0)
    goto fail;
  if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &total) == ESPANK_SUCCESS && total != (uint32_t)tpn * (uint32_t)n) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%u tasks on %d nodes are not %d per node: --dpt needs the same "
                     "number of tasks on every node (use --ntasks-per-node)", total, n, tpn);
    goto fail;
  }
  if (strcmp(opts->tree, "slurm") == 0)
    rc = tree_from_slurm(&tree, err);
  else if (strcmp(opts->tree, "flat") == 0)
    rc = 0;
  else
    rc = dpt_tree_load_topology_conf(&tree, opts->tree, err);
  if (rc < 0) {
    dpt_err_prefix(err, "switch tree");
    goto fail;
  }
  if ((rc = dpt_spank_local_compute(opts, tree, (const char *const *)hosts, n, tpn, &plan, &enc, note,
                                    sizeof note, err)) < 0)
    goto fail;
  if (note[0]) { /* ranks-per-gpu oversubscribes the nodes: never silently */
    char shared[512];
    fprintf(stderr, "dpt: %s (ranks-per-gpu=%d)\n", note, opts->ranks_per_gpu);
    dpt_job_sharing(plan, shared, sizeof shared); /* for the job report (job.oversubscribed) */
    if (setenv("DPT_PLAN_OVERSUBSCRIBED", shared, 1) != 0) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "cannot set DPT_PLAN_OVERSUBSCRIBED in srun's environment");
      goto fail;
    }
  }
  if ((rc = rendezvous(sp, plan, err)) < 0)
    goto fail;
  if (setenv(DPT_SPANK_PLAN_ENV, enc, 1) != 0) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "cannot set %s (%zu bytes) in srun's environment",
                     DPT_SPANK_PLAN_ENV, strlen(enc));
    goto fail;
  }
  if (opts->verbose)
    summary(plan, opts->verbose);
  if (keep) { /* for the job report after the step */
    *keep = plan;
    plan = NULL;
  }
fail:
  free(enc);
  dpt_plan_destroy(plan);
  dpt_tree_destroy(tree);
  dpt_tree_hostlist_free(hosts, n);
  return rc;
}
