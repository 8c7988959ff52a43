/* dpt_ctx.c — see dpt_ctx.h */
#include "dpt_ctx.h"
#include "dpt_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct envsrc {
  dpt_ctx_getenv_fn get;
  void *arg;
};

static const char *ev(const struct envsrc *s, const char *name)
{
  const char *v = s->get(s->arg, name);
  return (v && *v) ? v : NULL;
}

/* A non-negative int variable.  Returns 1 if set, 0 if unset, <0 on error. */
static int env_int(const struct envsrc *s, const char *name, int *out, struct dpt_err *err)
{
  return dpt_env_int_parse(name, ev(s, name), 0, INT_MAX,
                           "the launcher's environment is broken (unset it or start the program with "
                           "srun/mpirun/dpt-launch)",
                           out, err);
}

/* Required partner: both or none. */
static int need(const struct envsrc *s, const char *have, const char *name, int *out,
                struct dpt_err *err)
{
  int rc = env_int(s, name, out, err);
  if (rc < 0)
    return rc;
  if (rc == 0)
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s is set but %s is missing: cannot tell this rank's place in the job "
                       "(set both, or neither)", have, name);
  return 0;
}

static int check_range(const char *what_v, int v, const char *what_n, int n, struct dpt_err *err)
{
  if (v >= 0 && n >= 0 && v >= n)
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s=%d is not below %s=%d: inconsistent launcher variables", what_v, v,
                       what_n, n);
  return 0;
}

/* SLURM_TASKS_PER_NODE "2(x3),1": tasks on node `node`. */
static int slurm_tasks_on_node(const char *tpn, int node)
{
  const char *p = tpn;
  int idx = 0;

  while (*p) {
    char *end;
    long n = strtol(p, &end, 10), rep = 1;
    if (end == p || n < 0)
      return -1;
    p = end;
    if (*p == '(') {
      if (p[1] != 'x')
        return -1;
      rep = strtol(p + 2, &end, 10);
      if (end == p + 2 || *end != ')' || rep < 1)
        return -1;
      p = end + 1;
    }
    if (node < idx + rep)
      return (int)n;
    idx += (int)rep;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  return -1;
}

static void copy(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src ? src : "");
}

static int load_dpt(struct dpt_ctx *c, const struct envsrc *s, struct dpt_err *err)
{
  int rc;
  if ((rc = need(s, "DPT_RANK", "DPT_SIZE", &c->size, err)) < 0)
    return rc;
  if (env_int(s, "DPT_LOCAL_RANK", &c->local_rank, err) < 0 ||
      env_int(s, "DPT_LOCAL_SIZE", &c->local_size, err) < 0 ||
      env_int(s, "DPT_NODE_ID", &c->node_id, err) < 0 ||
      env_int(s, "DPT_N_NODES", &c->n_nodes, err) < 0)
    return err->code;
  if (ev(s, "DPT_NODE_NAME"))
    copy(c->node_name, sizeof c->node_name, ev(s, "DPT_NODE_NAME"));
  if (ev(s, "DPT_JOB_ID"))
    copy(c->job_id, sizeof c->job_id, ev(s, "DPT_JOB_ID"));
  copy(c->source, sizeof c->source, "dpt-launch");
  return 0;
}

static int load_ompi(struct dpt_ctx *c, const struct envsrc *s, struct dpt_err *err)
{
  int rc;
  if ((rc = need(s, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &c->size, err)) < 0)
    return rc;
  if (env_int(s, "OMPI_COMM_WORLD_LOCAL_RANK", &c->local_rank, err) < 0 ||
      env_int(s, "OMPI_COMM_WORLD_LOCAL_SIZE", &c->local_size, err) < 0)
    return err->code;
  copy(c->source, sizeof c->source, "ompi");
  return 0;
}

static int load_slurm(struct dpt_ctx *c, const struct envsrc *s, struct dpt_err *err)
{
  int rc;
  const char *ntasks = ev(s, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  const char *tpn;

  if ((rc = need(s, "SLURM_PROCID", ntasks, &c->size, err)) < 0)
    return rc;
  if ((rc = need(s, "SLURM_PROCID", "SLURM_LOCALID", &c->local_rank, err)) < 0)
    return rc;
  if ((rc = need(s, "SLURM_PROCID", "SLURM_NODEID", &c->node_id, err)) < 0)
    return rc;
  if (env_int(s, "SLURM_NNODES", &c->n_nodes, err) < 0)
    return err->code;
  if (c->n_nodes < 0 && env_int(s, "SLURM_JOB_NUM_NODES", &c->n_nodes, err) < 0)
    return err->code;
  tpn = ev(s, "SLURM_STEP_TASKS_PER_NODE") ? ev(s, "SLURM_STEP_TASKS_PER_NODE")
                                           : ev(s, "SLURM_TASKS_PER_NODE");
  if (tpn) {
    c->local_size = slurm_tasks_on_node(tpn, c->node_id);
    if (c->local_size < 0)
      return dpt_err_set(err, DPT_E_INPUT,
                         "SLURM_TASKS_PER_NODE=\"%s\" cannot be parsed or has no entry for "
                         "SLURM_NODEID=%d (expected e.g. \"2(x3),1\")", tpn, c->node_id);
  }
  if (ev(s, "SLURMD_NODENAME"))
    copy(c->node_name, sizeof c->node_name, ev(s, "SLURMD_NODENAME"));
  if (ev(s, "SLURM_JOB_ID")) {
    if (ev(s, "SLURM_STEP_ID"))
      snprintf(c->job_id, sizeof c->job_id, "%.30s.%.30s", ev(s, "SLURM_JOB_ID"),
               ev(s, "SLURM_STEP_ID"));
    else
      copy(c->job_id, sizeof c->job_id, ev(s, "SLURM_JOB_ID"));
  }
  copy(c->source, sizeof c->source, "slurm");
  return 0;
}

const char *dpt_ctx_launcher(dpt_ctx_getenv_fn get, void *arg)
{
  static const struct {
    const char *var, *name;
  } by_var[] = {{"DPT_RANK", "dpt-launch"}, {"OMPI_COMM_WORLD_RANK", "mpirun"},
                {"SLURM_PROCID", "srun"}, {"PMIX_RANK", "pmix"}};
  const struct envsrc s = {get, arg};
  const char *l = ev(&s, "DPT_LAUNCHER");

  if (l && !strcmp(l, "spank"))
    return "spank";
  if (l && !strcmp(l, "dpt-launch"))
    return "dpt-launch";
  for (size_t i = 0; i < sizeof by_var / sizeof by_var[0]; i++)
    if (ev(&s, by_var[i].var))
      return by_var[i].name;
  return "single";
}

int dpt_ctx_load(struct dpt_ctx *c, dpt_ctx_getenv_fn get, void *arg, struct dpt_err *err)
{
  struct envsrc s = {get, arg};
  int dpt_rank = -1, ompi_rank = -1, slurm_rank = -1, pmix_rank = -1;
  int rc;

  memset(c, 0, sizeof *c);
  c->rank = 0;
  c->size = 1;
  c->local_rank = c->local_size = c->node_id = c->n_nodes = -1;
  copy(c->launcher, sizeof c->launcher, dpt_ctx_launcher(get, arg));

  if ((rc = env_int(&s, "DPT_RANK", &dpt_rank, err)) < 0 ||
      (rc = env_int(&s, "OMPI_COMM_WORLD_RANK", &ompi_rank, err)) < 0 ||
      (rc = env_int(&s, "PMIX_RANK", &pmix_rank, err)) < 0 ||
      (rc = env_int(&s, "SLURM_PROCID", &slurm_rank, err)) < 0)
    return rc;

  if (dpt_rank >= 0) {
    c->rank = dpt_rank;
    if ((rc = load_dpt(c, &s, err)) < 0)
      return rc;
  } else if (ompi_rank >= 0) {
    c->rank = ompi_rank;
    if ((rc = load_ompi(c, &s, err)) < 0)
      return rc;
  } else if (slurm_rank >= 0) {
    c->rank = slurm_rank;
    if ((rc = load_slurm(c, &s, err)) < 0)
      return rc;
  } else if (pmix_rank >= 0) {
    c->rank = pmix_rank;
    c->size = -1;
    copy(c->source, sizeof c->source, "pmix");
  } else {
    copy(c->source, sizeof c->source, "single");
    c->local_rank = 0;
    c->local_size = 1;
    c->node_id = 0;
    c->n_nodes = 1;
  }

  /* Cross-checks between sources that describe the same world. */
  if (dpt_rank >= 0 && ompi_rank >= 0 && dpt_rank != ompi_rank)
    return dpt_err_set(err, DPT_E_INPUT,
                       "DPT_RANK=%d but OMPI_COMM_WORLD_RANK=%d: dpt-launch and mpirun disagree "
                       "on this rank (was the rankfile edited, or DPT_* inherited from an outer "
                       "job? unset DPT_RANK)", dpt_rank, ompi_rank);
  if (ompi_rank >= 0 && pmix_rank >= 0 && ompi_rank != pmix_rank)
    return dpt_err_set(err, DPT_E_INPUT,
                       "OMPI_COMM_WORLD_RANK=%d but PMIX_RANK=%d: inconsistent launcher "
                       "variables (stale environment from an outer job?)", ompi_rank, pmix_rank);
  if (dpt_rank < 0 && ompi_rank < 0 && slurm_rank >= 0 && pmix_rank >= 0 &&
      slurm_rank != pmix_rank)
    return dpt_err_set(err, DPT_E_INPUT,
                       "SLURM_PROCID=%d but PMIX_RANK=%d: inconsistent launcher variables",
                       slurm_rank, pmix_rank);
  if (!strcmp(c->source, "dpt-launch") || !strcmp(c->source, "ompi")) {
    int sz = -1;
    const char *szname = !strcmp(c->source, "dpt-launch") ? "OMPI_COMM_WORLD_SIZE" : NULL;
    if (szname && env_int(&s, szname, &sz, err) < 0)
      return err->code;
    if (sz >= 0 && sz != c->size)
      return dpt_err_set(err, DPT_E_INPUT, "DPT_SIZE=%d but OMPI_COMM_WORLD_SIZE=%d", c->size,
                         sz);
  }

  {
    const char *rn = !strcmp(c->source, "dpt-launch") ? "DPT_RANK"
                     : !strcmp(c->source, "ompi")     ? "OMPI_COMM_WORLD_RANK"
                     : !strcmp(c->source, "slurm")    ? "SLURM_PROCID"
                                                      : "PMIX_RANK";
    const char *sn = !strcmp(c->source, "dpt-launch") ? "DPT_SIZE"
                     : !strcmp(c->source, "ompi")     ? "OMPI_COMM_WORLD_SIZE"
                                                      : "SLURM_NTASKS";
    if (c->size == 0)
      return dpt_err_set(err, DPT_E_INPUT, "%s=0: a job has at least one rank", sn);
    if ((rc = check_range(rn, c->rank, sn, c->size, err)) < 0)
      return rc;
  }
  if ((rc = check_range("local rank", c->local_rank, "local size", c->local_size, err)) < 0 ||
      (rc = check_range("node id", c->node_id, "number of nodes", c->n_nodes, err)) < 0)
    return rc;
  if (c->size > 0 && c->local_size > c->size)
    return dpt_err_set(err, DPT_E_INPUT, "local size %d exceeds the job size %d (%s variables)",
                       c->local_size, c->size, c->source);

  if (ev(&s, "PMIX_NAMESPACE"))
    copy(c->pmix_namespace, sizeof c->pmix_namespace, ev(&s, "PMIX_NAMESPACE"));
  if (ev(&s, "SLURM_TOPOLOGY_ADDR"))
    copy(c->topology_addr, sizeof c->topology_addr, ev(&s, "SLURM_TOPOLOGY_ADDR"));
  if (ev(&s, "SLURM_TOPOLOGY_ADDR_PATTERN"))
    copy(c->topology_pattern, sizeof c->topology_pattern, ev(&s, "SLURM_TOPOLOGY_ADDR_PATTERN"));
  if (!c->node_name[0] && gethostname(c->node_name, sizeof c->node_name - 1) != 0)
    copy(c->node_name, sizeof c->node_name, "localhost");
  c->node_name[sizeof c->node_name - 1] = '\0';
  return 0;
}

static const char *real_getenv(void *arg, const char *name)
{
  (void)arg;
  return getenv(name);
}

int dpt_ctx_from_env(struct dpt_ctx *ctx, struct dpt_err *err)
{
  return dpt_ctx_load(ctx, real_getenv, NULL, err);
}

const char *dpt_ctx_launcher_from_env(void)
{
  return dpt_ctx_launcher(real_getenv, NULL);
}

void dpt_ctx_describe(const struct dpt_ctx *c, char *buf, unsigned long len)
{
  snprintf(buf, len, "rank %d/%d local %d/%d node %d/%d (%s) via %s", c->rank, c->size,
           c->local_rank, c->local_size, c->node_id, c->n_nodes, c->node_name, c->launcher);
}
