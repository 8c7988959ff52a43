/* dpt_plan.h — the topology-aware ring planner and its cost model.
 *
 * A pure function of (switch tree, job hosts in Slurm's order, each host's node
 * topology, options): the SPANK plugin, dpt-launch, `dpt-topo plan` and every
 * rank's bootstrap call dpt_plan_compute() and must get the same answer; the
 * digest lets ranks check that they did.
 *
 * The algorithm (depth-first tree walk by name, GPU order by path class with
 * HCA-adjacent ends, fair cpuset slices, node-wide HCA list) and the cost
 * formulas of every alternative are described at the top of dpt_plan.c; the
 * JSON document in docs/schema-plan.md. */
#ifndef DPT_PLAN_H
#define DPT_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_node.h"
#include "dpt_tree.h"

#define DPT_RESNET50_GRAD_BYTES 102228128ULL /* 25,557,032 fp32 parameters */

struct dpt_plan_opts {
  int ranks_per_node;       /* 0: one rank per GPU of the node */
  int allow_oversubscribe;  /* ranks_per_node may exceed GPUs (ranks share GPUs) */
  int threads_per_rank;     /* 0: the cores of the rank's cpuset */
  uint64_t size_bytes;      /* message for the cost model; 0: DPT_RESNET50_GRAD_BYTES */
  int fp16;                 /* fp16 on the wire: half the bytes */
  uint64_t seed;            /* seed of the "random" alternative */
  double host_gbps;         /* host link when the tree does not say; 0: 100 (EDR IB) */
  double uplink_gbps;       /* switch uplink when the tree does not say; 0: host_gbps */
  double intra_gbps;        /* GPU-to-GPU inside a node; 0: 128 (PCIe 3 x16 both ways) */
  double alpha_us;          /* per-step latency; 0: 5 us */
};

struct dpt_plan_rank {
  int rank;           /* ring position = the rank every communicator uses */
  int node;           /* index into dpt_plan.nodes (ring order of nodes) */
  int local_rank;     /* 0..ranks on the node - 1, in ring order */
  int gpu;            /* GPU index on the node (PCI order), -1 if none */
  char gpu_busid[32]; /* "" if none */
  char cpuset[256];   /* hwloc list syntax "0-9,40-49"; "" when unknown */
  int numa;           /* memory node OS index, -1 when unknown */
  int threads;        /* OMP_NUM_THREADS for the rank */
};

struct dpt_plan_node {
  char host[64];
  int host_index;     /* index into the hosts[] given to dpt_plan_compute */
  char group[64];     /* name of the switch the host hangs off (its leaf) */
  int first_rank;     /* ranks [first_rank, first_rank + n_ranks) live here */
  int n_ranks;
  int n_gpus;         /* GPUs of the node's topology */
  char hcas[256];     /* node-wide NCCL_IB_HCA list, "mlx5_0,mlx5_1"; "" if none */
};

/* One direction of one link of the tree and the ring flows it carries. */
struct dpt_plan_link {
  char from[64];      /* host or switch name */
  char to[64];        /* its leaf / parent switch (up), or the reverse (down) */
  int flows;          /* ring flows in this direction */
  double gbps;        /* link bandwidth used by the cost model (Gbit/s) */
};

/* One way of arranging the all-reduce, evaluated with the cost model. */
struct dpt_plan_alt {
  char name[32];            /* "planned", "slurm-order", "random", "hierarchical", "2d" */
  int *node_order;          /* [n_nodes] job-host indexes, in ring order */
  int inter_group_hops;     /* ring edges between nodes of different leaf switches */
  int busiest_flows;        /* most ring flows on one link in one direction */
  char busiest_link[160];   /* "leaf3 -> spine" */
  double predicted_s;       /* predicted all-reduce time */
  double bound_s;           /* bandwidth lower bound 2(p-1)/p * S / B */
  double busbw_gbs;         /* nccl-tests busbw (GB/s) for predicted_s */
  int n_links;
  struct dpt_plan_link *links;  /* [n_links] link directions with flows > 0: switch
                                   uplinks in planned-walk order, then host links in
                                   planned ring order; up before down */
};

struct dpt_plan {
  struct dpt_plan_opts opts;    /* as resolved: defaults filled in (no zeros left
                                   except ranks_per_node/threads_per_rank) */
  char tree_source[64];         /* dpt_tree.source */
  int n_groups;                 /* leaf switches holding job hosts */
  double host_gbps_min, host_gbps_max;     /* host links of the job, as used by the model */
  double uplink_gbps_min, uplink_gbps_max; /* switch uplinks below the job's lowest common
                                              switch; 0 when the job has one group */
  uint64_t size_bytes;      /* message the costs are for (after fp16 halving) */
  int n_nodes;
  struct dpt_plan_node *nodes;  /* [n_nodes] in ring order */
  int n_ranks;
  struct dpt_plan_rank *ranks;  /* [n_ranks], ranks[i].rank == i */
  int n_alts;
  struct dpt_plan_alt *alts;    /* [n_alts]; alts[0] is the plan itself ("planned") */
  char digest[17];              /* 16 hex digits over everything above */
};

void dpt_plan_opts_init(struct dpt_plan_opts *opts);

/* hosts: the job's hosts in the order Slurm gave them (n_hosts entries);
 * topos: one node topology per host (entries may point to the same node;
 * identical topologies are searched once).  tree and topos are only read.
 * The planned ring does not depend on the order of hosts[] nor on the order
 * of the tree's arrays (children are visited by name).
 * Errors (DPT_E_INPUT, naming the host): a host not in the tree, duplicate
 * hosts, more ranks than GPUs without allow_oversubscribe, an invalid tree
 * (no root / several roots / cycle of parents), negative options. */
int dpt_plan_compute(struct dpt_plan **out, const struct dpt_tree *tree,
                     const char *const *hosts, int n_hosts,
                     const struct dpt_node *const *topos,
                     const struct dpt_plan_opts *opts, struct dpt_err *err);

void dpt_plan_destroy(struct dpt_plan *plan);

/* JSON "dpt.plan/1". New reference. */
json_t *dpt_plan_to_json(const struct dpt_plan *plan);

/* Human view: ring, per-rank binding table, alternatives side by side. */
void dpt_plan_print(FILE *f, const struct dpt_plan *plan);

#endif /* DPT_PLAN_H */
