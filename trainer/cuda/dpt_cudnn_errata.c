/* dpt_cudnn_errata.c — known-bad cuDNN engine configs (see dpt_cudnn_errata.h). */
#include "dpt_cudnn_errata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "dpt_file.h"

void dpt_cudnn_errata_free(struct dpt_cudnn_errata *e)
{
  if (!e) return;
  free(e->rule);
  memset(e, 0, sizeof *e);
}

static int bad(struct dpt_err *err, const char *what, size_t i, const char *id, const char *why)
{
  return dpt_err_set(err, DPT_E_INPUT,
                     "cuDNN errata %s: rule %zu ('%s'): %s (cudnn-frontend's errata format: rules of operation, "
                     "engine, optional knob, cudnn_version_start/end, shape_format + input_shape, filter_shape)",
                     what, i, id, why);
}

static int shape4(json_t *a, long long *out)
{
  if (!json_is_array(a) || json_array_size(a) != 4) return 0;
  for (size_t k = 0; k < 4; k++) {
    json_t *v = json_array_get(a, k);
    if (!json_is_integer(v) || json_integer_value(v) < -1) return 0;
    out[k] = json_integer_value(v);
  }
  return 1;
}

int dpt_cudnn_errata_parse(struct dpt_cudnn_errata *e, const char *text, size_t len, const char *what,
                           struct dpt_err *err)
{
  json_error_t je;
  int rc = 0;
  memset(e, 0, sizeof *e);
  json_t *root = json_loadb(text, len, 0, &je);
  if (!root)
    return dpt_err_set(err, DPT_E_INPUT, "cuDNN errata %s: not valid JSON (line %d, column %d: %s)", what, je.line,
                       je.column, je.text);
  json_t *rules = json_object_get(root, "rules");
  if (!json_is_object(root) || !json_is_array(rules)) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuDNN errata %s: no \"rules\" array (cudnn-frontend's errata format)", what);
    goto done;
  }
  size_t n = json_array_size(rules);
  if (n && !(e->rule = calloc(n, sizeof *e->rule))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuDNN errata %s: out of memory for %zu rules", what, n);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *r = json_array_get(rules, i);
    struct dpt_errata_rule *x = &e->rule[i];
    const char *id = json_string_value(json_object_get(r, "rule_id"));
    const char *op = json_string_value(json_object_get(r, "operation"));
    json_t *eng = json_object_get(r, "engine"), *knob = json_object_get(r, "knob");
    json_t *vs = json_object_get(r, "cudnn_version_start"), *ve = json_object_get(r, "cudnn_version_end");
    json_t *is = json_object_get(r, "input_shape"), *fs = json_object_get(r, "filter_shape");
    const char *sf = json_string_value(json_object_get(r, "shape_format"));
    snprintf(x->rule_id, sizeof x->rule_id, "%s", id ? id : "");
    if (!json_is_object(r)) {
      rc = bad(err, what, i, x->rule_id, "not an object");
      goto done;
    }
    if (!op || !*op || strlen(op) >= sizeof x->operation) {
      rc = bad(err, what, i, x->rule_id, "no \"operation\" string");
      goto done;
    }
    if (!json_is_integer(eng) || json_integer_value(eng) < 0) {
      rc = bad(err, what, i, x->rule_id, "no \"engine\" index");
      goto done;
    }
    snprintf(x->operation, sizeof x->operation, "%s", op);
    x->engine = json_integer_value(eng);
    if (knob) {
      size_t k;
      json_t *kv;
      if (!json_is_array(knob) || json_array_size(knob) > DPT_ERRATA_MAX_KNOBS) {
        rc = bad(err, what, i, x->rule_id, "\"knob\" is not an array of at most 16 strings");
        goto done;
      }
      json_array_foreach(knob, k, kv) {
        const char *s = json_string_value(kv);
        if (!s || !*s || strlen(s) >= sizeof x->knob[0]) {
          rc = bad(err, what, i, x->rule_id, "a \"knob\" entry is not a string like \"k2=4\"");
          goto done;
        }
        snprintf(x->knob[x->n_knobs++], sizeof x->knob[0], "%s", s);
      }
    }
    x->version_start = 0;
    x->version_end = -1;
    if (vs && !json_is_integer(vs)) {
      rc = bad(err, what, i, x->rule_id, "\"cudnn_version_start\" is not an integer");
      goto done;
    }
    if (ve && !json_is_integer(ve)) {
      rc = bad(err, what, i, x->rule_id, "\"cudnn_version_end\" is not an integer");
      goto done;
    }
    if (vs) x->version_start = json_integer_value(vs);
    if (ve) x->version_end = json_integer_value(ve);
    if (is) {
      if (!sf || (strcmp(sf, "NCHW") && strcmp(sf, "NHWC"))) {
        rc = bad(err, what, i, x->rule_id, "\"input_shape\" needs \"shape_format\": \"NCHW\" or \"NHWC\"");
        goto done;
      }
      if (!shape4(is, x->input_shape)) {
        rc = bad(err, what, i, x->rule_id, "\"input_shape\" is not 4 integers (-1: any)");
        goto done;
      }
      x->has_input_shape = 1;
      x->shape_nhwc = !strcmp(sf, "NHWC");
    }
    if (fs) {
      if (!shape4(fs, x->filter_shape)) {
        rc = bad(err, what, i, x->rule_id, "\"filter_shape\" is not 4 integers K, C, R, S (-1: any)");
        goto done;
      }
      x->has_filter_shape = 1;
    }
    e->n++;
  }
done:
  json_decref(root);
  if (rc) dpt_cudnn_errata_free(e);
  return rc;
}

int dpt_cudnn_errata_load(struct dpt_cudnn_errata *e, const char *path, struct dpt_err *err)
{
  char *buf = NULL;
  size_t len = 0;
  int rc;
  memset(e, 0, sizeof *e);
  if ((rc = dpt_file_read(path, "cuDNN errata file", "set CUDNN_ERRATA_JSON_FILE to a readable file", (size_t)16 << 20,
                          &buf, &len, err)))
    return rc;
  rc = dpt_cudnn_errata_parse(e, buf, len, path, err);
  free(buf);
  if (!rc) snprintf(e->path, sizeof e->path, "%s", path);
  return rc;
}

void dpt_cudnn_errata_find(char *out, size_t len, const char *cache_dir, const char *repo_default)
{
  const char *env = getenv("CUDNN_ERRATA_JSON_FILE");
  struct stat st;
  out[0] = '\0';
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return;
  }
  if (cache_dir && *cache_dir) {
    int n = snprintf(out, len, "%s/cudnn-errata.json", cache_dir);
    if (n > 0 && (size_t)n < len && !stat(out, &st) && S_ISREG(st.st_mode)) return;
    out[0] = '\0';
  }
  if (repo_default) snprintf(out, len, "%s", repo_default);
}

int dpt_cudnn_errata_tag(char *out, size_t len, const char *operation, long long engine,
                         const long long *knob_type, const long long *knob_value, int n_knobs)
{
  int o = snprintf(out, len, "%s_eng%lld", operation, engine);
  for (int k = 0; k < n_knobs && o >= 0; k++)
    o += snprintf(out + ((size_t)o < len ? (size_t)o : len), (size_t)o < len ? len - (size_t)o : 0, "_k%lld=%lld",
                  knob_type[k], knob_value[k]);
  return o;
}

/* The knob "k2=4" is one of the tag's "_k<type>=<value>" fields (whole: not k12=4, not k2=40). */
static int tag_has_knob(const char *tag, const char *knob)
{
  size_t kl = strlen(knob);
  for (const char *p = strstr(tag, knob); p; p = strstr(p + 1, knob))
    if (p > tag && p[-1] == '_' && (p[kl] == '_' || p[kl] == '\0')) return 1;
  return 0;
}

static int shape_matches(const long long *rule, const long long *have)
{
  for (int k = 0; k < 4; k++)
    if (rule[k] != -1 && rule[k] != have[k]) return 0;
  return 1;
}

const struct dpt_errata_rule *dpt_cudnn_errata_blocked(const struct dpt_cudnn_errata *e, const char *plan_tag,
                                                       long cudnn_version, const long long *x_nchw,
                                                       const long long *w_kcrs)
{
  char prefix[200];
  size_t tl = strlen(plan_tag);
  for (int i = 0; e && i < e->n; i++) {
    const struct dpt_errata_rule *r = &e->rule[i];
    int pl = snprintf(prefix, sizeof prefix, "%s_eng%lld_", r->operation, r->engine);
    /* the tag with a '_' appended must start with the prefix */
    if (pl <= 0 || (size_t)pl > tl + 1 || strncmp(plan_tag, prefix, (size_t)pl - 1) ||
        (plan_tag[pl - 1] != '_' && plan_tag[pl - 1] != '\0'))
      continue;
    if (cudnn_version < r->version_start || (r->version_end >= 0 && cudnn_version >= r->version_end)) continue;
    int knobs = 1;
    for (int k = 0; k < r->n_knobs && knobs; k++) knobs = tag_has_knob(plan_tag, r->knob[k]);
    if (!knobs) continue;
    if (r->has_input_shape) {
      long long have[4];
      if (!x_nchw) continue;
      if (r->shape_nhwc) have[0] = x_nchw[0], have[1] = x_nchw[2], have[2] = x_nchw[3], have[3] = x_nchw[1];
      else memcpy(have, x_nchw, sizeof have);
      if (!shape_matches(r->input_shape, have)) continue;
    }
    if (r->has_filter_shape && (!w_kcrs || !shape_matches(r->filter_shape, w_kcrs))) continue;
    return r;
  }
  return NULL;
}
