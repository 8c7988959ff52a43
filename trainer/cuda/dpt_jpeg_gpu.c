/* dpt_jpeg_gpu.c — nvJPEG batched decode + the crop/resize kernel for the
 * imagenet loader's GPU path (see dpt_jpeg_gpu.h).  nvJPEG API: nvjpeg.h of
 * CUDA 13 (PyPI nvidia-nvjpeg 13.x).  Three decoders, each a handle + batched
 * state, driven with nvjpegDecodeBatchedInitialize + nvjpegDecodeBatched (as
 * NVIDIA's nvImageCodec drives them):
 *   hw   NVJPEG_BACKEND_HARDWARE (A100 / H100 engines; creation fails elsewhere),
 *        on its own stream so that it works while the CUDA decoder runs;
 *   cuda NVJPEG_BACKEND_GPU_HYBRID (Huffman decoding on the GPU for baseline
 *        batches): the share of hardware-eligible files the hardware does not
 *        take (hw_share, default 0.65 as DALI's hw_decoder_load), and all of them
 *        on GPUs without the hardware decoder;
 *   hy   NVJPEG_BACKEND_DEFAULT (Huffman on the CPU, the rest on the GPU): the
 *        files routed GPU (progressive, multi-scan, 4:1:x).
 * With 3 channels every decoder writes planes (NVJPEG_OUTPUT_YUV): the crop kernel
 * upsamples the chroma and converts to RGB as libjpeg does (dpt_jpeg_ycc.h), where
 * nvJPEG's own upsampling differs from libjpeg's by up to 8 / 255 on smooth 4:2:0
 * images (tests/trainer/test_jpeg_ycc.c; the first H200 visit's crops differed by 2.8-3.0
 * / 255 from the CPU path's).  A file nvJPEG will not write as the planes the kernel
 * reads (nvjpegGetImageInfo) or refuses as planes is decoded to interleaved RGB. */
#include "dpt_jpeg_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include "dpt_data.h"
#include "dpt_jpeg_hdr.h"
#include "dpt_jpeg_kernels.h"

struct dpt_jpeg_gpu {
  struct dpt_jpeg_gpu_opts o;
  nvjpegHandle_t hw, cu, hy;           /* hardware (NULL without one), GPU_HYBRID, DEFAULT backends */
  nvjpegJpegState_t hw_state, cu_state, hy_state;
  cudaStream_t hw_stream;              /* the hardware decoder's; joined to stream before the kernel */
  cudaEvent_t hw_done;
  double hw_share;                     /* fraction of the hardware-eligible files the hardware decodes */
  unsigned hw_engines, hw_cores;
  nvjpegOutputFormat_t fmt;            /* YUV planes (3 channels) or Y (1) */
  cudaStream_t stream;
  unsigned char *arena;                /* device: decoded images, interleaved or as planes */
  size_t arena_cap, arena_used;
  unsigned char *stage;                /* pinned: host-decoded images on their way to the arena */
  size_t stage_cap, stage_used;
  unsigned char *tab_h, *tab_d;        /* pinned / device: kimage[n] + cx, cy, wx, wy */
  size_t tab_cap;
  const unsigned char **data;          /* [batch] one group's bitstreams */
  size_t *lens;                        /* [batch] */
  nvjpegImage_t *dst;                  /* [batch] */
  int *grp;                            /* [batch] item index of group member k */
  char desc[128];
};

static const char *nvj_str(nvjpegStatus_t s)
{
  switch (s) {
  case NVJPEG_STATUS_SUCCESS: return "NVJPEG_STATUS_SUCCESS";
  case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
  case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
  case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
  case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
  case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
  case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
  case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
  case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
  case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
  case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
  }
  return "unknown nvJPEG status";
}

#define CU(call, what)                                                                                             \
  do {                                                                                                             \
    cudaError_t ce_ = (call);                                                                                      \
    if (ce_ != cudaSuccess)                                                                                        \
      return dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: %s: %s (%s)", what, cudaGetErrorString(ce_),             \
                         cudaGetErrorName(ce_));                                                                   \
  } while (0)

#define NVJ(call, what)                                                                                            \
  do {                                                                                                             \
    nvjpegStatus_t ns_ = (call);                                                                                   \
    if (ns_ != NVJPEG_STATUS_SUCCESS)                                                                              \
      return dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: %s: %s", what, nvj_str(ns_));                            \
  } while (0)

int dpt_jpeg_gpu_probe(int device, char *why, size_t why_len)
{
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  nvjpegHandle_t h = NULL;
  if (ce != cudaSuccess || n < 1) {
    snprintf(why, why_len, "no CUDA device (%s)", ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    return 0;
  }
  if (device < 0 || device >= n) {
    snprintf(why, why_len, "CUDA device %d does not exist (%d visible)", device, n);
    return 0;
  }
  if ((ce = cudaSetDevice(device)) != cudaSuccess) {
    snprintf(why, why_len, "cudaSetDevice(%d): %s", device, cudaGetErrorString(ce));
    return 0;
  }
  nvjpegStatus_t s = nvjpegCreateSimple(&h);
  if (s != NVJPEG_STATUS_SUCCESS) {
    snprintf(why, why_len, "nvjpegCreateSimple: %s", nvj_str(s));
    return 0;
  }
  nvjpegDestroy(h);
  snprintf(why, why_len, "nvJPEG works on CUDA device %d", device);
  return 1;
}

/* nvJPEG handle of a backend with the flags that bring it closest to libjpeg
 * (chroma upsampling with interpolation, as libjpeg's "fancy" upsampling), without
 * them when this nvJPEG or backend refuses the flag. */
static nvjpegStatus_t create_handle(nvjpegBackend_t be, nvjpegHandle_t *h)
{
  nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
#ifdef NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
  s = nvjpegCreateEx(be, NULL, NULL, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION, h);
  if (s == NVJPEG_STATUS_SUCCESS) return s;
#endif
  s = nvjpegCreateEx(be, NULL, NULL, NVJPEG_FLAGS_DEFAULT, h);
  return s;
}

int dpt_jpeg_gpu_create(struct dpt_jpeg_gpu **out, const struct dpt_jpeg_gpu_opts *o, struct dpt_err *err)
{
  struct dpt_jpeg_gpu *g;
  int rc = 0;
  *out = NULL;
  if (o->channels != 1 && o->channels != 3)
    return dpt_err_set(err, DPT_E_INPUT, "GPU loader: %d channels: 1 or 3", o->channels);
  if (o->batch < 1 || o->out < 1)
    return dpt_err_set(err, DPT_E_INPUT, "GPU loader: batch %d, output side %d", o->batch, o->out);
  if (!(g = calloc(1, sizeof *g))) return dpt_err_set(err, DPT_E_NOMEM, "GPU loader: out of memory");
  g->o = *o;
  if (g->o.c_stored < o->channels) g->o.c_stored = o->channels;
  g->fmt = o->channels == 3 ? NVJPEG_OUTPUT_YUV : NVJPEG_OUTPUT_Y;
  g->data = calloc((size_t)o->batch, sizeof *g->data);
  g->lens = calloc((size_t)o->batch, sizeof *g->lens);
  g->dst = calloc((size_t)o->batch, sizeof *g->dst);
  g->grp = calloc((size_t)o->batch, sizeof *g->grp);
  if (!g->data || !g->lens || !g->dst || !g->grp) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "GPU loader: out of memory");
    goto fail;
  }
  cudaError_t ce = cudaSetDevice(o->device);
  if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: CUDA device %d: %s (use --data-device cpu)", o->device,
                     cudaGetErrorString(ce));
    goto fail;
  }
  nvjpegStatus_t s;
  const char *hw_note = "not asked for";
  if (o->use_hw) {
    s = create_handle(NVJPEG_BACKEND_HARDWARE, &g->hw);
    if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegJpegStateCreate(g->hw, &g->hw_state);
    if (s == NVJPEG_STATUS_SUCCESS && nvjpegGetHardwareDecoderInfo(g->hw, &g->hw_engines, &g->hw_cores))
      g->hw_engines = g->hw_cores = 0;
    if (s != NVJPEG_STATUS_SUCCESS) { /* no hardware decoder on this GPU: not an error */
      if (g->hw_state) nvjpegJpegStateDestroy(g->hw_state);
      if (g->hw) nvjpegDestroy(g->hw);
      g->hw = NULL;
      g->hw_state = NULL;
      hw_note = nvj_str(s);
    } else {
      /* nvImageCodec preallocates the hardware decoder's pool (>20% faster batches) */
      nvjpegDecodeBatchedPreAllocate(g->hw, g->hw_state, o->batch, 512, 512, NVJPEG_CSS_420, g->fmt);
    }
  }
  if ((s = create_handle(NVJPEG_BACKEND_DEFAULT, &g->hy)) != NVJPEG_STATUS_SUCCESS ||
      (s = nvjpegJpegStateCreate(g->hy, &g->hy_state)) != NVJPEG_STATUS_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: nvjpegCreateEx (default backend) on device %d: %s (use "
                     "--data-device cpu)", o->device, nvj_str(s));
    goto fail;
  }
  if ((s = create_handle(NVJPEG_BACKEND_GPU_HYBRID, &g->cu)) != NVJPEG_STATUS_SUCCESS ||
      (s = nvjpegJpegStateCreate(g->cu, &g->cu_state)) != NVJPEG_STATUS_SUCCESS) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: nvjpegCreateEx (GPU_HYBRID backend) on device %d: %s (use "
                     "--data-device cpu)", o->device, nvj_str(s));
    goto fail;
  }
  g->hw_share = o->hw_share > 0 && o->hw_share <= 1 ? o->hw_share : 0.65;
  if (g->hw && ((ce = cudaStreamCreateWithFlags(&g->hw_stream, cudaStreamNonBlocking)) != cudaSuccess ||
                (ce = cudaEventCreateWithFlags(&g->hw_done, cudaEventDisableTiming)) != cudaSuccess)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "GPU loader: the hardware decoder's stream: %s", cudaGetErrorString(ce));
    goto fail;
  }
  if (g->hw)
    snprintf(g->desc, sizeof g->desc, "hardware decoder (%u engines x %u cores, %.0f%% of baseline files) + CUDA",
             g->hw_engines, g->hw_cores, 100 * g->hw_share);
  else
    snprintf(g->desc, sizeof g->desc, "CUDA (no hardware decoder: %s)", hw_note);
  *out = g;
  return 0;
fail:
  dpt_jpeg_gpu_destroy(g);
  return rc;
}

void dpt_jpeg_gpu_destroy(struct dpt_jpeg_gpu *g)
{
  if (!g) return;
  cudaSetDevice(g->o.device);
  if (g->stream) cudaStreamSynchronize(g->stream);
  if (g->hw_stream) cudaStreamSynchronize(g->hw_stream);
  if (g->hw_state) nvjpegJpegStateDestroy(g->hw_state);
  if (g->cu_state) nvjpegJpegStateDestroy(g->cu_state);
  if (g->hy_state) nvjpegJpegStateDestroy(g->hy_state);
  if (g->hw) nvjpegDestroy(g->hw);
  if (g->cu) nvjpegDestroy(g->cu);
  if (g->hy) nvjpegDestroy(g->hy);
  if (g->hw_done) cudaEventDestroy(g->hw_done);
  if (g->hw_stream) cudaStreamDestroy(g->hw_stream);
  cudaFree(g->arena);
  cudaFree(g->tab_d);
  cudaFreeHost(g->stage);
  cudaFreeHost(g->tab_h);
  if (g->stream) cudaStreamDestroy(g->stream);
  free(g->data);
  free(g->lens);
  free(g->dst);
  free(g->grp);
  free(g);
}

int dpt_jpeg_gpu_has_hw(const struct dpt_jpeg_gpu *g) { return g && g->hw; }

const char *dpt_jpeg_gpu_describe(const struct dpt_jpeg_gpu *g) { return g ? g->desc : "none"; }

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The arena holds at least need bytes; keeps the first keep bytes (after the stream's work). */
static int arena_reserve(struct dpt_jpeg_gpu *g, size_t need, size_t keep, struct dpt_err *err)
{
  if (need <= g->arena_cap) return 0;
  size_t cap = need + need / 4;
  unsigned char *na = NULL;
  CU(cudaMalloc((void **)&na, cap), "cudaMalloc of the decode arena");
  if (g->hw_stream) { /* the hardware decoder writes into the arena on its own stream */
    CU(cudaEventRecord(g->hw_done, g->hw_stream), "hardware decoder event");
    CU(cudaStreamWaitEvent(g->stream, g->hw_done, 0), "joining the hardware decoder's stream");
  }
  if (keep) {
    cudaError_t ce = cudaMemcpyAsync(na, g->arena, keep, cudaMemcpyDeviceToDevice, g->stream);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(g->stream);
    if (ce != cudaSuccess) {
      cudaFree(na);
      CU(ce, "moving the decode arena");
    }
  } else {
    CU(cudaStreamSynchronize(g->stream), "decode stream");
  }
  cudaFree(g->arena);
  g->arena = na;
  g->arena_cap = cap;
  return 0;
}

/* Which planes nvJPEG writes for x with NVJPEG_OUTPUT_YUV, as the kernel reads them: 1 Y, Cb,
 * Cr of the sizes planned (dpt_jpeg_gpu_decode), 2 a gray file's Y plane, 0 neither (decode it
 * interleaved). */
static int planes_of(nvjpegHandle_t h, const struct dpt_jpeg_gpu_item *x)
{
  int nc = 0, w[NVJPEG_MAX_COMPONENT] = {0}, ht[NVJPEG_MAX_COMPONENT] = {0};
  nvjpegChromaSubsampling_t ss;
  if (nvjpegGetImageInfo(h, x->data, x->len, &nc, &ss, w, ht) != NVJPEG_STATUS_SUCCESS || w[0] != x->src_w ||
      ht[0] != x->src_h)
    return 0;
  if (nc == 1) return 2;
  return nc == 3 && w[1] == x->cw && ht[1] == x->ch && w[2] == x->cw && ht[2] == x->ch;
}

/* x's output descriptor: its planes (planar) or its interleaved image. */
static void set_dst(const struct dpt_jpeg_gpu *g, const struct dpt_jpeg_gpu_item *x, int planar, nvjpegImage_t *d)
{
  memset(d, 0, sizeof *d);
  d->channel[0] = g->arena + x->off;
  if (!planar) {
    d->pitch[0] = (size_t)x->src_w * g->o.channels;
    return;
  }
  d->pitch[0] = (size_t)x->src_w;
  d->channel[1] = g->arena + x->cb; /* a gray file's too: nvJPEG writes only its Y plane */
  d->channel[2] = g->arena + x->cr;
  d->pitch[1] = d->pitch[2] = (size_t)x->cw;
}

/* One file alone, in format f; 1 when nvJPEG decoded it. */
static int decode_one(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *x, int k, nvjpegHandle_t h,
                      nvjpegJpegState_t st, nvjpegOutputFormat_t f, cudaStream_t stream)
{
  set_dst(g, x, f == NVJPEG_OUTPUT_YUV, &g->dst[k]);
  g->data[k] = x->data;
  g->lens[k] = x->len;
  nvjpegStatus_t s = nvjpegDecodeBatchedInitialize(h, st, 1, 1, f);
  if (s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecodeBatched(h, st, &g->data[k], &g->lens[k], &g->dst[k], stream);
  return s == NVJPEG_STATUS_SUCCESS;
}

static void placed(struct dpt_jpeg_gpu_item *x)
{
  x->dec_w = x->src_w;
  x->dec_h = x->src_h;
  x->placed = 1;
}

/* nvjpegDecodeBatched of group members grp[0..m) with handle h / state st, in g->fmt.  With 3
 * channels the files nvJPEG would not write as the kernel's planes (planes_of) go alone as
 * interleaved RGB after the group; a group it refuses is retried file by file, a file refused
 * as planes once more as interleaved RGB; a file still refused gets refused = 1. */
static void decode_group(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, int m, nvjpegHandle_t h,
                         nvjpegJpegState_t st, cudaStream_t stream, int *decoded)
{
  const int yuv = g->fmt == NVJPEG_OUTPUT_YUV;
  int mb = 0, k;
  *decoded = 0;
  if (m == 0) return;
  for (k = 0; k < m; k++) { /* the group's members that go batched first, the interleaved ones after */
    struct dpt_jpeg_gpu_item *x = &it[g->grp[k]];
    x->planar = yuv ? planes_of(h, x) : 0;
    if (!yuv || x->planar) {
      int t = g->grp[mb];
      g->grp[mb++] = g->grp[k];
      g->grp[k] = t;
    }
  }
  for (k = 0; k < mb; k++) {
    struct dpt_jpeg_gpu_item *x = &it[g->grp[k]];
    g->data[k] = x->data;
    g->lens[k] = x->len;
    set_dst(g, x, yuv, &g->dst[k]);
  }
  nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
  if (mb) s = nvjpegDecodeBatchedInitialize(h, st, mb, 1, g->fmt);
  if (mb && s == NVJPEG_STATUS_SUCCESS) s = nvjpegDecodeBatched(h, st, g->data, g->lens, g->dst, stream);
  for (k = 0; k < m; k++) {
    struct dpt_jpeg_gpu_item *x = &it[g->grp[k]];
    int ok = k < mb && s == NVJPEG_STATUS_SUCCESS;
    if (!ok && k < mb) ok = decode_one(g, x, k, h, st, g->fmt, stream); /* the group was refused */
    if (!ok && yuv) { /* nvJPEG's own upsampling and conversion then */
      x->planar = 0;
      ok = decode_one(g, x, k, h, st, NVJPEG_OUTPUT_RGBI, stream);
    }
    if (ok) {
      placed(x);
      ++*decoded;
    } else {
      x->refused = 1;
    }
  }
}

/* x's slot in the arena, from byte total on; returns where the next one starts.  Room for its
 * interleaved image and, with 3 channels, for its planes: Y, then Cb and Cr of its sampling's
 * size (a gray file's as large as Y: nvJPEG is given all three, and writes Y only). */
static size_t plan_slot(const struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *x, size_t total)
{
  static const int hx[] = {1, 2, 2, 1, 4, 4, 1, 1}, vy[] = {1, 1, 2, 2, 1, 2, 1, 1}; /* enum dpt_jpeg_css */
  const size_t wh = (size_t)x->src_w * x->src_h, inter = align256(wh * g->o.channels);
  const int css = x->css >= 0 && x->css <= DPT_JPEG_CSS_OTHER ? x->css : DPT_JPEG_CSS_OTHER;
  x->off = total;
  x->planar = 0;
  if (g->o.channels != 3) return total + inter;
  x->hx = hx[css];
  x->vy = vy[css];
  x->cw = (x->src_w + x->hx - 1) / x->hx;
  x->ch = (x->src_h + x->vy - 1) / x->vy;
  const size_t cplane = align256((size_t)x->cw * x->ch), planes = align256(wh) + 2 * cplane;
  x->cb = total + align256(wh);
  x->cr = x->cb + cplane;
  return total + (planes > inter ? planes : inter);
}

int dpt_jpeg_gpu_decode(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, int n, int *n_hw, int *n_hybrid,
                        int *n_rgb, struct dpt_err *err)
{
  int rc, mh = 0, my = 0;
  size_t total = 0;
  *n_hw = *n_hybrid = *n_rgb = 0;
  if (n > g->o.batch) return dpt_err_set(err, DPT_E_INPUT, "GPU loader: %d images, more than the batch %d", n, g->o.batch);
  CU(cudaSetDevice(g->o.device), "cudaSetDevice");
  /* the arena: every image with a known frame size gets its full-size slot (host-decoded ones
   * are DCT-scaled, never larger) */
  for (int i = 0; i < n; i++) {
    it[i].refused = it[i].placed = it[i].planar = 0;
    it[i].off = (size_t)-1;
    if (it[i].route == DPT_JPEG_GPU_ROUTE_NONE || it[i].src_w < 1 || it[i].src_h < 1) continue;
    total = plan_slot(g, &it[i], total);
  }
  if ((rc = arena_reserve(g, total, 0, err))) return rc;
  g->arena_used = total;
  g->stage_used = 0;
  /* the groups: hardware (its share of the eligible files, on its stream), CUDA (the rest of the
   * eligible ones), hybrid (files routed GPU) */
  int eligible = 0, to_hw;
  for (int i = 0; i < n; i++) eligible += it[i].off != (size_t)-1 && it[i].route == DPT_JPEG_ROUTE_GPU_HW;
  to_hw = g->hw ? (int)(g->hw_share * eligible + 0.5) : 0;
  for (int pass = 0; pass < 3; pass++) {
    int m = 0, done = 0, seen = 0;
    for (int i = 0; i < n; i++) {
      int r = it[i].route, grp;
      if (it[i].off == (size_t)-1 || (r != DPT_JPEG_ROUTE_GPU_HW && r != DPT_JPEG_ROUTE_GPU)) continue;
      if (r == DPT_JPEG_ROUTE_GPU_HW) grp = seen++ < to_hw ? 0 : 1;
      else grp = 2;
      if (grp == pass) g->grp[m++] = i;
    }
    nvjpegHandle_t h = pass == 0 ? g->hw : pass == 1 ? g->cu : g->hy;
    nvjpegJpegState_t st = pass == 0 ? g->hw_state : pass == 1 ? g->cu_state : g->hy_state;
    decode_group(g, it, m, h, st, pass == 0 ? g->hw_stream : g->stream, &done);
    if (pass == 0) {
      mh = done;
      if (m) CU(cudaEventRecord(g->hw_done, g->hw_stream), "hardware decoder event");
    } else {
      my += done;
    }
  }
  *n_hw = mh;
  *n_hybrid = my;
  for (int i = 0; i < n; i++) *n_rgb += g->fmt == NVJPEG_OUTPUT_YUV && it[i].placed && !it[i].planar;
  return 0;
}

int dpt_jpeg_gpu_put(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, const unsigned char *pix, int w, int h,
                     struct dpt_err *err)
{
  int c = g->o.channels, rc;
  size_t bytes = (size_t)w * h * c;
  CU(cudaSetDevice(g->o.device), "cudaSetDevice");
  if (it->off == (size_t)-1 || bytes > align256((size_t)it->src_w * it->src_h * c)) { /* no slot of that size */
    if ((rc = arena_reserve(g, g->arena_used + align256(bytes), g->arena_used, err))) return rc;
    it->off = g->arena_used;
    g->arena_used += align256(bytes);
  }
  if (g->stage_used + bytes > g->stage_cap) { /* the copies from the old staging finish first */
    size_t cap = (g->stage_used + bytes) * 2;
    unsigned char *ns = NULL;
    CU(cudaStreamSynchronize(g->stream), "decode stream");
    CU(cudaHostAlloc((void **)&ns, cap, cudaHostAllocDefault), "cudaHostAlloc of the staging buffer");
    cudaFreeHost(g->stage);
    g->stage = ns;
    g->stage_cap = cap;
    g->stage_used = 0;
  }
  memcpy(g->stage + g->stage_used, pix, bytes);
  CU(cudaMemcpyAsync(g->arena + it->off, g->stage + g->stage_used, bytes, cudaMemcpyHostToDevice, g->stream),
     "copying a host-decoded image to the GPU");
  g->stage_used += align256(bytes);
  it->dec_w = w;
  it->dec_h = h;
  it->planar = 0;
  it->placed = 1;
  return 0;
}

int dpt_jpeg_gpu_finish(struct dpt_jpeg_gpu *g, struct dpt_jpeg_gpu_item *it, int n, void *out, void *release,
                        float *host, struct dpt_err *err)
{
  const int S = g->o.out, c = g->o.channels;
  size_t ki = align256((size_t)n * sizeof(struct dpt_jpeg_kimage)), ti = (size_t)n * 2 * S * sizeof(int),
         tf = (size_t)n * S * sizeof(float), bytes = ki + 2 * ti + 2 * tf;
  CU(cudaSetDevice(g->o.device), "cudaSetDevice");
  if (host && (g->o.layout != DPT_DATA_NCHW || g->o.dtype != DPT_DATA_F32))
    return dpt_err_set(err, DPT_E_INPUT, "GPU loader: host batches are fp32 NCHW");
  if (bytes > g->tab_cap) {
    CU(cudaStreamSynchronize(g->stream), "decode stream");
    cudaFreeHost(g->tab_h);
    cudaFree(g->tab_d);
    g->tab_h = g->tab_d = NULL;
    g->tab_cap = 0;
    CU(cudaHostAlloc((void **)&g->tab_h, bytes, cudaHostAllocDefault), "cudaHostAlloc of the sampling tables");
    CU(cudaMalloc((void **)&g->tab_d, bytes), "cudaMalloc of the sampling tables");
    g->tab_cap = bytes;
  }
  struct dpt_jpeg_kimage *ki_h = (struct dpt_jpeg_kimage *)g->tab_h;
  int *cx = (int *)(g->tab_h + ki), *cy = (int *)(g->tab_h + ki + ti);
  float *wx = (float *)(g->tab_h + ki + 2 * ti), *wy = (float *)(g->tab_h + ki + 2 * ti + tf);
  for (int i = 0; i < n; i++) {
    struct dpt_jpeg_gpu_item *x = &it[i];
    int ok = x->route != DPT_JPEG_GPU_ROUTE_NONE && x->placed && x->dec_w > 0 && x->dec_h > 0;
    memset(&ki_h[i], 0, sizeof ki_h[i]);
    ki_h[i].zero = !ok;
    if (ok) {
      ki_h[i].src = x->off;
      ki_h[i].planar = c == 3 ? x->planar : 0;
      ki_h[i].pitch = ki_h[i].planar ? x->dec_w : x->dec_w * c;
      if (ki_h[i].planar == 1) {
        ki_h[i].cb = x->cb;
        ki_h[i].cr = x->cr;
        ki_h[i].cpitch = x->cw;
        ki_h[i].cw = x->cw;
        ki_h[i].ch = x->ch;
        ki_h[i].hx = x->hx;
        ki_h[i].vy = x->vy;
      }
    }
    if (ok) /* the CPU path's own tables (dpt_data_jpeg_sample) */
      dpt_augment_tables(&x->crop, S, x->src_w, x->src_h, x->dec_w, x->dec_h, cx + (size_t)i * 2 * S,
                         wx + (size_t)i * S, cy + (size_t)i * 2 * S, wy + (size_t)i * S);
    else {
      memset(cx + (size_t)i * 2 * S, 0, 2 * S * sizeof(int));
      memset(cy + (size_t)i * 2 * S, 0, 2 * S * sizeof(int));
      memset(wx + (size_t)i * S, 0, S * sizeof(float));
      memset(wy + (size_t)i * S, 0, S * sizeof(float));
    }
  }
  struct dpt_jpeg_knorm norm;
  memset(&norm, 0, sizeof norm);
  for (int k = 0; k < c; k++) {
    norm.scale[k] = 1.0f / (255.0f * g->o.std[k]);
    norm.shift[k] = -g->o.mean[k] / g->o.std[k];
  }
  CU(cudaMemcpyAsync(g->tab_d, g->tab_h, bytes, cudaMemcpyHostToDevice, g->stream), "uploading the sampling tables");
  if (release) CU(cudaStreamWaitEvent(g->stream, (cudaEvent_t)release, 0), "waiting for the consumer's release");
  if (g->hw_stream) CU(cudaStreamWaitEvent(g->stream, g->hw_done, 0), "joining the hardware decoder's stream");
  int ke = dpt_jpeg_crop_resize(g->arena, (const struct dpt_jpeg_kimage *)g->tab_d, (const int *)(g->tab_d + ki),
                                (const float *)(g->tab_d + ki + 2 * ti), (const int *)(g->tab_d + ki + ti),
                                (const float *)(g->tab_d + ki + 2 * ti + tf), n, S, c, g->o.c_stored, g->o.layout,
                                g->o.dtype, norm, out, g->stream);
  CU((cudaError_t)ke, "crop/resize kernel");
  if (host)
    CU(cudaMemcpyAsync(host, out, (size_t)n * c * S * S * sizeof(float), cudaMemcpyDeviceToHost, g->stream),
       "copying the batch to the host");
  CU(cudaStreamSynchronize(g->stream), "decode stream (an asynchronous fault in nvJPEG or the kernel)");
  return 0;
}

int dpt_jpeg_gpu_alloc(int device, size_t bytes, void **p, struct dpt_err *err)
{
  *p = NULL;
  CU(cudaSetDevice(device), "cudaSetDevice");
  CU(cudaMalloc(p, bytes), "cudaMalloc of a loader batch");
  return 0;
}

void dpt_jpeg_gpu_free(void *p)
{
  if (p) cudaFree(p);
}

int dpt_jpeg_gpu_event_create(int device, void **ev, struct dpt_err *err)
{
  cudaEvent_t e = NULL;
  *ev = NULL;
  CU(cudaSetDevice(device), "cudaSetDevice");
  CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  *ev = e;
  return 0;
}

void dpt_jpeg_gpu_event_destroy(void *ev)
{
  if (ev) cudaEventDestroy((cudaEvent_t)ev);
}

int dpt_jpeg_gpu_event_record(void *ev, void *stream, struct dpt_err *err)
{
  CU(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream), "recording the consumer's release event");
  return 0;
}
