/* dpt_comm.h — gradient all-reduce: one interface, communicators chosen by name.
 *
 *   "mpi"           MPI_Allreduce on a communicator in the plan's ring order
 *   "ring"          our pipelined ring: reduce-scatter + all-gather, 2(p-1) steps,
 *                   MPI point-to-point, following exactly the plan's ring
 *   "hierarchical"  reduce-scatter inside each node, ring across nodes per
 *                   local rank, all-gather inside the node
 *   "nccl"          ncclAllReduce (GPU builds; buffers are device pointers)
 *
 * Every communicator reduces an fp32 buffer in place, sums or averages
 * (DPT_COMM_AVG) and can put fp16 on the wire (DPT_COMM_FP16: round to
 * nearest even for sending, accumulate in fp32; every rank ends with the same
 * fp16-representable values).  Error bound for fp16 on the wire with p ranks,
 * per element:  |result - exact| <= (p + 1) * 2^-11 * sum_i |x_i|  (+ fp32
 * rounding), i.e. at most p+1 fp16 roundings of partial sums no larger than
 * sum_i |x_i|.  ("mpi" with fp16 rounds each partial sum too: same bound.)
 *
 * Rank order: the communicator's rank r is the ring position given at
 * creation (the plan's rank); ranks talk to r-1 and r+1 mod p.
 *
 * Non-blocking: dpt_comm_start() queues an all-reduce that a per-communicator
 * worker thread runs while the caller computes (double buffering); collectives
 * run in start order, and dpt_comm_wait() returns its result.  This needs
 * MPI_THREAD_MULTIPLE (dpt_comm_mpi_init asks for it); without it, or with
 * opts.async = 0, the work happens inside dpt_comm_wait().
 * dpt_comm_start_after() adds an event to wait for (nccl: a cudaEvent_t the
 * communicator's stream waits on with cudaStreamWaitEvent before it reads the
 * buffer, so a gradient bucket's all-reduce is ordered after the kernels that
 * produce it without the host waiting; the other communicators read host
 * memory and refuse an event).
 *
 * Watchdog: every collective is armed on a dpt_watchdog (see dpt_watchdog.h):
 * when it makes no progress for the limit, the process exits non-zero with a
 * message naming the collective and the suspected rank (a peer on this node
 * that is gone or stopped, else the peer this rank waits on). */
#ifndef DPT_COMM_H
#define DPT_COMM_H

#include <stddef.h>

#include <mpi.h>

#include "dpt_err.h"

enum dpt_comm_flags {
  DPT_COMM_SUM = 0,
  DPT_COMM_AVG = 1u << 0,  /* divide the sum by the number of ranks */
  DPT_COMM_FP16 = 1u << 1, /* fp16 on the wire, fp32 accumulation */
};

struct dpt_comm_opts {
  const char *name;     /* "mpi", "ring", "hierarchical", "nccl" */
  int ring_pos;         /* this rank's position in the plan's ring; -1: world rank */
  int node;             /* this rank's node index (hierarchical); -1: group ranks by host name */
  size_t chunk_bytes;   /* ring pipeline chunk; 0: DPT_COMM_CHUNK_BYTES or 1 MiB */
  int window;           /* ring: chunks in flight; 0: DPT_COMM_WINDOW or 4 */
  double watchdog_s;    /* 0: DPT_WATCHDOG_SECONDS or 30 s; < 0: no watchdog */
  int async;            /* 1 (default): worker thread when MPI_THREAD_MULTIPLE; 0: never */
  int record_peers;     /* test hook: record each ring step's send/recv peers */
  int gpu;              /* nccl: CUDA device; -1: the node-local rank */
  /* nccl: how ring position 0's ncclUniqueId reaches every rank (collective; len bytes of
   * buf at ring position 0 to all).  NULL: MPI_Bcast on the ring communicator.
   * dpt_boot_init passes its PMIx transport (dpt_boot_bcast_blob). */
  int (*bcast_id)(void *ctx, void *buf, size_t len, struct dpt_err *err);
  void *bcast_ctx;
};

struct dpt_comm;
struct dpt_comm_req;

void dpt_comm_opts_init(struct dpt_comm_opts *opts);

/* NULL-terminated list of the communicator names this build has. */
const char *const *dpt_comm_names(void);
/* 1 if `name` is a communicator of this build (or "auto"), 0 if unknown or not compiled in
 * (message in err names the choices). */
int dpt_comm_check_name(const char *name, struct dpt_err *err);
/* "auto" (and NULL) as a communicator name, what `srun --dpt` passes by default
 * (DPT_COMM=auto): "nccl" for device buffers when this build has NCCL, else "ring"
 * (the plan's bandwidth-optimal ring).  Any other name is returned as it is. */
const char *dpt_comm_resolve(const char *name, int device_buffers);

/* One GPU per rank for "nccl" (ncclCommInitRank fails with "invalid usage" when two
 * ranks of a communicator drive the same device).  Decided before NCCL is called, from
 * every rank's host name and its GPU's PCI bus id (cudaDeviceGetPCIBusId, e.g.
 * "0000:65:00.0"; compared case-insensitively), indexed by ring position:
 *   requested "nccl": every (host, bus id) distinct -> "nccl"; else NULL, err
 *       (DPT_E_INPUT) naming the ranks, the bus id and the host, suggesting --comm ring;
 *   requested "auto": distinct -> "nccl"; shared -> "ring", with `note` saying why
 *       (the caller prints it once);
 *   a rank without a bus id ("" or NULL: it could not name its GPU) -> NULL, err
 *       (DPT_E_RUNTIME) naming it;
 *   any other name is returned as it is.
 * note: [note_len], "" unless auto chose the ring.  Pure (no MPI, no CUDA). */
#define DPT_COMM_BUSID_LEN 32
const char *dpt_comm_gpu_choose(const char *requested, int n, const char *const *hosts,
                                const char *const *bus_ids, char *note, size_t note_len,
                                struct dpt_err *err);

/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE (no-op if already initialised); under a PMIx
 * server it then waits until every rank is out of MPI_Init, so that no first message reaches a
 * rank still inside it (Open MPI 4.1's start-up race: dpt_comm_init.c). */
int dpt_comm_mpi_init(int *argc, char ***argv, struct dpt_err *err);
/* How many ranks' "out of MPI_Init" this rank read in dpt_comm_mpi_init (every rank's once it
 * waited; 0 when it did not: one rank, no PMIx server, MPI started elsewhere); -1 in a build
 * without PMIx. */
int dpt_comm_mpi_up_ranks(void);

/* Collective over `world`.  Errors: unknown name (DPT_E_INPUT), ring positions
 * that are not a permutation of 0..p-1 (DPT_E_INPUT, naming them), nodes with
 * unequal rank counts for "hierarchical" (DPT_E_INPUT), no GPU for "nccl"
 * (DPT_E_UNSUPPORTED). */
int dpt_comm_create(struct dpt_comm **out, MPI_Comm world, const struct dpt_comm_opts *opts,
                    struct dpt_err *err);
void dpt_comm_destroy(struct dpt_comm *comm);

const char *dpt_comm_name(const struct dpt_comm *comm);
int dpt_comm_rank(const struct dpt_comm *comm);  /* ring position */
int dpt_comm_size(const struct dpt_comm *comm);
int dpt_comm_async(const struct dpt_comm *comm); /* 1 if a worker thread overlaps */
MPI_Comm dpt_comm_mpi(const struct dpt_comm *comm); /* ring-ordered MPI communicator */

/* Collective over comm's ranks: gathers every rank's host and `bus_id` (this rank's
 * GPU, "" if it has none) in ring order and returns dpt_comm_gpu_choose's answer
 * (the same on every rank; NULL with err on every rank when refused). */
const char *dpt_comm_gpu_agree(struct dpt_comm *comm, const char *requested, const char *bus_id,
                               char *note, size_t note_len, struct dpt_err *err);
/* The same for CUDA device `gpu` of this rank (its bus id from cudaDeviceGetPCIBusId):
 * what --comm auto uses for device buffers.  Builds without NCCL: "ring", no note. */
const char *dpt_comm_gpu_resolve(struct dpt_comm *comm, const char *requested, int gpu, char *note,
                                 size_t note_len, struct dpt_err *err);

/* Blocking in-place all-reduce.  buf: [n] fp32 (device memory for "nccl"). */
int dpt_comm_allreduce(struct dpt_comm *comm, float *buf, size_t n, unsigned flags,
                       struct dpt_err *err);

/* Non-blocking: queue, then wait.  buf must stay untouched until the wait. */
int dpt_comm_start(struct dpt_comm *comm, float *buf, size_t n, unsigned flags,
                   struct dpt_comm_req **req, struct dpt_err *err);
/* The same, ordered after `ready` (a cudaEvent_t; NULL = dpt_comm_start). */
int dpt_comm_start_after(struct dpt_comm *comm, float *buf, size_t n, unsigned flags, void *ready,
                         struct dpt_comm_req **req, struct dpt_err *err);
/* Waits, returns the collective's status, frees req. */
int dpt_comm_wait(struct dpt_comm *comm, struct dpt_comm_req *req, struct dpt_err *err);

/* Device communicators (nccl), for a step captured in a CUDA graph (issue 15): enqueue the
 * in-place all-reduce of device buffer buf on the communicator's stream after `ready` (a
 * cudaEvent_t; NULL: none) and return at once: no worker thread, no host wait, no watchdog
 * (the caller's stream joins the result with dpt_comm_enqueue_join's event; a hang shows at its
 * next host wait).  When ready was recorded on a stream being captured, the communicator's
 * stream joins that capture and the all-reduce is captured (NCCL supports graph capture).  The
 * fp16 staging of DPT_COMM_FP16 is allocated on the first call (an eager step), never during a
 * capture.  DPT_E_UNSUPPORTED for host communicators; DPT_E_INPUT while requests of
 * dpt_comm_start are queued (the two paths do not mix). */
int dpt_comm_enqueue_after(struct dpt_comm *comm, float *buf, size_t n, unsigned flags, void *ready,
                           struct dpt_err *err);
/* An event (a cudaEvent_t owned by the communicator) recorded on its stream after everything
 * enqueued so far: the caller's stream waits for it before reading the buffers. */
int dpt_comm_enqueue_join(struct dpt_comm *comm, void **done, struct dpt_err *err);

/* Test hook (opts.record_peers): the distinct (send_to, recv_from) pairs this
 * rank used, as world ranks of the communicator passed at creation, in first
 * use order.  Returns how many (up to cap are written). */
int dpt_comm_peers(const struct dpt_comm *comm, int *send_to, int *recv_from, int cap);

#ifdef DPT_HAVE_NCCL
/* ncclGetVersion's code (e.g. 22803 for NCCL 2.28.3: the library loaded, not the headers); -1 when
 * it fails.  dpt-train's start line and job report name it (issue 22). */
int dpt_comm_nccl_version(void);
#endif

#endif /* DPT_COMM_H */
