/* test_cuda_fuse: the fused-block plan of the GPU step (trainer/cuda/dpt_cuda_fuse.h), host-only.
 *
 *  - ResNet-50 v1.5, 224 px, fp16/bf16 (channel multiple 8, RGB padded to 8): every op kind
 *    counted against the derivation from the network (16 bottlenecks, 4 with a projection),
 *    every convolution in exactly one forward op, every BN finalized once, the dataflow
 *    replay (dpt_cuda_fuse_check) passes, every written activation is read, the tensors
 *    written / kept for backward against the unfused plan (counts and bytes at batch 256),
 *    launches per step implied, deterministic (two builds, same bytes).
 *  - fp32/tf32 (channel multiple 4, RGB not padded): the stem convolution and its BN stay
 *    legacy, everything else fuses.
 *  - width 1/8 small stem (Fashion-MNIST's default network): the stem BN feeds two
 *    convolutions (layer1.0.conv1 and its projection), so it is applied once and written.
 *  - width 1/16 in fp16: the 4-channel convolutions stay legacy, with their BNs.
 *  - the unfused plan (fuse = 0): one legacy op per layer and pass, and it replays too.
 *  - broken models refused naming the layer; broken plans refused by the replay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cuda_fuse.h"
#include "dpt_model.h"

#include "dpt_check.h"

static void resnet(struct dpt_model *m, int image, int classes, int small_stem, double width, int in_c)
{
  struct dpt_model_cfg cfg;
  struct dpt_err err;
  dpt_model_cfg_default(&cfg);
  cfg.image_size = image;
  cfg.num_classes = classes;
  cfg.small_stem = small_stem;
  cfg.width = width;
  cfg.in_channels = in_c;
  if (dpt_model_resnet50(m, &cfg, &err)) {
    fprintf(stderr, "resnet50: %s\n", err.msg);
    exit(1);
  }
}

static void clone(struct dpt_model *dst, const struct dpt_model *src)
{
  *dst = *src;
  dst->layers = malloc((size_t)src->n_layers * sizeof *dst->layers);
  dst->tensors = malloc((size_t)src->n_tensors * sizeof *dst->tensors);
  if (!dst->layers || !dst->tensors) exit(1);
  memcpy(dst->layers, src->layers, (size_t)src->n_layers * sizeof *dst->layers);
  memcpy(dst->tensors, src->tensors, (size_t)src->n_tensors * sizeof *dst->tensors);
}

static int layer_named(const struct dpt_model *m, const char *name)
{
  for (int i = 0; i < m->n_layers; i++)
    if (!strcmp(m->layers[i].name, name)) return i;
  return -1;
}

static int n_kind(const struct dpt_fuse_plan *p, int kind, int backward)
{
  int n = 0;
  for (int i = 0; i < p->n_ops; i++) n += p->ops[i].kind == kind && p->ops[i].backward == backward;
  return n;
}

static int build_ok(const struct dpt_model *m, const struct dpt_fuse_cfg *cfg, struct dpt_fuse_plan *p,
                    const char *what)
{
  struct dpt_err err;
  int rc = dpt_cuda_fuse_build(m, cfg, p, &err);
  CHECK(rc == 0, "%s: build: %s", what, err.msg);
  if (rc) return 0;
  rc = dpt_cuda_fuse_check(m, p, &err);
  CHECK(rc == 0, "%s: replay: %s", what, err.msg);
  return rc == 0;
}

/* Independent of the replay: each convolution in exactly one forward op, each BN finalized
 * once, no backward op reads an activation the forward pass did not write. */
static void properties(const struct dpt_model *m, const struct dpt_fuse_plan *p, const char *what)
{
  for (int l = 0; l < m->n_layers; l++) {
    int conv = 0, fin = 0;
    for (int i = 0; i < p->n_fwd; i++) {
      const struct dpt_fop *op = &p->ops[i];
      conv += op->conv == l;
      fin += (op->kind == DPT_FOP_BN_FINALIZE && op->bn[0] == l) ||
             (op->kind == DPT_FOP_LEGACY_FWD && op->layer == l && m->layers[l].type == DPT_LAYER_BN);
    }
    if (m->layers[l].type == DPT_LAYER_CONV)
      CHECK(conv == 1, "%s: %s in %d forward ops", what, m->layers[l].name, conv);
    if (m->layers[l].type == DPT_LAYER_BN) CHECK(fin == 1, "%s: %s finalized %d times", what, m->layers[l].name, fin);
  }
  for (int i = p->n_fwd; i < p->n_ops; i++)
    for (int k = 0; k < p->ops[i].n_in; k++)
      if (p->ops[i].in[k].kind == DPT_FREF_ACT)
        CHECK(p->act_written[p->ops[i].in[k].id], "%s: backward op %d reads unwritten tensor %d", what, i,
              p->ops[i].in[k].id);
}

static void resnet50_half(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p, q, u;
  resnet(&m, 224, 1000, 0, 1.0, 3);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.input_c_stored = 8; /* dpt_cuda_plan pads RGB to 8 channels in fp16/bf16 */
  if (!build_ok(&m, &cfg, &p, "resnet50 fp16")) goto out;
  properties(&m, &p, "resnet50 fp16");
  /* Derivation.  53 convolutions: stem + 16 blocks x 3 + 4 projections; all fuse (channels are
   * multiples of 8 and each is read by exactly one BN).  conv + stats without a prologue: the
   * stem, conv1 of the 16 blocks (input = the previous block's output or the max-pool output)
   * and the 4 projections = 21; with the scale-bias-relu prologue: conv2 and conv3 of each
   * block = 32.  53 BN finalize.  The stem BN feeds the max pool: 1 apply.  Residual adds: 12
   * identity (SBAR), 4 projection (DSBAR).  Legacy: max pool, average pool, FC. */
  CHECK(m.n_conv == 53 && m.n_bn == 53, "model: %d conv %d bn", m.n_conv, m.n_bn);
  CHECK(n_kind(&p, DPT_FOP_CONV_STATS, 0) == 21, "conv_stats %d", n_kind(&p, DPT_FOP_CONV_STATS, 0));
  CHECK(n_kind(&p, DPT_FOP_SBR_CONV_STATS, 0) == 32, "sbr_conv_stats %d", n_kind(&p, DPT_FOP_SBR_CONV_STATS, 0));
  CHECK(n_kind(&p, DPT_FOP_BN_FINALIZE, 0) == 53, "bn_finalize %d", n_kind(&p, DPT_FOP_BN_FINALIZE, 0));
  CHECK(n_kind(&p, DPT_FOP_SBR_APPLY, 0) == 1, "sbr_apply %d", n_kind(&p, DPT_FOP_SBR_APPLY, 0));
  CHECK(n_kind(&p, DPT_FOP_SBAR, 0) == 12 && n_kind(&p, DPT_FOP_DSBAR, 0) == 4, "sbar %d dsbar %d",
        n_kind(&p, DPT_FOP_SBAR, 0), n_kind(&p, DPT_FOP_DSBAR, 0));
  CHECK(n_kind(&p, DPT_FOP_LEGACY_FWD, 0) == 3, "legacy forward %d", n_kind(&p, DPT_FOP_LEGACY_FWD, 0));
  CHECK(p.n_fwd == 126, "forward ops %d (21 + 32 + 53 + 1 + 12 + 4 + 3)", p.n_fwd);
  /* Backward.  Identity block: dBN weight of bn3 with the add's ReLU backward, forking g into
   * the block input's gradient; bn3 apply; conv3 and conv2: sbr_wgrad + dgrad_drelu_dbn (bn2,
   * bn1) + dBN apply; conv1: wgrad + dgrad accumulating onto g = 10.  Projection block: 2 dBN
   * weights (bn3, downsample BN on g), 2 applies, 3 + 3, projection wgrad + dgrad, conv1 wgrad
   * + dgrad = 14.  Stem: dBN weight + apply of bn1 (ReLU mask from its written output), wgrad
   * (no input gradient) = 3.  Legacy: FC, average pool, max pool = 3.  3 + 120 + 56 + 3. */
  CHECK(p.n_ops - p.n_fwd == 182, "backward ops %d", p.n_ops - p.n_fwd);
  CHECK(n_kind(&p, DPT_FOP_SBR_WGRAD, 1) == 32 && n_kind(&p, DPT_FOP_DGRAD_DRELU_DBN, 1) == 32,
        "sbr_wgrad %d dgrad_drelu_dbn %d", n_kind(&p, DPT_FOP_SBR_WGRAD, 1), n_kind(&p, DPT_FOP_DGRAD_DRELU_DBN, 1));
  CHECK(n_kind(&p, DPT_FOP_WGRAD, 1) == 21 && n_kind(&p, DPT_FOP_DGRAD, 1) == 20, "wgrad %d dgrad %d",
        n_kind(&p, DPT_FOP_WGRAD, 1), n_kind(&p, DPT_FOP_DGRAD, 1));
  CHECK(n_kind(&p, DPT_FOP_DBN_WEIGHT, 1) == 21 && n_kind(&p, DPT_FOP_DBN_APPLY, 1) == 53,
        "dbn_weight %d dbn_apply %d", n_kind(&p, DPT_FOP_DBN_WEIGHT, 1), n_kind(&p, DPT_FOP_DBN_APPLY, 1));
  CHECK(n_kind(&p, DPT_FOP_GRAD_ACC, 1) == 0, "grad_acc %d", n_kind(&p, DPT_FOP_GRAD_ACC, 1));
  /* the identity add forks g straight into the shortcut's gradient; conv1's dgrad accumulates */
  int add = layer_named(&m, "layer1.1.add"), c1 = layer_named(&m, "layer1.1.conv1");
  for (int i = p.n_fwd; i < p.n_ops; i++) {
    const struct dpt_fop *op = &p.ops[i];
    if (op->layer == add && op->kind == DPT_FOP_DBN_WEIGHT)
      CHECK(op->fork && op->relu && op->out[0].kind == DPT_FREF_DIFF && op->out[0].id == m.layers[c1].in[0],
            "layer1.1.add: fork %d relu %d out %d", op->fork, op->relu, op->out[0].id);
    if (op->layer == c1 && op->kind == DPT_FOP_DGRAD) CHECK(op->accumulate, "layer1.1.conv1 dgrad overwrites g");
  }
  int c2 = layer_named(&m, "layer2.0.conv2");
  for (int i = 0; i < p.n_fwd; i++)
    if (p.ops[i].conv == c2)
      CHECK(p.ops[i].kind == DPT_FOP_SBR_CONV_STATS && p.ops[i].bn[1] == layer_named(&m, "layer2.0.bn1") &&
                p.ops[i].relu, "layer2.0.conv2: %s", dpt_fop_name(p.ops[i].kind));
  /* activations: every BN output but the stem's is never written (52 of 126 tensors) */
  struct dpt_fuse_cfg ucfg = cfg;
  ucfg.fuse = 0;
  if (!build_ok(&m, &ucfg, &u, "resnet50 unfused")) goto out_p;
  const struct dpt_fuse_counts *f = &p.counts, *c = &u.counts;
  CHECK(c->act_written == m.n_tensors && f->act_written == m.n_tensors - 52, "written %d fused, %d unfused",
        f->act_written, c->act_written);
  /* kept for backward: fused, every written tensor but the logits (73); unfused, all but the
   * logits and the 20 BN outputs without ReLU (bn3, projection BNs: their backward reads x) */
  CHECK(f->act_kept == 73 && c->act_kept == 105, "kept %d fused, %d unfused", f->act_kept, c->act_kept);
  CHECK(f->act_kept_bytes < c->act_kept_bytes && f->act_written_bytes < c->act_written_bytes,
        "bytes: kept %zu vs %zu, written %zu vs %zu", f->act_kept_bytes, c->act_kept_bytes, f->act_written_bytes,
        c->act_written_bytes);
  CHECK(f->diff_written < c->diff_written, "gradients %d fused, %d unfused", f->diff_written, c->diff_written);
  printf("resnet50 fp16, batch 256: ops fused %d fwd + %d bwd (graph %d + %d, legacy %d + %d), unfused %d + %d\n",
         f->ops_fwd, f->ops_bwd, f->graph_fwd, f->graph_bwd, f->legacy_fwd, f->legacy_bwd, c->ops_fwd, c->ops_bwd);
  printf("  launches per step implied (forward + backward, without loss and optimizer): fused %d + %d = %d, "
         "unfused %d + %d = %d\n", f->launches_fwd, f->launches_bwd, f->launches_fwd + f->launches_bwd,
         c->launches_fwd, c->launches_bwd, c->launches_fwd + c->launches_bwd);
  printf("  activations written %d (%.2f GiB) vs %d (%.2f GiB); kept for backward %d (%.2f GiB) vs %d (%.2f GiB); "
         "gradients written %d (%.2f GiB) vs %d (%.2f GiB)\n",
         f->act_written, f->act_written_bytes / 1073741824.0, c->act_written, c->act_written_bytes / 1073741824.0,
         f->act_kept, f->act_kept_bytes / 1073741824.0, c->act_kept, c->act_kept_bytes / 1073741824.0,
         f->diff_written, f->diff_written_bytes / 1073741824.0, c->diff_written, c->diff_written_bytes / 1073741824.0);
  /* unfused launches: the calls dpt_backend_cuda.c makes (derivation in dpt_cuda_fuse.c):
   * forward conv 2 x 53, BN 53 + 33 ReLU, add 16, pools 2, FC 3 = 213; backward conv
   * 3 x 52 + 2, BN 53 + 33, add 16 + 32, pools 2, FC 4 = 298 */
  CHECK(c->launches_fwd == 213 && c->launches_bwd == 298, "unfused launches %d + %d", c->launches_fwd,
        c->launches_bwd);
  CHECK(f->launches_fwd + f->launches_bwd < c->launches_fwd + c->launches_bwd, "fused launches not fewer");
  /* deterministic */
  if (build_ok(&m, &cfg, &q, "resnet50 fp16 again")) {
    CHECK(q.n_ops == p.n_ops && !memcmp(q.ops, p.ops, (size_t)p.n_ops * sizeof *p.ops) &&
              !memcmp(q.bn_mode, p.bn_mode, (size_t)m.n_layers * sizeof *p.bn_mode),
          "two builds differ");
    dpt_cuda_fuse_free(&q);
  }
  if (getenv("DPT_FUSE_PRINT")) dpt_cuda_fuse_print(&m, &p, stdout);
  dpt_cuda_fuse_free(&u);
out_p:
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

static void resnet50_fp32(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  resnet(&m, 224, 1000, 0, 1.0, 3);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.channel_multiple = 4;
  cfg.elem_bytes = 4;
  if (!build_ok(&m, &cfg, &p, "resnet50 tf32")) goto out;
  properties(&m, &p, "resnet50 tf32");
  int stem = layer_named(&m, "conv1"), bn1 = layer_named(&m, "bn1");
  CHECK(!p.conv_fused[stem] && p.bn_mode[bn1] == DPT_FBN_LEGACY, "stem: fused %d bn mode %d", p.conv_fused[stem],
        p.bn_mode[bn1]);
  int fused = 0;
  for (int l = 0; l < m.n_layers; l++) fused += p.conv_fused[l];
  CHECK(fused == 52, "%d convolutions fused (all but the 3-channel stem)", fused);
  CHECK(n_kind(&p, DPT_FOP_LEGACY_FWD, 0) == 5 && n_kind(&p, DPT_FOP_SBR_APPLY, 0) == 0,
        "legacy forward %d (stem conv, stem BN, max pool, average pool, FC), apply %d",
        n_kind(&p, DPT_FOP_LEGACY_FWD, 0), n_kind(&p, DPT_FOP_SBR_APPLY, 0));
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

static void small_stem(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  resnet(&m, 28, 10, 1, 0.125, 1);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.input_c_stored = 8;
  cfg.batch = 32;
  if (!build_ok(&m, &cfg, &p, "width 1/8 small stem")) goto out;
  properties(&m, &p, "width 1/8 small stem");
  int bn1 = layer_named(&m, "bn1"), c1 = layer_named(&m, "layer1.0.conv1"), ds = layer_named(&m, "layer1.0.downsample.0");
  CHECK(p.bn_mode[bn1] == DPT_FBN_APPLY, "stem bn1 mode %d (two convolutions read it)", p.bn_mode[bn1]);
  for (int i = 0; i < p.n_fwd; i++)
    if (p.ops[i].conv == c1 || p.ops[i].conv == ds)
      CHECK(p.ops[i].kind == DPT_FOP_CONV_STATS, "%s: %s", m.layers[p.ops[i].conv].name, dpt_fop_name(p.ops[i].kind));
  int fused = 0;
  for (int l = 0; l < m.n_layers; l++) fused += p.conv_fused[l];
  CHECK(fused == 53, "%d of 53 convolutions fused", fused);
  /* the stem BN's gradient comes from two dgrads: the second accumulates */
  int acc = 0;
  for (int i = p.n_fwd; i < p.n_ops; i++)
    if (p.ops[i].kind == DPT_FOP_DGRAD && (p.ops[i].conv == c1 || p.ops[i].conv == ds)) acc += p.ops[i].accumulate;
  CHECK(acc == 1, "%d of the two dgrads into the stem output accumulate", acc);
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

static void narrow(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  resnet(&m, 32, 10, 1, 1.0 / 16, 3);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.input_c_stored = 8;
  if (!build_ok(&m, &cfg, &p, "width 1/16")) goto out;
  properties(&m, &p, "width 1/16");
  int legacy = 0;
  for (int l = 0; l < m.n_layers; l++)
    if (m.layers[l].type == DPT_LAYER_CONV) {
      int narrow_c = m.tensors[m.layers[l].in[0]].c % 8 && l != 0, narrow_k = m.layers[l].c_out % 8;
      CHECK(p.conv_fused[l] == !(narrow_c || narrow_k), "%s (C %d K %d): fused %d", m.layers[l].name,
            m.tensors[m.layers[l].in[0]].c, m.layers[l].c_out, p.conv_fused[l]);
      legacy += !p.conv_fused[l];
    }
  CHECK(legacy > 0, "no 4-channel convolution in the width-1/16 network?");
  for (int l = 0; l < m.n_layers; l++)
    if (m.layers[l].type == DPT_LAYER_BN) {
      int pc = m.tensors[m.layers[l].in[0]].producer;
      CHECK((p.bn_mode[l] == DPT_FBN_LEGACY) == !p.conv_fused[pc], "%s mode %d after %s fused %d", m.layers[l].name,
            p.bn_mode[l], m.layers[pc].name, p.conv_fused[pc]);
    }
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

static void unfused(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  resnet(&m, 32, 10, 1, 0.125, 3);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.fuse = 0;
  cfg.need_input_grad = 1;
  if (!build_ok(&m, &cfg, &p, "unfused")) goto out;
  CHECK(p.n_fwd == m.n_layers && p.n_ops == 2 * m.n_layers, "ops %d / %d for %d layers", p.n_fwd, p.n_ops,
        m.n_layers);
  for (int i = 0; i < p.n_ops; i++)
    CHECK(p.ops[i].kind == (i < p.n_fwd ? DPT_FOP_LEGACY_FWD : DPT_FOP_LEGACY_BWD), "op %d is %s", i,
          dpt_fop_name(p.ops[i].kind));
  CHECK(p.diff_written[0], "need_input_grad: no input gradient");
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

/* A broken model is refused, the message naming the layer. */
static void expect_refused(const struct dpt_model *b, const char *layer, const char *what)
{
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  struct dpt_err err;
  dpt_cuda_fuse_cfg_default(&cfg);
  int rc = dpt_cuda_fuse_build(b, &cfg, &p, &err);
  CHECK(rc == DPT_E_INPUT, "%s: accepted (rc %d)", what, rc);
  if (rc == 0) {
    dpt_cuda_fuse_free(&p);
    return;
  }
  char quoted[64];
  snprintf(quoted, sizeof quoted, "'%s'", layer);
  CHECK(strstr(err.msg, quoted) != NULL, "%s: message does not name %s: %s", what, quoted, err.msg);
  printf("refused (%s): %s\n", what, err.msg);
}

static void broken_models(void)
{
  struct dpt_model m, b;
  resnet(&m, 32, 10, 1, 0.125, 3);
  int bn2 = layer_named(&m, "layer2.0.bn2"), add = layer_named(&m, "layer3.1.add"), c3 = layer_named(&m, "layer1.2.conv3");

  clone(&b, &m);
  b.layers[bn2].c_out += 1;
  expect_refused(&b, "layer2.0.bn2", "BN channels differ from its input");
  dpt_model_free(&b);

  clone(&b, &m);
  b.layers[add].in[1] = b.layers[layer_named(&m, "layer3.0.conv1")].out; /* 64 x 4 x 4 vs 128 x 4 x 4 */
  expect_refused(&b, "layer3.1.add", "add of different shapes");
  dpt_model_free(&b);

  clone(&b, &m);
  b.layers[c3].in[0] = m.n_tensors + 3;
  expect_refused(&b, "layer1.2.conv3", "input tensor out of range");
  dpt_model_free(&b);

  clone(&b, &m);
  b.layers[c3].in[0] = b.layers[c3].out; /* reads its own output */
  expect_refused(&b, "layer1.2.conv3", "reads a tensor written later");
  dpt_model_free(&b);

  clone(&b, &m);
  b.tensors[b.layers[bn2].out].n_consumers = 2;
  expect_refused(&b, "layer2.0.bn2", "reader count contradicts the layers");
  dpt_model_free(&b);

  clone(&b, &m);
  b.layers[c3].c_in = 5;
  expect_refused(&b, "layer1.2.conv3", "conv input channels");
  dpt_model_free(&b);

  dpt_model_free(&m);
}

/* The replay refuses broken plans. */
static void expect_bad_plan(const struct dpt_model *m, struct dpt_fuse_plan *p, const char *what, const char *needle)
{
  struct dpt_err err;
  int rc = dpt_cuda_fuse_check(m, p, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, needle), "%s: rc %d, message: %s", what, rc, rc ? err.msg : "(none)");
  if (rc) printf("replay refuses (%s): %s\n", what, err.msg);
}

static int find_op(const struct dpt_fuse_plan *p, int kind, int from)
{
  for (int i = from; i < p->n_ops; i++)
    if (p->ops[i].kind == kind) return i;
  return -1;
}

static void broken_plans(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p;
  resnet(&m, 32, 10, 1, 0.125, 3);
  dpt_cuda_fuse_cfg_default(&cfg);
  cfg.input_c_stored = 8;
  if (!build_ok(&m, &cfg, &p, "small for mutation")) goto out;
  struct dpt_fop *ops = p.ops;
  int sbr = find_op(&p, DPT_FOP_SBR_CONV_STATS, 0);
  /* a prologue convolution reading the BN output instead of the BN input: that tensor is virtual */
  struct dpt_fref save = ops[sbr].in[0];
  ops[sbr].in[0].id = m.layers[ops[sbr].bn[1]].out;
  expect_bad_plan(&m, &p, "reads a virtual tensor", "never written");
  ops[sbr].in[0] = save;
  /* BN finalize after the convolution that applies it */
  int fin = find_op(&p, DPT_FOP_BN_FINALIZE, sbr - 2 > 0 ? sbr - 2 : 0);
  struct dpt_fop t = ops[sbr];
  ops[sbr] = ops[fin];
  ops[fin] = t;
  expect_bad_plan(&m, &p, "finalize after its reader", "read before anything writes it");
  ops[fin] = ops[sbr];
  ops[sbr] = t;
  /* a dgrad that should accumulate overwrites */
  int dg = -1;
  for (int i = p.n_fwd; i < p.n_ops && dg < 0; i++)
    if (ops[i].kind == DPT_FOP_DGRAD && ops[i].accumulate) dg = i;
  CHECK(dg >= 0, "no accumulating dgrad");
  if (dg >= 0) {
    struct dpt_fop keep = ops[dg];
    for (int k = 0; k < ops[dg].n_in; k++)
      if (ops[dg].in[k].kind == DPT_FREF_DIFF && ops[dg].in[k].id == ops[dg].out[0].id) {
        ops[dg].in[k] = ops[dg].in[ops[dg].n_in - 1];
        ops[dg].n_in--;
        break;
      }
    expect_bad_plan(&m, &p, "overwrite", "must accumulate");
    ops[dg] = keep;
  }
  /* a wgrad dropped: that weight gradient is never written */
  int wg = find_op(&p, DPT_FOP_WGRAD, p.n_fwd);
  struct dpt_fop keep = ops[wg];
  ops[wg].n_out = 0;
  expect_bad_plan(&m, &p, "wgrad dropped", "weight gradient written 0 times");
  ops[wg] = keep;
  /* a BN finalized twice */
  int f2 = find_op(&p, DPT_FOP_BN_FINALIZE, 0), f3 = find_op(&p, DPT_FOP_BN_FINALIZE, f2 + 1);
  keep = ops[f3];
  ops[f3].bn[0] = ops[f2].bn[0];
  expect_bad_plan(&m, &p, "finalized twice", "finalized 2 times");
  ops[f3] = keep;
  /* an activation written that nothing reads: a prologue BN's output applied and written anyway */
  struct dpt_fop *more = malloc((size_t)(p.n_ops + 1) * sizeof *more);
  if (!more) exit(1);
  int at = fin + 1, pb = ops[fin].bn[0];
  memcpy(more, ops, (size_t)at * sizeof *more);
  memcpy(more + at + 1, ops + at, (size_t)(p.n_ops - at) * sizeof *more);
  more[at] = (struct dpt_fop){.kind = DPT_FOP_SBR_APPLY, .layer = pb, .conv = -1, .bn = {pb, -1}, .n_in = 2,
                              .n_out = 1, .in = {{DPT_FREF_ACT, m.layers[pb].in[0]}, {DPT_FREF_BN_EQ, pb}},
                              .out = {{DPT_FREF_ACT, m.layers[pb].out}}};
  CHECK(p.bn_mode[pb] == DPT_FBN_PROLOGUE, "%s is not a prologue BN", m.layers[pb].name);
  p.ops = more, p.n_ops++, p.n_fwd++;
  expect_bad_plan(&m, &p, "an unread activation", "written and never read");
  p.ops = ops, p.n_ops--, p.n_fwd--;
  free(more);
  struct dpt_err err;
  CHECK(dpt_cuda_fuse_check(&m, &p, &err) == 0, "restored plan refused: %s", err.msg);
  dpt_cuda_fuse_free(&p);
out:
  dpt_model_free(&m);
}

int main(void)
{
  resnet50_half();
  resnet50_fp32();
  small_stem();
  narrow();
  unfused();
  broken_models();
  broken_plans();
  if (!failures) printf("test_cuda_fuse: all checks passed\n");
  return failures != 0;
}
