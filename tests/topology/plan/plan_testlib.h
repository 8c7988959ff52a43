/* plan_testlib.h — in-memory switch trees and node topologies for the planner
 * tests (struct dpt_tree and struct dpt_node are plain data), an independent
 * checker of a plan's structural invariants (CHECK: tests/dpt_check.h, its count
 * shared with plan_testlib.c). */
#ifndef PLAN_TESTLIB_H
#define PLAN_TESTLIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dpt_plan.h"

#define DPT_CHECK_SHARED /* one count for the test and plan_testlib.c */
#include "dpt_check.h"

uint64_t pt_rand(uint64_t *state); /* splitmix64 */
int pt_rand_int(uint64_t *state, int lo, int hi); /* uniform in [lo, hi] */
void pt_shuffle(uint64_t *state, const char **v, int n);

/* Trees (free with pt_tree_free, never dpt_tree_destroy). */
struct dpt_tree *pt_tree_new(const char *source);
int pt_tree_add_switch(struct dpt_tree *t, const char *name, int parent, double gbps);
int pt_tree_add_host(struct dpt_tree *t, const char *name, int sw, double gbps);
void pt_tree_free(struct dpt_tree *t);
/* The same tree with its switch and host arrays in another (seeded) order. */
struct dpt_tree *pt_tree_permute(const struct dpt_tree *t, uint64_t seed);
/* Random tree: depth 1-4 switch levels, fan-out 1-4, 1-20 hosts per group,
 * names assigned in shuffled order, occasionally hosts on inner switches. */
struct dpt_tree *pt_tree_random(uint64_t *rng);
/* MN-1: "core" over leaf1..leaf8, 16 hosts each: mn1-001..mn1-128. */
struct dpt_tree *pt_tree_mn1(void);

/* Nodes, built field by field (free with dpt_node_destroy, as any node).
 * plain: n GPUs, unknown paths, no cpusets, no HCAs (like dpt_node_synthetic).
 * mn1: 2 packages x 10 cores x 2 PUs (hwloc synthetic topology), 8 GPUs on 4
 * PCIe switches (GPUs 2i, 2i+1 on switch i; switches 0,1 on package 0), an HCA
 * mlx5_<i> on switch i for every bit i of hca_mask.  Paths: same switch PIX,
 * same package NODE, else SYS. */
struct dpt_node *pt_node_plain(int n_gpus);
struct dpt_node *pt_node_mn1(unsigned hca_mask);
struct dpt_node *pt_node_cpu_only(void); /* mn1's machine, no GPU, no HCA */

/* Independent check of a plan against its inputs: ranks a permutation in
 * contiguous node blocks, nodes a permutation of the hosts, every subtree one
 * contiguous run, and (recounted here) flows per link direction of the
 * planned ring <= 1 matching plan->alts[0].links, hops == groups.  Returns
 * the number of violations, first one described in why. */
int pt_check_plan(const struct dpt_plan *p, const struct dpt_tree *t, const char *const *hosts,
                  int n, char *why, size_t len);

/* Compute a plan with the same node for every host. */
int pt_plan(struct dpt_plan **out, const struct dpt_tree *t, const char *const *hosts, int n,
            const struct dpt_node *node, const struct dpt_plan_opts *o, struct dpt_err *err);

#endif
