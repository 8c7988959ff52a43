/* slow_fsync.c — an LD_PRELOAD shim for job_report.sh: a file system on which fsync
 * takes DPT_TEST_SLOW_FSYNC_MS milliseconds (a busy disk, NFS, Lustre), in the rank
 * supervisors of one rank only (DPT_TEST_SLOW_FSYNC_RANK = its DPT_RANK; processes
 * named dpt-launch), so that the other rank's supervisor ends first and mpirun's
 * teardown meets this one while it records its rank's end.  Other processes
 * (mpirun, the ranks' programs, the launcher: no DPT_RANK) see the real fsync. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int slowed(void)
{
  const char *rank = getenv("DPT_RANK"), *want = getenv("DPT_TEST_SLOW_FSYNC_RANK");
  const char *base = strrchr(program_invocation_name, '/');
  base = base ? base + 1 : program_invocation_name;
  return rank && want && !strcmp(rank, want) && !strcmp(base, "dpt-launch");
}

int fsync(int fd)
{
  static int (*real)(int);
  const char *ms = getenv("DPT_TEST_SLOW_FSYNC_MS");
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "fsync");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (ms && slowed()) {
    long v = atol(ms);
    struct timespec ts = {v / 1000, (v % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
  }
  return real(fd);
}
