/* dpt_train_priv.h — what the modules of dpt-train share: the options, the ranks, the run,
 * and each module's entry points (dpt_train.c: the step loop and main; dpt_train_cli.c,
 * _ranks.c, _faults.c, _state.c, _setup.c, _profile.c, _finish.c: see their first lines). */
#ifndef DPT_TRAIN_PRIV_H
#define DPT_TRAIN_PRIV_H

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dpt_backend.h"
#include "dpt_bsched.h"
#include "dpt_ckpt.h"
#include "dpt_cpu_impl.h" /* the CPU and ISA the job report names */
#include "dpt_cuda_capture.h" /* the steps announced to the backend (--cuda-graph) */
#ifdef DPT_HAVE_CUDA_BACKEND
#include "dpt_cuda_versions.h" /* the start line's and the report's GPU library versions */
#endif
#include "dpt_data.h"
#include "dpt_model.h"
#include "dpt_optim.h"
#ifdef DPT_HAVE_CUPTI
#include "dpt_cupti.h" /* --profile-steps: the per-step kernel breakdown */
#endif
#include "dpt_kprof.h"
#ifdef DPT_TRAIN_HAVE_COMM
#include <oneapi/dnnl/dnnl.h>

#include "dpt_bind.h"
#include "dpt_comm.h"
#include "dpt_ctx.h"
#include "dpt_report.h"
#include "dpt_watchdog.h"
#endif

/* Exit status after SIGUSR1/SIGTERM when the checkpoint was written: non-zero so that
 * Slurm job scripts (and --requeue logic) can tell "stopped, resumable" from done (0),
 * runtime failure (1) and bad usage (2). */
#define DPT_TRAIN_EXIT_PREEMPTED 3

struct opts {
  const char *dataset, *data_dir, *schedule, *backend, *comm, *ckpt_dir, *resume, *report;
  int image_size, num_classes, batch, epochs, iterations, threads, ckpt_every, fp16, dbuf;
  int small_stem, prefetch, skip_bad, crop_pad, flip, no_decay_bn, lr_batch, n_synth, val;
  int log_every;
  const char *train_list, *val_list; /* imagenet: "path label" list files instead of folders */
  int data_threads;    /* loader worker threads per loader (0: 4 for imagenet, else 1) */
  int in_channels;     /* imagenet: 3 RGB, 1 grayscale (0: 3) */
  const char *data_device; /* --data-device cpu|gpu|auto: where imagenet JPEGs are decoded (issue 16) */
  int accum;           /* micro-batches per step (gradient accumulation) */
  long stop_after;     /* stop (with a checkpoint) after this many steps of this run: tests, preemption */
  double lr, warmup_epochs, momentum, weight_decay, width, smoothing, gamma, step_epochs, power;
  char milestones[128];
  char gammas[128];      /* --gammas: multistep factors, one per milestone ("": --gamma at each) */
  char lr_steps[256];    /* --lr-steps E0:LR0,E1:LR1,..: the piecewise schedule's table */
  const char *bn_eval;   /* --bn-eval-stats running|last-batch */
  int zero_init_residual; /* --zero-init-residual on|off (on) */
  double end_lr;         /* --end-lr: what poly / cosine decay to (0) */
  const char *batch_schedule; /* --batch-schedule E0:B0,E1:B1,..: the per-rank batch by epoch (NULL: --batch-size) */
  int warmup_base;       /* --warmup-start base: warm-up from the unscaled rate (Goyal et al.), not from 0 */
  const char *recipe;    /* --recipe NAME (dpt_train_recipe.c) */
  int argc;              /* the options as parsed: main's, or with a recipe its options and the user's (malloc'd) */
  char **argv;
  int dry_run;           /* --dry-run: print the options and the per-epoch table, exit */
  int dry_ranks;         /* --ranks N (dry run; 0: the recipe's published GPUs, else 1) */
  long dry_images;       /* --train-images N (dry run; 0: the data set's) */
  const char *optimizer; /* --optimizer sgd|lars */
  int nesterov;          /* --nesterov */
  double lars_eta, lars_eps; /* --lars-eta, --lars-eps (0: 1e-7 as the MLPerf reference) */
  double rms_lr, rms_mu2, rms_eps, rms_center, rms_period; /* --rmsprop-* (rmsprop-warmup) */
  uint64_t seed;
  const char *precision; /* --precision fp32|tf32|mixed (NULL: the backend's default) */
  const char *baseline; /* job report: --baseline REPORT (scaling efficiency) */
  int no_report;        /* job report: --no-report */
  double bucket_mb;     /* --bucket-mb: gradient bucket target in MiB (0: one all-reduce after backward) */
  const char *fuse;     /* --fuse on|off|auto (NULL: the backend's default, $DPT_CUDA_FUSE, else off) */
  const char *cuda_graph; /* --cuda-graph on|off|auto (NULL: $DPT_CUDA_GRAPH, else off) */
  int deterministic;    /* --deterministic: the backend's results bitwise reproducible run to run */
  int profile_steps;    /* --profile-steps N: the kernel breakdown of N steps (rank 0, CUPTI) */
  const char *profile_out; /* --profile-out PATH: its JSON (the records: PATH's .json -> .tsv) */
};

static inline double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct ranks {
  int rank, size;
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm *comm;  /* gradients (device memory when it is nccl) */
  struct dpt_comm *host;  /* host buffers: comm itself, or "mpi" next to nccl */
#endif
};

/* Double buffering: the in-flight gradient all-reduce. */
struct inflight {
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm_req *req;
#endif
  int active;
};

/* Gradient buckets all-reduced during backward (--bucket-mb, dpt_bucket.h):
 * the backend calls bucket_start as soon as backward has produced bucket k
 * (cpu: written; cuda: enqueued, with an event the nccl stream waits for), so
 * its all-reduce runs on the communicator's worker thread / stream while
 * backward goes on with the layers below; the step then waits for them all. */
struct bucket_ar {
  struct ranks *rk;
  struct dpt_backend *be;
  unsigned flags;
  int started;                  /* buckets queued in this backward */
  int enqueue;                  /* graph mode with nccl: enqueued on the device (dpt_comm_enqueue_after) */
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm_req **req;    /* [be->n_buckets] */
#endif
};

/* ---- training ------------------------------------------------------------ */

struct times {
  double data, fwd, bwd, ar_exposed, update, val, total;
  double steps; /* wall time of the training steps: what every img/s divides by (the progress line
                   over its interval, the done line and the report: data wait + forward + backward +
                   exposed all-reduce + update; not validation, checkpoints or start-up) */
};

/* The learning curve (rank 0): the points of the run(s) before a resume and
 * this run's, kept next to the checkpoints after every validation. */
struct curve_log {
  struct dpt_ckpt_point *p;
  size_t n, cap;
};

struct val_result {
  double loss, top1, top5;
  long n;
};

/* ---- one run ---------------------------------------------------------------
 * Everything a run holds: set up once (run_start, run_model, run_backend,
 * run_loaders, run_schedule, run_buffers, run_resume, run_describe), driven by
 * train_loop (train_step, log_progress, checkpoint_save, validate_epoch), ended
 * by run_finish and run_close. */
struct run {
  struct opts o;
  struct ranks rk;
  int R, me, threads;
  struct dpt_dataset train, val;
  struct dpt_model model;
  char model_desc[96];
  int S, K;                        /* image side, classes */
  struct dpt_backend *be;
  size_t np;                       /* parameters */
  int dev_comm;                    /* > 1 rank over nccl: the device gradient slab itself is all-reduced */
  int mixed;                       /* --precision mixed: the backend's dynamic loss scaling */
  struct dpt_loss_scaler scaler;   /* its host copy (resume, checkpoints, the final report) */
  struct dpt_loader *tls[64], *vl; /* training loaders (one per micro-batch), validation */
  int dev_input;                   /* 1: the loaders' batches stay on the GPU in the backend's input
                                      format, read in place by ops->forward_device */
  struct dpt_input_format in_fmt;  /* dev_input: the backend's (ops->input_format) */
  const void *pf_x;                /* the next step's first batch, taken ahead for ops->prefetch */
  const int *pf_lab;
  double pf_wait;                  /* its wait for the loader, counted in the step that uses it */
  int pf_have;
  long pf_used;                    /* training steps that found their batch taken ahead */
  char input_desc[480];            /* the path the input takes, and why (rank 0 prints it) */
  struct dpt_bsched bs;            /* the per-rank batch and steps per epoch of every epoch (one phase
                                      without --batch-schedule); o.batch is the current epoch's */
  long total_steps;
  double total_epochs;
  struct dpt_schedule sch;
  struct inflight fl;              /* double buffering: the all-reduce in flight */
  struct bucket_ar ba;             /* gradient buckets all-reduced during backward */
  struct dpt_bucket *buckets;
  int n_buckets;
  const char *no_buckets;          /* > 1 rank: why the gradients are not all-reduced in buckets */
  float *pending, *gacc;           /* host [np]: double-buffered averaged gradient, micro-batch sum */
  float *mirrors;                  /* device backends: host copies of the slabs (one allocation) */
  float *hp, *hs, *hg, *hv;        /* host params, BN state, gradients, momentum (the slabs on cpu) */
  unsigned char *mask;             /* [np] weight decay */
  struct dpt_ckpt_meta cm;
  int ckpt_every;
  /* the loop */
  long gstep, steps_run, last_log_step;
  long images_run;                 /* images this rank trained on in this run (the batch may change) */
  int have_pending;                /* double buffering: an averaged gradient waits to be applied */
  int psig;                        /* agreed preemption signal: stop after this step */
  char ckpt_last[4300];            /* rank 0: the last checkpoint written */
  double ep_loss;                  /* the epoch's loss sum, top-1 count and images (this rank) */
  long ep_correct, ep_n;
  long run_n;                      /* images since the last log line */
  long waits_train, n_logs;        /* host waits in the steps and their log lines; log lines */
  struct times tm;
  double t_start, t_train0;
  double steps_last;               /* tm.steps at the last progress line */
  struct val_result vr;
  json_t *curve;
  struct curve_log cl;             /* rank 0: the learning curve, kept next to the checkpoints */
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_report *rep;
#endif
  /* issue 15: steps announced to the backend (--cuda-graph), the kernel breakdown (--profile-steps) */
  struct dpt_cap_run_cfg cap;      /* the run as the capture plans see it */
  int graph_comm;                  /* the backend captures and nccl all-reduces device gradients: enqueued on
                                      the device, joined by the backend (no host wait) */
  long prof_first;                 /* first step recorded (gstep), -1: none */
  void *prof;                      /* struct dpt_cupti * while recording */
  char prof_path[4300];            /* where the breakdown goes */
};

/* dpt_train_cli.c */
void dpt_train_defaults(struct opts *o);
int dpt_train_bad(const char *fmt, ...);
int dpt_train_num(const char *opt, const char *s, double lo, double hi, double *v);
int dpt_train_parse(int argc, char **argv, struct opts *o);

/* dpt_train_recipe.c: the published large-batch recipes as option presets, and --dry-run */
#define DPT_TRAIN_RECIPES "chainermn-90, goyal, akiba, mlperf"
struct dpt_train_recipe {
  const char *name;
  const char *title;         /* who, what, where it was published */
  const char *source;        /* the sections / files the values come from */
  const char *notes;         /* what is inferred, unverified or not expressible exactly */
  int gpus;                  /* the published run's GPUs (the dry run's default --ranks) */
  const char *const *args;   /* its dpt-train options: "--name", "value" or "--flag", NULL-terminated */
};
const struct dpt_train_recipe *dpt_train_recipe_find(const char *name);
int dpt_train_dry_run(const struct opts *o);

/* dpt_train_ranks.c */
int dpt_train_ranks_init(struct ranks *r, int *argc, char ***argv, const struct opts *o, struct dpt_err *err);
int dpt_train_ranks_resolve_auto(struct ranks *r, int device_grads, const char **name, struct dpt_err *err);
int dpt_train_ranks_allreduce(struct ranks *r, float *buf, size_t n, int avg, int fp16, struct dpt_err *err);
int dpt_train_ranks_bcast(struct ranks *r, float *buf, size_t n, struct dpt_err *err);
int dpt_train_grad_allreduce(struct ranks *r, float *buf, size_t n, int fp16, struct dpt_err *err);
int dpt_train_grad_start(struct ranks *r, struct inflight *f, float *buf, size_t n, int fp16, void *ready,
                         struct dpt_err *err);
int dpt_train_grad_wait(struct ranks *r, struct inflight *f, struct dpt_err *err);
int dpt_train_bucket_start(void *ctx, int k, void *ready, struct dpt_err *err);
int dpt_train_bucket_wait_all(struct bucket_ar *ba, struct dpt_err *err);
void dpt_train_ranks_fini(struct ranks *r);
int dpt_train_preempt_install(struct dpt_err *err);
int dpt_train_preempt_agree(struct ranks *r, int *sig, struct dpt_err *err);
int dpt_train_agree_path(struct ranks *r, char *s, size_t len, struct dpt_err *err);

/* dpt_train_faults.c */
int dpt_train_fault_parse(int me, struct dpt_err *err);
int dpt_train_enter_phase(const char *phase, long step, struct dpt_err *err);
void dpt_train_faults_install(void);

/* dpt_train_state.c */
void dpt_train_curve_keep(struct curve_log *c, const char *dir, const struct dpt_ckpt_point *pt);
int dpt_train_slab_get(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err);
int dpt_train_slab_put(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err);
int dpt_train_state_average(struct ranks *rk, struct dpt_backend *be, float *hs, struct dpt_err *err);
int dpt_train_apply_step(struct dpt_backend *be, int mixed, const float *buf, float lr, double epoch,
                         struct dpt_err *err);
int dpt_train_run_resume(struct run *r, struct dpt_err *err);

/* dpt_train_setup.c */
int dpt_train_run_start(struct run *r, int *argc, char ***argv, struct dpt_err *err);
int dpt_train_run_model(struct run *r, struct dpt_err *err);
int dpt_train_run_backend(struct run *r, struct dpt_err *err);
int dpt_train_run_loaders(struct run *r, struct dpt_err *err);
int dpt_train_run_schedule(struct run *r, struct dpt_err *err);
int dpt_train_schedule_make(const struct opts *o, long global_batch, double total_epochs, struct dpt_schedule *sch,
                            struct dpt_err *err);
int dpt_train_run_buffers(struct run *r, struct dpt_err *err);
void dpt_train_run_describe(struct run *r);
void dpt_train_run_release(struct run *r);
int dpt_train_run_rebatch(struct run *r, int epoch, struct dpt_err *err);

/* dpt_train_profile.c */
void dpt_train_profile_paths(struct run *r);
int dpt_train_profile_begin(struct run *r, struct dpt_err *err);
int dpt_train_profile_end(struct run *r, struct dpt_err *err);

/* dpt_train_finish.c */
int dpt_train_run_finish(struct run *r, int *status, struct dpt_err *err);
int dpt_train_run_close(struct run *r, int status, const struct dpt_err *err);

#endif
