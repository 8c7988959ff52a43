/* dpt_report.h — the job report: one JSON document "dpt.report/1" per run.
 *
 * The one writer of job reports (docs/schema-report.md describes every field).
 * Every rank keeps its own struct dpt_report (phase samples per step, epoch
 * metrics, binding, errors); dpt_report_finish() gathers the ranks' parts to
 * rank 0 through a gather hook (communicator-agnostic: MPI, PMIx or a test's
 * in-memory gather) and rank 0 writes the document atomically (temporary file
 * in the same directory, fsync, rename, fsync of the directory).
 *
 * The library is dpt_report (runtime/CMakeLists.txt): it depends on dpt_base,
 * dpt_topology (to embed the plan), hwloc and jansson, NOT on MPI, so that
 * `dpt-topo plan` (topology/) can write reports without a cycle
 * (dpt_runtime -> dpt_topology).  The MPI gather hook lives in dpt_runtime
 * (dpt_report_gather_mpi(), declared at the end, defined in dpt_report_mpi.c).
 *
 * Typical use (dpt-train):
 *   dpt_report_create(&rep, "dpt-train", argc, argv, rank, size, &err);
 *   dpt_report_set_software(rep, "backend", "cpu");  dpt_report_set_library(rep, "onednn", "2.6.3");
 *   dpt_report_set_config(rep, "batch_per_rank", json_integer(32));
 *   dpt_report_set_plan(rep, plan);               (when the rank has it)
 *   dpt_report_set_binding(rep, "cpus 0-1, mem numa 0");
 *   per step:  struct dpt_report_step s = {.data_wait = .., .forward = .., ..., .images = 32};
 *              dpt_report_add_step(rep, &s, &err);
 *   per epoch: struct dpt_report_epoch e; dpt_report_epoch_init(&e); e.epoch = 1; e.val_top1 = 0.9;
 *              dpt_report_add_epoch(rep, &e, &err);
 *   on error:  dpt_report_set_error(rep, &err);
 *   end:       dpt_report_set_exit_status(rep, status);
 *              dpt_report_finish(rep, &gather, NULL, &err);   (collective)
 *              dpt_report_destroy(rep);
 */
#ifndef DPT_REPORT_H
#define DPT_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "dpt_err.h"

struct dpt_plan;
struct dpt_node;

#define DPT_REPORT_SCHEMA "dpt.report/1"

/* Phases of one training step, in seconds.  A phase the program does not have
 * is 0.  allreduce is the all-reduce's wall time from start to completion;
 * allreduce_exposed the part of it the step waited for (equal to allreduce
 * without double buffering).  step is the step's wall time; 0 means "the sum
 * of data_wait, forward, backward, allreduce_exposed and update". */
struct dpt_report_step {
  double data_wait, forward, backward, allreduce, allreduce_exposed, update;
  double step;
  long images;  /* images this rank processed in the step */
};

enum dpt_report_phase {
  DPT_REPORT_DATA_WAIT, DPT_REPORT_FORWARD, DPT_REPORT_BACKWARD, DPT_REPORT_ALLREDUCE,
  DPT_REPORT_ALLREDUCE_EXPOSED, DPT_REPORT_UPDATE, DPT_REPORT_STEP, DPT_REPORT_N_PHASES
};
/* "data_wait", "forward", "backward", "allreduce", "allreduce_exposed", "update", "step" */
const char *dpt_report_phase_name(int phase);

/* One point of the learning curve.  Unknown values are NAN (written as null). */
struct dpt_report_epoch {
  double epoch;       /* epochs done (fractional when iterations end mid-epoch) */
  long step;          /* global step, -1 unknown */
  double train_loss, train_top1, val_loss, val_top1, val_top5;  /* top-1/5 as fractions 0..1 */
  double lr;          /* learning rate at the end of the epoch */
  double elapsed_s;   /* since the start of the run; NAN: dpt_report fills it */
};
void dpt_report_epoch_init(struct dpt_report_epoch *e); /* all NAN, step -1 */

/* Gather hook: collective over all ranks.  Every rank passes its part (len
 * bytes); on rank 0 *all receives one malloc'ed buffer with the size parts
 * concatenated in rank order and lens[size] (malloc'ed) their lengths; other
 * ranks get *all = NULL, *lens = NULL.  Returns 0 or a negative DPT_E_*. */
struct dpt_report_gather {
  int (*gather)(void *arg, const char *mine, size_t len, char **all, size_t **lens,
                struct dpt_err *err);
  void *arg;
};

struct dpt_report;

/* rank/size: this process in the job (0/1 for a single process).  Records the
 * command line, start time, host, pid, Slurm ids (SLURM_JOB_ID, SLURM_STEP_ID),
 * launcher (DPT_LAUNCHER), hwloc's and jansson's versions.  Errors: bad rank/size
 * (DPT_E_INPUT), out of memory. */
int dpt_report_create(struct dpt_report **out, const char *program, int argc, char *const *argv,
                      int rank, int size, struct dpt_err *err);
void dpt_report_destroy(struct dpt_report *rep);

int dpt_report_rank(const struct dpt_report *rep);
int dpt_report_size(const struct dpt_report *rep);

/* software.<key> ("backend", "comm", "wire", ...) = value (NULL: null). */
int dpt_report_set_software(struct dpt_report *rep, const char *key, const char *value);
/* software.libraries.<name> = version ("mpi", "onednn", "cudnn", "nccl", ...). */
int dpt_report_set_library(struct dpt_report *rep, const char *name, const char *version);
/* config.<key> = value (the run's settings; steals the reference; value NULL is an error). */
int dpt_report_set_config(struct dpt_report *rep, const char *key, json_t *value);
/* results.<key> = value (program-specific results, e.g. "bench": dpt.bench.allreduce/1;
 * steals the reference). */
int dpt_report_set_result(struct dpt_report *rep, const char *key, json_t *value);

/* The plan (embedded as dpt_plan_to_json) and the per-node topology summary
 * derived from it; what its ranks share (dpt_job_sharing: oversubscription)
 * becomes job.oversubscribed.  Any rank may call it; rank 0's copy is written. */
int dpt_report_set_plan(struct dpt_report *rep, const struct dpt_plan *plan, struct dpt_err *err);
/* Until the bootstrap hands the plan to every rank: under `dpt-launch -n N`
 * (one node), recompute the plan dpt-launch used (dpt_job_plan on the job its
 * variables describe: DPT_NODE_NAME, DPT_LOCAL_SIZE ranks, DPT_PLAN_XML /
 * DPT_PLAN_GPUS / this node's topology, DPT_PLAN_THREADS, DPT_FP16,
 * DPT_OVERSUBSCRIBE) and, when its digest equals DPT_PLAN_DIGEST, embed the
 * same plan computed for the job's own message: `bytes` per all-reduce (0: the
 * launcher's default), fp16 on the wire, so that its predictions and
 * allreduce.predicted_s are for what the job moves (job.launch_digest keeps
 * the launcher's digest: the digest covers the message size).  Returns 1 when
 * embedded, 0 when not applicable (no dpt-launch variables, several nodes,
 * digest differs), or a negative DPT_E_*. */
int dpt_report_plan_from_launch(struct dpt_report *rep, uint64_t bytes, int fp16, struct dpt_err *err);
/* This rank's node topology summary (packages, cores, NUMA, GPUs, HCAs); when
 * never called, dpt_report_finish loads the live machine's with hwloc. */
int dpt_report_set_node(struct dpt_report *rep, const struct dpt_node *node, struct dpt_err *err);
/* What binding was applied to this rank (free text, e.g. dpt_bind_describe_applied():
 * who bound it, CPUs, memory, GPU, HCAs, threads, the launcher's variables).
 * The CPUs actually allowed (sched_getaffinity) and the binding variables
 * (DPT_CPUSET, DPT_NUMA, CUDA_VISIBLE_DEVICES, DPT_CUDA_DEVICE, NCCL_IB_HCA,
 * OMP_NUM_THREADS) are recorded at finish whether or not this is called. */
int dpt_report_set_binding(struct dpt_report *rep, const char *applied);

/* The all-reduce the plan predicts: bytes per all-reduce (the gradient) and the
 * communicator's measured time for it when the program measured it directly
 * (dpt-bench); measured_s < 0: use the median of the steps' allreduce phase. */
int dpt_report_set_allreduce(struct dpt_report *rep, uint64_t bytes, double measured_s);

int dpt_report_add_step(struct dpt_report *rep, const struct dpt_report_step *s, struct dpt_err *err);
int dpt_report_add_epoch(struct dpt_report *rep, const struct dpt_report_epoch *e, struct dpt_err *err);

/* Records an error of this rank (code name, message, time).  Several may be recorded. */
int dpt_report_set_error(struct dpt_report *rep, const struct dpt_err *e);
/* Forgets the errors recorded so far (a supervisor's part rewritten with the end). */
void dpt_report_clear_errors(struct dpt_report *rep);
void dpt_report_set_exit_status(struct dpt_report *rep, int status);

/* ---- a program a launcher supervised (runtime/dpt_report_end.h) --------------- */

/* How a rank's program ended, as its supervisor (the dpt-launch rank
 * supervisor, the SPANK plugin's task supervisor) saw it from wait4(). */
struct dpt_report_end {
  long pid;                 /* the program's process */
  int started;              /* 0: it could not be started (why in how) */
  int status;               /* exit status; -1 when a signal ended it or it did not start */
  int signal;               /* the signal that ended it, 0 otherwise */
  int forwarded;            /* the launcher had forwarded a signal to it before it ended */
  double start_unix, end_unix; /* fork and wait4, CLOCK_REALTIME seconds */
  long long peak_rss_bytes; /* wait4's ru_maxrss: the program's (and its waited-for children's) */
  char how[256];            /* "exited with status 1", "killed by signal 9 (Killed)", "cannot run ..." */
  char by[32];              /* the supervisor: "dpt-launch", "spank" */
};
/* The rank part becomes the supervised program's: pid and peak_rss_bytes from e,
 * plus ranks[].end (how it ended) and, with names (NULL-terminated, may be NULL),
 * ranks[].env: each named variable present in this process's environment (the
 * environment the program was handed); the part's host becomes the plan's name of
 * the node, DPT_NODE_NAME, when set. */
int dpt_report_set_end(struct dpt_report *rep, const struct dpt_report_end *e, const char *const *names);
/* The writer's pid when it is not this process (a launcher writing for its rank 0):
 * the default report name's and "%p"'s pid. */
void dpt_report_set_pid(struct dpt_report *rep, long pid);
/* When the run started (CLOCK_REALTIME seconds) when it is not the report's
 * creation: a launcher writing after the job (job.start, job.duration_s). */
void dpt_report_set_start(struct dpt_report *rep, double start_unix);
/* This rank's part of the report (what the gather carries), compact JSON,
 * malloc'ed; NULL out of memory. */
char *dpt_report_part(struct dpt_report *rep);
/* Tell the launcher which report the program wrote: when DPT_REPORT_ANNOUNCE
 * names a file (dpt-launch and the SPANK plugin set it), write path (made
 * absolute) there, or "none" for path NULL (the program writes no report:
 * dpt-train --no-report).  dpt_report_finish announces what rank 0 wrote.  The
 * launcher then adds how each rank ended to that report instead of writing its
 * own (runtime/dpt_report_end.h).  Best effort; 0 or a negative DPT_E_*. */
int dpt_report_announce(const char *path, struct dpt_err *err);

/* Scaling efficiency against a baseline report (e.g. a 1-rank run), written
 * as "scaling": e = t / (t0 * n / n0), t and t0 total images/s of this run and
 * of the baseline, n and n0 their ranks (ChainerMN: e = t / (t0 * n), n0 = 1).
 * Read at finish on rank 0; errors there (unreadable, not a dpt.report/1) are
 * DPT_E_INPUT. */
int dpt_report_set_baseline(struct dpt_report *rep, const char *path);
/* The checks finish makes of a baseline (a readable, valid dpt.report/1 of a run
 * that processed images), for a program to refuse a bad --baseline at start
 * instead of after the run.  DPT_E_INPUT naming the file and the problem. */
int dpt_report_check_baseline(const char *path, struct dpt_err *err);
/* The one home of the formula: e = t / (t0 * n / n0); NAN unless t0 > 0, n > 0, n0 > 0.
 * Used by the writer ("scaling") and by dpt-report (--baseline, --compare, --html). */
double dpt_report_efficiency(double t, long long n, double t0, long long n0);

/* The report path: explicit (flag) if not NULL/"", else $DPT_REPORT, else
 * dpt-report-<jobid>.<stepid>.json (Slurm; <jobid> alone without a step) or
 * dpt-report-<program>-<pid of rank 0>.json in the working directory.
 * "%j" expands to the job id (or "nojob"), "%s" to the step id (or "0"), "%p" to
 * the pid, "%%" to "%".  Returns the length or a negative DPT_E_*. */
int dpt_report_path(const struct dpt_report *rep, const char *explicit_path, char *buf, size_t len,
                    struct dpt_err *err);

/* Collective: gathers every rank's part to rank 0 (gather NULL or size 1: no
 * gather) and rank 0 builds, validates and writes the report to
 * dpt_report_path(explicit_path).  When the gather fails (a peer died), rank 0
 * writes what it has (job.partial = true, the failure in errors) and every
 * other rank writes its own part to <path>.rank<N>; the gather's error is
 * returned.  Rank 0 also takes the ranks' error files <path>.rank<N>.err
 * (dpt.error/1, what dpt-train's ranks write when they fail: runtime/
 * dpt_watchdog) that it can read into errors[] and removes them once the
 * report is written: a failed run leaves its report, not a trail of files.
 * out_path (may be NULL, cap 4096) receives the written path on rank 0.
 * A gather hook may give a zero-length part for a rank it has none of (a
 * launcher's rank that left no record): that rank is missing from ranks[]
 * and the document is partial. */
int dpt_report_finish(struct dpt_report *rep, const struct dpt_report_gather *gather,
                      const char *explicit_path, char *out_path, struct dpt_err *err);

/* The document rank 0 would write, without gathering (new reference); for
 * single-process programs and tests. */
json_t *dpt_report_to_json(struct dpt_report *rep, struct dpt_err *err);

/* ---- reading -------------------------------------------------------------- */

/* Checks a document against dpt.report/1: schema string and major version,
 * every required field and its type.  The message names `file` and the field
 * path ("ranks[1].phases.forward.p50_s"). DPT_E_INPUT on failure. */
int dpt_report_validate(const json_t *doc, const char *file, struct dpt_err *err);
/* Reads and validates a report file (new reference in *out). */
int dpt_report_load(const char *path, json_t **out, struct dpt_err *err);

/* Writes text to path atomically: path.tmp.<pid> in the same directory, fsync,
 * rename, fsync of the directory.  Messages name the file, not an option:
 * callers say which of their options gave the path. */
int dpt_report_write_atomic(const char *path, const char *text, size_t len, struct dpt_err *err);
/* The same without either fsync: still all or nothing for a reader, but not
 * kept through a crash of the machine.  For hand-off files another process reads
 * moments later (the rank supervisors' parts): a supervisor must record its
 * rank's end within the second mpirun gives it between the SIGTERM and the
 * SIGKILL of a failed job's teardown, and an fsync on a busy or network file
 * system can take longer than that. */
int dpt_report_write_handoff(const char *path, const char *text, size_t len, struct dpt_err *err);

/* ---- MPI (defined in dpt_report_mpi.c, part of dpt_runtime) ------------------ */
/* A gather hook over an MPI communicator (pass a pointer to an MPI_Comm as arg;
 * rank 0 of that communicator writes), and MPI's library version in software. */
int dpt_report_gather_mpi(void *mpi_comm, const char *mine, size_t len, char **all, size_t **lens,
                          struct dpt_err *err);
int dpt_report_set_mpi_version(struct dpt_report *rep);

#endif /* DPT_REPORT_H */
