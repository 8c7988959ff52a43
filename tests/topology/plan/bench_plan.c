/* bench_plan — how long dpt_plan_compute takes at MN-1 scale (128 nodes in 8
 * groups of 16, 8 GPUs each, 1024 ranks, hosts in shuffled order).  Not a
 * timed test: run it by hand, `bench_plan [iterations]`.
 * Two cases: every host shares one node topology (one XML for all), and every
 * host has its own topology object with equal content (one XML per host: the
 * GPU order is searched once, then found by content). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan_testlib.h"

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmpd(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
  int iters = argc > 1 ? atoi(argv[1]) : 100;
  struct dpt_tree *t = pt_tree_mn1();
  struct dpt_node *nodes[128];
  const struct dpt_node *shared[128], *distinct[128];
  const char *hosts[128];
  uint64_t rng = 7;
  double *ms = malloc(sizeof *ms * (size_t)(iters > 0 ? iters : 1));
  struct dpt_err err;

  if (iters < 1 || !ms)
    return 2;
  for (int i = 0; i < 128; i++) {
    hosts[i] = t->hosts[i].name;
    nodes[i] = pt_node_mn1(0xf);
  }
  pt_shuffle(&rng, hosts, 128);
  for (int i = 0; i < 128; i++) {
    shared[i] = nodes[0];
    distinct[i] = nodes[i];
  }
  for (int c = 0; c < 2; c++) {
    const struct dpt_node *const *topos = c ? distinct : shared;
    char digest[17] = "";
    for (int i = 0; i < iters; i++) {
      struct dpt_plan *p = NULL;
      double t0 = now_ms();
      if (dpt_plan_compute(&p, t, hosts, 128, topos, NULL, &err)) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        return 1;
      }
      ms[i] = now_ms() - t0;
      snprintf(digest, sizeof digest, "%s", p->digest);
      dpt_plan_destroy(p);
    }
    qsort(ms, (size_t)iters, sizeof *ms, cmpd);
    printf("dpt_plan_compute, MN-1 (128 nodes x 8 GPUs = 1024 ranks, 8 groups), %s: "
           "min %.3f ms, median %.3f ms, max %.3f ms over %d runs (digest %s)\n",
           c ? "one topology object per host" : "one shared topology", ms[0], ms[iters / 2],
           ms[iters - 1], iters, digest);
  }
  for (int i = 0; i < 128; i++)
    dpt_node_destroy(nodes[i]);
  pt_tree_free(t);
  free(ms);
  return 0;
}
