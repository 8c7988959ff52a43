/* dpt_cuda_convg.c — the default path's convolutions through cuDNN graphs (issue 22, item 4).
 *
 * The legacy cudnnFind* times one kernel per algorithm enum, each picked by cuDNN's own
 * heuristics.  PyTorch (its cuDNN v8 API, the default since 2.x, benchmark mode) builds each
 * convolution as a one-operation cuDNN graph and times the engine configs that heuristics
 * mode A and the fallback list offer: more kernels and tile shapes than the algorithm enums
 * reach.  The third H200 visit measured dpt 0.90-0.95x PyTorch eager at tf32 / fp32 with
 * cudnnFind's choices; at fp32 cuDNN's old wgrad_alg0 / dgrad engines took 86 ms of a 264-ms
 * step.  So, per distinct convolution shape and direction (forward, data gradient written or
 * accumulated, weight gradient), after cudnnFind has chosen:
 *
 *   the FPROP / DGRAD / WGRAD graph of dpt_cudnn_graph (NHWC, or NCHW at fp32's layout) is
 *   built, its engine from the engine cache or timed (warm-up, median of 3, CUDA events), and
 *   cudnnFind's algorithm is timed the same way on the same buffers; the faster runs
 *   (DPT_CUDA_CONV=auto, the default).  DPT_CUDA_CONV=graph takes the graph wherever one
 *   builds (deterministic options: the heuristics' first sum-of-products config, untimed);
 *   DPT_CUDA_CONV=legacy keeps cudnnFind's algorithms everywhere.
 *
 * The graphs may use at most the workspace cudnnFind's choices already need (the largest over
 * all shapes), so the backend's peak memory does not grow.  A graph that does not build, or
 * whose execution cuDNN refuses later, leaves its direction on the legacy algorithm (said in
 * the notes).  The start line says how many shapes run on graphs and the step's convolution
 * time both ways (the per-shape times times the layers of that shape): a prediction. */
#include "dpt_backend_cuda_priv.h"

static const char *const dir_name[DPT_CONVG_N] = {"forward", "data gradient", "data gradient (accumulating)",
                                                  "weight gradient"};

/* -1: the layer's input has no gradient; 1: a later layer (its backward runs first) reads the
 * input too, so this data gradient accumulates (beta 1, as diff_target will say); 0: it writes. */
static int dgrad_accumulates(const struct cu_backend *cb, int li)
{
  const struct dpt_model *m = cb->pub.model;
  int t = m->layers[li].in[0];
  if (!cb->t[t].diff) return -1;
  for (int j = li + 1; j < m->n_layers; j++)
    if (m->layers[j].in[0] == t || m->layers[j].in[1] == t) return 1;
  return 0;
}

/* The layers of shape s on the legacy calls that run direction dir (their count). */
static int layers_of(const struct cu_backend *cb, int s, int dir)
{
  int n = 0;
  for (int c = 0; c < cb->plan.n_conv; c++) {
    const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[c];
    if (cp->shape_id != s || (cb->fused && cb->plan.fuse->conv_fused[cp->layer])) continue;
    int acc = dgrad_accumulates(cb, cp->layer);
    n += dir == DPT_CONVG_FWD || dir == DPT_CONVG_WGRAD || (dir == DPT_CONVG_DGRAD && acc == 0) ||
         (dir == DPT_CONVG_DGRAD_ACC && acc == 1);
  }
  return n;
}

/* cudnnFind's choice for dir, run on conv L's buffers (beta: the data gradient's). */
static int legacy_run(struct cu_backend *cb, const struct cu_algo *a, int li, int dir, struct dpt_err *err)
{
  const struct dpt_layer_desc *d = &cb->pub.model->layers[li];
  struct cu_layer *L = &cb->l[li];
  struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  const float *beta = dir == DPT_CONVG_DGRAD_ACC ? &one : &zero;
  int rc = 0;
  if (dir == DPT_CONVG_FWD) {
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_fwd), li, "timing cudnnFind's choice");
    DNN_CK(cudnnConvolutionForward, (cb->dnn, &one, x->desc, x->buf, L->fdesc, L->w16, L->cdesc,
                                     (cudnnConvolutionFwdAlgo_t)a->fwd, cb->ws, a->ws_fwd, &zero, y->desc, y->buf),
           li, "timing cudnnFind's choice");
  } else if (dir == DPT_CONVG_WGRAD) {
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_filter), li, "timing cudnnFind's choice");
    DNN_CK(cudnnConvolutionBackwardFilter, (cb->dnn, &one, x->desc, x->buf, y->desc, y->diff, L->cdesc,
                                            (cudnnConvolutionBwdFilterAlgo_t)a->bwd_filter, cb->ws, a->ws_filter,
                                            &zero, L->fdesc, L->dw16), li, "timing cudnnFind's choice");
  } else {
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, (cudnnMathType_t)a->math_data), li, "timing cudnnFind's choice");
    DNN_CK(cudnnConvolutionBackwardData, (cb->dnn, &one, L->fdesc, L->w16, y->desc, y->diff, L->cdesc,
                                          (cudnnConvolutionBwdDataAlgo_t)a->bwd_data, cb->ws, a->ws_data, beta,
                                          x->desc, x->diff), li, "timing cudnnFind's choice");
  }
fail:
  return rc;
}

/* The legacy choice timed as dpt_cudnn_graph times an engine: a warm-up run, the median of 3. */
static int legacy_time(struct cu_backend *cb, const struct cu_algo *a, int li, int dir, float *ms, struct dpt_err *err)
{
  cudaEvent_t ev[2] = {NULL, NULL};
  float t[3] = {0, 0, 0};
  int rc = 0;
  CUDA_CK(cudaEventCreate, (&ev[0]), li, "timing cudnnFind's choice");
  CUDA_CK(cudaEventCreate, (&ev[1]), li, "timing cudnnFind's choice");
  if ((rc = legacy_run(cb, a, li, dir, err))) goto fail;
  for (int i = 0; i < 3; i++) {
    CUDA_CK(cudaEventRecord, (ev[0], cb->stream), li, "timing cudnnFind's choice");
    if ((rc = legacy_run(cb, a, li, dir, err))) goto fail;
    CUDA_CK(cudaEventRecord, (ev[1], cb->stream), li, "timing cudnnFind's choice");
    CUDA_CK(cudaEventSynchronize, (ev[1]), li, "timing cudnnFind's choice");
    CUDA_CK(cudaEventElapsedTime, (&t[i], ev[0], ev[1]), li, "timing cudnnFind's choice");
  }
  float lo = fminf(t[0], fminf(t[1], t[2])), hi = fmaxf(t[0], fmaxf(t[1], t[2]));
  *ms = t[0] + t[1] + t[2] - lo - hi; /* the median */
fail:
  if (ev[0]) cudaEventDestroy(ev[0]);
  if (ev[1]) cudaEventDestroy(ev[1]);
  return rc;
}

/* The graph description of conv rep's direction dir, and the operands it is timed on. */
static void describe(const struct cu_backend *cb, int rep, int dir, struct dpt_cg_desc *g, void **p)
{
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[rep];
  const struct dpt_layer_desc *d = &cb->pub.model->layers[cp->layer];
  const struct cu_layer *L = &cb->l[cp->layer];
  const struct cu_tensor *x = &cb->t[d->in[0]], *y = &cb->t[d->out];
  static const int pattern[DPT_CONVG_N] = {DPT_CG_FPROP, DPT_CG_DGRAD, DPT_CG_DGRAD, DPT_CG_WGRAD};
  memset(g, 0, sizeof *g);
  for (int i = 0; i < DPT_CG_NSLOTS; i++) p[i] = NULL;
  g->pattern = pattern[dir];
  g->n = cp->n, g->c = cp->c, g->h = cp->h, g->w = cp->w;
  g->k = cp->k, g->r = cp->r, g->stride = cp->stride, g->pad = cp->pad;
  g->io = cb->dtype == DPT_DT_BF16 ? DPT_CG_BF16 : cb->dtype == DPT_DT_F16 ? DPT_CG_F16 : DPT_CG_F32;
  g->sb = DPT_CG_F32;
  g->accumulate = dir == DPT_CONVG_DGRAD_ACC;
  g->tf32 = cb->plan.precision != DPT_CUDA_FP32; /* fp32: FMA only, as its legacy math type */
  g->nchw = cb->plan.nchw;
  g->deterministic = cb->copts.deterministic;
  g->layer = d->name;
  if (dir == DPT_CONVG_FWD) p[DPT_CG_X] = x->buf, p[DPT_CG_W] = L->w16, p[DPT_CG_Y] = y->buf;
  else if (dir == DPT_CONVG_WGRAD) p[DPT_CG_X] = x->buf, p[DPT_CG_DY] = y->diff, p[DPT_CG_DW] = L->dw16;
  else p[DPT_CG_DY] = y->diff, p[DPT_CG_W] = L->w16, p[DPT_CG_DX] = x->diff;
}

/* A cuDNN failure is the graph's (the legacy algorithm stays); a CUDA error that sticks to the
 * context is everyone's.  sync: at start (never inside a CUDA-graph capture). */
static int context_ok(struct cu_backend *cb, int li, int sync, struct dpt_err *err)
{
  int rc = 0;
  if (sync) CUDA_CK(cudaStreamSynchronize, (cb->stream), li, "a convolution's cuDNN graph");
  CUDA_CK(cudaPeekAtLastError, (), li, "a convolution's cuDNN graph");
fail:
  return rc;
}

int dpt_cuda_convg_choose(struct cu_backend *cb, int shape, int rep, void *ws, size_t limit, struct dpt_err *err)
{
  struct cu_algo *a = &cb->algo[shape];
  const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[rep];
  int li = cp->layer, rc = 0;
  for (int dir = 0; dir < DPT_CONVG_N; dir++) a->ms_legacy[dir] = a->ms_graph[dir] = -1.0f;
  if (cb->convg == DPT_CUDA_CONV_LEGACY || cp->r != cp->s) return 0; /* the graphs' filters are square */
  struct dpt_cg_ctx ctx = {.dnn = cb->dnn, .device = cb->dev, .cudnn_version = (long)cudnnGetVersion(),
                           .cache = &cb->ecache, .errata = cb->errata_loaded ? &cb->errata : NULL, .workspace = ws,
                           .workspace_limit = ws ? limit : 0, .max_candidates = 0, .stats = &cb->cg_stats,
                           .no_runtime_compilation = 1};
  void *saved_ws = cb->ws;
  cb->ws = ws; /* legacy_time runs cudnnFind's choice in it (its workspace <= limit by construction) */
  for (int dir = 0; dir < DPT_CONVG_N; dir++) {
    if (!layers_of(cb, shape, dir)) continue;
    struct dpt_cg_desc g;
    void *p[DPT_CG_NSLOTS];
    describe(cb, rep, dir, &g, p);
    if (dir != DPT_CONVG_FWD && dir != DPT_CONVG_WGRAD && !p[DPT_CG_DX]) continue; /* (layers_of said so) */
    struct dpt_cg_op *op = calloc(1, sizeof *op);
    if (!op) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory for a convolution's cuDNN graph");
      goto fail;
    }
    struct dpt_err e = {0};
    int unaligned = cb->cg_stats.unaligned;
    if (dpt_cg_build(&ctx, &g, p, op, &e)) { /* no engine, cuDNN refused a step, or an operand not aligned */
      free(op);
      if ((rc = context_ok(cb, li, 1, err))) goto fail;
      if (cb->cg_stats.unaligned > unaligned) { /* (dpt_cg_build's DPT_CG_ALIGN guard: an NCHW filter in the slab) */
        cb->cg_unaligned++;
        continue;
      }
      cb->cg_failed[dir]++;
      if (!cb->cg_first_fail[0]) snprintf(cb->cg_first_fail, sizeof cb->cg_first_fail, "%.700s", e.msg);
      continue;
    }
    float lm = -1.0f;
    size_t lws = dir == DPT_CONVG_FWD ? a->ws_fwd : dir == DPT_CONVG_WGRAD ? a->ws_filter : a->ws_data;
    if (lws <= limit && (rc = legacy_time(cb, a, li, dir, &lm, err))) {
      dpt_cg_destroy(op);
      free(op);
      goto fail;
    }
    a->ms_legacy[dir] = lm;
    a->ms_graph[dir] = (float)op->choice.time_ms;
    /* graph: wherever one builds; auto: where it was timed faster than cudnnFind's choice */
    int take = cb->convg == DPT_CUDA_CONV_GRAPH || (lm >= 0.0f && op->choice.time_ms < (double)lm);
    if (take) {
      a->g[dir] = op;
      if (op->workspace > a->ws_graph) a->ws_graph = op->workspace;
    } else {
      dpt_cg_destroy(op);
      free(op);
    }
  }
fail:
  cb->ws = saved_ws;
  return rc;
}

void dpt_cuda_convg_note(struct cu_backend *cb, double seconds)
{
  if (cb->convg == DPT_CUDA_CONV_LEGACY) {
    dpt_cuda_note(cb, "convolutions: cuDNN's legacy algorithms only (%s)", cb->copts.conv == DPT_CUDA_CONV_LEGACY
                  ? "DPT_CUDA_CONV=legacy" : "deterministic: nothing is timed; DPT_CUDA_CONV=graph for cuDNN graphs");
    return;
  }
  int on[DPT_CONVG_N] = {0}, all[DPT_CONVG_N] = {0};
  double legacy_ms = 0, chosen_ms = 0;
  int timed_all = 1;
  for (int s = 0; s < cb->plan.n_shapes; s++)
    for (int dir = 0; dir < DPT_CONVG_N; dir++) {
      const struct cu_algo *a = &cb->algo[s];
      int n = layers_of(cb, s, dir);
      if (!n) continue;
      all[dir]++;
      on[dir] += a->g[dir] != NULL;
      if (a->ms_legacy[dir] < 0 || a->ms_graph[dir] < 0) {
        timed_all = 0;
        continue;
      }
      legacy_ms += n * (double)a->ms_legacy[dir];
      chosen_ms += n * (double)(a->g[dir] ? a->ms_graph[dir] : a->ms_legacy[dir]);
    }
  char pred[200] = "";
  if (legacy_ms > 0)
    snprintf(pred, sizeof pred, "; the step's convolutions %.1f ms on cudnnFind's choices, %.1f ms as chosen%s "
             "(per-shape times x layers, a prediction)", legacy_ms, chosen_ms,
             timed_all ? "" : " (over the shapes both were timed on)");
  const struct dpt_cg_stats *st = &cb->cg_stats;
  dpt_cuda_note(cb, "convolutions: cuDNN graph engines (%s) for %d of %d forward, %d of %d data-gradient "
                "(%d of %d accumulating), %d of %d weight-gradient shapes%s; search %.1f s: %d graphs, %d engines "
                "timed (%d from cuDNN's fallback list), %d from the cache %s, %ld plans finalized", cb->convg == DPT_CUDA_CONV_GRAPH
                ? "DPT_CUDA_CONV=graph: wherever one builds" : "where timed faster than cudnnFind's algorithm",
                on[DPT_CONVG_FWD], all[DPT_CONVG_FWD], on[DPT_CONVG_DGRAD], all[DPT_CONVG_DGRAD],
                on[DPT_CONVG_DGRAD_ACC], all[DPT_CONVG_DGRAD_ACC], on[DPT_CONVG_WGRAD], all[DPT_CONVG_WGRAD], pred,
                seconds, st->builds, st->timed, st->fallback, st->from_cache, cb->ecache.path[0] ? cb->ecache.path : "(off)",
                st->plans);
  int nf = 0;
  for (int dir = 0; dir < DPT_CONVG_N; dir++) nf += cb->cg_failed[dir];
  if (cb->cg_unaligned)
    dpt_cuda_note(cb, "convolutions: %d shape/direction(s) on cudnnFind's algorithm: an operand not 16-byte aligned "
                  "(an NCHW filter in the parameter slab)", cb->cg_unaligned);
  if (nf)
    dpt_cuda_note(cb, "convolutions: %d shape/direction graph(s) without an engine here, on cudnnFind's algorithm "
                  "(first: %.600s)", nf, cb->cg_first_fail);
}

int dpt_cuda_convg_exec(struct cu_backend *cb, int li, int dir, void *const *p, int *ran, struct dpt_err *err)
{
  struct cu_layer *L = &cb->l[li];
  struct cu_algo *a = &cb->algo[cb->plan.conv[L->conv].shape_id];
  struct dpt_cg_op *op = a->g[dir];
  struct dpt_err e = {0};
  int rc = 0;
  *ran = 0;
  /* an NCHW fp32 filter is the parameter slab's own, at the model's offset: a layer whose operand
   * breaks the graph's DPT_CG_ALIGN promise takes the legacy call (the others of its shape keep the graph) */
  if (!op || dpt_cg_misaligned(op, p) >= 0) return 0;
  if (!dpt_cg_execute_vp(&cb->cgx, op, p, &L->cg_vp[dir], &e)) {
    *ran = 1;
    return 0;
  }
  if ((rc = context_ok(cb, li, 0, err))) return rc; /* a CUDA error: not the graph's alone */
  /* cuDNN refused it at run time: cudnnFind's algorithm from now on, for every layer of the shape */
  a->g[dir] = NULL;
  dpt_cg_destroy(op);
  free(op);
  fprintf(stderr, "dpt: cuda backend: the %s cuDNN graph of convolution '%s' failed (%s): cudnnFind's algorithm "
          "from now on\n", dir_name[dir], cb->pub.model->layers[li].name, e.msg);
  dpt_cuda_note(cb, "convolutions: the %s graph of '%s' failed at run time (%.300s): cudnnFind's algorithm for its "
                "shape", dir_name[dir], cb->pub.model->layers[li].name, e.msg);
  return 0;
}

void dpt_cuda_convg_destroy(struct cu_backend *cb)
{
  if (cb->l)
    for (int li = 0; li < cb->pub.model->n_layers; li++)
      for (int dir = 0; dir < DPT_CONVG_N; dir++) dpt_cg_vp_free(&cb->l[li].cg_vp[dir]);
  if (!cb->algo) return;
  for (int s = 0; s < cb->plan.n_shapes; s++)
    for (int dir = 0; dir < DPT_CONVG_N; dir++)
      if (cb->algo[s].g[dir]) {
        dpt_cg_destroy(cb->algo[s].g[dir]);
        free(cb->algo[s].g[dir]);
        cb->algo[s].g[dir] = NULL;
      }
}
