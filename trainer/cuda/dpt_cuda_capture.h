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

#endif /* DPT_CUDA_CAPTURE_H */
