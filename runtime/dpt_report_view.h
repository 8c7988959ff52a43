/* dpt_report_view.h — what dpt-report shows of "dpt.report/1" documents (as
 * dpt_report_load returns them): the terminal summary of one report, the
 * --compare table of several and the self-contained HTML page with inline SVG
 * plots.  dpt-report's renderers (dpt_report_view_text.c, dpt_report_view_html.c),
 * called by the tool (dpt_report_tool.c) and the fuzzer (tests/fuzz/fuzz_report.c).
 * A field that a renderer needs and the document lacks prints as "-" or is
 * left out (tests/fuzz/fuzz_report.c renders every document the loader accepts). */
#ifndef DPT_REPORT_VIEW_H
#define DPT_REPORT_VIEW_H

#include <stdio.h>

#include <jansson.h>

#include "dpt_err.h"

/* The terminal summary of doc (read from `file`): job, software, plan, speed,
 * all-reduce, scaling (against base when given, read from base_file, else the
 * report's own scaling), accuracy, per-rank table, bench, ends, errors. */
void dpt_report_view_summary(FILE *f, const char *file, const json_t *doc, const json_t *base,
                             const char *base_file);

/* One row per report (docs[0..n), read from files[]): speed-up and efficiency
 * against the first, comm, wire, double buffering, step and all-reduce times. */
void dpt_report_view_compare(FILE *f, char **files, json_t **docs, int n);

/* The HTML page of docs[0..n) written atomically to `out`: the compare table,
 * four plots (throughput vs ranks, per-rank phases, learning curve, all-reduce
 * predicted vs measured) and each report's summary.  0, or DPT_E_NOMEM /
 * the write's error in err (naming `out`). */
int dpt_report_view_html(const char *out, char **files, json_t **docs, int n, struct dpt_err *err);

#endif
