/* dpt_boot_int.h — private to the bootstrap: dpt_boot.c (create, exchange 1's node
 * records, dpt_boot_init), dpt_boot_xport.c (the transports: PMIx, else MPI; the
 * all-gather and the blob broadcast over them) and dpt_boot_plan.c (the plan from
 * everyone's records, exchange 2's agreement).  The bootstrap's state and the calls
 * between those files.  Not installed, not for other modules. */
#ifndef DPT_BOOT_INT_H
#define DPT_BOOT_INT_H

#ifdef DPT_HAVE_PMIX
#include <pmix.h>
#endif

#include "dpt_boot.h"
#include "dpt_job.h"
#include "dpt_node.h"

#define DPT_BOOT_STR_MAX (64 * 1024) /* one rank's record in dpt_boot_allgather */

struct dpt_boot {
  struct dpt_ctx ctx;
  char transport[8];      /* "pmix" or "mpi" */
  int lrank, lsize;       /* launcher rank / size */
  int rank;               /* plan rank */
  int *plan_of;           /* [lsize] plan rank of each launcher rank */
  int *launcher_of;       /* [lsize] launcher rank of each plan rank */
  struct dpt_plan *plan;
  unsigned seq;           /* exchanges so far (PMIx key names) */
  int mpi_inited_here;
  char note[512];         /* dpt_job_plan: what oversubscribed ranks share, "" if none */
#ifdef DPT_HAVE_PMIX
  pmix_proc_t me;
  int pmix_inited;
#endif
};

/* Exchange 1: one rank's view of its node. */
struct dpt_boot_rec {
  char host[64];
  int host_index;         /* -1 unknown */
  char addr[256];         /* SLURM_TOPOLOGY_ADDR, "" if none */
  char pattern[256];      /* SLURM_TOPOLOGY_ADDR_PATTERN, "" if none */
  int gpus, hcas, pus;
  char topo[17];          /* node digest, "failed" if the node could not be loaded */
  char topo_src[160];     /* where the node came from, or why it could not be loaded */
};

/* The planning inputs every rank must share: the job as the launcher's variables
 * describe it (dpt_job_from_env: DPT_PLAN_XML / DPT_PLAN_GPUS, DPT_PLAN_THREADS,
 * DPT_FP16, DPT_OVERSUBSCRIBE) with the caller's options on top, and the tree choice
 * (DPT_PLAN_TREE). */
struct dpt_boot_in {
  struct dpt_job job;
  char tree[8];           /* auto, addr or flat */
};

/* dpt_boot_xport.c: start the transport named (NULL: DPT_BOOT, else auto) and learn
 * b->lrank, b->lsize; stop it (what it started) in dpt_boot_destroy. */
int dpt_boot_xport_start(struct dpt_boot *b, const char *name, struct dpt_err *err);
void dpt_boot_xport_stop(struct dpt_boot *b);

/* dpt_boot_plan.c: the plan from everyone's records (recs[lsize]; same inputs, same
 * plan on every rank) into b->plan, b->plan_of, b->launcher_of, b->rank, b->note;
 * then exchange 2, every rank's digest and options and what the launcher announced
 * (expect: its DPT_PLAN_DIGEST, NULL if none), disagreements named. */
int dpt_boot_plan_compute(struct dpt_boot *b, const struct dpt_boot_rec *recs,
                          const struct dpt_boot_in *in, const struct dpt_node *node,
                          struct dpt_err *err);
int dpt_boot_plan_agree(struct dpt_boot *b, const struct dpt_boot_in *in, const char *expect,
                        struct dpt_err *err);

#endif
