/* test_plan_props — property tests of the planner over generated switch trees.
 *
 * For many seeded random trees (1-4 switch levels, fan-out 1-4, 1-20 hosts per
 * group, hosts on inner switches now and then, leaves at several depths), a
 * random subset of hosts in shuffled "Slurm" order and 1-8 GPUs per node:
 *  - the plan passes the independent checker (ranks a permutation in
 *    contiguous node blocks, every subtree contiguous, <= 1 planned ring flow
 *    per link direction recounted here, hops == groups);
 *  - the same input gives the same digest and the same JSON text;
 *  - another order of the same hosts gives the same planned ring and binding;
 *  - the same tree stored in another array order gives the same digest and JSON;
 *  - the random alternative is a permutation, identical for the same seed. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

static char *plan_json(const struct dpt_plan *p)
{
  json_t *j = dpt_plan_to_json(p);
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  return s;
}

static const struct dpt_node **topos_for(const struct dpt_tree *t, struct dpt_node **by_tree_host,
                                         const char **hosts, int n)
{
  const struct dpt_node **v = malloc(sizeof *v * (size_t)n);
  for (int i = 0; i < n; i++)
    for (int h = 0; h < t->n_hosts; h++)
      if (!strcmp(t->hosts[h].name, hosts[i]))
        v[i] = by_tree_host[h];
  return v;
}

static int one(uint64_t seed)
{
  uint64_t rng = seed;
  int before = failures;
  struct dpt_tree *t = pt_tree_random(&rng), *tp = NULL;
  int nh = t->n_hosts;
  const char **all = malloc(sizeof *all * (size_t)nh), **again = NULL;
  struct dpt_node **nodes = calloc((size_t)nh, sizeof *nodes);
  struct dpt_node *mn1 = NULL;
  struct dpt_plan *p = NULL, *q = NULL, *r = NULL, *u = NULL;
  const struct dpt_node **topos = NULL, **topos2 = NULL;
  struct dpt_err err;
  struct dpt_plan_opts o;
  char why[512];
  char *j1 = NULL, *j2 = NULL, *j4 = NULL;

  for (int h = 0; h < nh; h++)
    all[h] = t->hosts[h].name;
  pt_shuffle(&rng, all, nh);
  int n = pt_rand_int(&rng, 1, nh);
  int mode = pt_rand_int(&rng, 0, 2), gpus = pt_rand_int(&rng, 1, 8);
  if (mode == 1)
    mn1 = pt_node_mn1((unsigned)pt_rand_int(&rng, 1, 15));
  for (int h = 0; h < nh; h++) {
    if (mode == 0)
      nodes[h] = pt_node_plain(pt_rand_int(&rng, 1, 8));
    else if (mode == 2)
      nodes[h] = pt_node_plain(gpus);
    else
      nodes[h] = mn1;
  }
  dpt_plan_opts_init(&o);
  o.seed = pt_rand(&rng);
  if (mode != 0 && pt_rand_int(&rng, 0, 2) == 0)
    o.ranks_per_node = pt_rand_int(&rng, 1, mode == 1 ? 8 : gpus);
  o.fp16 = pt_rand_int(&rng, 0, 1);
  topos = topos_for(t, nodes, all, n);
  if (dpt_plan_compute(&p, t, all, n, topos, &o, &err)) {
    CHECK(0, "seed %llu: plan failed: %s", (unsigned long long)seed, err.msg);
    goto out;
  }
  CHECK(pt_check_plan(p, t, all, n, why, sizeof why) == 0, "seed %llu (%d of %d hosts, %d switches): %s",
        (unsigned long long)seed, n, nh, t->n_switches, why);
  CHECK(strlen(p->digest) == 16, "digest '%s'", p->digest);

  /* same input, same answer */
  CHECK(dpt_plan_compute(&q, t, all, n, topos, &o, &err) == 0, "%s", err.msg);
  j1 = plan_json(p);
  j2 = q ? plan_json(q) : NULL;
  CHECK(q && !strcmp(p->digest, q->digest), "seed %llu: digest differs on recompute",
        (unsigned long long)seed);
  CHECK(j1 && j2 && !strcmp(j1, j2), "seed %llu: JSON differs on recompute", (unsigned long long)seed);

  /* another Slurm order: same planned ring and binding */
  again = malloc(sizeof *again * (size_t)n);
  memcpy(again, all, sizeof *again * (size_t)n);
  pt_shuffle(&rng, again, n);
  topos2 = topos_for(t, nodes, again, n);
  CHECK(dpt_plan_compute(&r, t, again, n, topos2, &o, &err) == 0, "%s", err.msg);
  if (r) {
    CHECK(pt_check_plan(r, t, again, n, why, sizeof why) == 0, "seed %llu shuffled: %s",
          (unsigned long long)seed, why);
    CHECK(r->n_ranks == p->n_ranks, "ranks %d vs %d", r->n_ranks, p->n_ranks);
    for (int k = 0; k < n; k++)
      CHECK(!strcmp(r->nodes[k].host, p->nodes[k].host) && !strcmp(r->nodes[k].hcas, p->nodes[k].hcas),
            "seed %llu: ring position %d: %s vs %s after shuffling the host list",
            (unsigned long long)seed, k, r->nodes[k].host, p->nodes[k].host);
    for (int i = 0; i < p->n_ranks && i < r->n_ranks; i++) {
      const struct dpt_plan_rank *a = &p->ranks[i], *b = &r->ranks[i];
      CHECK(a->gpu == b->gpu && !strcmp(a->cpuset, b->cpuset) && a->numa == b->numa &&
            a->threads == b->threads && !strcmp(a->gpu_busid, b->gpu_busid),
            "seed %llu: rank %d binding differs after shuffling", (unsigned long long)seed, i);
    }
    CHECK(r->alts[0].predicted_s == p->alts[0].predicted_s, "planned cost differs");
  }

  /* the same tree in another array order: same digest, same JSON */
  tp = pt_tree_permute(t, seed ^ 0x5555);
  CHECK(dpt_plan_compute(&u, tp, all, n, topos, &o, &err) == 0, "%s", err.msg);
  if (u) {
    j4 = plan_json(u);
    CHECK(!strcmp(u->digest, p->digest), "seed %llu: digest depends on the tree's array order",
          (unsigned long long)seed);
    CHECK(j4 && j1 && !strcmp(j4, j1), "seed %llu: JSON depends on the tree's array order",
          (unsigned long long)seed);
  }

  /* the random alternative: a permutation */
  {
    const struct dpt_plan_alt *ra = &p->alts[2];
    char *hit = calloc((size_t)n, 1);
    CHECK(!strcmp(ra->name, "random"), "alts[2] %s", ra->name);
    for (int k = 0; k < n; k++) {
      CHECK(ra->node_order[k] >= 0 && ra->node_order[k] < n && !hit[ra->node_order[k]],
            "random order not a permutation at %d", k);
      if (ra->node_order[k] >= 0 && ra->node_order[k] < n)
        hit[ra->node_order[k]] = 1;
    }
    free(hit);
    for (int i = 0; i < p->n_alts; i++) {
      const struct dpt_plan_alt *a = &p->alts[i];
      CHECK(a->predicted_s >= 0 && a->bound_s >= 0 && a->busbw_gbs >= 0, "alt %s negative", a->name);
      if (p->n_ranks > 1 && i < 3)
        CHECK(a->predicted_s >= a->bound_s * (1 - 1e-12), "seed %llu alt %s: predicted %g below bound %g",
              (unsigned long long)seed, a->name, a->predicted_s, a->bound_s);
    }
  }

out:
  free(j1);
  free(j2);
  free(j4);
  dpt_plan_destroy(p);
  dpt_plan_destroy(q);
  dpt_plan_destroy(r);
  dpt_plan_destroy(u);
  free(topos);
  free(topos2);
  free(again);
  if (mode == 1)
    dpt_node_destroy(mn1);
  else
    for (int h = 0; h < nh; h++)
      dpt_node_destroy(nodes[h]);
  free(nodes);
  free(all);
  pt_tree_free(t);
  pt_tree_free(tp);
  return failures == before;
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 400, ok = 0;
  for (int i = 0; i < n; i++)
    ok += one(0x1234567ULL + (uint64_t)i * 7919);
  printf("plan properties: %d of %d generated trees pass\n", ok, n);
  return failures ? 1 : 0;
}
