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
 *  - Mixed precision: NHWC fp16 everywhere except the logits (fp32), the RGB
 *    input padded to 8 channels and the stem filter with it, every ResNet-50
 *    conv tensor-core eligible, persistent BN for training; a width-1/16
 *    variant has convolutions with 4 channels that the plan marks ineligible.
 *  - Memory plan: every part recomputed here from the model.
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
  size_t act = 0, diff = 0, big = 0, bn = 0, half = 0;
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
    if (p->precision == DPT_CUDA_MIXED && l->type == DPT_LAYER_CONV)
      half += 4 * (size_t)l->c_out * p->t[l->in[0]].c_stored * l->kernel * l->kernel;
    if (p->precision == DPT_CUDA_MIXED && l->type == DPT_LAYER_FC) half += 4 * l->w_len;
  }
  CHECK(p->act_bytes == act && p->diff_bytes == diff && p->scratch_bytes == big, "activation memory");
  CHECK(p->bn_saved_bytes == bn && p->half_weight_bytes == half, "bn %zu/%zu fp16 weights %zu/%zu",
        p->bn_saved_bytes, bn, p->half_weight_bytes, half);
  CHECK(p->param_bytes == 4 * m->n_params && p->grad_bytes == p->param_bytes &&
            p->state_bytes == 4 * m->n_state, "slabs");
  CHECK(p->total_bytes == p->param_bytes + p->grad_bytes + p->state_bytes + act + diff + big + half +
                              bn + p->io_bytes, "total");
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
  CHECK(p.t[0].nhwc == 0 && p.t[0].elem_bytes == 4 && p.t[0].c_stored == 3, "fp32 input NCHW unpadded");
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
  dpt_cuda_plan_free(&p);

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
    CHECK(p.t[i].elem_bytes == (fc ? 4 : 2) && p.t[i].nhwc == !fc && p.t[i].c_stored == p.t[i].c,
          "mixed tensor %d: %d bytes nhwc %d", i, p.t[i].elem_bytes, p.t[i].nhwc);
  }
  CHECK(p.bn_persistent_train, "mixed uses persistent BN for training");
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
      {1, 1, 0.50f, 0, 1},             /* implicit GEMM: no workspace, slow */
      {6, 1, 0.20f, (size_t)300 << 20, 0}, /* fast, big workspace, non-deterministic */
      {2, 1, 0.30f, (size_t)64 << 20, 1},
      {7, 0, 0.05f, 0, 1},             /* status != success */
  };
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)512 << 20, 0) == 1, "fastest within 512 MiB");
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)512 << 20, 1) == 2, "fastest deterministic");
  CHECK(dpt_cuda_pick_algo(c, 4, (size_t)100 << 20, 0) == 2, "fastest within 100 MiB");
  CHECK(dpt_cuda_pick_algo(c, 4, 0, 0) == 0, "zero workspace -> the workspace-free algorithm");
  CHECK(dpt_cuda_pick_algo(c + 1, 3, 0, 0) == -1, "nothing fits");
  struct dpt_cuda_algo_cand h[] = {{5, 1, -1, (size_t)10 << 20, 1}, {0, 1, -1, 0, 1}};
  CHECK(dpt_cuda_pick_algo(h, 2, (size_t)20 << 20, 0) == 0, "heuristics: cuDNN's order");
  CHECK(dpt_cuda_pick_algo(h, 2, (size_t)1 << 20, 0) == 1, "heuristics: first that fits");

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
            dpt_cuda_precision_parse("mixed") == DPT_CUDA_MIXED && dpt_cuda_precision_parse("fp64") == -1,
        "precision names");
  CHECK(dpt_cuda_stored_channels(3, 1, DPT_CUDA_MIXED) == 8 && dpt_cuda_stored_channels(1, 1, DPT_CUDA_MIXED) == 8 &&
            dpt_cuda_stored_channels(16, 1, DPT_CUDA_MIXED) == 16 &&
            dpt_cuda_stored_channels(3, 1, DPT_CUDA_FP32) == 3 &&
            dpt_cuda_stored_channels(4, 0, DPT_CUDA_MIXED) == 4, "channel padding rule");
}

int main(void)
{
  test_resnet50();
  test_algo_choice();
  test_loss_scaler();
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
