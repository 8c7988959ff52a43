/* dpt_report_int.h — private to the job report's writer: dpt_report.c (what a
 * rank collects, its part), dpt_report_doc.c (rank 0's document: the parts
 * gathered, the error files absorbed, validated, written) and
 * dpt_report_file.c (the path, the atomic write, the announcement).  The
 * report's state and the calls between those files.  Not installed, not for
 * other modules. */
#ifndef DPT_REPORT_INT_H
#define DPT_REPORT_INT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "dpt_report.h"

/* One rank's report: what it collected since dpt_report_create. */
struct dpt_report {
  char program[64];
  int rank, size;
  json_t *command;      /* array of argv strings */
  double start_unix;    /* CLOCK_REALTIME at create */
  double start_mono;    /* CLOCK_MONOTONIC at create */
  char host[256];
  long pid;
  json_t *software;     /* object; "libraries" inside */
  json_t *config, *results;
  json_t *plan;         /* dpt.plan/1 or NULL */
  uint64_t plan_bytes;  /* plan->opts.size_bytes (fp32 bytes the costs are for) */
  int plan_fp16;
  json_t *node;         /* this rank's node summary or NULL */
  char *binding;        /* free text or NULL */
  char *oversubscribed; /* what ranks share (dpt_job_sharing of the plan, or the launcher's
                           DPT_PLAN_OVERSUBSCRIBED) or NULL */
  char launch_digest[17]; /* the plan the launcher announced (DPT_PLAN_DIGEST) when the embedded
                             plan is its plan for the job's own message; "" otherwise */
  uint64_t ar_bytes;    /* 0: not set */
  double ar_measured;   /* < 0: from the steps */
  double *samples[DPT_REPORT_N_PHASES]; /* [cap] per phase, n_steps used */
  size_t n_steps, cap;
  long images;
  json_t *curve;        /* array */
  json_t *errors;       /* array */
  int exit_status;      /* -1: not set */
  char *baseline;
  int has_end;                /* a supervisor's part: the program's pid, RSS, end, env */
  struct dpt_report_end end;
  json_t *env;                /* object: the handed-over variables, or NULL */
};

/* Seconds: the wall clock (CLOCK_REALTIME) and the monotonic clock. */
static inline double dpt_report_now_real(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline double dpt_report_now_mono(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* t (Unix seconds) as ISO 8601 UTC with milliseconds: 2026-11-30T16:29:14.123Z. */
static inline void dpt_report_iso_time(double t, char *buf, size_t len)
{
  time_t s = (time_t)t;
  struct tm tm;
  gmtime_r(&s, &tm);
  int ms = (int)((t - (double)s) * 1000);
  if (ms < 0 || ms > 999)
    ms = 0;
  char b[32];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", b, ms);
}

static inline json_t *dpt_report_str_or_null(const char *s)
{
  return s ? json_string(s) : json_null();
}

/* A number that JSON can hold: NAN/inf become null. */
static inline json_t *dpt_report_num_or_null(double v)
{
  return isfinite(v) ? json_real(v) : json_null();
}

/* This rank's part of the document (a ranks[] entry): its steps' phase
 * statistics, binding, node, errors; a supervisor's part once
 * dpt_report_set_end was called.  NULL when out of memory. */
json_t *dpt_report_rank_part(struct dpt_report *r);

#endif
