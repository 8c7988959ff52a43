/* dpt_comm_int.h — shared between the communicator implementations (private). */
#ifndef DPT_COMM_INT_H
#define DPT_COMM_INT_H

#include <pthread.h>
#include <stdint.h>

#include "dpt_comm.h"
#include "dpt_watchdog.h"

struct dpt_comm_ops {
  const char *name;
  int (*init)(struct dpt_comm *c, const struct dpt_comm_opts *opts, struct dpt_err *err);
  /* Blocking all-reduce, run on the worker thread or in wait. */
  int (*allreduce)(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                   struct dpt_err *err);
  /* Device communicators: make the next allreduce wait for `ready` (a
   * cudaEvent_t) on the communicator's stream, without blocking the host.
   * NULL: the communicator reads host memory and refuses events. */
  int (*wait_ready)(struct dpt_comm *c, void *ready, struct dpt_err *err);
  /* Device communicators: enqueue the all-reduce on the communicator's stream after `ready`
   * and return without waiting (dpt_comm_enqueue_after); record an event after everything
   * enqueued so far (dpt_comm_enqueue_join).  NULL: host communicators. */
  int (*enqueue)(struct dpt_comm *c, float *buf, size_t n, unsigned flags, void *ready, struct dpt_err *err);
  int (*enqueue_join)(struct dpt_comm *c, void **done, struct dpt_err *err);
  void (*fini)(struct dpt_comm *c);
};

#define DPT_COMM_MAX_PEERS 64

struct dpt_comm_req {
  float *buf;   /* [n] */
  size_t n;
  unsigned flags;
  void *ready;  /* dpt_comm_start_after's event, or NULL */
  int done;     /* guarded by comm->mu */
  int rc;
  struct dpt_err err;
  struct dpt_comm_req *next;
};

struct dpt_comm {
  const struct dpt_comm_ops *ops;
  MPI_Comm world;       /* the caller's communicator (not owned) */
  MPI_Comm ring;        /* ring order: rank = ring position (owned) */
  int rank, size;       /* in ring */
  int world_rank;
  int *world_of;        /* [size] world rank of each ring position */
  int *pid_of;          /* [size] */
  int *node_of;         /* [size] node index of each ring position */
  char (*host_of)[64];  /* [size] */
  int n_nodes;
  size_t chunk_bytes;
  int window;
  struct dpt_watchdog *wd;
  uint64_t seq;         /* collectives run so far */
  char what[160];       /* current collective, for messages */
  int in_collective;    /* 1 while run_one runs a collective (MPI errors then wait for the watchdog) */

  int record;
  int n_peers;
  int peer_send[DPT_COMM_MAX_PEERS], peer_recv[DPT_COMM_MAX_PEERS];

  int async;
  pthread_t worker;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  struct dpt_comm_req *head, *tail; /* queued, not yet run (async) or not yet waited (sync) */

  void *impl;           /* communicator-specific state */
};

/* Ring engine (dpt_comm_ring.c), shared by "ring" and "hierarchical".
 * Runs on `comm` (p ranks, this is r) over data [n] split in p segments
 * (dpt_ring_segment).  mode: DPT_RING_RS leaves rank r with the reduced
 * segment (r+1) mod p; DPT_RING_AG assumes it and spreads every rank's
 * segment; both: all-reduce.  divisor != 0: the reduced values are divided by
 * it (only with DPT_RING_RS).  world_of: [p] world ranks for messages/peers. */
enum { DPT_RING_RS = 1, DPT_RING_AG = 2, DPT_RING_ALL = 3 };
struct dpt_ring_args {
  MPI_Comm comm;
  int p, r;
  const int *world_of;  /* [p] */
  float *data;          /* [n] */
  size_t n;
  int mode;
  int fp16;
  float divisor;
};
void dpt_ring_segment(size_t n, int p, int i, size_t *off, size_t *len);
int dpt_ring_run(struct dpt_comm *c, const struct dpt_ring_args *a, struct dpt_err *err);

/* Record a (send, recv) world-rank pair for the test hook. */
void dpt_comm_note_peers(struct dpt_comm *c, int send_to, int recv_from);
/* Error for a failed MPI call, naming the call and the collective. */
int dpt_comm_mpi_err(struct dpt_comm *c, int mpirc, const char *call, struct dpt_err *err);
/* Wait for one request with the watchdog (waiting_on = world rank or -1). */
int dpt_comm_poll_wait(struct dpt_comm *c, MPI_Request *req, int waiting_on,
                       struct dpt_err *err);

extern const struct dpt_comm_ops dpt_comm_mpi_ops;
extern const struct dpt_comm_ops dpt_comm_ring_ops;
extern const struct dpt_comm_ops dpt_comm_hier_ops;
#ifdef DPT_HAVE_NCCL
extern const struct dpt_comm_ops dpt_comm_nccl_ops;
/* PCI bus id of CUDA device `gpu` (cudaDeviceGetPCIBusId) into out[len]; 0, or an error
 * naming the call (dpt_comm_gpu.c compares the ranks' ids before NCCL is called). */
int dpt_comm_nccl_bus_id(int gpu, char *out, size_t len, struct dpt_err *err);
#endif

#endif /* DPT_COMM_INT_H */
