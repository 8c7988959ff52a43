/* dpt_spank_plan.c — see dpt_spank_plan.h */
#include "dpt_spank_plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 65536
#define MAX_WORLD (1 << 20)
#define MAX_LOCAL 4096

/* ---- a growable string ------------------------------------------------- */
struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
  va_list ap;
  int n;
  if (b->oom)
    return;
  for (;;) {
    size_t room = b->cap - b->len;
    va_start(ap, fmt);
    n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->p && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap * 2 : 1024;
    while (cap < b->len + (size_t)n + 1)
      cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

/* ---- encode ------------------------------------------------------------- */
static int field_ok(const char *s, const char *extra)
{
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          strchr(extra, c)))
      return 0;
  }
  return 1;
}

#define HOST_CHARS "._-"
#define HCA_CHARS "_,.:-"
#define BUSID_CHARS ":."
#define CPUSET_CHARS ",-"

/* The profile string of plan node i: hcas then its ranks. */
static char *profile_of(const struct dpt_plan *plan, int i, struct dpt_err *err)
{
  const struct dpt_plan_node *nd = &plan->nodes[i];
  struct sbuf b = {0};
  if (!field_ok(nd->hcas, HCA_CHARS))
    return dpt_err_set(err, DPT_E_INPUT, "plan: HCA list '%s' of %s has unexpected characters",
                       nd->hcas, nd->host), NULL;
  sb_printf(&b, "%s", nd->hcas);
  for (int r = nd->first_rank; r < nd->first_rank + nd->n_ranks; r++) {
    const struct dpt_plan_rank *rk = &plan->ranks[r];
    if (rk->node != i || rk->local_rank != r - nd->first_rank) {
      free(b.p);
      return dpt_err_set(err, DPT_E_RUNTIME,
                         "plan: rank %d is not local rank %d of node %s (planner invariant broken)",
                         r, r - nd->first_rank, nd->host), NULL;
    }
    if (!field_ok(rk->gpu_busid, BUSID_CHARS) || !field_ok(rk->cpuset, CPUSET_CHARS)) {
      free(b.p);
      return dpt_err_set(err, DPT_E_INPUT, "plan: rank %d has an unexpected GPU bus id '%s' or cpuset '%s'",
                         r, rk->gpu_busid, rk->cpuset), NULL;
    }
    sb_printf(&b, "/%d+%s+%d+%d+%s", rk->gpu, rk->gpu_busid, rk->numa, rk->threads, rk->cpuset);
  }
  if (b.oom) {
    free(b.p);
    return dpt_err_set(err, DPT_E_NOMEM, "plan: out of memory encoding node %s", nd->host), NULL;
  }
  return b.p;
}

int dpt_spank_plan_encode(const struct dpt_plan *plan, const char *const *hosts, int n_hosts,
                          char **out, struct dpt_err *err)
{
  char **prof = NULL;     /* [n_profiles] distinct profile strings */
  int *node_prof = NULL;  /* [plan->n_nodes] profile index of each plan node */
  int *slurm_to_plan = NULL; /* [n_hosts] plan node index of each Slurm node */
  int n_prof = 0, rc = 0;
  struct sbuf b = {0};

  *out = NULL;
  if (n_hosts != plan->n_nodes)
    return dpt_err_set(err, DPT_E_RUNTIME, "plan has %d nodes but the step has %d", plan->n_nodes, n_hosts);
  prof = calloc((size_t)plan->n_nodes + 1, sizeof *prof);
  node_prof = calloc((size_t)plan->n_nodes + 1, sizeof *node_prof);
  slurm_to_plan = calloc((size_t)n_hosts + 1, sizeof *slurm_to_plan);
  if (!prof || !node_prof || !slurm_to_plan) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory encoding the plan");
    goto fail;
  }
  for (int i = 0; i < plan->n_nodes; i++) {
    char *p = profile_of(plan, i, err);
    int j;
    if (!p) {
      rc = err ? err->code : DPT_E_RUNTIME;
      goto fail;
    }
    for (j = 0; j < n_prof && strcmp(prof[j], p) != 0; j++)
      ;
    if (j == n_prof)
      prof[n_prof++] = p;
    else
      free(p);
    node_prof[i] = j;
  }
  for (int s = 0; s < n_hosts; s++) {
    int i;
    for (i = 0; i < plan->n_nodes && strcmp(plan->nodes[i].host, hosts[s]) != 0; i++)
      ;
    if (i == plan->n_nodes) {
      rc = dpt_err_set(err, DPT_E_RUNTIME, "step node %s is not in the plan", hosts[s]);
      goto fail;
    }
    if (!field_ok(hosts[s], HOST_CHARS) || !hosts[s][0] || strlen(hosts[s]) >= 64) {
      rc = dpt_err_set(err, DPT_E_INPUT, "node name '%s' has unexpected characters", hosts[s]);
      goto fail;
    }
    slurm_to_plan[s] = i;
  }
  sb_printf(&b, "dpt1;%s;%d;", plan->digest, plan->n_ranks);
  for (int s = 0; s < n_hosts; s++) {
    int i = slurm_to_plan[s];
    sb_printf(&b, "%s%s/%d/%d", s ? "," : "", hosts[s], plan->nodes[i].first_rank, node_prof[i]);
  }
  sb_printf(&b, ";");
  for (int j = 0; j < n_prof; j++)
    sb_printf(&b, "%s%s", j ? "|" : "", prof[j]);
  if (b.oom) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory encoding the plan");
    goto fail;
  }
  if (b.len > DPT_SPANK_PLAN_MAX) {
    rc = dpt_err_set(err, DPT_E_INPUT, "the plan's encoding is %zu bytes, over the limit of %d: "
                     "nodes differ too much (one topology per node?)", b.len, DPT_SPANK_PLAN_MAX);
    goto fail;
  }
  *out = b.p;
  b.p = NULL;
fail:
  free(b.p);
  for (int j = 0; prof && j < n_prof; j++)
    free(prof[j]);
  free(prof);
  free(node_prof);
  free(slurm_to_plan);
  return rc;
}

/* ---- decode ------------------------------------------------------------- */

/* Split s at every sep (in place); returns the number of pieces (at most max),
 * -1 when there are more. */
static int split(char *s, char sep, char **piece, int max)
{
  int n = 0;
  for (;;) {
    if (n == max)
      return -1;
    piece[n++] = s;
    char *q = strchr(s, sep);
    if (!q)
      return n;
    *q = '\0';
    s = q + 1;
  }
}

static int to_int(const char *s, long lo, long hi, int *out)
{
  char *end;
  long x;
  if (!*s || strlen(s) > 12)
    return -1;
  if (!((*s >= '0' && *s <= '9') || (*s == '-' && s[1] >= '0' && s[1] <= '9')))
    return -1;
  errno = 0;
  x = strtol(s, &end, 10);
  if (errno || *end || x < lo || x > hi)
    return -1;
  *out = (int)x;
  return 0;
}

static int copy_field(char *dst, size_t cap, const char *src, const char *extra)
{
  size_t n = strlen(src);
  if (n >= cap || !field_ok(src, extra))
    return -1;
  memcpy(dst, src, n + 1);
  return 0;
}

#define BAD(...) do { rc = dpt_err_set(err, DPT_E_INPUT, DPT_SPANK_PLAN_ENV ": " __VA_ARGS__); goto fail; } while (0)

int dpt_spank_plan_decode(const char *s, int node_id, const char *host, int local_id,
                          int local_count, struct dpt_spank_task *out, struct dpt_err *err)
{
  char *buf = NULL, **nodes = NULL, **profs = NULL, **ranks = NULL;
  int *first = NULL, *nprof = NULL;
  unsigned char *seen = NULL;
  char *top[6], *nf[4], *rf[6];
  int rc = 0, n_nodes, n_prof, world, pi, nr;
  size_t len;

  memset(out, 0, sizeof *out);
  if (!s)
    return dpt_err_set(err, DPT_E_INPUT, DPT_SPANK_PLAN_ENV " is not set");
  len = strnlen(s, DPT_SPANK_PLAN_MAX + 1);
  if (len > DPT_SPANK_PLAN_MAX)
    return dpt_err_set(err, DPT_E_INPUT, DPT_SPANK_PLAN_ENV " is longer than %d bytes", DPT_SPANK_PLAN_MAX);
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
      return dpt_err_set(err, DPT_E_INPUT, DPT_SPANK_PLAN_ENV ": byte 0x%02X at offset %zu is not printable ASCII",
                         (unsigned char)s[i], i);
  if (!(buf = malloc(len + 1)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory decoding " DPT_SPANK_PLAN_ENV);
  memcpy(buf, s, len + 1);

  if (split(buf, ';', top, 6) != 5 || strcmp(top[0], "dpt1") != 0)
    BAD("not a dpt1 plan (expected 5 ';'-separated fields starting with dpt1; set by srun --dpt, do not edit)");
  if (strlen(top[1]) != 16 || !field_ok(top[1], "") )
    BAD("bad digest field");
  if (to_int(top[2], 1, MAX_WORLD, &world) < 0)
    BAD("bad rank count '%.16s'", top[2]);

  nodes = calloc(MAX_NODES, sizeof *nodes);
  profs = calloc(MAX_NODES, sizeof *profs);
  ranks = calloc(MAX_LOCAL + 1, sizeof *ranks);
  seen = calloc((size_t)world, 1);
  if (!nodes || !profs || !ranks || !seen) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory decoding " DPT_SPANK_PLAN_ENV);
    goto fail;
  }
  if ((n_nodes = split(top[3], ',', nodes, MAX_NODES)) < 0)
    BAD("more than %d nodes", MAX_NODES);
  if ((n_prof = split(top[4], '|', profs, MAX_NODES)) < 0)
    BAD("more than %d profiles", MAX_NODES);
  first = calloc((size_t)n_nodes, sizeof *first);
  nprof = calloc((size_t)n_prof, sizeof *nprof);
  if (!first || !nprof) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory decoding " DPT_SPANK_PLAN_ENV);
    goto fail;
  }
  /* ranks per profile */
  for (int j = 0; j < n_prof; j++) {
    int n = 0;
    for (const char *p = profs[j]; *p; p++)
      n += *p == '/';
    if (n < 1 || n > MAX_LOCAL)
      BAD("profile %d has %d ranks (1..%d expected)", j, n, MAX_LOCAL);
    nprof[j] = n;
  }
  /* every node: host/first/profile; ranks of all nodes are a permutation of 0..world-1 */
  if (node_id < 0 || node_id >= n_nodes)
    BAD("this is node %d of the step but the plan has %d nodes (was the variable inherited from another step?)",
        node_id, n_nodes);
  pi = -1;
  for (int i = 0; i < n_nodes; i++) {
    int p;
    if (split(nodes[i], '/', nf, 4) != 3 || !nf[0][0] || strlen(nf[0]) >= sizeof out->node.host ||
        !field_ok(nf[0], HOST_CHARS))
      BAD("node entry %d is not host/first_rank/profile", i);
    if (to_int(nf[1], 0, world - 1, &first[i]) < 0 || to_int(nf[2], 0, n_prof - 1, &p) < 0)
      BAD("node entry %d (%s) has a bad rank or profile index", i, nf[0]);
    if (first[i] + nprof[p] > world)
      BAD("node %s: ranks %d..%d exceed the plan's %d ranks", nf[0], first[i], first[i] + nprof[p] - 1, world);
    for (int r = first[i]; r < first[i] + nprof[p]; r++) {
      if (seen[r])
        BAD("rank %d is on two nodes", r);
      seen[r] = 1;
    }
    if (i == node_id) {
      pi = p;
      snprintf(out->node.host, sizeof out->node.host, "%s", nf[0]);
      out->node.first_rank = first[i];
      out->node.n_ranks = nprof[p];
    }
  }
  for (int r = 0; r < world; r++)
    if (!seen[r])
      BAD("rank %d is on no node", r);
  if (host && strcmp(host, out->node.host) != 0)
    BAD("node %d of the step is '%s' in the plan but this node is '%.64s'", node_id, out->node.host, host);
  if (local_count != out->node.n_ranks)
    BAD("Slurm started %d tasks on %s but the plan has %d ranks there (use --ntasks-per-node to match "
        "the GPUs, or --dpt=ranks-per-gpu=K)", local_count, out->node.host, out->node.n_ranks);
  if (local_id < 0 || local_id >= out->node.n_ranks)
    BAD("local task %d is out of range 0..%d", local_id, out->node.n_ranks - 1);
  out->node_ring = 0;
  for (int i = 0; i < n_nodes; i++)
    out->node_ring += first[i] < out->node.first_rank;

  /* this node's profile: hcas/rank/rank... */
  nr = split(profs[pi], '/', ranks, MAX_LOCAL + 1);
  if (nr != out->node.n_ranks + 1 || copy_field(out->node.hcas, sizeof out->node.hcas, ranks[0], HCA_CHARS) < 0)
    BAD("profile %d: bad HCA list", pi);
  if (split(ranks[1 + local_id], '+', rf, 6) != 5)
    BAD("profile %d rank %d: expected gpu+busid+numa+threads+cpuset", pi, local_id);
  out->rank.rank = out->node.first_rank + local_id;
  out->rank.node = out->node_ring;
  out->rank.local_rank = local_id;
  if (to_int(rf[0], -1, 1023, &out->rank.gpu) < 0 ||
      copy_field(out->rank.gpu_busid, sizeof out->rank.gpu_busid, rf[1], BUSID_CHARS) < 0 ||
      to_int(rf[2], -1, 65535, &out->rank.numa) < 0 || to_int(rf[3], 0, 4096, &out->rank.threads) < 0 ||
      copy_field(out->rank.cpuset, sizeof out->rank.cpuset, rf[4], CPUSET_CHARS) < 0)
    BAD("profile %d rank %d: a field is out of range or has bad characters", pi, local_id);
  memcpy(out->digest, top[1], 17);
  out->world = world;
  out->n_nodes = n_nodes;
fail:
  free(buf);
  free(nodes);
  free(profs);
  free(ranks);
  free(first);
  free(nprof);
  free(seen);
  if (rc < 0)
    memset(out, 0, sizeof *out);
  return rc;
}
