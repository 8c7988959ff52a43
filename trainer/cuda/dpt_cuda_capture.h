/* dpt_cuda_capture.h — the graph-capture segment plan of one training step (issue 15, item 2),
 * host-only.
 *
 * The steady-state step is captured in CUDA graphs once and replayed every step.  What can
 * go inside a graph is stream-ordered device work: forward, loss, backward with the bucket
 * hooks (events), the NCCL all-reduce of each gradient bucket (NCCL supports capture: the
 * all-reduce is enqueued on a side stream forked from the capturing stream by the bucket's
 * event and joined back before the update), the overflow check and loss-scale update, the
 * fused optimizer.  What cannot: a host communicator (ring / hierarchical / MPI: its worker
 * thread copies the bucket to host memory and all-reduces it there), the upload of the
 * loader's batch (its pinned staging slot alternates), the learning rate of the step (the
 * host writes it to the device scalar the optimizer kernel reads, dpt_cuda_optim's lr_dev),
 * reading the loss totals back (once per --log-every steps), the double-buffered
 * all-reduce that must overlap the NEXT step (queued on the communicator's stream after the
 * replay, its completion waited for inside the next replay through an external event).
 * So the step splits into graph segments with host points between them:
 *
 *   one rank / NCCL   [input, scalars] G0{forward, loss, backward + bucket all-reduces, join,
 *                     (overflow), update} [loss read-back]                      1 segment
 *   host communicator [input, scalars] G0{forward, loss, backward with bucket events}
 *                     [bucket all-reduces on the worker thread, wait, upload]
 *                     G1{(overflow), update} [loss read-back]                   2 segments
 *   validation        [input] G0{forward, loss totals} [loss read-back]
 *   micro-batch       [input, scalars] G0{forward, loss, backward} [accumulate on the host]
 *
 * A graph is re-captured when its key changes: training / validation / non-final micro-batch,
 * the batch shape (the last partial batch), the communicator kind and bucket count, mixed
 * precision, double buffering.  Not the learning rate, not the log interval (both outside). */
#ifndef DPT_CUDA_CAPTURE_H
#define DPT_CUDA_CAPTURE_H

#include <stddef.h>

#include "dpt_err.h"

enum dpt_cap_comm {
  DPT_CAP_COMM_NONE = 0, /* one rank */
  DPT_CAP_COMM_NCCL = 1, /* device communicator: its all-reduce is captured */
  DPT_CAP_COMM_HOST = 2, /* ring / hierarchical / mpi over host memory: between segments */
};

struct dpt_cap_step {
  int training;          /* 0: validation (forward and loss totals only) */
  int batch;             /* rows of this batch */
  int comm;              /* enum dpt_cap_comm */
  int n_buckets;         /* gradient buckets all-reduced during backward; 0: one all-reduce after it */
  int mixed;             /* fp16 loss scaling: overflow check + scaler update on the device */
  int micro;             /* a micro-batch that is not the last of --accumulate (no all-reduce, no update) */
  int double_buffering;  /* the update applies the previous step's averaged gradient; this step's
                            all-reduce overlaps the next step */
  int log_step;          /* the loss totals are read back after this step */
};

enum dpt_cap_kind {
  /* device work inside a graph segment (index: bucket, -1 = the whole gradient slab) */
  DPT_CAP_FORWARD,
  DPT_CAP_LOSS,
  DPT_CAP_BACKWARD,        /* backward up to the hook of bucket index (-1: all of it) */
  DPT_CAP_EVENT,           /* record bucket index's event (external: a host thread waits for it) */
  DPT_CAP_ALLREDUCE,       /* NCCL all-reduce of bucket index on the side stream the event forked */
  DPT_CAP_JOIN,            /* the capturing stream waits for the side stream's all-reduces */
  DPT_CAP_WAIT_EXTERNAL,   /* wait for the previous step's all-reduce (double buffering) */
  DPT_CAP_OVERFLOW,        /* non-finite check of the averaged gradient + loss-scaler update */
  DPT_CAP_UPDATE,          /* the fused optimizer (skipped on the device on overflow) */
  DPT_CAP_STASH,           /* copy this step's gradient to the pending slab (double buffering) */
  /* host points between the segments */
  DPT_HOST_INPUT,          /* copy the loader's batch into the graph's fixed input buffer */
  DPT_HOST_SCALARS,        /* write the step's learning rate (and step number) to their device scalars */
  DPT_HOST_REDUCE,         /* host communicator: bucket index handed to the worker thread, which copies it
                              to host memory after its event and all-reduces it (double buffering: this
                              step's whole gradient, reduced while the next step runs) */
  DPT_HOST_WAIT_UPLOAD,    /* wait for the reductions (double buffering: the previous step's), upload the
                              averaged gradient */
  DPT_HOST_ACCUMULATE,     /* micro-batch: add the gradient into the host sum */
  DPT_HOST_QUEUE_REDUCE,   /* double buffering: queue the pending slab's all-reduce (overlaps the next step) */
  DPT_HOST_LOSS_READ,      /* read the loss totals back (the one host wait of a log interval) */
  DPT_CAP_NKINDS
};
const char *dpt_cap_kind_name(enum dpt_cap_kind k);

struct dpt_cap_item {
  int kind;    /* enum dpt_cap_kind */
  int index;   /* bucket, or -1 */
};

/* One entry of the step: a graph segment's replay (segment >= 0: items [first, first + n) are
 * its captured work) or one host point (segment = -1, item `first`). */
struct dpt_cap_entry {
  int segment;
  int first, n;
};

#define DPT_CAP_KEY 160

struct dpt_cap_plan {
  int n_segments;
  int n_entries;
  struct dpt_cap_entry *entry;  /* [n_entries], in execution order */
  int n_items;
  struct dpt_cap_item *item;    /* [n_items] */
  char key[DPT_CAP_KEY];        /* the re-capture key */
};

/* The key a captured graph is kept under (see above). */
void dpt_cuda_capture_key(const struct dpt_cap_step *s, char *out, size_t len);
/* Plan the step.  DPT_E_INPUT for batch < 1, buckets < 0, an unknown communicator, a
 * validation micro-batch, double buffering with accumulation (dpt-train refuses it too). */
int dpt_cuda_capture_plan(const struct dpt_cap_step *s, struct dpt_cap_plan *p, struct dpt_err *err);
void dpt_cuda_capture_free(struct dpt_cap_plan *p);
/* One line per entry, for logs: "G0: forward loss backward[0] ..." / "host: input". */
void dpt_cuda_capture_print(const struct dpt_cap_plan *p, void *file /* FILE * */);

/* ---- the capture decisions of the cuda backend (dpt-train --cuda-graph) ----------------------
 *
 * What dpt-train runs, as far as capture goes: a training step (--accumulate 1), one of
 * --accumulate's micro-batches (dpt-train sums every one of them on the host, then puts the sum
 * back and updates outside any step: that update runs uncaptured), or a validation batch. */
enum dpt_cap_what { DPT_CAP_TRAIN_STEP = 0, DPT_CAP_MICRO_BATCH = 1, DPT_CAP_VALIDATION = 2 };

struct dpt_cap_run_cfg {
  int ranks;             /* > 1: the gradients are all-reduced */
  int comm;              /* ranks > 1: DPT_CAP_COMM_NCCL (device gradients) or DPT_CAP_COMM_HOST */
  int n_buckets;         /* buckets all-reduced during backward (0: one all-reduce after it) */
  int mixed;             /* fp16 loss scaling */
  int double_buffering;
  int batch;
};
/* The dpt_cap_step of `what` in run c (log_step: the loss totals are read back after it). */
void dpt_cuda_capture_step_of(const struct dpt_cap_run_cfg *c, int what, int log_step, struct dpt_cap_step *s);

/* NULL when step s can be captured by the cuda backend, else why it runs uncaptured:
 * double buffering (its all-reduce overlaps the next step through an external wait the graph
 * does not hold yet), NCCL without buckets (dpt-train plans one bucket for the whole gradient
 * in graph mode instead), a host communicator with buckets (dpt-train all-reduces device
 * gradients over a host communicator after backward, never in buckets). */
const char *dpt_cuda_capture_unsupported(const struct dpt_cap_step *s);

/* The backend's calls in a step, and the plan items each one does, in order: forward =
 * input upload [+ learning-rate scalars when training] + forward; loss; backward = per bucket
 * backward part, its event [, its NCCL all-reduce] (no buckets: the backward [+ its event for a
 * host communicator]); join (the all-reduces' stream joined back); overflow (mixed); update.
 * The rest of a plan (host reductions, upload, accumulation, loss read-back) is dpt-train's. */
enum dpt_cap_call { DPT_CAPC_FORWARD, DPT_CAPC_LOSS, DPT_CAPC_BACKWARD, DPT_CAPC_JOIN, DPT_CAPC_OVERFLOW,
                    DPT_CAPC_UPDATE, DPT_CAPC_NCALLS };
/* Writes up to max items of call c in step s to out; returns how many there are. */
int dpt_cuda_capture_call_items(const struct dpt_cap_step *s, int call, struct dpt_cap_item *out, int max);

/* The state the backend keeps across steps: which keys it has seen and captured (graphs are
 * kept per key slot, DPT_CAP_MAX_KEYS of them, the least recently used evicted), and where the
 * current step is in its plan.  A key is run eagerly its first `warmup` times (cuDNN / cuBLAS /
 * NCCL set themselves up outside any capture), captured the next time and replayed after that;
 * a key seen again after eviction starts over. */
#define DPT_CAP_MAX_KEYS 4
enum dpt_cap_mode { DPT_CAPM_EAGER = 0, DPT_CAPM_CAPTURE = 1, DPT_CAPM_REPLAY = 2 };
enum dpt_cap_action {
  DPT_CAPA_RUN = 0,   /* eager step: do the item's work now */
  DPT_CAPA_HOST = 1,  /* a host point: do it now, outside any graph */
  DPT_CAPA_RECORD = 2,/* capture step: enqueue the work (the stream is capturing segment *segment) */
  DPT_CAPA_SKIP = 3,  /* replay step: the work is in segment *segment's graph: enqueue nothing */
};
struct dpt_cap_slot {
  char key[DPT_CAP_KEY];
  int used, seen, captured;
  unsigned long last;    /* clock of the last use (LRU) */
};
struct dpt_cap_state {
  int warmup;
  unsigned long clock;
  struct dpt_cap_slot slot[DPT_CAP_MAX_KEYS];
  /* the current step */
  int in_step, mode, cur;
  struct dpt_cap_plan plan;
  int next;              /* the plan's next item */
  int open;              /* segment whose items are being done, -1 */
  int captures, replays; /* counts so far (for the report) */
};
void dpt_cuda_capture_state_init(struct dpt_cap_state *st, int warmup);
void dpt_cuda_capture_state_free(struct dpt_cap_state *st);
/* A step begins (an unfinished previous one is dropped: its capture, if any, is not kept).
 * *mode: eager, capture or replay; *slot: the key's slot; *evict: a slot whose graphs the
 * caller destroys first (its key was evicted or the step is captured anew), else -1.
 * DPT_E_INPUT for a step dpt_cuda_capture_plan refuses; an unsupported step
 * (dpt_cuda_capture_unsupported) is eager. */
int dpt_cuda_capture_begin(struct dpt_cap_state *st, const struct dpt_cap_step *s, int *mode, int *slot, int *evict,
                           struct dpt_err *err);
/* The backend is about to do item (kind, index).  *act: what to do (above); *segment: its
 * segment (RECORD / SKIP, else -1); *seg_begin: it is its segment's first item (capture: begin
 * capturing before its work); *seg_end: its last (after its work, capture: end capturing and
 * instantiate; then, capture or replay, launch the segment's graph).  Plan items in between
 * that the backend does not do (dpt-train's host points) are passed over.  Outside a step:
 * DPT_CAPA_RUN.  DPT_E_RUNTIME when (kind, index) is not the plan's next item of the
 * backend's: the calls do not follow the plan (the step is dropped). */
int dpt_cuda_capture_item(struct dpt_cap_state *st, int kind, int index, int *act, int *segment, int *seg_begin,
                          int *seg_end, struct dpt_err *err);
/* The step is over when the backend has done its last item of the plan (dpt_cuda_capture_item
 * ends it then: a capture step's key is captured from now on).  Abort drops the current step
 * (an error): a capture in progress is not kept. */
void dpt_cuda_capture_abort(struct dpt_cap_state *st);

#endif /* DPT_CUDA_CAPTURE_H */
