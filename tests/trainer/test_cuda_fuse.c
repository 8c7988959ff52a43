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
 *  - broken models refused naming the layer; broken plans refused by the replay.
 *  - the backend's integration (issue 15): each layer's ops of a pass are contiguous (the index
 *    the backward walk runs them by); every gradient bucket of dpt_bucket_plan (4 bytes, 1 MiB,
 *    25 MiB, one bucket) closes after every op that writes its gradients (the walk's hook
 *    points), and a plan that writes a gradient after its bucket's hook is refused; the deny
 *    list (an op without a cuDNN engine -> its layer on legacy calls) gives plans that replay,
 *    for every kind of fused op, for random layer subsets, and repeated until nothing fuses;
 *    the fused arena (dpt_cuda_plan_build_ex) at batch 256 no larger than the unfused one at
 *    every precision, every written tensor placed, no two live buffers overlapping.
 *  - the running statistics (not in place, issue 22): the state ranges the fused BN finalize ops
 *    update (dpt_cuda_fuse_running_ranges) hold every fused BN and no legacy one, merged (one
 *    range for ResNet-50 at every precision), for the deny list's random plans too; the mirror
 *    they are written to is 256-aligned inside the BN region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_bucket.h"
#include "dpt_cuda_fuse.h"
#include "dpt_cuda_plan.h"
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

/* dpt_cuda_fuse_running_ranges, judged from the op list: each BN finalized in a graph op has its
 * running statistics [2][C] inside one range, a BN on the legacy calls none of its statistics in
 * any (the copy back from the mirror would overwrite the update its legacy call made), the
 * ranges ascending, disjoint and not adjacent (merged), covering exactly the fused BNs' floats,
 * and *last is the last BN finalize.  Returns the number of ranges. */
static int running_ranges(const struct dpt_model *m, const struct dpt_fuse_plan *p, const char *what)
{
  struct dpt_fuse_range *r = malloc((size_t)m->n_layers * sizeof *r);
  if (!r) exit(1);
  int last = -2, n = dpt_cuda_fuse_running_ranges(m, p, r, &last), want_last = -1;
  size_t covered = 0, want = 0;
  for (int k = 0; k < n; k++) {
    covered += r[k].n;
    CHECK(r[k].n > 0 && r[k].off + r[k].n <= m->n_state, "%s: range %d [%zu, +%zu) of %zu", what, k, r[k].off, r[k].n,
          m->n_state);
    if (k) CHECK(r[k - 1].off + r[k - 1].n < r[k].off, "%s: ranges %d and %d not ascending and apart", what, k - 1, k);
  }
  for (int l = 0; l < m->n_layers; l++) {
    if (m->layers[l].type != DPT_LAYER_BN) continue;
    int fused = 0;
    for (int i = 0; i < p->n_fwd; i++)
      if (p->ops[i].kind == DPT_FOP_BN_FINALIZE && p->ops[i].bn[0] == l) fused = 1, want_last = i > want_last ? i : want_last;
    size_t lo = m->layers[l].s_off, hi = lo + 2 * (size_t)m->layers[l].c_out;
    int inside = 0, touched = 0;
    for (int k = 0; k < n; k++) {
      inside += r[k].off <= lo && hi <= r[k].off + r[k].n;
      touched += lo < r[k].off + r[k].n && r[k].off < hi;
    }
    if (fused) want += hi - lo;
    CHECK(fused ? inside == 1 : touched == 0, "%s: %s (%s) statistics [%zu, %zu) in %d range(s), touching %d", what,
          m->layers[l].name, fused ? "finalized in a graph" : "legacy", lo, hi, inside, touched);
  }
  CHECK(covered == want, "%s: ranges cover %zu floats, the fused BNs have %zu", what, covered, want);
  CHECK(last == want_last, "%s: last finalize %d, want %d", what, last, want_last);
  free(r);
  return n;
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
  /* every BN fused, the state slab all BN statistics: one copy of the whole slab per forward */
  int nr = running_ranges(&m, &p, "resnet50 fp16");
  CHECK(nr == 1, "running statistics: %d ranges, want 1", nr);
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
   * forward conv 53 (no weight casts: the fused optimizer writes the copies), BN 53 + 33
   * ReLU, add 16, pools 2, FC 2 = 159; backward conv 3 x 52 + 2, BN 53 + 33, add 16 + 32,
   * pools 2, FC 4 = 298 */
  CHECK(c->launches_fwd == 159 && c->launches_bwd == 298, "unfused launches %d + %d", c->launches_fwd,
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
  /* the stem BN (legacy, first in the slab) updates its own statistics: one range after it */
  CHECK(running_ranges(&m, &p, "resnet50 tf32") == 1, "running statistics: not one range after the stem BN");
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
  printf("width 1/16: the running statistics of its fused BNs in %d range(s)\n", running_ranges(&m, &p, "width 1/16"));
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

/* ---- the backend's integration ------------------------------------------------------------- */

static void fuse_cfg_of(struct dpt_fuse_cfg *cfg, int mult, int in_c_stored, const unsigned char *legacy)
{
  dpt_cuda_fuse_cfg_default(cfg);
  cfg->channel_multiple = mult;
  cfg->input_c_stored = in_c_stored;
  cfg->legacy = legacy;
}

/* Each layer's ops of a pass contiguous, forward layers increasing, backward decreasing. */
static void layer_order(const struct dpt_model *m, const struct dpt_fuse_plan *p, const char *what)
{
  int nf = 0, nb = 0;
  for (int l = 0; l < m->n_layers; l++) {
    nf += p->fwd_n[l], nb += p->bwd_n[l];
    for (int i = p->fwd_first[l]; p->fwd_n[l] && i < p->fwd_first[l] + p->fwd_n[l]; i++)
      CHECK(i < p->n_fwd && p->ops[i].layer == l, "%s: forward op %d in layer %s's range", what, i, m->layers[l].name);
    for (int i = p->bwd_first[l]; p->bwd_n[l] && i < p->bwd_first[l] + p->bwd_n[l]; i++)
      CHECK(i >= p->n_fwd && p->ops[i].layer == l, "%s: backward op %d in layer %s's range", what, i, m->layers[l].name);
  }
  CHECK(nf == p->n_fwd && nb == p->n_ops - p->n_fwd, "%s: ranges cover %d + %d of %d + %d ops", what, nf, nb, p->n_fwd,
        p->n_ops - p->n_fwd);
  for (int i = 1; i < p->n_ops; i++)
    if (i != p->n_fwd)
      CHECK(i < p->n_fwd ? p->ops[i].layer >= p->ops[i - 1].layer : p->ops[i].layer <= p->ops[i - 1].layer,
            "%s: op %d out of layer order", what, i);
}

static void buckets_after_writers(void)
{
  static const size_t targets[] = {4, (size_t)1 << 20, (size_t)25 << 20, (size_t)1 << 40};
  struct {
    int image, small, mult, in_c;
    double width;
    const char *what;
  } nets[] = {{224, 0, 8, 8, 1.0, "resnet50 fp16"}, {224, 0, 4, 3, 1.0, "resnet50 fp32"},
              {28, 1, 8, 8, 0.125, "width-1/8 small stem"}};
  for (size_t n = 0; n < sizeof nets / sizeof *nets; n++) {
    struct dpt_model m;
    struct dpt_fuse_cfg cfg;
    struct dpt_fuse_plan p;
    resnet(&m, nets[n].image, nets[n].image == 224 ? 1000 : 10, nets[n].small, nets[n].width, 3);
    fuse_cfg_of(&cfg, nets[n].mult, nets[n].in_c, NULL);
    if (!build_ok(&m, &cfg, &p, nets[n].what)) {
      dpt_model_free(&m);
      continue;
    }
    layer_order(&m, &p, nets[n].what);
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
      struct dpt_bucket *b;
      int nb;
      struct dpt_err err;
      if (dpt_bucket_plan(&m, targets[t], &b, &nb, &err)) {
        CHECK(0, "%s: buckets of %zu bytes: %s", nets[n].what, targets[t], err.msg);
        continue;
      }
      int rc = dpt_cuda_fuse_check_buckets(&m, &p, b, nb, &err);
      CHECK(rc == 0, "%s, %d buckets of %zu bytes: %s", nets[n].what, nb, targets[t], rc ? err.msg : "");
      if (t == 0 && nb > 2) { /* a plan whose dgamma of some BN runs after its bucket's hook is refused */
        for (int i = p.n_fwd; i < p.n_ops; i++) {
          const struct dpt_fop *op = &p.ops[i];
          if (op->kind != DPT_FOP_DBN_WEIGHT) continue;
          int bn = op->bn[0], k = 0;
          while (k < nb && !(bn >= b[k].first_layer && bn <= b[k].last_layer)) k++;
          if (k == nb || b[k].first_layer == 0) continue;
          struct dpt_fop keep = p.ops[i];
          p.ops[i].layer = b[k].first_layer - 1; /* named after a layer the walk reaches later */
          rc = dpt_cuda_fuse_check_buckets(&m, &p, b, nb, &err);
          CHECK(rc == DPT_E_INPUT && strstr(err.msg, m.layers[bn].name), "%s: a late dgamma of %s passes the bucket check",
                nets[n].what, m.layers[bn].name);
          if (rc) printf("refused (late gradient): %s\n", err.msg);
          p.ops[i] = keep;
          break;
        }
      }
      if (t == 2) printf("%s: %d buckets of 25 MiB close after their gradients' writers\n", nets[n].what, nb);
      free(b);
    }
    dpt_cuda_fuse_free(&p);
    dpt_model_free(&m);
  }
}

/* The layer a fused op's failure keeps on legacy calls: its ops are gone from the next plan. */
static int still_fused(const struct dpt_model *m, const struct dpt_fuse_plan *p, int l)
{
  switch (m->layers[l].type) {
  case DPT_LAYER_CONV: return p->conv_fused[l];
  case DPT_LAYER_BN: return p->bn_mode[l] != DPT_FBN_LEGACY;
  default:
    for (int i = 0; i < p->n_ops; i++)
      if (p->ops[i].layer == l && p->ops[i].kind != DPT_FOP_LEGACY_FWD && p->ops[i].kind != DPT_FOP_LEGACY_BWD) return 1;
    return 0;
  }
}

static void deny_list(void)
{
  struct dpt_model m;
  struct dpt_fuse_cfg cfg;
  struct dpt_fuse_plan p, q;
  resnet(&m, 224, 1000, 0, 1.0, 3);
  unsigned char *legacy = calloc((size_t)m.n_layers, 1);
  fuse_cfg_of(&cfg, 8, 8, NULL);
  if (!legacy || !build_ok(&m, &cfg, &p, "deny: base")) exit(1);
  /* one op of each fused kind: its layer denied, the op's kind gone from that layer */
  for (int kind = 0; kind < DPT_FOP_LEGACY_FWD; kind++) {
    int i = 0;
    while (i < p.n_ops && p.ops[i].kind != kind) i++;
    if (i == p.n_ops) continue;
    memset(legacy, 0, (size_t)m.n_layers);
    int l = dpt_cuda_fuse_deny(&m, &p, i, legacy);
    CHECK(l >= 0 && legacy[l], "deny %s: no layer", dpt_fop_name(kind));
    if (l < 0) continue;
    char what[96];
    snprintf(what, sizeof what, "deny %s -> %s", dpt_fop_name(kind), m.layers[l].name);
    cfg.legacy = legacy;
    if (!build_ok(&m, &cfg, &q, what)) continue;
    CHECK(!still_fused(&m, &q, l) && q.n_legacy_layers == 1, "%s: still fused (%d legacy layers)", what,
          q.n_legacy_layers);
    layer_order(&m, &q, what);
    dpt_cuda_fuse_free(&q);
  }
  CHECK(dpt_cuda_fuse_deny(&m, &p, p.n_fwd - 1, legacy) < 0 || p.ops[p.n_fwd - 1].kind != DPT_FOP_LEGACY_FWD,
        "a legacy op was denied");
  /* random subsets of layers kept legacy: every plan replays */
  unsigned seed = 7;
  int most_ranges = 0;
  for (int r = 0; r < 40; r++) {
    for (int l = 0; l < m.n_layers; l++) {
      seed = seed * 1103515245u + 12345u;
      legacy[l] = (seed >> 16) % 5 == 0;
    }
    cfg.legacy = legacy;
    char what[64];
    snprintf(what, sizeof what, "deny: random subset %d", r);
    if (build_ok(&m, &cfg, &q, what)) {
      layer_order(&m, &q, what);
      int nr = running_ranges(&m, &q, what);
      most_ranges = nr > most_ranges ? nr : most_ranges;
      dpt_cuda_fuse_free(&q);
    }
  }
  CHECK(most_ranges > 1, "no random plan split the running statistics (most %d range)", most_ranges);
  /* what the backend does when no engine takes anything: deny the first fused op again and
   * again; it ends with no fused op left, in at most one round per layer */
  memset(legacy, 0, (size_t)m.n_layers);
  int rounds = 0, left = 1;
  while (left && rounds <= m.n_layers) {
    cfg.legacy = legacy;
    if (!build_ok(&m, &cfg, &q, "deny: all")) break;
    left = 0;
    for (int i = 0; i < q.n_ops && !left; i++)
      if (q.ops[i].kind != DPT_FOP_LEGACY_FWD && q.ops[i].kind != DPT_FOP_LEGACY_BWD) {
        left = 1;
        CHECK(dpt_cuda_fuse_deny(&m, &q, i, legacy) >= 0, "deny: op %d (%s) not deniable", i, dpt_fop_name(q.ops[i].kind));
      }
    if (!left) CHECK(q.n_fwd == m.n_layers && q.n_ops == 2 * m.n_layers, "deny: all: %d + %d ops", q.n_fwd, q.n_ops);
    dpt_cuda_fuse_free(&q);
    rounds++;
  }
  CHECK(!left, "deny: still fusing after %d rounds", rounds);
  /* the backend's way: every op without an engine of a round denied at once (here: all of them,
   * a GPU where no fusion engine exists); a layer named twice counted once */
  memset(legacy, 0, (size_t)m.n_layers);
  int batch_rounds = 0, denied_total = 0;
  for (left = 1; left && batch_rounds <= 8; batch_rounds++) {
    cfg.legacy = legacy;
    if (!build_ok(&m, &cfg, &q, "deny: all at once")) break;
    left = 0;
    for (int i = 0; i < q.n_ops; i++) {
      int l = dpt_cuda_fuse_layer_denied(&m, &q, i);
      if (l < 0) continue;
      left = 1;
      if (!legacy[l]) denied_total++;
      CHECK(dpt_cuda_fuse_deny(&m, &q, i, legacy) == l, "deny and layer_denied disagree on op %d", i);
    }
    dpt_cuda_fuse_free(&q);
  }
  CHECK(!left && batch_rounds <= 4, "deny all at once: %d rounds (want <= 4), fusing %d", batch_rounds, left);
  printf("deny list: every fused op kind deniable, 40 random subsets replay (their running statistics in up to %d "
         "ranges), all fusions gone after %d rounds one at a "
         "time or %d rounds all at once (%d layers)\n", most_ranges, rounds, batch_rounds, denied_total);
  dpt_cuda_fuse_free(&p);
  free(legacy);
  dpt_model_free(&m);
}

/* Buffers live at a common step never share bytes; every tensor a fused op writes or reads has a
 * buffer; the fused plan places no activation the ops never write. */
static void arena_sound(const struct dpt_model *m, const struct dpt_cuda_plan *pl, const char *what)
{
  int nt = pl->n_tensors, bad = 0;
  for (int a = 0; a < 2 * nt; a++) {
    const struct dpt_cuda_tensor_plan *ta = &pl->t[a % nt];
    int alo = a < nt ? ta->act_lo : ta->diff_lo, ahi = a < nt ? ta->act_hi : ta->diff_hi;
    size_t aoff = a < nt ? ta->act_off : ta->diff_off;
    if (alo > ahi) continue;
    for (int b = a + 1; b < 2 * nt; b++) {
      const struct dpt_cuda_tensor_plan *tb = &pl->t[b % nt];
      int blo = b < nt ? tb->act_lo : tb->diff_lo, bhi = b < nt ? tb->act_hi : tb->diff_hi;
      size_t boff = b < nt ? tb->act_off : tb->diff_off;
      if (blo > bhi || bhi < alo || ahi < blo) continue;
      if (aoff < boff + tb->bytes && boff < aoff + ta->bytes) bad++;
    }
    CHECK(aoff + ta->bytes <= pl->arena_bytes, "%s: buffer %d beyond the arena", what, a);
  }
  CHECK(!bad, "%s: %d pairs of live buffers overlap", what, bad);
  if (!pl->fuse) return;
  const struct dpt_fuse_plan *fp = pl->fuse;
  for (int t = 0; t < nt; t++) {
    CHECK(!fp->act_written[t] || pl->t[t].act_lo <= pl->t[t].act_hi, "%s: tensor %d written without a buffer", what, t);
    CHECK(fp->act_written[t] || pl->t[t].act_lo > pl->t[t].act_hi, "%s: tensor %d placed but never written", what, t);
    CHECK(!fp->diff_written[t] || pl->t[t].diff_lo <= pl->t[t].diff_hi, "%s: gradient %d written without a buffer", what,
          t);
  }
  (void)m;
}

static void fused_arena(void)
{
  struct dpt_model m;
  resnet(&m, 224, 1000, 0, 1.0, 3);
  for (int prec = DPT_CUDA_FP32; prec <= DPT_CUDA_BF16; prec++) {
    struct dpt_cuda_plan u, f;
    struct dpt_cuda_plan_opts po = {1, NULL, 0};
    struct dpt_err err;
    const char *pn = dpt_cuda_precision_name(prec);
    if (dpt_cuda_plan_build(&m, 256, prec, 0, &u, &err) ||
        dpt_cuda_plan_build_ex(&m, 256, prec, 0, &po, &f, &err)) {
      CHECK(0, "%s: plan: %s", pn, err.msg);
      continue;
    }
    char what[64];
    snprintf(what, sizeof what, "resnet50 %s bs 256 unfused", pn);
    arena_sound(&m, &u, what);
    snprintf(what, sizeof what, "resnet50 %s bs 256 fused", pn);
    arena_sound(&m, &f, what);
    CHECK(f.arena_bytes <= u.arena_bytes, "%s: fused arena %zu > unfused %zu", pn, f.arena_bytes, u.arena_bytes);
    CHECK(f.total_bytes <= u.total_bytes, "%s: fused plan %zu > unfused %zu", pn, f.total_bytes, u.total_bytes);
    CHECK(f.fuse && !u.fuse && f.bn_fused_bytes > 0 && !u.bn_fused_bytes, "%s: fusion plan / BN vectors", pn);
    /* the running statistics' mirror: 256-aligned (as the state slab: the same offsets keep the
     * graphs' 16-byte promise) after the [8][C] vectors (sum, sum of squares, equivalent scale and
     * bias, cy, cx, cb, room for the equivalent scale and bias in the 16-bit I/O type:
     * dpt_cuda_fstep.h's DPT_FX_SUM on), [n_state] inside the BN region */
    size_t vec = 0;
    for (int l = 0; l < m.n_layers; l++) vec += m.layers[l].type == DPT_LAYER_BN ? 8 * (size_t)m.layers[l].c_out * 4 : 0;
    CHECK(f.bn_next_off % 256 == 0 && f.bn_next_off >= f.bn_saved_bytes + vec &&
              f.bn_next_off + m.n_state * 4 <= f.region[DPT_CUDA_R_BN] && !u.bn_next_off,
          "%s: mirror at %zu (saved %zu + vectors %zu), %zu floats, BN region %zu", pn, f.bn_next_off, f.bn_saved_bytes,
          vec, m.n_state, f.region[DPT_CUDA_R_BN]);
    printf("resnet50 %s, batch 256: liveness arena fused %.2f GiB vs unfused %.2f GiB; whole plan %.2f vs %.2f GiB\n",
           pn, f.arena_bytes / 1073741824.0, u.arena_bytes / 1073741824.0, f.total_bytes / 1073741824.0,
           u.total_bytes / 1073741824.0);
    /* fit: the fused plan fits at least the batch the unfused one does */
    size_t need_u, need_f;
    int bu = dpt_cuda_plan_fit(&m, prec, 0, 512, u.total_bytes, 0, &need_u, &err);
    int bf = dpt_cuda_plan_fit_ex(&m, prec, 0, &po, 512, u.total_bytes, 0, &need_f, &err);
    CHECK(bu == 256 && bf >= bu, "%s: the largest batch in the unfused plan's bytes: unfused %d fused %d", pn, bu, bf);
    dpt_cuda_plan_free(&u);
    dpt_cuda_plan_free(&f);
  }
  dpt_model_free(&m);
}

int main(void)
{
  buckets_after_writers();
  deny_list();
  fused_arena();
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
