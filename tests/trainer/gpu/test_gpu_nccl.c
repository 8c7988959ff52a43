/* test_gpu_nccl: 2 ranks (mpirun), one GPU each, the runtime's "nccl"
 * communicator all-reducing the CUDA backend's gradient slab bucket by bucket
 * while backward still runs (dpt_backend_set_buckets: the hook queues each
 * bucket with dpt_comm_start_after behind the bucket's event, 1 MiB buckets so
 * there are several), exactly as dpt-train does; then double buffering's path:
 * the gradient stashed into the device pending slab (stash_grads, with its
 * event) and all-reduced there behind the event.  Each rank trains on a
 * different batch; the reference is MPI_Allreduce (average) of the gradients
 * each rank computed in a first, identical pass (deterministic algorithms).
 *   fp32 on the wire: within 1e-6 of the block max (summation order only);
 *   fp16 on the wire: within dpt_comm.h's bound (p + 1) 2^-11 sum_i |x_i|.
 * Exit 77 (SKIPPED) without a GPU, with fewer GPUs than ranks, or without the nccl
 * communicator; every rank decides the same way, so mpirun returns 77. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <string.h>

#include "dpt_comm.h"
#include "gpu_test.h"

struct hook {
  struct dpt_comm *comm;
  struct dpt_backend *be;
  struct dpt_comm_req **req; /* [n_buckets] */
  unsigned flags;
  int calls;
};

static int on_bucket(void *ctx, int k, void *ready, struct dpt_err *err)
{
  struct hook *h = ctx;
  const struct dpt_bucket *b = &h->be->buckets[k];
  CHECK(k == h->calls, "bucket %d ready as call %d (not in bucket order)", k, h->calls);
  CHECK(ready != NULL, "bucket %d: the cuda backend passed no event", k);
  h->calls++;
  return dpt_comm_start_after(h->comm, h->be->grads + b->off, b->len, h->flags, ready, &h->req[k], err);
}

int main(int argc, char **argv)
{
  struct dpt_err err = {0};
#ifndef DPT_HAVE_NCCL
  printf("SKIPPED test_gpu_nccl: runtime built without the nccl communicator\n");
  return SKIP_CODE;
#endif
  gpu_or_skip("test_gpu_nccl");
  die_on(dpt_comm_mpi_init(&argc, &argv, &err), &err, "MPI");
  int rank, size, ndev = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cudaGetDeviceCount(&ndev);
  if (ndev < size) { /* NCCL needs a GPU per rank: the communicator refuses ranks that share one */
    if (rank == 0)
      printf("SKIPPED test_gpu_nccl: %d ranks but %d GPU(s): needs one GPU per rank\n", size, ndev);
    MPI_Finalize();
    return SKIP_CODE;
  }
  struct dpt_comm_opts copt;
  struct dpt_comm *comm;
  dpt_comm_opts_init(&copt);
  copt.name = "nccl";
  copt.gpu = rank % ndev;
  die_on(dpt_comm_create(&comm, MPI_COMM_WORLD, &copt, &err), &err, "nccl communicator");

  struct dpt_model m;
  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.width = 1.0 / 8;
  cfg.image_size = 32;
  cfg.small_stem = 1;
  cfg.num_classes = 10;
  die_on(dpt_model_resnet50(&m, &cfg, &err), &err, "model");
  struct dpt_backend_opts o;
  struct dpt_cuda_opts co;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = 4;
  oracle_opts(&co);
  co.device = rank % ndev;
  die_on(dpt_backend_cuda_create_ex(&m, &o, &co, &be, &err), &err, "cuda backend");
  size_t np = m.n_params, nx = (size_t)o.batch * 3 * 32 * 32;
  float *x = malloc(nx * 4), *ref = malloc(np * 4), *abs_sum = malloc(np * 4), *got = malloc(np * 4);
  int labels[4];
  struct dpt_rng rng;
  dpt_rng_seed(&rng, 100 + (uint64_t)rank);
  for (size_t i = 0; i < nx; i++) x[i] = (float)dpt_rng_normal(&rng);
  for (int i = 0; i < 4; i++) labels[i] = (int)dpt_rng_below(&rng, 10);
  struct dpt_bucket *b;
  int nb;
  die_on(dpt_bucket_plan(&m, (size_t)1 << 20, &b, &nb, &err), &err, "buckets");
  if (rank == 0) printf("%d ranks, %zu parameters in %d buckets\n", size, np, nb);
  CHECK(nb > 2, "only %d buckets", nb);

  for (int wire = 0; wire < 2; wire++) {
    double loss;
    /* pass 1: local gradients, reference all-reduce on the host */
    die_on(dpt_backend_forward(be, x, 1, NULL, &err), &err, "forward");
    die_on(dpt_backend_cuda_loss(be, labels, 0.0f, 0.25f, &loss, NULL, NULL, &err), &err, "loss");
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, got, 0, &err), &err, "download");
    for (size_t i = 0; i < np; i++) abs_sum[i] = fabsf(got[i]);
    MPI_Allreduce(got, ref, (int)np, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, abs_sum, (int)np, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0; i < np; i++) ref[i] /= (float)size;
    /* pass 2: same step, buckets all-reduced as backward produces them */
    die_on(dpt_backend_forward(be, x, 1, NULL, &err), &err, "forward");
    die_on(dpt_backend_cuda_loss(be, labels, 0.0f, 0.25f, &loss, NULL, NULL, &err), &err, "loss");
    struct hook h = {.comm = comm, .be = be, .req = calloc((size_t)nb, sizeof *h.req),
                     .flags = DPT_COMM_AVG | (wire ? DPT_COMM_FP16 : 0)};
    die_on(dpt_backend_set_buckets(be, b, nb, on_bucket, &h, &err), &err, "set buckets");
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    CHECK(h.calls == nb, "%d of %d buckets handed over by backward", h.calls, nb);
    for (int k = 0; k < h.calls; k++) die_on(dpt_comm_wait(comm, h.req[k], &err), &err, "all-reduce");
    die_on(dpt_backend_set_buckets(be, NULL, 0, NULL, NULL, &err), &err, "remove buckets");
    free(h.req);
    die_on(be->ops->copy_slab(be, DPT_SLAB_GRADS, got, 0, &err), &err, "download");
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
      double tol = wire ? (size + 1) * ldexp(1.0, -11) * abs_sum[i] / size + 1e-7
                        : 1e-6 * (fabs(ref[i]) + 1e-6);
      double e = fabs((double)got[i] - ref[i]);
      if (e > tol) bad++;
      worst = fmax(worst, e);
    }
    printf("rank %d, %s on the wire: max abs error %.3g, %zu elements out of bound\n", rank,
           wire ? "fp16" : "fp32", worst, bad);
    CHECK(bad == 0, "rank %d %s wire: %zu elements out of bound", rank, wire ? "fp16" : "fp32", bad);
  }
  /* double buffering with nccl: pending <- gradients on the backend's stream, all-reduce behind the event */
  {
    double loss;
    void *ready = NULL;
    die_on(be->ops->pending_init(be, &err), &err, "pending_init");
    die_on(dpt_backend_forward(be, x, 1, NULL, &err), &err, "forward");
    die_on(dpt_backend_cuda_loss(be, labels, 0.0f, 0.25f, &loss, NULL, NULL, &err), &err, "loss");
    die_on(dpt_backend_backward(be, NULL, NULL, &err), &err, "backward");
    die_on(be->ops->stash_grads(be, &ready, &err), &err, "stash_grads");
    CHECK(ready != NULL, "stash_grads gave no event");
    struct dpt_comm_req *req;
    die_on(dpt_comm_start_after(comm, be->pending, np, DPT_COMM_AVG, ready, &req, &err), &err, "start");
    die_on(dpt_comm_wait(comm, req, &err), &err, "pending all-reduce");
    die_on(be->ops->copy_slab(be, DPT_SLAB_PENDING, got, 0, &err), &err, "download pending");
    size_t bad = 0;
    for (size_t i = 0; i < np; i++) bad += !(fabs((double)got[i] - ref[i]) <= 1e-6 * (fabs(ref[i]) + 1e-6));
    printf("rank %d, double-buffered pending slab: %zu elements out of bound\n", rank, bad);
    CHECK(bad == 0, "rank %d: pending all-reduce: %zu elements out of bound", rank, bad);
  }
  free(b);
  dpt_backend_destroy(be);
  dpt_comm_destroy(comm);
  dpt_model_free(&m);
  free(x), free(ref), free(abs_sum), free(got);
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 1 : 0;
}
