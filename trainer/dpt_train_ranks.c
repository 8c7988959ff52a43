/* dpt_train_ranks.c — dpt-train: the ranks: the runtime's communicator (or one rank), gradient
 * all-reduce (blocking, double-buffered, bucketed), preemption signals and their agreement. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* ---- ranks: the runtime's communicator, or one rank ---------------------- */

#ifdef DPT_TRAIN_HAVE_COMM
/* The CUDA device the cuda backend drives (dpt_backend_cuda.h): what nccl must use too. */
static int backend_gpu(void)
{
  return getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
}
#endif

int dpt_train_ranks_init(struct ranks *r, int *argc, char ***argv, const struct opts *o, struct dpt_err *err)
{
  r->rank = 0;
  r->size = 1;
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_ctx ctx;
  int rc = dpt_ctx_from_env(&ctx, err);
  if (rc) return rc;
  r->comm = NULL;
  if (ctx.rank >= 0) r->rank = ctx.rank; /* an error before the communicator exists names this rank, not 0 */
  if (ctx.size == 1) return 0;
  if ((rc = dpt_comm_mpi_init(argc, argv, err))) return rc;
  struct dpt_comm_opts co;
  dpt_comm_opts_init(&co);
  co.name = o->comm;
  /* nccl: the device the cuda backend drives (dpt_bind's DPT_CUDA_DEVICE, else 0), not a guess */
  if (!strcmp(o->comm, "nccl")) co.gpu = backend_gpu();
  if ((rc = dpt_comm_create(&r->comm, MPI_COMM_WORLD, &co, err))) return rc;
  r->host = r->comm;
  if (!strcmp(o->comm, "nccl")) { /* flags, statistics, BN state, broadcast: host buffers, same ring order */
    co.name = "mpi";
    co.ring_pos = dpt_comm_rank(r->comm);
    if ((rc = dpt_comm_create(&r->host, MPI_COMM_WORLD, &co, err))) {
      r->host = NULL;
      dpt_err_prefix(err, "the host communicator next to nccl");
      return rc;
    }
  }
  r->rank = dpt_comm_rank(r->comm);
  r->size = dpt_comm_size(r->comm);
  return 0;
#else
  const char *v[] = {"DPT_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", NULL};
  for (int i = 0; v[i]; i++)
    if (getenv(v[i]) && atoi(getenv(v[i])) > 1)
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "%s=%s: this dpt-train was built without the runtime's "
                         "communicators (dpt_runtime), so it runs one rank only", v[i], getenv(v[i]));
  return 0;
#endif
}

/* --comm auto (the default, also srun --dpt's) once the backend is known: gradients
 * in device memory (cuda) go over nccl when this build has it and every rank has a
 * GPU of its own (ranks sharing one: the ring, said once); the communicator made at
 * start-up (the plan's ring) stays for host buffers.  Sets *name to what the
 * gradients use. */
int dpt_train_ranks_resolve_auto(struct ranks *r, int device_grads, const char **name, struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->size == 1 || strcmp(*name, "auto")) return 0;
  const char *want = dpt_comm_resolve("auto", device_grads);
  char note[512] = "";
  if (!strcmp(want, "nccl") && !(want = dpt_comm_gpu_resolve(r->comm, "auto", backend_gpu(), note, sizeof note, err)))
    return dpt_err_prefix(err, "--comm auto with gradients in device memory");
  if (note[0] && r->rank == 0) fprintf(stderr, "dpt-train: --comm auto: %s\n", note);
  if (strcmp(want, "nccl")) {
    *name = dpt_comm_name(r->comm);
    return 0;
  }
  struct dpt_comm_opts co;
  struct dpt_comm *dc;
  dpt_comm_opts_init(&co);
  co.name = want;
  co.ring_pos = dpt_comm_rank(r->comm);
  co.gpu = backend_gpu();
  int rc = dpt_comm_create(&dc, MPI_COMM_WORLD, &co, err);
  if (rc) return dpt_err_prefix(err, "--comm auto with gradients in device memory: the nccl communicator");
  r->host = r->comm;
  r->comm = dc;
  *name = want;
  return 0;
#else
  (void)r, (void)device_grads, (void)name, (void)err;
  return 0;
#endif
}

/* In-place sum or average over ranks (blocking) of a HOST buffer. */
int dpt_train_ranks_allreduce(struct ranks *r, float *buf, size_t n, int avg, int fp16, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_allreduce(r->host, buf, n, (avg ? DPT_COMM_AVG : 0) | (fp16 ? DPT_COMM_FP16 : 0), err);
#else
  (void)buf, (void)n, (void)avg, (void)fp16;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

int dpt_train_ranks_bcast(struct ranks *r, float *buf, size_t n, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  /* A sum with zeros elsewhere is rank 0's values exactly (x + 0 == x), and the
   * communicator's all-reduce is under its watchdog: a rank that dies or stalls
   * at start-up is named instead of hanging MPI_Bcast. */
  if (r->rank) memset(buf, 0, n * sizeof *buf);
  return dpt_comm_allreduce(r->host, buf, n, 0, err);
#else
  (void)buf, (void)n;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "broadcast without the runtime");
#endif
}

/* The gradient average (blocking): buf is device memory for nccl, else host. */
int dpt_train_grad_allreduce(struct ranks *r, float *buf, size_t n, int fp16, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_allreduce(r->comm, buf, n, DPT_COMM_AVG | (fp16 ? DPT_COMM_FP16 : 0), err);
#else
  (void)buf, (void)n, (void)fp16;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

/* ready: an event the communicator waits for before reading buf (nccl), or NULL. */
int dpt_train_grad_start(struct ranks *r, struct inflight *f, float *buf, size_t n, int fp16, void *ready,
                         struct dpt_err *err)
{
  f->active = 0;
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  int rc = dpt_comm_start_after(r->comm, buf, n, DPT_COMM_AVG | (fp16 ? DPT_COMM_FP16 : 0), ready, &f->req, err);
  if (!rc) f->active = 1;
  return rc;
#else
  (void)buf, (void)n, (void)fp16, (void)ready;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

int dpt_train_grad_wait(struct ranks *r, struct inflight *f, struct dpt_err *err)
{
  if (!f->active) return 0;
  f->active = 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_wait(r->comm, f->req, err);
#else
  (void)r;
  return 0;
#endif
}

int dpt_train_bucket_start(void *ctx, int k, void *ready, struct dpt_err *err)
{
  struct bucket_ar *ba = ctx;
#ifdef DPT_TRAIN_HAVE_COMM
  const struct dpt_bucket *b = &ba->be->buckets[k];
  if (ba->enqueue) /* on the nccl stream behind the bucket's event: captured with the step */
    return dpt_comm_enqueue_after(ba->rk->comm, ba->be->grads + b->off, b->len, ba->flags, ready, err);
  int rc = dpt_comm_start_after(ba->rk->comm, ba->be->grads + b->off, b->len, ba->flags, ready, &ba->req[k], err);
  if (!rc) ba->started = k + 1;
  return rc;
#else
  (void)ba, (void)k, (void)ready;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

/* Wait for every bucket queued in this backward (the first error is returned). */
int dpt_train_bucket_wait_all(struct bucket_ar *ba, struct dpt_err *err)
{
  int rc = 0;
#ifdef DPT_TRAIN_HAVE_COMM
  for (int k = 0; k < ba->started; k++) {
    struct dpt_err e = {0};
    int r = dpt_comm_wait(ba->rk->comm, ba->req[k], &e);
    if (r && !rc) {
      rc = r;
      *err = e;
    }
  }
#else
  (void)err;
#endif
  ba->started = 0;
  return rc;
}

void dpt_train_ranks_fini(struct ranks *r)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->host && r->host != r->comm) dpt_comm_destroy(r->host);
  if (r->comm) {
    dpt_comm_destroy(r->comm);
    MPI_Finalize();
  }
#else
  (void)r;
#endif
}

/* ---- preemption ---------------------------------------------------------- */

static volatile sig_atomic_t g_preempt_sig; /* first of SIGUSR1/SIGTERM received, 0: none */

static void on_preempt(int sig)
{
  if (!g_preempt_sig) g_preempt_sig = sig; /* async-signal-safe: one sig_atomic_t store */
}

int dpt_train_preempt_install(struct dpt_err *err)
{
  static const int sigs[] = {SIGUSR1, SIGTERM};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preempt;
  sa.sa_flags = SA_RESTART; /* the loader's reads and checkpoint writes carry on */
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 2; i++)
    if (sigaction(sigs[i], &sa, NULL))
      return dpt_err_set(err, DPT_E_RUNTIME, "sigaction(%s): %s", strsignal(sigs[i]), strerror(errno));
  return 0;
}

/* All ranks agree whether to stop after this step: sum of the per-rank flags
 * (SIGUSR1 wins the name when both were seen).  *sig: the signal, or 0. */
int dpt_train_preempt_agree(struct ranks *r, int *sig, struct dpt_err *err)
{
  int mine = g_preempt_sig;
  float v[2] = {mine == SIGUSR1 ? 1.0f : 0.0f, mine == SIGTERM ? 1.0f : 0.0f};
  int rc = dpt_train_ranks_allreduce(r, v, 2, 0, 0, err);
  if (rc) return rc;
  *sig = v[0] > 0 ? SIGUSR1 : v[1] > 0 ? SIGTERM : 0;
  return 0;
}

/* Rank 0's string (at most len - 1 bytes) on every rank, one float per byte
 * through the watched all-reduce. */
int dpt_train_agree_path(struct ranks *r, char *s, size_t len, struct dpt_err *err)
{
  if (r->size == 1) return 0;
  float *v = calloc(len, sizeof *v);
  if (!v) return dpt_err_set(err, DPT_E_NOMEM, "out of memory agreeing on the report path");
  for (size_t i = 0; i + 1 < len && s[i]; i++) v[i] = (float)(unsigned char)s[i];
  int rc = dpt_train_ranks_bcast(r, v, len, err);
  if (!rc) {
    for (size_t i = 0; i < len; i++) s[i] = (char)(unsigned char)v[i];
    s[len - 1] = '\0';
  }
  free(v);
  return rc;
}
