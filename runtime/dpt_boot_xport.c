/* dpt_boot_xport.c — the bootstrap's transports (dpt_boot_int.h): PMIx when the job was
 * started by a PMIx server, else MPI; the all-gather and the blob broadcast over either. */
#include "dpt_boot_int.h"
#include "dpt_env.h"
#include "dpt_strv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#ifdef DPT_HAVE_PMIX
static int pmix_fail(struct dpt_err *err, const char *what, pmix_status_t st)
{
  return dpt_err_set(err, DPT_E_RUNTIME,
                     "bootstrap over PMIx: %s failed: %s (is the job started by a PMIx server: "
                     "srun --mpi=pmix or mpirun? DPT_BOOT=mpi uses MPI instead)",
                     what, PMIx_Error_string(st));
}

static int pmix_fence(struct dpt_boot *b, struct dpt_err *err)
{
  pmix_proc_t all;
  pmix_info_t info;
  bool collect = true;
  pmix_status_t st;
  PMIX_LOAD_PROCID(&all, b->me.nspace, PMIX_RANK_WILDCARD);
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  st = PMIx_Fence(&all, 1, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Fence", st);
  return 0;
}

static int pmix_put(const char *key, pmix_value_t *v, struct dpt_err *err)
{
  pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, v);
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Put", st);
  if ((st = PMIx_Commit()) != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Commit", st);
  return 0;
}

static int pmix_get(struct dpt_boot *b, int rank, const char *key, pmix_value_t **v,
                    struct dpt_err *err)
{
  pmix_proc_t p;
  pmix_status_t st;
  PMIX_LOAD_PROCID(&p, b->me.nspace, (pmix_rank_t)rank);
  st = PMIx_Get(&p, key, NULL, 0, v);
  if (st != PMIX_SUCCESS) {
    char what[600];
    snprintf(what, sizeof what, "PMIx_Get(%s) from rank %d", key, rank);
    return pmix_fail(err, what, st);
  }
  return 0;
}

static int pmix_start(struct dpt_boot *b, struct dpt_err *err)
{
  pmix_status_t st = PMIx_Init(&b->me, NULL, 0);
  pmix_proc_t wild;
  pmix_value_t *v = NULL;
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Init", st);
  b->pmix_inited = 1;
  b->lrank = (int)b->me.rank;
  PMIX_LOAD_PROCID(&wild, b->me.nspace, PMIX_RANK_WILDCARD);
  st = PMIx_Get(&wild, PMIX_JOB_SIZE, NULL, 0, &v);
  if (st != PMIX_SUCCESS)
    return pmix_fail(err, "PMIx_Get(" PMIX_JOB_SIZE ")", st);
  if (v->type == PMIX_UINT32)
    b->lsize = (int)v->data.uint32;
  else if (v->type == PMIX_INT)
    b->lsize = v->data.integer;
  else
    b->lsize = -1;
  PMIX_VALUE_RELEASE(v);
  if (b->lsize < 1 || b->lrank >= b->lsize)
    return dpt_err_set(err, DPT_E_RUNTIME, "PMIx says rank %d of a job of %d: cannot bootstrap",
                       b->lrank, b->lsize);
  return 0;
}

/* Everyone's string under a fresh key: put, fence, get each rank's. */
static int pmix_allgather(struct dpt_boot *b, const char *mine, char **all, struct dpt_err *err)
{
  char key[64];
  pmix_value_t v;
  int rc;
  snprintf(key, sizeof key, "dpt.boot.%u", b->seq);
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_STRING;
  v.data.string = (char *)mine;
  if ((rc = pmix_put(key, &v, err)) < 0 || (rc = pmix_fence(b, err)) < 0)
    return rc;
  for (int r = 0; r < b->lsize; r++) {
    pmix_value_t *got = NULL;
    if ((rc = pmix_get(b, r, key, &got, err)) < 0)
      return rc;
    if (got->type != PMIX_STRING || !got->data.string) {
      PMIX_VALUE_RELEASE(got);
      return dpt_err_set(err, DPT_E_RUNTIME, "PMIx key %s of rank %d is not a string", key, r);
    }
    all[r] = strdup(got->data.string);
    PMIX_VALUE_RELEASE(got);
    if (!all[r])
      return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  }
  return 0;
}

/* The root's bytes under a fresh key: the root puts, all fence, the others get them. */
static int pmix_bcast(struct dpt_boot *b, int lroot, int root, void *buf, size_t len,
                      struct dpt_err *err)
{
  char key[64];
  pmix_value_t v, *got = NULL;
  int rc;
  snprintf(key, sizeof key, "dpt.blob.%u", b->seq);
  if (b->lrank == lroot) {
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = buf;
    v.data.bo.size = len;
    if ((rc = pmix_put(key, &v, err)) < 0)
      return rc;
  }
  if ((rc = pmix_fence(b, err)) < 0)
    return rc;
  if (b->lrank == lroot)
    return 0;
  if ((rc = pmix_get(b, lroot, key, &got, err)) < 0)
    return rc;
  if (got->type != PMIX_BYTE_OBJECT || got->data.bo.size != len) {
    rc = dpt_err_set(err, DPT_E_INPUT,
                     "blob broadcast: rank %d (root, plan rank %d) sent %zu bytes, rank %d "
                     "expects %zu: every rank must pass the same length",
                     lroot, root, got->type == PMIX_BYTE_OBJECT ? got->data.bo.size : 0,
                     b->lrank, len);
  } else {
    memcpy(buf, got->data.bo.bytes, len);
  }
  PMIX_VALUE_RELEASE(got);
  return rc;
}
#endif

static int mpi_start(struct dpt_boot *b, struct dpt_err *err)
{
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (dpt_comm_mpi_init(NULL, NULL, err) < 0)
      return err->code;
    b->mpi_inited_here = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &b->lrank);
  MPI_Comm_size(MPI_COMM_WORLD, &b->lsize);
  return 0;
}

/* Everyone's string: the lengths, then the bytes (MPI_Allgatherv). */
static int mpi_allgather(struct dpt_boot *b, const char *mine, char **all, struct dpt_err *err)
{
  int n = b->lsize, l = (int)strlen(mine), *lens = NULL, *displs = NULL, total = 0, rc = 0;
  char *buf = NULL;
  if (!(lens = calloc((size_t)n, sizeof *lens)) || !(displs = calloc((size_t)n, sizeof *displs))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if (MPI_Allgather(&l, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "bootstrap over MPI: MPI_Allgather failed");
    goto out;
  }
  for (int r = 0; r < n; r++) {
    displs[r] = total;
    total += lens[r];
  }
  if (!(buf = malloc((size_t)total + 1))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto out;
  }
  if (MPI_Allgatherv(mine, l, MPI_CHAR, buf, lens, displs, MPI_CHAR, MPI_COMM_WORLD) !=
      MPI_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "bootstrap over MPI: MPI_Allgatherv failed");
    goto out;
  }
  for (int r = 0; r < n; r++) {
    if (!(all[r] = malloc((size_t)lens[r] + 1))) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto out;
    }
    memcpy(all[r], buf + displs[r], (size_t)lens[r]);
    all[r][lens[r]] = '\0';
  }
out:
  free(buf);
  free(lens);
  free(displs);
  return rc;
}

static int mpi_bcast(struct dpt_boot *b, int lroot, int root, void *buf, size_t len,
                     struct dpt_err *err)
{
  unsigned long long l = len, rl = len;
  if (MPI_Bcast(&rl, 1, MPI_UNSIGNED_LONG_LONG, lroot, MPI_COMM_WORLD) != MPI_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "blob broadcast: MPI_Bcast failed");
  if (rl != l)
    return dpt_err_set(err, DPT_E_INPUT,
                       "blob broadcast: rank %d (root, plan rank %d) sends %llu bytes, rank %d "
                       "expects %llu: every rank must pass the same length",
                       lroot, root, rl, b->lrank, l);
  if (len && MPI_Bcast(buf, (int)len, MPI_BYTE, lroot, MPI_COMM_WORLD) != MPI_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "blob broadcast: MPI_Bcast failed");
  return 0;
}

int dpt_boot_xport_start(struct dpt_boot *b, const char *name, struct dpt_err *err)
{
  const char *tr = name ? name : dpt_env_str("DPT_BOOT") ? dpt_env_str("DPT_BOOT") : "auto";
  if (strcmp(tr, "auto") && strcmp(tr, "pmix") && strcmp(tr, "mpi"))
    return dpt_err_set(err, DPT_E_INPUT, "bootstrap transport \"%.32s\" (DPT_BOOT): choose auto, "
                       "pmix or mpi", tr);
  if (!strcmp(tr, "auto"))
#ifdef DPT_HAVE_PMIX
    tr = dpt_env_str("PMIX_NAMESPACE") && dpt_env_str("PMIX_RANK") ? "pmix" : "mpi";
#else
    tr = "mpi";
#endif
#ifndef DPT_HAVE_PMIX
  if (!strcmp(tr, "pmix"))
    return dpt_err_set(err, DPT_E_UNSUPPORTED,
                       "bootstrap: this dpt was built without PMIx (libpmix-dev): use "
                       "DPT_BOOT=mpi");
#endif
  snprintf(b->transport, sizeof b->transport, "%s", tr);
#ifdef DPT_HAVE_PMIX
  if (!strcmp(tr, "pmix"))
    return pmix_start(b, err);
#endif
  return mpi_start(b, err);
}

void dpt_boot_xport_stop(struct dpt_boot *b)
{
#ifdef DPT_HAVE_PMIX
  if (b->pmix_inited)
    PMIx_Finalize(NULL, 0);
#endif
  if (b->mpi_inited_here) { /* the MPI fallback started MPI: stop it with us */
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
      MPI_Finalize();
  }
}

int dpt_boot_allgather(struct dpt_boot *b, const char *mine, char ***all_out, struct dpt_err *err)
{
  char **all = NULL;
  int n = b->lsize, rc;
  size_t len = strlen(mine);

  *all_out = NULL;
  if (len >= DPT_BOOT_STR_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "bootstrap record of %zu bytes (at most %d)", len,
                       DPT_BOOT_STR_MAX - 1);
  if (!(all = calloc((size_t)n, sizeof *all)))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  b->seq++;
#ifdef DPT_HAVE_PMIX
  if (!strcmp(b->transport, "pmix"))
    rc = pmix_allgather(b, mine, all, err);
  else
#endif
    rc = mpi_allgather(b, mine, all, err);
  if (rc < 0) {
    dpt_strv_free(all, n);
    return rc;
  }
  *all_out = all;
  return 0;
}

int dpt_boot_bcast_blob(struct dpt_boot *b, int root, void *buf, size_t len, struct dpt_err *err)
{
  int lroot;
  if (root < 0 || root >= b->lsize)
    return dpt_err_set(err, DPT_E_INPUT, "blob broadcast: root %d is not a rank of 0..%d", root,
                       b->lsize - 1);
  if (len > DPT_BOOT_BLOB_MAX)
    return dpt_err_set(err, DPT_E_INPUT, "blob broadcast: %zu bytes (at most %u)", len,
                       DPT_BOOT_BLOB_MAX);
  lroot = b->launcher_of[root];
  b->seq++;
#ifdef DPT_HAVE_PMIX
  if (!strcmp(b->transport, "pmix"))
    return pmix_bcast(b, lroot, root, buf, len, err);
#endif
  return mpi_bcast(b, lroot, root, buf, len, err);
}
