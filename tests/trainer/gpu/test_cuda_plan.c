/* test_cuda_plan: the CUDA backend's host-side planning, no device needed.
 *
 *  - ResNet-50 v1.5 at 224x224, batch 32: all 53 convolutions get the shapes
 *    torchvision gives them (spot checks of the stem, v1.5's stride-2 3x3,
 *    projections, the last stage), every planned output equals cuDNN's formula
 *    and the model's tensor; the distinct-shape table (one algorithm search per
 *    shape) has exactly 23 entries — derivation: stem 1; layer1 4 (conv1 of
 *    block 0, conv1 of blocks 1-2, the 3x3, conv3 == projection); layer2..4 6
 *    each (block 0: conv1, strided 3x3, conv3, projection; blocks 1+: conv1,
 *    3x3); and the table is a partition (same id <=> same shape).
 *  - NHWC at every precision; mixed and bf16: 16-bit everywhere except the
 *    logits (fp32), the RGB input padded to 8 channels and the stem filter with
 *    it, every ResNet-50 conv tensor-core eligible, persistent BN for training;
 *    a width-1/16 variant has convolutions with 4 channels that the plan marks
 *    ineligible.
 *  - Memory plan: every part recomputed here from the model; the liveness
 *    arena (property: two tensors live at a common step never share bytes; the
 *    arena is at least the largest simultaneously-live set and, at batch 256,
 *    far below one buffer per activation and gradient); the gradients of
 *    ResNet-50 at batch 256 resident only from first write to last read; a
 *    fixed number of device allocations whatever the depth; the largest batch
 *    that fits (dpt_cuda_plan_fit) and the planned peak at batch 256 per
 *    precision (printed: the prediction compared with PyTorch's 27.2 / 11.0 GiB).
 *  - Algorithm choice under a workspace limit; workspace limit from free memory.
 *  - Dynamic loss scaling policy.
 *  - Bad input: batch 0, a corrupted conv output shape.
 * (Gradient buckets: tests/trainer/test_bucket.c, every build.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cuda_plan.h"
#include "dpt_model.h"

#include "dpt_check.h"

static const struct dpt_cuda_conv_plan *conv_named(const struct dpt_model *m,
                                                   const struct dpt_cuda_plan *p, const char *name)
{
  for (int i = 0; i < p->n_conv; i++)
    if (!strcmp(m->layers[p->conv[i].layer].name, name)) return &p->conv[i];
  return NULL;
}

static void expect_conv(const struct dpt_model *m, const struct dpt_cuda_plan *p, const char *name,
                        int c, int h, int k, int r, int stride, int pad, int out_hw)
{
  const struct dpt_cuda_conv_plan *cp = conv_named(m, p, name);
  CHECK(cp, "no convolution %s in the plan", name);
  if (!cp) return;
  CHECK(cp->n == p->batch && cp->c == c && cp->h == h && cp->w == h && cp->k == k && cp->r == r &&
            cp->s == r && cp->stride == stride && cp->pad == pad && cp->p == out_hw && cp->q == out_hw,
        "%s: planned [%d,%d,%d,%d] * [%d,%d,%d,%d] s%d p%d -> %dx%d, expected c %d h %d k %d r %d s%d "
        "p%d -> %d", name, cp->n, cp->c, cp->h, cp->w, cp->k, cp->c, cp->r, cp->s, cp->stride, cp->pad,
        cp->p, cp->q, c, h, k, r, stride, pad, out_hw);
}

static int same(const struct dpt_cuda_conv_plan *a, const struct dpt_cuda_conv_plan *b)
{
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
         a->r == b->r && a->stride == b->stride && a->pad == b->pad;
}

static void check_plan_consistent(const struct dpt_model *m, const struct dpt_cuda_plan *p,
                                  int need_input_grad)
{
  int nconv = 0;
  for (int i = 0; i < m->n_layers; i++) nconv += m->layers[i].type == DPT_LAYER_CONV;
  CHECK(p->n_conv == nconv, "plan has %d convolutions, model %d", p->n_conv, nconv);
  for (int i = 0; i < p->n_conv; i++) {
    const struct dpt_cuda_conv_plan *c = &p->conv[i];
    const struct dpt_layer_desc *l = &m->layers[c->layer];
    const struct dpt_tensor_desc *x = &m->tensors[l->in[0]], *y = &m->tensors[l->out];
    CHECK(l->type == DPT_LAYER_CONV, "conv plan %d points at a %s", i, dpt_layer_type_name(l->type));
    CHECK(c->c_logical == x->c && c->c >= x->c && c->h == x->h && c->k == y->c && c->p == y->h &&
              c->q == y->w, "%s: plan and model disagree", l->name);
    CHECK(c->p == 1 + (c->h + 2 * c->pad - c->r) / c->stride, "%s: not cuDNN's output formula", l->name);
    CHECK(c->shape_id >= 0 && c->shape_id < p->n_shapes, "%s: shape id %d", l->name, c->shape_id);
    CHECK(same(c, &p->conv[p->shape_rep[c->shape_id]]), "%s: differs from its shape's representative",
          l->name);
    for (int j = 0; j < i; j++)
      CHECK((p->conv[j].shape_id == c->shape_id) == same(&p->conv[j], c),
            "%s vs %s: shape ids %d/%d do not match shape equality", l->name,
            m->layers[p->conv[j].layer].name, c->shape_id, p->conv[j].shape_id);
  }
  for (int s = 0; s < p->n_shapes; s++)
    CHECK(p->conv[p->shape_rep[s]].shape_id == s, "representative of shape %d has id %d", s,
          p->conv[p->shape_rep[s]].shape_id);
  /* memory plan recomputed */
  size_t act = 0, diff = 0, big = 0, bn = 0, half = 0, wcopy = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const struct dpt_cuda_tensor_plan *t = &p->t[i];
    size_t b = (size_t)p->batch * t->c_stored * t->h * t->w * t->elem_bytes;
    CHECK(t->bytes == b, "tensor %d: %zu bytes planned, %zu by its shape", i, t->bytes, b);
    act += b;
    if (i || need_input_grad) diff += b;
    if (b > big) big = b;
  }
  for (int i = 0; i < m->n_layers; i++) {
    const struct dpt_layer_desc *l = &m->layers[i];
    if (l->type == DPT_LAYER_BN) bn += 8 * (size_t)l->c_out;
    int h16 = dpt_cuda_precision_half(p->precision);
    size_t wl = (size_t)l->c_out * p->t[l->in[0]].c_stored * l->kernel * l->kernel * (h16 ? 2 : 4);
    if (l->type == DPT_LAYER_CONV && !p->nchw) {
      half += h16 ? 2 * wl : 0;
      CHECK(p->wcopy_off[i] != (size_t)-1 && p->wcopy_off[i] + wl <= p->wgrad_off, "%s: weight copy", l->name);
      wcopy += wl;
    } else if (l->type == DPT_LAYER_FC && h16) {
      half += 2 * l->w_len;
      wcopy += 2 * l->w_len;
    } else {
      CHECK(p->wcopy_off[i] == (size_t)-1, "%s has a weight copy", l->name);
    }
  }
  CHECK(p->act_bytes == act && p->diff_bytes == diff && p->scratch_bytes == big, "activation memory");
  CHECK(p->bn_saved_bytes == bn && p->half_weight_bytes == half, "bn %zu/%zu 16-bit weights %zu/%zu",
        p->bn_saved_bytes, bn, p->half_weight_bytes, half);
  CHECK(p->weight_copy_bytes >= wcopy && p->wgrad_off < p->weight_copy_bytes, "weight copies %zu < %zu",
        p->weight_copy_bytes, wcopy);
  CHECK(p->param_bytes == 4 * m->n_params && p->grad_bytes == p->param_bytes &&
            p->state_bytes == 4 * m->n_state, "slabs");
  size_t tot = 0;
  for (int r = 0; r < DPT_CUDA_NREGIONS; r++) tot += p->region[r];
  CHECK(p->total_bytes == tot && p->region[DPT_CUDA_R_ARENA] == p->arena_bytes, "total = the regions' sum");
  /* liveness: every live pair apart, each buffer inside the arena, the arena no larger than
   * everything side by side and no smaller than the busiest step */
  int n = p->n_tensors;
  size_t peak_live = 0;
  for (int s = 0; s <= p->n_steps; s++) {
    size_t live = 0;
    for (int a = 0; a < 2 * n; a++) {
      const struct dpt_cuda_tensor_plan *t = &p->t[a % n];
      int lo = a < n ? t->act_lo : t->diff_lo, hi = a < n ? t->act_hi : t->diff_hi;
      if (lo <= s && s <= hi) live += t->bytes;
    }
    if (live > peak_live) peak_live = live;
  }
  int overlaps = 0;
  for (int a = 0; a < 2 * n; a++) {
    const struct dpt_cuda_tensor_plan *ta = &p->t[a % n];
    int alo = a < n ? ta->act_lo : ta->diff_lo, ahi = a < n ? ta->act_hi : ta->diff_hi;
    size_t ao = a < n ? ta->act_off : ta->diff_off;
    if (alo > ahi) continue;
    CHECK(ao + ta->bytes <= p->arena_bytes, "buffer %d beyond the arena", a);
    for (int b = a + 1; b < 2 * n; b++) {
      const struct dpt_cuda_tensor_plan *tb = &p->t[b % n];
      int blo = b < n ? tb->act_lo : tb->diff_lo, bhi = b < n ? tb->act_hi : tb->diff_hi;
      size_t bo = b < n ? tb->act_off : tb->diff_off;
      if (blo > bhi || ahi < blo || bhi < alo) continue;
      overlaps += ao < bo + tb->bytes && bo < ao + ta->bytes;
    }
  }
  CHECK(overlaps == 0, "%d pairs of simultaneously live buffers share bytes", overlaps);
  for (int i = 0; i < m->n_layers; i++) { /* the scratch of a layer's backward: inside, apart from its step's tensors */
    const struct dpt_layer_desc *l = &m->layers[i];
    size_t so = p->scratch_off[i];
    int s = 2 * m->n_layers - 1 - i;
    CHECK((so != (size_t)-1) == ((l->type == DPT_LAYER_BN || (l->type == DPT_LAYER_ADD && l->in[0] == l->in[1])) && l->relu),
          "%s scratch", l->name);
    if (so == (size_t)-1) continue;
    CHECK(so + p->t[l->out].bytes <= p->arena_bytes, "%s scratch beyond the arena", l->name);
    for (int a = 0; a < 2 * n; a++) {
      const struct dpt_cuda_tensor_plan *t = &p->t[a % n];
      int lo = a < n ? t->act_lo : t->diff_lo, hi = a < n ? t->act_hi : t->diff_hi;
      size_t o = a < n ? t->act_off : t->diff_off;
      if (lo <= s && s <= hi) overlaps += o < so + p->t[l->out].bytes && so < o + t->bytes;
    }
  }
  CHECK(overlaps == 0, "%d scratch buffers share bytes with a live tensor", overlaps);
  CHECK(p->arena_bytes >= peak_live && p->arena_bytes <= act + diff + big * m->n_layers + 4 * (size_t)n * 256,
        "arena %zu outside [busiest step %zu, side by side %zu]", p->arena_bytes, peak_live, act + diff);
  /* a gradient lives from its first writer (its last consumer's backward) to its producer's backward */
  int L = m->n_layers;
  for (int t = 1; t < n; t++) {
    int last = -1;
    for (int i = 0; i < L; i++)
      if (m->layers[i].in[0] == t || m->layers[i].in[1] == t) last = i;
    int o = m->layers[L - 1].out;
    CHECK(p->t[t].diff_lo == (t == o ? L : 2 * L - 1 - last) && p->t[t].diff_hi == 2 * L - 1 - m->tensors[t].producer,
          "tensor %d: gradient live [%d, %d]", t, p->t[t].diff_lo, p->t[t].diff_hi);
  }
}

/* The backend's device allocations are the plan's regions: a fixed list. */
static void test_regions_and_fit(void)
{
  struct dpt_model big, tiny;
  struct dpt_model_cfg cfg;
  struct dpt_err err = {0};
  struct dpt_cuda_plan p;
  dpt_model_cfg_default(&cfg);
  if (dpt_model_resnet50(&big, &cfg, &err) || dpt_model_init(&tiny, 3, 8, 8, &err) ||
      dpt_model_add_conv(&tiny, "conv", 0, 8, 3, 1, 1, &err) < 0 || dpt_model_add_bn(&tiny, "bn", 1, 1, &err) < 0 ||
      dpt_model_add_gap(&tiny, "gap", 2, &err) < 0 || dpt_model_add_fc(&tiny, "fc", 3, 4, &err) < 0) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++) {
    int nz[2] = {0, 0};
    const struct dpt_model *ms[2] = {&big, &tiny};
    for (int k = 0; k < 2; k++) {
      CHECK(dpt_cuda_plan_build(ms[k], 4, prec, 0, &p, &err) == 0, "plan: %s", err.msg);
      for (int r = 0; r < DPT_CUDA_NREGIONS; r++) nz[k] += p.region[r] > 0;
      check_plan_consistent(ms[k], &p, 0);
      dpt_cuda_plan_free(&p);
    }
    CHECK(nz[0] == DPT_CUDA_NREGIONS && nz[1] == DPT_CUDA_NREGIONS,
          "%s: %d / %d allocations for 161 / 4 layers, expected %d for both", dpt_cuda_precision_name(prec), nz[0],
          nz[1], DPT_CUDA_NREGIONS);
  }
  /* ResNet-50 at batch 256 (224 px): what the plan predicts, per precision (PyTorch 2.11 on the
   * H100, torch.cuda.max_memory_allocated: 27.2 GiB fp32/tf32, 11.0 GiB AMP; issue 14) */
  const double G = 1024.0 * 1024 * 1024;
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++) {
    CHECK(dpt_cuda_plan_build(&big, 256, prec, 0, &p, &err) == 0, "plan: %s", err.msg);
    check_plan_consistent(&big, &p, 0);
    printf("resnet50 b256 %-5s planned peak %.2f GiB + workspace <= 0.50 GiB: arena %.2f GiB (activations %.2f + "
           "gradients %.2f side by side), FC cast %.4f, weight copies %.3f, slabs+SGD %.3f GiB\n",
           dpt_cuda_precision_name(prec), p.total_bytes / G, p.arena_bytes / G, p.act_bytes / G, p.diff_bytes / G,
           p.fc_cast_bytes / G, p.weight_copy_bytes / G,
           (p.region[DPT_CUDA_R_PARAMS] + p.region[DPT_CUDA_R_GRADS] + p.region[DPT_CUDA_R_SGD]) / G);
    CHECK(p.arena_bytes < (p.act_bytes + p.diff_bytes) * 3 / 4, "%s: arena %.2f GiB not far below %.2f GiB",
          dpt_cuda_precision_name(prec), p.arena_bytes / G, (p.act_bytes + p.diff_bytes) / G);
    dpt_cuda_plan_free(&p);
  }
  /* the largest batch that fits */
  size_t need = 0, reserve = (size_t)512 << 20;
  CHECK(dpt_cuda_plan_build(&big, 64, DPT_CUDA_FP32, 0, &p, &err) == 0, "plan: %s", err.msg);
  size_t at64 = p.total_bytes;
  dpt_cuda_plan_free(&p);
  CHECK(dpt_cuda_plan_build(&big, 65, DPT_CUDA_FP32, 0, &p, &err) == 0, "plan: %s", err.msg);
  size_t at65 = p.total_bytes;
  dpt_cuda_plan_free(&p);
  int fit = dpt_cuda_plan_fit(&big, DPT_CUDA_FP32, 0, 256, at64 + reserve, reserve, &need, &err);
  CHECK(fit == 64 && need > at64 + reserve, "fit %d (need %zu) for memory of exactly batch 64", fit, need);
  fit = dpt_cuda_plan_fit(&big, DPT_CUDA_FP32, 0, 256, at65 + reserve - 1, reserve, &need, &err);
  CHECK(fit == 64, "one byte short of batch 65: %d", fit);
  fit = dpt_cuda_plan_fit(&big, DPT_CUDA_FP32, 0, 32, (size_t)80 << 30, reserve, &need, &err);
  CHECK(fit == 32, "batch 32 fits 80 GiB: %d", fit);
  fit = dpt_cuda_plan_fit(&big, DPT_CUDA_FP32, 0, 32, (size_t)1 << 20, reserve, &need, &err);
  CHECK(fit == 0, "1 MiB fits nothing: %d", fit);
  CHECK(dpt_cuda_plan_fit(&big, DPT_CUDA_FP32, 0, 0, (size_t)1 << 30, reserve, &need, &err) == DPT_E_INPUT,
        "batch 0 is bad input");
  dpt_model_free(&big);
  dpt_model_free(&tiny);
}

/* dpt_cuda_arena_place on hand-made intervals. */
static void test_arena_place(void)
{
  size_t b[4] = {100, 300, 200, 50}, off[4];
  int lo[4] = {0, 0, 2, 1}, hi[4] = {1, 1, 3, 5};
  size_t top = dpt_cuda_arena_place(4, b, lo, hi, 1, off);
  /* 1 [0,1] and 0 [0,1] and 3 [1,5] are live together at step 1: 650 bytes; 2 [2,3] reuses 1's or 0's */
  CHECK(top == 450 || top == 650, "arena %zu", top);
  CHECK(top >= 450, "busiest step needs 450");
  CHECK(off[1] == 0 && off[0] == 300, "largest first at 0: %zu %zu", off[1], off[0]);
  CHECK(off[2] + 200 <= off[3] || off[3] + 50 <= off[2], "2 and 3 live together at 2..3");
  int lo2[1] = {3}, hi2[1] = {2};
  size_t b2[1] = {10}, o2[1];
  CHECK(dpt_cuda_arena_place(1, b2, lo2, hi2, 256, o2) == 0, "a buffer that is never live takes nothing");
}

static void test_resnet50(void)
{
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  struct dpt_err err = {0};
  struct dpt_cuda_plan p;
  dpt_model_cfg_default(&cfg);
  if (dpt_model_resnet50(&m, &cfg, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  CHECK(dpt_cuda_plan_build(&m, 32, DPT_CUDA_FP32, 0, &p, &err) == 0, "plan: %s", err.msg);
  CHECK(p.n_conv == 53, "%d convolutions", p.n_conv);
  CHECK(p.n_shapes == 23, "%d distinct convolution shapes, expected 23", p.n_shapes);
  expect_conv(&m, &p, "conv1", 3, 224, 64, 7, 2, 3, 112);
  expect_conv(&m, &p, "layer1.0.conv1", 64, 56, 64, 1, 1, 0, 56);
  expect_conv(&m, &p, "layer1.0.conv2", 64, 56, 64, 3, 1, 1, 56);
  expect_conv(&m, &p, "layer1.0.downsample.0", 64, 56, 256, 1, 1, 0, 56);
  expect_conv(&m, &p, "layer2.0.conv1", 256, 56, 128, 1, 1, 0, 56);
  expect_conv(&m, &p, "layer2.0.conv2", 128, 56, 128, 3, 2, 1, 28); /* v1.5: stride on the 3x3 */
  expect_conv(&m, &p, "layer2.0.downsample.0", 256, 56, 512, 1, 2, 0, 28);
  expect_conv(&m, &p, "layer3.5.conv3", 256, 14, 1024, 1, 1, 0, 14);
  expect_conv(&m, &p, "layer4.2.conv3", 512, 7, 2048, 1, 1, 0, 7);
  CHECK(conv_named(&m, &p, "layer1.0.conv3")->shape_id ==
            conv_named(&m, &p, "layer1.0.downsample.0")->shape_id, "conv3 == projection shape in layer1");
  CHECK(p.t[0].nhwc == 1 && p.t[0].elem_bytes == 4 && p.t[0].c_stored == 3, "fp32 input NHWC unpadded");
  CHECK(!p.bn_persistent_train, "fp32 oracle uses plain spatial BN");
  for (int i = 0; i < p.n_conv; i++) CHECK(!p.conv[i].tensor_core, "fp32 conv %d on tensor cores", i);
  check_plan_consistent(&m, &p, 0);
  /* 25,557,032 parameters in each slab */
  CHECK(p.param_bytes == 4 * (size_t)25557032, "param slab %zu bytes", p.param_bytes);
  size_t fp32_act = p.act_bytes;
  printf("resnet50 fp32 b32: %d convs, %d shapes, activations %.1f MiB, total %.1f MiB\n", p.n_conv,
         p.n_shapes, fp32_act / 1048576.0, p.total_bytes / 1048576.0);
  dpt_cuda_plan_free(&p);

  CHECK(dpt_cuda_plan_build(&m, 32, DPT_CUDA_TF32, 0, &p, &err) == 0, "plan: %s", err.msg);
  for (int i = 0; i < p.n_conv; i++) CHECK(p.conv[i].tensor_core, "tf32 conv %d not on tensor cores", i);
  size_t nhwc_weights = p.region[DPT_CUDA_R_WEIGHTS], nhwc_total = p.total_bytes, nhwc_act = p.act_bytes;
  dpt_cuda_plan_free(&p);

  /* DPT_CUDA_LAYOUT's values */
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++) {
    enum dpt_cuda_precision pp = (enum dpt_cuda_precision)prec;
    int fp32 = prec == DPT_CUDA_FP32;
    CHECK(dpt_cuda_layout_nchw(NULL, pp) == fp32 && dpt_cuda_layout_nchw("", pp) == fp32 &&
              dpt_cuda_layout_nchw("auto", pp) == fp32 && dpt_cuda_layout_nchw("nhwc", pp) == 0 &&
              dpt_cuda_layout_nchw("nchw", pp) == 1 && dpt_cuda_layout_nchw("NCHW", pp) == -1 &&
              dpt_cuda_layout_nchw("nhwc ", pp) == -1, "DPT_CUDA_LAYOUT at %s", dpt_cuda_precision_name(pp));
  }
  /* fp32_nchw (the backend's fp32 default): every tensor NCHW, no conv weight copy nor KRSC
   * weight-gradient buffer (the slabs' KCRS in place), activations as large as NHWC's; the same
   * at tf32; ignored with fuse and at mixed / bf16 */
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++)
    for (int fuse = 0; fuse < 2; fuse++) {
      struct dpt_cuda_plan_opts po = {fuse, NULL, 1};
      CHECK(dpt_cuda_plan_build_ex(&m, 32, (enum dpt_cuda_precision)prec, 1, &po, &p, &err) == 0, "plan: %s",
            err.msg);
      int want = !fuse && !dpt_cuda_precision_half((enum dpt_cuda_precision)prec), bad = 0;
      for (int i = 0; i < m.n_tensors; i++) bad += p.t[i].nhwc == want;
      CHECK(p.nchw == want && !bad, "%s fuse %d: nchw %d, %d tensors in the other layout",
            dpt_cuda_precision_name((enum dpt_cuda_precision)prec), fuse, p.nchw, bad);
      if (want) {
        for (int i = 0; i < p.n_conv; i++)
          CHECK(p.wcopy_off[p.conv[i].layer] == (size_t)-1, "NCHW: %s has a weight copy",
                m.layers[p.conv[i].layer].name);
        CHECK(p.t[0].c_stored == 3 && p.act_bytes == nhwc_act, "NCHW: input c %d, activations %zu vs %zu",
              p.t[0].c_stored, p.act_bytes, nhwc_act);
        /* the weight region keeps only its 1-alignment-unit placeholder for the gradient buffer */
        CHECK(p.region[DPT_CUDA_R_WEIGHTS] < nhwc_weights / 100 && p.total_bytes < nhwc_total,
              "NCHW: weight region %zu (NHWC %zu), total %zu (NHWC %zu)", p.region[DPT_CUDA_R_WEIGHTS],
              nhwc_weights, p.total_bytes, nhwc_total);
        check_plan_consistent(&m, &p, 1);
      }
      dpt_cuda_plan_free(&p);
    }

  CHECK(dpt_cuda_plan_build(&m, 32, DPT_CUDA_MIXED, 1, &p, &err) == 0, "plan: %s", err.msg);
  check_plan_consistent(&m, &p, 1);
  CHECK(p.t[0].c_stored == 8 && p.t[0].nhwc && p.t[0].elem_bytes == 2, "mixed input: c %d nhwc %d",
        p.t[0].c_stored, p.t[0].nhwc);
  const struct dpt_cuda_conv_plan *stem = conv_named(&m, &p, "conv1");
  CHECK(stem && stem->c == 8 && stem->c_logical == 3, "stem filter channels padded to 8");
  CHECK(p.n_shapes == 23, "mixed: %d shapes", p.n_shapes);
  for (int i = 0; i < p.n_conv; i++)
    CHECK(p.conv[i].tensor_core, "mixed: %s not tensor-core eligible", m.layers[p.conv[i].layer].name);
  int logits = m.layers[m.n_layers - 1].out;
  for (int i = 1; i < m.n_tensors; i++) {
    int fc = i == logits;
    CHECK(p.t[i].elem_bytes == (fc ? 4 : 2) && p.t[i].nhwc && p.t[i].c_stored == p.t[i].c,
          "mixed tensor %d: %d bytes nhwc %d", i, p.t[i].elem_bytes, p.t[i].nhwc);
  }
  CHECK(p.bn_persistent_train, "mixed uses persistent BN for training");
  {
    struct dpt_cuda_plan q;
    CHECK(dpt_cuda_plan_build(&m, 32, DPT_CUDA_BF16, 1, &q, &err) == 0, "bf16 plan: %s", err.msg);
    check_plan_consistent(&m, &q, 1);
    CHECK(q.act_bytes == p.act_bytes && q.t[0].c_stored == 8 && q.bn_persistent_train && q.conv[0].tensor_core,
          "bf16 stores like fp16");
    dpt_cuda_plan_free(&q);
  }
  /* fp16 activations: about half of fp32 (the padded input and fp32 logits aside) */
  size_t in32 = (size_t)32 * 3 * 224 * 224 * 4, in16 = (size_t)32 * 8 * 224 * 224 * 2;
  size_t lg = (size_t)32 * 1000 * 4;
  CHECK(p.act_bytes == (fp32_act - in32 - lg) / 2 + in16 + lg, "mixed activations %zu", p.act_bytes);
  dpt_cuda_plan_free(&p);

  /* narrow variant: 4-channel stages are not tensor-core eligible, and the plan says which */
  struct dpt_model n;
  cfg.width = 1.0 / 16;
  cfg.image_size = 32;
  cfg.small_stem = 1;
  cfg.num_classes = 10;
  if (dpt_model_resnet50(&n, &cfg, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  CHECK(dpt_cuda_plan_build(&n, 4, DPT_CUDA_MIXED, 0, &p, &err) == 0, "plan: %s", err.msg);
  int ineligible = 0;
  for (int i = 0; i < p.n_conv; i++) {
    int want = p.conv[i].c % 8 == 0 && p.conv[i].k % 8 == 0;
    CHECK(p.conv[i].tensor_core == want, "%s: c %d k %d eligible %d", n.layers[p.conv[i].layer].name,
          p.conv[i].c, p.conv[i].k, p.conv[i].tensor_core);
    ineligible += !want;
  }
  CHECK(ineligible > 0, "width 1/16 has 4-channel convolutions");
  check_plan_consistent(&n, &p, 0);
  dpt_cuda_plan_free(&p);

  /* bad input */
  CHECK(dpt_cuda_plan_build(&m, 0, DPT_CUDA_FP32, 0, &p, &err) == DPT_E_INPUT &&
            strstr(err.msg, "batch size 0"), "batch 0: %s", err.msg);
  int t = m.layers[0].out;
  m.tensors[t].h += 1; /* corrupt the stem's output */
  CHECK(dpt_cuda_plan_build(&m, 8, DPT_CUDA_FP32, 0, &p, &err) == DPT_E_INPUT &&
            strstr(err.msg, "'conv1'") && strstr(err.msg, "cuDNN"), "corrupt shape: %s", err.msg);
  m.tensors[t].h -= 1;
  dpt_model_free(&n);
  dpt_model_free(&m);
}

static void test_algo_choice(void)
{
  struct dpt_cuda_algo_cand c[] = {
      {1, 1, 0.50f, 0, 1, 0},                 /* implicit GEMM: no workspace, slow */
      {6, 1, 0.20f, (size_t)300 << 20, 0, 0}, /* fast, big workspace, non-deterministic */
      {2, 1, 0.30f, (size_t)64 << 20, 1, 0},
      {7, 0, 0.05f, 0, 1, 0},                 /* status != success */
  };
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)512 << 20, 0) == 1, "fastest within 512 MiB");
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)512 << 20, 1) == 2, "fastest deterministic");
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)100 << 20, 0) == 2, "fastest within 100 MiB");
  CHECK(dpt_cuda_pick_algo(c, 4, 0, 0) == 0, "zero workspace -> the workspace-free algorithm");
  CHECK(dpt_cuda_pick_algo(c + 1, 3, 0, 0) == -1, "nothing fits");
  struct dpt_cuda_algo_cand h[] = {{5, 1, -1, (size_t)10 << 20, 1, 0}, {0, 1, -1, 0, 1, 0}};
  CHECK(dpt_cuda_pick_algo(h, 2, (size_t)20 << 20, 0) == 0, "heuristics: cuDNN's order");
  CHECK(dpt_cuda_pick_algo(h, 2, (size_t)1 << 20, 0) == 1, "heuristics: first that fits");
  struct dpt_cuda_algo_cand t[] = {
      {5, 1, 0.10f, (size_t)10 << 20, 1, 1}, /* FFT tiling: deterministic, fastest, a transform */
      {1, 1, 0.40f, 0, 1, 0},               /* implicit precomputed GEMM */
      {7, 1, 0.20f, (size_t)20 << 20, 1, 1}, /* Winograd non-fused */
  };
  CHECK(dpt_cuda_pick_algo(t, 3, (size_t)512 << 20, 0) == 0, "any: the fastest transform");
  CHECK(dpt_cuda_pick_algo(t, 3, (size_t)512 << 20, 1) == 1, "oracle: the sum of products, though slower");
  CHECK(dpt_cuda_pick_algo(t, 1, (size_t)512 << 20, 1) == -1, "oracle: a transform alone is none");

  size_t G = (size_t)1 << 30, M = (size_t)1 << 20;
  CHECK(dpt_cuda_workspace_limit(16 * G, 4 * G, 0) == 16 * G - 4 * G - G, "reserve 1/16 of 16 GiB");
  CHECK(dpt_cuda_workspace_limit(16 * G, 4 * G, 512 * M) == 512 * M, "cap");
  CHECK(dpt_cuda_workspace_limit(512 * M, 100 * M, 0) == 512 * M - 100 * M - 64 * M, "64 MiB floor");
  CHECK(dpt_cuda_workspace_limit(100 * M, 90 * M, 0) == 0, "nothing left");
}

static void test_loss_scaler(void)
{
  struct dpt_loss_scaler s;
  dpt_loss_scaler_init(&s);
  CHECK(s.scale == 65536.0f, "initial scale");
  CHECK(dpt_loss_scaler_update(&s, 1) == 0 && s.scale == 32768.0f && s.skipped == 1, "overflow halves");
  for (int i = 0; i < 1999; i++) CHECK(dpt_loss_scaler_update(&s, 0) == 1, "good step applies");
  CHECK(s.scale == 32768.0f, "no growth before 2000 good steps");
  dpt_loss_scaler_update(&s, 0);
  CHECK(s.scale == 65536.0f && s.good_steps == 0, "growth after 2000 good steps: %g", s.scale);
  for (int i = 0; i < 40; i++) dpt_loss_scaler_update(&s, 1);
  CHECK(s.scale == 1.0f && s.skipped == 41, "floor at 1: %g", s.scale);
  s.scale = s.max_scale;
  s.growth_interval = 1;
  dpt_loss_scaler_update(&s, 0);
  CHECK(s.scale == s.max_scale, "ceiling");
  CHECK(dpt_cuda_precision_parse("fp32") == DPT_CUDA_FP32 && dpt_cuda_precision_parse("tf32") == DPT_CUDA_TF32 &&
            dpt_cuda_precision_parse("mixed") == DPT_CUDA_MIXED && dpt_cuda_precision_parse("fp64") == -1 &&
            dpt_cuda_precision_parse("bf16") == DPT_CUDA_BF16 && dpt_cuda_precision_parse("fp16") == DPT_CUDA_MIXED,
        "precision names");
  CHECK(dpt_cuda_stored_channels(3, 1, DPT_CUDA_MIXED) == 8 && dpt_cuda_stored_channels(1, 1, DPT_CUDA_MIXED) == 8 &&
            dpt_cuda_stored_channels(16, 1, DPT_CUDA_MIXED) == 16 &&
            dpt_cuda_stored_channels(3, 1, DPT_CUDA_FP32) == 3 &&
            dpt_cuda_stored_channels(4, 0, DPT_CUDA_MIXED) == 4 && dpt_cuda_stored_channels(3, 1, DPT_CUDA_BF16) == 8 &&
            dpt_cuda_stored_channels(3, 1, DPT_CUDA_TF32) == 3, "channel padding rule");
}

/* BN through cudnnBatchNormalization*Ex only where its 16-byte vector accesses are aligned: at
 * every width, each accepted layer's gamma, beta, running mean / variance (and dgamma / dbeta, at
 * gamma's offsets in the gradient slab), saved mean / inverse std start on 16 bytes; the tight
 * fixture's width 1/32 (gamma 8 bytes off in all 53, C = 2 in the stem and layer1) gets none, the
 * normal fixture's width 1/8 all 53 (the second GPU visit: Ex faulted there with "misaligned
 * address" at tf32, its first kernel with 16-byte loads of 8-byte-aligned slab vectors). */
static void test_bn_ex_alignment(void)
{
  static const double widths[] = {0.03125, 0.0625, 0.125, 0.25, 1.0};
  for (int w = 0; w < 5; w++) {
    struct dpt_model m;
    struct dpt_model_cfg cfg;
    struct dpt_err err = {0};
    dpt_model_cfg_default(&cfg);
    cfg.width = widths[w];
    cfg.small_stem = 1, cfg.image_size = 8, cfg.num_classes = 10;
    if (dpt_model_resnet50(&m, &cfg, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      exit(1);
    }
    size_t saved = 0; /* the backend's BN region: [mean C][istd C] per BN in layer order */
    int n_bn = 0, n_ok = 0;
    for (int li = 0; li < m.n_layers; li++) {
      const struct dpt_layer_desc *l = &m.layers[li];
      if (l->type != DPT_LAYER_BN) continue;
      size_t c = (size_t)l->c_out, v[6] = {l->w_off, l->w_off + c, l->b_off, l->s_off, l->s_off + c, saved + c};
      int ok = dpt_cuda_bn_ex_aligned(&m, li, saved);
      n_bn++, n_ok += ok;
      for (int k = 0; ok && k < 6; k++)
        CHECK(v[k] * sizeof(float) % 16 == 0, "width %g: '%s' through Ex with vector %d at byte %zu", widths[w],
              l->name, k, v[k] * sizeof(float));
      CHECK(!ok || saved * sizeof(float) % 16 == 0, "width %g: '%s' saved mean unaligned", widths[w], l->name);
      saved += 2 * c;
    }
    if (w == 0) CHECK(n_ok == 0, "width 1/32: %d of %d BNs through Ex, expected none", n_ok, n_bn);
    if (w == 2) CHECK(n_ok == n_bn && n_bn == 53, "width 1/8: %d of %d BNs through Ex, expected 53", n_ok, n_bn);
    printf("bn ex alignment: width %g: %d of %d BN layers through Ex\n", widths[w], n_ok, n_bn);
    dpt_model_free(&m);
  }
}

/* dpt_cuda_region_gap: hand cases, then random ones against a scan of every aligned offset (it
 * returns the lowest that fits) */
static size_t gap_scan(size_t region, const size_t *off, const size_t *len, int n, size_t need, size_t align)
{
  for (size_t at = 0; at + need <= region; at += align) {
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= !len[i] || !(off[i] < at + need && at < off[i] + len[i]);
    if (ok) return at;
  }
  return (size_t)-1;
}

static void test_region_gap(void)
{
  const size_t none = (size_t)-1;
  size_t o1[] = {0}, l1[] = {100};
  CHECK(dpt_cuda_region_gap(4096, NULL, NULL, 0, 4096, 256) == 0, "empty region: the start");
  CHECK(dpt_cuda_region_gap(4096, o1, l1, 1, 50, 256) == 256, "past a busy start, aligned");
  size_t o2[] = {1000, 500, 0}, l2[] = {1000, 700, 0}; /* unsorted, overlapping, one empty */
  CHECK(dpt_cuda_region_gap(4096, o2, l2, 3, 400, 256) == 0, "a gap before the ranges");
  CHECK(dpt_cuda_region_gap(4096, o2, l2, 3, 600, 256) == 2048, "past two overlapping ranges");
  CHECK(dpt_cuda_region_gap(2600, o2, l2, 3, 600, 256) == none, "no room after them");
  size_t o3[] = {0}, l3[] = {512};
  CHECK(dpt_cuda_region_gap(1024, o3, l3, 1, 512, 256) == 512 && dpt_cuda_region_gap(1024, o3, l3, 1, 513, 256) == none,
        "an exact fit at the end, one byte more none");
  CHECK(dpt_cuda_region_gap(100, NULL, NULL, 0, 101, 256) == none, "larger than the region");
  unsigned seed = 7;
  int bad = 0;
  for (int t = 0; t < 2000; t++) {
    size_t off[4], len[4], region = 64 + (rand_r(&seed) % 4096), need = 1 + rand_r(&seed) % 1024;
    size_t align = (size_t)1 << (rand_r(&seed) % 9);
    int n = rand_r(&seed) % 5;
    for (int i = 0; i < n; i++) off[i] = rand_r(&seed) % region, len[i] = rand_r(&seed) % 1024;
    size_t got = dpt_cuda_region_gap(region, off, len, n, need, align), want = gap_scan(region, off, len, n, need, align);
    if (got != want && bad++ < 3)
      fprintf(stderr, "region %zu need %zu align %zu n %d: %zu, the scan %zu\n", region, need, align, n, got, want);
  }
  CHECK(bad == 0, "region gap: %d of 2000 random cases differ from the scan", bad);
}

int main(void)
{
  test_region_gap();
  test_bn_ex_alignment();
  test_resnet50();
  test_arena_place();
  test_regions_and_fit();
  test_algo_choice();
  test_loss_scaler();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
