/* dpt_comm_init.c — MPI's start in dpt's programs: MPI_Init_thread, then, under a PMIx server
 * (srun --mpi=pmix, mpirun, dpt-launch), a wait until every rank is out of MPI_Init before the
 * first MPI message (dpt_comm_create's MPI_Allgather).
 *
 * Why the wait: with Open MPI 4.1.4 over TCP under srun --mpi=pmix (Debian 12: PMIx 4.2.2, Slurm
 * 22.05) ranks can leave MPI_Init -- past both of its PMIx fences -- while another rank still
 * waits in its first fence, before its PML has registered its receive handlers; the first
 * message that reaches it calls a NULL handler (SIGSEGV in btl_tcp's receive path).  8-rank
 * dpt-bench steps on the test cluster, interleaved in one run: 5 of 300 died so before this wait,
 * 0 of 300 with it (docs/slurm.md, Limits).  A fence alone cannot keep it out, fences being
 * what let the ranks through: each rank posts a key once its MPI_Init has returned, and no rank
 * goes on before it has read every rank's key -- after a fence that normally brings them all,
 * else fetched again until they are there. */
#include "dpt_comm_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef DPT_HAVE_PMIX
#include <pmix.h>

#define UP_KEY "dpt.mpi.up"
static int up_ranks; /* ranks whose key this rank read, itself included (dpt_comm_mpi_up_ranks) */
#define UP_WAIT_S 120 /* after the fence: a rank missing this long has died or hangs in MPI_Init */

static int up_fail(struct dpt_err *err, const char *what, pmix_status_t st)
{
  return dpt_err_set(err, DPT_E_RUNTIME,
                     "MPI start (the wait for every rank to leave MPI_Init): %s failed: %s; "
                     "is the job started by srun --mpi=pmix, mpirun or dpt-launch?",
                     what, PMIx_Error_string(st));
}

/* This rank says it is out of MPI_Init: a key, committed, then the fence that gathers them. */
static int up_post(const pmix_proc_t *me, struct dpt_err *err)
{
  pmix_value_t v;
  pmix_proc_t all;
  pmix_info_t info;
  bool collect = true;
  pmix_status_t st;
  PMIX_VALUE_LOAD(&v, &me->rank, PMIX_PROC_RANK);
  if ((st = PMIx_Put(PMIX_GLOBAL, UP_KEY, &v)) != PMIX_SUCCESS) return up_fail(err, "PMIx_Put", st);
  if ((st = PMIx_Commit()) != PMIX_SUCCESS) return up_fail(err, "PMIx_Commit", st);
  PMIX_LOAD_PROCID(&all, me->nspace, PMIX_RANK_WILDCARD);
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  st = PMIx_Fence(&all, 1, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  return st == PMIX_SUCCESS ? 0 : up_fail(err, "PMIx_Fence", st);
}

/* Rank r's key: from the fence's data, else asked for again (refreshing the cache) every 10 ms
 * until it is there or UP_WAIT_S have passed. */
static int up_read(const pmix_proc_t *me, int r, struct dpt_err *err)
{
  pmix_proc_t p;
  pmix_info_t info;
  pmix_value_t *v = NULL;
  bool refresh = true;
  struct timespec nap = {0, 10 * 1000 * 1000};
  pmix_status_t st;
  PMIX_LOAD_PROCID(&p, me->nspace, (pmix_rank_t)r);
  PMIX_INFO_CONSTRUCT(&info);
  PMIX_INFO_LOAD(&info, PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
  st = PMIx_Get(&p, UP_KEY, NULL, 0, &v);
  for (int tries = 0; st == PMIX_ERR_NOT_FOUND && tries < UP_WAIT_S * 100; tries++) {
    nanosleep(&nap, NULL);
    st = PMIx_Get(&p, UP_KEY, &info, 1, &v);
  }
  PMIX_INFO_DESTRUCT(&info);
  if (v) PMIX_VALUE_RELEASE(v);
  if (st == PMIX_ERR_NOT_FOUND)
    return dpt_err_set(err, DPT_E_RUNTIME,
                       "MPI start: rank %d of %s is not out of MPI_Init %d s after the others: it "
                       "died or hangs there (its output and the job report say which)",
                       r, me->nspace, UP_WAIT_S);
  if (st != PMIX_SUCCESS) {
    char what[80];
    snprintf(what, sizeof what, "PMIx_Get(" UP_KEY ") of rank %d", r);
    return up_fail(err, what, st);
  }
  return 0;
}

/* Every rank out of MPI_Init (see the top); nothing to do for one rank or without PMIx. */
static int wait_all_up(struct dpt_err *err)
{
  pmix_proc_t me;
  int n = 0, rc = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 2 || !getenv("PMIX_NAMESPACE")) return 0;
  pmix_status_t st = PMIx_Init(&me, NULL, 0);
  if (st != PMIX_SUCCESS) return up_fail(err, "PMIx_Init", st);
  if ((rc = up_post(&me, err)) < 0) goto out;
  for (int r = 0; r < n && rc == 0; r++)
    if ((pmix_rank_t)r == me.rank || (rc = up_read(&me, r, err)) == 0) up_ranks++;
out:
  PMIx_Finalize(NULL, 0); /* Open MPI's own PMIx_Init keeps the client up */
  return rc;
}

int dpt_comm_mpi_up_ranks(void) { return up_ranks; }
#else
static int wait_all_up(struct dpt_err *err)
{
  (void)err;
  return 0;
}

int dpt_comm_mpi_up_ranks(void) { return -1; }
#endif

int dpt_comm_mpi_init(int *argc, char ***argv, struct dpt_err *err)
{
  int inited = 0, provided = 0, rc;
  MPI_Initialized(&inited);
  if (inited)
    return 0;
  /* A write to the socket of a peer that died must not kill this rank silently with
   * SIGPIPE: the write fails (EPIPE) and the watchdog or the MPI error names the peer.
   * Only the default disposition is changed; a program's own handler is kept. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME,
                       "MPI_Init_thread failed (error %d): is the program started by mpirun, "
                       "srun --mpi=pmix or dpt-launch?", rc);
  return wait_all_up(err);
}
