/* dpt_spank_report.c — see dpt_spank_report.h */
#define _GNU_SOURCE
#include "dpt_spank_report.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dpt_report_end.h"

/* pattern with %j %s %p %% expanded (job, step, srun's pid); DPT_E_INPUT on another %. */
static int expand(const char *pat, uint32_t job, uint32_t step, char *out, size_t cap, struct dpt_err *err)
{
  size_t at = 0;
  for (const char *c = pat; *c; c++) {
    char one[32] = {*c, 0};
    if (*c == '%') {
      c++;
      if (*c == 'j')
        snprintf(one, sizeof one, "%u", job);
      else if (*c == 's')
        snprintf(one, sizeof one, "%u", step);
      else if (*c == 'p')
        snprintf(one, sizeof one, "%ld", (long)getpid());
      else if (*c == '%')
        snprintf(one, sizeof one, "%%");
      else
        return dpt_err_set(err, DPT_E_INPUT, "report=%s: unknown %%%c (use %%j job, %%s step, %%p pid, %%%%)",
                           pat, *c ? *c : ' ');
    }
    if (at + strlen(one) >= cap)
      return dpt_err_set(err, DPT_E_INPUT, "report=%s: path too long", pat);
    memcpy(out + at, one, strlen(one) + 1);
    at += strlen(one);
  }
  return 0;
}

int dpt_spank_report_setup(spank_t sp, const struct dpt_spank_opts *opts, char *base, size_t cap,
                           struct dpt_err *err)
{
  uint32_t job = 0, step = 0;
  char rel[PATH_MAX], cwd[PATH_MAX], ann[PATH_MAX + 16];
  int rc;

  base[0] = '\0';
  if (!strcmp(opts->report, "none")) { /* not an enclosing step's, either (srun inside a task) */
    unsetenv("DPT_LAUNCH_PARTS");
    unsetenv("DPT_REPORT_ANNOUNCE");
    return 0;
  }
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS)
    return dpt_err_set(err, DPT_E_RUNTIME, "srun did not say the job and step id");
  if (opts->report[0])
    rc = expand(opts->report, job, step, rel, sizeof rel, err);
  else
    rc = snprintf(rel, sizeof rel, "dpt-report-%u.%u.json", job, step) < 0;
  if (rc)
    return rc < 0 ? rc : dpt_err_set(err, DPT_E_INPUT, "report path");
  if (rel[0] != '/' && getcwd(cwd, sizeof cwd)) {
    if ((size_t)snprintf(base, cap, "%s/%s", cwd, rel) >= cap)
      return dpt_err_set(err, DPT_E_INPUT, "report path %s/%s too long", cwd, rel);
  } else {
    snprintf(base, cap, "%s", rel);
  }
  snprintf(ann, sizeof ann, "%s.announce", base);
  unlink(ann); /* a previous step's (the same report=PATH) */
  if (setenv("DPT_LAUNCH_PARTS", base, 1) != 0 || setenv("DPT_REPORT_ANNOUNCE", ann, 1) != 0)
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot set DPT_LAUNCH_PARTS in srun's environment");
  return 0;
}

void dpt_spank_report_finish(spank_t sp, const struct dpt_plan *plan, const char *base, double start_unix)
{
  struct dpt_report_end_job j;
  struct dpt_err err;
  char parts[PATH_MAX + 16], ann[PATH_MAX + 16], path[4096], idb[32], esc[2 * PATH_MAX];
  char **argv = NULL;
  int argc = 0, k;
  size_t at = 0;
  uint32_t job = 0, step = 0;

  if (!plan || !base || !base[0])
    return;
  dpt_err_clear(&err);
  snprintf(parts, sizeof parts, "%s.rank", base);
  for (const char *c = base; *c && at + 3 < sizeof esc; c++) { /* dpt_report_path expands '%' again */
    if (*c == '%')
      esc[at++] = '%';
    esc[at++] = *c;
  }
  esc[at] = '\0';
  snprintf(ann, sizeof ann, "%s.announce", base);
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
    argc = 0;
  /* the report's job.slurm_job_id/step_id and job.launcher: srun's own environment
   * has neither id outside an allocation; srun ends after this */
  if (spank_get_item(sp, S_JOB_ID, &job) == ESPANK_SUCCESS) {
    snprintf(idb, sizeof idb, "%u", job);
    setenv("SLURM_JOB_ID", idb, 1);
  }
  if (spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS) {
    snprintf(idb, sizeof idb, "%u", step);
    setenv("SLURM_STEP_ID", idb, 1);
  }
  setenv("DPT_LAUNCHER", "spank", 1);
  memset(&j, 0, sizeof j);
  j.plan = plan;
  j.argc = argc;
  j.argv = argv;
  j.parts_prefix = parts;
  j.parts_suffix = ".end";
  j.announce = ann;
  j.path = esc;
  j.missing_hint = "the report's directory is not shared with that node, or the node failed";
  j.start_unix = start_unix;
  j.exit_status = -1; /* the rank that failed first */
  k = dpt_report_end_finish(&j, path, sizeof path, &err);
  if (k < 0)
    fprintf(stderr, "dpt: no job report: %s\n", err.msg);
  else if (path[0])
    fprintf(stderr, "dpt: report %s%s\n", path, k == 1 ? " (the program's, with how each rank ended)" : "");
}
