/* dpt_boot.c — see dpt_boot.h: create (exchange 1, the node records; the plan and exchange 2
 * in dpt_boot_plan.c, the transports in dpt_boot_xport.c), dpt_boot_init. */
#include "dpt_boot_int.h"
#include "dpt_env.h"
#include "dpt_strv.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <mpi.h>

#include "dpt_bind.h"

void dpt_boot_opts_init(struct dpt_boot_opts *o)
{
  memset(o, 0, sizeof *o);
  o->threads_per_rank = -1;
  o->fp16 = -1;
  o->bind = 1;
}

/* ------------------------------------------------------------ helpers */

static uint64_t fnv64(const char *s)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* A digest of the node as the planner sees it (host name and source left out). */
static int node_digest(const struct dpt_node *node, char out[17], struct dpt_err *err)
{
  json_t *doc = dpt_node_to_json(node);
  char *s;
  if (!doc)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  json_object_del(doc, "hostname");
  json_object_del(doc, "source");
  s = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(doc);
  if (!s)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  snprintf(out, 17, "%016" PRIx64, fnv64(s));
  free(s);
  return 0;
}

void dpt_boot_strings_free(char **all, int n)
{
  dpt_strv_free(all, n);
}

/* ------------------------------------------------------------ records */

static char *rec_encode(const struct dpt_boot_rec *r)
{
  json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:s, s:s}", "h", r->host, "x",
                        r->host_index, "a", r->addr, "p", r->pattern, "g", r->gpus, "c", r->hcas,
                        "u", r->pus, "t", r->topo, "s", r->topo_src);
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static int rec_decode(const char *s, int rank, struct dpt_boot_rec *r, struct dpt_err *err)
{
  json_error_t je;
  json_t *o = json_loads(s, 0, &je);
  const char *h = NULL, *a = NULL, *p = NULL, *t = NULL, *src = NULL;
  int rc = 0;
  memset(r, 0, sizeof *r);
  if (!o || json_unpack_ex(o, &je, 0, "{s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:s, s:s}", "h", &h,
                           "x", &r->host_index, "a", &a, "p", &p, "g", &r->gpus, "c", &r->hcas,
                           "u", &r->pus, "t", &t, "s", &src) < 0 ||
      strlen(h) >= sizeof r->host || strlen(a) >= sizeof r->addr ||
      strlen(p) >= sizeof r->pattern || strlen(t) >= sizeof r->topo) {
    rc = dpt_err_set(err, DPT_E_RUNTIME,
                     "bootstrap: rank %d published an unreadable node record (%s): is every rank "
                     "the same dpt version?", rank, je.text);
  } else {
    snprintf(r->host, sizeof r->host, "%s", h);
    snprintf(r->addr, sizeof r->addr, "%s", a);
    snprintf(r->pattern, sizeof r->pattern, "%s", p);
    snprintf(r->topo, sizeof r->topo, "%s", t);
    snprintf(r->topo_src, sizeof r->topo_src, "%s", src);
  }
  json_decref(o);
  return rc;
}

/* ------------------------------------------------------------ create */

static int resolve_opts(const struct dpt_boot_opts *o, struct dpt_boot_in *in, struct dpt_err *err)
{
  const char *t;
  int rc;
  dpt_job_init(&in->job);
  if ((rc = dpt_job_from_env(&in->job, err)) < 0)
    return dpt_err_prefix(err, "bootstrap");
  if (o->node_xml) {
    in->job.node_source = DPT_JOB_NODE_XML;
    in->job.node_path = o->node_xml;
  } else if (o->gpus_per_node > 0 && in->job.node_source != DPT_JOB_NODE_XML) {
    in->job.node_source = DPT_JOB_NODE_GPUS;
    in->job.gpus_per_node = o->gpus_per_node;
  }
  if (o->threads_per_rank >= 0)
    in->job.threads_per_rank = o->threads_per_rank;
  if (o->fp16 >= 0)
    in->job.model.fp16 = o->fp16;
  in->job.node_what = ""; /* load_node names it */
  t = o->tree ? o->tree : dpt_env_str("DPT_PLAN_TREE") ? dpt_env_str("DPT_PLAN_TREE") : "auto";
  if (strcmp(t, "auto") && strcmp(t, "addr") && strcmp(t, "flat"))
    return dpt_err_set(err, DPT_E_INPUT,
                       "plan tree \"%.32s\" (DPT_PLAN_TREE): choose auto, addr or flat", t);
  snprintf(in->tree, sizeof in->tree, "%s", t);
  return 0;
}

/* "xml PATH", "N GPUs", "HWLOC_XMLFILE" or "live": where this rank's node comes from. */
static void node_source(const struct dpt_boot_in *in, char *src, size_t srclen)
{
  if (in->job.node_source == DPT_JOB_NODE_XML)
    snprintf(src, srclen, "xml %.150s", in->job.node_path);
  else if (in->job.node_source == DPT_JOB_NODE_GPUS)
    snprintf(src, srclen, "%d GPUs", in->job.gpus_per_node);
  else
    snprintf(src, srclen, "%s", dpt_env_str("HWLOC_XMLFILE") ? "HWLOC_XMLFILE" : "live");
}

static int load_node(const struct dpt_boot_in *in, const char *host, struct dpt_node **node,
                     char *src, size_t srclen, struct dpt_err *err)
{
  int rc = dpt_job_load_node(&in->job, host, node, err);
  node_source(in, src, srclen);
  if (rc < 0)
    dpt_err_prefix(err, "bootstrap: this node's topology (%s)", src);
  return rc;
}

/* Exchange 1: this rank's record (host, index, switch address, node digest) to everyone,
 * everyone's into *recs_out ([lsize]) and this node into *node.  A rank that cannot describe
 * its node still takes part (its record says why) so that the others fail instead of hanging;
 * then every rank names the first such rank. */
static int exchange_records(struct dpt_boot *b, const struct dpt_boot_in *in,
                            struct dpt_node **node, struct dpt_boot_rec **recs_out,
                            struct dpt_err *err)
{
  struct dpt_boot_rec mine, *recs = NULL;
  struct dpt_err lerr;
  char *enc = NULL, **all = NULL;
  int rc;

  memset(&mine, 0, sizeof mine);
  snprintf(mine.host, sizeof mine.host, "%.63s", b->ctx.node_name);
  mine.host_index = -1;
  if ((rc = dpt_env_int("DPT_HOST_INDEX", 0, INT_MAX, NULL, &mine.host_index, err)) < 0)
    return rc;
  if (rc == 0 && !strcmp(b->ctx.source, "slurm"))
    mine.host_index = b->ctx.node_id;
  snprintf(mine.addr, sizeof mine.addr, "%s", b->ctx.topology_addr);
  snprintf(mine.pattern, sizeof mine.pattern, "%s", b->ctx.topology_pattern);
  dpt_err_clear(&lerr);
  if (load_node(in, mine.host, node, mine.topo_src, sizeof mine.topo_src, &lerr) < 0 ||
      node_digest(*node, mine.topo, &lerr) < 0) {
    snprintf(mine.topo, sizeof mine.topo, "failed");
    snprintf(mine.topo_src, sizeof mine.topo_src, "%.150s", lerr.msg);
  } else {
    mine.gpus = (*node)->n_gpus;
    mine.hcas = (*node)->n_hcas;
    mine.pus = (*node)->n_pus;
  }
  if (!(enc = rec_encode(&mine))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if ((rc = dpt_boot_allgather(b, enc, &all, err)) < 0)
    goto out;
  if (!(recs = calloc((size_t)b->lsize, sizeof *recs))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  for (int r = 0; r < b->lsize; r++)
    if ((rc = rec_decode(all[r], r, &recs[r], err)) < 0)
      goto out;
  for (int r = 0; r < b->lsize; r++)
    if (!strcmp(recs[r].topo, "failed")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "bootstrap: rank %d on %s cannot load its node "
                       "topology: %s", r, recs[r].host, recs[r].topo_src);
      goto out;
    }
  *recs_out = recs;
  recs = NULL;
out:
  if (all)
    dpt_boot_strings_free(all, b->lsize);
  free(recs);
  free(enc);
  return rc;
}

/* A rank-local planning failure (err): said to the others, who would otherwise wait for
 * this rank in exchange 2 (dpt_boot_plan_agree names it). */
static void tell_plan_failed(struct dpt_boot *b, const struct dpt_err *err)
{
  struct dpt_err e2;
  char **x = NULL;
  char m[600];
  snprintf(m, sizeof m, "! %.500s", err->msg);
  dpt_err_clear(&e2);
  dpt_boot_allgather(b, m, &x, &e2);
  dpt_boot_strings_free(x, b->lsize);
}

int dpt_boot_create(struct dpt_boot **out, const struct dpt_boot_opts *opts_in,
                    struct dpt_err *err)
{
  struct dpt_boot *b = NULL;
  struct dpt_boot_opts defaults;
  const struct dpt_boot_opts *opts = opts_in;
  struct dpt_boot_in in;
  struct dpt_node *node = NULL;
  struct dpt_boot_rec *recs = NULL;
  const char *expect;
  int rc;

  *out = NULL;
  if (!opts) {
    dpt_boot_opts_init(&defaults);
    opts = &defaults;
  }
  if (!(b = calloc(1, sizeof *b)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  if ((rc = dpt_ctx_from_env(&b->ctx, err)) < 0 || (rc = resolve_opts(opts, &in, err)) < 0 ||
      (rc = dpt_boot_xport_start(b, opts->transport, err)) < 0)
    goto fail;
  if (b->ctx.size > 0 && strcmp(b->ctx.source, "single") && b->ctx.size != b->lsize) {
    rc = dpt_err_set(err, DPT_E_INPUT,
                     "bootstrap: the launcher's variables say %d ranks (%s) but %s says %d: "
                     "stale variables from an outer job?", b->ctx.size, b->ctx.source,
                     b->transport, b->lsize);
    goto fail;
  }
  if ((rc = exchange_records(b, &in, &node, &recs, err)) < 0)
    goto fail;
  if ((rc = dpt_boot_plan_compute(b, recs, &in, node, err)) < 0) {
    tell_plan_failed(b, err);
    goto fail;
  }
  expect = opts->expect_digest ? opts->expect_digest : dpt_env_str("DPT_PLAN_DIGEST");
  if ((rc = dpt_boot_plan_agree(b, &in, expect, err)) < 0)
    goto fail;
  /* oversubscription asked for (DPT_OVERSUBSCRIBE=1): said once, unless the launcher
   * that planned the job (it announced the digest) said it already */
  if (b->note[0] && b->lrank == 0 && !(expect && *expect))
    fprintf(stderr, "dpt: bootstrap: %s\n", b->note);
  b->ctx.size = b->lsize;
  b->ctx.node_id = b->plan->ranks[b->rank].node;
  b->ctx.n_nodes = b->plan->n_nodes;
  b->ctx.local_rank = b->plan->ranks[b->rank].local_rank;
  b->ctx.local_size = b->plan->nodes[b->ctx.node_id].n_ranks;
  dpt_node_destroy(node);
  free(recs);
  *out = b;
  return 0;
fail:
  dpt_node_destroy(node);
  free(recs);
  dpt_boot_destroy(b);
  return rc;
}

void dpt_boot_destroy(struct dpt_boot *b)
{
  if (!b)
    return;
  dpt_boot_xport_stop(b);
  dpt_plan_destroy(b->plan);
  free(b->plan_of);
  free(b->launcher_of);
  free(b);
}

const struct dpt_plan *dpt_boot_plan(const struct dpt_boot *b) { return b->plan; }
const struct dpt_ctx *dpt_boot_ctx(const struct dpt_boot *b) { return &b->ctx; }
int dpt_boot_rank(const struct dpt_boot *b) { return b->rank; }
int dpt_boot_size(const struct dpt_boot *b) { return b->lsize; }
int dpt_boot_launcher_rank(const struct dpt_boot *b) { return b->lrank; }
const char *dpt_boot_transport(const struct dpt_boot *b) { return b->transport; }
const char *dpt_boot_digest(const struct dpt_boot *b) { return b->plan->digest; }

int dpt_boot_launcher_rank_of(const struct dpt_boot *b, int plan_rank)
{
  return plan_rank >= 0 && plan_rank < b->lsize ? b->launcher_of[plan_rank] : -1;
}

/* ------------------------------------------------------------ init */

/* dpt_comm_opts.bcast_id: ring position 0 is plan rank 0 (ring position = plan rank). */
static int boot_bcast_nccl_id(void *ctx, void *buf, size_t len, struct dpt_err *err)
{
  return dpt_boot_bcast_blob(ctx, 0, buf, len, err);
}

int dpt_boot_init(int *argc, char ***argv, const struct dpt_boot_opts *opts_in,
                  struct dpt_boot **boot, struct dpt_comm **comm, struct dpt_err *err)
{
  struct dpt_boot_opts defaults;
  const struct dpt_boot_opts *opts = opts_in;
  struct dpt_comm_opts co;
  int rc;

  *boot = NULL;
  *comm = NULL;
  if (!opts) {
    dpt_boot_opts_init(&defaults);
    opts = &defaults;
  }
  if ((rc = dpt_comm_mpi_init(argc, argv, err)) < 0)
    return rc;
  if ((rc = dpt_boot_create(boot, opts, err)) < 0)
    return rc;
  if (opts->bind && !dpt_env_str("DPT_LAUNCHER") && !dpt_env_str("DPT_CPUSET")) {
    /* Nobody bound us (plain mpirun / srun without --dpt): do it now, inside
     * the affinity the launcher gave, before any thread or CUDA context. */
    const struct dpt_plan_rank *rk = &(*boot)->plan->ranks[(*boot)->rank];
    char bound[256], report[256];
    if ((rc = dpt_bind_env_self((*boot)->plan, (*boot)->rank, err)) < 0 ||
        (rc = dpt_bind_apply_cpu_ex(rk->cpuset, rk->numa,
                                    DPT_BIND_WITHIN | DPT_BIND_KEEP_IF_EMPTY, bound, sizeof bound,
                                    report, sizeof report, err)) < 0 ||
        (rc = setenv("DPT_CPUS_BOUND", bound, 1) ? DPT_E_RUNTIME : 0) < 0 ||
        (rc = setenv("DPT_BIND_APPLIED", report, 1) ? DPT_E_RUNTIME : 0) < 0 || /* job report */
        (rc = setenv("DPT_LAUNCHER", "boot", 1) ? DPT_E_RUNTIME : 0) < 0)
      goto fail;
  }
  dpt_comm_opts_init(&co);
  co.name = opts->comm ? opts->comm : dpt_env_str("DPT_COMM") ? dpt_env_str("DPT_COMM") : "ring";
  co.ring_pos = (*boot)->rank;
  co.node = (*boot)->plan->ranks[(*boot)->rank].node;
  co.watchdog_s = opts->watchdog_s;
  co.bcast_id = boot_bcast_nccl_id; /* the NCCL unique id travels like the plan: over PMIx */
  co.bcast_ctx = *boot;
  if ((rc = dpt_comm_create(comm, MPI_COMM_WORLD, &co, err)) < 0)
    goto fail;
  return 0;
fail:
  dpt_boot_destroy(*boot);
  *boot = NULL;
  *comm = NULL;
  return rc;
}

void dpt_boot_fini(struct dpt_boot *boot, struct dpt_comm *comm)
{
  int inited = 0, fin = 0;
  dpt_comm_destroy(comm);
  dpt_boot_destroy(boot);
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin)
    MPI_Finalize();
}
