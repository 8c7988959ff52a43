/* dpt_spank_plan.c — see dpt_spank_plan.h */
#include "dpt_spank_plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NODES 65536
#define MAX_WORLD (1 << 16) /* 65,536 ranks: bounds the task's allocation */
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

/* One profile "hcas/rank/rank..." into hcas and ranks[0..n) (local_rank, gpu,
 * busid, numa, threads, cpuset; rank/node are filled per node later). */
static int parse_profile(char *p, int j, char *hcas, size_t hcas_len, struct dpt_plan_rank *ranks,
                         int n, struct dpt_err *err)
{
  char *piece[MAX_LOCAL + 1], *rf[6];
  int rc = 0;
  if (split(p, '/', piece, MAX_LOCAL + 1) != n + 1 || copy_field(hcas, hcas_len, piece[0], HCA_CHARS) < 0)
    BAD("profile %d: bad HCA list", j);
  for (int l = 0; l < n; l++) {
    struct dpt_plan_rank *r = &ranks[l];
    if (split(piece[1 + l], '+', rf, 6) != 5)
      BAD("profile %d rank %d: expected gpu+busid+numa+threads+cpuset", j, l);
    r->local_rank = l;
    if (to_int(rf[0], -1, 1023, &r->gpu) < 0 ||
        copy_field(r->gpu_busid, sizeof r->gpu_busid, rf[1], BUSID_CHARS) < 0 ||
        to_int(rf[2], -1, 65535, &r->numa) < 0 || to_int(rf[3], 0, 4096, &r->threads) < 0 ||
        copy_field(r->cpuset, sizeof r->cpuset, rf[4], CPUSET_CHARS) < 0)
      BAD("profile %d rank %d: a field is out of range or has bad characters", j, l);
  }
fail:
  return rc;
}

static int by_first(const void *a, const void *b)
{
  const struct dpt_plan_node *x = a, *y = b;
  return (x->first_rank > y->first_rank) - (x->first_rank < y->first_rank);
}

int dpt_spank_plan_decode(const char *s, int node_id, const char *host, int local_id,
                          int local_count, struct dpt_spank_task *out, struct dpt_plan **plan_out,
                          struct dpt_err *err)
{
  char *buf = NULL, **nodes = NULL, **profs = NULL;
  struct dpt_plan_rank **pr = NULL; /* [n_prof] parsed profiles, [nprof[j]] ranks each */
  int *nprof = NULL;
  char (*phcas)[256] = NULL;        /* [n_prof] HCA lists */
  unsigned char *seen = NULL;
  struct dpt_plan *plan = NULL;
  char *top[6], *nf[4];
  int rc = 0, n_nodes = 0, n_prof = 0, world, me = -1;
  size_t len;

  memset(out, 0, sizeof *out);
  if (plan_out)
    *plan_out = NULL;
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
  if (strlen(top[1]) != 16 || strspn(top[1], "0123456789abcdef") != 16)
    BAD("bad digest field");
  if (to_int(top[2], 1, MAX_WORLD, &world) < 0)
    BAD("bad rank count '%.16s' (1..%d)", top[2], MAX_WORLD);

  nodes = calloc(MAX_NODES, sizeof *nodes);
  profs = calloc(MAX_NODES, sizeof *profs);
  seen = calloc((size_t)world, 1);
  if (!nodes || !profs || !seen)
    goto oom;
  if ((n_nodes = split(top[3], ',', nodes, MAX_NODES)) < 0)
    BAD("more than %d nodes", MAX_NODES);
  if ((n_prof = split(top[4], '|', profs, MAX_NODES)) < 0)
    BAD("more than %d profiles", MAX_NODES);
  pr = calloc((size_t)n_prof, sizeof *pr);
  nprof = calloc((size_t)n_prof, sizeof *nprof);
  phcas = calloc((size_t)n_prof, sizeof *phcas);
  if (!pr || !nprof || !phcas)
    goto oom;
  for (int j = 0; j < n_prof; j++) {
    int n = 0;
    for (const char *p = profs[j]; *p; p++)
      n += *p == '/';
    if (n < 1 || n > MAX_LOCAL)
      BAD("profile %d has %d ranks (1..%d expected)", j, n, MAX_LOCAL);
    nprof[j] = n;
    if (!(pr[j] = calloc((size_t)n, sizeof **pr)))
      goto oom;
    if ((rc = parse_profile(profs[j], j, phcas[j], sizeof phcas[j], pr[j], n, err)) < 0)
      goto fail;
  }
  if (node_id < 0 || node_id >= n_nodes)
    BAD("this is node %d of the step but the plan has %d nodes (was the variable inherited from another step?)",
        node_id, n_nodes);

  /* the plan: nodes in Slurm's order first, sorted into ring order below */
  if (!(plan = calloc(1, sizeof *plan)) || !(plan->nodes = calloc((size_t)n_nodes, sizeof *plan->nodes)) ||
      !(plan->ranks = calloc((size_t)world, sizeof *plan->ranks)))
    goto oom;
  plan->n_nodes = n_nodes;
  plan->n_ranks = world;
  memcpy(plan->digest, top[1], 17);
  for (int i = 0; i < n_nodes; i++) {
    struct dpt_plan_node *nd = &plan->nodes[i];
    int p, first;
    if (split(nodes[i], '/', nf, 4) != 3 || !nf[0][0] || strlen(nf[0]) >= sizeof nd->host ||
        !field_ok(nf[0], HOST_CHARS))
      BAD("node entry %d is not host/first_rank/profile", i);
    if (to_int(nf[1], 0, world - 1, &first) < 0 || to_int(nf[2], 0, n_prof - 1, &p) < 0)
      BAD("node entry %d (%s) has a bad rank or profile index", i, nf[0]);
    if (first + nprof[p] > world)
      BAD("node %s: ranks %d..%d exceed the plan's %d ranks", nf[0], first, first + nprof[p] - 1, world);
    for (int r = first; r < first + nprof[p]; r++) {
      if (seen[r])
        BAD("rank %d is on two nodes", r);
      seen[r] = 1;
    }
    snprintf(nd->host, sizeof nd->host, "%s", nf[0]);
    nd->host_index = i;
    nd->first_rank = first;
    nd->n_ranks = nprof[p];
    snprintf(nd->hcas, sizeof nd->hcas, "%s", phcas[p]);
    memcpy(&plan->ranks[first], pr[p], (size_t)nprof[p] * sizeof *plan->ranks);
  }
  for (int r = 0; r < world; r++)
    if (!seen[r])
      BAD("rank %d is on no node", r);
  qsort(plan->nodes, (size_t)n_nodes, sizeof *plan->nodes, by_first);
  for (int i = 0; i < n_nodes; i++) {
    const struct dpt_plan_node *nd = &plan->nodes[i];
    for (int r = nd->first_rank; r < nd->first_rank + nd->n_ranks; r++) {
      plan->ranks[r].rank = r;
      plan->ranks[r].node = i;
    }
    if (nd->host_index == node_id)
      me = i;
  }

  /* this task */
  out->node_ring = me;
  out->node = plan->nodes[me];
  if (host && strcmp(host, out->node.host) != 0)
    BAD("node %d of the step is '%s' in the plan but this node is '%.64s'", node_id, out->node.host, host);
  if (local_count != out->node.n_ranks)
    BAD("Slurm started %d tasks on %s but the plan has %d ranks there (use --ntasks-per-node to match "
        "the GPUs, or --dpt=ranks-per-gpu=K)", local_count, out->node.host, out->node.n_ranks);
  if (local_id < 0 || local_id >= out->node.n_ranks)
    BAD("local task %d is out of range 0..%d", local_id, out->node.n_ranks - 1);
  out->rank = plan->ranks[out->node.first_rank + local_id];
  memcpy(out->digest, plan->digest, 17);
  out->world = world;
  out->n_nodes = n_nodes;
  if (plan_out) {
    *plan_out = plan;
    plan = NULL;
  }
  goto fail;
oom:
  rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory decoding " DPT_SPANK_PLAN_ENV);
fail:
  free(buf);
  free(nodes);
  free(profs);
  for (int j = 0; pr && j < n_prof; j++)
    free(pr[j]);
  free(pr);
  free(nprof);
  free(phcas);
  free(seen);
  dpt_plan_destroy(plan);
  if (rc < 0)
    memset(out, 0, sizeof *out);
  return rc;
}
