/* dpt_job.c — see dpt_job.h */
#define _GNU_SOURCE /* asprintf */
#include "dpt_job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "dpt_env.h"

/* How a job asks for oversubscription, in every refusal. */
#define DPT_JOB_ASK                                                                                \
  "or allow oversubscription (dpt-launch / dpt-topo plan --oversubscribe, srun "                   \
  "--dpt=ranks-per-gpu=K, DPT_OVERSUBSCRIBE=1)"

void dpt_job_init(struct dpt_job *job)
{
  memset(job, 0, sizeof *job);
  dpt_plan_opts_init(&job->model);
}

int dpt_job_from_env(struct dpt_job *job, struct dpt_err *err)
{
  const char *xml = dpt_env_str("DPT_PLAN_XML");
  int rc, gpus = 0;

  if (xml) {
    job->node_source = DPT_JOB_NODE_XML;
    job->node_path = xml;
  } else if ((rc = dpt_env_int("DPT_PLAN_GPUS", 1, 4096, NULL, &gpus, err)) < 0) {
    return rc;
  } else if (rc) {
    job->node_source = DPT_JOB_NODE_GPUS;
    job->gpus_per_node = gpus;
  }
  if ((rc = dpt_env_int("DPT_PLAN_THREADS", 0, 4096, NULL, &job->threads_per_rank, err)) < 0 ||
      (rc = dpt_env_int("DPT_FP16", 0, 1, NULL, &job->model.fp16, err)) < 0 ||
      (rc = dpt_env_int("DPT_OVERSUBSCRIBE", 0, 1, "1 allows more ranks than GPUs or cores, 0 or "
                        "unset does not", &job->oversubscribe, err)) < 0)
    return rc;
  return 0;
}

/* ------------------------------------------------------------ inputs */

void dpt_job_inputs_free(struct dpt_job_inputs *in)
{
  if (!in)
    return;
  if (in->own_nodes) {
    for (int i = 0; i < in->n_hosts; i++)
      dpt_node_destroy(in->own_nodes[i]);
    free(in->own_nodes);
  }
  dpt_tree_destroy(in->own_tree);
  dpt_tree_hostlist_free(in->hosts, in->n_hosts);
  free(in->topos);
  memset(in, 0, sizeof *in);
}

/* The caller's name of the node input in front of err (NULL: dflt; "": nothing). */
static int node_err(const struct dpt_job *job, const char *dflt, int rc, struct dpt_err *err)
{
  const char *what = job->node_what ? job->node_what : dflt;
  return what && *what ? dpt_err_prefix(err, "%s", what) : rc;
}

static int load_node_named(const struct dpt_job *job, const char *host, struct dpt_node **node,
                           struct dpt_err *err)
{
  char *path = NULL;
  int rc;

  *node = NULL;
  switch (job->node_source) {
  case DPT_JOB_NODE_LOCAL:
    if ((rc = dpt_node_load(node, NULL, err)) < 0)
      return node_err(job, dpt_env_str("HWLOC_XMLFILE") ? "node topology (HWLOC_XMLFILE)"
                                                        : "node topology (this machine)", rc, err);
    return rc;
  case DPT_JOB_NODE_XML: /* dpt_node_load's messages name the file */
    if ((rc = dpt_node_load(node, job->node_path ? job->node_path : "", err)) < 0)
      return node_err(job, NULL, rc, err);
    return rc;
  case DPT_JOB_NODE_XML_DIR:
    if (asprintf(&path, "%s/%s.xml", job->node_path ? job->node_path : ".", host) < 0)
      return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    rc = dpt_node_load(node, path, err);
    free(path);
    if (rc < 0)
      dpt_err_prefix(err, "%s%shost %s", job->node_what ? job->node_what : "",
                     job->node_what && *job->node_what ? ": " : "", host);
    return rc;
  case DPT_JOB_NODE_GPUS:
    if ((rc = dpt_node_synthetic(node, host, job->gpus_per_node, err)) < 0)
      return node_err(job, "nodes known by their GPU count", rc, err);
    return rc;
  case DPT_JOB_NODE_GIVEN:
    break;
  }
  return dpt_err_set(err, DPT_E_INPUT, "dpt_job: no node topology to load (node source %d)",
                     (int)job->node_source);
}

int dpt_job_load_node(const struct dpt_job *job, const char *host, struct dpt_node **node,
                      struct dpt_err *err)
{
  return load_node_named(job, host ? host : "", node, err);
}

static int job_hosts(struct dpt_job_inputs *in, const struct dpt_job *job, struct dpt_err *err)
{
  int rc;
  if (job->hostlist) {
    if ((rc = dpt_tree_hostlist_expand(job->hostlist, &in->hosts, &in->n_hosts, err)) < 0)
      return job->hosts_what ? dpt_err_prefix(err, "%s", job->hosts_what) : rc;
  } else {
    if (job->n_hosts < 0 || (job->n_hosts > 0 && !job->hosts))
      return dpt_err_set(err, DPT_E_INPUT, "dpt_job: %d hosts without a list", job->n_hosts);
    if (job->n_hosts && !(in->hosts = calloc((size_t)job->n_hosts, sizeof *in->hosts)))
      return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d hosts", job->n_hosts);
    for (int i = 0; i < job->n_hosts; i++) {
      if (!(in->hosts[i] = strdup(job->hosts[i] ? job->hosts[i] : "")))
        return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d hosts", job->n_hosts);
      in->n_hosts = i + 1;
    }
  }
  if (in->n_hosts < 1)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no host", job->hosts_what ? job->hosts_what
                       : job->hostlist ? job->hostlist : "the job");
  return 0;
}

static int job_tree(struct dpt_job_inputs *in, const struct dpt_job *job, struct dpt_err *err)
{
  int rc;
  const char *what = job->tree_what;

  switch (job->tree_source) {
  case DPT_JOB_TREE_FLAT:
    rc = dpt_tree_flat(&in->own_tree, (const char *const *)in->hosts, in->n_hosts, err);
    what = NULL; /* its errors name the host (a duplicate) */
    break;
  case DPT_JOB_TREE_TOPOLOGY_CONF:
    rc = dpt_tree_load_topology_conf(&in->own_tree, job->tree_path, err);
    break;
  case DPT_JOB_TREE_ADDR_LIST:
    rc = dpt_tree_load_addr_list(&in->own_tree, job->tree_path, err);
    break;
  case DPT_JOB_TREE_IBNETDISCOVER:
    rc = dpt_tree_load_ibnetdiscover(&in->own_tree, job->tree_path, err);
    break;
  case DPT_JOB_TREE_ADDRS:
    rc = dpt_tree_from_addrs(&in->own_tree, job->addrs, job->patterns, job->n_addrs, err);
    break;
  case DPT_JOB_TREE_GIVEN:
    if (!job->tree)
      return dpt_err_set(err, DPT_E_INPUT, "dpt_job: no switch tree given");
    in->tree = job->tree;
    return 0;
  default:
    return dpt_err_set(err, DPT_E_INPUT, "dpt_job: unknown tree source %d", (int)job->tree_source);
  }
  if (rc < 0)
    return what ? dpt_err_prefix(err, "%s", what) : rc;
  in->tree = in->own_tree;
  return 0;
}

static int job_nodes(struct dpt_job_inputs *in, const struct dpt_job *job, struct dpt_err *err)
{
  int n = in->n_hosts, rc;

  if (!(in->topos = calloc((size_t)n, sizeof *in->topos)) ||
      !(in->own_nodes = calloc((size_t)n, sizeof *in->own_nodes)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d hosts", n);
  if (job->node_source == DPT_JOB_NODE_GIVEN) {
    if (!job->node)
      return dpt_err_set(err, DPT_E_INPUT, "dpt_job: no node topology given");
    for (int i = 0; i < n; i++)
      in->topos[i] = job->node;
    return 0;
  }
  /* one topology for every host, except with a directory of one XML per host */
  for (int i = 0; i < n; i++) {
    if (i > 0 && job->node_source != DPT_JOB_NODE_XML_DIR) {
      in->topos[i] = in->topos[0];
      continue;
    }
    if ((rc = load_node_named(job, in->hosts[i], &in->own_nodes[i], err)) < 0)
      return rc;
    in->topos[i] = in->own_nodes[i];
  }
  return 0;
}

int dpt_job_inputs(struct dpt_job_inputs *in, const struct dpt_job *job, struct dpt_err *err)
{
  int rc;

  memset(in, 0, sizeof *in);
  if ((rc = job_hosts(in, job, err)) < 0 || (rc = job_tree(in, job, err)) < 0 ||
      (rc = job_nodes(in, job, err)) < 0) {
    dpt_job_inputs_free(in);
    return rc;
  }
  in->opts = job->model;
  in->opts.ranks_per_node = job->ranks_per_node;
  in->opts.allow_oversubscribe = job->oversubscribe || job->ranks_per_gpu > 0;
  in->opts.threads_per_rank = job->threads_per_rank;
  return 0;
}

/* ------------------------------------------------------------ the rule */

/* Ranks of plan node k that share a GPU: 1 and *a, *b two of them. */
static int gpu_shared(const struct dpt_plan *plan, int k, int *a, int *b)
{
  const struct dpt_plan_node *nd = &plan->nodes[k];
  for (int i = nd->first_rank; i < nd->first_rank + nd->n_ranks; i++)
    for (int j = nd->first_rank; j < i; j++)
      if (plan->ranks[i].gpu >= 0 && plan->ranks[i].gpu == plan->ranks[j].gpu) {
        *a = j;
        *b = i;
        return 1;
      }
  return 0;
}

/* Ranks of plan node k whose cpusets meet: 1, *a and *b, and the common CPUs
 * in both (hwloc list syntax) and all of the node's ranks' CPUs in all.
 * Unknown ("") or unparsable cpusets meet nothing. */
static int cpu_shared(const struct dpt_plan *plan, int k, int *a, int *b, char *both, size_t both_len,
                      char *all, size_t all_len)
{
  const struct dpt_plan_node *nd = &plan->nodes[k];
  hwloc_bitmap_t un = hwloc_bitmap_alloc(), x = hwloc_bitmap_alloc(), y = hwloc_bitmap_alloc();
  int found = 0;

  if (!un || !x || !y)
    goto out;
  for (int i = nd->first_rank; i < nd->first_rank + nd->n_ranks; i++)
    if (plan->ranks[i].cpuset[0] && hwloc_bitmap_list_sscanf(x, plan->ranks[i].cpuset) == 0)
      hwloc_bitmap_or(un, un, x);
  hwloc_bitmap_list_snprintf(all, all_len, un);
  for (int i = nd->first_rank; i < nd->first_rank + nd->n_ranks && !found; i++) {
    if (!plan->ranks[i].cpuset[0] || hwloc_bitmap_list_sscanf(x, plan->ranks[i].cpuset) < 0)
      continue;
    for (int j = nd->first_rank; j < i && !found; j++) {
      if (!plan->ranks[j].cpuset[0] || hwloc_bitmap_list_sscanf(y, plan->ranks[j].cpuset) < 0 ||
          !hwloc_bitmap_intersects(x, y))
        continue;
      hwloc_bitmap_and(y, y, x);
      hwloc_bitmap_list_snprintf(both, both_len, y);
      *a = j;
      *b = i;
      found = 1;
    }
  }
out:
  hwloc_bitmap_free(un);
  hwloc_bitmap_free(x);
  hwloc_bitmap_free(y);
  return found;
}

/* dpt_job_sharing, and *first the index of the first shared plan node (-1: none). */
static int sharing(const struct dpt_plan *plan, int *first, char *what, size_t len)
{
  int nodes = 0;

  *first = -1;
  if (what && len)
    what[0] = '\0';
  for (int k = 0; plan && k < plan->n_nodes; k++) {
    const struct dpt_plan_node *nd = &plan->nodes[k];
    char both[256] = "", all[256] = "";
    int a, b, gpus = 0;
    int on_gpu = gpu_shared(plan, k, &a, &b);
    int on_cpu = !on_gpu && cpu_shared(plan, k, &a, &b, both, sizeof both, all, sizeof all);
    if (!on_gpu && !on_cpu)
      continue;
    if (nodes++)
      continue;
    *first = k;
    if (!what || !len)
      continue;
    for (int i = 0; i < nd->n_gpus; i++)
      for (int r = nd->first_rank; r < nd->first_rank + nd->n_ranks; r++)
        if (plan->ranks[r].gpu == i) {
          gpus++;
          break;
        }
    if (on_gpu)
      snprintf(what, len, "host '%s': %d ranks on %d GPU%s: ranks %d and %d share GPU %d", nd->host,
               nd->n_ranks, gpus, gpus == 1 ? "" : "s", a, b, plan->ranks[a].gpu);
    else
      snprintf(what, len, "host '%s': %d ranks on CPUs %s: ranks %d and %d share CPUs %s", nd->host,
               nd->n_ranks, all, a, b, both);
  }
  return nodes;
}

int dpt_job_sharing(const struct dpt_plan *plan, char *what, size_t len)
{
  int first;
  return sharing(plan, &first, what, len);
}

/* Before planning: more ranks per node than GPUs (or than ranks_per_gpu allows). */
static int check_gpus(const struct dpt_job *job, const struct dpt_job_inputs *in, struct dpt_err *err)
{
  for (int h = 0; h < in->n_hosts; h++) {
    const struct dpt_node *nd = in->topos[h];
    int g = nd->n_gpus, r = job->ranks_per_node > 0 ? job->ranks_per_node : g > 0 ? g : 1;
    const char *src = nd->source[0] ? nd->source : "?";
    if (job->ranks_per_gpu > 0 && r > job->ranks_per_gpu * (g > 0 ? g : 1))
      return dpt_err_set(err, DPT_E_INPUT,
                         "host '%s': %d ranks per node but its topology (%s) has %d GPU%s and "
                         "ranks-per-gpu=%d allows %d: use at most that many ranks per node or a larger "
                         "ranks-per-gpu", in->hosts[h], r, src, g, g == 1 ? "" : "s",
                         job->ranks_per_gpu, job->ranks_per_gpu * (g > 0 ? g : 1));
    if (g > 0 && r > g && !in->opts.allow_oversubscribe)
      return dpt_err_set(err, DPT_E_INPUT,
                         "host '%s': %d ranks per node but its topology (%s) has %d GPU%s: ranks "
                         "would share GPUs; use at most %d rank%s per node, " DPT_JOB_ASK,
                         in->hosts[h], r, src, g, g == 1 ? "" : "s", g, g == 1 ? "" : "s");
  }
  return 0;
}

int dpt_job_plan(struct dpt_plan **plan, const struct dpt_job *job, char *note, size_t note_len,
                 struct dpt_err *err)
{
  struct dpt_job_inputs in;
  char what[512];
  int rc, k;

  *plan = NULL;
  if (note && note_len)
    note[0] = '\0';
  if ((rc = dpt_job_inputs(&in, job, err)) < 0)
    return rc;
  if ((rc = check_gpus(job, &in, err)) < 0 ||
      (rc = dpt_plan_compute(plan, in.tree, (const char *const *)in.hosts, in.n_hosts, in.topos,
                             &in.opts, err)) < 0)
    goto out;
  if (sharing(*plan, &k, what, sizeof what)) {
    if (!in.opts.allow_oversubscribe) {
      const struct dpt_node *nd = in.topos[(*plan)->nodes[k].host_index];
      char fix[400];
      if (nd->n_gpus == 0 && nd->n_cores > 0)
        snprintf(fix, sizeof fix, "its topology (%.200s) has %d core%s: use at most %d rank%s per node",
                 nd->source[0] ? nd->source : "?", nd->n_cores, nd->n_cores == 1 ? "" : "s", nd->n_cores,
                 nd->n_cores == 1 ? "" : "s");
      else
        snprintf(fix, sizeof fix, "the CPUs next to its GPUs are too few for its ranks: use fewer ranks "
                 "per node");
      rc = dpt_err_set(err, DPT_E_INPUT, "%s; %s, " DPT_JOB_ASK, what, fix);
      dpt_plan_destroy(*plan);
      *plan = NULL;
      goto out;
    }
    if (note && note_len)
      snprintf(note, note_len, "oversubscribed as asked: %s", what);
  }
  rc = 0;
out:
  dpt_job_inputs_free(&in);
  return rc;
}
