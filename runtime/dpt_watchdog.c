/* dpt_watchdog.c — see dpt_watchdog.h */
#include "dpt_watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct dpt_watchdog {
  double seconds;
  char self[128];
  pthread_t thread;
  int have_thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;                 /* guarded by mu */
  int armed;                /* guarded by mu */
  char what[256];           /* guarded by mu */
  double begun;             /* guarded by mu */
  _Atomic double last;      /* last progress (monotonic seconds) */
  atomic_int waiting_on;
  atomic_int expired;
  char msg[2048];           /* room for every part at its longest: GCC proves no truncation at -O0 and -Os */
  dpt_watchdog_handler_fn handler;
  void *handler_arg;
  dpt_watchdog_suspect_fn suspect;
  void *suspect_arg;
};

/* ---- process-wide phase and error file ------------------------------------ */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_phase[48] = "";        /* guarded by g_mu (read racily by the signal path) */
static long g_step = -1;
static int g_phase_fd = -2;          /* -2: not opened yet, -1: none */
static char g_errfile[4096];         /* "" : none */
static int g_err_rank = -1;
static char g_err_node[128] = "?";

/* the phase a rank records when its watchdog fired (a survivor, not a cause) */
#define WATCHDOG_FIRED "stopped by its watchdog"
/* the phase line of a rank that failed and is on its way out */
#define FAILED_IN "failed in "

static int status_rank(void)
{
  const char *r = getenv("DPT_RANK");
  return r && *r ? atoi(r) : -1;
}

void dpt_watchdog_set_phase(const char *phase, long step)
{
  pthread_mutex_lock(&g_mu);
  snprintf(g_phase, sizeof g_phase, "%s", phase ? phase : "");
  g_step = step;
  if (g_phase_fd == -2) {
    const char *dir = getenv("DPT_LAUNCH_STATUS_DIR");
    int r = status_rank();
    g_phase_fd = -1;
    if (dir && *dir && r >= 0) {
      char path[4200];
      snprintf(path, sizeof path, "%s/rank.%d.phase", dir, r);
      g_phase_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
  }
  if (g_phase_fd >= 0) {
    char line[128];
    memset(line, ' ', sizeof line);
    int n = step >= 0 ? snprintf(line, sizeof line, "%s (step %ld)", g_phase, step)
                      : snprintf(line, sizeof line, "%s", g_phase);
    if (n >= 0 && n < (int)sizeof line) line[n] = ' ';
    line[sizeof line - 1] = '\n';
    ssize_t w = pwrite(g_phase_fd, line, sizeof line, 0);
    (void)w;
  }
  pthread_mutex_unlock(&g_mu);
}

/* Overwrites the mirrored phase line (fixed 128 bytes) with text, the phase
 * itself unchanged. */
static void phase_line(const char *text)
{
  char line[128];
  pthread_mutex_lock(&g_mu);
  if (g_phase_fd >= 0) {
    memset(line, ' ', sizeof line);
    int n = snprintf(line, sizeof line, "%s", text);
    if (n >= 0 && n < (int)sizeof line) line[n] = ' ';
    line[sizeof line - 1] = '\n';
    ssize_t w = pwrite(g_phase_fd, line, sizeof line, 0);
    (void)w;
  }
  pthread_mutex_unlock(&g_mu);
}

void dpt_watchdog_announce_failure(void)
{
  char line[256], phase[96], node[128];
  dpt_watchdog_phase(phase, sizeof phase);
  pthread_mutex_lock(&g_mu);
  snprintf(node, sizeof node, "%s", g_err_node);
  pthread_mutex_unlock(&g_mu);
  snprintf(line, sizeof line, FAILED_IN "%s @%s", phase[0] ? phase : "?", node);
  phase_line(line);
}

void dpt_watchdog_phase(char *buf, size_t len)
{
  pthread_mutex_lock(&g_mu);
  if (g_step >= 0) snprintf(buf, len, "%s (step %ld)", g_phase, g_step);
  else snprintf(buf, len, "%s", g_phase);
  pthread_mutex_unlock(&g_mu);
}

void dpt_watchdog_set_error_file(const char *path, int rank, const char *node)
{
  pthread_mutex_lock(&g_mu);
  snprintf(g_errfile, sizeof g_errfile, "%s", path ? path : "");
  g_err_rank = rank;
  snprintf(g_err_node, sizeof g_err_node, "%s", node && *node ? node : "?");
  pthread_mutex_unlock(&g_mu);
}

static void json_str(FILE *f, const char *s)
{
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

void dpt_watchdog_write_error(const char *kind, const char *msg, int suspect_rank, const char *suspect_node,
                              const char *suspect_phase)
{
  char path[4096], tmp[4200], node[128], phase[48], ts[64];
  int rank;
  long step;
  pthread_mutex_lock(&g_mu);
  snprintf(path, sizeof path, "%s", g_errfile);
  snprintf(node, sizeof node, "%s", g_err_node);
  snprintf(phase, sizeof phase, "%s", g_phase);
  rank = g_err_rank;
  step = g_step;
  pthread_mutex_unlock(&g_mu);
  if (!path[0]) return;
  time_t t = time(NULL);
  struct tm tmv;
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tmv));
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "{\"schema\": \"dpt.error/1\", \"kind\": ");
  json_str(f, kind);
  fprintf(f, ", \"time\": \"%s\", \"rank\": %d, \"node\": ", ts, rank);
  json_str(f, node);
  fprintf(f, ", \"pid\": %d, \"phase\": ", (int)getpid());
  json_str(f, phase);
  fprintf(f, ", \"step\": %ld, \"message\": ", step);
  json_str(f, msg);
  fprintf(f, ", \"suspect\": ");
  if (suspect_rank >= 0) {
    fprintf(f, "{\"rank\": %d, \"node\": ", suspect_rank);
    json_str(f, suspect_node ? suspect_node : "?");
    fprintf(f, ", \"phase\": ");
    if (suspect_phase) json_str(f, suspect_phase);
    else fprintf(f, "null");
    fprintf(f, "}");
  } else {
    fprintf(f, "null");
  }
  fprintf(f, "}\n");
  if (fclose(f) == 0) rename(tmp, path);
  else unlink(tmp);
}

/* async-signal-safe pieces */
static size_t put_s(char *b, size_t at, size_t cap, const char *s)
{
  while (s && *s && at + 1 < cap) b[at++] = *s++;
  return at;
}

static size_t put_js(char *b, size_t at, size_t cap, const char *s)
{
  at = put_s(b, at, cap, "\"");
  for (; s && *s && at + 3 < cap; s++)
    if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) b[at++] = '?';
    else b[at++] = *s;
  return put_s(b, at, cap, "\"");
}

static size_t put_i(char *b, size_t at, size_t cap, long v)
{
  char d[24];
  int n = 0;
  unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
  if (v < 0) at = put_s(b, at, cap, "-");
  do d[n++] = (char)('0' + u % 10); while ((u /= 10) && n < 23);
  while (n && at + 1 < cap) b[at++] = d[--n];
  return at;
}

void dpt_watchdog_write_error_signal(int sig)
{
  static char b[2048];
  size_t at = 0, cap = sizeof b;
  const char *name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGABRT ? "SIGABRT"
                     : sig == SIGFPE ? "SIGFPE" : sig == SIGILL ? "SIGILL" : "a fatal signal";
  if (!g_errfile[0]) return;
  int fd = open(g_errfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  at = put_s(b, at, cap, "{\"schema\": \"dpt.error/1\", \"kind\": \"signal\", \"signal\": ");
  at = put_js(b, at, cap, name);
  at = put_s(b, at, cap, ", \"rank\": ");
  at = put_i(b, at, cap, g_err_rank);
  at = put_s(b, at, cap, ", \"node\": ");
  at = put_js(b, at, cap, g_err_node);
  at = put_s(b, at, cap, ", \"pid\": ");
  at = put_i(b, at, cap, (long)getpid());
  at = put_s(b, at, cap, ", \"phase\": ");
  at = put_js(b, at, cap, g_phase);
  at = put_s(b, at, cap, ", \"step\": ");
  at = put_i(b, at, cap, g_step);
  at = put_s(b, at, cap, ", \"message\": \"rank ");
  at = put_i(b, at, cap, g_err_rank);
  at = put_s(b, at, cap, " on ");
  at = put_s(b, at, cap, g_err_node);
  at = put_s(b, at, cap, " died of ");
  at = put_s(b, at, cap, name);
  at = put_s(b, at, cap, " in phase ");
  at = put_s(b, at, cap, g_phase);
  at = put_s(b, at, cap, "\", \"suspect\": {\"rank\": ");
  at = put_i(b, at, cap, g_err_rank);
  at = put_s(b, at, cap, ", \"node\": ");
  at = put_js(b, at, cap, g_err_node);
  at = put_s(b, at, cap, ", \"phase\": ");
  at = put_js(b, at, cap, g_phase);
  at = put_s(b, at, cap, "}}\n");
  ssize_t w = write(fd, b, at);
  (void)w;
  close(fd);
}

/* The phase rank r last recorded under dpt-launch ("" if none). */
static void peer_phase(int r, char *buf, size_t len)
{
  const char *dir = getenv("DPT_LAUNCH_STATUS_DIR");
  char path[4200];
  buf[0] = '\0';
  if (!dir || !*dir) return;
  snprintf(path, sizeof path, "%s/rank.%d.phase", dir, r);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n < 0) n = 0;
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n')) buf[--n] = '\0';
}

/* A rank that died on its own, as dpt-launch's supervisors record it in
 * $DPT_LAUNCH_STATUS_DIR/rank.<r> (ranks stopped by the launcher's teardown,
 * "forwarded" = 1, are not causes).  The earliest one: 1 and its rank, node and
 * how it ended; 0 when none. */
static int peer_failure(int *rank, char *node, size_t nlen, char *how, size_t hlen)
{
  const char *dir = getenv("DPT_LAUNCH_STATUS_DIR");
  int me = status_rank(), found = 0;
  unsigned long long best = ~0ull;
  if (!dir || !*dir) return 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return 0;
  while ((e = readdir(d))) {
    char path[4200], nd[256], hw[256] = "", rk[32];
    unsigned long long t;
    int code, fwd;
    const char *p = e->d_name + 5;
    if (strncmp(e->d_name, "rank.", 5) || !*p || strspn(p, "0123456789") != strlen(p)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    char ph[80];
    if (fscanf(f, "%llu %31s %d %d %255s\n", &t, rk, &code, &fwd, nd) == 5 && fgets(hw, sizeof hw, f) &&
        !fwd && code && atoi(rk) != me && t < best &&
        (peer_phase(atoi(rk), ph, sizeof ph), strncmp(ph, WATCHDOG_FIRED, strlen(WATCHDOG_FIRED)))) {
      hw[strcspn(hw, "\n")] = '\0';
      best = t;
      found = 1;
      *rank = atoi(rk);
      snprintf(node, nlen, "%s", nd);
      snprintf(how, hlen, "%s", hw);
    }
    fclose(f);
  }
  closedir(d);
  if (found) return 1;
  /* a rank on its way out after an error (its exit is not recorded yet) */
  d = opendir(dir);
  if (!d) return 0;
  while ((e = readdir(d))) {
    int r;
    char ph[128], tail[8];
    if (sscanf(e->d_name, "rank.%d.phas%7s", &r, tail) != 2 || strcmp(tail, "e") || r == me) continue;
    peer_phase(r, ph, sizeof ph);
    if (strncmp(ph, FAILED_IN, strlen(FAILED_IN))) continue;
    char *at = strrchr(ph, '@');
    *rank = r;
    snprintf(node, nlen, "%s", at ? at + 1 : "?");
    if (at) *(at > ph && at[-1] == ' ' ? at - 1 : at) = '\0';
    snprintf(how, hlen, "exiting after an error");
    found = 1;
    break;
  }
  closedir(d);
  return found;
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void default_handler(void *arg, const char *msg)
{
  const struct dpt_watchdog *wd = arg;
  /* write(2) is unbuffered: the line survives _exit. */
  char line[1100];
  int len = snprintf(line, sizeof line, "%s\n", msg);
  double grace = wd ? wd->seconds / 8.0 : 0.0;
  struct timespec ts;
  /* One write: lines of ranks sharing the terminal do not interleave. */
  ssize_t w = write(STDERR_FILENO, line, len < (int)sizeof line ? (size_t)len : sizeof line - 1);
  (void)w;
  /* Linger briefly: the launcher tears the job down at the first exit, and the
   * other survivors' watchdogs (which fire within a tick of this one) should
   * get to say what they saw too. */
  if (grace > 0.5)
    grace = 0.5;
  ts.tv_sec = 0;
  ts.tv_nsec = (long)(grace * 1e9);
  nanosleep(&ts, NULL);
  _exit(DPT_WATCHDOG_EXIT);
}

static void fire(struct dpt_watchdog *wd, const char *what, double idle, int peer_rank,
                 const char *peer_node, const char *peer_how)
{
  char suspect[512] = "", phase[96] = "", sphase[80] = "", snode[128] = "?";
  int on = atomic_load(&wd->waiting_on), srank = -1;

  dpt_watchdog_phase(sphase, sizeof sphase);
  if (sphase[0]) snprintf(phase, sizeof phase, " in phase %s", sphase);
  sphase[0] = '\0';
  if (peer_how) {
    srank = peer_rank;
    snprintf(snode, sizeof snode, "%.127s", peer_node);
    peer_phase(srank, sphase, sizeof sphase);
    if (!strncmp(sphase, FAILED_IN, strlen(FAILED_IN))) { /* "failed in <phase> @<node>" */
      char *at = strrchr(sphase, '@');
      if (at) *(at > sphase && at[-1] == ' ' ? at - 1 : at) = '\0';
      memmove(sphase, sphase + strlen(FAILED_IN), strlen(sphase + strlen(FAILED_IN)) + 1);
    }
    snprintf(wd->msg, sizeof wd->msg,
             "dpt watchdog: %s%s: %s: a peer failed (no progress for %.1f s); suspected rank %d on %s "
             "(%s, seen in dpt-launch's status directory)%s%s; this rank stops too",
             wd->self, phase, what, idle, srank, snode, peer_how, sphase[0] ? " in phase " : "", sphase);
  } else {
    if (wd->suspect)
      wd->suspect(wd->suspect_arg, on, suspect, sizeof suspect);
    else if (on >= 0)
      snprintf(suspect, sizeof suspect, "rank %d (this rank was waiting on it)", on);
    else
      snprintf(suspect, sizeof suspect, "unknown");
    if (sscanf(suspect, "rank %d on %127s", &srank, snode) >= 1) {
      snode[strcspn(snode, " ,()")] = '\0';
      peer_phase(srank, sphase, sizeof sphase);
    } else {
      srank = -1;
    }
    snprintf(wd->msg, sizeof wd->msg,
             "dpt watchdog: %s%s: %s made no progress for %.1f s (limit %.1f s, "
             "DPT_WATCHDOG_SECONDS); suspected %s%s%s",
             wd->self, phase, what, idle, wd->seconds, suspect, sphase[0] ? "; its last phase: " : "", sphase);
  }
  dpt_watchdog_write_error("watchdog", wd->msg, srank, srank >= 0 ? snode : NULL, sphase[0] ? sphase : NULL);
  /* the other survivors must not take this rank's exit for the cause, and
   * dpt-launch names the rank the survivors suspect (a hung one has no record) */
  dpt_watchdog_set_phase(WATCHDOG_FIRED, -1);
  if (srank >= 0) {
    char line[192]; /* the phrase, a rank and a 127-byte node name */
    snprintf(line, sizeof line, WATCHDOG_FIRED "; suspect rank %d on %s", srank, snode);
    phase_line(line);
  }
  wd->handler(wd->handler_arg, wd->msg); /* the default handler does not return */
  atomic_store(&wd->expired, 1);
}

static void *watch(void *arg)
{
  struct dpt_watchdog *wd = arg;
  double tick = wd->seconds / 40.0, last_tick = now_s(), last_scan = 0;

  if (tick > 0.1)
    tick = 0.1;
  if (tick < 0.01)
    tick = 0.01;
  pthread_mutex_lock(&wd->mu);
  while (!wd->stop) {
    struct timespec ts;
    double t;
    clock_gettime(CLOCK_REALTIME, &ts);
    t = (double)ts.tv_nsec * 1e-9 + tick;
    ts.tv_sec += (time_t)floor(t);
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    pthread_cond_timedwait(&wd->cv, &wd->mu, &ts);
    if (wd->stop)
      break;
    {
      /* This process itself was frozen (SIGSTOP, a debugger, a suspended VM):
       * its own wait says nothing about its peers, so restart the clock. */
      double t_now = now_s(), frozen = wd->seconds / 2 > 1.0 ? wd->seconds / 2 : 1.0;
      if (t_now - last_tick > frozen)
        atomic_store(&wd->last, t_now);
      last_tick = t_now;
    }
    if (wd->armed && !atomic_load(&wd->expired)) {
      double t_now = now_s(), idle = t_now - atomic_load(&wd->last);
      int prank = -1;
      char pnode[256], phow[256];
      /* stuck for a while: did dpt-launch record a dead peer? (at most 5 looks a second) */
      int dead = 0;
      if (idle >= 0.2 && idle < wd->seconds && t_now - last_scan >= 0.2) {
        last_scan = t_now;
        dead = peer_failure(&prank, pnode, sizeof pnode, phow, sizeof phow);
      }
      if (idle >= wd->seconds || dead) {
        char what[256];
        memcpy(what, wd->what, sizeof what);
        wd->armed = 0;
        pthread_mutex_unlock(&wd->mu);
        fire(wd, what, idle, prank, pnode, dead ? phow : NULL);
        pthread_mutex_lock(&wd->mu);
      }
    }
  }
  pthread_mutex_unlock(&wd->mu);
  return NULL;
}

int dpt_watchdog_create(struct dpt_watchdog **out, double seconds, const char *self,
                        struct dpt_err *err)
{
  struct dpt_watchdog *wd = NULL;
  int rc;

  *out = NULL;
  if (seconds == 0.0) {
    const char *v = getenv("DPT_WATCHDOG_SECONDS");
    seconds = DPT_WATCHDOG_DEFAULT_S;
    if (v && *v) {
      char *end;
      errno = 0;
      seconds = strtod(v, &end);
      if (errno || end == v || *end || !(seconds >= 0.0) || isinf(seconds))
        return dpt_err_set(err, DPT_E_INPUT,
                           "DPT_WATCHDOG_SECONDS=\"%s\" is not a number of seconds >= 0 "
                           "(0 disables the watchdog)", v);
      if (seconds == 0.0)
        seconds = -1.0;
    }
  }
  wd = calloc(1, sizeof *wd);
  if (!wd)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory creating the watchdog");
  wd->seconds = seconds > 0 ? seconds : 0.0;
  snprintf(wd->self, sizeof wd->self, "%s", self ? self : "this process");
  wd->handler = default_handler;
  wd->handler_arg = wd;
  atomic_init(&wd->waiting_on, -1);
  atomic_init(&wd->expired, 0);
  atomic_init(&wd->last, now_s());
  pthread_mutex_init(&wd->mu, NULL);
  pthread_cond_init(&wd->cv, NULL);
  if (wd->seconds > 0) {
    rc = pthread_create(&wd->thread, NULL, watch, wd);
    if (rc) {
      dpt_err_set(err, DPT_E_RUNTIME, "cannot start the watchdog thread: %s", strerror(rc));
      goto fail;
    }
    wd->have_thread = 1;
  }
  *out = wd;
  return 0;
fail:
  pthread_mutex_destroy(&wd->mu);
  pthread_cond_destroy(&wd->cv);
  free(wd);
  return err ? err->code : DPT_E_RUNTIME;
}

void dpt_watchdog_destroy(struct dpt_watchdog *wd)
{
  if (!wd)
    return;
  if (wd->have_thread) {
    pthread_mutex_lock(&wd->mu);
    wd->stop = 1;
    pthread_cond_signal(&wd->cv);
    pthread_mutex_unlock(&wd->mu);
    pthread_join(wd->thread, NULL);
  }
  pthread_mutex_destroy(&wd->mu);
  pthread_cond_destroy(&wd->cv);
  free(wd);
}

void dpt_watchdog_set_handler(struct dpt_watchdog *wd, dpt_watchdog_handler_fn fn, void *arg)
{
  pthread_mutex_lock(&wd->mu);
  wd->handler = fn ? fn : default_handler;
  wd->handler_arg = fn ? arg : wd;
  pthread_mutex_unlock(&wd->mu);
}

void dpt_watchdog_set_suspect(struct dpt_watchdog *wd, dpt_watchdog_suspect_fn fn, void *arg)
{
  pthread_mutex_lock(&wd->mu);
  wd->suspect = fn;
  wd->suspect_arg = arg;
  pthread_mutex_unlock(&wd->mu);
}

void dpt_watchdog_begin(struct dpt_watchdog *wd, const char *what)
{
  if (!wd || wd->seconds <= 0)
    return;
  pthread_mutex_lock(&wd->mu);
  snprintf(wd->what, sizeof wd->what, "%s", what);
  wd->begun = now_s();
  atomic_store(&wd->last, wd->begun);
  atomic_store(&wd->waiting_on, -1);
  wd->armed = 1;
  pthread_mutex_unlock(&wd->mu);
}

void dpt_watchdog_progress(struct dpt_watchdog *wd)
{
  if (wd && wd->seconds > 0)
    atomic_store(&wd->last, now_s());
}

void dpt_watchdog_waiting_on(struct dpt_watchdog *wd, int rank)
{
  if (wd && wd->seconds > 0)
    atomic_store(&wd->waiting_on, rank);
}

void dpt_watchdog_end(struct dpt_watchdog *wd)
{
  if (!wd || wd->seconds <= 0)
    return;
  pthread_mutex_lock(&wd->mu);
  wd->armed = 0;
  pthread_mutex_unlock(&wd->mu);
}

int dpt_watchdog_expired(const struct dpt_watchdog *wd)
{
  return wd && atomic_load(&((struct dpt_watchdog *)wd)->expired);
}

const char *dpt_watchdog_message(const struct dpt_watchdog *wd)
{
  return (wd && dpt_watchdog_expired(wd)) ? wd->msg : "";
}

double dpt_watchdog_seconds(const struct dpt_watchdog *wd)
{
  return wd ? wd->seconds : 0.0;
}
