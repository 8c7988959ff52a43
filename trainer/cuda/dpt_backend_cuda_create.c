/* dpt_backend_cuda_create.c — the CUDA backend's set-up (see dpt_backend_cuda.h): its options
 * and the device checks, the plan's regions allocated, each layer's descriptors and algorithms,
 * batch norm's Ex calls, the fused step's graphs, and the accessors the tests and the trainer
 * read it by.  The backend's ops (the step) are in dpt_backend_cuda.c. */
#include <errno.h>
#include <time.h>

#include "dpt_backend_cuda_priv.h"

/* ---- creation --------------------------------------------------------------- */

void dpt_cuda_opts_default(struct dpt_cuda_opts *o)
{
  const char *p = getenv("DPT_CUDA_PRECISION");
  int prec = dpt_cuda_precision_parse(p);
  o->precision = prec >= 0 ? (enum dpt_cuda_precision)prec : DPT_CUDA_FP32;
  o->device = -1;
  o->workspace_cap = (size_t)512 << 20;
  o->algo_search = 1;
  o->deterministic = 0;
  o->loss_scale = 65536.0f;
  int f = dpt_cuda_switch_parse(getenv("DPT_CUDA_FUSE")), g = dpt_cuda_switch_parse(getenv("DPT_CUDA_GRAPH"));
  o->fuse = f >= 0 ? f : DPT_CUDA_OFF;   /* off until trainer.gpu.fused_vs_unfused passes on a GPU */
  o->graph = g >= 0 ? g : DPT_CUDA_OFF;  /* off until trainer.gpu.graph passes on a GPU */
  o->engine_cache_dir = NULL;
  int c = dpt_cuda_conv_parse(getenv("DPT_CUDA_CONV")); /* a bad value: dpt_backend_cuda_create says so */
  o->conv = c >= 0 ? c : DPT_CUDA_CONV_AUTO;
}

int dpt_cuda_conv_parse(const char *s)
{
  if (!s || !*s || !strcmp(s, "auto")) return DPT_CUDA_CONV_AUTO;
  if (!strcmp(s, "legacy")) return DPT_CUDA_CONV_LEGACY;
  if (!strcmp(s, "graph")) return DPT_CUDA_CONV_GRAPH;
  return -1;
}

int dpt_cuda_switch_parse(const char *s)
{
  if (!s) return -1;
  if (!strcmp(s, "off")) return DPT_CUDA_OFF;
  if (!strcmp(s, "on")) return DPT_CUDA_ON;
  if (!strcmp(s, "auto")) return DPT_CUDA_AUTO;
  return -1;
}

/* DPT_CUDA_WORKSPACE_MB: the cap on the convolution workspace in MiB (0: none) over the default 512:
 * cudnnFind may then pick algorithms that need more (PyTorch's benchmark mode allows any that fit). */
static int workspace_cap_env(struct dpt_cuda_opts *co, struct dpt_err *err)
{
  const char *e = getenv("DPT_CUDA_WORKSPACE_MB");
  char *end = NULL;
  if (!e) return 0;
  errno = 0;
  unsigned long long v = *e >= '0' && *e <= '9' ? strtoull(e, &end, 10) : 0;
  if (!end || *end || errno || v > (1ull << 24))
    return dpt_err_set(err, DPT_E_INPUT, "DPT_CUDA_WORKSPACE_MB='%s': expected the convolution workspace cap in MiB, "
                       "0 (no cap) to 16777216; unset it for the default 512", e);
  co->workspace_cap = (size_t)v << 20;
  return 0;
}

/* An option (wins) or its environment variable: the switch, or DPT_E_INPUT naming the value. */
static int switch_of(const char *opt, const char *option, const char *env, int *v, struct dpt_err *err)
{
  const char *e = getenv(env), *s = option ? option : e;
  if (!s) return 0;
  int x = dpt_cuda_switch_parse(s);
  if (x < 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': expected on, off or auto", option ? opt : env, s);
  *v = x;
  return 0;
}

int dpt_cuda_device_usable(char *why, size_t why_len)
{
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) snprintf(why, why_len, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                      cudaGetErrorName(e));
    return 0;
  }
  if (n < 1) {
    if (why) snprintf(why, why_len, "cudaGetDeviceCount found 0 devices");
    return 0;
  }
  if (why && why_len) why[0] = 0;
  return 1;
}

int dpt_cuda_device_works(char *why, size_t why_len)
{
  if (!dpt_cuda_device_usable(why, why_len)) return 0;
  int dev = getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
  void *p = NULL;
  cudaError_t e = cudaSetDevice(dev);
  const char *call = "cudaSetDevice";
  if (e == cudaSuccess) {
    call = "cudaMalloc(256 bytes)";
    e = cudaMalloc(&p, 256);
  }
  if (e == cudaSuccess) {
    call = "cudaFree";
    e = cudaFree(p);
  }
  if (e != cudaSuccess) {
    if (why) snprintf(why, why_len, "%s on device %d failed: %s (%s)", call, dev, cudaGetErrorString(e),
                      cudaGetErrorName(e));
    cudaGetLastError(); /* reset the runtime's last error: the cpu run that follows starts clean */
    return 0;
  }
  return 1;
}

/* dpt-train --deterministic: the algorithms test_gpu_step compares bit for bit, two backends picking
 * the same ones: cuDNN's heuristic order (Get*_v7, not the timed Find*), deterministic sums of products
 * only (no atomics: cuDNN's ALGO_0 / ALGO_3 weight gradients, ALGO_0 data gradients), as PyTorch's
 * cudnn.benchmark off + cudnn.deterministic on.  The fused step times its engines: off. */
static int deterministic_of(struct dpt_cuda_opts *co, const struct dpt_backend_opts *opts, struct dpt_err *err)
{
  if (co->fuse == DPT_CUDA_ON)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: --deterministic with %s on: the fused step picks its "
                       "cuDNN engines by timing them; use --fuse off (or auto) with --deterministic",
                       opts->fuse ? "--fuse" : "DPT_CUDA_FUSE");
  co->fuse = DPT_CUDA_OFF;
  co->algo_search = 0;
  co->deterministic = 1;
  return 0;
}

int dpt_backend_cuda_create(const struct dpt_model *model, const struct dpt_backend_opts *opts,
                            struct dpt_backend **out, struct dpt_err *err)
{
  struct dpt_cuda_opts co;
  dpt_cuda_opts_default(&co);
  if (opts && opts->precision) { /* dpt-train --precision: wins over DPT_CUDA_PRECISION */
    int p = dpt_cuda_precision_parse(opts->precision);
    if (p < 0) {
      *out = NULL;
      return dpt_err_set(err, DPT_E_INPUT, "cuda backend: precision '%s': expected fp32, tf32, mixed or bf16",
                         opts->precision);
    }
    co.precision = (enum dpt_cuda_precision)p;
  } else if (getenv("DPT_CUDA_PRECISION") && dpt_cuda_precision_parse(getenv("DPT_CUDA_PRECISION")) < 0) {
    *out = NULL;
    return dpt_err_set(err, DPT_E_INPUT, "DPT_CUDA_PRECISION='%s': expected fp32, tf32, mixed or bf16",
                       getenv("DPT_CUDA_PRECISION"));
  }
  if (dpt_cuda_conv_parse(getenv("DPT_CUDA_CONV")) < 0) {
    *out = NULL;
    return dpt_err_set(err, DPT_E_INPUT, "DPT_CUDA_CONV='%s': expected auto (per convolution shape the faster of "
                       "cudnnFind's algorithm and a timed cuDNN graph engine), legacy or graph; unset it for auto",
                       getenv("DPT_CUDA_CONV"));
  }
  /* dpt-train --fuse / --cuda-graph: win over DPT_CUDA_FUSE / DPT_CUDA_GRAPH */
  int rc;
  if ((rc = switch_of("--fuse", opts ? opts->fuse : NULL, "DPT_CUDA_FUSE", &co.fuse, err)) ||
      (rc = switch_of("--cuda-graph", opts ? opts->cuda_graph : NULL, "DPT_CUDA_GRAPH", &co.graph, err)) ||
      (rc = workspace_cap_env(&co, err)) || (opts && opts->deterministic && (rc = deterministic_of(&co, opts, err)))) {
    *out = NULL;
    return rc;
  }
  return dpt_backend_cuda_create_ex(model, opts, &co, out, err);
}

static int set_tensor_desc(struct cu_backend *cb, cudnnTensorDescriptor_t d,
                           const struct dpt_cuda_tensor_plan *p, int li, struct dpt_err *err)
{
  int rc = 0;
  DNN_CK(cudnnSetTensor4dDescriptor, (d, p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                      tensor_type(cb, p), p->n, p->c_stored, p->h, p->w), li, "tensor");
  return 0;
fail:
  return rc;
}

static int layer_create(struct cu_backend *cb, int li, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  const struct dpt_layer_desc *d = &m->layers[li];
  struct dpt_layer *l = &cb->pub.layers[li];
  struct cu_layer *L = &cb->l[li];
  const struct dpt_cuda_tensor_plan *x = &cb->plan.t[d->in[0]];
  int rc = 0, half = dpt_cuda_precision_half(cb->plan.precision);
  char *arena = cb->region[DPT_CUDA_R_ARENA], *wr = cb->region[DPT_CUDA_R_WEIGHTS];
  cudnnDataType_t ct = cb->dtype == DPT_DT_BF16 ? CUDNN_DATA_BFLOAT16 : half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  L->cb = cb;
  if (cb->plan.scratch_off[li] != (size_t)-1) L->scratch = arena + cb->plan.scratch_off[li];
  if (cb->plan.discard_off[li] != (size_t)-1) L->discard = arena + cb->plan.discard_off[li];
  L->idx = li;
  L->conv = -1;
  L->add_bn = -1;
  l->desc = d;
  l->impl = L;
  l->params = cb->pub.params + d->w_off;
  l->grads = cb->pub.grads + d->w_off;
  l->state = d->type == DPT_LAYER_BN ? cb->pub.state + d->s_off : NULL;
  switch (d->type) {
  case DPT_LAYER_CONV: {
    l->ops = &dpt_cuda_conv_ops;
    for (int c = 0; c < cb->plan.n_conv; c++)
      if (cb->plan.conv[c].layer == li) L->conv = c;
    const struct dpt_cuda_conv_plan *cp = &cb->plan.conv[L->conv];
    DNN_CK(cudnnCreateFilterDescriptor, (&L->fdesc), li, "");
    DNN_CK(cudnnSetFilter4dDescriptor, (L->fdesc, ct, cb->plan.nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC, cp->k, cp->c,
                                         cp->r, cp->s), li, "");
    DNN_CK(cudnnCreateConvolutionDescriptor, (&L->cdesc), li, "");
    DNN_CK(cudnnSetConvolution2dDescriptor, (L->cdesc, cp->pad, cp->pad, cp->stride, cp->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), li, "");
    /* fp32: FMA only (TF32 off, the oracle); tf32, fp16, bf16: tensor-core math
     * (cuDNN then lists its tensor-core kernels, and the measured search picks among them) */
    DNN_CK(cudnnSetConvolutionMathType, (L->cdesc, dpt_cuda_conv_search_math(cb)), li, "");
    int dims[4];
    DNN_CK(cudnnGetConvolution2dForwardOutputDim, (L->cdesc, cb->t[d->in[0]].desc, L->fdesc, &dims[0],
                                                   &dims[1], &dims[2], &dims[3]), li, "");
    if (dims[0] != cp->n || dims[1] != cp->k || dims[2] != cp->p || dims[3] != cp->q) {
      char shape[192];
      dpt_cuda_layer_shape(cb, li, shape, sizeof shape);
      return dpt_err_set(err, DPT_E_RUNTIME, "cuda backend: cuDNN says convolution '%s' (%s) outputs "
                         "[%d,%d,%d,%d], the plan says [%d,%d,%d,%d]", d->name, shape, dims[0],
                         dims[1], dims[2], dims[3], cp->n, cp->k, cp->p, cp->q);
    }
    /* NHWC: the KRSC weight copy and the shared weight-gradient buffer (the plan's weight region);
     * NCHW fp32: the slabs' own KCRS weights and gradients */
    L->w16 = cb->plan.nchw ? (void *)l->params : wr + cb->plan.wcopy_off[li];
    L->dw16 = cb->plan.nchw ? (void *)l->grads : wr + cb->plan.wgrad_off;
    break;
  }
  case DPT_LAYER_BN:
    l->ops = &dpt_cuda_bn_ops;
    DNN_CK(cudnnCreateTensorDescriptor, (&L->pdesc), li, "");
    DNN_CK(cudnnDeriveBNTensorDescriptor, (L->pdesc, cb->t[d->in[0]].desc, CUDNN_BATCHNORM_SPATIAL), li, "");
    break;
  case DPT_LAYER_RELU: l->ops = &dpt_cuda_relu_ops; break;
  case DPT_LAYER_MAXPOOL:
  case DPT_LAYER_GAP: {
    l->ops = &dpt_cuda_pool_ops;
    int maxp = d->type == DPT_LAYER_MAXPOOL;
    DNN_CK(cudnnCreatePoolingDescriptor, (&L->pool), li, "");
    DNN_CK(cudnnSetPooling2dDescriptor, (L->pool, maxp ? CUDNN_POOLING_MAX_DETERMINISTIC
                                         : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                         CUDNN_PROPAGATE_NAN, maxp ? d->kernel : x->h,
                                         maxp ? d->kernel : x->w, maxp ? d->pad : 0, maxp ? d->pad : 0,
                                         maxp ? d->stride : 1, maxp ? d->stride : 1), li, "");
    break;
  }
  case DPT_LAYER_FC:
    l->ops = &dpt_cuda_fc_ops;
    if (x->h * x->w != 1 || x->c_stored != x->c) {
      char shape[192];
      dpt_cuda_layer_shape(cb, li, shape, sizeof shape);
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "cuda backend: FC layer '%s' (%s) needs an [N, C, 1, 1] "
                         "input (global average pool before it: NHWC and NCHW agree only there)", d->name, shape);
    }
    DNN_CK(cudnnCreateTensorDescriptor, (&L->pdesc), li, "");
    DNN_CK(cudnnSetTensor4dDescriptor, (L->pdesc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->c_out, 1, 1),
           li, "");
    if (half) L->w16 = wr + cb->plan.wcopy_off[li];
    break;
  case DPT_LAYER_ADD: l->ops = &dpt_cuda_add_ops; break;
  default:
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: layer %d '%s' has unknown type %d", li, d->name,
                       d->type);
  }
  return 0;
fail:
  return rc;
}

/* Activations and their gradients: the liveness arena, at the plan's offsets (a tensor the
 * plan does not place, one the fused step never writes, has no buffer). */
static void set_tensor_ptrs(struct cu_backend *cb)
{
  char *arena = cb->region[DPT_CUDA_R_ARENA];
  for (int i = 0; i < cb->plan.n_tensors; i++) {
    const struct dpt_cuda_tensor_plan *tp = &cb->plan.t[i];
    cb->t[i].buf = tp->act_lo <= tp->act_hi ? arena + tp->act_off : NULL;
    cb->t[i].diff = tp->diff_lo <= tp->diff_hi ? arena + tp->diff_off : NULL;
  }
  cb->in_own = cb->t[0].buf;
}

/* The fused step's operands (dpt_cuda_fstep_io). */
static void *fx_resolve(void *ctx, const struct dpt_fx_ref *r)
{
  struct cu_backend *cb = ctx;
  switch (r->kind) {
  case DPT_FXR_ACT: return cb->t[r->id].buf;
  case DPT_FXR_DIFF: return cb->t[r->id].diff;
  case DPT_FXR_W: return (char *)cb->region[DPT_CUDA_R_WEIGHTS] + cb->plan.wcopy_off[r->id];
  case DPT_FXR_WGRAD: return (char *)cb->region[DPT_CUDA_R_WEIGHTS] + cb->plan.wgrad_off;
  case DPT_FXR_PARAM: return cb->pub.params + r->off;
  case DPT_FXR_GRAD: return cb->pub.grads + r->off;
  case DPT_FXR_STATE: return cb->pub.state + r->off;
  case DPT_FXR_STATE_NEXT:
    return cb->plan.bn_next_off ? (float *)((char *)cb->region[DPT_CUDA_R_BN] + cb->plan.bn_next_off) + r->off : NULL;
  case DPT_FXR_BNVEC: {
    const struct cu_layer *L = &cb->l[r->id];
    size_t c = (size_t)cb->pub.model->layers[r->id].c_out;
    if (r->off == DPT_FX_EQ_BIAS_IO) /* 16-bit values: the bias after the scale's C */
      return (char *)(L->bn_vec + (DPT_FX_EQ_IO - DPT_FX_SUM) * c) + 2 * c;
    return r->off == DPT_FX_MEAN ? L->save_mean : r->off == DPT_FX_ISTD ? L->save_istd
                                                                        : L->bn_vec + (r->off - DPT_FX_SUM) * c;
  }
  default: return NULL;
  }
}

int dpt_cuda_note(struct cu_backend *cb, const char *fmt, ...)
{
  size_t n = strlen(cb->notes);
  va_list ap;
  va_start(ap, fmt);
  if (n + 1 < sizeof cb->notes) vsnprintf(cb->notes + n, sizeof cb->notes - n, fmt, ap);
  va_end(ap);
  n = strlen(cb->notes);
  if (n + 1 < sizeof cb->notes && n && cb->notes[n - 1] != '\n') strcat(cb->notes, "\n");
  return 0;
}


/* The fused step (--fuse): the engine cache and the errata, then every fused op's cuDNN graph
 * built on the arena (its engine from the cache, else timed: dpt_cudnn_graph).  An op with no
 * engine here keeps its layer on the legacy calls (dpt_cuda_fuse_deny) and the plan is made
 * again, its arena reallocated when it grew; the notes say which fell back and why. */
int dpt_cuda_engines_open(struct cu_backend *cb, struct dpt_err *err)
{
  struct dpt_engine_ident id;
  struct cudaDeviceProp prop;
  int rc = 0;
  if (cb->ecache_open) return 0;
  memset(&id, 0, sizeof id);
  CUDA_CK(cudaGetDeviceProperties, (&prop, cb->dev), -1, "engine cache");
  snprintf(id.gpu, sizeof id.gpu, "%.127s", prop.name);
  id.cc_major = prop.major;
  id.cc_minor = prop.minor;
  CUDA_CK(cudaDriverGetVersion, (&id.driver), -1, "engine cache");
  id.cudnn = (long)cudnnGetVersion();
  {
    struct dpt_err ce = {0};
    if (dpt_engine_cache_open(&cb->ecache, &id, cb->copts.engine_cache_dir, &ce)) { /* no place for it: timed each run */
      dpt_cuda_note(cb, "engines: no engine cache (%s): every cuDNN graph engine is timed at start", ce.msg);
      if ((rc = dpt_engine_cache_open(&cb->ecache, &id, "off", err))) return rc;
    }
  }
  cb->ecache_open = 1;
  if (cb->ecache.warning[0]) dpt_cuda_note(cb, "%s", cb->ecache.warning);
  {
    char dir[1024] = "", epath[1100];
    snprintf(dir, sizeof dir, "%s", cb->ecache.path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else dir[0] = '\0';
    dpt_cudnn_errata_find(epath, sizeof epath, dir[0] ? dir : NULL, DPT_CUDNN_ERRATA_DEFAULT);
    if (epath[0] && access(epath, R_OK) == 0) {
      if ((rc = dpt_cudnn_errata_load(&cb->errata, epath, err))) return rc;
      cb->errata_loaded = 1;
    }
  }
fail:
  return rc;
}

static int fused_setup(struct cu_backend *cb, struct dpt_err *err)
{
  const struct dpt_model *m = cb->pub.model;
  int rc = 0, nfell = 0;
  void *tws = NULL;
  char fell[1600] = "";
  struct dpt_cg_stats st = {0};
  struct timespec t0, t1;
  int rounds = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if ((rc = dpt_cuda_engines_open(cb, err))) return rc;
  size_t fr = 0, tot = 0;
  CUDA_CK(cudaMemGetInfo, (&fr, &tot), -1, "fused step tuning workspace");
  size_t limit = dpt_cuda_workspace_limit(fr, 0, cb->copts.workspace_cap);
  if (limit && (rc = dpt_cuda_dalloc(cb, &tws, limit, "fused step tuning workspace", err))) return rc;
  struct dpt_cg_ctx ctx = {.dnn = cb->dnn, .device = cb->dev, .cudnn_version = cb->ecache.id.cudnn, .cache = &cb->ecache,
                           .errata = cb->errata_loaded ? &cb->errata : NULL, .workspace = tws,
                           .workspace_limit = limit, .max_candidates = 0, .stats = &st, .probe = 0};
  struct dpt_cuda_fstep_io io = {fx_resolve, cb};
  int *failed = malloc((size_t)(2 * m->n_layers + 1) * 4 * sizeof *failed); /* >= any plan's op count */
  if (!failed) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
    goto fail;
  }
  for (;;) {
    int n_failed = 0, denied = 0;
    struct dpt_err e = {0};
    rounds++;
    rc = dpt_cuda_fstep_build(&cb->fx, m, &cb->plan, &ctx, cb->stream, &io, cb->pub.opts.bn_eps,
                              cb->pub.opts.bn_momentum, failed, &n_failed, &e);
    if (rc != DPT_E_UNSUPPORTED || !n_failed) {
      if (!rc && ctx.probe && cb->fx.probed) { /* every op's key has an engine now: build the skipped too */
        dpt_cuda_fstep_destroy(&cb->fx);
        ctx.probe = 0;
        continue;
      }
      if (rc) *err = e;
      break;
    }
    ctx.probe = 1; /* after a denial: the next rounds search only the keys the cache does not know */
    for (int k = 0; k < n_failed; k++) { /* every op without an engine: its layer on the legacy calls */
      const struct dpt_fop *op = &cb->plan.fuse->ops[failed[k]];
      int l = dpt_cuda_fuse_layer_denied(m, cb->plan.fuse, failed[k]);
      if (l < 0 || cb->legacy[l]) continue; /* a legacy op, or a layer another failed op named already */
      dpt_cuda_fuse_deny(m, cb->plan.fuse, failed[k], cb->legacy);
      size_t n = strlen(fell);
      if (nfell < 4 && n + 1 < sizeof fell)
        snprintf(fell + n, sizeof fell - n, "%s'%s' (%s%s%.600s)", nfell ? "; " : "", m->layers[l].name,
                 dpt_fop_name(op->kind), nfell ? "" : ": ", nfell ? "" : e.msg);
      nfell++;
      denied++;
    }
    if (!denied) {
      *err = e;
      break;
    }
    /* the plan again without that fusion; the arena may grow */
    size_t had = cb->plan.region[DPT_CUDA_R_ARENA];
    struct dpt_cuda_plan_opts po = {1, cb->legacy, 0}; /* fused: NHWC */
    dpt_cuda_plan_free(&cb->plan);
    if ((rc = dpt_cuda_plan_build_ex(m, cb->pub.opts.batch, cb->copts.precision, cb->pub.opts.need_input_grad, &po,
                                     &cb->plan, err)))
      break;
    if (cb->plan.region[DPT_CUDA_R_ARENA] > had) {
      dpt_cuda_dfree(cb, cb->region[DPT_CUDA_R_ARENA]);
      if ((rc = dpt_cuda_dalloc(cb, &cb->region[DPT_CUDA_R_ARENA], cb->plan.region[DPT_CUDA_R_ARENA],
                       dpt_cuda_region_name(DPT_CUDA_R_ARENA), err)))
        break;
    } else {
      cb->plan.region[DPT_CUDA_R_ARENA] = had; /* the allocation stays */
    }
    set_tensor_ptrs(cb);
  }
  free(failed);
  if (tws) dpt_cuda_dfree(cb, tws);
  if (rc) return rc;
  struct dpt_err se = {0};
  /* fx counts the last round only: store whatever any round learned (engines and keys without one) */
  if (cb->ecache.dirty && dpt_engine_cache_store(&cb->ecache, &se))
    dpt_cuda_note(cb, "fused step: warning: the engine choices were not stored: %s", se.msg);
  const struct dpt_fuse_counts *c = &cb->plan.fuse->counts;
  /* "from the cache": cache hits over all rounds less the engines this start timed itself (a timed
   * key is hit again by the last round and by later ops of its shape: an estimate of the file's share) */
  dpt_cuda_note(cb, "fused step: %d of %d ops through cuDNN graphs, engines: %d from the cache %s, %d timed%s%s; %d legacy "
       "layer ops (pooling, FC, loss%s)", cb->fx.n_graph, c->ops_fwd + c->ops_bwd,
       st.from_cache - st.timed > 0 ? st.from_cache - st.timed : 0, cb->ecache.path[0] ? cb->ecache.path : "(off)", st.timed,
       st.timed && cb->ecache.path[0] ? " and stored" : "",
       cb->errata_loaded ? "" : " (no errata file)", c->legacy_fwd + c->legacy_bwd,
       c->legacy_fwd > 3 ? ", convolutions whose channels are not a multiple of the tensor-core one" : "");
  if (cb->fx.n_own_dbn) /* no engine for the pattern: the own kernel, not the legacy calls (dpt_cuda_dbn.h) */
    dpt_cuda_note(cb, "fused step: %d dBN weight op(s) (dbn_weight) on dpt's own reduction kernel, their layers fused: "
                  "cuDNN runs BN_BWD_WEIGHTS only after a dgrad; for the first: %.240s", cb->fx.n_own_dbn,
                  cb->fx.own_dbn_why);
  if (cb->fx.n_prologue && cb->fx.io_type != DPT_CG_F32)
    dpt_cuda_note(cb, "fused step: %d of %d scale-bias-ReLU prologue op(s) (sbr_conv_stats, sbr_wgrad) read the BN's "
                  "scale / bias in %s (cast after its finalize), %d in fp32", cb->fx.n_sb_io, cb->fx.n_prologue,
                  cb->fx.io_type == DPT_CG_F16 ? "fp16" : "bf16", cb->fx.n_prologue - cb->fx.n_sb_io);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  dpt_cuda_note(cb, "fused step: engine search %.1f s: %d round(s), %d graph builds (%d timed, %d from the cache, %d "
                "without an engine, %d of them known from before, %d refused: an operand not %d-byte aligned), %ld execution "
                "plans finalized, %d searches capped; %d timed choice(s) from cuDNN's fallback list",
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), rounds, st.builds, st.timed,
                st.from_cache, st.no_engine + st.no_engine_known, st.no_engine_known, st.unaligned, DPT_CG_ALIGN,
                st.plans, st.capped, st.fallback);
  if (nfell)
    dpt_cuda_note(cb, "fused step: %d layer(s) back on the legacy calls, no cuDNN graph for their pattern here: %s%s", nfell,
         fell, nfell > 4 ? "; ..." : "");
  return 0;
fail:
  if (tws) dpt_cuda_dfree(cb, tws);
  return rc;
}

/* A convolution of shape s that runs on the legacy calls (its tensors exist), -1 if none. */
static int legacy_rep(const struct cu_backend *cb, int s)
{
  if (!cb->fused) return cb->plan.shape_rep[s];
  for (int c = 0; c < cb->plan.n_conv; c++)
    if (cb->plan.conv[c].shape_id == s && !cb->plan.fuse->conv_fused[cb->plan.conv[c].layer]) return c;
  return -1;
}

static void *search_ws_in_arena(const struct cu_backend *cb, int rep, size_t limit);

/* The convolutions' cuDNN graphs (dpt_cuda_convg.c), each shape's after cudnnFind's choices, in
 * at most the workspace those need already (the largest, the BN Ex calls' and the fused ops'
 * included): the backend's peak does not grow.  The graphs are timed in the arena's gap, else in
 * *own (the search's, or allocated here). */
static int convg_setup(struct cu_backend *cb, size_t limit, void **own, struct dpt_err *err)
{
  int rc = 0;
  struct timespec t0, t1;
  if (cb->convg == DPT_CUDA_CONV_LEGACY) {
    dpt_cuda_convg_note(cb, 0);
    return 0;
  }
  clock_gettime(CLOCK_MONOTONIC, &t0);
  size_t glimit = cb->bn_ws_bytes > cb->fx.workspace ? cb->bn_ws_bytes : cb->fx.workspace;
  for (int s = 0; s < cb->plan.n_shapes; s++) {
    const struct cu_algo *a = &cb->algo[s];
    if (a->ws_fwd > glimit) glimit = a->ws_fwd;
    if (a->ws_data > glimit) glimit = a->ws_data;
    if (a->ws_filter > glimit) glimit = a->ws_filter;
  }
  if (glimit > limit) glimit = limit;
  if ((rc = dpt_cuda_engines_open(cb, err))) return rc;
  for (int s = 0; s < cb->plan.n_shapes; s++) {
    int rep = legacy_rep(cb, s);
    if (rep < 0) continue;
    void *gws = glimit ? search_ws_in_arena(cb, rep, glimit) : NULL;
    if (glimit && !gws && !*own && (rc = dpt_cuda_dalloc(cb, own, glimit, "convolution graph search workspace", err)))
      return rc;
    if (glimit && !gws) gws = *own;
    if ((rc = dpt_cuda_convg_choose(cb, s, rep, gws, glimit, err))) return rc;
  }
  struct dpt_err se = {0};
  if (cb->ecache.dirty && dpt_engine_cache_store(&cb->ecache, &se))
    dpt_cuda_note(cb, "convolutions: warning: the engine choices were not stored: %s", se.msg);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  dpt_cuda_convg_note(cb, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return 0;
}

/* The measured search's workspace for conv rep: limit bytes of the activation arena apart from the
 * four tensors the search reads and writes (x, y and their gradients; the arena is cleared after the
 * search), else NULL: no such gap (a small batch), the caller's own allocation then. */
static void *search_ws_in_arena(const struct cu_backend *cb, int rep, size_t limit)
{
  int li = cb->plan.conv[rep].layer;
  const struct dpt_layer_desc *d = &cb->pub.model->layers[li];
  const char *base = cb->region[DPT_CUDA_R_ARENA], *w = cb->l[li].w16, *dw = cb->l[li].dw16;
  size_t size = cb->plan.region[DPT_CUDA_R_ARENA], off[4], len[4];
  int ids[2] = {d->in[0], d->out}, n = 0;
  if (!base || (w >= base && w < base + size) || (dw >= base && dw < base + size))
    return NULL; /* weights in the arena (not so planned): the search keeps its own workspace */
  for (int k = 0; k < 2; k++)
    for (int f = 0; f < 2; f++) {
      const char *p = f ? cb->t[ids[k]].diff : cb->t[ids[k]].buf;
      if (!p || p < base || p >= base + size) continue; /* not in the arena */
      off[n] = (size_t)(p - base);
      len[n++] = cb->plan.t[ids[k]].bytes;
    }
  size_t at = dpt_cuda_region_gap(size, off, len, n, limit, 256);
  return at == (size_t)-1 ? NULL : (void *)(base + at);
}

int dpt_backend_cuda_create_ex(const struct dpt_model *m, const struct dpt_backend_opts *opts,
                               const struct dpt_cuda_opts *copts, struct dpt_backend **out,
                               struct dpt_err *err)
{
  int rc = 0, ndev = 0;
  char why[256];
  *out = NULL;
  /* First: is there a device at all?  Nothing else is touched without one. */
  if (!dpt_cuda_device_usable(why, sizeof why))
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "backend cuda: no usable CUDA device (%s); use "
                       "--backend cpu, or --backend auto to pick the GPU only when one works", why);
  if (!m || !opts || m->n_layers < 1)
    return dpt_err_set(err, DPT_E_INPUT, "cuda backend: no model or options given (the model has no layers)");
  if (opts->batch < 1) return dpt_err_set(err, DPT_E_INPUT, "cuda backend: batch size %d < 1", opts->batch);
  struct cu_backend *cb = calloc(1, sizeof *cb);
  if (!cb) return dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
  struct dpt_backend *be = &cb->pub;
  be->ops = &dpt_cuda_ops;
  be->model = m;
  be->opts = *opts;
  be->host_slabs = 0;
  be->precision = dpt_cuda_precision_name(copts->precision);
  cb->copts = *copts;
  cb->dtype = copts->precision == DPT_CUDA_MIXED ? DPT_DT_F16 : copts->precision == DPT_CUDA_BF16 ? DPT_DT_BF16
                                                                                                  : DPT_DT_F32;
  cb->sync_debug = getenv("DPT_CUDA_SYNC_DEBUG") && atoi(getenv("DPT_CUDA_SYNC_DEBUG")) > 0;
  cb->dev = copts->device;
  if (cb->dev < 0) cb->dev = getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
  /* issue 15: the fused step, CUDA-graph capture */
  cb->fused = copts->fuse == DPT_CUDA_ON || (copts->fuse == DPT_CUDA_AUTO && copts->precision != DPT_CUDA_FP32);
  be->graph = copts->graph == DPT_CUDA_ON || (copts->graph == DPT_CUDA_AUTO && !cb->sync_debug);
  cb->launch_seg = -1;
  cb->gslot = -1;
  dpt_cuda_capture_state_init(&cb->cap, 1);
  if (copts->graph == DPT_CUDA_ON && cb->sync_debug) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: --cuda-graph on with DPT_CUDA_SYNC_DEBUG=1: a captured step "
                     "cannot wait after each layer; use one of them");
    goto fail;
  }
  if (cb->fused && !(cb->legacy = calloc((size_t)m->n_layers, 1))) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
    goto fail;
  }
  /* fp32 in NCHW by default: the H200 visit saw cuDNN's float NHWC data gradients take 819 ms of a
   * 2 s step, where PyTorch's fp32 NCHW step took 243 ms; nchw asks it at tf32 too */
  const char *lay = getenv("DPT_CUDA_LAYOUT");
  int nchw = dpt_cuda_layout_nchw(lay, copts->precision);
  if (nchw < 0) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: DPT_CUDA_LAYOUT='%s' is not auto, nhwc or nchw: unset it "
                     "(auto: NCHW at fp32, NHWC otherwise) or name a layout", lay);
    goto fail;
  }
  if (copts->conv < DPT_CUDA_CONV_AUTO || copts->conv > DPT_CUDA_CONV_GRAPH) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: convolution choice %d is not auto, legacy or graph", copts->conv);
    goto fail;
  }
  cb->convg = copts->conv;
  if (cb->convg == DPT_CUDA_CONV_AUTO && (copts->deterministic || !copts->algo_search))
    cb->convg = DPT_CUDA_CONV_LEGACY; /* untimed choices: cuDNN's heuristic order (DPT_CUDA_CONV=graph for graphs) */
  struct dpt_cuda_plan_opts po = {cb->fused, cb->legacy, nchw};
  if ((rc = dpt_cuda_plan_build_ex(m, opts->batch, copts->precision, opts->need_input_grad, &po, &cb->plan, err)))
    goto fail;
  if (cb->plan.nchw)
    dpt_cuda_note(cb, "layout: NCHW (%s; DPT_CUDA_LAYOUT=nhwc for NHWC): convolutions read the fp32 weights in place",
                  lay && !strcmp(lay, "nchw") ? "DPT_CUDA_LAYOUT=nchw" : "fp32's default");
  cudaGetDeviceCount(&ndev);
  if (cb->dev < 0 || cb->dev >= ndev) {
    rc = dpt_err_set(err, DPT_E_INPUT, "cuda backend: device %d requested (DPT_CUDA_DEVICE or "
                     "option) but only %d visible (CUDA_VISIBLE_DEVICES)", cb->dev, ndev);
    goto fail;
  }
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "device");
  CUDA_CK(cudaStreamCreateWithFlags, (&cb->stream, cudaStreamNonBlocking), -1, "stream");
  CUDA_CK(cudaStreamCreateWithFlags, (&cb->up_stream, cudaStreamNonBlocking), -1, "upload stream");
  CUDA_CK(cudaEventCreateWithFlags, (&cb->in_free, cudaEventDisableTiming), -1, "input event");
  CUDA_CK(cudaEventCreateWithFlags, (&cb->lab_free, cudaEventDisableTiming), -1, "label event");
  for (int k = 0; k < NSTAGE; k++) {
    CUDA_CK(cudaEventCreateWithFlags, (&cb->x_ev[k], cudaEventDisableTiming), -1, "input staging event");
    CUDA_CK(cudaEventCreateWithFlags, (&cb->lab_ev[k], cudaEventDisableTiming), -1, "label staging event");
  }
  DNN_CK(cudnnCreate, (&cb->dnn), -1, "cuDNN handle");
  DNN_CK(cudnnSetStream, (cb->dnn, cb->stream), -1, "cuDNN handle");
  BLAS_CK(cublasCreate, (&cb->blas), -1, "cuBLAS handle");
  BLAS_CK(cublasSetStream, (cb->blas, cb->stream), -1, "cuBLAS handle");
  BLAS_CK(cublasSetMathMode, (cb->blas, cb->plan.precision == DPT_CUDA_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                              : CUBLAS_DEFAULT_MATH), -1, "cuBLAS handle");
  /* Does the plan fit?  Its regions plus a reserve for the workspace, cuDNN and cuBLAS. */
  {
    size_t fr = 0, tot = 0, need = 0, reserve = dpt_cuda_memory_reserve(cb->copts.workspace_cap);
    CUDA_CK(cudaMemGetInfo, (&fr, &tot), -1, "memory check");
    if (cb->plan.total_bytes + reserve > fr) {
      int fit = dpt_cuda_plan_fit_ex(m, copts->precision, opts->need_input_grad, &po, opts->batch, fr, reserve, &need,
                                     err);
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: batch %d needs %zu bytes on device %d (%zu planned: "
                       "activations, gradients and slabs; + %zu reserved for the convolution workspace, cuDNN "
                       "and cuBLAS) but %zu of %zu are free; the largest batch that fits is %d: use "
                       "--batch-size %d or less%s", opts->batch, cb->plan.total_bytes + reserve, cb->dev,
                       cb->plan.total_bytes, reserve, fr, tot, fit > 0 ? fit : 0, fit > 0 ? fit : 1,
                       fit > 0 ? "" : " (not even batch 1 fits: free the GPU or use a smaller --width)");
      goto fail;
    }
  }
  size_t np = m->n_params;
  int N = opts->batch, o = m->layers[m->n_layers - 1].out;
  for (int r = 0; r < DPT_CUDA_NREGIONS; r++) /* one allocation per region: a fixed handful */
    if ((rc = dpt_cuda_dalloc(cb, &cb->region[r], cb->plan.region[r], dpt_cuda_region_name(r), err))) goto fail;
  be->params = cb->region[DPT_CUDA_R_PARAMS];
  be->grads = cb->region[DPT_CUDA_R_GRADS];
  be->state = cb->region[DPT_CUDA_R_STATE];
  cb->velocity = cb->region[DPT_CUDA_R_SGD];
  cb->mask = (unsigned char *)cb->region[DPT_CUDA_R_SGD] + (np * 4 + 255) / 256 * 256;
  cb->dy16 = cb->region[DPT_CUDA_R_SCRATCH];
  cb->t = calloc((size_t)cb->plan.n_tensors, sizeof *cb->t);
  cb->l = calloc((size_t)m->n_layers, sizeof *cb->l);
  be->layers = calloc((size_t)m->n_layers, sizeof *be->layers);
  cb->algo = calloc((size_t)(cb->plan.n_shapes ? cb->plan.n_shapes : 1), sizeof *cb->algo);
  if (!cb->t || !cb->l || !be->layers || !cb->algo) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory for %d layers", m->n_layers);
    goto fail;
  }
  /* activations and their gradients: the liveness arena, at the plan's offsets */
  for (int i = 0; i < cb->plan.n_tensors; i++) {
    const struct dpt_cuda_tensor_plan *tp = &cb->plan.t[i];
    DNN_CK(cudnnCreateTensorDescriptor, (&cb->t[i].desc), -1, "tensor");
    if ((rc = set_tensor_desc(cb, cb->t[i].desc, tp, -1, err))) goto fail;
  }
  set_tensor_ptrs(cb);
  {
    size_t nin = n_elems(&cb->plan.t[0]), nout = n_elems(&cb->plan.t[o]);
    cb->in32 = cb->region[DPT_CUDA_R_STAGING];
    cb->out32 = cb->in32 + nin;
    cb->dout32 = cb->out32 + nout;
    cb->dx32 = opts->need_input_grad ? cb->dout32 + nout : NULL;
  }
  {
    float *bn = cb->region[DPT_CUDA_R_BN];
    _Static_assert(DPT_FX_NVEC - DPT_FX_SUM == DPT_CUDA_BN_FUSED_VECS, "the plan sizes the BN vectors fstep uses");
    float *fz = (float *)((char *)cb->region[DPT_CUDA_R_BN] + cb->plan.bn_saved_bytes); /* fused: [8][C] each */
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].type == DPT_LAYER_BN) {
        cb->l[i].save_mean = bn;
        cb->l[i].save_istd = bn + m->layers[i].c_out;
        bn += 2 * m->layers[i].c_out;
        if (cb->plan.bn_fused_bytes) {
          cb->l[i].bn_vec = fz;
          fz += (size_t)(DPT_FX_NVEC - DPT_FX_SUM) * m->layers[i].c_out;
        }
      }
  }
  { /* the loss region: labels, ranks, row losses [N] each; at a 16-byte boundary the overflow
     * flag, 16 bytes on the totals [4] (doubles), 32 on the scaler (dpt_cuda_plan's loss_bytes) */
    char *lr = cb->region[DPT_CUDA_R_LOSS];
    size_t tail = ((size_t)N * 12 + 15) / 16 * 16;
    _Static_assert(48 + sizeof(struct dpt_loss_scaler) <= 128, "the loss region's tail holds the scaler");
    cb->labels = (int *)lr;
    cb->rank = cb->labels + N;
    cb->loss_rows = (float *)(cb->rank + N);
    cb->flag = (int *)(lr + tail);
    cb->tot = (double *)(lr + tail + 16);
    cb->scaler = (struct dpt_loss_scaler *)(lr + tail + 48);
    cb->lr_dev = (float *)(lr + tail + 128); /* the learning rate a captured step reads */
  }
  { /* pinned host memory: NSTAGE labels' staging slots, the readback area (the images' slots come
     * with the first pageable images: dpt_backend_cuda_input.c) */
    size_t lb = ((size_t)N * sizeof(int) + 63) / 64 * 64;
    cb->pinned_bytes = NSTAGE * lb + 64 + 64;
    CUDA_CK(cudaHostAlloc, (&cb->pinned, cb->pinned_bytes, cudaHostAllocPortable), -1, "pinned staging");
    char *h = cb->pinned;
    for (int k = 0; k < NSTAGE; k++, h += lb) cb->stage_lab[k] = (int *)h;
    cb->tot_host = (double *)h;
    cb->scaler_host = (struct dpt_loss_scaler *)(h + 64);
    /* the scaler's start: the initial scale of the options (used by mixed precision only) */
    dpt_loss_scaler_init(cb->scaler_host);
    cb->scaler_host->scale = copts->loss_scale;
    CUDA_CK(cudaMemcpyAsync, (cb->scaler, cb->scaler_host, sizeof *cb->scaler, cudaMemcpyHostToDevice, cb->stream), -1,
            "loss scaler");
  }
  /* the fused step's graphs, built on the (still zero) arena and slabs before the parameters arrive */
  if (cb->fused && (rc = fused_setup(cb, err))) goto fail;
  /* the fused optimizer's tables: the segments of the slab and their weight copies */
  {
    int *cst = calloc((size_t)m->n_layers, sizeof *cst);
    if (!cst) {
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of memory");
      goto fail;
    }
    for (int i = 0; i < m->n_layers; i++)
      if (m->layers[i].type == DPT_LAYER_CONV) cst[i] = cb->plan.t[m->layers[i].in[0]].c_stored;
    rc = dpt_optim_layout_build(m, cb->plan.wcopy_off, cst, cb->dtype, 0, &cb->olay, err);
    free(cst);
    if (rc) goto fail;
    int e = dpt_cuda_optim_upload(&cb->olay, &cb->otab, cb->stream);
    if (e) {
      rc = dpt_cuda_call_fail(cb, -1, "fused optimizer tables", "dpt_cuda_optim_upload", cudaGetErrorString((cudaError_t)e), err);
      goto fail;
    }
    cb->bytes += ((size_t)cb->olay.n_seg * sizeof(struct dpt_optim_seg) + 255) / 256 * 256 +
                 (size_t)cb->olay.n_chunk * sizeof(struct dpt_optim_chunk);
    if (cb->bytes > cb->peak) cb->peak = cb->bytes;
  }
  for (int i = 0; i < m->n_layers; i++) {
    if ((rc = layer_create(cb, i, err))) {
      dpt_err_prefix(err, "creating layer %d '%s' (%s) at batch %d", i, m->layers[i].name,
                     dpt_layer_type_name(m->layers[i].type), N);
      goto fail;
    }
    if (cb->fused) { /* the plan's ops of the layer; its legacy calls for the plan's legacy ops */
      cb->l[i].legacy = be->layers[i].ops;
      be->layers[i].ops = &dpt_cuda_fused_ops;
    }
  }
  /* initial parameters: the same bytes as every other backend */
  {
    size_t ns = m->n_state ? m->n_state : 1;
    float *hp = malloc((np ? np : 1) * 4), *hs = malloc(ns * 4);
    if (!hp || !hs) {
      free(hp);
      free(hs);
      rc = dpt_err_set(err, DPT_E_NOMEM, "cuda backend: out of host memory for %zu parameters", np);
      goto fail;
    }
    dpt_model_init_params(m, m->cfg.seed, hp, hs);
    rc = dpt_cuda_ops.copy_slab(be, DPT_SLAB_PARAMS, hp, 1, err);
    if (!rc) rc = dpt_cuda_ops.copy_slab(be, DPT_SLAB_STATE, hs, 1, err);
    free(hp);
    free(hs);
    if (rc) goto fail;
  }
  if ((long)cudnnGetVersion() < (long)CUDNN_VERSION) /* the H200 visit's machine: 9.14 under 9.19 headers */
    dpt_cuda_note(cb, "warning: cuDNN %ld at run time is older than the %ld dpt was built with: put a cuDNN >= the "
         "build's first on LD_LIBRARY_PATH (what it lacks, dpt cannot use)", (long)cudnnGetVersion(),
         (long)CUDNN_VERSION);
  if ((rc = dpt_cuda_bn_ex_prepare(cb, err))) goto fail;
  /* algorithms: once per distinct shape of the convolutions on legacy calls, under the workspace
   * limit (the weight copies the measured search runs on came with the parameters) */
  {
    size_t fr = 0, tot = 0;
    CUDA_CK(cudaMemGetInfo, (&fr, &tot), -1, "workspace sizing");
    size_t limit = dpt_cuda_workspace_limit(fr, 0, cb->copts.workspace_cap);
    void *own = NULL; /* allocated only for a shape whose arena has no gap of limit bytes */
    for (int s = 0; s < cb->plan.n_shapes; s++) {
      int rep = legacy_rep(cb, s);
      if (rep < 0) continue;
      cb->ws = copts->algo_search && limit ? search_ws_in_arena(cb, rep, limit) : NULL;
      if (copts->algo_search && limit && !cb->ws && !own &&
          (rc = dpt_cuda_dalloc(cb, &own, limit, "algorithm search workspace", err)))
        goto fail;
      if (copts->algo_search && limit && !cb->ws) cb->ws = own;
      if ((rc = dpt_cuda_choose_algos(cb, s, rep, limit, err))) goto fail;
    }
    cb->ws = NULL;
    if ((rc = convg_setup(cb, limit, &own, err))) goto fail;
    if (own) dpt_cuda_dfree(cb, own);
    for (int s = 0; s < cb->plan.n_shapes; s++) {
      const struct cu_algo *a = &cb->algo[s];
      if (a->ws_fwd > cb->ws_bytes) cb->ws_bytes = a->ws_fwd;
      if (a->ws_data > cb->ws_bytes) cb->ws_bytes = a->ws_data;
      if (a->ws_filter > cb->ws_bytes) cb->ws_bytes = a->ws_filter;
      if (a->ws_graph > cb->ws_bytes) cb->ws_bytes = a->ws_graph;
    }
    if (cb->fx.workspace > cb->ws_bytes) cb->ws_bytes = cb->fx.workspace; /* the fused ops' plans share it */
    if (cb->bn_ws_bytes > cb->ws_bytes) cb->ws_bytes = cb->bn_ws_bytes;   /* and the BN Ex calls */
    if (cb->ws_bytes && (rc = dpt_cuda_dalloc(cb, &cb->ws, cb->ws_bytes, "convolution workspace", err))) goto fail;
    cb->fx.ctx.workspace = cb->ws;
    cb->fx.ctx.workspace_limit = cb->ws_bytes;
    cb->cgx = (struct dpt_cg_ctx){.dnn = cb->dnn, .device = cb->dev, .cudnn_version = (long)cudnnGetVersion(),
                                  .cache = &cb->ecache, .errata = cb->errata_loaded ? &cb->errata : NULL,
                                  .workspace = cb->ws, .workspace_limit = cb->ws_bytes};
  }
  if (opts && opts->deterministic)
    dpt_cuda_note(cb, "deterministic: convolution algorithms in cuDNN's heuristic order, deterministic sums of "
                  "products only (not timed; slower); no fused step");
  if (be->graph) { /* captured GEMMs: cuBLAS works in a workspace of ours, allocated now */
    size_t bw = (size_t)32 << 20;
    if ((rc = dpt_cuda_dalloc(cb, &cb->blas_ws, bw, "cuBLAS workspace", err))) goto fail;
    BLAS_CK(cublasSetWorkspace, (cb->blas, cb->blas_ws, bw), -1, "cuBLAS workspace");
    dpt_cuda_note(cb, "CUDA graphs: on: each step key (training, validation, micro-batch; dpt_cuda_capture) runs eagerly "
         "once, is captured the next time and replayed after that");
  }
  /* the algorithm search ran on the arena: every buffer is rewritten by its first writer in
   * a step, but the pooled memory starts clean for compute-sanitizer's initcheck */
  CUDA_CK(cudaMemsetAsync, (cb->region[DPT_CUDA_R_ARENA], 0, cb->plan.region[DPT_CUDA_R_ARENA], cb->stream), -1,
          "arena");
  /* a fresh optimizer: zero momentum, so a caller that steps without sgd_init (trainer.gpu.ref)
   * never reads cudaMalloc's leftovers as velocity (that test's failures on both GPU visits were
   * its own out-of-date bounds, not this) */
  CUDA_CK(cudaMemsetAsync, (cb->region[DPT_CUDA_R_SGD], 0, cb->plan.region[DPT_CUDA_R_SGD], cb->stream), -1,
          "SGD momentum buffer");
  if ((rc = dpt_cuda_stream_sync(cb, -1, "creation", err))) goto fail;
  *out = be;
  return 0;
fail:
  dpt_cuda_ops.destroy(be);
  return rc;
}

/* ---- extras ------------------------------------------------------------------ */

const struct dpt_cuda_plan *dpt_backend_cuda_plan(const struct dpt_backend *be)
{
  return &CB(be)->plan;
}

int dpt_backend_cuda_algos(const struct dpt_backend *be, int shape, int algo[3], size_t ws[3])
{
  const struct cu_backend *cb = CB(be);
  if (shape < 0 || shape >= cb->plan.n_shapes) return DPT_E_INPUT;
  const struct cu_algo *a = &cb->algo[shape];
  algo[0] = a->fwd, algo[1] = a->bwd_data, algo[2] = a->bwd_filter;
  ws[0] = a->ws_fwd, ws[1] = a->ws_data, ws[2] = a->ws_filter;
  return 0;
}

int dpt_backend_cuda_conv_graphs(const struct dpt_backend *be, int shape, int on[4], float ms_legacy[4],
                                 float ms_graph[4])
{
  const struct cu_backend *cb = CB(be);
  int n = 0;
  _Static_assert(DPT_CONVG_N == 4, "dpt_backend_cuda.h promises four directions");
  if (shape < 0 || shape >= cb->plan.n_shapes) return DPT_E_INPUT;
  for (int dir = 0; dir < DPT_CONVG_N; dir++) {
    const struct cu_algo *a = &cb->algo[shape];
    on[dir] = a->g[dir] != NULL;
    ms_legacy[dir] = a->ms_legacy[dir];
    ms_graph[dir] = a->ms_graph[dir];
    n += on[dir];
  }
  return n;
}

size_t dpt_backend_cuda_peak_bytes(const struct dpt_backend *be)
{
  return CB(be)->peak;
}

size_t dpt_backend_cuda_workspace_bytes(const struct dpt_backend *be)
{
  return CB(be)->ws_bytes;
}

size_t dpt_cuda_memory_reserve(size_t workspace_cap)
{
  /* the convolution workspace (at most the cap; 512 MiB if uncapped) and 256 MiB for the
   * cuDNN / cuBLAS handles and the context's own allocations */
  return (workspace_cap ? workspace_cap : (size_t)512 << 20) + ((size_t)256 << 20);
}

void dpt_backend_cuda_fusion_info(const struct dpt_backend *be, struct dpt_cuda_fusion_info *info)
{
  const struct cu_backend *cb = CB(be);
  memset(info, 0, sizeof *info);
  info->fused = cb->fused;
  info->graph_ops = cb->fx.n_graph;
  info->own_ops = cb->fx.n - cb->fx.n_graph;
  info->from_cache = cb->fx.from_cache;
  info->timed = cb->fx.timed;
  info->legacy_layers = cb->plan.fuse ? cb->plan.fuse->n_legacy_layers : 0;
  info->graph = be->graph;
  info->graphs_captured = cb->graphs.captured;
  info->graphs_launched = cb->graphs.launched;
}
