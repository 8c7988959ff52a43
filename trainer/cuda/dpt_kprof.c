/* dpt_kprof.c — the per-step kernel breakdown (see dpt_kprof.h). */
#include "dpt_kprof.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_kernel_classes_tsv.h" /* generated: dpt_kernel_classes_tsv[], bench/gpu/kernel-classes.tsv */

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

void dpt_kclasses_free(struct dpt_kclasses *k)
{
  if (!k) return;
  free(k->rule);
  memset(k, 0, sizeof *k);
}

int dpt_kclasses_parse(struct dpt_kclasses *k, const char *text, size_t len, const char *what, struct dpt_err *err)
{
  int rc = 0, cap = 0, line = 0;
  memset(k, 0, sizeof *k);
  for (size_t at = 0; at < len;) {
    const char *s = text + at;
    const char *nl = memchr(s, '\n', len - at);
    size_t ll = nl ? (size_t)(nl - s) : len - at;
    at += ll + (nl != NULL);
    line++;
    if (ll && s[ll - 1] == '\r') ll--;
    if (!ll || s[0] == '#') continue;
    const char *tab = memchr(s, '\t', ll);
    size_t cl = tab ? (size_t)(tab - s) : 0, pl = tab ? ll - cl - 1 : 0;
    if (!tab || !cl || !pl || cl >= DPT_KCLASS_NAME || pl >= sizeof k->rule[0].pat || memchr(tab + 1, '\t', pl)) {
      rc = dpt_err_set(err, DPT_E_INPUT, "kernel classes %s:%d: not 'CLASS<TAB>PATTERN' (one tab, class < %d and "
                       "pattern < %zu characters)", what, line, DPT_KCLASS_NAME, sizeof k->rule[0].pat);
      goto fail;
    }
    if (k->n_rules == cap) {
      cap = cap ? 2 * cap : 64;
      struct dpt_kclass_rule *r = realloc(k->rule, (size_t)cap * sizeof *r);
      if (!r) {
        rc = dpt_err_set(err, DPT_E_NOMEM, "kernel classes %s: out of memory", what);
        goto fail;
      }
      k->rule = r;
    }
    struct dpt_kclass_rule *r = &k->rule[k->n_rules];
    memcpy(r->cls, s, cl);
    r->cls[cl] = '\0';
    for (size_t i = 0; i < pl; i++) r->pat[i] = lower(tab[1 + i]);
    r->pat[pl] = '\0';
    if (!strcmp(r->cls, "other")) {
      rc = dpt_err_set(err, DPT_E_INPUT, "kernel classes %s:%d: 'other' is the class of kernels no rule matches, "
                       "not a rule's", what, line);
      goto fail;
    }
    r->index = -1;
    for (int c = 0; c < k->n_classes; c++)
      if (!strcmp(k->name[c], r->cls)) r->index = c;
    if (r->index < 0) {
      if (k->n_classes >= DPT_KCLASS_MAX - 1) {
        rc = dpt_err_set(err, DPT_E_INPUT, "kernel classes %s:%d: more than %d classes", what, line, DPT_KCLASS_MAX - 1);
        goto fail;
      }
      r->index = k->n_classes;
      snprintf(k->name[k->n_classes++], DPT_KCLASS_NAME, "%s", r->cls);
    }
    k->n_rules++;
  }
  snprintf(k->name[k->n_classes++], DPT_KCLASS_NAME, "other");
  return 0;
fail:
  dpt_kclasses_free(k);
  return rc;
}

int dpt_kclasses_builtin(struct dpt_kclasses *k, struct dpt_err *err)
{
  return dpt_kclasses_parse(k, dpt_kernel_classes_tsv, sizeof dpt_kernel_classes_tsv - 1,
                            "bench/gpu/kernel-classes.tsv (compiled in)", err);
}

static int contains_ci(const char *hay, const char *pat)
{
  size_t pl = strlen(pat);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < pl && hay[i] && lower(hay[i]) == pat[i]) i++;
    if (i == pl) return 1;
  }
  return pl == 0;
}

int dpt_kclass_of(const struct dpt_kclasses *k, const char *name)
{
  for (int i = 0; name && i < k->n_rules; i++)
    if (contains_ci(name, k->rule[i].pat)) return k->rule[i].index;
  return k->n_classes - 1;
}

/* ---- the breakdown ------------------------------------------------------------- */

struct iv {
  unsigned long long a, b;
};

static int by_start(const void *x, const void *y)
{
  const struct iv *p = x, *q = y;
  return p->a < q->a ? -1 : p->a > q->a ? 1 : (p->b < q->b ? -1 : p->b > q->b);
}

static int by_int(const void *x, const void *y)
{
  int a = *(const int *)x, b = *(const int *)y;
  return a < b ? -1 : a > b;
}

static int by_double(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* Length of the union of iv[0, n) clipped to [lo, hi]; sorts iv. */
static double union_len(struct iv *iv, size_t n, unsigned long long lo, unsigned long long hi)
{
  double tot = 0;
  qsort(iv, n, sizeof *iv, by_start);
  unsigned long long ca = 0, cb = 0;
  int open = 0;
  for (size_t i = 0; i <= n; i++) {
    unsigned long long a = 0, b = 0;
    if (i < n) {
      a = iv[i].a < lo ? lo : iv[i].a;
      b = iv[i].b > hi ? hi : iv[i].b;
      if (b <= a) continue;
    }
    if (i < n && open && a <= cb) {
      if (b > cb) cb = b;
      continue;
    }
    if (open) tot += (double)(cb - ca);
    if (i < n) ca = a, cb = b, open = 1;
  }
  return tot;
}

void dpt_kprof_free(struct dpt_kbreakdown *b)
{
  if (!b) return;
  free(b->step);
  memset(b, 0, sizeof *b);
}

static double median_of(double *v, int n)
{
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, by_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

int dpt_kprof_breakdown(const struct dpt_kclasses *k, const struct dpt_krec *r, size_t n, struct dpt_kbreakdown *b,
                        struct dpt_err *err)
{
  int rc = 0;
  int *steps = NULL;
  struct iv *iv = NULL;
  double *col = NULL;
  memset(b, 0, sizeof *b);
  b->n_classes = k->n_classes;
  memcpy(b->name, k->name, sizeof b->name);
  b->median.step = -1;
  for (size_t i = 0; i < n; i++)
    if (!r[i].name || r[i].end < r[i].start || r[i].kind < DPT_KREC_KERNEL || r[i].kind > DPT_KREC_MEMSET)
      return dpt_err_set(err, DPT_E_INPUT, "kernel breakdown: record %zu ('%s') %s", i, r[i].name ? r[i].name : "(null)",
                         !r[i].name ? "has no name" : r[i].end < r[i].start ? "ends before it starts" : "has no kind");
  steps = malloc((n ? n : 1) * sizeof *steps);
  iv = malloc((n ? n : 1) * sizeof *iv);
  if (!steps || !iv) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "kernel breakdown: out of memory for %zu records", n);
    goto done;
  }
  int ns = 0;
  for (size_t i = 0; i < n; i++)
    if (r[i].step >= 0) steps[ns++] = r[i].step;
  qsort(steps, (size_t)ns, sizeof *steps, by_int);
  int u = 0;
  for (int i = 0; i < ns; i++)
    if (!u || steps[u - 1] != steps[i]) steps[u++] = steps[i];
  b->n_steps = u;
  b->step = calloc(u ? (size_t)u : 1, sizeof *b->step);
  col = malloc((u ? (size_t)u : 1) * sizeof *col);
  if (!b->step || !col) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "kernel breakdown: out of memory for %d steps", u);
    goto done;
  }
  unsigned long long *first = calloc(u ? (size_t)u : 1, sizeof *first), *last = calloc(u ? (size_t)u : 1, sizeof *last);
  if (!first || !last) {
    free(first), free(last);
    rc = dpt_err_set(err, DPT_E_NOMEM, "kernel breakdown: out of memory");
    goto done;
  }
  for (int s = 0; s < u; s++) first[s] = ~0ULL, b->step[s].step = steps[s];
  for (size_t i = 0; i < n; i++) {
    if (r[i].step < 0) continue;
    int s = (int)((const int *)bsearch(&r[i].step, steps, (size_t)u, sizeof *steps, by_int) - steps);
    struct dpt_kstep *st = &b->step[s];
    if (r[i].start < first[s]) first[s] = r[i].start;
    if (r[i].end > last[s]) last[s] = r[i].end;
    double d = (double)(r[i].end - r[i].start);
    if (r[i].kind == DPT_KREC_KERNEL) {
      int c = dpt_kclass_of(k, r[i].name);
      st->kernels++;
      st->class_ns[c] += d;
      st->class_n[c] += 1;
    } else {
      st->copies++;
      st->copy_ns += d;
    }
  }
  for (int s = 0; s < u; s++) {
    unsigned long long lo = first[s], hi = last[s];
    if (s + 1 < u && first[s + 1] > hi) hi = first[s + 1];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (r[i].step == steps[s] && r[i].kind == DPT_KREC_KERNEL) iv[m++] = (struct iv){r[i].start, r[i].end};
    struct dpt_kstep *st = &b->step[s];
    st->span_ns = (double)(hi - lo);
    st->busy_ns = union_len(iv, m, lo, hi);
    st->idle_ns = st->span_ns - st->busy_ns;
    st->gap_ns = (double)(hi - last[s]); /* hi >= last[s]: 0 unless the next step starts later */
  }
  free(first);
  free(last);
  /* medians, field by field */
#define MED(field)                                                                                \
  do {                                                                                            \
    for (int s = 0; s < u; s++) col[s] = (double)b->step[s].field;                                \
    b->median.field = median_of(col, u);                                                          \
  } while (0)
  MED(kernels);
  MED(copies);
  MED(span_ns);
  MED(busy_ns);
  MED(idle_ns);
  MED(gap_ns);
  MED(copy_ns);
  for (int c = 0; c < k->n_classes; c++) {
    MED(class_ns[c]);
    MED(class_n[c]);
  }
#undef MED
done:
  free(steps);
  free(iv);
  free(col);
  if (rc) dpt_kprof_free(b);
  return rc;
}

/* ---- output ---------------------------------------------------------------------- */

static json_t *step_json(const struct dpt_kbreakdown *b, const struct dpt_kstep *s, int with_step)
{
  json_t *o = json_object(), *ms = json_object(), *cnt = json_object();
  if (!o || !ms || !cnt) {
    json_decref(o), json_decref(ms), json_decref(cnt);
    return NULL;
  }
  if (with_step) json_object_set_new(o, "step", json_integer(s->step));
  json_object_set_new(o, "kernels", json_real(s->kernels));
  json_object_set_new(o, "copies", json_real(s->copies));
  json_object_set_new(o, "span_ms", json_real(s->span_ns / 1e6));
  json_object_set_new(o, "busy_ms", json_real(s->busy_ns / 1e6));
  json_object_set_new(o, "idle_ms", json_real(s->idle_ns / 1e6));
  json_object_set_new(o, "idle_pct", json_real(s->span_ns > 0 ? 100.0 * s->idle_ns / s->span_ns : 0.0));
  json_object_set_new(o, "gap_ms", json_real(s->gap_ns / 1e6));
  json_object_set_new(o, "gap_pct", json_real(s->span_ns > 0 ? 100.0 * s->gap_ns / s->span_ns : 0.0));
  json_object_set_new(o, "copy_ms", json_real(s->copy_ns / 1e6));
  for (int c = 0; c < b->n_classes; c++) {
    json_object_set_new(ms, b->name[c], json_real(s->class_ns[c] / 1e6));
    json_object_set_new(cnt, b->name[c], json_real(s->class_n[c]));
  }
  json_object_set_new(o, "class_ms", ms);
  json_object_set_new(o, "class_kernels", cnt);
  return o;
}

int dpt_kprof_write_json(const struct dpt_kbreakdown *b, const char *label, FILE *f, struct dpt_err *err)
{
  json_t *root = json_object(), *classes = json_array(), *steps = json_array();
  int rc = 0;
  if (!root || !classes || !steps) {
    json_decref(root), json_decref(classes), json_decref(steps);
    return dpt_err_set(err, DPT_E_NOMEM, "kernel breakdown: out of memory");
  }
  for (int c = 0; c < b->n_classes; c++) json_array_append_new(classes, json_string(b->name[c]));
  for (int s = 0; s < b->n_steps; s++)
    json_array_append_new(steps, step_json(b, &b->step[s], 1));
  json_object_set_new(root, "format", json_string("dpt.kernel-breakdown/1"));
  json_object_set_new(root, "label", json_string(label ? label : ""));
  json_object_set_new(root, "classes", classes);
  json_object_set_new(root, "steps", steps);
  json_object_set_new(root, "median", step_json(b, &b->median, 0));
  if (json_dumpf(root, f, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12)) || fputc('\n', f) == EOF)
    rc = dpt_err_set(err, DPT_E_RUNTIME, "kernel breakdown: writing the JSON failed");
  json_decref(root);
  return rc;
}

int dpt_kprof_write_records(const struct dpt_krec *r, size_t n, FILE *f)
{
  static const char *kinds[] = {"kernel", "memcpy", "memset"};
  for (size_t i = 0; i < n; i++) {
    if (fprintf(f, "%d\t%s\t%u\t%llu\t%llu\t", r[i].step, kinds[r[i].kind >= 0 && r[i].kind <= 2 ? r[i].kind : 0],
                r[i].stream, r[i].start, r[i].end) < 0)
      return -1;
    for (const char *p = r[i].name ? r[i].name : ""; *p; p++)
      if (fputc(*p == '\t' || *p == '\n' || *p == '\r' ? ' ' : *p, f) == EOF) return -1;
    if (fputc('\n', f) == EOF) return -1;
  }
  return 0;
}
