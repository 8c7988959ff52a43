/* test_plan_node — GPU order, binding and input errors on hand-built nodes.
 *
 * The MN-1-style node (2 packages x 10 cores x 2 PUs; 8 GPUs on 4 PCIe
 * switches, GPU pairs {0,1} {2,3} on package 0, {4,5} {6,7} on package 1; an
 * HCA per switch) checks that
 *  - consecutive ranks are as close as the paths allow: one SYS hop, two NODE
 *    hops, four PIX hops, and the block starts and ends next to an HCA;
 *  - with one HCA only, the ring enters and leaves through a GPU next to it,
 *    and NCCL_IB_HCA names just that HCA;
 *  - a single-node job closes the ring inside the node (two SYS hops, not more);
 *  - 4 ranks per node stay inside one package;
 *  - 4 ranks sharing a package's 10 cores get disjoint contiguous core slices
 *    (2,3,2,3 cores) that cover the package; threads = cores of the slice;
 *  - oversubscription (16 ranks on 8 GPUs) is refused without the option and
 *    puts rank pairs on one GPU with it;
 *  - CPU-only nodes get one NUMA node per rank;
 *  - bad input: unknown host, duplicate host, empty list. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

static enum dpt_path_class cls(const struct dpt_node *n, int a, int b)
{
  return n->gpu_gpu[a * n->n_gpus + b].cls;
}

static int near_hca(const struct dpt_node *n, int g)
{
  for (int h = 0; h < n->n_hcas; h++)
    if (n->gpu_hca[g * n->n_hcas + h].cls == DPT_PATH_PIX)
      return 1;
  return 0;
}

static struct dpt_tree *small_tree(int hosts)
{
  struct dpt_tree *t = pt_tree_new("test");
  int root = pt_tree_add_switch(t, "spine", -1, 0);
  int l1 = pt_tree_add_switch(t, "leaf1", root, 0), l2 = pt_tree_add_switch(t, "leaf2", root, 0);
  char name[16];
  for (int i = 0; i < hosts; i++) {
    snprintf(name, sizeof name, "n%d", i + 1);
    pt_tree_add_host(t, name, i < hosts / 2 ? l1 : l2, 0);
  }
  return t;
}

static void count_hops(const struct dpt_plan *p, const struct dpt_node *nd, int node, int closed,
                       int *pix, int *nodeh, int *sys)
{
  const struct dpt_plan_node *pn = &p->nodes[node];
  int r = pn->n_ranks;
  *pix = *nodeh = *sys = 0;
  for (int j = 0; j < r - 1 + (closed ? 1 : 0); j++) {
    int a = p->ranks[pn->first_rank + j].gpu, b = p->ranks[pn->first_rank + (j + 1) % r].gpu;
    enum dpt_path_class c = cls(nd, a, b);
    *pix += c == DPT_PATH_PIX;
    *nodeh += c == DPT_PATH_NODE;
    *sys += c == DPT_PATH_SYS;
  }
}

static void test_full_node(void)
{
  struct dpt_tree *t = small_tree(4);
  struct dpt_node *nd = pt_node_mn1(0xf);
  const char *hosts[] = {"n3", "n1", "n4", "n2"};
  struct dpt_plan *p = NULL;
  struct dpt_err err;
  char why[256];
  int pix, nodeh, sys;

  if (pt_plan(&p, t, hosts, 4, nd, NULL, &err)) {
    CHECK(0, "%s", err.msg);
    goto out;
  }
  CHECK(pt_check_plan(p, t, hosts, 4, why, sizeof why) == 0, "%s", why);
  count_hops(p, nd, 0, 0, &pix, &nodeh, &sys);
  CHECK(pix == 4 && nodeh == 2 && sys == 1, "8-GPU block: %d PIX %d NODE %d SYS hops", pix, nodeh, sys);
  CHECK(near_hca(nd, p->ranks[0].gpu) && near_hca(nd, p->ranks[7].gpu), "block ends %d, %d not next to an HCA",
        p->ranks[0].gpu, p->ranks[7].gpu);
  for (int j = 0; j < 8; j++) /* lexicographically first of the optimal orders */
    CHECK(p->ranks[j].gpu == j, "local rank %d on GPU %d", j, p->ranks[j].gpu);
  CHECK(!strcmp(p->nodes[0].hcas, "mlx5_0,mlx5_1,mlx5_2,mlx5_3"), "hcas %s", p->nodes[0].hcas);
  CHECK(!strcmp(p->nodes[0].host, "n1") && !strcmp(p->nodes[3].host, "n4"), "ring %s..%s",
        p->nodes[0].host, p->nodes[3].host);
  /* binding: GPUs 0-3 share package 0 (cores 0-9, PUs 0-19): slices 2,3,2,3 cores */
  {
    static const char *const want[8] = {"0-3", "4-9", "10-13", "14-19", "20-23", "24-29", "30-33", "34-39"};
    static const int threads[8] = {2, 3, 2, 3, 2, 3, 2, 3};
    for (int j = 0; j < 8; j++) {
      const struct dpt_plan_rank *r = &p->ranks[j];
      CHECK(!strcmp(r->cpuset, want[j]) && r->threads == threads[j] && r->numa == j / 4,
            "rank %d: cpuset %s threads %d numa %d, expected %s %d %d", j, r->cpuset, r->threads, r->numa,
            want[j], threads[j], j / 4);
      CHECK(!strcmp(r->gpu_busid, nd->gpus[r->gpu].busid), "busid %s", r->gpu_busid);
    }
  }
  /* every node of the job got the same binding */
  for (int i = 8; i < 32; i++)
    CHECK(!strcmp(p->ranks[i].cpuset, p->ranks[i % 8].cpuset) && p->ranks[i].gpu == p->ranks[i % 8].gpu,
          "rank %d differs from rank %d", i, i % 8);
out:
  dpt_plan_destroy(p);
  dpt_node_destroy(nd);
  pt_tree_free(t);
}

static void test_one_hca(void)
{
  struct dpt_tree *t = small_tree(2);
  struct dpt_node *nd = pt_node_mn1(0x2); /* only mlx5_1, on the switch of GPUs 2 and 3 */
  const char *hosts[] = {"n1", "n2"};
  struct dpt_plan *p = NULL;
  struct dpt_err err;

  if (pt_plan(&p, t, hosts, 2, nd, NULL, &err)) {
    CHECK(0, "%s", err.msg);
    goto out;
  }
  int first = p->ranks[0].gpu, last = p->ranks[7].gpu;
  CHECK(first == 2 || first == 3 || last == 2 || last == 3,
        "one HCA next to GPUs 2,3: block runs %d..%d", first, last);
  CHECK(!strcmp(p->nodes[0].hcas, "mlx5_1"), "hcas '%s'", p->nodes[0].hcas);
out:
  dpt_plan_destroy(p);
  dpt_node_destroy(nd);
  pt_tree_free(t);
}

static void test_single_node_and_subsets(void)
{
  struct dpt_tree *t = small_tree(2);
  struct dpt_node *nd = pt_node_mn1(0xf);
  const char *hosts[] = {"n2", "n1"};
  struct dpt_plan *p = NULL;
  struct dpt_plan_opts o;
  struct dpt_err err;
  int pix, nodeh, sys;

  if (pt_plan(&p, t, hosts, 1, nd, NULL, &err) == 0) {
    count_hops(p, nd, 0, 1, &pix, &nodeh, &sys);
    CHECK(sys == 2 && nodeh == 2 && pix == 4, "closed ring on one node: %d PIX %d NODE %d SYS", pix, nodeh, sys);
    CHECK(p->alts[0].inter_group_hops == 0 && p->alts[0].busiest_flows == 0 && p->alts[0].n_links == 0,
          "one node: %d hops, %d flows", p->alts[0].inter_group_hops, p->alts[0].busiest_flows);
    CHECK(p->alts[0].predicted_s > 0 && p->alts[0].bound_s > 0, "one node cost %g", p->alts[0].predicted_s);
  } else {
    CHECK(0, "%s", err.msg);
  }
  dpt_plan_destroy(p);
  p = NULL;

  dpt_plan_opts_init(&o);
  o.ranks_per_node = 4;
  if (pt_plan(&p, t, hosts, 2, nd, &o, &err) == 0) {
    CHECK(p->n_ranks == 8, "%d ranks", p->n_ranks);
    for (int j = 0; j < 4; j++) {
      CHECK(nd->gpus[p->ranks[j].gpu].package == nd->gpus[p->ranks[0].gpu].package,
            "4 ranks leave the package: GPU %d", p->ranks[j].gpu);
      CHECK(p->ranks[j].threads >= 2 && p->ranks[j].threads <= 3, "threads %d", p->ranks[j].threads);
    }
    count_hops(p, nd, 0, 0, &pix, &nodeh, &sys);
    CHECK(pix == 2 && nodeh == 1 && sys == 0, "4-GPU block: %d PIX %d NODE %d SYS", pix, nodeh, sys);
  } else {
    CHECK(0, "%s", err.msg);
  }
  dpt_plan_destroy(p);
  p = NULL;

  o.ranks_per_node = 2;
  o.threads_per_rank = 7;
  if (pt_plan(&p, t, hosts, 2, nd, &o, &err) == 0) {
    CHECK(p->ranks[0].threads == 7 && p->ranks[1].threads == 7, "threads %d", p->ranks[0].threads);
    CHECK(cls(nd, p->ranks[0].gpu, p->ranks[1].gpu) == DPT_PATH_PIX, "2 ranks on GPUs %d,%d",
          p->ranks[0].gpu, p->ranks[1].gpu);
  } else {
    CHECK(0, "%s", err.msg);
  }
  dpt_plan_destroy(p);
  dpt_node_destroy(nd);
  pt_tree_free(t);
}

static void test_oversubscribe_and_cpu(void)
{
  struct dpt_tree *t = small_tree(2);
  struct dpt_node *nd = pt_node_mn1(0xf), *cpu = pt_node_cpu_only();
  const char *hosts[] = {"n1", "n2"};
  struct dpt_plan *p = NULL;
  struct dpt_plan_opts o;
  struct dpt_err err;

  dpt_plan_opts_init(&o);
  o.ranks_per_node = 16;
  CHECK(pt_plan(&p, t, hosts, 2, nd, &o, &err) == DPT_E_INPUT && !p, "16 ranks on 8 GPUs accepted");
  CHECK(strstr(err.msg, "'n1'") && strstr(err.msg, "16 ranks") && strstr(err.msg, "8 GPUs"),
        "message: %s", err.msg);
  o.allow_oversubscribe = 1;
  if (pt_plan(&p, t, hosts, 2, nd, &o, &err) == 0) {
    for (int j = 0; j < 16; j += 2)
      CHECK(p->ranks[j].gpu == p->ranks[j + 1].gpu, "ranks %d,%d on GPUs %d,%d", j, j + 1, p->ranks[j].gpu,
            p->ranks[j + 1].gpu);
    /* 8 ranks share package 0's 10 cores: disjoint slices of 1-2 cores */
    for (int j = 0; j < 8; j++)
      CHECK(p->ranks[j].threads >= 1 && p->ranks[j].threads <= 2, "rank %d threads %d", j, p->ranks[j].threads);
    CHECK(!strcmp(p->ranks[0].cpuset, "0-1") && !strcmp(p->ranks[7].cpuset, "16-19"), "cpusets %s .. %s",
          p->ranks[0].cpuset, p->ranks[7].cpuset);
  } else {
    CHECK(0, "%s", err.msg);
  }
  dpt_plan_destroy(p);
  p = NULL;

  dpt_plan_opts_init(&o);
  o.ranks_per_node = 2;
  if (pt_plan(&p, t, hosts, 2, cpu, &o, &err) == 0) {
    CHECK(p->ranks[0].gpu == -1 && p->ranks[0].numa == 0 && p->ranks[1].numa == 1, "cpu ranks gpu %d numa %d,%d",
          p->ranks[0].gpu, p->ranks[0].numa, p->ranks[1].numa);
    CHECK(!strcmp(p->ranks[0].cpuset, "0-19") && !strcmp(p->ranks[1].cpuset, "20-39") &&
          p->ranks[0].threads == 10, "cpu cpusets %s %s threads %d", p->ranks[0].cpuset, p->ranks[1].cpuset,
          p->ranks[0].threads);
    CHECK(p->nodes[0].hcas[0] == '\0', "hcas '%s'", p->nodes[0].hcas);
  } else {
    CHECK(0, "%s", err.msg);
  }
  dpt_plan_destroy(p);
  dpt_node_destroy(nd);
  dpt_node_destroy(cpu);
  pt_tree_free(t);
}

static void test_bad_input(void)
{
  struct dpt_tree *t = small_tree(4);
  struct dpt_node *nd = pt_node_plain(2);
  struct dpt_plan *p = NULL;
  struct dpt_err err;
  const char *ghost[] = {"n1", "ghost7", "n2"};
  const char *dup[] = {"n1", "n2", "n3", "n2"};

  CHECK(pt_plan(&p, t, ghost, 3, nd, NULL, &err) == DPT_E_INPUT && !p, "unknown host accepted");
  CHECK(strstr(err.msg, "'ghost7'") && strstr(err.msg, "no switch"), "message: %s", err.msg);
  CHECK(pt_plan(&p, t, dup, 4, nd, NULL, &err) == DPT_E_INPUT && !p, "duplicate host accepted");
  CHECK(strstr(err.msg, "'n2'") && strstr(err.msg, "twice") && strstr(err.msg, "2 and 4"), "message: %s",
        err.msg);
  CHECK(pt_plan(&p, t, dup, 0, nd, NULL, &err) == DPT_E_INPUT && !p, "empty job accepted");
  /* a tree with a cycle of parents */
  t->sw[0].parent = 1;
  t->sw[1].parent = 0;
  pt_tree_add_switch(t, "top", -1, 0);
  CHECK(pt_plan(&p, t, dup, 2, nd, NULL, &err) == DPT_E_INPUT && !p, "cyclic tree accepted");
  CHECK(strstr(err.msg, "cycle"), "message: %s", err.msg);
  dpt_node_destroy(nd);
  pt_tree_free(t);
}

int main(void)
{
  test_full_node();
  test_one_hca();
  test_single_node_and_subsets();
  test_oversubscribe_and_cpu();
  test_bad_input();
  if (!failures)
    printf("plan node tests pass\n");
  return failures ? 1 : 0;
}
