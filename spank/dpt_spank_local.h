/* dpt_spank_local.h — the srun side of `--dpt`: the step's plan, once.
 *
 * dpt_spank_local_plan() (needs Slurm: spank items, slurmctld RPCs) gathers the
 * inputs — the step's nodes in SLURM_NODEID order (slurm_get_job_steps: inside
 * an allocation srun's SLURM_NODELIST is the job's, not the step's), tasks per
 * node, the switch tree (opts->tree: "slurm" = slurm_load_topo() records, fed
 * to the one topology.conf parser; "flat"; or a topology.conf path) — and calls
 * dpt_spank_local_compute(), which is pure and is what the tests run outside
 * Slurm against `dpt-topo plan`: the step as a dpt_job (topology/dpt_job.h)
 * with the node topology (opts->topology XML, else HWLOC_XMLFILE or srun's own
 * machine: the nodes are assumed alike), planned by dpt_job_plan().
 * ranks-per-gpu=K is the step's way to ask for oversubscription (ranks sharing
 * GPUs or cores), at most K ranks per GPU. */
#ifndef DPT_SPANK_LOCAL_H
#define DPT_SPANK_LOCAL_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_plan.h"
#include "dpt_spank_opts.h"
#include "dpt_tree.h"

/* Plan for hosts[0..n_hosts) (SLURM_NODEID order) with tasks_per_node ranks
 * each; tree NULL = flat over the hosts.  On success *plan (caller destroys)
 * and *encoded (DPT_SPANK_PLAN value, malloc'd); note (may be NULL, note_len
 * bytes) receives what ranks share when ranks-per-gpu oversubscribes the nodes
 * ("" otherwise), for srun's stderr. */
int dpt_spank_local_compute(const struct dpt_spank_opts *opts, const struct dpt_tree *tree,
                            const char *const *hosts, int n_hosts, int tasks_per_node,
                            struct dpt_plan **plan, char **encoded, char *note, size_t note_len,
                            struct dpt_err *err);

/* "8(x4)" / "8" -> 8; anything else (several counts) -> DPT_E_INPUT. */
int dpt_spank_uniform_tasks(const char *tasks_per_node, int *out, struct dpt_err *err);

#ifdef DPT_SPANK_WITH_SLURM
#include <stdint.h>
#include <slurm/spank.h>
/* Everything above from the live step; sets DPT_SPANK_PLAN in srun's environment
 * (which srun hands to the step's tasks).  keep (may be NULL) receives the plan
 * (caller destroys). */
int dpt_spank_local_plan(spank_t sp, const struct dpt_spank_opts *opts, struct dpt_plan **keep,
                         struct dpt_err *err);
#endif

#endif /* DPT_SPANK_LOCAL_H */
