/* dpt_report_mpi.c — the report's MPI pieces (part of dpt_runtime, so that the
 * dpt_report library itself needs no MPI): a gather hook over an MPI
 * communicator and MPI's library version. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dpt_report.h"

int dpt_report_gather_mpi(void *arg, const char *mine, size_t len, char **all, size_t **lens,
                          struct dpt_err *err)
{
  MPI_Comm comm = *(MPI_Comm *)arg;
  int rank, size, rc = 0, n = (int)len;
  int *counts = NULL, *displs = NULL;
  char *buf = NULL;
  size_t *l = NULL;

  *all = NULL;
  *lens = NULL;
  if (len > INT_MAX)
    return dpt_err_set(err, DPT_E_RUNTIME, "report: this rank's part is %zu bytes, more than MPI_Gatherv takes", len);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (rank == 0) {
    counts = malloc(sizeof *counts * (size_t)size);
    displs = malloc(sizeof *displs * (size_t)size);
    l = malloc(sizeof *l * (size_t)size);
    if (!counts || !displs || !l) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "report: out of memory for %d ranks", size);
      goto fail; /* the other ranks then wait in the gather: the watchdog or MPI ends them */
    }
  }
  if (MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, comm) != MPI_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "report: MPI_Gather of the parts' sizes failed");
    goto fail;
  }
  if (rank == 0) {
    long long total = 0;
    for (int i = 0; i < size; i++) {
      displs[i] = (int)total;
      l[i] = (size_t)counts[i];
      total += counts[i];
      if (total > INT_MAX) {
        rc = dpt_err_set(err, DPT_E_RUNTIME, "report: the ranks' parts exceed 2 GiB");
        goto fail;
      }
    }
    buf = malloc((size_t)total + 1);
    if (!buf) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "report: out of memory for %lld bytes", total);
      goto fail;
    }
  }
  if (MPI_Gatherv(mine, n, MPI_CHAR, buf, counts, displs, MPI_CHAR, 0, comm) != MPI_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "report: MPI_Gatherv of the ranks' parts failed");
    goto fail;
  }
  free(counts);
  free(displs);
  *all = buf;
  *lens = l;
  return 0;
fail:
  free(counts);
  free(displs);
  free(buf);
  free(l);
  return rc;
}

int dpt_report_set_mpi_version(struct dpt_report *rep)
{
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS)
    return DPT_E_RUNTIME;
  v[len < (int)sizeof v ? len : (int)sizeof v - 1] = '\0';
  char *nl = strchr(v, '\n');
  if (nl)
    *nl = '\0';
  /* "Open MPI v4.1.4, package: ..., ident: ..., repo rev: ..." -> up to the first comma */
  char *comma = strchr(v, ',');
  if (comma)
    *comma = '\0';
  return dpt_report_set_library(rep, "mpi", v);
}
