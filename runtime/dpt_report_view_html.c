/* dpt_report_view_html.c — dpt-report --html: one self-contained page for
 * several "dpt.report/1" documents (dpt_report_view.h), with the --compare
 * table, inline SVG plots (no script needed, none fetched) and each report's
 * summary.  The plots' axes and loops stay bounded whatever the numbers (the
 * fuzzer renders every document the loader accepts). */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_report.h"
#include "dpt_report_view.h"
#include "dpt_report_view_int.h"

/* ---- HTML ----------------------------------------------------------------------- */

static void esc(FILE *f, const char *s)
{
  for (; s && *s; s++)
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
}

static const char *const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

/* A "nice" axis maximum and tick step for data up to v: max >= v, finite, and
 * at most ~10 steps of `step` > 0.  Near DBL_MAX the rounded-up maximum
 * overflows to inf (a report with allreduce.measured_s = 1.6e305 made the
 * tick loops of --html run forever; tests/fuzz/regress/report): then the
 * axis ends at v itself. */
static void nice_axis(double v, double *max, double *step)
{
  if (!(v > 0) || !isfinite(v))
    v = 1;
  double e = pow(10, floor(log10(v))), m = v / e;
  double s = m <= 1 ? 0.2 : m <= 2 ? 0.5 : m <= 5 ? 1 : 2;
  *step = s * e;
  *max = ceil(v / *step - 1e-9) * *step;
  if (!isfinite(*max) || !(*step > 0) || !isfinite(*step) || !(*max >= v)) {
    *max = v;
    *step = v / 5;
  }
}

struct plot {
  FILE *f;
  double w, h, l, r, t, b;   /* size and margins */
  double xmin, xmax, ymax;
};

static double px(const struct plot *p, double x)
{
  return p->l + (x - p->xmin) / (p->xmax - p->xmin) * (p->w - p->l - p->r);
}
static double py(const struct plot *p, double y)
{
  return p->h - p->b - y / p->ymax * (p->h - p->t - p->b);
}

static void plot_open(struct plot *p, const char *id, const char *title, const char *xl, const char *yl,
                      double xmin, double xmax, double xstep, double ymax_data, int xcat)
{
  FILE *f = p->f;
  double ystep;
  nice_axis(ymax_data, &p->ymax, &ystep);
  p->xmin = xmin;
  p->xmax = xmax > xmin ? xmax : xmin + 1;
  fprintf(f, "<figure><svg id=\"%s\" class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
             "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" aria-label=\"",
          id, p->w, p->h, p->w, p->h);
  esc(f, title);
  fprintf(f, "\">\n<title>");
  esc(f, title);
  fprintf(f, "</title>\n<text x=\"%.0f\" y=\"16\" class=\"t\">", p->w / 2);
  esc(f, title);
  fprintf(f, "</text>\n");
  /* ticks: bounded loops whatever the numbers (huge or tiny values do not advance y, x) */
  int ticks = 0;
  for (double y = 0; y <= p->ymax + ystep * 1e-6 && ticks++ < 50; y += ystep) {
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"g\"/>", p->l, p->w - p->r, py(p, y),
            py(p, y));
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"yl\">%g</text>\n", p->l - 4, py(p, y) + 4, y);
  }
  if (!xcat)
    for (double x = xmin, nx = 0; x <= p->xmax + xstep * 1e-6 && nx++ < 50; x += xstep)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">%g</text>\n", px(p, x), p->h - p->b + 16, x);
  fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"ax\"/>", p->l, p->w - p->r,
          py(p, 0), py(p, 0));
  fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"ax\"/>\n", p->l, p->l, p->t,
          p->h - p->b);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"al\">", (p->l + p->w - p->r) / 2, p->h - 6);
  esc(f, xl);
  fprintf(f, "</text><text transform=\"translate(14 %.1f) rotate(-90)\" class=\"al\">", (p->t + p->h - p->b) / 2);
  esc(f, yl);
  fprintf(f, "</text>\n");
}

static void plot_note(struct plot *p, const char *msg)
{
  fprintf(p->f, "<text x=\"%.1f\" y=\"%.1f\" class=\"note\">", (p->l + p->w - p->r) / 2, (p->t + p->h - p->b) / 2);
  esc(p->f, msg);
  fprintf(p->f, "</text>\n");
}

static void legend(struct plot *p, int i, const char *color, const char *label, int dashed)
{
  double x = p->w - p->r - 190, y = p->t + 4 + 16 * i;
  fprintf(p->f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"%s/>"
                "<text x=\"%.0f\" y=\"%.0f\" class=\"lg\">",
          x, x + 18, y, y, color, dashed ? " stroke-dasharray=\"4 3\"" : "", x + 24, y + 4);
  esc(p->f, label);
  fprintf(p->f, "</text>\n");
}

/* Entry i of a bar chart's legend, right of the plot: a colour box and its label. */
static void bar_legend(struct plot *p, int i, const char *color, const char *label)
{
  double x = p->w - p->r + 16, y = p->t + 10 + 18 * i;
  fprintf(p->f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%.0f\" class=\"lg\">%s</text>\n",
          x, y - 10, color, x + 18, y, label);
}

static void plot_close(struct plot *p, const char *caption)
{
  fprintf(p->f, "</svg><figcaption>");
  esc(p->f, caption);
  fprintf(p->f, "</figcaption></figure>\n");
}

static void learning_curve_plot(FILE *f, char **files, json_t **docs, int n)
{
  struct plot p = {f, 640, 320, 56, 16, 28, 40, 0, 1, 1};
  double emax = 0;
  size_t i;
  const json_t *e;
  int points = 0;
  for (int d = 0; d < n; d++)
    json_array_foreach(json_object_get(docs[d], "learning_curve"), i, e) {
      points++;
      if (num(e, "epoch") > emax) emax = num(e, "epoch");
    }
  double xmax, xstep;
  nice_axis(emax, &xmax, &xstep);
  plot_open(&p, "plot-learning-curve", "Learning curve: top-1 accuracy per epoch", "epoch", "top-1 (%)", 0, xmax,
            xstep, 100, 0);
  if (!points)
    plot_note(&p, "no learning curve in these reports (not training runs)");
  int li = 0;
  for (int d = 0; d < n; d++) {
    const json_t *c = json_object_get(docs[d], "learning_curve");
    const char *keys[] = {"val_top1", "train_top1"};
    for (int k = 0; k < 2; k++) {
      int have = 0;
      json_array_foreach(c, i, e) have |= isfinite(num(e, keys[k]));
      if (!have)
        continue;
      fprintf(f, "<polyline class=\"curve\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
              palette[d % 10], k ? " stroke-dasharray=\"4 3\"" : "");
      json_array_foreach(c, i, e) if (isfinite(num(e, keys[k])))
          fprintf(f, "%.1f,%.1f ", px(&p, num(e, "epoch")), py(&p, 100 * num(e, keys[k])));
      fprintf(f, "\"/>\n");
      json_array_foreach(c, i, e) if (isfinite(num(e, keys[k])))
          fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\">"
                     "<title>epoch %g: %s %.2f%%</title></circle>\n",
                  px(&p, num(e, "epoch")), py(&p, 100 * num(e, keys[k])), palette[d % 10], num(e, "epoch"),
                  keys[k], 100 * num(e, keys[k]));
      char lab[160];
      snprintf(lab, sizeof lab, "%s %s", basename_of(files[d]), k ? "train" : "val");
      legend(&p, li++, palette[d % 10], lab, k);
    }
  }
  plot_close(&p, "Top-1 accuracy (validation solid, training dashed) at the end of each epoch.");
}

static void phase_plot(FILE *f, char **files, json_t **docs, int n)
{
  const char *ph[] = {"data_wait", "forward", "backward", "allreduce_exposed", "update"};
  const char *lab[] = {"data wait", "forward", "backward", "all-reduce (exposed)", "update"};
  const char *col[] = {"#bab0ac", "#4e79a7", "#59a14f", "#e15759", "#edc948"};
  int bars = 0;
  double ymax = 0;
  size_t i;
  const json_t *r;
  for (int d = 0; d < n; d++)
    json_array_foreach(json_object_get(docs[d], "ranks"), i, r) {
      double s = 0;
      for (int k = 0; k < 5; k++) {
        double v = num(json_object_get(json_object_get(r, "phases"), ph[k]), "mean_s");
        if (isfinite(v))
          s += v;
      }
      bars++;
      if (s * 1e3 > ymax) ymax = s * 1e3;
    }
  struct plot p = {f, 640, 340, 56, 200, 28, 64, 0, 1, 1};
  if (bars > 24)
    p.w = 440 + 18.0 * bars;
  plot_open(&p, "plot-phases", "Per-rank phase breakdown (mean per step)", "report / rank", "ms per step", 0,
            bars ? bars : 1, 1, ymax, 1);
  if (!ymax)
    plot_note(&p, "no step timings in these reports");
  double slot = (p.w - p.l - p.r) / (bars ? bars : 1), bw = slot * 0.7;
  int b = 0;
  for (int d = 0; d < n; d++) {
    int first = b;
    json_array_foreach(json_object_get(docs[d], "ranks"), i, r) {
      double x = p.l + slot * b + (slot - bw) / 2, acc = 0;
      for (int k = 0; k < 5; k++) {
        double v = 1e3 * num(json_object_get(json_object_get(r, "phases"), ph[k]), "mean_s");
        if (!isfinite(v) || v <= 0)
          continue;
        fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                   "<title>rank %lld %s: %.3f ms</title></rect>\n",
                x, py(&p, acc + v), bw, py(&p, acc) - py(&p, acc + v), col[k], integer(r, "rank", -1), lab[k], v);
        acc += v;
      }
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">%lld</text>\n", x + bw / 2, p.h - p.b + 14,
              integer(r, "rank", -1));
      b++;
    }
    if (b > first) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">", p.l + slot * (first + b) / 2.0, p.h - p.b + 30);
      esc(f, basename_of(files[d]));
      fprintf(f, "</text>\n");
    }
  }
  for (int k = 0; k < 5; k++)
    bar_legend(&p, k, col[k], lab[k]);
  plot_close(&p, "Each bar is one rank: a straggler or a slow link shows up as a taller bar or a larger red part.");
}

static void speed_plot(FILE *f, char **files, json_t **docs, int n)
{
  double rmax = 0, ymax = 0, t0 = 0;
  long long n0 = 0;
  for (int d = 0; d < n; d++) {
    long long rk = integer(docs[d], "job.ranks", 0);
    double t = num(docs[d], "throughput.images_per_s");
    if (rk > rmax) rmax = (double)rk;
    if (t > ymax) ymax = t;
    if (t > 0 && (n0 == 0 || rk < n0)) n0 = rk, t0 = t;
  }
  double xmax, xstep;
  nice_axis(rmax * 1.2, &xmax, &xstep); /* room right of the largest run */
  if (xstep < 1) xstep = 1, xmax = ceil(xmax);
  if (n0 && t0 * xmax / n0 > ymax) ymax = t0 * xmax / n0;
  struct plot p = {f, 640, 320, 64, 16, 28, 40, 0, 1, 1};
  plot_open(&p, "plot-speed", "Throughput vs ranks", "ranks", "images/s", 0, xmax, xstep, ymax, 0);
  if (!n0) {
    plot_note(&p, "no images/s in these reports (not training runs)");
  } else {
    fprintf(f, "<line class=\"ideal\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
               "stroke-dasharray=\"6 4\" stroke-width=\"2\"/>\n",
            px(&p, 0), py(&p, 0), px(&p, xmax), py(&p, t0 * xmax / n0));
    legend(&p, 0, "#888", "ideal (linear from the smallest run)", 1);
    for (int d = 0; d < n; d++) {
      long long rk = integer(docs[d], "job.ranks", 0);
      double t = num(docs[d], "throughput.images_per_s");
      if (!(t > 0))
        continue;
      fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"><title>%s: %lld ranks, %.1f "
                 "images/s, efficiency %.1f%%</title></circle>\n",
              px(&p, (double)rk), py(&p, t), palette[d % 10], basename_of(files[d]), rk, t,
              100 * efficiency(t, rk, t0, n0));
    }
  }
  plot_close(&p, "Total images/s per report against its number of ranks; the dashed line is perfect scaling "
                 "(efficiency e = t / (t0 * n / n0) = 100%).");
}

static void allreduce_plot(FILE *f, char **files, json_t **docs, int n)
{
  double ymax = 0;
  int any = 0;
  for (int d = 0; d < n; d++) {
    double m = num(docs[d], "allreduce.measured_s"), pr = num(docs[d], "allreduce.predicted_s");
    if (isfinite(m) && m * 1e3 > ymax) ymax = m * 1e3;
    if (isfinite(pr) && pr * 1e3 > ymax) ymax = pr * 1e3;
    any |= isfinite(m) || isfinite(pr);
  }
  struct plot p = {f, 640, 320, 64, 200, 28, 48, 0, 1, 1};
  plot_open(&p, "plot-allreduce", "All-reduce time: predicted by the plan vs measured", "report", "ms", 0, n, 1,
            ymax, 1);
  if (!any)
    plot_note(&p, "no all-reduce times in these reports");
  double slot = (p.w - p.l - p.r) / n, bw = slot * 0.35;
  for (int d = 0; d < n; d++) {
    double v[2] = {num(docs[d], "allreduce.predicted_s"), num(docs[d], "allreduce.measured_s")};
    const char *c[2] = {"#76b7b2", "#e15759"}, *l[2] = {"predicted", "measured"};
    for (int k = 0; k < 2; k++) {
      double x = p.l + slot * d + slot * 0.15 + bw * k;
      if (!isfinite(v[k])) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">n/a</text>\n", x + bw / 2, py(&p, 0) - 4);
        continue;
      }
      fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s "
                 "%s: %.3f ms</title></rect>\n",
              x, py(&p, v[k] * 1e3), bw, py(&p, 0) - py(&p, v[k] * 1e3), c[k], basename_of(files[d]), l[k],
              v[k] * 1e3);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">", p.l + slot * (d + 0.5), p.h - p.b + 16);
    esc(f, basename_of(files[d]));
    fprintf(f, "</text>\n");
  }
  bar_legend(&p, 0, "#76b7b2", "predicted (plan)");
  bar_legend(&p, 1, "#e15759", "measured");
  plot_close(&p, "Predicted: the plan's cost model for the all-reduced message; measured: the all-reduce itself "
                 "(dpt-bench) or the slowest rank's median all-reduce phase (training).");
}

static const char page_style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}\n"
    "h1{font-size:20px} h2{font-size:16px;margin-top:28px}\n"
    "pre{background:#f6f6f6;padding:10px;font-size:12px;overflow-x:auto}\n"
    "figure{margin:12px 0} figcaption{font-size:12px;color:#555;max-width:640px}\n"
    "svg.plot{background:#fff;border:1px solid #ddd}\n"
    "svg text{font-size:11px;font-family:sans-serif;fill:#333}\n"
    "svg .t{text-anchor:middle;font-size:13px;font-weight:bold}\n"
    "svg .yl{text-anchor:end} svg .xl{text-anchor:middle} svg .al{text-anchor:middle;font-size:12px}\n"
    "svg .note{text-anchor:middle;fill:#999;font-size:13px}\n"
    "svg .g{stroke:#eee} svg .ax{stroke:#444}\n"
    "table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
    "th{background:#f0f0f0} td.l{text-align:left}\n";

/* A terminal view (the compare table, a summary) on the page: printed into memory
 * by the caller between view_open and view_put, then escaped into <pre ...>.
 * -1 when memory ran out (the page would lack it).  open_memstream sets *text
 * at the close, so view_put reads it through the pointer. */
static FILE *view_open(char **text, size_t *len)
{
  *text = NULL;
  *len = 0;
  return open_memstream(text, len);
}

static int view_put(FILE *f, FILE *m, char **text, const char *pre)
{
  int rc = fclose(m) ? -1 : 0;
  if (!rc) {
    fprintf(f, "%s", pre);
    esc(f, *text);
    fprintf(f, "</pre>\n");
  }
  free(*text);
  *text = NULL;
  return rc;
}

int dpt_report_view_html(const char *out, char **files, json_t **docs, int n, struct dpt_err *err)
{
  char *text = NULL, *view;
  size_t len = 0, view_len;
  FILE *f = open_memstream(&text, &len), *m;
  int rc = DPT_E_NOMEM;

  if (!f)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory rendering %s", out);
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>dpt report: ");
  for (int i = 0; i < n; i++) {
    esc(f, basename_of(files[i]));
    fputs(i + 1 < n ? ", " : "", f);
  }
  fprintf(f, "</title>\n<style>\n%s</style></head>\n<body>\n<h1>dpt job report</h1>\n", page_style);
  if (!(m = view_open(&view, &view_len)))
    goto fail;
  dpt_report_view_compare(m, files, docs, n);
  if (view_put(f, m, &view, "<h2>Runs</h2>\n<pre id=\"compare\">"))
    goto fail;
  fprintf(f, "<h2>Plots</h2>\n");
  speed_plot(f, files, docs, n);
  phase_plot(f, files, docs, n);
  learning_curve_plot(f, files, docs, n);
  allreduce_plot(f, files, docs, n);
  fprintf(f, "<h2>Summaries</h2>\n");
  for (int i = 0; i < n; i++) {
    if (!(m = view_open(&view, &view_len)))
      goto fail;
    dpt_report_view_summary(m, files[i], docs[i], NULL, NULL);
    if (view_put(f, m, &view, "<pre class=\"summary\">"))
      goto fail;
  }
  /* The page needs no script; this one only marks that it rendered (checked by the tests). */
  fprintf(f, "<script>\ndocument.body.setAttribute('data-plots', "
             "String(document.querySelectorAll('svg.plot').length));\n</script>\n</body></html>\n");
  rc = 0;
fail:
  if (fclose(f) && !rc)
    rc = DPT_E_NOMEM;
  if (rc)
    rc = dpt_err_set(err, DPT_E_NOMEM, "out of memory rendering %s", out);
  else
    rc = dpt_report_write_atomic(out, text, len, err);
  free(text);
  return rc;
}
