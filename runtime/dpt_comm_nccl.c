/* dpt_comm_nccl.c — the "nccl" communicator (GPU builds).
 *
 * ncclCommInitRank with rank = ring position (the unique id travels over the
 * ring-ordered MPI communicator), ncclAllReduce on device buffers in fp32, or
 * fp16 on the wire (converted on the GPU), ncclSum / ncclAvg.  Completion is
 * polled with cudaStreamQuery and ncclCommGetAsyncError so the watchdog sees
 * progress.  Without a GPU, creation fails on every rank with a message
 * naming cudaGetDeviceCount's error (never a crash, never a hang); two ranks on
 * one GPU (same host and PCI bus id) are refused on every rank before NCCL is
 * called (dpt_comm_gpu_agree), naming the bus id and suggesting --comm ring. */
#include "dpt_comm_int.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

int dpt_nccl_f32_to_f16(const float *in, void *out, size_t n, cudaStream_t s);
int dpt_nccl_f16_to_f32(const void *in, float *out, size_t n, cudaStream_t s);

struct nccl_impl {
  ncclComm_t comm;
  cudaStream_t stream;
  int dev;
  void *half;       /* device [half_cap] fp16 staging */
  size_t half_cap;
  cudaEvent_t joined; /* dpt_comm_enqueue_join's event */
};

static int nccl_err(struct dpt_comm *c, ncclResult_t r, const char *call, struct dpt_err *err)
{
  return dpt_err_set(err, DPT_E_RUNTIME, "%s failed in %s on rank %d (%s): %s", call,
                     c->what[0] ? c->what : "creating communicator nccl", c->rank,
                     c->host_of[c->rank], ncclGetErrorString(r));
}

static int cuda_err(struct dpt_comm *c, cudaError_t e, const char *call, struct dpt_err *err)
{
  return dpt_err_set(err, DPT_E_RUNTIME, "%s failed on rank %d (%s): %s", call, c->rank,
                     c->host_of[c->rank], cudaGetErrorString(e));
}

int dpt_comm_nccl_version(void)
{
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : -1;
}

int dpt_comm_nccl_bus_id(int gpu, char *out, size_t len, struct dpt_err *err)
{
  cudaError_t ce = cudaDeviceGetPCIBusId(out, (int)len, gpu);
  if (ce != cudaSuccess) {
    if (len)
      out[0] = '\0';
    return dpt_err_set(err, DPT_E_RUNTIME, "cudaDeviceGetPCIBusId(device %d) failed: %s", gpu,
                       cudaGetErrorString(ce));
  }
  return 0;
}

static void nccl_fini(struct dpt_comm *c)
{
  struct nccl_impl *m = c->impl;
  if (m->comm)
    ncclCommDestroy(m->comm);
  if (m->half)
    cudaFree(m->half);
  if (m->joined)
    cudaEventDestroy(m->joined);
  if (m->stream)
    cudaStreamDestroy(m->stream);
  free(m);
  c->impl = NULL;
}

static int nccl_init(struct dpt_comm *c, const struct dpt_comm_opts *opts, struct dpt_err *err)
{
  struct nccl_impl *m = calloc(1, sizeof *m);
  int ndev = 0, ok, all_ok = 0, local = 0, rc;
  cudaError_t ce;
  ncclUniqueId id;
  ncclResult_t nr;
  char why[256] = "";

  if (!m)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  c->impl = m;
  ce = cudaGetDeviceCount(&ndev);
  ok = ce == cudaSuccess && ndev > 0;
  if (ce != cudaSuccess)
    snprintf(why, sizeof why, "cudaGetDeviceCount failed: %s", cudaGetErrorString(ce));
  else if (!ndev)
    snprintf(why, sizeof why, "cudaGetDeviceCount found 0 GPUs");
  /* Every rank must fail together, or the others would wait for the unique id. */
  rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, c->ring);
  if (rc != MPI_SUCCESS)
    return dpt_comm_mpi_err(c, rc, "MPI_Allreduce", err);
  if (!ok)
    return dpt_err_set(err, DPT_E_UNSUPPORTED,
                       "communicator nccl: no usable GPU on rank %d (%s): %s; use --comm ring, "
                       "hierarchical or mpi on CPU-only nodes", c->rank, c->host_of[c->rank],
                       why);
  if (!all_ok)
    return dpt_err_set(err, DPT_E_UNSUPPORTED,
                       "communicator nccl: another rank has no usable GPU (see its message); "
                       "use --comm ring, hierarchical or mpi");
  for (int q = 0; q < c->rank; q++)
    if (!strcmp(c->host_of[q], c->host_of[c->rank]))
      local++;
  m->dev = opts->gpu >= 0 ? opts->gpu : local % ndev;
  { /* one GPU per rank, decided before NCCL is called; every rank fails together */
    struct dpt_err mine = {0};
    char bus[DPT_COMM_BUSID_LEN] = "";
    int have = 0;
    if ((ce = cudaSetDevice(m->dev)) != cudaSuccess)
      cuda_err(c, ce, "cudaSetDevice", &mine);
    else
      have = dpt_comm_nccl_bus_id(m->dev, bus, sizeof bus, &mine) == 0;
    if (!dpt_comm_gpu_agree(c, "nccl", have ? bus : "", NULL, 0, err)) {
      if (!have) /* this rank is the one without a GPU to name: its own reason */
        *err = mine;
      return err->code;
    }
  }
  if ((ce = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking)) != cudaSuccess)
    return cuda_err(c, ce, "cudaStreamCreate", err);
  if (c->rank == 0 && (nr = ncclGetUniqueId(&id)) != ncclSuccess)
    return nccl_err(c, nr, "ncclGetUniqueId", err);
  if (opts->bcast_id) { /* the bootstrap's transport (PMIx under srun / mpirun) */
    if ((rc = opts->bcast_id(opts->bcast_ctx, &id, sizeof id, err)) < 0) {
      dpt_err_prefix(err, "communicator nccl: NCCL unique id broadcast");
      return rc;
    }
  } else {
    rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->ring);
    if (rc != MPI_SUCCESS)
      return dpt_comm_mpi_err(c, rc, "MPI_Bcast (NCCL unique id)", err);
  }
  if ((nr = ncclCommInitRank(&m->comm, c->size, id, c->rank)) != ncclSuccess)
    return nccl_err(c, nr, "ncclCommInitRank", err);
  return 0;
}

/* Enqueue the all-reduce of buf on the communicator's stream (fp16 on the wire: converted on the
 * stream around it, in the staging buffer, grown here unless the stream is being captured). */
static int nccl_issue(struct dpt_comm *c, float *buf, size_t n, unsigned flags, struct dpt_err *err)
{
  struct nccl_impl *m = c->impl;
  int fp16 = !!(flags & DPT_COMM_FP16);
  ncclRedOp_t op = (flags & DPT_COMM_AVG) ? ncclAvg : ncclSum;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  ncclResult_t nr;
  cudaError_t ce;
  if (fp16 && m->half_cap < n) {
    if ((ce = cudaStreamIsCapturing(m->stream, &cs)) != cudaSuccess)
      return cuda_err(c, ce, "cudaStreamIsCapturing", err);
    if (cs != cudaStreamCaptureStatusNone)
      return dpt_err_set(err, DPT_E_RUNTIME, "allreduce[nccl]: the fp16 staging of %zu elements would be allocated "
                         "inside a CUDA-graph capture on rank %d (run one eager step first, or --cuda-graph off)",
                         n, c->rank);
    if (m->half)
      cudaFree(m->half);
    m->half = NULL;
    m->half_cap = 0;
    if ((ce = cudaMalloc(&m->half, n * 2)) != cudaSuccess)
      return cuda_err(c, ce, "cudaMalloc (fp16 staging)", err);
    m->half_cap = n;
  }
  if (fp16) {
    if ((ce = (cudaError_t)dpt_nccl_f32_to_f16(buf, m->half, n, m->stream)) != cudaSuccess)
      return cuda_err(c, ce, "fp32->fp16 kernel", err);
    nr = ncclAllReduce(m->half, m->half, n, ncclHalf, op, m->comm, m->stream);
  } else {
    nr = ncclAllReduce(buf, buf, n, ncclFloat, op, m->comm, m->stream);
  }
  if (nr != ncclSuccess)
    return nccl_err(c, nr, "ncclAllReduce", err);
  if (fp16 && (ce = (cudaError_t)dpt_nccl_f16_to_f32(m->half, buf, n, m->stream)) != cudaSuccess)
    return cuda_err(c, ce, "fp16->fp32 kernel", err);
  return 0;
}

static int nccl_allreduce(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                          struct dpt_err *err)
{
  struct nccl_impl *m = c->impl;
  cudaError_t ce;
  int rc;

  if (!n)
    return 0;
  cudaSetDevice(m->dev);
  if ((rc = nccl_issue(c, buf, n, flags, err)))
    return rc;
  for (;;) {
    ncclResult_t async = ncclSuccess;
    ce = cudaStreamQuery(m->stream);
    if (ce == cudaSuccess)
      break;
    if (ce != cudaErrorNotReady)
      return cuda_err(c, ce, "cudaStreamQuery", err);
    ncclCommGetAsyncError(m->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(m->comm);
      m->comm = NULL;
      return nccl_err(c, async, "ncclAllReduce (async error)", err);
    }
    if (dpt_watchdog_expired(c->wd))
      return dpt_err_set(err, DPT_E_RUNTIME, "%s", dpt_watchdog_message(c->wd));
    sched_yield();
  }
  dpt_watchdog_progress(c->wd);
  return 0;
}

/* The producer's event (a gradient bucket's, dpt_backend_set_buckets) orders the
 * all-reduce after the kernels that wrote the buffer, on the device. */
static int nccl_wait_ready(struct dpt_comm *c, void *ready, struct dpt_err *err)
{
  struct nccl_impl *m = c->impl;
  cudaError_t ce;
  cudaSetDevice(m->dev);
  if ((ce = cudaStreamWaitEvent(m->stream, (cudaEvent_t)ready, 0)) != cudaSuccess)
    return cuda_err(c, ce, "cudaStreamWaitEvent (buffer's ready event)", err);
  return 0;
}

/* dpt_comm_enqueue_after: the stream waits for ready, then the all-reduce (fp16 on the wire:
 * converted on the stream around it), nothing waited for on the host.  While the producer's
 * stream is being captured the stream has joined that capture by the wait, and the
 * conversions and ncclAllReduce are captured with it; the fp16 staging can only grow outside
 * a capture. */
static int nccl_enqueue(struct dpt_comm *c, float *buf, size_t n, unsigned flags, void *ready, struct dpt_err *err)
{
  struct nccl_impl *m = c->impl;
  int rc;
  if (!n)
    return 0;
  cudaSetDevice(m->dev);
  if (ready && (rc = nccl_wait_ready(c, ready, err)))
    return rc;
  snprintf(c->what, sizeof c->what, "enqueued allreduce #%llu of %zu floats", (unsigned long long)c->seq, n);
  return nccl_issue(c, buf, n, flags, err);
}

static int nccl_enqueue_join(struct dpt_comm *c, void **done, struct dpt_err *err)
{
  struct nccl_impl *m = c->impl;
  cudaError_t ce;
  cudaSetDevice(m->dev);
  if (!m->joined && (ce = cudaEventCreateWithFlags(&m->joined, cudaEventDisableTiming)) != cudaSuccess)
    return cuda_err(c, ce, "cudaEventCreate (join)", err);
  if ((ce = cudaEventRecord(m->joined, m->stream)) != cudaSuccess)
    return cuda_err(c, ce, "cudaEventRecord (join)", err);
  *done = (void *)m->joined;
  return 0;
}

const struct dpt_comm_ops dpt_comm_nccl_ops = {
  .name = "nccl",
  .init = nccl_init,
  .allreduce = nccl_allreduce,
  .wait_ready = nccl_wait_ready,
  .enqueue = nccl_enqueue,
  .enqueue_join = nccl_enqueue_join,
  .fini = nccl_fini,
};
