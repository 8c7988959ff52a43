/* test_spank_plan.c — the srun-side plan and its DPT_SPANK_PLAN transport.
 *
 * Plans the test cluster of tests/slurm/cluster.sh (leaf1 = n1,n3,..., leaf2 =
 * n2,n4,...) with the 8-GPU/4-HCA fixture through dpt_spank_local_compute(),
 * exactly as srun does, then checks that decoding every (Slurm node, local
 * task) gives back the planner's rank: ring rank, GPU, cpuset, NUMA node,
 * threads, node-wide HCAs, digest.  Then the encoder's compression (identical
 * nodes share one profile) and the decoder's refusals (wrong host, task count,
 * node id, tampered fields, ranks missing or doubled).
 * With an MN-1 topology.conf as a second argument, the same at 128 nodes x 8.
 * usage: test_spank_plan NODE_XML [MN1_TOPOLOGY_CONF] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_spank_local.h"
#include "dpt_spank_plan.h"
#include "dpt_check.h"

static void expect_bad(const char *s, int node, const char *host, int local, int count, const char *want)
{
  struct dpt_spank_task t;
  struct dpt_err e;
  dpt_err_clear(&e);
  int rc = dpt_spank_plan_decode(s, node, host, local, count, &t, NULL, &e);
  CHECK(rc == DPT_E_INPUT, "accepted '%.80s' (node %d local %d/%d)", s, node, local, count);
  CHECK(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
}

static char *replace(const char *s, const char *from, const char *to)
{
  const char *p = strstr(s, from);
  if (!p)
    return NULL;
  char *r = malloc(strlen(s) + strlen(to) + 1);
  memcpy(r, s, (size_t)(p - s));
  strcpy(r + (p - s), to);
  strcat(r, p + strlen(from));
  return r;
}

int main(int argc, char **argv)
{
  static const char conf[] = "SwitchName=leaf1 Nodes=n[1,3,5]\nSwitchName=leaf2 Nodes=n[2,4,6]\n"
                             "SwitchName=core Switches=leaf[1-2]\n";
  const char *hosts[] = {"n1", "n2", "n3", "n4", "n5", "n6"}; /* Slurm's order: SLURM_NODEID */
  struct dpt_tree *tree = NULL;
  struct dpt_plan *plan = NULL;
  struct dpt_spank_opts o;
  struct dpt_err e;
  char *enc = NULL;

  if (argc < 2) {
    fprintf(stderr, "usage: test_spank_plan NODE_XML [MN1_TOPOLOGY_CONF]\n");
    return 2;
  }
  dpt_err_clear(&e);
  dpt_spank_opts_init(&o);
  snprintf(o.topology, sizeof o.topology, "%s", argv[1]);
  if (dpt_tree_parse_topology_conf(&tree, conf, sizeof conf - 1, "test topology.conf", &e) < 0 ||
      dpt_spank_local_compute(&o, tree, hosts, 6, 8, &plan, &enc, NULL, 0, &e) < 0) {
    fprintf(stderr, "FAIL: planning the test cluster: %s\n", e.msg);
    return 1;
  }
  printf("DPT_SPANK_PLAN (%zu bytes): %s\n", strlen(enc), enc);
  CHECK(plan->n_ranks == 48 && plan->n_nodes == 6, "%d ranks %d nodes", plan->n_ranks, plan->n_nodes);
  /* the ring walks leaf1 then leaf2: n1 n3 n5 n2 n4 n6, not Slurm's n1..n6 */
  const char *ring[] = {"n1", "n3", "n5", "n2", "n4", "n6"};
  for (int i = 0; i < 6; i++)
    CHECK(!strcmp(plan->nodes[i].host, ring[i]), "ring node %d is %s", i, plan->nodes[i].host);
  /* identical nodes: one profile, so the encoding stays small */
  CHECK(strchr(strrchr(enc, ';'), '|') == NULL, "identical nodes gave several profiles");

  for (int s = 0; s < 6; s++) {
    for (int l = 0; l < 8; l++) {
      struct dpt_spank_task t;
      dpt_err_clear(&e);
      if (dpt_spank_plan_decode(enc, s, hosts[s], l, 8, &t, NULL, &e) < 0) {
        CHECK(0, "decode node %d local %d: %s", s, l, e.msg);
        continue;
      }
      const struct dpt_plan_rank *want = NULL;
      const struct dpt_plan_node *wn = NULL;
      for (int i = 0; i < plan->n_nodes; i++)
        if (!strcmp(plan->nodes[i].host, hosts[s])) {
          wn = &plan->nodes[i];
          want = &plan->ranks[wn->first_rank + l];
        }
      CHECK(wn && want, "host %s not in plan", hosts[s]);
      if (!want)
        continue;
      CHECK(t.rank.rank == want->rank && t.rank.local_rank == l && t.rank.gpu == want->gpu &&
                !strcmp(t.rank.gpu_busid, want->gpu_busid) && !strcmp(t.rank.cpuset, want->cpuset) &&
                t.rank.numa == want->numa && t.rank.threads == want->threads && t.rank.node == want->node &&
                t.node_ring == want->node,
            "%s local %d: decoded rank %d gpu %d cpuset %s, plan rank %d gpu %d cpuset %s", hosts[s], l,
            t.rank.rank, t.rank.gpu, t.rank.cpuset, want->rank, want->gpu, want->cpuset);
      CHECK(!strcmp(t.node.hcas, wn->hcas) && t.node.first_rank == wn->first_rank && t.node.n_ranks == 8,
            "%s: hcas %s vs %s", hosts[s], t.node.hcas, wn->hcas);
      CHECK(!strcmp(t.digest, plan->digest) && t.world == 48 && t.n_nodes == 6, "digest/world");
    }
  }

  /* the whole plan, as the task hands it to dpt_bind_env(): same nodes, ranks, digest */
  {
    struct dpt_spank_task t;
    struct dpt_plan *back = NULL;
    dpt_err_clear(&e);
    CHECK(dpt_spank_plan_decode(enc, 2, "n3", 5, 8, &t, &back, &e) == 0 && back, "%s", e.msg);
    if (back) {
      CHECK(back->n_ranks == plan->n_ranks && back->n_nodes == plan->n_nodes && !strcmp(back->digest, plan->digest),
            "plan shape");
      for (int i = 0; i < plan->n_nodes && i < back->n_nodes; i++)
        CHECK(!strcmp(back->nodes[i].host, plan->nodes[i].host) && back->nodes[i].first_rank == plan->nodes[i].first_rank &&
                  back->nodes[i].n_ranks == plan->nodes[i].n_ranks && !strcmp(back->nodes[i].hcas, plan->nodes[i].hcas),
              "node %d: %s vs %s", i, back->nodes[i].host, plan->nodes[i].host);
      for (int r = 0; r < plan->n_ranks && r < back->n_ranks; r++) {
        const struct dpt_plan_rank *a = &back->ranks[r], *b = &plan->ranks[r];
        CHECK(a->rank == b->rank && a->node == b->node && a->local_rank == b->local_rank && a->gpu == b->gpu &&
                  !strcmp(a->gpu_busid, b->gpu_busid) && !strcmp(a->cpuset, b->cpuset) && a->numa == b->numa &&
                  a->threads == b->threads,
              "rank %d differs after the round trip", r);
      }
      dpt_plan_destroy(back);
    }
  }

  /* refusals */
  expect_bad(enc, 0, "n2", 0, 8, "is 'n1' in the plan but this node is 'n2'");
  expect_bad(enc, 0, "n1", 0, 4, "Slurm started 4 tasks on n1 but the plan has 8");
  expect_bad(enc, 6, NULL, 0, 8, "this is node 6 of the step but the plan has 6 nodes");
  expect_bad(enc, 0, NULL, 8, 8, "local task 8 is out of range");
  expect_bad(NULL, 0, NULL, 0, 8, "is not set");
  expect_bad("dpt2;x", 0, NULL, 0, 8, "not a dpt1 plan");
  expect_bad("dpt1;52ecc49dcf2be115;2;n1/0/0,n2/0/0;/0++0+1+0", 0, NULL, 0, 1, "rank 0 is on two nodes");
  expect_bad("dpt1;52ecc49dcf2be115;3;n1/0/0,n2/1/0;/0++0+1+0", 0, NULL, 0, 1, "rank 2 is on no node");
  expect_bad("dpt1;52ecc49dcf2be115;2;n1/0/0,n2/1/1;/0++0+1+0", 0, NULL, 0, 1, "bad rank or profile index");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;/0++0+1+0-1;x", 0, NULL, 0, 1, "not a dpt1 plan");
  expect_bad("dpt1;52ecc49dcf2be115;1;n$1/0/0;/0++0+1+0", 0, NULL, 0, 1, "not host/first_rank/profile");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;/0++0+1+0-1;rm", 0, NULL, 0, 1, "not a dpt1 plan");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;/0++0+1+0 1", 0, NULL, 0, 1, "byte 0x20");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;/0++0+99999+0", 0, NULL, 0, 1, "out of range");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;/0++0+1+0;x", 0, NULL, 0, 1, "not a dpt1 plan");
  expect_bad("dpt1;52ecc49dcf2be115;1;n1/0/0;$x/0++0+1+0", 0, NULL, 0, 1, "bad HCA list");
  char *t1 = replace(enc, plan->digest, "zz");
  expect_bad(t1, 0, NULL, 0, 8, "bad digest");
  free(t1);

  free(enc);
  dpt_plan_destroy(plan);
  dpt_tree_destroy(tree);

  /* MN-1 scale: 128 nodes in 8 groups of 16 (etc/mn1/topology.conf), 8 ranks each, in a
   * shuffled Slurm order: the encoding stays small and every rank survives the trip */
  if (argc > 2) {
    char **mn = NULL;
    int n = 0;
    tree = NULL;
    plan = NULL;
    enc = NULL;
    dpt_err_clear(&e);
    if (dpt_tree_load_topology_conf(&tree, argv[2], &e) < 0 || dpt_tree_hostlist_expand("mn[001-128]", &mn, &n, &e) < 0) {
      CHECK(0, "MN-1 inputs: %s", e.msg);
    } else {
      for (int i = n - 1; i > 0; i--) { /* deterministic shuffle */
        int j = (int)((i * 2654435761u) % (unsigned)(i + 1));
        char *x = mn[i];
        mn[i] = mn[j];
        mn[j] = x;
      }
      if (dpt_spank_local_compute(&o, tree, (const char *const *)mn, n, 8, &plan, &enc, NULL, 0, &e) < 0) {
        CHECK(0, "MN-1 plan: %s", e.msg);
      } else {
        printf("MN-1: %d ranks, DPT_SPANK_PLAN %zu bytes\n", plan->n_ranks, strlen(enc));
        CHECK(plan->n_ranks == 1024 && strlen(enc) < 3072, "MN-1 encoding is %zu bytes", strlen(enc));
        for (int sidx = 0; sidx < n; sidx++)
          for (int l = 0; l < 8; l++) {
            struct dpt_spank_task t;
            if (dpt_spank_plan_decode(enc, sidx, mn[sidx], l, 8, &t, NULL, &e) < 0) {
              CHECK(0, "MN-1 decode %s/%d: %s", mn[sidx], l, e.msg);
              continue;
            }
            const struct dpt_plan_rank *want = &plan->ranks[t.rank.rank];
            CHECK(!strcmp(plan->nodes[want->node].host, mn[sidx]) && want->local_rank == l &&
                      want->gpu == t.rank.gpu && !strcmp(want->cpuset, t.rank.cpuset),
                  "MN-1 %s/%d: rank %d", mn[sidx], l, t.rank.rank);
          }
      }
    }
    free(enc);
    dpt_plan_destroy(plan);
    dpt_tree_destroy(tree);
    dpt_tree_hostlist_free(mn, n);
  }
  if (failures) {
    fprintf(stderr, "test_spank_plan: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_spank_plan: ok\n");
  return 0;
}
