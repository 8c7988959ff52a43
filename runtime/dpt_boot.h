/* dpt_boot.h — bootstrap: every rank describes its node, every rank computes
 * the same plan, and all ranks check that they agree.
 *
 * Transport: PMIx when the process was started by a PMIx server (srun
 * --mpi=pmix, Open MPI's mpirun: PMIX_NAMESPACE/PMIX_RANK are set) —
 * PMIx_Put / Commit / Fence(collect data) / Get; otherwise MPI (MPI_Allgather
 * on MPI_COMM_WORLD, MPI initialised if needed).  DPT_BOOT=pmix|mpi forces one.
 * The "launcher rank" is the PMIx rank (== SLURM_PROCID / MPI world rank).
 *
 * Exchange 1, one record per rank: host name (dpt_ctx: SLURMD_NODENAME,
 * DPT_NODE_NAME or gethostname), the host's index in the launcher's host list
 * (DPT_HOST_INDEX from dpt_bind_env, else SLURM_NODEID, else order of first
 * appearance by launcher rank), SLURM_TOPOLOGY_ADDR and _PATTERN, and a node
 * summary: GPU/HCA/PU counts and a digest of the node's dpt.node JSON (host
 * name and source left out).  The node topology comes from DPT_PLAN_XML (set
 * by dpt-launch --input and by the SPANK plugin's topology=), else a node with
 * DPT_PLAN_GPUS GPUs (dpt-launch --gpus-per-node without --input), else
 * HWLOC_XMLFILE or the live machine (dpt_node_load).
 *
 * Every rank then plans the job with dpt_job_plan() (topology/dpt_job.h, as
 * dpt-launch, the SPANK plugin, `dpt-topo plan` and the job report do): the
 * hosts in host-index order, the tree from all ranks' SLURM_TOPOLOGY_ADDR
 * (DPT_JOB_TREE_ADDRS) when every rank has one (flat otherwise, or when
 * DPT_PLAN_TREE=flat), its own node topology for every host (nodes must all
 * publish the same summary: dpt plans homogeneous jobs), ranks_per_node =
 * ranks counted per host (equal on every host), threads_per_rank =
 * DPT_PLAN_THREADS, fp16 = DPT_FP16, and oversubscription (ranks sharing GPUs
 * or cores) only with DPT_OVERSUBSCRIBE=1 (dpt-launch --oversubscribe and srun
 * --dpt=ranks-per-gpu set it; rank 0 says so on stderr when no launcher
 * announced the plan).  This rank's plan rank (ring position) is
 * first_rank of its host + its position among the host's ranks in launcher
 * rank order (what the SPANK plugin and dpt-launch do).
 *
 * Exchange 2: each rank's plan digest, its planning options and the digest
 * and ring rank its launcher announced (DPT_PLAN_DIGEST, DPT_RANK).  Every
 * rank checks them all, so either every rank succeeds or every rank fails
 * with the same message naming the disagreeing ranks (DPT_E_INPUT). */
#ifndef DPT_BOOT_H
#define DPT_BOOT_H

#include <stddef.h>

#include "dpt_comm.h"
#include "dpt_ctx.h"
#include "dpt_err.h"
#include "dpt_plan.h"

#define DPT_BOOT_BLOB_MAX (1u << 20) /* dpt_boot_bcast_blob: at most 1 MiB */
#define DPT_BOOT_NCCL_ID_BYTES 128   /* sizeof(ncclUniqueId) */

struct dpt_boot_opts {
  const char *transport;  /* "auto", "pmix", "mpi"; NULL: DPT_BOOT or "auto" */
  const char *node_xml;   /* NULL: DPT_PLAN_XML (see above) */
  int gpus_per_node;      /* > 0: synthetic nodes; 0: DPT_PLAN_GPUS or the topology */
  int threads_per_rank;   /* >= 0; -1: DPT_PLAN_THREADS or 0 (the cores of the cpuset) */
  int fp16;               /* 0/1; -1: DPT_FP16 or 0 */
  const char *tree;       /* "auto", "addr", "flat"; NULL: DPT_PLAN_TREE or "auto" */
  const char *expect_digest; /* NULL: DPT_PLAN_DIGEST when set; "": no check */
  /* dpt_boot_init only: */
  const char *comm;       /* communicator name; NULL: DPT_COMM or "ring" */
  int bind;               /* 1 (default): when no dpt launcher bound this process
                             (DPT_LAUNCHER/DPT_CPUSET unset), bind it as the plan
                             says within its current affinity; 0: never */
  double watchdog_s;      /* dpt_comm_opts.watchdog_s (0: default) */
};

struct dpt_boot;

void dpt_boot_opts_init(struct dpt_boot_opts *opts);

/* Collective over all ranks of the job (every rank must call it).  Errors:
 * DPT_E_INPUT for disagreeing ranks (naming them), inconsistent launcher
 * variables, heterogeneous nodes, unequal ranks per host, a plan the planner
 * rejects; DPT_E_RUNTIME when PMIx/MPI fail. */
int dpt_boot_create(struct dpt_boot **out, const struct dpt_boot_opts *opts, struct dpt_err *err);
void dpt_boot_destroy(struct dpt_boot *boot);

const struct dpt_plan *dpt_boot_plan(const struct dpt_boot *boot);
const struct dpt_ctx *dpt_boot_ctx(const struct dpt_boot *boot); /* size/node filled in */
int dpt_boot_rank(const struct dpt_boot *boot);          /* plan rank = ring position */
int dpt_boot_size(const struct dpt_boot *boot);
int dpt_boot_launcher_rank(const struct dpt_boot *boot); /* PMIx / MPI world rank */
int dpt_boot_launcher_rank_of(const struct dpt_boot *boot, int plan_rank);
const char *dpt_boot_transport(const struct dpt_boot *boot); /* "pmix" or "mpi" */
/* "0123456789abcdef"; the plan every rank agreed on. */
const char *dpt_boot_digest(const struct dpt_boot *boot);

/* Collective: plan rank `root`'s len bytes of buf reach every rank's buf
 * (e.g. an ncclUniqueId, DPT_BOOT_NCCL_ID_BYTES).  Every rank passes the same
 * root and len (a different len is DPT_E_INPUT on the ranks that see it). */
int dpt_boot_bcast_blob(struct dpt_boot *boot, int root, void *buf, size_t len,
                        struct dpt_err *err);

/* Collective: every rank's string (< 64 KiB) to all: all[launcher rank],
 * malloc'ed strings in a malloc'ed array of dpt_boot_size() entries
 * (free with dpt_boot_strings_free). */
int dpt_boot_allgather(struct dpt_boot *boot, const char *mine, char ***all, struct dpt_err *err);
void dpt_boot_strings_free(char **all, int n);

/* The one call a training program makes at start-up: MPI_Init_thread (if not
 * initialised), dpt_boot_create (plan agreed, launcher's digest verified),
 * binding when no launcher did it (opts->bind), and the communicator in the
 * plan's ring order (ring_pos = plan rank, node = plan node).  opts may be
 * NULL (defaults).  On success *boot and *comm are ready; on failure both are
 * NULL and err says why (same message on every rank for plan disagreement). */
int dpt_boot_init(int *argc, char ***argv, const struct dpt_boot_opts *opts,
                  struct dpt_boot **boot, struct dpt_comm **comm, struct dpt_err *err);
/* Destroys comm and boot (either may be NULL) and finalises MPI. */
void dpt_boot_fini(struct dpt_boot *boot, struct dpt_comm *comm);

#endif /* DPT_BOOT_H */
