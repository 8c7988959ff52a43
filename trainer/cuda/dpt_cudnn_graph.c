/* dpt_cudnn_graph.c — the fused step's cuDNN operation graphs (see dpt_cudnn_graph.h).
 *
 * Built on the backend descriptor API only (cudnnBackendCreateDescriptor / SetAttribute /
 * Finalize / GetAttribute): tensors, pointwise / convolution / genstats / BN-finalize /
 * BN-backward-weights operations, the operation graph; dpt_cg_build checks the description and
 * the operands, then dpt_cudnn_engine.c chooses the engine config, plans and executes.  The
 * descriptors a graph refers to are kept until dpt_cg_destroy (cudnn-frontend keeps them alive
 * the same way). */
#include "dpt_cudnn_engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const pattern_names[DPT_CG_NPATTERNS] = {
    "conv_stats", "sbr_conv_stats", "bn_finalize", "sbr_apply", "sbar", "dsbar",
    "dbn_weight", "dbn_apply", "dgrad_drelu_dbn", "dgrad", "wgrad", "sbr_wgrad", "fprop"};

const char *dpt_cg_pattern_name(int p) { return p >= 0 && p < DPT_CG_NPATTERNS ? pattern_names[p] : "?"; }

static const char *const slot_names[DPT_CG_NSLOTS] = {
    "X", "W", "Y", "S", "B", "R", "X2", "S2", "B2", "SUM", "SQSUM", "GAMMA", "BETA", "RMEAN", "RVAR",
    "RMEAN_NEXT", "RVAR_NEXT", "EQ_SCALE", "EQ_BIAS", "MEAN", "ISTD", "DY", "G", "DX", "DW", "DGAMMA", "DBETA",
    "C_DY", "C_X", "C_B"};

const char *dpt_cg_slot_name(int s) { return s >= 0 && s < DPT_CG_NSLOTS ? slot_names[s] : "?"; }

static const char *type_name(int t) { return t == DPT_CG_F16 ? "fp16" : t == DPT_CG_BF16 ? "bf16" : "fp32"; }

static cudnnDataType_t data_type(int t)
{
  return t == DPT_CG_F16 ? CUDNN_DATA_HALF : t == DPT_CG_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

int dpt_cg_is_conv(int p)
{
  return p == DPT_CG_CONV_STATS || p == DPT_CG_SBR_CONV_STATS || p == DPT_CG_DGRAD_DRELU_DBN || p == DPT_CG_DGRAD ||
         p == DPT_CG_WGRAD || p == DPT_CG_SBR_WGRAD || p == DPT_CG_FPROP;
}

/* The patterns that may be NCHW: a single convolution, nothing per channel. */
static int may_be_nchw(int p) { return p == DPT_CG_FPROP || p == DPT_CG_DGRAD || p == DPT_CG_WGRAD; }

static int out_hw(int in, int r, int stride, int pad) { return (in + 2 * pad - r) / stride + 1; }

void dpt_cg_key(const struct dpt_cg_desc *d, char *out, size_t len)
{
  if (dpt_cg_is_conv(d->pattern))
    snprintf(out, len, "%s n%d c%d h%d w%d k%d r%d u%d p%d io=%s sb=%s relu%d acc%d tf32=%d %s%s",
             dpt_cg_pattern_name(d->pattern), d->n, d->c, d->h, d->w, d->k, d->r, d->stride, d->pad, type_name(d->io),
             type_name(d->sb), !!d->relu, !!d->accumulate, !!d->tf32, d->nchw ? "nchw" : "nhwc",
             d->deterministic ? " det" : "");
  else
    snprintf(out, len, "%s n%d c%d h%d w%d io=%s sb=%s relu%d fork%d tf32=%d nhwc%s", dpt_cg_pattern_name(d->pattern),
             d->n, d->c, d->h, d->w, type_name(d->io), type_name(d->sb), !!d->relu, !!d->fork, !!d->tf32,
             d->deterministic ? " det" : "");
}

/* ---- the builder: first failure wins, later calls do nothing ------------------- */

struct gb {
  const struct dpt_cg_ctx *ctx;
  struct dpt_cg_op *op;
  struct dpt_err *err;
  int rc;
  int64_t next_virtual;
  cudnnBackendDescriptor_t slot_t[DPT_CG_NSLOTS]; /* the slot tensors, made once */
  cudnnBackendDescriptor_t ops[16];
  int n_ops;
};

static void shape_str(const struct dpt_cg_desc *d, char *buf, size_t len)
{
  int o = snprintf(buf, len, "[%d,%d,%d,%d] %s %s", d->n, d->c, d->h, d->w, type_name(d->io), d->nchw ? "NCHW" : "NHWC");
  if (dpt_cg_is_conv(d->pattern) && o > 0 && (size_t)o < len)
    snprintf(buf + o, len - (size_t)o, ", %d filters %dx%d stride %d pad %d -> [%d,%d,%d,%d]", d->k, d->r, d->r,
             d->stride, d->pad, d->n, d->k, out_hw(d->h, d->r, d->stride, d->pad), out_hw(d->w, d->r, d->stride, d->pad));
}

int dpt_cg_status_code(cudnnStatus_t s)
{
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED ? DPT_E_UNSUPPORTED : DPT_E_RUNTIME;
}

int dpt_cg_fail(const struct dpt_cg_ctx *ctx, const struct dpt_cg_desc *d, struct dpt_err *err, int code,
                const char *call, const char *why)
{
  char shape[192], last[256] = "";
  shape_str(d, shape, sizeof shape);
  cudnnGetLastErrorString(last, sizeof last);
  return dpt_err_set(err, code, "cudnn graph: %s failed in layer '%s' (%s, %s) on device %d: %s%s%s", call,
                     d->layer ? d->layer : "?", dpt_cg_pattern_name(d->pattern), shape, ctx->device, why,
                     last[0] ? ": " : "", last);
}

static int gfail(struct gb *g, const char *call, cudnnStatus_t s)
{
  if (!g->rc) g->rc = dpt_cg_fail(g->ctx, &g->op->d, g->err, dpt_cg_status_code(s), call, cudnnGetErrorString(s));
  return g->rc;
}

static void keep(struct gb *g, cudnnBackendDescriptor_t d)
{
  if (g->op->n_keep < DPT_CG_MAX_DESC) {
    g->op->keep[g->op->n_keep++] = d;
    return;
  }
  cudnnBackendDestroyDescriptor(d);
  if (!g->rc) g->rc = dpt_cg_fail(g->ctx, &g->op->d, g->err, DPT_E_RUNTIME, "keeping descriptors", "more than DPT_CG_MAX_DESC");
}

static cudnnBackendDescriptor_t create(struct gb *g, cudnnBackendDescriptorType_t t, const char *what)
{
  cudnnBackendDescriptor_t d = NULL;
  if (g->rc) return NULL;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
  if (s != CUDNN_STATUS_SUCCESS) {
    gfail(g, what, s);
    return NULL;
  }
  keep(g, d);
  return g->rc ? NULL : d;
}

static void set_(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                 int64_t n, const void *v, const char *what)
{
  if (g->rc || !d) return;
  cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
  if (s != CUDNN_STATUS_SUCCESS) gfail(g, what, s);
}
#define SET(g, d, attr, type, n, v) set_(g, d, attr, type, n, v, "cudnnBackendSetAttribute(" #attr ")")

static void finalize_(struct gb *g, cudnnBackendDescriptor_t d, const char *what)
{
  if (g->rc || !d) return;
  cudnnStatus_t s = cudnnBackendFinalize(d);
  if (s != CUDNN_STATUS_SUCCESS) gfail(g, what, s);
}
#define FINALIZE(g, d, kind) finalize_(g, d, "cudnnBackendFinalize(" kind ")")

/* ---- tensors: dims [n, c, h, w] in NHWC memory order (filters [k, c, r, s] as KRSC), or NCHW
 * (KCRS) when the description says nchw ------------------------------------------------------ */

static cudnnBackendDescriptor_t tensor(struct gb *g, int slot, int64_t uid, int type, int64_t n, int64_t c, int64_t h,
                                       int64_t w, int is_virtual, int by_value)
{
  cudnnBackendDescriptor_t t = create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "cudnnBackendCreateDescriptor(tensor)");
  int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, align = DPT_CG_ALIGN;
  if (g->op->d.nchw) str[1] = h * w, str[2] = w, str[3] = 1;
  cudnnDataType_t dt = by_value == 2 ? CUDNN_DATA_INT64 : by_value ? CUDNN_DATA_DOUBLE : is_virtual ? CUDNN_DATA_FLOAT
                                                                                                     : data_type(type);
  bool v = is_virtual != 0, bv = by_value != 0;
  if (by_value) str[0] = str[1] = str[2] = str[3] = 1;
  SET(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  SET(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  SET(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
  SET(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  SET(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  SET(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
  if (by_value) SET(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv);
  FINALIZE(g, t, "tensor");
  if (g->rc) return NULL;
  if (slot >= 0 && g->op->n_uids < DPT_CG_NSLOTS) {
    g->op->uid[g->op->n_uids] = uid;
    g->op->slot[g->op->n_uids++] = slot;
  }
  return t;
}

/* The tensor of a slot (made on first use). */
static cudnnBackendDescriptor_t st(struct gb *g, int slot, int type, int64_t n, int64_t c, int64_t h, int64_t w)
{
  if (!g->slot_t[slot]) g->slot_t[slot] = tensor(g, slot, 1 + slot, type, n, c, h, w, 0, 0);
  return g->slot_t[slot];
}

static cudnnBackendDescriptor_t vt(struct gb *g, int64_t n, int64_t c, int64_t h, int64_t w)
{
  return tensor(g, -1, g->next_virtual++, DPT_CG_F32, n, c, h, w, 1, 0);
}

/* ---- operations ----------------------------------------------------------------------- */

static void add_op(struct gb *g, cudnnBackendDescriptor_t op)
{
  if (g->rc || !op) return;
  if (g->n_ops == (int)(sizeof g->ops / sizeof *g->ops)) {
    g->rc = dpt_cg_fail(g->ctx, &g->op->d, g->err, DPT_E_RUNTIME, "building the graph", "more than 16 operations");
    return;
  }
  g->ops[g->n_ops++] = op;
}

static cudnnBackendDescriptor_t pw_op(struct gb *g, cudnnPointwiseMode_t mode)
{
  cudnnBackendDescriptor_t p = create(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "cudnnBackendCreateDescriptor(pointwise)");
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  SET(g, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  SET(g, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  FINALIZE(g, p, "pointwise");
  cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                                       "cudnnBackendCreateDescriptor(pointwise operation)");
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
  return op;
}

/* y = mode(x, b) (b NULL for unary modes) */
static void pw(struct gb *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
               cudnnBackendDescriptor_t y)
{
  cudnnBackendDescriptor_t op = pw_op(g, mode);
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b) SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  FINALIZE(g, op, "pointwise operation");
  add_op(g, op);
}

/* dx = dy * (x > 0): the ReLU backward, x its forward input (or output: same sign) */
static void relu_bwd(struct gb *g, cudnnBackendDescriptor_t dy, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t dx)
{
  cudnnBackendDescriptor_t op = pw_op(g, CUDNN_POINTWISE_RELU_BWD);
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy);
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dx);
  FINALIZE(g, op, "pointwise operation (relu backward)");
  add_op(g, op);
}

static cudnnBackendDescriptor_t conv_desc(struct gb *g)
{
  const struct dpt_cg_desc *d = &g->op->d;
  cudnnBackendDescriptor_t c = create(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "cudnnBackendCreateDescriptor(convolution)");
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t dims = 2, dil[2] = {1, 1}, str[2] = {d->stride, d->stride}, pad[2] = {d->pad, d->pad};
  SET(g, c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  SET(g, c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  FINALIZE(g, c, "convolution");
  return c;
}

/* The three convolution operations: their descriptor type and attribute names, in the order
 * tensor a, tensor b, tensor c, convolution, alpha, beta. */
static const struct conv_kind {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t attr[6];
  const char *what;
} conv_kinds[3] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
     "convolution forward"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
     "convolution backward data"},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
      CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
     "convolution backward filter"},
};
enum { CONV_FWD, CONV_DGRAD, CONV_WGRAD };

/* forward (x, w, y), backward data (dy, w, dx) or backward filter (x, dy, dw) */
static void conv_op(struct gb *g, int kind, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                    cudnnBackendDescriptor_t c, float beta)
{
  const struct conv_kind *k = &conv_kinds[kind];
  cudnnBackendDescriptor_t cd = conv_desc(g);
  cudnnBackendDescriptor_t op = create(g, k->type, k->what);
  float alpha = 1.0f;
  const cudnnBackendDescriptor_t t[4] = {a, b, c, cd};
  static const char *const names[6] = {"tensor a", "tensor b", "tensor c", "convolution", "alpha", "beta"};
  char what[6][96];
  for (int i = 0; i < 6; i++)
    snprintf(what[i], sizeof what[i], "cudnnBackendSetAttribute(%s: %s, attribute %d)", k->what, names[i], (int)k->attr[i]);
  for (int i = 0; i < 4; i++) set_(g, op, k->attr[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[i], what[i]);
  set_(g, op, k->attr[4], CUDNN_TYPE_FLOAT, 1, &alpha, what[4]);
  set_(g, op, k->attr[5], CUDNN_TYPE_FLOAT, 1, &beta, what[5]);
  snprintf(what[0], sizeof what[0], "cudnnBackendFinalize(%s)", k->what);
  finalize_(g, op, what[0]);
  add_op(g, op);
}

static void genstats(struct gb *g, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sq)
{
  cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR,
                                       "cudnnBackendCreateDescriptor(genstats)");
  cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  SET(g, op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
  SET(g, op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  SET(g, op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  SET(g, op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
  SET(g, op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
  FINALIZE(g, op, "genstats");
  add_op(g, op);
}

/* dBN weight: dgamma, dbeta and dx = c_dy*dy + c_x*x + c_b of BN(x; mean, istd, gamma) */
static void dbn_weight(struct gb *g, cudnnBackendDescriptor_t dy, int64_t c)
{
  struct dpt_cg_op *o = g->op;
  int io = o->d.io, n = o->d.n, h = o->d.h, w = o->d.w;
  cudnnBackendDescriptor_t x = st(g, DPT_CG_X, io, n, c, h, w);
  cudnnBackendDescriptor_t mean = st(g, DPT_CG_MEAN, DPT_CG_F32, 1, c, 1, 1), istd = st(g, DPT_CG_ISTD, DPT_CG_F32, 1, c, 1, 1);
  cudnnBackendDescriptor_t gamma = st(g, DPT_CG_GAMMA, DPT_CG_F32, 1, c, 1, 1);
  cudnnBackendDescriptor_t dg = st(g, DPT_CG_DGAMMA, DPT_CG_F32, 1, c, 1, 1), db = st(g, DPT_CG_DBETA, DPT_CG_F32, 1, c, 1, 1);
  cudnnBackendDescriptor_t cdy = st(g, DPT_CG_C_DY, DPT_CG_F32, 1, c, 1, 1), cx = st(g, DPT_CG_C_X, DPT_CG_F32, 1, c, 1, 1);
  cudnnBackendDescriptor_t cb = st(g, DPT_CG_C_B, DPT_CG_F32, 1, c, 1, 1);
  cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR,
                                       "cudnnBackendCreateDescriptor(BN backward weights)");
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mean);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &istd);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gamma);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dg);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &db);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cdy);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cx);
  SET(g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cb);
  FINALIZE(g, op, "BN backward weights");
  add_op(g, op);
}

/* relu?(x * s + b) into out, or into a new virtual tensor when out is NULL (s, b: slots) */
static cudnnBackendDescriptor_t scale_bias(struct gb *g, cudnnBackendDescriptor_t x, int s_slot, int b_slot, int relu,
                                           cudnnBackendDescriptor_t out, int64_t n, int64_t c, int64_t h, int64_t w)
{
  int sb = g->op->d.sb;
  cudnnBackendDescriptor_t s = st(g, s_slot, sb, 1, c, 1, 1), b = st(g, b_slot, sb, 1, c, 1, 1);
  cudnnBackendDescriptor_t t1 = vt(g, n, c, h, w), t2 = relu || !out ? vt(g, n, c, h, w) : out;
  pw(g, CUDNN_POINTWISE_MUL, x, s, t1);
  pw(g, CUDNN_POINTWISE_ADD, t1, b, t2);
  if (!relu) return t2;
  cudnnBackendDescriptor_t t3 = out ? out : vt(g, n, c, h, w);
  pw(g, CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3);
  return t3;
}

/* The pattern's graph: tensors, operations, and the errata tag. */
static void build_ops(struct gb *g)
{
  struct dpt_cg_op *o = g->op;
  const struct dpt_cg_desc *d = &o->d;
  int io = d->io, sb = d->sb;
  int64_t n = d->n, c = d->c, h = d->h, w = d->w, k = d->k, r = d->r;
  /* the output side of a convolution; the other patterns keep the input's (their stride is 0: dividing
   * by it was the SIGFPE that ended every fused run on the first GPU visit) */
  int64_t p = dpt_cg_is_conv(d->pattern) ? out_hw(d->h, d->r, d->stride, d->pad) : d->h;
  int64_t q = dpt_cg_is_conv(d->pattern) ? out_hw(d->w, d->r, d->stride, d->pad) : d->w;
  const char *tag = "";
  switch (d->pattern) {
  case DPT_CG_CONV_STATS:
  case DPT_CG_SBR_CONV_STATS: {
    cudnnBackendDescriptor_t x = st(g, DPT_CG_X, io, n, c, h, w);
    if (d->pattern == DPT_CG_SBR_CONV_STATS) x = scale_bias(g, x, DPT_CG_S, DPT_CG_B, d->relu, NULL, n, c, h, w);
    cudnnBackendDescriptor_t y = st(g, DPT_CG_Y, io, n, k, p, q);
    conv_op(g, CONV_FWD, x, st(g, DPT_CG_W, io, k, c, r, r), y, 0.0f);
    genstats(g, y, st(g, DPT_CG_SUM, DPT_CG_F32, 1, k, 1, 1), st(g, DPT_CG_SQSUM, DPT_CG_F32, 1, k, 1, 1));
    tag = d->pattern == DPT_CG_CONV_STATS ? "ConvFwd_GenStats"
          : d->relu                       ? "Mul_Add_ReluFwd_ConvFwd_GenStats"
                                          : "Mul_Add_ConvFwd_GenStats";
    break;
  }
  case DPT_CG_BN_FINALIZE: {
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR,
                                         "cudnnBackendCreateDescriptor(BN finalize)");
    cudnnBnFinalizeStatsMode_t mode = CUDNN_BN_FINALIZE_STATISTICS_TRAINING;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t t[13];
    t[0] = st(g, DPT_CG_SUM, DPT_CG_F32, 1, c, 1, 1);
    t[1] = st(g, DPT_CG_SQSUM, DPT_CG_F32, 1, c, 1, 1);
    t[2] = st(g, DPT_CG_GAMMA, DPT_CG_F32, 1, c, 1, 1);
    t[3] = st(g, DPT_CG_BETA, DPT_CG_F32, 1, c, 1, 1);
    t[4] = st(g, DPT_CG_RMEAN, DPT_CG_F32, 1, c, 1, 1);
    t[5] = st(g, DPT_CG_RVAR, DPT_CG_F32, 1, c, 1, 1);
    /* the updated running statistics: tensors and memory of their own (dpt_cg_aliased) */
    t[6] = st(g, DPT_CG_RMEAN_NEXT, DPT_CG_F32, 1, c, 1, 1);
    t[7] = st(g, DPT_CG_RVAR_NEXT, DPT_CG_F32, 1, c, 1, 1);
    t[8] = st(g, DPT_CG_MEAN, DPT_CG_F32, 1, c, 1, 1);
    t[9] = st(g, DPT_CG_ISTD, DPT_CG_F32, 1, c, 1, 1);
    t[10] = st(g, DPT_CG_EQ_SCALE, sb, 1, c, 1, 1);
    t[11] = st(g, DPT_CG_EQ_BIAS, sb, 1, c, 1, 1);
    cudnnBackendDescriptor_t eps = tensor(g, -1, 300, DPT_CG_F32, 1, 1, 1, 1, 0, 1);
    cudnnBackendDescriptor_t mom = tensor(g, -1, 301, DPT_CG_F32, 1, 1, 1, 1, 0, 1);
    cudnnBackendDescriptor_t cnt = tensor(g, -1, 302, DPT_CG_F32, 1, 1, 1, 1, 0, 2);
    o->n_byvalue = 3;
    o->byvalue_uid[0] = 300, o->byvalue_uid[1] = 301, o->byvalue_uid[2] = 302;
    o->eps = d->eps;
    o->momentum = d->momentum;
    o->count = n * h * w;
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE, CUDNN_TYPE_BN_FINALIZE_STATS_MODE, 1, &mode);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[0]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[1]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[2]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[3]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[4]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[5]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[6]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[7]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[8]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[9]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[10]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[11]);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eps);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mom);
    SET(g, op, CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt);
    FINALIZE(g, op, "BN finalize");
    add_op(g, op);
    tag = "BnFinalize";
    break;
  }
  case DPT_CG_SBR_APPLY:
  case DPT_CG_SBAR:
  case DPT_CG_DSBAR: {
    cudnnBackendDescriptor_t x = st(g, DPT_CG_X, io, n, c, h, w), y = st(g, DPT_CG_Y, io, n, c, h, w);
    if (d->pattern == DPT_CG_SBR_APPLY) {
      scale_bias(g, x, DPT_CG_S, DPT_CG_B, d->relu, y, n, c, h, w);
      tag = d->relu ? "Mul_Add_ReluFwd" : "Mul_Add";
      break;
    }
    cudnnBackendDescriptor_t a = scale_bias(g, x, DPT_CG_S, DPT_CG_B, 0, NULL, n, c, h, w); /* the ReLU comes last */
    cudnnBackendDescriptor_t other = d->pattern == DPT_CG_SBAR
                                         ? st(g, DPT_CG_R, io, n, c, h, w)
                                         : scale_bias(g, st(g, DPT_CG_X2, io, n, c, h, w), DPT_CG_S2, DPT_CG_B2, 0, NULL, n, c, h, w);
    cudnnBackendDescriptor_t sum = d->relu ? vt(g, n, c, h, w) : y;
    pw(g, CUDNN_POINTWISE_ADD, a, other, sum);
    if (d->relu) pw(g, CUDNN_POINTWISE_RELU_FWD, sum, NULL, y);
    tag = d->pattern == DPT_CG_SBAR ? (d->relu ? "Mul_Add_Add_ReluFwd" : "Mul_Add_Add")
                                    : (d->relu ? "Mul_Add_Mul_Add_Add_ReluFwd" : "Mul_Add_Mul_Add_Add");
    break;
  }
  case DPT_CG_DBN_WEIGHT: {
    cudnnBackendDescriptor_t dy = st(g, DPT_CG_DY, io, n, c, h, w), gt = dy;
    if (d->relu) {
      gt = d->fork ? st(g, DPT_CG_G, io, n, c, h, w) : vt(g, n, c, h, w);
      relu_bwd(g, dy, st(g, DPT_CG_Y, io, n, c, h, w), gt);
    }
    dbn_weight(g, gt, c);
    tag = d->relu ? "ReluBwd_DBnWeight" : "DBnWeight";
    break;
  }
  case DPT_CG_DBN_APPLY: {
    cudnnBackendDescriptor_t gt;
    if (d->relu) {
      gt = vt(g, n, c, h, w);
      relu_bwd(g, st(g, DPT_CG_DY, io, n, c, h, w), st(g, DPT_CG_Y, io, n, c, h, w), gt);
    } else {
      gt = st(g, DPT_CG_G, io, n, c, h, w);
    }
    cudnnBackendDescriptor_t t1 = vt(g, n, c, h, w), t2 = vt(g, n, c, h, w), t3 = vt(g, n, c, h, w);
    pw(g, CUDNN_POINTWISE_MUL, gt, st(g, DPT_CG_C_DY, DPT_CG_F32, 1, c, 1, 1), t1);
    pw(g, CUDNN_POINTWISE_MUL, st(g, DPT_CG_X, io, n, c, h, w), st(g, DPT_CG_C_X, DPT_CG_F32, 1, c, 1, 1), t2);
    pw(g, CUDNN_POINTWISE_ADD, t1, t2, t3);
    pw(g, CUDNN_POINTWISE_ADD, t3, st(g, DPT_CG_C_B, DPT_CG_F32, 1, c, 1, 1), st(g, DPT_CG_DX, io, n, c, h, w));
    tag = d->relu ? "ReluBwd_Mul_Mul_Add_Add" : "Mul_Mul_Add_Add";
    break;
  }
  case DPT_CG_DGRAD_DRELU_DBN: {
    /* dz = dgrad(dy, w); the BN output recomputed from x; g = relu'(bn) * dz; dBN weight */
    cudnnBackendDescriptor_t gt = d->relu ? vt(g, n, c, h, w) : st(g, DPT_CG_G, io, n, c, h, w);
    conv_op(g, CONV_DGRAD, st(g, DPT_CG_DY, io, n, k, p, q), st(g, DPT_CG_W, io, k, c, r, r), gt, 0.0f);
    if (d->relu) {
      cudnnBackendDescriptor_t x = st(g, DPT_CG_X, io, n, c, h, w);
      cudnnBackendDescriptor_t t1 = vt(g, n, c, h, w), t2 = vt(g, n, c, h, w), t3 = vt(g, n, c, h, w),
                               t4 = vt(g, n, c, h, w);
      pw(g, CUDNN_POINTWISE_SUB, x, st(g, DPT_CG_MEAN, DPT_CG_F32, 1, c, 1, 1), t1);
      pw(g, CUDNN_POINTWISE_MUL, t1, st(g, DPT_CG_ISTD, DPT_CG_F32, 1, c, 1, 1), t2);
      pw(g, CUDNN_POINTWISE_MUL, t2, st(g, DPT_CG_GAMMA, DPT_CG_F32, 1, c, 1, 1), t3);
      pw(g, CUDNN_POINTWISE_ADD, t3, st(g, DPT_CG_BETA, DPT_CG_F32, 1, c, 1, 1), t4);
      cudnnBackendDescriptor_t gout = st(g, DPT_CG_G, io, n, c, h, w);
      relu_bwd(g, gt, t4, gout);
      gt = gout;
    }
    dbn_weight(g, gt, c);
    tag = d->relu ? "ConvBwdData_Sub_Mul_Mul_Add_ReluBwd_DBnWeight" : "ConvBwdData_DBnWeight";
    break;
  }
  case DPT_CG_FPROP:
    conv_op(g, CONV_FWD, st(g, DPT_CG_X, io, n, c, h, w), st(g, DPT_CG_W, io, k, c, r, r), st(g, DPT_CG_Y, io, n, k, p, q),
            0.0f);
    tag = "ConvFwd";
    break;
  case DPT_CG_DGRAD:
    conv_op(g, CONV_DGRAD, st(g, DPT_CG_DY, io, n, k, p, q), st(g, DPT_CG_W, io, k, c, r, r),
            st(g, DPT_CG_DX, io, n, c, h, w), d->accumulate ? 1.0f : 0.0f);
    tag = "ConvBwdData";
    break;
  case DPT_CG_WGRAD:
  case DPT_CG_SBR_WGRAD: {
    cudnnBackendDescriptor_t x = st(g, DPT_CG_X, io, n, c, h, w);
    if (d->pattern == DPT_CG_SBR_WGRAD) x = scale_bias(g, x, DPT_CG_S, DPT_CG_B, d->relu, NULL, n, c, h, w);
    conv_op(g, CONV_WGRAD, x, st(g, DPT_CG_DY, io, n, k, p, q), st(g, DPT_CG_DW, io, k, c, r, r), 0.0f);
    tag = d->pattern == DPT_CG_WGRAD ? "ConvBwdFilter" : d->relu ? "Mul_Add_ReluFwd_ConvBwdFilter"
                                                                 : "Mul_Add_ConvBwdFilter";
    break;
  }
  default:
    break;
  }
  snprintf(o->tag, sizeof o->tag, "%s", tag);
  if (g->rc) return;
  cudnnBackendDescriptor_t graph = create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
                                          "cudnnBackendCreateDescriptor(operation graph)");
  cudnnHandle_t dnn = g->ctx->dnn;
  SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn);
  SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops);
  FINALIZE(g, graph, "operation graph");
  o->graph = graph;
}

static int overlap(const void *a, const void *b, size_t bytes)
{
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a && b && x < y + bytes && y < x + bytes;
}

int dpt_cg_aliased(const struct dpt_cg_desc *d, void *const *ptrs)
{
  if (d->pattern != DPT_CG_BN_FINALIZE || !ptrs || d->c < 1) return -1;
  size_t bytes = (size_t)d->c * sizeof(float);
  static const int next[] = {DPT_CG_RMEAN_NEXT, DPT_CG_RVAR_NEXT};
  for (int k = 0; k < 2; k++)
    if (overlap(ptrs[next[k]], ptrs[DPT_CG_RMEAN], bytes) || overlap(ptrs[next[k]], ptrs[DPT_CG_RVAR], bytes))
      return next[k];
  return -1;
}

static int validate(const struct dpt_cg_desc *d, const struct dpt_cg_ctx *ctx, void *const *ptrs,
                    struct dpt_err *err)
{
  const char *why = NULL;
  if (d->pattern < 0 || d->pattern >= DPT_CG_NPATTERNS) why = "unknown pattern";
  else if (d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1) why = "an empty tensor";
  else if (d->io < DPT_CG_F32 || d->io > DPT_CG_BF16 || d->sb < DPT_CG_F32 || d->sb > DPT_CG_BF16) why = "unknown data type";
  else if (dpt_cg_is_conv(d->pattern) && (d->k < 1 || d->r < 1 || d->stride < 1 || d->pad < 0 ||
                                   out_hw(d->h, d->r, d->stride, d->pad) < 1 || out_hw(d->w, d->r, d->stride, d->pad) < 1))
    why = "a convolution without output";
  else if (d->pattern == DPT_CG_BN_FINALIZE && (!(d->eps > 0) || !(d->momentum >= 0 && d->momentum <= 1)))
    why = "BN finalize needs eps > 0 and momentum in [0, 1]";
  else if (d->pattern == DPT_CG_DBN_WEIGHT && d->fork && !d->relu) why = "fork without ReLU (G would be DY)";
  else if (d->nchw && !may_be_nchw(d->pattern)) why = "NCHW is for a single convolution (fprop, dgrad, wgrad) only";
  else if (dpt_cg_aliased(d, ptrs) >= 0)
    why = "BN finalize's updated running statistics share memory with the running statistics it reads: give "
          "RMEAN_NEXT / RVAR_NEXT buffers of their own and copy them back after it ran";
  else if (!ctx->dnn) why = "no cuDNN handle";
  if (!why) return 0;
  return dpt_cg_fail(ctx, d, err, DPT_E_INPUT, "describing the graph", why);
}

int dpt_cg_build(struct dpt_cg_ctx *ctx, const struct dpt_cg_desc *d, void *const *ptrs, struct dpt_cg_op *op,
                 struct dpt_err *err)
{
  struct gb g;
  int rc;
  memset(op, 0, sizeof *op);
  op->d = *d;
  if ((rc = validate(d, ctx, ptrs, err))) return rc;
  dpt_cg_key(d, op->key, sizeof op->key);
  if (ctx->stats) ctx->stats->builds++;
  const char *known = ctx->cache ? dpt_engine_cache_none(ctx->cache, op->key) : NULL;
  if (known) { /* this key found no engine before (this process, or the cache file): not searched again */
    if (ctx->stats) ctx->stats->no_engine_known++;
    return dpt_cg_fail(ctx, d, err, DPT_E_UNSUPPORTED, "choosing an engine", known);
  }
  memset(&g, 0, sizeof g);
  g.ctx = ctx;
  g.op = op;
  g.err = err;
  g.next_virtual = 1000;
  build_ops(&g);
  if ((rc = g.rc)) goto fail;
  int ms_slot = dpt_cg_missing_ptr(op, ptrs);
  if (ms_slot >= 0) {
    char why[96];
    snprintf(why, sizeof why, "no buffer for %s to time the engines on", dpt_cg_slot_name(ms_slot));
    rc = dpt_cg_fail(ctx, d, err, DPT_E_INPUT, "dpt_cg_build", why);
    goto fail;
  }
  if ((ms_slot = dpt_cg_misaligned(op, ptrs)) >= 0) { /* a layer's offsets, not the key's: nothing cached */
    char why[300];
    snprintf(why, sizeof why, "operand %s at %p is not %d-byte aligned, as the graph's tensors promise (a parameter or "
             "statistic after a channel count that is not a multiple of 4); run this layer on the legacy calls",
             dpt_cg_slot_name(ms_slot), ptrs[ms_slot], DPT_CG_ALIGN);
    if (ctx->stats) ctx->stats->unaligned++;
    rc = dpt_cg_fail(ctx, d, err, DPT_E_UNSUPPORTED, "dpt_cg_build", why);
    goto fail;
  }
  if ((rc = dpt_cg_engine_choose(ctx, op, ptrs, err))) goto fail;
  return 0;
fail:
  dpt_cg_destroy(op);
  return rc;
}

void dpt_cg_destroy(struct dpt_cg_op *op)
{
  if (!op) return;
  dpt_cg_vp_free(&op->vp);
  dpt_cg_release((cudnnBackendDescriptor_t)op->plan);
  op->plan = NULL;
  /* the graph and what it refers to: in reverse order of creation */
  for (int i = op->n_keep - 1; i >= 0; i--) dpt_cg_release((cudnnBackendDescriptor_t)op->keep[i]);
  op->n_keep = 0;
  op->graph = NULL;
}
