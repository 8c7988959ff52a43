/* dpt_spank_opts.h — the `--dpt[=k=v,...]` option of the SPANK plugin.
 *
 * Pure C, no Slurm: unit-tested and fuzzed outside Slurm.  The same parser
 * reads plugstack.conf arguments (the site's defaults, one "k=v[,k=v]" per
 * argument) and the user's option value, which layers on top of the defaults.
 * Everything it reads is user input that reaches code running as root in
 * slurmstepd: lengths and characters are checked before anything is kept,
 * and errors name the key and the offending byte without echoing the input
 * raw (it may be 10,000 bytes of anything). */
#ifndef DPT_SPANK_OPTS_H
#define DPT_SPANK_OPTS_H

#include <stddef.h>

#include "dpt_err.h"

#define DPT_SPANK_ARG_MAX 4095   /* longest accepted option value / plugstack argument */
#define DPT_SPANK_PATH_MAX 1024  /* buffer for path values, including the NUL */

enum dpt_spank_bind {
  DPT_SPANK_BIND_AUTO = 0, /* intersect the plan's cpuset with Slurm's; warn and keep Slurm's if empty */
  DPT_SPANK_BIND_STRICT,   /* the same, but an empty intersection fails the task */
  DPT_SPANK_BIND_NONE,     /* environment only, leave the CPU binding to Slurm */
};

struct dpt_spank_opts {
  int enabled;                    /* --dpt was given (plugstack args alone never enable) */
  char comm[16];                  /* auto | mpi | ring | hierarchical | nccl */
  int fp16;                       /* fp16 all-reduce on the wire */
  int ranks_per_gpu;              /* 0: one rank per GPU; k > 0: up to k ranks share a GPU */
  int threads;                    /* OMP_NUM_THREADS per rank; 0: the plan's */
  char report[DPT_SPANK_PATH_MAX];   /* runtime JSON report path, "" for none */
  char topology[DPT_SPANK_PATH_MAX]; /* hwloc XML of the nodes, "" = srun's machine */
  char tree[DPT_SPANK_PATH_MAX];     /* "slurm" (slurm_load_topo), "flat", or a topology.conf path */
  enum dpt_spank_bind bind;
  int verbose;                    /* 0..3 */
};

/* Built-in defaults (comm=auto, tree=slurm, bind=auto, nothing enabled). */
void dpt_spank_opts_init(struct dpt_spank_opts *o);

/* Apply "k=v,k=v,..." on top of *o.  `what` names the source in messages
 * ("--dpt", "plugstack.conf argument 2").  s may be NULL or "" (nothing to
 * apply).  Does not change o->enabled.  On error *o is left unchanged and
 * err says which key/byte is wrong and what is accepted; returns DPT_E_INPUT. */
int dpt_spank_opts_apply(struct dpt_spank_opts *o, const char *s, const char *what,
                         struct dpt_err *err);

/* The value of --dpt as Slurm hands it to the option callback: start again
 * from *defaults (so a second call does not accumulate), apply s, set enabled.
 * On error *o is not touched. */
int dpt_spank_opts_from_option(struct dpt_spank_opts *o, const struct dpt_spank_opts *defaults,
                               const char *s, struct dpt_err *err);

/* Canonical "k=v,..." form of every key (for logs and tests). */
int dpt_spank_opts_format(const struct dpt_spank_opts *o, char *buf, size_t len);

const char *dpt_spank_bind_name(enum dpt_spank_bind b);

#endif /* DPT_SPANK_OPTS_H */
