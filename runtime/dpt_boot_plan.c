/* dpt_boot_plan.c — the bootstrap's plan (dpt_boot_int.h): the job planned from every
 * rank's node record, the plan rank of each launcher rank, and exchange 2, where the ranks
 * check that they computed the same plan as each other and as the launcher announced. */
#include "dpt_boot_int.h"
#include "dpt_env.h"
#include "dpt_strv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The hosts of the job as the records name them. */
struct hosts {
  int n;                  /* hosts */
  const char **name;      /* [n_ranks] host names, in host order once ordered */
  int *of;                /* [n_ranks] host slot of launcher rank */
  int *count;             /* [n_ranks] ranks per host slot */
  int *first;             /* [n_ranks] first launcher rank per host slot */
  int *order;             /* [n_ranks] host slots in host order */
  int with_addr;          /* ranks with a SLURM_TOPOLOGY_ADDR */
  int first_addr, first_no; /* the first rank with one, without one; -1 none */
};

/* One topology for the whole job: every rank's node digest is rank 0's. */
static int same_topology(const struct dpt_boot_rec *recs, int n, struct dpt_err *err)
{
  for (int r = 1; r < n; r++)
    if (strcmp(recs[r].topo, recs[0].topo))
      return dpt_err_set(err, DPT_E_INPUT,
                         "bootstrap: rank %d on %s sees a node with %d GPUs, %d HCAs, %d PUs "
                         "(topology digest %s from %s) but rank 0 on %s sees %d GPUs, %d HCAs, %d "
                         "PUs (digest %s from %s): dpt plans jobs whose nodes look alike; give "
                         "every rank the same DPT_PLAN_XML / DPT_PLAN_GPUS or run on identical "
                         "nodes",
                         r, recs[r].host, recs[r].gpus, recs[r].hcas, recs[r].pus, recs[r].topo,
                         recs[r].topo_src, recs[0].host, recs[0].gpus, recs[0].hcas, recs[0].pus,
                         recs[0].topo, recs[0].topo_src);
  return 0;
}

/* Hosts in order of first appearance, the ranks of each, the host indexes they agree on and
 * the same number of ranks on every host. */
static int group_hosts(const struct dpt_boot_rec *recs, int n, struct hosts *h, struct dpt_err *err)
{
  h->first_addr = h->first_no = -1;
  for (int r = 0; r < n; r++) {
    int k;
    for (k = 0; k < h->n; k++)
      if (!strcmp(h->name[k], recs[r].host))
        break;
    if (k == h->n) {
      h->name[h->n++] = recs[r].host;
      h->order[k] = k;
      h->first[k] = r;
    } else if (recs[r].host_index != recs[h->first[k]].host_index) {
      return dpt_err_set(err, DPT_E_INPUT,
                         "bootstrap: ranks %d and %d on %s give the host different indexes (%d, "
                         "%d; DPT_HOST_INDEX / SLURM_NODEID): inconsistent launcher variables",
                         h->first[k], r, recs[r].host, recs[h->first[k]].host_index,
                         recs[r].host_index);
    }
    h->of[r] = k;
    h->count[k]++;
    if (recs[r].addr[0]) {
      h->with_addr++;
      if (h->first_addr < 0)
        h->first_addr = r;
    } else if (h->first_no < 0) {
      h->first_no = r;
    }
  }
  for (int k = 1; k < h->n; k++)
    if (h->count[k] != h->count[0])
      return dpt_err_set(err, DPT_E_INPUT,
                         "bootstrap: %d ranks on %s but %d on %s: the plan needs the same number "
                         "of ranks on every node (--ntasks-per-node)", h->count[0], h->name[0],
                         h->count[k], h->name[k]);
  return 0;
}

/* Host order: the launcher's host indexes when every host has one (two hosts with one index
 * refused), else the order of first appearance; h->name rewritten in that order. */
static int order_hosts(const struct dpt_boot_rec *recs, struct hosts *h, struct dpt_err *err)
{
  int known = 1;
  const char **sorted;
#define INDEX_AT(i) (recs[h->first[h->order[i]]].host_index)
  for (int k = 0; k < h->n; k++)
    if (recs[h->first[k]].host_index < 0)
      known = 0;
  if (known) {
    for (int i = 1; i < h->n; i++) /* insertion sort by index */
      for (int j = i; j > 0 && INDEX_AT(j - 1) > INDEX_AT(j); j--) {
        int t = h->order[j];
        h->order[j] = h->order[j - 1];
        h->order[j - 1] = t;
      }
    for (int i = 1; i < h->n; i++)
      if (INDEX_AT(i) == INDEX_AT(i - 1))
        return dpt_err_set(err, DPT_E_INPUT,
                           "bootstrap: hosts %s and %s both have index %d (DPT_HOST_INDEX / "
                           "SLURM_NODEID): inconsistent launcher variables",
                           h->name[h->order[i - 1]], h->name[h->order[i]], INDEX_AT(i));
  }
#undef INDEX_AT
  if (!(sorted = calloc(h->n > 0 ? (size_t)h->n : 1, sizeof *sorted)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  for (int i = 0; i < h->n; i++)
    sorted[i] = h->name[h->order[i]];
  memcpy(h->name, sorted, sizeof *sorted * (size_t)h->n);
  free(sorted);
  return 0;
}

/* The switch tree of job: flat (asked for, or auto and no rank has an address) or the ranks'
 * SLURM_TOPOLOGY_ADDR (addrs, pats: [n] the records' strings); addr with no rank having one,
 * and some ranks with one and some without, are refused. */
static int job_tree(struct dpt_job *job, const struct dpt_boot_in *in,
                    const struct dpt_boot_rec *recs, int n, const struct hosts *h,
                    const char **addrs, const char **pats, struct dpt_err *err)
{
  if (!strcmp(in->tree, "flat") || (!strcmp(in->tree, "auto") && h->with_addr == 0)) {
    job->tree_source = DPT_JOB_TREE_FLAT;
    return 0;
  }
  if (h->with_addr == 0) /* tree "addr" */
    return dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: the plan tree is addr (DPT_PLAN_TREE) but no rank has "
                       "SLURM_TOPOLOGY_ADDR (rank 0 on %s has none; Slurm sets it under "
                       "TopologyPlugin=topology/tree): set DPT_PLAN_TREE=auto or flat to plan "
                       "without the switch tree", recs[0].host);
  if (h->with_addr < n)
    return dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: rank %d on %s has SLURM_TOPOLOGY_ADDR=\"%s\" but rank %d on %s "
                       "has none: cannot build the switch tree (DPT_PLAN_TREE=flat ignores it)",
                       h->first_addr, recs[h->first_addr].host, recs[h->first_addr].addr,
                       h->first_no, recs[h->first_no].host);
  for (int r = 0; r < n; r++) {
    addrs[r] = recs[r].addr;
    pats[r] = recs[r].pattern[0] ? recs[r].pattern : NULL;
  }
  job->tree_source = DPT_JOB_TREE_ADDRS;
  job->addrs = addrs;
  job->patterns = pats;
  job->n_addrs = n;
  job->tree_what = "the ranks' SLURM_TOPOLOGY_ADDR";
  return 0;
}

/* The plan rank of every launcher rank: its node's first_rank + its position among the ranks
 * of its host; and the inverse, b->launcher_of. */
static int place_ranks(struct dpt_boot *b, const struct dpt_boot_rec *recs, struct hosts *h,
                       struct dpt_err *err)
{
  int n = b->lsize, *seen = h->count; /* reused: ranks of each host slot seen so far */
  memset(seen, 0, sizeof *seen * (size_t)n);
  for (int r = 0; r < n; r++) {
    int k = h->of[r], node_i = -1;
    const char *hn = recs[r].host;
    for (int i = 0; i < b->plan->n_nodes; i++)
      if (!strcmp(b->plan->nodes[i].host, hn))
        node_i = i;
    if (node_i < 0 || seen[k] >= b->plan->nodes[node_i].n_ranks)
      return dpt_err_set(err, DPT_E_RUNTIME, "bootstrap: the plan has no place for host %s of "
                         "rank %d", hn, r);
    b->plan_of[r] = b->plan->nodes[node_i].first_rank + seen[k]++;
  }
  for (int r = 0; r < n; r++)
    b->launcher_of[b->plan_of[r]] = r;
  b->rank = b->plan_of[b->lrank];
  return 0;
}

int dpt_boot_plan_compute(struct dpt_boot *b, const struct dpt_boot_rec *recs,
                          const struct dpt_boot_in *in, const struct dpt_node *node,
                          struct dpt_err *err)
{
  int n = b->lsize, rc = 0;
  struct hosts h = {0};
  const char **addrs = calloc((size_t)n, sizeof *addrs), **pats = calloc((size_t)n, sizeof *pats);
  struct dpt_job job;

  h.name = calloc((size_t)n, sizeof *h.name);
  h.of = calloc((size_t)n, sizeof *h.of);
  h.count = calloc((size_t)n, sizeof *h.count);
  h.first = calloc((size_t)n, sizeof *h.first);
  h.order = calloc((size_t)n, sizeof *h.order);
  b->plan_of = calloc((size_t)n, sizeof *b->plan_of);
  b->launcher_of = calloc((size_t)n, sizeof *b->launcher_of);
  if (!addrs || !pats || !h.name || !h.of || !h.count || !h.first || !h.order || !b->plan_of ||
      !b->launcher_of) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if ((rc = same_topology(recs, n, err)) < 0 || (rc = group_hosts(recs, n, &h, err)) < 0 ||
      (rc = order_hosts(recs, &h, err)) < 0)
    goto out;
  /* the job of these hosts, planned as every caller plans it (dpt_job.h) */
  job = in->job;
  job.hosts = h.name;
  job.n_hosts = h.n;
  job.node_source = DPT_JOB_NODE_GIVEN; /* one topology for the whole job (same_topology) */
  job.node = node;
  job.ranks_per_node = h.count[0];
  if ((rc = job_tree(&job, in, recs, n, &h, addrs, pats, err)) < 0)
    goto out;
  if ((rc = dpt_job_plan(&b->plan, &job, b->note, sizeof b->note, err)) < 0) {
    dpt_err_prefix(err, "bootstrap");
    goto out;
  }
  rc = place_ranks(b, recs, &h, err);
out:
  free(h.name);
  free(h.of);
  free(h.count);
  free(h.first);
  free(h.order);
  free(addrs);
  free(pats);
  return rc;
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

/* Exchange 2's strings (all[n]: "DIGEST PLAN_RANK EXPECTED ANNOUNCED_RANK OPTIONS"): the
 * ranks whose plan digest is not rank 0's named, with both groups' options; sel[n] scratch. */
static int agree_digests(char **all, int n, int *sel, struct dpt_err *err)
{
  int bad = 0, first_bad = -1;
  char d0[17] = "", dx[17] = "", list_bad[256], list_good[256];
  const char *o0, *ox;
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
  if (!bad)
    return 0;
  o0 = strrchr(all[0], ' ');
  ox = strrchr(all[first_bad], ' ');
  rank_list(sel, n, list_bad, sizeof list_bad);
  for (int r = 0; r < n; r++)
    sel[r] = !sel[r];
  rank_list(sel, n, list_good, sizeof list_good);
  return dpt_err_set(err, DPT_E_INPUT,
                     "bootstrap: the ranks computed different plans: rank%s %s computed plan "
                     "%s (%s), rank%s %s computed %s (%s): every rank must plan with the same "
                     "inputs (DPT_FP16, DPT_PLAN_THREADS, DPT_PLAN_TREE, DPT_PLAN_XML/"
                     "DPT_PLAN_GPUS, DPT_OVERSUBSCRIBE, dpt version)",
                     strpbrk(list_bad, ",-") ? "s" : "", list_bad, dx, ox ? ox + 1 : "?",
                     strpbrk(list_good, ",-") ? "s" : "", list_good, d0, o0 ? o0 + 1 : "?");
}

/* The launcher's digest and ring rank, where it announced them, against what each rank
 * computed (all[n] as above; sel[n] scratch). */
static int agree_launcher(const struct dpt_boot *b, char **all, int n, int *sel,
                          struct dpt_err *err)
{
  int bad = 0, first_bad = -1;
  char got[17] = "", exp[64] = "", ann[16] = "", list[256];
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
  if (!bad)
    return 0;
  rank_list(sel, n, list, sizeof list);
  if (strcmp(exp, "-") && strcmp(exp, got))
    return dpt_err_set(err, DPT_E_INPUT,
                       "bootstrap: the launcher announced plan %s (DPT_PLAN_DIGEST) to rank%s %s "
                       "but the ranks computed plan %s at start-up: the launcher planned with "
                       "other inputs (node topology, tree, threads, fp16) or another dpt "
                       "version; check DPT_PLAN_XML/DPT_PLAN_THREADS/DPT_FP16 or unset "
                       "DPT_PLAN_DIGEST", exp, strpbrk(list, ",-") ? "s" : "", list, got);
  return dpt_err_set(err, DPT_E_INPUT,
                     "bootstrap: the launcher gave rank %d DPT_RANK=%s but the plan puts it "
                     "at ring position %d (affected: %s): the launcher placed the ranks "
                     "differently from the plan", first_bad, ann, b->plan_of[first_bad], list);
}

int dpt_boot_plan_agree(struct dpt_boot *b, const struct dpt_boot_in *in, const char *expect,
                        struct dpt_err *err)
{
  char mine[512], **all = NULL, ann_rank[16] = "-";
  int n = b->lsize, rc, *sel = NULL;
  const char *dr = dpt_env_str("DPT_RANK");

  if (dr && b->ctx.source[0] && strcmp(b->ctx.source, "single"))
    snprintf(ann_rank, sizeof ann_rank, "%.15s", dr);
  snprintf(mine, sizeof mine,
           "%s %d %s %s fp16=%d,threads=%d,tree=%s,oversubscribe=%d,topology=%.150s",
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
  /* a rank that could not plan says why ("! ..."), then the digests, then the launcher's */
  for (int r = 0; r < n; r++)
    if (all[r][0] == '!') {
      rc = dpt_err_set(err, DPT_E_INPUT, "bootstrap: rank %d could not compute the plan: %s", r,
                       all[r] + 2);
      goto out;
    }
  if ((rc = agree_digests(all, n, sel, err)) < 0)
    goto out;
  rc = agree_launcher(b, all, n, sel, err);
out:
  free(sel);
  dpt_strv_free(all, n);
  return rc;
}
