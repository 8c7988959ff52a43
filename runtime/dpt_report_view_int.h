/* dpt_report_view_int.h — private to dpt-report's renderers: the terminal views
 * (dpt_report_view_text.c) and the HTML page (dpt_report_view_html.c).  How they
 * read a loaded "dpt.report/1" document (by dotted path; a field that is absent
 * or of another type reads as NAN, the default or "-") and how they print times
 * and sizes.  Internal linkage, short names: not installed, not for other modules. */
#ifndef DPT_REPORT_VIEW_INT_H
#define DPT_REPORT_VIEW_INT_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "dpt_report.h"

/* The value at a dotted path ("throughput.images_per_s") or NULL. */
static inline const json_t *at(const json_t *j, const char *path)
{
  char key[128];
  while (j && *path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= sizeof key)
      return NULL;
    memcpy(key, path, n);
    key[n] = '\0';
    j = json_object_get(j, key);
    path += n + (dot ? 1 : 0);
  }
  return j;
}

static inline double num(const json_t *j, const char *path)
{
  const json_t *v = at(j, path);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static inline const char *str(const json_t *j, const char *path, const char *dflt)
{
  const char *s = json_string_value(at(j, path));
  return s ? s : dflt;
}

static inline long long integer(const json_t *j, const char *path, long long dflt)
{
  const json_t *v = at(j, path);
  return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* "on"/"off"/"-" for a config flag that may be a boolean or an integer. */
static inline const char *flag(const json_t *doc, const char *key)
{
  const json_t *v = json_object_get(json_object_get(doc, "config"), key);
  if (json_is_boolean(v))
    return json_is_true(v) ? "on" : "off";
  if (json_is_integer(v))
    return json_integer_value(v) ? "on" : "off";
  return "-";
}

/* The all-reduce's element type on the wire ("fp16", "fp32") or "-". */
static inline const char *wire(const json_t *doc)
{
  const char *w = str(doc, "software.wire", NULL);
  if (!w)
    w = str(doc, "allreduce.wire", NULL);
  return w ? w : "-";
}

static inline void fmt_time(double s, char *buf, size_t len)
{
  if (!isfinite(s))
    snprintf(buf, len, "-");
  else if (s >= 1)
    snprintf(buf, len, "%.2f s", s);
  else if (s >= 1e-3)
    snprintf(buf, len, "%.2f ms", s * 1e3);
  else
    snprintf(buf, len, "%.1f us", s * 1e6);
}

static inline void fmt_bytes(double b, char *buf, size_t len)
{
  if (!isfinite(b))
    snprintf(buf, len, "-");
  else if (b >= 1 << 20)
    snprintf(buf, len, "%.1f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    snprintf(buf, len, "%.1f KiB", b / (1 << 10));
  else
    snprintf(buf, len, "%.0f B", b);
}

static inline const char *basename_of(const char *p)
{
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Median over ranks of a phase statistic (NAN when no rank has it; the first
 * 4096 ranks that have it count). */
static inline double rank_median(const json_t *doc, const char *phase, const char *stat)
{
  double v[4096];
  size_t n = 0, i;
  const json_t *r;
  json_array_foreach(json_object_get(doc, "ranks"), i, r) {
    double x = num(json_object_get(json_object_get(r, "phases"), phase), stat);
    if (isfinite(x) && n < 4096)
      v[n++] = x;
  }
  if (!n)
    return NAN;
  for (size_t a = 1; a < n; a++)
    for (size_t b = a; b > 0 && v[b - 1] > v[b]; b--) {
      double t = v[b];
      v[b] = v[b - 1];
      v[b - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* e = t / (t0 * n / n0): the writer's formula (dpt_report.c). */
static inline double efficiency(double t, long long n, double t0, long long n0)
{
  return dpt_report_efficiency(t, n, t0, n0);
}

#endif
