/* dpt-report — read "dpt.report/1" job reports.
 *
 *   dpt-report [--baseline B.json] FILE.json      terminal summary
 *   dpt-report --compare A.json B.json ...        one row per report: speed-up and efficiency
 *                                                 against the first, wire, double buffering
 *   dpt-report --html OUT.html FILE.json ...      one self-contained page with inline SVG plots
 *   dpt-report --check FILE.json ...              validate only (prints "ok FILE")
 *   dpt-report --nccl-log LOG FILE.json           the rings NCCL printed (NCCL_DEBUG=INFO) against
 *                                                 the report's plan (runtime/dpt_ncclring.h)
 *
 * Exit: 0; 2 on bad usage or input (not JSON, wrong schema version, missing
 * field: the message names the file and the field); 1 when writing fails, or
 * with --nccl-log when a ring differs from the plan.
 *
 * This file is the command line; what it prints is dpt_report_view.h's
 * (dpt_report_view_text.c: summary, compare; dpt_report_view_html.c: --html). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_ncclring.h"
#include "dpt_report.h"
#include "dpt_report_view.h"

static void usage(FILE *f)
{
  fprintf(f, "usage: dpt-report [--baseline B.json] FILE.json\n"
             "       dpt-report --compare A.json B.json ...\n"
             "       dpt-report --html OUT.html FILE.json ...\n"
             "       dpt-report --check FILE.json ...\n"
             "       dpt-report --nccl-log LOG FILE.json\n"
             "\n"
             "Reads dpt.report/1 job reports (written by dpt-train, dpt-bench, dpt-topo plan;\n"
             "docs/schema-report.md).  Scaling efficiency e = t / (t0 * n / n0): t, t0 total\n"
             "images/s, n, n0 ranks of the report and of the baseline (ChainerMN's t / (t0 * n)\n"
             "for a 1-rank baseline).  --nccl-log: the rings NCCL printed at init in a job run with\n"
             "NCCL_DEBUG=INFO (its output, LOG) against the report's plan: each channel agrees or\n"
             "DIFFERS, with its inter-switch crossings; exit 1 when one differs.\n");
}

/* ---- the command line ------------------------------------------------------------ */

struct args {
  const char *mode;      /* "summary", "compare", "check", "html", "nccl" */
  const char *out;       /* --html OUT */
  const char *base_file; /* --baseline B */
  const char *nccl_log;  /* --nccl-log LOG */
  char **files;          /* [n] the reports */
  int n;
};

/* The options, then the reports.  0, -1 after --help, 2 on bad usage (said). */
static int parse_args(int argc, char **argv, struct args *a)
{
  int i;
  *a = (struct args){.mode = "summary"};
  for (i = 1; i < argc; i++) {
    const char *o = argv[i];
    if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
      usage(stdout);
      return -1;
    } else if (!strcmp(o, "--compare") || !strcmp(o, "--check")) {
      a->mode = o + 2;
    } else if (!strcmp(o, "--html") || !strcmp(o, "--baseline") || !strcmp(o, "--nccl-log")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "dpt-report: %s needs a file\n", o);
        return 2;
      }
      if (!strcmp(o, "--nccl-log")) {
        a->mode = "nccl";
        a->nccl_log = argv[++i];
      } else if (!strcmp(o, "--html")) {
        a->mode = "html";
        a->out = argv[++i];
      } else {
        a->base_file = argv[++i];
      }
    } else if (!strcmp(o, "--")) {
      i++;
      break;
    } else if (o[0] == '-' && o[1]) {
      fprintf(stderr, "dpt-report: unknown option %s (see dpt-report --help)\n", o);
      return 2;
    } else {
      break;
    }
  }
  a->files = argv + i;
  a->n = argc - i;
  return 0;
}

/* How many reports each mode takes, and --baseline only with a summary.  0 or 2 (said). */
static int check_args(const struct args *a)
{
  const char *why = NULL;
  char buf[128];
  if (a->n < 1)
    why = "no report given (see dpt-report --help)";
  else if (!strcmp(a->mode, "nccl") && a->n != 1)
    why = (snprintf(buf, sizeof buf, "--nccl-log LOG compares with one report's plan; %d given", a->n), buf);
  else if (!strcmp(a->mode, "summary") && a->n != 1)
    why = (snprintf(buf, sizeof buf, "%d reports given: summarise one, or use --compare / --html for several",
                    a->n), buf);
  else if (!strcmp(a->mode, "compare") && a->n < 2)
    why = "--compare needs at least two reports";
  else if (a->base_file && strcmp(a->mode, "summary"))
    why = "--baseline goes with the summary of one report (--compare uses the first)";
  if (!why)
    return 0;
  fprintf(stderr, "dpt-report: %s\n", why);
  return 2;
}

/* Loads every report into docs[] (NULL where one fails).  --check goes on past a
 * bad report and prints "ok FILE" for each good one; the others stop at the first.
 * The exit status: 0, or the last failure's. */
static int load_reports(const struct args *a, json_t **docs)
{
  struct dpt_err err;
  int status = 0, check = !strcmp(a->mode, "check");
  for (int k = 0; k < a->n; k++) {
    dpt_err_clear(&err);
    if (dpt_report_load(a->files[k], &docs[k], &err)) {
      fprintf(stderr, "dpt-report: %s\n", err.msg);
      status = dpt_err_exit_status(&err);
      if (!check)
        return status;
      continue;
    }
    if (check)
      printf("ok %s\n", a->files[k]);
  }
  return status;
}

/* --nccl-log: NCCL's printed rings against the report's plan.  0, 1 when a ring
 * differs, 2 when the log or the plan cannot be read (said). */
static int nccl_check(const struct args *a, const json_t *doc)
{
  struct dpt_err err;
  FILE *lf = fopen(a->nccl_log, "r");
  int k;
  dpt_err_clear(&err);
  if (!lf) {
    fprintf(stderr, "dpt-report: --nccl-log %s: cannot open: %s\n", a->nccl_log, strerror(errno));
    return 2;
  }
  k = dpt_ncclring_check(lf, a->nccl_log, json_object_get(doc, "plan"), stdout, &err);
  fclose(lf);
  if (k < 0) {
    fprintf(stderr, "dpt-report: --nccl-log: %s: %s\n", a->files[0], err.msg);
    return dpt_err_exit_status(&err);
  }
  return k;
}

/* The mode's output for the loaded reports (and --baseline's). */
static int render(const struct args *a, json_t **docs, const json_t *base)
{
  struct dpt_err err;
  dpt_err_clear(&err);
  if (!strcmp(a->mode, "nccl"))
    return nccl_check(a, docs[0]);
  if (!strcmp(a->mode, "summary")) {
    dpt_report_view_summary(stdout, a->files[0], docs[0], base, a->base_file);
  } else if (!strcmp(a->mode, "compare")) {
    dpt_report_view_compare(stdout, a->files, docs, a->n);
  } else if (dpt_report_view_html(a->out, a->files, docs, a->n, &err)) {
    fprintf(stderr, "dpt-report: --html %s: %s\n", a->out, err.msg);
    return dpt_err_exit_status(&err);
  }
  return 0;
}

int main(int argc, char **argv)
{
  struct dpt_err err;
  struct args a;
  json_t **docs = NULL, *base = NULL;
  int status;

  dpt_err_clear(&err);
  if ((status = parse_args(argc, argv, &a)))
    return status < 0 ? 0 : status;
  if (check_args(&a))
    return 2;
  if (!(docs = calloc((size_t)a.n, sizeof *docs))) {
    fprintf(stderr, "dpt-report: out of memory for %d reports\n", a.n);
    return 1;
  }
  status = load_reports(&a, docs);
  if (status || !strcmp(a.mode, "check"))
    goto out;
  if (a.base_file && dpt_report_load(a.base_file, &base, &err)) {
    fprintf(stderr, "dpt-report: --baseline: %s\n", err.msg);
    status = 2;
    goto out;
  }
  status = render(&a, docs, base);
  if (fflush(stdout)) {
    fprintf(stderr, "dpt-report: cannot write to stdout: %s\n", strerror(errno));
    if (!status)
      status = 1;
  }
out:
  for (int k = 0; k < a.n; k++)
    json_decref(docs[k]);
  free(docs);
  json_decref(base);
  return status;
}
