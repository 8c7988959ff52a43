/* test_hang.c — the victim program of the watchdog tests: all-reduces forever
 * (DPT_COMM or ring, 1 Mi floats) after writing its pid to DIR/pid.<rank>,
 * so a test can SIGKILL or SIGSTOP one rank mid-collective.
 * usage: test_hang DIR */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dpt_comm.h"

int main(int argc, char **argv)
{
  struct dpt_err err;
  struct dpt_comm_opts o;
  struct dpt_comm *c = NULL;
  size_t n = (size_t)1 << 20;
  float *x;
  int rank;
  char path[4096];
  FILE *f;

  if (argc != 2) {
    fprintf(stderr, "usage: test_hang DIR\n");
    return 2;
  }
  if (dpt_comm_mpi_init(&argc, &argv, &err) < 0) {
    fprintf(stderr, "test_hang: %s\n", err.msg);
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  dpt_comm_opts_init(&o);
  o.name = getenv("DPT_COMM") ? getenv("DPT_COMM") : "ring";
  if (dpt_comm_create(&c, MPI_COMM_WORLD, &o, &err) < 0) {
    fprintf(stderr, "test_hang: %s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  x = calloc(n, sizeof *x);
  if (!x)
    MPI_Abort(MPI_COMM_WORLD, 1);
  if (dpt_comm_allreduce(c, x, n, 0, &err) < 0) {
    fprintf(stderr, "test_hang: %s\n", err.msg);
    return 1;
  }
  snprintf(path, sizeof path, "%s/pid.%d", argv[1], rank);
  f = fopen(path, "w");
  if (!f)
    MPI_Abort(MPI_COMM_WORLD, 1);
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  for (long it = 0; it < 1000000; it++) {
    if (dpt_comm_allreduce(c, x, n, 0, &err) < 0) {
      fprintf(stderr, "test_hang: %s\n", err.msg);
      return 1;
    }
  }
  dpt_comm_destroy(c);
  free(x);
  MPI_Finalize();
  return 0;
}
