/* dpt_train_faults.c — dpt-train: phases and fault injection (DPT_FAULT, a testing aid),
 * fatal-signal handling. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* ---- phases and fault injection (a testing aid) ---------------------------
 * The phase (start-up, train, allreduce, checkpoint, validation, report) is
 * recorded in the runtime's watchdog: its messages and the dpt.error/1 error
 * files (<report>.rank<N>.err) name it, and under dpt-launch the survivors
 * name the phase a dead rank was in.
 * DPT_FAULT=PHASE:RANK:KIND[:STEP] makes rank RANK fail on purpose when it
 * enters PHASE (startup, allreduce, checkpoint, validation) at step >= STEP
 * (default 0): kill (SIGKILL, as the kernel's OOM killer does), segv (a write
 * to address 0), oom (allocations under an address-space limit until one
 * fails: the out-of-memory error path), stop (SIGSTOP: a hung rank).  Unset,
 * it costs one compare per phase. */
static struct {
  int on, rank;
  long step;
  char phase[16], kind[8];
} g_fault;

int dpt_train_fault_parse(int me, struct dpt_err *err)
{
  const char *v = getenv("DPT_FAULT");
  char ph[16] = "", kd[8] = "";
  int rank = -1, n = 0;
  long step = 0;
  if (!v || !*v) return 0;
  if (sscanf(v, "%15[a-z]:%d:%7[a-z]%n:%ld%n", ph, &rank, kd, &n, &step, &n) < 3 || v[n] ||
      (strcmp(ph, "startup") && strcmp(ph, "allreduce") && strcmp(ph, "checkpoint") && strcmp(ph, "validation")) ||
      (strcmp(kd, "kill") && strcmp(kd, "segv") && strcmp(kd, "oom") && strcmp(kd, "stop")) || rank < 0)
    return dpt_err_set(err, DPT_E_INPUT, "DPT_FAULT=\"%s\": expected PHASE:RANK:KIND[:STEP] with PHASE startup, "
                       "allreduce, checkpoint or validation and KIND kill, segv, oom or stop (a testing aid: "
                       "unset it for real runs)", v);
  if (rank != me) return 0;
  g_fault.on = 1;
  g_fault.rank = rank;
  g_fault.step = step;
  snprintf(g_fault.phase, sizeof g_fault.phase, "%s", ph);
  snprintf(g_fault.kind, sizeof g_fault.kind, "%s", kd);
  return 0;
}

static int fault_oom(const char *phase, long step, struct dpt_err *err)
{
  /* cap the address space a little above what is mapped now, then allocate and
   * touch until an allocation fails: the program's own out-of-memory path */
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld", &pages) != 1) pages = 0;
    fclose(f);
  }
  struct rlimit rl;
  getrlimit(RLIMIT_AS, &rl);
  rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
  setrlimit(RLIMIT_AS, &rl);
  void *chunks[4096];
  int n = 0;
  while (n < 4096 && (chunks[n] = malloc((size_t)16 << 20))) memset(chunks[n++], 1, (size_t)16 << 20);
  for (int i = 0; i < n; i++) free(chunks[i]);
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory in phase %s (step %ld) after %d MiB more: no allocation "
                     "possible (DPT_FAULT)", phase, step, n * 16);
}

int dpt_train_enter_phase(const char *phase, long step, struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_set_phase(phase, step);
#endif
  if (!g_fault.on || strcmp(g_fault.phase, phase) || (step >= 0 && step < g_fault.step)) return 0;
  g_fault.on = 0;
  char line[200];
  int n = snprintf(line, sizeof line, "dpt-train: DPT_FAULT: rank %d (pid %d) fails on purpose (%s) in phase %s "
                   "(step %ld)\n", g_fault.rank, (int)getpid(), g_fault.kind, phase, step);
  fflush(stdout);
  ssize_t w = write(STDERR_FILENO, line, n > 0 && n < (int)sizeof line ? (size_t)n : 0);
  (void)w;
  if (!strcmp(g_fault.kind, "kill")) raise(SIGKILL);
  if (!strcmp(g_fault.kind, "stop")) raise(SIGSTOP);
  if (!strcmp(g_fault.kind, "segv")) *(volatile int *)(uintptr_t)0 = 1;
  if (!strcmp(g_fault.kind, "oom")) return fault_oom(phase, step, err);
  return 0;
}

#if defined(__SANITIZE_ADDRESS__)
#define DPT_TRAIN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DPT_TRAIN_ASAN 1
#endif
#endif

/* A fatal signal writes the error file (when there is one) and a line, then
 * takes the default action (core dump).  Not under ASan: its report is better. */
#ifndef DPT_TRAIN_ASAN
static void on_fatal(int sig)
{
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_write_error_signal(sig);
#endif
  static const char m[] = "dpt-train: fatal signal (SIGSEGV/SIGBUS/SIGFPE/SIGILL): see the error file next to the "
                          "job report\n";
  ssize_t w = write(STDERR_FILENO, m, sizeof m - 1);
  (void)w;
  signal(sig, SIG_DFL);
  raise(sig);
}
#endif

void dpt_train_faults_install(void)
{
  signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the checkpoint write (EFBIG), it does not kill */
#ifndef DPT_TRAIN_ASAN
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], on_fatal);
#endif
}
