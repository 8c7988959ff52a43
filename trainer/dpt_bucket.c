/* dpt_bucket.c — gradient buckets in backward order (dpt_bucket.h). */
#include "dpt_bucket.h"

#include <stdlib.h>

int dpt_bucket_plan(const struct dpt_model *m, size_t target_bytes, struct dpt_bucket **out,
                    int *n_out, struct dpt_err *err)
{
  *out = NULL;
  *n_out = 0;
  if (target_bytes < sizeof(float))
    return dpt_err_set(err, DPT_E_INPUT, "gradient buckets: target size %zu bytes is below one float",
                       target_bytes);
  struct dpt_bucket *b = calloc((size_t)m->n_layers + 1, sizeof *b);
  if (!b) return dpt_err_set(err, DPT_E_NOMEM, "gradient buckets: out of memory");
  int nb = 0, open = 0;
  size_t expect_end = m->n_params; /* walking backwards, the next block must end here */
  for (int li = m->n_layers - 1; li >= 0; li--) {
    const struct dpt_layer_desc *l = &m->layers[li];
    size_t len = l->w_len + l->b_len;
    if (!len) continue;
    if (l->w_off + len != expect_end || (l->b_len && l->b_off != l->w_off + l->w_len)) {
      free(b);
      return dpt_err_set(err, DPT_E_INPUT,
                         "gradient buckets: layer %d '%s' parameters [%zu, +%zu) are not contiguous "
                         "with the next layer's (expected to end at %zu); the slab layout changed",
                         li, l->name, l->w_off, len, expect_end);
    }
    expect_end = l->w_off;
    if (!open) {
      b[nb].len = 0;
      b[nb].last_layer = li;
      open = 1;
    }
    b[nb].off = l->w_off;
    b[nb].len += len;
    b[nb].first_layer = li;
    if (b[nb].len * sizeof(float) >= target_bytes) {
      nb++;
      open = 0;
    }
  }
  if (open) nb++;
  if (expect_end != 0) {
    free(b);
    return dpt_err_set(err, DPT_E_INPUT, "gradient buckets: the parameter slab does not start at 0 "
                       "(first block at %zu)", expect_end);
  }
  *out = b;
  *n_out = nb;
  return 0;
}
