/* dpt_cudnn_errata.h — known-bad cuDNN engine configs, in cudnn-frontend's errata format
 * (issue 15), host-only.
 *
 * The file is the one cudnn-frontend reads from $CUDNN_ERRATA_JSON_FILE:
 *
 *   { "version": 1,
 *     "rules": [ { "rule_id": "ConvBwdData_eng1_k2=2_k3=0",   (a name, for messages)
 *                  "operation": "ConvBwdData",                (the operation graph's tag)
 *                  "engine": 1,                               (global engine index)
 *                  "knob": ["k2=4", "k3=0"],                  (optional: all must be in the plan tag)
 *                  "cudnn_version_start": 8000,               (optional, inclusive)
 *                  "cudnn_version_end": -1,                   (optional, exclusive; -1: open)
 *                  "shape_format": "NHWC",                    (required with input_shape)
 *                  "input_shape": [-1, 64, -1, -1],           (optional, -1: any; X of ConvFwd /
 *                                                              ConvBwdFilter, DX of ConvBwdData)
 *                  "filter_shape": [64, 64, 3, 3] } ] }       (optional, always K, C, R, S)
 *
 * A plan's tag is "<operation>_eng<engine>_k<type>=<value>..." (dpt_cudnn_errata_tag); a
 * rule blocks it when the tag starts with "<operation>_eng<engine>_", every knob string
 * is one of its knob fields (whole: "k2=4" does not match k12=4 or k2=40, where the
 * frontend's substring test would), the running cuDNN is in [start, end) and the shapes
 * (when given) match.  trainer/cuda/cudnn-errata.json is the repository's list (empty:
 * no engine is known bad for the patterns dpt builds); $CUDNN_ERRATA_JSON_FILE or
 * <engine cache dir>/cudnn-errata.json replace it without a rebuild. */
#ifndef DPT_CUDNN_ERRATA_H
#define DPT_CUDNN_ERRATA_H

#include <stddef.h>

#include "dpt_err.h"

#define DPT_ERRATA_MAX_KNOBS 16

struct dpt_errata_rule {
  char rule_id[128];
  char operation[128];
  long long engine;
  int n_knobs;
  char knob[DPT_ERRATA_MAX_KNOBS][32];
  long long version_start, version_end; /* end < 0: open */
  int shape_nhwc;                       /* input_shape's order: 1 NHWC, 0 NCHW */
  int has_input_shape, has_filter_shape;
  long long input_shape[4], filter_shape[4]; /* -1: any */
};

struct dpt_cudnn_errata {
  char path[1024]; /* where the rules came from ("" for none / a string) */
  int n;
  struct dpt_errata_rule *rule; /* [n] */
};

/* Parse errata JSON text; what names it in messages.  DPT_E_INPUT naming the rule and field
 * for a malformed file (a rule without operation or engine, knobs that are not strings,
 * input_shape without shape_format, shapes that are not 4 integers); DPT_E_NOMEM. */
int dpt_cudnn_errata_parse(struct dpt_cudnn_errata *e, const char *text, size_t len, const char *what,
                           struct dpt_err *err);
/* Read and parse the file at path. */
int dpt_cudnn_errata_load(struct dpt_cudnn_errata *e, const char *path, struct dpt_err *err);
void dpt_cudnn_errata_free(struct dpt_cudnn_errata *e);

/* The file to use: $CUDNN_ERRATA_JSON_FILE, else <cache_dir>/cudnn-errata.json when it
 * exists (cache_dir may be NULL), else repo_default (may be NULL: out = "").  */
void dpt_cudnn_errata_find(char *out, size_t len, const char *cache_dir, const char *repo_default);

/* "<operation>_eng<engine>_k<type>=<value>_..." as cudnn-frontend tags execution plans.
 * Returns the length (truncated to len - 1 like snprintf). */
int dpt_cudnn_errata_tag(char *out, size_t len, const char *operation, long long engine,
                         const long long *knob_type, const long long *knob_value, int n_knobs);

/* The first rule that blocks plan_tag under cuDNN cudnn_version, or NULL.  x_nchw: the
 * convolution's X (ConvFwd, ConvBwdFilter) or DX (ConvBwdData) as [N, C, H, W]; w_kcrs: its
 * filter.  NULL when unknown or not a convolution: rules with that shape then do not match. */
const struct dpt_errata_rule *dpt_cudnn_errata_blocked(const struct dpt_cudnn_errata *e, const char *plan_tag,
                                                       long cudnn_version, const long long *x_nchw,
                                                       const long long *w_kcrs);

#endif /* DPT_CUDNN_ERRATA_H */
