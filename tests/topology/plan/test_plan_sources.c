/* test_plan_sources — the planner on trees and nodes from the real loaders.
 *   test_plan_sources DATA_DIR FIXTURES_DIR (shared fixtures) NODE_XML
 *  - cluster.conf (topology.conf: ranges, nested switches, LinkSpeed, leaves
 *    listed out of order) and cluster.addr (the same cluster as shuffled
 *    SLURM_TOPOLOGY_ADDR lines) give the same plan: same digest, same ring;
 *    4 inter-group hops planned vs 16 in Slurm's (interleaved) name order;
 *  - avakas (real `ibnetdiscover -p` dump): for several seeds, 64 of its
 *    hosts in shuffled order: the planned ring crosses each leaf's uplink once
 *    per direction and passes the independent checker;
 *  - the MN-1-style hwloc XML: each 8-GPU block crosses the sockets once, enters
 *    and leaves next to an HCA, and lists the node's 4 HCAs for NCCL. */
#include <stdlib.h>
#include <string.h>

#include "dpt_node.h"
#include "dpt_tree.h"
#include "plan_testlib.h"

static void conf_vs_addr(const char *dir)
{
  char conf[4096], addr[4096], why[512];
  struct dpt_tree *tc = NULL, *ta = NULL;
  struct dpt_node *nd = pt_node_plain(4);
  struct dpt_plan *pc = NULL, *pa = NULL;
  struct dpt_err err;
  const char *hosts[16];
  char names[16][8];
  uint64_t rng = 99;

  snprintf(conf, sizeof conf, "%s/cluster.conf", dir);
  snprintf(addr, sizeof addr, "%s/cluster.addr", dir);
  CHECK(dpt_tree_load_topology_conf(&tc, conf, &err) == 0, "%s", err.msg);
  CHECK(dpt_tree_load_addr_list(&ta, addr, &err) == 0, "%s", err.msg);
  if (!tc || !ta)
    goto out;
  for (int i = 0; i < 16; i++) {
    snprintf(names[i], sizeof names[i], "node%02d", i + 1);
    hosts[i] = names[i];
  }
  for (int round = 0; round < 3; round++) {
    CHECK(pt_plan(&pc, tc, hosts, 16, nd, NULL, &err) == 0, "%s", err.msg);
    CHECK(pt_plan(&pa, ta, hosts, 16, nd, NULL, &err) == 0, "%s", err.msg);
    if (!pc || !pa)
      break;
    CHECK(pt_check_plan(pc, tc, hosts, 16, why, sizeof why) == 0, "topology.conf: %s", why);
    CHECK(pt_check_plan(pa, ta, hosts, 16, why, sizeof why) == 0, "addr: %s", why);
    CHECK(!strcmp(pc->digest, pa->digest), "topology.conf digest %s != addr digest %s", pc->digest,
          pa->digest);
    for (int k = 0; k < 16; k++)
      CHECK(!strcmp(pc->nodes[k].host, pa->nodes[k].host), "ring position %d: %s vs %s", k,
            pc->nodes[k].host, pa->nodes[k].host);
    CHECK(pc->alts[0].inter_group_hops == 4, "planned %d hops", pc->alts[0].inter_group_hops);
    if (round == 0) {
      CHECK(pc->alts[1].inter_group_hops == 16, "name order %d hops", pc->alts[1].inter_group_hops);
      /* LinkSpeed: leaf uplinks at min(leaf 100, pod 200) = 100 Gb/s, host links 100 */
      CHECK(!strcmp(pc->nodes[0].host, "node01") && !strcmp(pc->nodes[4].host, "node02") &&
            !strcmp(pc->nodes[8].host, "node03"), "ring starts %s %s %s", pc->nodes[0].host,
            pc->nodes[4].host, pc->nodes[8].host);
    }
    dpt_plan_destroy(pc);
    dpt_plan_destroy(pa);
    pc = pa = NULL;
    pt_shuffle(&rng, hosts, 16);
  }
out:
  dpt_plan_destroy(pc);
  dpt_plan_destroy(pa);
  if (tc)
    dpt_tree_destroy(tc);
  if (ta)
    dpt_tree_destroy(ta);
  dpt_node_destroy(nd);
}

static void avakas(const char *fixtures)
{
  char path[4096], why[512];
  struct dpt_tree *t = NULL;
  struct dpt_node *nd = pt_node_plain(1);
  struct dpt_err err;

  snprintf(path, sizeof path, "%s/ibnet/avakas/ibnetdiscover-p.txt", fixtures);
  if (dpt_tree_load_ibnetdiscover(&t, path, &err)) {
    CHECK(0, "%s", err.msg);
    goto out;
  }
  for (uint64_t seed = 1; seed <= 5; seed++) {
    const char **all = malloc(sizeof *all * (size_t)t->n_hosts);
    struct dpt_plan *p = NULL;
    uint64_t rng = seed;
    for (int h = 0; h < t->n_hosts; h++)
      all[h] = t->hosts[h].name;
    pt_shuffle(&rng, all, t->n_hosts);
    if (pt_plan(&p, t, all, 64, nd, NULL, &err)) {
      CHECK(0, "%s", err.msg);
      free(all);
      continue;
    }
    CHECK(pt_check_plan(p, t, all, 64, why, sizeof why) == 0, "avakas seed %llu: %s",
          (unsigned long long)seed, why);
    CHECK(p->n_groups >= 2, "only %d groups", p->n_groups);
    CHECK(p->alts[0].inter_group_hops == p->n_groups, "planned hops %d, groups %d",
          p->alts[0].inter_group_hops, p->n_groups);
    CHECK(p->alts[2].inter_group_hops > 2 * p->n_groups, "random hops %d", p->alts[2].inter_group_hops);
    for (int k = 0; k < p->n_nodes; k++) {
      if (k > 0 && !strcmp(p->nodes[k].group, p->nodes[k - 1].group))
        continue;
      int s = dpt_tree_find_switch(t, p->nodes[k].group), up = 0, down = 0;
      const char *par = s >= 0 && t->sw[s].parent >= 0 ? t->sw[t->sw[s].parent].name : "?";
      for (int i = 0; i < p->alts[0].n_links; i++) {
        const struct dpt_plan_link *l = &p->alts[0].links[i];
        if (!strcmp(l->from, p->nodes[k].group) && !strcmp(l->to, par))
          up += l->flows;
        if (!strcmp(l->to, p->nodes[k].group) && !strcmp(l->from, par))
          down += l->flows;
      }
      CHECK(up == 1 && down == 1, "avakas seed %llu: leaf '%s' uplink carries %d up, %d down",
            (unsigned long long)seed, p->nodes[k].group, up, down);
    }
    if (seed == 1)
      printf("avakas, 64 hosts: %d groups, planned %d hops vs random %d, busiest random link %d flows\n",
             p->n_groups, p->alts[0].inter_group_hops, p->alts[2].inter_group_hops, p->alts[2].busiest_flows);
    dpt_plan_destroy(p);
    free(all);
  }
out:
  if (t)
    dpt_tree_destroy(t);
  dpt_node_destroy(nd);
}

static void mn1_xml(const char *xml)
{
  struct dpt_node *nd = NULL;
  struct dpt_tree *t = pt_tree_mn1();
  struct dpt_plan *p = NULL;
  struct dpt_err err;
  const char *hosts[] = {"mn1-033", "mn1-002", "mn1-001"};

  if (dpt_node_load(&nd, xml, &err)) {
    CHECK(0, "%s", err.msg);
    goto out;
  }
  if (pt_plan(&p, t, hosts, 3, nd, NULL, &err)) {
    CHECK(0, "%s", err.msg);
    goto out;
  }
  for (int k = 0; k < 3; k++) {
    const struct dpt_plan_node *pn = &p->nodes[k];
    int sys = 0, first = p->ranks[pn->first_rank].gpu, last = p->ranks[pn->first_rank + 7].gpu;
    for (int j = 0; j + 1 < 8; j++)
      sys += dpt_node_gpu_path(nd, p->ranks[pn->first_rank + j].gpu, p->ranks[pn->first_rank + j + 1].gpu).cls ==
             DPT_PATH_SYS;
    CHECK(sys == 1, "%s: %d socket crossings in the block", pn->host, sys);
    int near_first = 0, near_last = 0;
    for (int h = 0; h < nd->n_hcas; h++) {
      near_first |= dpt_node_hca_path(nd, first, h).cls == DPT_PATH_PIX;
      near_last |= dpt_node_hca_path(nd, last, h).cls == DPT_PATH_PIX;
    }
    CHECK(near_first && near_last, "%s: block GPUs %d..%d not next to an HCA", pn->host, first, last);
    CHECK(!strcmp(pn->hcas, "mlx5_0,mlx5_1,mlx5_2,mlx5_3"), "%s: hcas %s", pn->host, pn->hcas);
    for (int j = 0; j < 8; j++) {
      const struct dpt_plan_rank *r = &p->ranks[pn->first_rank + j];
      CHECK(r->cpuset[0] && r->threads == 2 && r->numa == nd->gpus[r->gpu].numa, "rank %d: %s %d %d", r->rank,
            r->cpuset, r->threads, r->numa);
    }
  }
  CHECK(!strcmp(p->nodes[0].host, "mn1-001") && !strcmp(p->nodes[2].host, "mn1-033"), "ring %s %s %s",
        p->nodes[0].host, p->nodes[1].host, p->nodes[2].host);
out:
  dpt_plan_destroy(p);
  if (nd)
    dpt_node_destroy(nd);
  pt_tree_free(t);
}

int main(int argc, char **argv)
{
  if (argc != 4) {
    fprintf(stderr, "usage: test_plan_sources DATA_DIR SHARED_FIXTURES_DIR NODE_XML\n");
    return 2;
  }
  conf_vs_addr(argv[1]);
  avakas(argv[2]);
  mn1_xml(argv[3]);
  if (!failures)
    printf("plan sources tests pass\n");
  return failures ? 1 : 0;
}
