/* dpt_boot.c — see dpt_boot.h */
#include "dpt_boot.h"
#include "dpt_env.h"
#include "dpt_strv.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <mpi.h>

#ifdef DPT_HAVE_PMIX
#include <pmix.h>
#endif

#include "dpt_bind.h"
#include "dpt_job.h"
#include "dpt_node.h"
#include "dpt_tree.h"

#define STR_MAX (64 * 1024) /* one rank's record */

struct rec {        /* exchange 1: one rank's view */
  char host[64];
  int host_index;   /* -1 unknown */
  char addr[256];
  char pattern[256];
  int gpus, hcas, pus;
  char topo[17];    /* node digest */
  char topo_src[160];
};

struct dpt_boot {
  struct dpt_ctx ctx;
  char transport[8];
  int lrank, lsize;       /* launcher rank / size */
  int rank;               /* plan rank */
  int *plan_of;           /* [lsize] plan rank of each launcher rank */
  int *launcher_of;       /* [lsize] launcher rank of each plan rank */
  struct dpt_plan *plan;
  unsigned seq;           /* exchanges so far (PMIx key names) */
  int mpi_inited_here;
  char note[512];         /* dpt_job_plan: what oversubscribed ranks share, "" if none */
#ifdef DPT_HAVE_PMIX
  pmix_proc_t me;
  int pmix_inited;
#endif
};

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

/* ranks "0-3,7" of launcher ranks with sel[i] set, into buf. */
static void rank_list(const int *sel, int n, char *buf, size_t len)
{
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o + 24 < len; i++) {
    int j = i;
    if (!sel[i])
      continue;
    while (j + 1 < n && sel[j + 1])
      j++;
    o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", i);
    if (j > i)
      o += (size_t)snprintf(buf + o, len - o, "-%d", j);
    i = j;
  }
}

void dpt_boot_strings_free(char **all, int n)
{
  dpt_strv_free(all, n);
}

/* ------------------------------------------------------------ transports */

#ifdef DPT_HAVE_PMIX
static int pmix_fail(struct dpt_err *err, const char *what, pmix_status_t st)
{
  return dpt_err_set(err, DPT_E_RUNTIME,
                     "bootstrap over PMIx: %s failed: %s (is the job started by a PMIx server: "
                     "srun --mpi=pmix or mpirun? DPT_BOOT=mpi uses MPI instead)",
                     what, PMIx_Error_string(st));
}

static int pmix_fence(struct dpt_boot *b, struct dpt_err *err)
{
  pmix_proc_t all;
  pmix_info_t info;
  bool collect = true;
  pmix_status_t st;
  PMIX_LOAD_PROCID(&all, b->me.nspace, PMIX_RANK_WILDCARD);
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  st = PMIx_Fence(&all, 1, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Fence", st);
  return 0;
}

static int pmix_put(struct dpt_boot *b, const char *key, pmix_value_t *v, struct dpt_err *err)
{
  pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, v);
  (void)b;
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Put", st);
  if ((st = PMIx_Commit()) != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Commit", st);
  return 0;
}

static int pmix_get(struct dpt_boot *b, int rank, const char *key, pmix_value_t **v,
                    struct dpt_err *err)
{
  pmix_proc_t p;
  pmix_status_t st;
  PMIX_LOAD_PROCID(&p, b->me.nspace, (pmix_rank_t)rank);
  st = PMIx_Get(&p, key, NULL, 0, v);
  if (st != PMIX_SUCCESS) {
    char what[600];
    snprintf(what, sizeof what, "PMIx_Get(%s) from rank %d", key, rank);
    return pmix_fail(err, what, st);
  }
  return 0;
}

static int pmix_start(struct dpt_boot *b, struct dpt_err *err)
{
  pmix_status_t st = PMIx_Init(&b->me, NULL, 0);
  pmix_proc_t wild;
  pmix_value_t *v = NULL;
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Init", st);
  b->pmix_inited = 1;
  b->lrank = (int)b->me.rank;
  PMIX_LOAD_PROCID(&wild, b->me.nspace, PMIX_RANK_WILDCARD);
  st = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Get(" PMIX_JOB_SIZE ")", st);
  if (v->type == PMIX_UINT32)
    b->lsize = (int)v->data.uint32;
  else if (v->type == PMIX_INT)
    b->lsize = v->data.integer;
  else
    b->lsize = -1;
  PMIX_VALUE_RELEASE(v);
  if (b->lsize < 1 || b->lrank >= b->lsize)
    return dpt_err_set(err, DPT_E_RUNTIME, "PMIx says rank %d of a job of %d: cannot bootstrap",
                       b->lrank, b->lsize);
  return 0;
}
#endif

static int mpi_start(struct dpt_boot *b, struct dpt_err *err)
{
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (dpt_comm_mpi_init(NULL, NULL, err) < 0)
      return err->code;
    b->mpi_inited_here = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &b->lrank);
  MPI_Comm_size(MPI_COMM_WORLD, &b->lsize);
  return 0;
}

int dpt_boot_allgather(struct dpt_boot *b, const char *mine, char ***all_out, struct dpt_err *err)
{
  char **all = NULL;
  int n = b->lsize, rc = 0;
  size_t len = strlen(mine);

  *all_out = NULL;
  if (len >= STR_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "bootstrap record of %zu bytes (at most %d)", len,
                       STR_MAX - 1);
  if (!(all = calloc((size_t)n, sizeof *all)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  b->seq++;
#ifdef DPT_HAVE_PMIX
  if (!strcmp(b->transport, "pmix")) {
    char key[64];
    pmix_value_t v;
    snprintf(key, sizeof key, "dpt.boot.%u", b->seq);
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = (char *)mine;
    if ((rc = pmix_put(b, key, &v, err)) < 0 || (rc = pmix_fence(b, err)) < 0)
      goto fail;
    for (int r = 0; r < n; r++) {
      pmix_value_t *got = NULL;
      if ((rc = pmix_get(b, r, key, &got, err)) < 0)
        goto fail;
      if (got->type != PMIX_STRING || !got->data.string) {
        PMIX_VALUE_RELEASE(got);
        rc = dpt_err_set(err, DPT_E_RUNTIME, "PMIx key %s of rank %d is not a string", key, r);
        goto fail;
      }
      all[r] = strdup(got->data.string);
      PMIX_VALUE_RELEASE(got);
      if (!all[r]) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
        goto fail;
      }
    }
    *all_out = all;
    return 0;
  }
#endif
  {
    int l = (int)len, *lens = NULL, *displs = NULL, total = 0;
    char *buf = NULL;
    if (!(lens = calloc((size_t)n, sizeof *lens)) || !(displs = calloc((size_t)n, sizeof *displs))) {
      free(lens);
      rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto fail;
    }
    if (MPI_Allgather(&l, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "bootstrap over MPI: MPI_Allgather failed");
    } else {
      for (int r = 0; r < n; r++) {
        displs[r] = total;
        total += lens[r];
      }
      if (!(buf = malloc((size_t)total + 1)))
        rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      else if (MPI_Allgatherv(mine, l, MPI_CHAR, buf, lens, displs, MPI_CHAR, MPI_COMM_WORLD) !=
               MPI_SUCCESS)
        rc = dpt_err_set(err, DPT_E_RUNTIME, "bootstrap over MPI: MPI_Allgatherv failed");
      for (int r = 0; !rc && r < n; r++) {
        if (!(all[r] = malloc((size_t)lens[r] + 1))) {
          rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
          break;
        }
        memcpy(all[r], buf + displs[r], (size_t)lens[r]);
        all[r][lens[r]] = '\0';
      }
    }
    free(buf);
    free(lens);
    free(displs);
    if (rc < 0)
      goto fail;
  }
  *all_out = all;
  return 0;
fail:
  dpt_boot_strings_free(all, n);
  return rc;
}

int dpt_boot_bcast_blob(struct dpt_boot *b, int root, void *buf, size_t len, struct dpt_err *err)
{
  int lroot, rc = 0;
  if (root < 0 || root >= b->lsize)
    return dpt_err_set(err, DPT_E_INPUT, "blob broadcast: root %d is not a rank of 0..%d", root,
                       b->lsize - 1);
  if (len > DPT_BOOT_BLOB_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "blob broadcast: %zu bytes (at most %u)", len,
                       DPT_BOOT_BLOB_MAX);
  lroot = b->launcher_of[root];
  b->seq++;
#ifdef DPT_HAVE_PMIX
  if (!strcmp(b->transport, "pmix")) {
    char key[64];
    pmix_value_t v, *got = NULL;
    snprintf(key, sizeof key, "dpt.blob.%u", b->seq);
    if (b->lrank == lroot) {
      PMIX_VALUE_CONSTRUCT(&v);
      v.type = PMIX_BYTE_OBJECT;
      v.data.bo.bytes = buf;
      v.data.bo.size = len;
      if ((rc = pmix_put(b, key, &v, err)) < 0)
        return rc;
    }
    if ((rc = pmix_fence(b, err)) < 0)
      return rc;
    if (b->lrank == lroot)
      return 0;
    if ((rc = pmix_get(b, lroot, key, &got, err)) < 0)
      return rc;
    if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != len) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "blob broadcast: rank %d (root, plan rank %d) sent %zu bytes, rank %d "
                       "expects %zu: every rank must pass the same length",
                       lroot, root, got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : 0,
                       b->lrank, len);
    } else {
      memcpy(buf, got->data.bo.bytes, len);
    }
    PMIX_VALUE_RELEASE(got);
    return rc;
  }
#endif
  {
    unsigned long long l = len, rl = len;
    if (MPI_Bcast(&rl, 1, MPI_UNSIGNED_LONG_LONG, lroot, MPI_COMM_WORLD) != MPI_SUCCESS)
      return dpt_err_set(err, DPT_E_RUNTIME, "blob broadcast: MPI_Bcast failed");
    if (rl != l)
      return dpt_err_set(err, DPT_E_INPUT,
                         "blob broadcast: rank %d (root, plan rank %d) sends %llu bytes, rank %d "
                         "expects %llu: every rank must pass the same length",
                         lroot, root, rl, b->lrank, l);
    if (len && MPI_Bcast(buf, (int)len, MPI_BYTE, lroot, MPI_COMM_WORLD) != MPI_SUCCESS)
      return dpt_err_set(err, DPT_E_RUNTIME, "blob broadcast: MPI_Bcast failed");
  }
  return 0;
}

/* ------------------------------------------------------------ records */

static char *rec_encode(const struct rec *r)
{
  json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:i, s:s, s:s}", "h", r->host, "x",
                        r->host_index, "a", r->addr, "p", r->pattern, "g", r->gpus, "c", r->hcas,
                        "u", r->pus, "t", r->topo, "s", r->topo_src);
  char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return s;
}

static int rec_decode(const char *s, int rank, struct rec *r, struct dpt_err *err)
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

/* The planning inputs every rank must share: the job as the launcher's
 * variables describe it (dpt_job_from_env: DPT_PLAN_XML / DPT_PLAN_GPUS,
 * DPT_PLAN_THREADS, DPT_FP16, DPT_OVERSUBSCRIBE) with the caller's options on
 * top, and the tree choice (DPT_PLAN_TREE). */
struct plan_in {
  struct dpt_job job;
  char tree[8];
};

static int resolve_opts(const struct dpt_boot_opts *o, struct plan_in *in, struct dpt_err *err)
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
static void node_source(const struct plan_in *in, char *src, size_t srclen)
{
  if (in->job.node_source == DPT_JOB_NODE_XML)
    snprintf(src, srclen, "xml %.150s", in->job.node_path);
  else if (in->job.node_source == DPT_JOB_NODE_GPUS)
    snprintf(src, srclen, "%d GPUs", in->job.gpus_per_node);
  else
    snprintf(src, srclen, "%s", dpt_env_str("HWLOC_XMLFILE") ? "HWLOC_XMLFILE" : "live");
}

static int load_node(const struct plan_in *in, const char *host, struct dpt_node **node,
                     char *src, size_t srclen, struct dpt_err *err)
{
  int rc = dpt_job_load_node(&in->job, host, node, err);
  node_source(in, src, srclen);
  if (rc < 0)
    dpt_err_prefix(err, "bootstrap: this node's topology (%s)", src);
  return rc;
}

/* The plan from everyone's records: same inputs -> same plan on every rank. */
static int compute_plan(struct dpt_boot *b, const struct rec *recs, const struct plan_in *in,
                        const struct dpt_node *node, struct dpt_err *err)
{
  int n = b->lsize, rc = 0, n_hosts = 0, with_addr = 0, first_no = -1, first_addr = -1;
  int *host_of = NULL;      /* [n] host slot of launcher rank */
  int *count = NULL;        /* [n] ranks per host slot */
  int *order = NULL;        /* [n] host slots in host-index order */
  const char **hosts = NULL, **addrs = NULL, **pats = NULL;
  struct dpt_job job;
  char msg[256];

  host_of = calloc((size_t)n, sizeof *host_of);
  count = calloc((size_t)n, sizeof *count);
  order = calloc((size_t)n, sizeof *order);
  hosts = calloc((size_t)n, sizeof *hosts);
  addrs = calloc((size_t)n, sizeof *addrs);
  pats = calloc((size_t)n, sizeof *pats);
  b->plan_of = calloc((size_t)n, sizeof *b->plan_of);
  b->launcher_of = calloc((size_t)n, sizeof *b->launcher_of);
  if (!host_of || !count || !order || !hosts || !addrs || !pats || !b->plan_of || !b->launcher_of) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  /* Node summaries: one topology for the whole job. */
  for (int r = 1; r < n; r++)
    if (strcmp(recs[r].topo, recs[0].topo)) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: rank %d on %s sees a node with %d GPUs, %d HCAs, %d PUs "
                       "(topology digest %s from %s) but rank 0 on %s sees %d GPUs, %d HCAs, %d "
                       "PUs (digest %s from %s): dpt plans jobs whose nodes look alike; give every "
                       "rank the same DPT_PLAN_XML / DPT_PLAN_GPUS or run on identical nodes",
                       r, recs[r].host, recs[r].gpus, recs[r].hcas, recs[r].pus, recs[r].topo,
                       recs[r].topo_src, recs[0].host, recs[0].gpus, recs[0].hcas, recs[0].pus,
                       recs[0].topo, recs[0].topo_src);
      goto out;
    }
  /* Hosts in order of first appearance; host index agreement. */
  for (int r = 0; r < n; r++) {
    int h;
    for (h = 0; h < n_hosts; h++)
      if (!strcmp(hosts[h], recs[r].host))
        break;
    if (h == n_hosts) {
      hosts[n_hosts++] = recs[r].host;
      order[h] = h;
    } else if (recs[r].host_index != recs[b->launcher_of[h]].host_index) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: ranks %d and %d on %s give the host different indexes (%d, "
                       "%d; DPT_HOST_INDEX / SLURM_NODEID): inconsistent launcher variables",
                       b->launcher_of[h], r, recs[r].host, recs[b->launcher_of[h]].host_index,
                       recs[r].host_index);
      goto out;
    }
    if (!count[h])
      b->launcher_of[h] = r; /* first rank of the host (reused below) */
    host_of[r] = h;
    count[h]++;
    if (recs[r].addr[0]) {
      with_addr++;
      if (first_addr < 0)
        first_addr = r;
    } else if (first_no < 0) {
      first_no = r;
    }
  }
  for (int h = 1; h < n_hosts; h++)
    if (count[h] != count[0]) {
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: %d ranks on %s but %d on %s: the plan needs the same number "
                       "of ranks on every node (--ntasks-per-node)", count[0], hosts[0], count[h],
                       hosts[h]);
      goto out;
    }
  /* Host order: the launcher's host indexes when every host has one. */
  {
    int known = 1;
    for (int h = 0; h < n_hosts; h++)
      if (recs[b->launcher_of[h]].host_index < 0)
        known = 0;
    if (known) {
      for (int i = 1; i < n_hosts; i++) /* insertion sort by index */
        for (int j = i; j > 0 && recs[b->launcher_of[order[j - 1]]].host_index >
                                     recs[b->launcher_of[order[j]]].host_index; j--) {
          int t = order[j];
          order[j] = order[j - 1];
          order[j - 1] = t;
        }
      for (int i = 1; i < n_hosts; i++)
        if (recs[b->launcher_of[order[i]]].host_index ==
            recs[b->launcher_of[order[i - 1]]].host_index) {
          rc = dpt_err_set(err, DPT_E_INPUT,
                           "bootstrap: hosts %s and %s both have index %d (DPT_HOST_INDEX / "
                           "SLURM_NODEID): inconsistent launcher variables",
                           hosts[order[i - 1]], hosts[order[i]],
                           recs[b->launcher_of[order[i]]].host_index);
          goto out;
        }
    }
  }
  {
    const char **sorted = calloc((size_t)n_hosts, sizeof *sorted);
    if (!sorted) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto out;
    }
    for (int i = 0; i < n_hosts; i++)
      sorted[i] = hosts[order[i]];
    memcpy(hosts, sorted, sizeof *hosts * (size_t)n_hosts);
    free(sorted);
  }
  /* Tree and plan: the job of these hosts, planned as every caller plans it (dpt_job.h). */
  job = in->job;
  job.hosts = hosts;
  job.n_hosts = n_hosts;
  job.node_source = DPT_JOB_NODE_GIVEN; /* one topology for the whole job (checked above) */
  job.node = node;
  job.ranks_per_node = count[0];
  if (!strcmp(in->tree, "flat") || (!strcmp(in->tree, "auto") && with_addr == 0)) {
    job.tree_source = DPT_JOB_TREE_FLAT;
  } else if (with_addr < n) {
    rc = dpt_err_set(err, DPT_E_INPUT,
                     "bootstrap: rank %d on %s has SLURM_TOPOLOGY_ADDR=\"%s\" but rank %d on %s "
                     "has none: cannot build the switch tree (DPT_PLAN_TREE=flat ignores it)",
                     first_addr, recs[first_addr].host, recs[first_addr].addr,
                     first_no, recs[first_no].host);
    goto out;
  } else {
    for (int r = 0; r < n; r++) {
      addrs[r] = recs[r].addr;
      pats[r] = recs[r].pattern[0] ? recs[r].pattern : NULL;
    }
    job.tree_source = DPT_JOB_TREE_ADDRS;
    job.addrs = addrs;
    job.patterns = pats;
    job.n_addrs = n;
    job.tree_what = "the ranks' SLURM_TOPOLOGY_ADDR";
  }
  if ((rc = dpt_job_plan(&b->plan, &job, b->note, sizeof b->note, err)) < 0) {
    dpt_err_prefix(err, "bootstrap");
    goto out;
  }
  /* Plan rank of every launcher rank: host's first_rank + position among its ranks. */
  {
    int *seen = count; /* reuse: ranks of each host slot seen so far */
    memset(seen, 0, sizeof *seen * (size_t)n);
    for (int r = 0; r < n; r++) {
      int h = host_of[r], node_i = -1;
      const char *hn = recs[r].host;
      for (int k = 0; k < b->plan->n_nodes; k++)
        if (!strcmp(b->plan->nodes[k].host, hn))
          node_i = k;
      if (node_i < 0 || seen[h] >= b->plan->nodes[node_i].n_ranks) {
        snprintf(msg, sizeof msg, "host %s of rank %d", hn, r);
        rc = dpt_err_set(err, DPT_E_RUNTIME, "bootstrap: the plan has no place for %s", msg);
        goto out;
      }
      b->plan_of[r] = b->plan->nodes[node_i].first_rank + seen[h]++;
    }
    for (int r = 0; r < n; r++)
      b->launcher_of[b->plan_of[r]] = r;
  }
  b->rank = b->plan_of[b->lrank];
out:
  free(host_of);
  free(count);
  free(order);
  free(hosts);
  free(addrs);
  free(pats);
  return rc;
}

/* Exchange 2: everyone's digest, options and launcher-announced digest/rank. */
static int check_agreement(struct dpt_boot *b, const struct plan_in *in, const char *expect,
                           struct dpt_err *err)
{
  char mine[512], **all = NULL, ann_rank[16] = "-";
  int n = b->lsize, rc, *sel = NULL;
  const char *dr = dpt_env_str("DPT_RANK");

  if (dr && b->ctx.source[0] && strcmp(b->ctx.source, "single"))
    snprintf(ann_rank, sizeof ann_rank, "%.15s", dr);
  snprintf(mine, sizeof mine, "%s %d %s %s fp16=%d,threads=%d,tree=%s,oversubscribe=%d,topology=%.150s",
           b->plan->digest, b->rank, expect && *expect ? expect : "-", ann_rank, in->job.model.fp16,
           in->job.threads_per_rank, in->tree, in->job.oversubscribe,
           in->job.node_source == DPT_JOB_NODE_XML    ? in->job.node_path
           : in->job.node_source == DPT_JOB_NODE_GPUS ? "synthetic"
                                                      : "local");
  if ((rc = dpt_boot_allgather(b, mine, &all, err)) < 0)
    return rc;
  if (!(sel = calloc((size_t)n, sizeof *sel))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  /* 0. a rank that could not plan says why. */
  for (int r = 0; r < n; r++)
    if (all[r][0] == '!') {
      rc = dpt_err_set(err, DPT_E_INPUT, "bootstrap: rank %d could not compute the plan: %s", r,
                       all[r] + 2);
      goto out;
    }
  /* 1. plan digests: group by rank 0's. */
  {
    int bad = 0, first_bad = -1;
    char d0[17] = "", dx[17] = "";
    sscanf(all[0], "%16s", d0);
    for (int r = 0; r < n; r++) {
      char d[17] = "";
      sscanf(all[r], "%16s", d);
      sel[r] = strcmp(d, d0) != 0;
      if (sel[r] && first_bad < 0) {
        first_bad = r;
        snprintf(dx, sizeof dx, "%s", d);
      }
      bad += sel[r];
    }
    if (bad) {
      char list_bad[256], list_good[256];
      const char *o0 = strrchr(all[0], ' '), *ox = strrchr(all[first_bad], ' ');
      rank_list(sel, n, list_bad, sizeof list_bad);
      for (int r = 0; r < n; r++)
        sel[r] = !sel[r];
      rank_list(sel, n, list_good, sizeof list_good);
      rc = dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: the ranks computed different plans: rank%s %s computed plan "
                       "%s (%s), rank%s %s computed %s (%s): every rank must plan with the same "
                       "inputs (DPT_FP16, DPT_PLAN_THREADS, DPT_PLAN_TREE, DPT_PLAN_XML/"
                       "DPT_PLAN_GPUS, DPT_OVERSUBSCRIBE, dpt version)",
                       strpbrk(list_bad, ",-") ? "s" : "", list_bad, dx, ox ? ox + 1 : "?",
                       strpbrk(list_good, ",-") ? "s" : "", list_good, d0, o0 ? o0 + 1 : "?");
      goto out;
    }
  }
  /* 2. the launcher's digest and ring rank, when it announced them. */
  {
    int bad = 0, first_bad = -1;
    char got[17] = "", exp[64] = "", ann[16] = "";
    for (int r = 0; r < n; r++) {
      char d[17] = "", e[64] = "", a[16] = "";
      int pr = -1;
      sscanf(all[r], "%16s %d %63s %15s", d, &pr, e, a);
      sel[r] = (strcmp(e, "-") && strcmp(e, d)) || (strcmp(a, "-") && atoi(a) != pr);
      if (sel[r] && first_bad < 0) {
        first_bad = r;
        snprintf(got, sizeof got, "%s", d);
        snprintf(exp, sizeof exp, "%s", e);
        snprintf(ann, sizeof ann, "%s", a);
      }
      bad += sel[r];
    }
    if (bad) {
      char list[256];
      int pr = b->plan_of[first_bad];
      rank_list(sel, n, list, sizeof list);
      if (strcmp(exp, "-") && strcmp(exp, got))
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "bootstrap: the launcher announced plan %s (DPT_PLAN_DIGEST) to rank%s %s "
                         "but the ranks computed plan %s at start-up: the launcher planned with "
                         "other inputs (node topology, tree, threads, fp16) or another dpt "
                         "version; check DPT_PLAN_XML/DPT_PLAN_THREADS/DPT_FP16 or unset "
                         "DPT_PLAN_DIGEST", exp, strpbrk(list, ",-") ? "s" : "", list, got);
      else
        rc = dpt_err_set(err, DPT_E_INPUT,
                         "bootstrap: the launcher gave rank %d DPT_RANK=%s but the plan puts it "
                         "at ring position %d (affected: %s): the launcher placed the ranks "
                         "differently from the plan", first_bad, ann, pr, list);
      goto out;
    }
  }
  rc = 0;
out:
  free(sel);
  dpt_boot_strings_free(all, n);
  return rc;
}

int dpt_boot_create(struct dpt_boot **out, const struct dpt_boot_opts *opts_in,
                    struct dpt_err *err)
{
  struct dpt_boot *b = NULL;
  struct dpt_boot_opts defaults;
  const struct dpt_boot_opts *opts = opts_in;
  struct plan_in in;
  struct dpt_node *node = NULL;
  struct rec mine, *recs = NULL;
  char *enc = NULL, **all = NULL;
  const char *tr, *expect;
  int rc;

  *out = NULL;
  if (!opts) {
    dpt_boot_opts_init(&defaults);
    opts = &defaults;
  }
  if (!(b = calloc(1, sizeof *b)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  if ((rc = dpt_ctx_from_env(&b->ctx, err)) < 0 || (rc = resolve_opts(opts, &in, err)) < 0)
    goto fail;
  tr = opts->transport ? opts->transport : dpt_env_str("DPT_BOOT") ? dpt_env_str("DPT_BOOT")
                                                                   : "auto";
  if (strcmp(tr, "auto") && strcmp(tr, "pmix") && strcmp(tr, "mpi")) {
    rc = dpt_err_set(err, DPT_E_INPUT, "bootstrap transport \"%.32s\" (DPT_BOOT): choose auto, "
                     "pmix or mpi", tr);
    goto fail;
  }
  if (!strcmp(tr, "auto"))
#ifdef DPT_HAVE_PMIX
    tr = dpt_env_str("PMIX_NAMESPACE") && dpt_env_str("PMIX_RANK") ? "pmix" : "mpi";
#else
    tr = "mpi";
#endif
#ifndef DPT_HAVE_PMIX
  if (!strcmp(tr, "pmix")) {
    rc = dpt_err_set(err, DPT_E_UNSUPPORTED,
                     "bootstrap: this dpt was built without PMIx (libpmix-dev): use DPT_BOOT=mpi");
    goto fail;
  }
#endif
  snprintf(b->transport, sizeof b->transport, "%s", tr);
#ifdef DPT_HAVE_PMIX
  if (!strcmp(tr, "pmix"))
    rc = pmix_start(b, err);
  else
#endif
    rc = mpi_start(b, err);
  if (rc < 0)
    goto fail;
  if (b->ctx.size > 0 && strcmp(b->ctx.source, "single") && b->ctx.size != b->lsize) {
    rc = dpt_err_set(err, DPT_E_INPUT,
                     "bootstrap: the launcher's variables say %d ranks (%s) but %s says %d: "
                     "stale variables from an outer job?", b->ctx.size, b->ctx.source, tr,
                     b->lsize);
    goto fail;
  }

  /* Exchange 1: node records.  A rank that cannot describe its node still
   * takes part (empty record) so that the others fail instead of hanging. */
  memset(&mine, 0, sizeof mine);
  snprintf(mine.host, sizeof mine.host, "%.63s", b->ctx.node_name);
  mine.host_index = -1;
  if ((rc = dpt_env_int("DPT_HOST_INDEX", 0, INT_MAX, NULL, &mine.host_index, err)) < 0)
    goto fail;
  if (rc == 0 && !strcmp(b->ctx.source, "slurm"))
    mine.host_index = b->ctx.node_id;
  snprintf(mine.addr, sizeof mine.addr, "%s", b->ctx.topology_addr);
  snprintf(mine.pattern, sizeof mine.pattern, "%s", b->ctx.topology_pattern);
  {
    struct dpt_err lerr;
    dpt_err_clear(&lerr);
    if (load_node(&in, mine.host, &node, mine.topo_src, sizeof mine.topo_src, &lerr) < 0 ||
        node_digest(node, mine.topo, &lerr) < 0) {
      snprintf(mine.topo, sizeof mine.topo, "failed");
      snprintf(mine.topo_src, sizeof mine.topo_src, "%.150s", lerr.msg);
    } else {
      mine.gpus = node->n_gpus;
      mine.hcas = node->n_hcas;
      mine.pus = node->n_pus;
    }
  }
  if (!(enc = rec_encode(&mine))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  if ((rc = dpt_boot_allgather(b, enc, &all, err)) < 0)
    goto fail;
  if (!(recs = calloc((size_t)b->lsize, sizeof *recs))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  for (int r = 0; r < b->lsize; r++)
    if ((rc = rec_decode(all[r], r, &recs[r], err)) < 0)
      goto fail;
  for (int r = 0; r < b->lsize; r++)
    if (!strcmp(recs[r].topo, "failed")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "bootstrap: rank %d on %s cannot load its node "
                       "topology: %s", r, recs[r].host, recs[r].topo_src);
      goto fail;
    }
  if ((rc = compute_plan(b, recs, &in, node, err)) < 0) {
    /* A rank-local planning failure: the others would wait in exchange 2. */
    struct dpt_err e2;
    char **x = NULL;
    char m[600];
    snprintf(m, sizeof m, "! %.500s", err->msg);
    dpt_err_clear(&e2);
    dpt_boot_allgather(b, m, &x, &e2);
    dpt_boot_strings_free(x, b->lsize);
    goto fail;
  }
  expect = opts->expect_digest ? opts->expect_digest : dpt_env_str("DPT_PLAN_DIGEST");
  if ((rc = check_agreement(b, &in, expect, err)) < 0)
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
  dpt_boot_strings_free(all, b->lsize);
  free(recs);
  free(enc);
  *out = b;
  return 0;
fail:
  if (all && b)
    dpt_boot_strings_free(all, b->lsize);
  dpt_node_destroy(node);
  free(recs);
  free(enc);
  dpt_boot_destroy(b);
  return rc;
}

void dpt_boot_destroy(struct dpt_boot *b)
{
  if (!b)
    return;
#ifdef DPT_HAVE_PMIX
  if (b->pmix_inited)
    PMIx_Finalize(NULL, 0);
#endif
  if (b->mpi_inited_here) { /* the MPI fallback started MPI: stop it with us */
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
      MPI_Finalize();
  }
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
