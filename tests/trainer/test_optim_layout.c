/* test_optim_layout: the fused optimizer's layout and host reference
 * (trainer/cuda/dpt_optim_layout.h), no device.
 *
 *  - ResNet-50 (224 px) against dpt_cuda_plan's weight-copy region at every precision: the
 *    segments tile the slab; every conv / FC weight element maps to exactly one copy
 *    element and no two to the same one; the stem's padding channels (fp16/bf16: RGB stored
 *    as 8) and everything outside the copies (the shared weight-gradient buffer) get none;
 *    only conv and FC weights are copied (BN, biases never; FC only in 16-bit); the copies
 *    lie inside the region; chunks never cross a segment and cover the slab once.
 *  - the reference step equals dpt_sgd_step bit for bit (w and v, 3 steps, weight-decay
 *    mask without BN/bias, momentum and Nesterov), and its copies equal an independent
 *    KCRS -> KRSC transposition + cast of the updated weights (fp32, fp16, bf16); the
 *    learning rate read from memory; the overflow skip leaves w, v and the copies alone.
 *  - bf16 rounding: ties to even, overflow to inf, NaN canonical.
 *  - bad layouts refused naming the layer: overlapping copies, an offset that is not a
 *    multiple of the element, a copy for a BN, a parameter slab with a gap. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cuda_plan.h"
#include "dpt_fp16.h"
#include "dpt_model.h"
#include "dpt_optim.h"
#include "dpt_optim_layout.h"

#include "dpt_check.h"

static void resnet(struct dpt_model *m, int image, int small_stem, double width)
{
  struct dpt_model_cfg cfg;
  struct dpt_err err;
  dpt_model_cfg_default(&cfg);
  cfg.image_size = image;
  cfg.small_stem = small_stem;
  cfg.width = width;
  if (image < 64) cfg.num_classes = 10;
  if (dpt_model_resnet50(m, &cfg, &err)) {
    fprintf(stderr, "resnet50: %s\n", err.msg);
    exit(1);
  }
}

static int dtype_of(enum dpt_cuda_precision p)
{
  return p == DPT_CUDA_MIXED ? DPT_OPT_F16 : p == DPT_CUDA_BF16 ? DPT_OPT_BF16 : DPT_OPT_F32;
}

/* The layout for a model and precision, from dpt_cuda_plan (the backend's allocation plan). */
static int layout_for(const struct dpt_model *m, enum dpt_cuda_precision prec, struct dpt_cuda_plan *plan,
                      struct dpt_optim_layout *lay, size_t chunk)
{
  struct dpt_err err;
  int *cs = malloc((size_t)m->n_layers * sizeof *cs);
  if (!cs) exit(1);
  if (dpt_cuda_plan_build(m, 1, prec, 0, plan, &err)) {
    fprintf(stderr, "plan: %s\n", err.msg);
    exit(1);
  }
  for (int l = 0; l < m->n_layers; l++) cs[l] = plan->t[m->layers[l].in[0]].c_stored;
  int rc = dpt_optim_layout_build(m, plan->wcopy_off, cs, dtype_of(prec), chunk, lay, &err);
  CHECK(rc == 0, "%s layout: %s", dpt_cuda_precision_name(prec), err.msg);
  free(cs);
  return rc == 0;
}

static void resnet50_layout(void)
{
  struct dpt_model m;
  resnet(&m, 224, 0, 1.0);
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++) {
    struct dpt_cuda_plan plan;
    struct dpt_optim_layout lay;
    const char *pn = dpt_cuda_precision_name(prec);
    if (!layout_for(&m, prec, &plan, &lay, 4096)) {
      dpt_cuda_plan_free(&plan);
      continue;
    }
    size_t eb = dpt_optim_elem_bytes(lay.dtype), region = plan.weight_copy_bytes / eb;
    int half = dpt_cuda_precision_half(prec);
    /* segments tile the slab */
    unsigned long long at = 0;
    for (int s = 0; s < lay.n_seg; s++) {
      CHECK(lay.seg[s].src == at && lay.seg[s].len > 0, "%s: segment %d at %llu, expected %llu", pn, s, lay.seg[s].src, at);
      at += lay.seg[s].len;
    }
    CHECK(at == m.n_params, "%s: segments end at %llu of %zu", pn, at, m.n_params);
    /* which layers are copied */
    size_t want_copied = 0;
    for (int l = 0; l < m.n_layers; l++) {
      const struct dpt_layer_desc *d = &m.layers[l];
      int copied = 0;
      for (int s = 0; s < lay.n_seg; s++)
        if (lay.seg[s].layer == l && lay.seg[s].kind != DPT_OSEG_NONE) copied = 1;
      int want = d->type == DPT_LAYER_CONV || (d->type == DPT_LAYER_FC && half);
      CHECK(copied == want, "%s: %s copied %d, expected %d", pn, d->name, copied, want);
      if (want) want_copied += d->w_len;
    }
    CHECK(lay.copied == want_copied, "%s: %zu elements copied, expected %zu", pn, lay.copied, want_copied);
    /* bijection onto the non-padding copy elements, inside the region, clear of the wgrad buffer */
    unsigned char *hits = calloc(region ? region : 1, 1);
    if (!hits) exit(1);
    size_t outside = 0, twice = 0, wgrad_hit = 0;
    for (int s = 0; s < lay.n_seg; s++) {
      const struct dpt_optim_seg *sg = &lay.seg[s];
      if (sg->kind == DPT_OSEG_NONE) continue;
      for (unsigned long long i = sg->src; i < sg->src + sg->len; i++) {
        unsigned long long d = dpt_optim_dst(sg, i);
        if (d >= region) {
          outside++;
          continue;
        }
        twice += hits[d]++ > 0;
        wgrad_hit += d >= plan.wgrad_off / eb;
      }
    }
    CHECK(!outside && !twice && !wgrad_hit, "%s: %zu copy elements outside the region, %zu hit twice, %zu in the "
          "weight-gradient buffer", pn, outside, twice, wgrad_hit);
    size_t hit = 0, pad_hit = 0, pad = 0;
    for (size_t d = 0; d < region; d++) hit += hits[d];
    CHECK(hit == lay.copied, "%s: %zu copy elements written for %zu copied weights", pn, hit, lay.copied);
    /* the stem's padding channels: KRSC [64, 7*7, 8] with channels 3..7 unwritten (16-bit) */
    int stem = 0;
    for (int s = 0; s < lay.n_seg; s++)
      if (lay.seg[s].layer == stem && lay.seg[s].kind == DPT_OSEG_KRSC) {
        const struct dpt_optim_seg *sg = &lay.seg[s];
        CHECK(sg->c == 3 && sg->c_stored == (half ? 8 : 3) && sg->rs == 49 && sg->k == 64, "%s: stem [%d, %d, %d] "
              "stored %d", pn, sg->k, sg->c, sg->rs, sg->c_stored);
        for (int k = 0; k < sg->k; k++)
          for (int r = 0; r < sg->rs; r++)
            for (int c = sg->c; c < sg->c_stored; c++) {
              pad++;
              pad_hit += hits[sg->dst + ((size_t)k * sg->rs + r) * sg->c_stored + c];
            }
      }
    CHECK(pad == (half ? 64u * 49 * 5 : 0u) && !pad_hit, "%s: %zu padding elements, %zu written", pn, pad, pad_hit);
    /* chunks: inside one segment each, covering the slab in order */
    unsigned long long next = 0;
    for (int c = 0; c < lay.n_chunk; c++) {
      const struct dpt_optim_chunk *ch = &lay.chunk[c];
      const struct dpt_optim_seg *sg = &lay.seg[ch->seg];
      CHECK(ch->start == next && ch->len > 0 && ch->len <= 4096 && ch->start >= sg->src &&
                ch->start + ch->len <= sg->src + sg->len, "%s: chunk %d [%llu, +%u) seg %d", pn, c, ch->start, ch->len,
            ch->seg);
      next = ch->start + ch->len;
    }
    CHECK(next == m.n_params, "%s: chunks end at %llu", pn, next);
    printf("resnet50 %s: %d segments, %d chunks of <= 4096, %zu of %zu parameters copied into %zu of %zu region "
           "elements\n", pn, lay.n_seg, lay.n_chunk, lay.copied, m.n_params, hit, region);
    free(hits);
    dpt_optim_layout_free(&lay);
    dpt_cuda_plan_free(&plan);
  }
  dpt_model_free(&m);
}

static float frand(unsigned *s)
{
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* The copies as an independent transposition + cast of w. */
static int copies_ok(const struct dpt_model *m, const struct dpt_cuda_plan *plan, const struct dpt_optim_layout *lay,
                     const float *w, const void *copy, const char *what)
{
  size_t eb = dpt_optim_elem_bytes(lay->dtype);
  long bad = 0;
  for (int l = 0; l < m->n_layers; l++) {
    const struct dpt_layer_desc *d = &m->layers[l];
    if (plan->wcopy_off[l] == (size_t)-1) continue;
    size_t base = plan->wcopy_off[l] / eb;
    int K = d->c_out, C = d->c_in, RS = d->type == DPT_LAYER_CONV ? d->kernel * d->kernel : 1;
    int CS = d->type == DPT_LAYER_CONV ? plan->t[d->in[0]].c_stored : C;
    for (int k = 0; k < K; k++)
      for (int c = 0; c < C; c++)
        for (int r = 0; r < RS; r++) {
          float x = w[d->w_off + ((size_t)k * C + c) * RS + r];
          size_t at = d->type == DPT_LAYER_CONV ? base + ((size_t)k * RS + r) * CS + c : base + (size_t)k * C + c;
          int ok;
          if (lay->dtype == DPT_OPT_F32) ok = ((const float *)copy)[at] == x;
          else if (lay->dtype == DPT_OPT_F16) ok = ((const dpt_half *)copy)[at] == dpt_fp16_from_float(x);
          else ok = ((const unsigned short *)copy)[at] == dpt_optim_bf16(x);
          bad += !ok;
        }
  }
  CHECK(bad == 0, "%s: %ld copy elements differ from the transposed cast weights", what, bad);
  return bad == 0;
}

static void reference_step(void)
{
  struct dpt_model m;
  struct dpt_err err;
  resnet(&m, 32, 1, 0.125);
  size_t n = m.n_params;
  unsigned char *mask = malloc(n);
  float *w0 = malloc(n * 4), *w = malloc(n * 4), *v = malloc(n * 4), *g = malloc(n * 4), *wr = malloc(n * 4);
  if (!mask || !w0 || !w || !v || !g || !wr) exit(1);
  dpt_model_decay_mask(&m, 1, mask);
  unsigned seed = 7;
  for (size_t i = 0; i < n; i++) w0[i] = 0.1f * frand(&seed);
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++)
    for (int nesterov = 0; nesterov < 2; nesterov++) {
      struct dpt_cuda_plan plan;
      struct dpt_optim_layout lay;
      struct dpt_sgd sgd;
      char what[64];
      snprintf(what, sizeof what, "%s%s", dpt_cuda_precision_name(prec), nesterov ? " nesterov" : "");
      if (!layout_for(&m, prec, &plan, &lay, 1000)) continue; /* odd chunk size: chunks end mid-block */
      void *copy = calloc(plan.weight_copy_bytes, 1);
      if (!copy || dpt_sgd_init(&sgd, n, 0.9f, 5e-5f, mask, &err)) exit(1);
      sgd.nesterov = nesterov;
      memcpy(w, w0, n * 4);
      memcpy(wr, w0, n * 4);
      memset(v, 0, n * 4);
      const float lr = 0.1f;
      for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < n; i++) g[i] = 0.01f * frand(&seed);
        dpt_sgd_step(&sgd, lr, wr, g);
        float lr_mem = lr;
        dpt_optim_ref_step(&lay, step == 1 ? -7.0f : lr, step == 1 ? &lr_mem : NULL, 0.9f, 5e-5f, nesterov, mask, w, v,
                           g, copy, NULL);
      }
      CHECK(!memcmp(w, wr, n * 4), "%s: weights differ from dpt_sgd_step", what);
      CHECK(!memcmp(v, sgd.velocity, n * 4), "%s: momentum differs from dpt_sgd_step", what);
      copies_ok(&m, &plan, &lay, w, copy, what);
      /* overflow: skip leaves everything alone */
      int skip = 1;
      unsigned char *before = malloc(plan.weight_copy_bytes);
      float *wb = malloc(n * 4), *vb = malloc(n * 4);
      if (!before || !wb || !vb) exit(1);
      memcpy(before, copy, plan.weight_copy_bytes);
      memcpy(wb, w, n * 4);
      memcpy(vb, v, n * 4);
      dpt_optim_ref_step(&lay, lr, NULL, 0.9f, 5e-5f, nesterov, mask, w, v, g, copy, &skip);
      CHECK(!memcmp(w, wb, n * 4) && !memcmp(v, vb, n * 4) && !memcmp(copy, before, plan.weight_copy_bytes),
            "%s: the skipped step changed something", what);
      skip = 0;
      dpt_optim_ref_step(&lay, lr, NULL, 0.9f, 5e-5f, nesterov, mask, w, v, g, copy, &skip);
      CHECK(memcmp(w, wb, n * 4), "%s: skip = 0 did not step", what);
      /* the copy-only pass (parameters put in the slab by the host): the copies of w alone, the
       * same as the transposed cast, and only the copy elements written (padding stays 0) */
      for (size_t i = 0; i < n; i++) w[i] = 0.3f * frand(&seed);
      void *copy2 = calloc(plan.weight_copy_bytes, 1);
      if (!copy2) exit(1);
      dpt_optim_ref_copies(&lay, w, copy2);
      copies_ok(&m, &plan, &lay, w, copy2, what);
      size_t written = 0;
      for (size_t i = 0; i < plan.weight_copy_bytes; i++) written += ((unsigned char *)copy2)[i] != 0;
      CHECK(written <= lay.copied * dpt_optim_elem_bytes(lay.dtype), "%s: copy-only wrote %zu bytes for %zu copies",
            what, written, lay.copied);
      free(copy2);
      free(before), free(wb), free(vb);
      free(copy);
      dpt_sgd_free(&sgd);
      dpt_optim_layout_free(&lay);
      dpt_cuda_plan_free(&plan);
    }
  free(mask), free(w0), free(w), free(v), free(g), free(wr);
  dpt_model_free(&m);
}

static void bf16_rounding(void)
{
  CHECK(dpt_optim_bf16(1.0f) == 0x3f80, "1.0");
  float t;
  unsigned int u = 0x3f808000u; /* exactly halfway between 0x3f80 and 0x3f81: ties to even */
  memcpy(&t, &u, 4);
  CHECK(dpt_optim_bf16(t) == 0x3f80, "tie to even (down): %04x", dpt_optim_bf16(t));
  u = 0x3f818000u;
  memcpy(&t, &u, 4);
  CHECK(dpt_optim_bf16(t) == 0x3f82, "tie to even (up): %04x", dpt_optim_bf16(t));
  u = 0x3f808001u;
  memcpy(&t, &u, 4);
  CHECK(dpt_optim_bf16(t) == 0x3f81, "above the tie: %04x", dpt_optim_bf16(t));
  u = 0x7f7fffffu; /* FLT_MAX rounds to inf */
  memcpy(&t, &u, 4);
  CHECK(dpt_optim_bf16(t) == 0x7f80, "FLT_MAX: %04x", dpt_optim_bf16(t));
  CHECK(dpt_optim_bf16(-2.5f) == 0xc020, "-2.5: %04x", dpt_optim_bf16(-2.5f));
  CHECK(dpt_optim_bf16(NAN) == 0x7fff && dpt_optim_bf16(-NAN) == 0x7fff, "NaN");
}

static void bad_layouts(void)
{
  struct dpt_model m;
  struct dpt_err err;
  struct dpt_optim_layout lay;
  resnet(&m, 32, 1, 0.125);
  size_t *off = malloc((size_t)m.n_layers * sizeof *off);
  if (!off) exit(1);
  size_t at = 0;
  int c2 = -1, bn = -1;
  for (int l = 0; l < m.n_layers; l++) {
    off[l] = (size_t)-1;
    if (m.layers[l].type == DPT_LAYER_CONV) {
      off[l] = at;
      at += m.layers[l].w_len * 4;
      if (!strcmp(m.layers[l].name, "layer2.0.conv2")) c2 = l;
    }
    if (bn < 0 && m.layers[l].type == DPT_LAYER_BN) bn = l;
  }
  CHECK(dpt_optim_layout_build(&m, off, NULL, DPT_OPT_F32, 0, &lay, &err) == 0, "fp32 tight layout: %s", err.msg);
  dpt_optim_layout_free(&lay);
  size_t keep = off[c2];
  off[c2] -= 4 * 8; /* overlaps the previous conv's copy */
  int rc = dpt_optim_layout_build(&m, off, NULL, DPT_OPT_F32, 0, &lay, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "'layer2.0.conv2'") && strstr(err.msg, "overlap"), "overlap: %s", err.msg);
  off[c2] = keep + 2;
  rc = dpt_optim_layout_build(&m, off, NULL, DPT_OPT_F32, 0, &lay, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "'layer2.0.conv2'") && strstr(err.msg, "multiple"), "misaligned: %s",
        err.msg);
  off[c2] = keep;
  off[bn] = at;
  rc = dpt_optim_layout_build(&m, off, NULL, DPT_OPT_F32, 0, &lay, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, m.layers[bn].name) && strstr(err.msg, "only conv and FC"), "BN copy: %s",
        err.msg);
  off[bn] = (size_t)-1;
  m.layers[c2].w_off += 1; /* a hole in the slab */
  rc = dpt_optim_layout_build(&m, off, NULL, DPT_OPT_F32, 0, &lay, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "'layer2.0.conv2'") && strstr(err.msg, "gap"), "gap: %s", err.msg);
  printf("refused: %s\n", err.msg);
  free(off);
  dpt_model_free(&m);
}

/* LARS's device tables (dpt_optim_lars_build): ResNet-50's 161 tensors cut into chunks that tile
 * the slab in order, each inside its tensor and inside the layout segment it names; at fp32 the
 * FC weight (LARS: a trust ratio) shares a copy-less segment with BN parameters and the bias (no
 * ratio), which is why the update reads its tensor from the chunk and not from the segment. */
static void lars_tables(void)
{
  struct dpt_model m;
  struct dpt_cuda_plan plan;
  struct dpt_optim_layout lay;
  struct dpt_optim_lars l;
  struct dpt_err err;
  resnet(&m, 224, 0, 1.0);
  if (!layout_for(&m, DPT_CUDA_FP32, &plan, &lay, 0)) exit(1);
  int ns = dpt_model_param_segs(&m, NULL, 0);
  struct dpt_param_seg *seg = malloc((size_t)ns * sizeof *seg);
  CHECK(ns == 161 && dpt_model_param_segs(&m, seg, ns) == ns, "ResNet-50 has %d parameter tensors, not 161", ns);
  CHECK(dpt_optim_lars_build(&lay, seg, ns, 1000, &l, &err) == 0, "lars tables: %s", err.msg);
  unsigned long long at = 0;
  int bad = 0, mixed_seg = 0, skipped = 0;
  for (int c = 0; c < l.n_chunk; c++) {
    const struct dpt_optim_lars_chunk *ch = &l.chunk[c];
    const struct dpt_optim_lars_tensor *T = &l.tensor[ch->tensor];
    const struct dpt_optim_seg *sg = &lay.seg[ch->seg];
    bad += ch->start != at || !ch->len || ch->len > 1000 || ch->start < T->off || ch->start + ch->len > T->off + T->len ||
           ch->start < sg->src || ch->start + ch->len > sg->src + sg->len || c < T->first_chunk ||
           c >= T->first_chunk + T->n_chunk;
    at += ch->len;
  }
  for (int t = 0; t < l.n_tensor; t++) {
    skipped += l.tensor[t].skip;
    bad += l.tensor[t].skip != seg[t].skip || l.tensor[t].off != seg[t].off;
    for (int u = 0; u < l.n_tensor; u++) /* a ratio tensor and a skipped one in the same segment */
      mixed_seg += !l.tensor[t].skip && l.tensor[u].skip && l.chunk[l.tensor[t].first_chunk].seg == l.chunk[l.tensor[u].first_chunk].seg;
  }
  CHECK(!bad && at == m.n_params, "lars chunks: %d inconsistent, %llu of %zu elements covered", bad, at, m.n_params);
  CHECK(skipped == 2 * 53 + 1, "%d skipped tensors, want 53 BN gammas + 53 betas + the FC bias", skipped);
  CHECK(mixed_seg > 0, "no layout segment holds both a LARS tensor and a skipped one (the FC weight at fp32)");
  int n_chunk = l.n_chunk;
  dpt_optim_lars_free(&l);
  /* tensors that do not tile the slab are refused */
  seg[5].off += 1;
  CHECK(dpt_optim_lars_build(&lay, seg, ns, 0, &l, &err) == DPT_E_INPUT && strstr(err.msg, "tensor 5"), "gap: %s", err.msg);
  CHECK(dpt_optim_lars_build(&lay, seg, 3, 0, &l, &err) == DPT_E_INPUT && strstr(err.msg, "3 tensors"), "short: %s", err.msg);
  printf("lars tables: %d tensors, %d chunks of <= 1000; refused: %s\n", ns, n_chunk, err.msg);
  free(seg);
  dpt_optim_layout_free(&lay);
  dpt_cuda_plan_free(&plan);
  dpt_model_free(&m);
}

int main(void)
{
  resnet50_layout();
  lars_tables();
  reference_step();
  bf16_rounding();
  bad_layouts();
  if (!failures) printf("test_optim_layout: all checks passed\n");
  return failures != 0;
}
