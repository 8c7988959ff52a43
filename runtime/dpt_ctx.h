/* dpt_ctx.h — who am I: the job context from whichever launcher started us.
 *
 * Sources, first match wins (a process started by dpt-launch through mpirun
 * sees several; they are cross-checked):
 *   "dpt-launch"  DPT_RANK, DPT_SIZE, DPT_LOCAL_RANK, DPT_LOCAL_SIZE, DPT_NODE_ID,
 *                 DPT_N_NODES, DPT_NODE_NAME (set by dpt-launch, from the plan)
 *   "ompi"        OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (mpirun)
 *   "slurm"       SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_LOCALID,
 *                 SLURM_NODEID, SLURM_NNODES, SLURM_TASKS_PER_NODE, SLURMD_NODENAME
 *   "pmix"        PMIX_RANK, PMIX_NAMESPACE (size and locality come from the
 *                 PMIx server at bootstrap: size is -1 here)
 *   "single"      none of the above: rank 0 of 1
 * Who started the ranks (launcher) is named apart from the variables read
 * (source): srun --dpt sets dpt-launch's variables, and mpirun inside an sbatch
 * script leaves SLURM_PROCID in its ranks' environment.
 * Values that are not integers, out of range (rank >= size, ...), missing
 * partners (SLURM_PROCID without SLURM_NTASKS) or disagreeing between sources
 * (OMPI_COMM_WORLD_RANK != PMIX_RANK, DPT_RANK != OMPI_COMM_WORLD_RANK) are
 * DPT_E_INPUT errors naming the variables and their values. */
#ifndef DPT_CTX_H
#define DPT_CTX_H

#include "dpt_err.h"

struct dpt_ctx {
  char source[16];        /* the variables read: "dpt-launch", "ompi", "slurm", "pmix", "single" */
  char launcher[16];      /* who started the ranks: dpt_ctx_launcher() */
  int rank;               /* 0..size-1 */
  int size;               /* -1 when only PMIx knows (filled by dpt_boot) */
  int local_rank;         /* rank among the ranks of this node, -1 unknown */
  int local_size;         /* ranks on this node, -1 unknown */
  int node_id;            /* 0..n_nodes-1, -1 unknown (dpt_boot fills it) */
  int n_nodes;            /* -1 unknown */
  char node_name[256];    /* SLURMD_NODENAME / DPT_NODE_NAME / gethostname() */
  char job_id[64];        /* SLURM_JOB_ID[.SLURM_STEP_ID], DPT_JOB_ID, or "" */
  char topology_addr[256];    /* SLURM_TOPOLOGY_ADDR or "" */
  char topology_pattern[256]; /* SLURM_TOPOLOGY_ADDR_PATTERN or "" */
  char pmix_namespace[256];   /* PMIX_NAMESPACE or "" */
};

/* Reads variables through get(arg, name) (returns NULL when unset). */
typedef const char *(*dpt_ctx_getenv_fn)(void *arg, const char *name);

int dpt_ctx_load(struct dpt_ctx *ctx, dpt_ctx_getenv_fn get, void *arg, struct dpt_err *err);

/* Who started the ranks, for the start lines and reports: DPT_LAUNCHER where it
 * names a dpt launcher ("spank" = srun --dpt, "dpt-launch"), else from the
 * variables in dpt_ctx_load's order: "dpt-launch" (DPT_RANK), "mpirun"
 * (OMPI_COMM_WORLD_RANK), "srun" (SLURM_PROCID), "pmix" (PMIX_RANK, another
 * PMIx launcher), "single".  DPT_LAUNCHER=boot (dpt_boot_init bound the rank
 * itself) names no launcher.  Checks no value: never fails. */
const char *dpt_ctx_launcher(dpt_ctx_getenv_fn get, void *arg);

/* dpt_ctx_launcher() on the process environment. */
const char *dpt_ctx_launcher_from_env(void);

/* dpt_ctx_load() on the process environment. */
int dpt_ctx_from_env(struct dpt_ctx *ctx, struct dpt_err *err);

/* One line: "rank 3/8 local 1/2 node 1/4 (n2) via srun". */
void dpt_ctx_describe(const struct dpt_ctx *ctx, char *buf, unsigned long len);

#endif /* DPT_CTX_H */
