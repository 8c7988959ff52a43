/* dpt_ncclring.c — see dpt_ncclring.h */
#define _GNU_SOURCE
#include "dpt_ncclring.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct plan_view {
  int n_ranks, n_nodes;
  int *node_of;       /* [n_ranks] plan node index of each rank */
  const char **host;  /* [n_nodes] */
  const char **group; /* [n_nodes] */
};

static int plan_view(const json_t *plan, struct plan_view *v, struct dpt_err *err)
{
  const json_t *nodes = json_object_get(plan, "nodes"), *ranks = json_object_get(plan, "ranks"), *x;
  size_t i;
  memset(v, 0, sizeof *v);
  v->n_nodes = (int)json_array_size(nodes);
  v->n_ranks = (int)json_array_size(ranks);
  if (v->n_nodes < 1 || v->n_ranks < 1)
    return dpt_err_set(err, DPT_E_INPUT, "the report has no plan with nodes and ranks (plan is null: the "
                       "program was not started by srun --dpt or dpt-launch)");
  v->node_of = calloc((size_t)v->n_ranks, sizeof *v->node_of);
  v->host = calloc((size_t)v->n_nodes, sizeof *v->host);
  v->group = calloc((size_t)v->n_nodes, sizeof *v->group);
  if (!v->node_of || !v->host || !v->group)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  json_array_foreach(nodes, i, x) {
    v->host[i] = json_string_value(json_object_get(x, "host")) ? json_string_value(json_object_get(x, "host")) : "?";
    v->group[i] = json_string_value(json_object_get(x, "group")) ? json_string_value(json_object_get(x, "group")) : "";
  }
  json_array_foreach(ranks, i, x) {
    json_int_t nd = json_integer_value(json_object_get(x, "node"));
    if (nd < 0 || nd >= v->n_nodes)
      return dpt_err_set(err, DPT_E_INPUT, "plan rank %zu: node %lld is not one of its %d nodes", i,
                         (long long)nd, v->n_nodes);
    v->node_of[i] = (int)nd;
  }
  return 0;
}

static void plan_view_free(struct plan_view *v)
{
  free(v->node_of);
  free(v->host);
  free(v->group);
}

/* "... NCCL INFO Channel 00/02 :    0   1   2 ..." -> 1 with ch, nch and the ranks;
 * 0 for any other line (NCCL's connection lines "Channel 00/0 : 0[0] -> 1[1] via ..."
 * have brackets and arrows, not a list of ranks). */
static int ring_line(const char *line, int *ch, int *nch, int *ranks, int cap, int *n)
{
  static const char key[] = "NCCL INFO Channel ";
  const char *p = strstr(line, key);
  int k = 0;
  if (!p || sscanf(p + sizeof key - 1, "%d/%d :%n", ch, nch, &k) != 2 || k == 0)
    return 0;
  p += sizeof key - 1 + k;
  *n = 0;
  for (;;) {
    char *end;
    long v;
    while (*p == ' ' || *p == '\t')
      p++;
    if (!*p || *p == '\n' || *p == '\r')
      break;
    v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') || v < 0)
      return 0;
    if (*n < cap) /* a rank past int (strtol saturates) is one the plan lacks, not a negative index */
      ranks[*n] = v > INT_MAX ? INT_MAX : (int)v;
    (*n)++;
    p = end;
  }
  return *n > 0;
}

/* The cyclic node sequence of a ring, consecutive ranks on one node collapsed. */
static int node_seq(const struct plan_view *v, const int *ring, int n, int *seq)
{
  int len = 0;
  for (int i = 0; i < n; i++) {
    int nd = v->node_of[ring[i]];
    if (!len || seq[len - 1] != nd)
      seq[len++] = nd;
  }
  if (len > 1 && seq[0] == seq[len - 1])
    len--;
  return len;
}

static int crossings(const struct plan_view *v, const int *seq, int len)
{
  int c = 0;
  for (int i = 0; len > 1 && i < len; i++)
    c += strcmp(v->group[seq[i]], v->group[seq[(i + 1) % len]]) != 0;
  return c;
}

static void print_seq(FILE *out, const struct plan_view *v, const int *seq, int len)
{
  for (int i = 0; i < len && i < 16; i++)
    fprintf(out, "%s%s", i ? " " : "", v->host[seq[i]]);
  if (len > 16)
    fprintf(out, " ... (%d nodes)", len);
}

/* 1 forward, -1 reversed, 0 not the plan's node ring (0, 1, ..., n_nodes-1 cyclically) */
static int same_ring(const struct plan_view *v, const int *seq, int len)
{
  int p = -1, fwd = 1, rev = 1;
  if (len != v->n_nodes)
    return 0;
  for (int i = 0; i < len; i++)
    if (seq[i] == 0)
      p = i;
  if (p < 0)
    return 0;
  for (int i = 0; i < len; i++) {
    fwd &= seq[(p + i) % len] == i;
    rev &= seq[(p - i + len) % len] == i;
  }
  return fwd ? 1 : rev ? -1 : 0;
}

int dpt_ncclring_check(FILE *log, const char *log_name, const json_t *plan, FILE *out, struct dpt_err *err)
{
  struct plan_view v;
  char *line = NULL;
  size_t cap = 0;
  int *ring = NULL, *seq = NULL, *plan_seq = NULL, rc, checked = 0, differ = 0, other = 0, comm = 0;
  int ch, nch, n;

  if ((rc = plan_view(plan, &v, err)) < 0)
    goto out;
  ring = calloc((size_t)v.n_ranks, sizeof *ring);
  seq = calloc((size_t)v.n_ranks, sizeof *seq);
  plan_seq = calloc((size_t)v.n_nodes, sizeof *plan_seq);
  if (!ring || !seq || !plan_seq) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  for (int i = 0; i < v.n_nodes; i++)
    plan_seq[i] = i;
  while (getline(&line, &cap, log) > 0) {
    if (!ring_line(line, &ch, &nch, ring, v.n_ranks, &n))
      continue;
    if (n != v.n_ranks) { /* a communicator of another size (NCCL splits, sub-groups) */
      other++;
      continue;
    }
    if (ch == 0)
      comm++;
    for (int i = 0; i < n; i++)
      if (ring[i] >= v.n_ranks) { /* ring_line stores ranks >= 0 only */
        rc = dpt_err_set(err, DPT_E_INPUT, "%s: NCCL channel %02d/%02d names rank %d; the plan has %d", log_name,
                         ch, nch, ring[i], v.n_ranks);
        goto out;
      }
    int len = node_seq(&v, ring, n, seq), same = same_ring(&v, seq, len);
    checked++;
    differ += !same;
    fprintf(out, "nccl ring: communicator %d channel %02d/%02d %s: ", comm ? comm : 1, ch, nch,
            same > 0 ? "agrees with the plan" : same < 0 ? "agrees with the plan (reversed)" : "DIFFERS from the plan");
    print_seq(out, &v, seq, len);
    fprintf(out, ", %d inter-switch crossing%s (the plan: %d", crossings(&v, seq, len),
            crossings(&v, seq, len) == 1 ? "" : "s", crossings(&v, plan_seq, v.n_nodes));
    if (!same) {
      fprintf(out, ", ");
      print_seq(out, &v, plan_seq, v.n_nodes);
    }
    fprintf(out, ")\n");
  }
  if (other)
    fprintf(out, "nccl ring: %d channel line%s of communicators of another size than the plan's %d ranks "
            "skipped\n", other, other == 1 ? "" : "s", v.n_ranks);
  if (!checked) {
    rc = dpt_err_set(err, DPT_E_INPUT, "%s: no NCCL ring of %d ranks (\"NCCL INFO Channel 00/02 :    0   1 ...\", "
                     "printed by NCCL's rank 0 at init): run the job with NCCL_DEBUG=INFO and give its output",
                     log_name, v.n_ranks);
    goto out;
  }
  rc = differ ? 1 : 0;
out:
  free(line);
  free(ring);
  free(seq);
  free(plan_seq);
  plan_view_free(&v);
  return rc;
}
