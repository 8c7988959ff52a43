/* test_plan_mn1 — MN-1 scale: 128 nodes in 8 groups of 16 under one core
 * switch, 8 GPUs each (1024 ranks), hosts handed over in a shuffled order.
 *  - the planned ring: exactly 8 inter-group hops, one flow per direction on
 *    every leaf uplink (and on every link), predicted time = the alpha-beta
 *    formula recomputed here;
 *  - random orders (several seeds): about n(1 - (m-1)/(n-1)) = 112.9 hops;
 *  - Slurm's order when the hosts come in name order: 8 hops too (names follow
 *    the groups), when they come shuffled: about as bad as random;
 *  - the text output says "random order crosses inter-group links N times vs
 *    8 for the planned ring". */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

static double rel(double a, double b)
{
  return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1);
}

int main(void)
{
  struct dpt_tree *t = pt_tree_mn1();
  struct dpt_node *node = pt_node_mn1(0xf);
  const char *hosts[128];
  struct dpt_plan *p = NULL;
  struct dpt_plan_opts o;
  struct dpt_err err;
  char why[512];
  uint64_t rng = 42;
  double sum_hops = 0;
  const int seeds = 8;

  for (int i = 0; i < 128; i++)
    hosts[i] = t->hosts[i].name;
  /* Slurm's name order: groups are name ranges, so 8 hops as well */
  dpt_plan_opts_init(&o);
  CHECK(pt_plan(&p, t, hosts, 128, node, &o, &err) == 0, "%s", err.msg);
  if (p) {
    CHECK(p->alts[1].inter_group_hops == 8, "slurm name order: %d hops", p->alts[1].inter_group_hops);
    dpt_plan_destroy(p);
    p = NULL;
  }

  pt_shuffle(&rng, hosts, 128);
  for (int s = 0; s < seeds; s++) {
    dpt_plan_opts_init(&o);
    o.seed = (uint64_t)s + 1;
    if (pt_plan(&p, t, hosts, 128, node, &o, &err)) {
      CHECK(0, "plan failed: %s", err.msg);
      break;
    }
    const struct dpt_plan_alt *pl = &p->alts[0], *sl = &p->alts[1], *rn = &p->alts[2];
    CHECK(pt_check_plan(p, t, hosts, 128, why, sizeof why) == 0, "%s", why);
    CHECK(p->n_ranks == 1024 && p->n_nodes == 128 && p->n_groups == 8, "%d ranks %d nodes %d groups",
          p->n_ranks, p->n_nodes, p->n_groups);
    CHECK(pl->inter_group_hops == 8, "planned ring: %d inter-group hops", pl->inter_group_hops);
    CHECK(pl->busiest_flows == 1, "planned ring: busiest link carries %d flows", pl->busiest_flows);
    /* every leaf uplink: one flow up, one down */
    for (int l = 1; l <= 8; l++) {
      char leaf[16];
      int up = 0, down = 0;
      snprintf(leaf, sizeof leaf, "leaf%d", l);
      for (int k = 0; k < pl->n_links; k++) {
        if (!strcmp(pl->links[k].from, leaf) && !strcmp(pl->links[k].to, "core"))
          up += pl->links[k].flows;
        if (!strcmp(pl->links[k].to, leaf) && !strcmp(pl->links[k].from, "core"))
          down += pl->links[k].flows;
      }
      CHECK(up == 1 && down == 1, "%s uplink: %d up, %d down", leaf, up, down);
    }
    /* groups in name order, hosts in name order inside each */
    for (int k = 0; k < 128; k++)
      CHECK(!strcmp(p->nodes[k].host, t->hosts[k].name), "ring position %d: %s", k, p->nodes[k].host);
    /* 8 GPUs on 4 switches: the block enters and leaves next to an HCA, crosses sockets once */
    CHECK(!strcmp(p->nodes[5].hcas, "mlx5_0,mlx5_1,mlx5_2,mlx5_3"), "hcas %s", p->nodes[5].hcas);
    {
      double S = (double)DPT_RESNET50_GRAD_BYTES, P = 1024, B = 100e9 / 8, Bi = 128e9 / 8;
      double want = 2 * (P - 1) * (5e-6 + S / P / (B < Bi ? B : Bi));
      double bound = 2 * (P - 1) / P * S / B;
      CHECK(rel(pl->predicted_s, want) < 1e-12, "planned predicted %.9g s, formula %.9g s",
            pl->predicted_s, want);
      CHECK(rel(pl->bound_s, bound) < 1e-12, "bound %.9g, formula %.9g", pl->bound_s, bound);
      CHECK(rel(pl->busbw_gbs, S / want * 2 * (P - 1) / P / 1e9) < 1e-12, "busbw %g", pl->busbw_gbs);
    }
    /* random and shuffled Slurm orders: many crossings, shared uplinks */
    CHECK(rn->inter_group_hops >= 95 && rn->inter_group_hops <= 125, "seed %d: random %d hops", s + 1,
          rn->inter_group_hops);
    CHECK(sl->inter_group_hops >= 95 && sl->inter_group_hops <= 125, "shuffled slurm order %d hops",
          sl->inter_group_hops);
    CHECK(rn->busiest_flows >= 8, "random busiest %d flows", rn->busiest_flows);
    CHECK(rn->predicted_s > 4 * pl->predicted_s, "random %g s vs planned %g s", rn->predicted_s,
          pl->predicted_s);
    sum_hops += rn->inter_group_hops;
    /* hierarchical and 2d: formulas of dpt_plan.c's header */
    {
      double S = (double)DPT_RESNET50_GRAD_BYTES, g = 8, n = 128, B = 100e9 / 8, Bi = 128e9 / 8, a = 5e-6;
      double th = 4 * (g - 1) * (a + S / (g * Bi)) + 2 * (n - 1) * (a + S / (n * B));
      double t2 = 2 * (g - 1) * (a + S / (g * Bi)) + 2 * (n - 1) * (a + (S / g) / (n * B / g));
      CHECK(rel(p->alts[3].predicted_s, th) < 1e-12, "hierarchical %.9g vs %.9g", p->alts[3].predicted_s, th);
      CHECK(rel(p->alts[4].predicted_s, t2) < 1e-12, "2d %.9g vs %.9g", p->alts[4].predicted_s, t2);
      CHECK(p->alts[4].busiest_flows == 8 && p->alts[4].inter_group_hops == 64, "2d: %d flows %d hops",
            p->alts[4].busiest_flows, p->alts[4].inter_group_hops);
    }
    if (s == 0) {
      char *buf = NULL, want[160];
      size_t len = 0;
      FILE *f = open_memstream(&buf, &len);
      dpt_plan_print(f, p);
      fclose(f);
      snprintf(want, sizeof want, "random order crosses inter-group links %d times vs 8 for the planned ring",
               rn->inter_group_hops);
      CHECK(buf && strstr(buf, want), "text output lacks \"%s\"", want);
      CHECK(buf && strstr(buf, p->digest), "text output lacks the digest");
      printf("%s\n", want);
      free(buf);
    }
    dpt_plan_destroy(p);
    p = NULL;
  }
  {
    double mean = sum_hops / seeds, expect = 128.0 * (1 - 15.0 / 127.0);
    printf("random order: mean %.1f inter-group hops over %d seeds (expected %.1f)\n", mean, seeds, expect);
    CHECK(fabs(mean - expect) < 5, "mean random hops %.1f, expected %.1f", mean, expect);
  }
  dpt_node_destroy(node);
  pt_tree_free(t);
  return failures ? 1 : 0;
}
