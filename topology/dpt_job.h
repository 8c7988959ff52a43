/* dpt_job.h — a job description turned into the planner's inputs, in one place.
 *
 * Five programs plan a job: `dpt-topo plan`, dpt-launch, the SPANK plugin
 * (srun --dpt), every rank's bootstrap (runtime/dpt_boot) and the job report
 * (runtime/dpt_report: the plan dpt-launch used).  Each describes its job in a
 * struct dpt_job — hosts, where the switch tree comes from, what the nodes
 * hold, ranks per node, oversubscription, threads — and dpt_job_plan() turns it
 * into the arguments of dpt_plan_compute() (dpt_job_inputs()), applies the one
 * oversubscription rule and plans.  The same job gives the same plan and digest
 * whoever plans it, and a job that cannot be planned is refused by all of them
 * with the same message (DPT_E_INPUT: exit 2).
 *
 * Oversubscription (one rule for every caller).  A node is oversubscribed when
 * two of its ranks share a GPU (more ranks than GPUs) or a CPU (ranks without a
 * GPU: more ranks than cores; ranks with GPUs: more ranks than the cores next
 * to their GPUs) — the plan's cpusets of two ranks meet.  That happens only
 * when the job asks for it: dpt-launch and `dpt-topo plan` --oversubscribe,
 * srun --dpt=ranks-per-gpu=K (at most K ranks per GPU), DPT_OVERSUBSCRIBE=1 in
 * the ranks' environment (what dpt-launch and the SPANK plugin set for the
 * bootstrap, and what a plain mpirun/srun user sets).  Otherwise the job is
 * refused with a message naming the host, what would be shared and
 * --oversubscribe.  When it is asked for and happens, dpt_job_plan() says so
 * in `note` (the caller prints it on stderr; the job report records it as
 * job.oversubscribed): cpusets never overlap silently.
 *
 * The launchers hand the planning inputs to the ranks in environment variables
 * (dpt-launch: -x; the SPANK plugin: the task's environment; dpt_bind_env:
 * DPT_PLAN_THREADS): DPT_PLAN_XML (one node XML for every host), DPT_PLAN_GPUS
 * (nodes known by their GPU count), neither (HWLOC_XMLFILE or the live
 * machine), DPT_PLAN_THREADS, DPT_FP16, DPT_OVERSUBSCRIBE; dpt_job_from_env()
 * reads them back, for the bootstrap and the report. */
#ifndef DPT_JOB_H
#define DPT_JOB_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_node.h"
#include "dpt_plan.h"
#include "dpt_tree.h"

enum dpt_job_tree_source {
  DPT_JOB_TREE_FLAT = 0,      /* every host under one switch (dpt_tree_flat) */
  DPT_JOB_TREE_TOPOLOGY_CONF, /* tree_path: Slurm topology.conf */
  DPT_JOB_TREE_ADDR_LIST,     /* tree_path: one "SLURM_TOPOLOGY_ADDR [PATTERN]" per line */
  DPT_JOB_TREE_IBNETDISCOVER, /* tree_path: `ibnetdiscover -p` dump */
  DPT_JOB_TREE_ADDRS,         /* addrs[]/patterns[] (n_addrs): the ranks' SLURM_TOPOLOGY_ADDR */
  DPT_JOB_TREE_GIVEN,         /* tree: built by the caller (slurmctld's switch records) */
};

enum dpt_job_node_source {
  DPT_JOB_NODE_LOCAL = 0, /* HWLOC_XMLFILE, else this machine (hwloc), for every host */
  DPT_JOB_NODE_XML,       /* node_path: one hwloc XML for every host */
  DPT_JOB_NODE_XML_DIR,   /* node_path: DIR/<host>.xml, each host its own */
  DPT_JOB_NODE_GPUS,      /* gpus_per_node GPUs and nothing else known (no cpusets) */
  DPT_JOB_NODE_GIVEN,     /* node: loaded by the caller, for every host */
};

struct dpt_job {
  /* The job's hosts in the launcher's order (Slurm's SLURM_NODEID order, the
   * hostfile's, the bootstrap's host index order): a Slurm hostlist expanded
   * with libslurm, or plain names. */
  const char *hostlist;         /* "n[01-16],m3"; NULL: hosts[] */
  const char *const *hosts;     /* [n_hosts] */
  int n_hosts;

  enum dpt_job_tree_source tree_source;
  const char *tree_path;        /* TOPOLOGY_CONF, ADDR_LIST, IBNETDISCOVER */
  const char *const *addrs;     /* ADDRS: [n_addrs], one per rank (a host may repeat) */
  const char *const *patterns;  /* ADDRS: [n_addrs] or NULL; entries may be NULL */
  int n_addrs;
  const struct dpt_tree *tree;  /* GIVEN (only read) */

  enum dpt_job_node_source node_source;
  const char *node_path;        /* XML (file), XML_DIR (directory) */
  int gpus_per_node;            /* GPUS */
  const struct dpt_node *node;  /* GIVEN (only read) */

  int ranks_per_node;           /* 0: one rank per GPU (1 on a node without GPUs) */
  int oversubscribe;            /* 1: ranks may share GPUs and CPUs (asked for) */
  int ranks_per_gpu;            /* > 0: oversubscription with at most this many ranks per GPU
                                   (srun --dpt=ranks-per-gpu=K; a node without GPUs counts as one) */
  int threads_per_rank;         /* 0: the cores of the rank's cpuset slice */

  /* The cost model's options (size_bytes, fp16, seed, host_gbps, uplink_gbps,
   * intra_gbps, alpha_us); its ranks_per_node, allow_oversubscribe and
   * threads_per_rank are the job's fields above. */
  struct dpt_plan_opts model;

  /* How the caller names its inputs in messages (NULL: dpt_job's words):
   * e.g. "--nodes 'n[1-4]'", "--topology-conf FILE", "--node-xml FILE"
   * (XML_DIR: "... DIR", followed by ": host H"). */
  const char *hosts_what, *tree_what, *node_what;
};

/* Zeros: flat tree, this machine's topology, one rank per GPU, nothing asked. */
void dpt_job_init(struct dpt_job *job);

/* The launcher's environment (see above) into *job: node_source/node_path/
 * gpus_per_node from DPT_PLAN_XML / DPT_PLAN_GPUS, threads_per_rank from
 * DPT_PLAN_THREADS, model.fp16 from DPT_FP16, oversubscribe from
 * DPT_OVERSUBSCRIBE.  Unset variables leave the fields alone; a variable that
 * is set but not valid is DPT_E_INPUT naming it. */
int dpt_job_from_env(struct dpt_job *job, struct dpt_err *err);

/* The arguments of dpt_plan_compute(): tree, hosts, one topology per host,
 * options.  Owned by the struct (the tree and nodes the job lends are not). */
struct dpt_job_inputs {
  const struct dpt_tree *tree;
  char **hosts;                  /* [n_hosts] */
  int n_hosts;
  const struct dpt_node **topos; /* [n_hosts] */
  struct dpt_plan_opts opts;
  /* private */
  struct dpt_tree *own_tree;
  struct dpt_node **own_nodes;   /* [n_hosts], NULL entries where none is owned */
};

/* Errors (DPT_E_INPUT unless out of memory), each prefixed with the caller's
 * name of the input: a hostlist libslurm rejects or that names no host, a
 * tree file or SLURM_TOPOLOGY_ADDR strings that do not parse, a node topology
 * that does not load.  On error *in is empty (dpt_job_inputs_free is safe). */
int dpt_job_inputs(struct dpt_job_inputs *in, const struct dpt_job *job, struct dpt_err *err);
void dpt_job_inputs_free(struct dpt_job_inputs *in);

/* The topology of one host as the job describes it (LOCAL, XML, XML_DIR,
 * GPUS; GIVEN is the caller's and not loaded here), for callers that look at
 * their own node before planning (the bootstrap's node summary). */
int dpt_job_load_node(const struct dpt_job *job, const char *host, struct dpt_node **node,
                      struct dpt_err *err);

/* dpt_job_inputs(), the oversubscription rule, dpt_plan_compute().  note (may
 * be NULL; note_len bytes) receives "" or, when the job asked for
 * oversubscription and the plan shares GPUs or CPUs, what is shared
 * ("oversubscribed as asked: host 'vm': 3 ranks on 2 cores, ..."). */
int dpt_job_plan(struct dpt_plan **plan, const struct dpt_job *job, char *note, size_t note_len,
                 struct dpt_err *err);

/* What the ranks of a plan share: 0 when no two ranks of a node share a GPU
 * or a CPU; else the number of such nodes, and what (may be NULL; len bytes)
 * describes the first ("host 'vm': 3 ranks on 2 cores: ranks 0 and 1 share
 * cpus 0").  Ranks with unknown cpusets (nodes known by their GPU count) share
 * no CPU. */
int dpt_job_sharing(const struct dpt_plan *plan, char *what, size_t len);

#endif /* DPT_JOB_H */
