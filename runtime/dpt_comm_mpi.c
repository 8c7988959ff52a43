/* dpt_comm_mpi.c — the "mpi" communicator: Open MPI's own MPI_Allreduce on the
 * ring-ordered communicator (the baseline the others are measured against).
 * fp16 on the wire: an MPI_UINT16_T buffer reduced with a user operation that
 * adds in fp32 and rounds each partial sum back to fp16. */
#include "dpt_comm_int.h"

#include <limits.h>
#include <stdlib.h>

#include "dpt_fp16.h"

struct mpi_impl {
  MPI_Op half_sum;
};

static void half_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
  const dpt_half *a = in;
  dpt_half *b = inout;
  (void)dt;
  for (int i = 0; i < *len; i++)
    b[i] = dpt_fp16_from_float(dpt_fp16_to_float(a[i]) + dpt_fp16_to_float(b[i]));
}

static int mpi_init(struct dpt_comm *c, const struct dpt_comm_opts *opts, struct dpt_err *err)
{
  struct mpi_impl *m = calloc(1, sizeof *m);
  int rc;
  if (!m)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  m->half_sum = MPI_OP_NULL;
  c->impl = m;
  rc = MPI_Op_create(half_sum, 1, &m->half_sum);
  if (rc != MPI_SUCCESS)
    return dpt_comm_mpi_err(c, rc, "MPI_Op_create", err);
  return 0;
}

static void mpi_fini(struct dpt_comm *c)
{
  struct mpi_impl *m = c->impl;
  if (m->half_sum != MPI_OP_NULL)
    MPI_Op_free(&m->half_sum);
  free(m);
  c->impl = NULL;
}

static int mpi_allreduce(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                         struct dpt_err *err)
{
  struct mpi_impl *m = c->impl;
  const size_t block = (size_t)1 << 30;
  dpt_half *h = NULL;
  int rc = 0;

  /* MPI_Allreduce blocks: the watchdog thread covers it (no peer is known). */
  dpt_watchdog_waiting_on(c->wd, -1);
  if (flags & DPT_COMM_FP16) {
    h = malloc(n * sizeof *h + 1);
    if (!h)
      return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory for the fp16 buffer", c->what);
    dpt_fp16_pack(h, buf, n);
  }
  for (size_t off = 0; off < n; off += block) {
    int cnt = (int)(n - off < block ? n - off : block);
    if (h)
      rc = MPI_Allreduce(MPI_IN_PLACE, h + off, cnt, MPI_UINT16_T, m->half_sum, c->ring);
    else
      rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, c->ring);
    if (rc != MPI_SUCCESS) {
      rc = dpt_comm_mpi_err(c, rc, "MPI_Allreduce", err);
      goto out;
    }
    dpt_watchdog_progress(c->wd);
  }
  if (h)
    dpt_fp16_unpack(buf, h, n);
  if (flags & DPT_COMM_AVG)
    for (size_t i = 0; i < n; i++)
      buf[i] /= (float)c->size;
out:
  free(h);
  return rc;
}

const struct dpt_comm_ops dpt_comm_mpi_ops = {
  .name = "mpi",
  .init = mpi_init,
  .allreduce = mpi_allreduce,
  .fini = mpi_fini,
};
