/* dpt_optim_layout.c — the fused optimizer's layout and host reference (see dpt_optim_layout.h).
 * Compiled with -ffp-contract=off: the reference must not fuse a*b + c where the kernel rounds
 * twice (and dpt_sgd_step, on x86-64 without FMA in the baseline ISA, never does). */
#include "dpt_optim_layout.h"
#include "dpt_optim.h"

#include <stdlib.h>
#include <string.h>

#include "dpt_fp16.h"

void dpt_optim_layout_free(struct dpt_optim_layout *lay)
{
  if (!lay) return;
  free(lay->seg);
  free(lay->chunk);
  memset(lay, 0, sizeof *lay);
}

struct block {
  size_t off, len;
  int layer, kind;
};

static int by_off(const void *a, const void *b)
{
  const struct block *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int dpt_optim_layout_build(const struct dpt_model *m, const size_t *wcopy_off, const int *c_stored, int dtype,
                           size_t chunk, struct dpt_optim_layout *lay, struct dpt_err *err)
{
  int rc = 0, nb = 0;
  size_t eb = dpt_optim_elem_bytes(dtype);
  struct block *b = NULL;
  size_t *cend = NULL; /* per layer: end of its copy, for the overlap check */
  memset(lay, 0, sizeof *lay);
  if (dtype != DPT_OPT_F32 && dtype != DPT_OPT_F16 && dtype != DPT_OPT_BF16)
    return dpt_err_set(err, DPT_E_INPUT, "optimizer layout: copy type %d is not fp32, fp16 or bf16", dtype);
  if (!chunk) chunk = 4096;
  if (chunk > (1u << 30)) return dpt_err_set(err, DPT_E_INPUT, "optimizer layout: chunk of %zu elements", chunk);
  lay->n_params = m->n_params;
  lay->dtype = dtype;
  b = calloc((size_t)2 * m->n_layers + 1, sizeof *b);
  cend = calloc((size_t)m->n_layers + 1, sizeof *cend);
  if (!b || !cend) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "optimizer layout: out of memory");
    goto fail;
  }
  for (int l = 0; l < m->n_layers; l++) {
    const struct dpt_layer_desc *d = &m->layers[l];
    size_t off = wcopy_off ? wcopy_off[l] : (size_t)-1;
    int copy = off != (size_t)-1;
    if (copy && d->type != DPT_LAYER_CONV && d->type != DPT_LAYER_FC) {
      rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: layer %d '%s' (%s) has a weight copy: only conv and FC "
                       "weights are copied", l, d->name, dpt_layer_type_name(d->type));
      goto fail;
    }
    if (copy && off % eb) {
      rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: layer %d '%s': copy offset %zu is not a multiple of %zu "
                       "bytes", l, d->name, off, eb);
      goto fail;
    }
    if (d->w_len) b[nb++] = (struct block){d->w_off, d->w_len, l, copy ? (d->type == DPT_LAYER_CONV ? DPT_OSEG_KRSC : DPT_OSEG_FLAT) : DPT_OSEG_NONE};
    if (d->b_len) b[nb++] = (struct block){d->b_off, d->b_len, l, DPT_OSEG_NONE};
  }
  qsort(b, (size_t)nb, sizeof *b, by_off);
  lay->seg = calloc((size_t)nb + 1, sizeof *lay->seg);
  if (!lay->seg) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "optimizer layout: out of memory for %d segments", nb);
    goto fail;
  }
  size_t at = 0;
  for (int i = 0; i < nb; i++) {
    const struct dpt_layer_desc *d = &m->layers[b[i].layer];
    if (b[i].off != at) {
      rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: layer %d '%s': its parameters start at slab element %zu, "
                       "the blocks before end at %zu (a %s): the model's parameter slab is inconsistent",
                       b[i].layer, d->name, b[i].off, at, b[i].off > at ? "gap" : "overlap");
      goto fail;
    }
    at += b[i].len;
    struct dpt_optim_seg *prev = lay->n_seg ? &lay->seg[lay->n_seg - 1] : NULL;
    if (b[i].kind == DPT_OSEG_NONE && prev && prev->kind == DPT_OSEG_NONE) { /* merge copy-less blocks */
      prev->len += b[i].len;
      prev->layer = -1;
      continue;
    }
    struct dpt_optim_seg *s = &lay->seg[lay->n_seg++];
    s->src = b[i].off;
    s->len = b[i].len;
    s->kind = b[i].kind;
    s->layer = b[i].layer;
    if (s->kind == DPT_OSEG_NONE) continue;
    s->dst = wcopy_off[b[i].layer] / eb;
    size_t n_copy = b[i].len;
    if (s->kind == DPT_OSEG_KRSC) {
      s->k = d->c_out;
      s->c = d->c_in;
      s->rs = d->kernel * d->kernel;
      s->c_stored = c_stored ? c_stored[b[i].layer] : d->c_in;
      if (s->c_stored < s->c || (size_t)s->k * s->c * s->rs != b[i].len) {
        rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: conv %d '%s': filter [%d, %d, %d] (stored %d input "
                         "channels) for %zu weights", b[i].layer, d->name, s->k, s->c, s->rs, s->c_stored, b[i].len);
        goto fail;
      }
      n_copy = (size_t)s->k * s->rs * s->c_stored;
    }
    cend[b[i].layer] = s->dst + n_copy;
    if (s->dst + n_copy > lay->copy_elems) lay->copy_elems = s->dst + n_copy;
    lay->copied += b[i].len;
  }
  if (at != m->n_params) {
    rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: the parameter blocks end at %zu, the slab holds %zu", at,
                     m->n_params);
    goto fail;
  }
  /* copies must not overlap (each copy element has one writer) */
  for (int i = 0; i < lay->n_seg; i++)
    for (int j = i + 1; j < lay->n_seg; j++) {
      const struct dpt_optim_seg *x = &lay->seg[i], *y = &lay->seg[j];
      if (x->kind == DPT_OSEG_NONE || y->kind == DPT_OSEG_NONE) continue;
      if (x->dst < cend[y->layer] && y->dst < cend[x->layer]) {
        rc = dpt_err_set(err, DPT_E_INPUT, "optimizer layout: the weight copies of '%s' and '%s' overlap",
                         m->layers[x->layer].name, m->layers[y->layer].name);
        goto fail;
      }
    }
  size_t nc = 0;
  for (int i = 0; i < lay->n_seg; i++) nc += (lay->seg[i].len + chunk - 1) / chunk;
  lay->chunk = calloc(nc ? nc : 1, sizeof *lay->chunk);
  if (!lay->chunk) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "optimizer layout: out of memory for %zu chunks", nc);
    goto fail;
  }
  for (int i = 0; i < lay->n_seg; i++)
    for (unsigned long long o = 0; o < lay->seg[i].len; o += chunk) {
      unsigned long long left = lay->seg[i].len - o;
      lay->chunk[lay->n_chunk++] = (struct dpt_optim_chunk){lay->seg[i].src + o, (unsigned)(left < chunk ? left : chunk), i};
    }
  free(b);
  free(cend);
  return 0;
fail:
  free(b);
  free(cend);
  dpt_optim_layout_free(lay);
  return rc;
}

int dpt_optim_lars_build(const struct dpt_optim_layout *lay, const struct dpt_param_seg *seg, int n_seg, size_t chunk,
                         struct dpt_optim_lars *out, struct dpt_err *err)
{
  size_t nc = 0, at = 0;
  int s = 0;
  memset(out, 0, sizeof *out);
  if (!chunk) chunk = 4096;
  if (chunk > (1u << 30) || n_seg < 0)
    return dpt_err_set(err, DPT_E_INPUT, "LARS tables: chunk of %zu elements, %d tensors", chunk, n_seg);
  for (int t = 0; t < n_seg; t++) {
    if (seg[t].off != at || !seg[t].len)
      return dpt_err_set(err, DPT_E_INPUT, "LARS tables: tensor %d at slab element %zu (length %zu) does not follow the "
                         "one before, which ended at %zu", t, seg[t].off, seg[t].len, at);
    at += seg[t].len;
    nc += (seg[t].len + chunk - 1) / chunk;
  }
  if (at != lay->n_params)
    return dpt_err_set(err, DPT_E_INPUT, "LARS tables: the %d tensors hold %zu parameters, the optimizer layout %zu",
                       n_seg, at, lay->n_params);
  out->tensor = calloc(n_seg ? (size_t)n_seg : 1, sizeof *out->tensor);
  out->chunk = calloc(nc ? nc : 1, sizeof *out->chunk);
  if (!out->tensor || !out->chunk) {
    dpt_optim_lars_free(out);
    return dpt_err_set(err, DPT_E_NOMEM, "LARS tables: out of memory for %zu chunks", nc);
  }
  for (int t = 0; t < n_seg; t++) {
    /* the layout segment holding the tensor (both in slab order) */
    while (s < lay->n_seg && lay->seg[s].src + lay->seg[s].len <= seg[t].off) s++;
    if (s == lay->n_seg || seg[t].off < lay->seg[s].src || seg[t].off + seg[t].len > lay->seg[s].src + lay->seg[s].len) {
      dpt_optim_lars_free(out);
      return dpt_err_set(err, DPT_E_INPUT, "LARS tables: tensor %d [%zu, %zu) crosses a boundary of the optimizer "
                         "layout's segments", t, seg[t].off, seg[t].off + seg[t].len);
    }
    struct dpt_optim_lars_tensor *T = &out->tensor[t];
    *T = (struct dpt_optim_lars_tensor){seg[t].off, seg[t].len, seg[t].skip, out->n_chunk, 0};
    for (unsigned long long o = 0; o < T->len; o += chunk) {
      unsigned long long left = T->len - o;
      out->chunk[out->n_chunk++] = (struct dpt_optim_lars_chunk){T->off + o, (unsigned)(left < chunk ? left : chunk), t, s};
      T->n_chunk++;
    }
  }
  out->n_tensor = n_seg;
  return 0;
}

void dpt_optim_lars_free(struct dpt_optim_lars *l)
{
  free(l->tensor);
  free(l->chunk);
  memset(l, 0, sizeof *l);
}

unsigned short dpt_optim_bf16(float f)
{
  unsigned int x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  unsigned int rem = x << 16, r = x >> 16;
  if (rem > 0x80000000u || (rem == 0x80000000u && (r & 1u))) r++;
  return (unsigned short)r;
}

/* copy element of slab element i of segment sg = w in the copy type */
static void put_copy(const struct dpt_optim_layout *lay, const struct dpt_optim_seg *sg, unsigned long long i, float w,
                     void *copy)
{
  unsigned long long d = dpt_optim_dst(sg, i);
  if (lay->dtype == DPT_OPT_F32) ((float *)copy)[d] = w;
  else if (lay->dtype == DPT_OPT_F16) ((dpt_half *)copy)[d] = dpt_fp16_from_float(w);
  else ((unsigned short *)copy)[d] = dpt_optim_bf16(w);
}

void dpt_optim_ref_step(const struct dpt_optim_layout *lay, float lr, const float *lr_dev, float momentum,
                        float weight_decay, int nesterov, const unsigned char *mask, float *w, float *v, const float *g,
                        void *copy, const int *skip)
{
  if (skip && *skip) return;
  if (lr_dev) lr = *lr_dev;
  for (int s = 0; s < lay->n_seg; s++) {
    const struct dpt_optim_seg *sg = &lay->seg[s];
    for (unsigned long long i = sg->src; i < sg->src + sg->len; i++) {
      float gi = g[i] + ((!mask || mask[i]) ? weight_decay * w[i] : 0.0f);
      float vi = momentum * v[i] + gi;
      v[i] = vi;
      w[i] -= lr * (nesterov ? gi + momentum * vi : vi);
      if (sg->kind != DPT_OSEG_NONE && copy) put_copy(lay, sg, i, w[i], copy);
    }
  }
}

void dpt_optim_ref_copies(const struct dpt_optim_layout *lay, const float *w, void *copy)
{
  for (int s = 0; s < lay->n_seg; s++) {
    const struct dpt_optim_seg *sg = &lay->seg[s];
    if (sg->kind == DPT_OSEG_NONE) continue;
    for (unsigned long long i = sg->src; i < sg->src + sg->len; i++) put_copy(lay, sg, i, w[i], copy);
  }
}
