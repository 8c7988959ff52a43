/* dpt_watchdog.c — see dpt_watchdog.h */
#include "dpt_watchdog.h"

#include <errno.h>
#include <math.h>
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
  char msg[1024];
  dpt_watchdog_handler_fn handler;
  void *handler_arg;
  dpt_watchdog_suspect_fn suspect;
  void *suspect_arg;
};

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

static void fire(struct dpt_watchdog *wd, const char *what, double idle)
{
  char suspect[512] = "";
  int on = atomic_load(&wd->waiting_on);

  if (wd->suspect)
    wd->suspect(wd->suspect_arg, on, suspect, sizeof suspect);
  else if (on >= 0)
    snprintf(suspect, sizeof suspect, "rank %d (this rank was waiting on it)", on);
  else
    snprintf(suspect, sizeof suspect, "unknown");
  snprintf(wd->msg, sizeof wd->msg,
           "dpt watchdog: %s: %s made no progress for %.1f s (limit %.1f s, "
           "DPT_WATCHDOG_SECONDS); suspected %s",
           wd->self, what, idle, wd->seconds, suspect);
  wd->handler(wd->handler_arg, wd->msg); /* the default handler does not return */
  atomic_store(&wd->expired, 1);
}

static void *watch(void *arg)
{
  struct dpt_watchdog *wd = arg;
  double tick = wd->seconds / 40.0, last_tick = now_s();

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
      double idle = now_s() - atomic_load(&wd->last);
      if (idle >= wd->seconds) {
        char what[256];
        memcpy(what, wd->what, sizeof what);
        wd->armed = 0;
        pthread_mutex_unlock(&wd->mu);
        fire(wd, what, idle);
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
