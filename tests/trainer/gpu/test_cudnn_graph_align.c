/* test_cudnn_graph_align: the cuDNN graph module's guards before cuDNN sees an operand
 * (trainer/cuda/dpt_cudnn_graph.h).
 *
 *   trainer_gpu_test_cudnn_graph_align            host part (no device needed; runs everywhere)
 *   trainer_gpu_test_cudnn_graph_align --device   device part (SKIPPED, 77, without one)
 *
 * Host part:
 *  - dpt_cg_misaligned: only the slots the graph uses count; 16-byte multiples pass, a pointer
 *    4, 8 or 12 bytes past one is named (the first such slot in the graph's order); NULL (unused)
 *    slots and misaligned pointers in slots the graph does not use are ignored;
 *  - dpt_cg_key: the layout (nchw), determinism, accumulation and TF32 make distinct keys;
 *  - dpt_cg_build on bad input, before any cuDNN call: an empty tensor, a convolution without
 *    output, BN finalize's eps and momentum, an NCHW description of a fused pattern, no handle:
 *    DPT_E_INPUT naming the layer and the reason;
 *  - dpt_cg_aliased: BN finalize's updated running statistics (RMEAN_NEXT, RVAR_NEXT) sharing
 *    any of the [C] floats it reads (RMEAN, RVAR) are named (in place, partial overlaps, at the
 *    description's channel count), own or adjacent buffers pass; dpt_cg_build refuses them.
 * Device part (fp16 scale-bias-ReLU, [2, 8, 4, 4] NHWC):
 *  - a build whose scale vector sits 4 bytes past a 16-byte boundary (a BN's beta after a
 *    channel count that is not a multiple of 4) is refused with DPT_E_UNSUPPORTED naming S,
 *    and is not stored as "no engine" in the cache (another layer of the key may be aligned);
 *  - the aligned build succeeds (or the pattern has no engine here: said, the rest skipped);
 *    executing it with the misaligned S is refused (DPT_E_INPUT), writes nothing (Y keeps its
 *    sentinel), and leaves the CUDA context healthy: the aligned execution then runs and its
 *    output is relu(x s + b) within fp16's rounding. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cudnn_graph.h"
#include "dpt_fp16.h"

#include "cu_check.h"
#include "dpt_check.h"

static struct dpt_cg_op fake_op(int n, const int *slots)
{
  struct dpt_cg_op op;
  memset(&op, 0, sizeof op);
  op.n_uids = n;
  for (int i = 0; i < n; i++) op.slot[i] = slots[i], op.uid[i] = 100 + i;
  return op;
}

static void host_misaligned(void)
{
  static _Alignas(16) unsigned char buf[1024];
  void *ptrs[DPT_CG_NSLOTS] = {0};
  int used[] = {DPT_CG_X, DPT_CG_W, DPT_CG_GAMMA, DPT_CG_BETA};
  struct dpt_cg_op op = fake_op(4, used);
  ptrs[DPT_CG_X] = buf, ptrs[DPT_CG_W] = buf + 256, ptrs[DPT_CG_GAMMA] = buf + 512, ptrs[DPT_CG_BETA] = buf + 528;
  CHECK(dpt_cg_misaligned(&op, ptrs) == -1, "16-byte multiples: %d", dpt_cg_misaligned(&op, ptrs));
  ptrs[DPT_CG_Y] = buf + 3; /* not a slot of this graph */
  CHECK(dpt_cg_misaligned(&op, ptrs) == -1, "an unused slot's pointer is not the graph's: %d", dpt_cg_misaligned(&op, ptrs));
  for (int off = 4; off < 16; off += 4) {
    ptrs[DPT_CG_BETA] = buf + 512 + off; /* gamma + c floats, c % 4 = off / 4 */
    CHECK(dpt_cg_misaligned(&op, ptrs) == DPT_CG_BETA, "beta %d bytes past a boundary: %d", off,
          dpt_cg_misaligned(&op, ptrs));
  }
  ptrs[DPT_CG_W] = buf + 260; /* the first in the graph's order is named */
  CHECK(dpt_cg_misaligned(&op, ptrs) == DPT_CG_W, "first misaligned slot: %d", dpt_cg_misaligned(&op, ptrs));
  struct dpt_cg_op none = fake_op(0, used);
  CHECK(dpt_cg_misaligned(&none, ptrs) == -1, "a graph without slots");
}

static void host_keys(void)
{
  struct dpt_cg_desc d = {.pattern = DPT_CG_DGRAD, .n = 8, .c = 64, .h = 14, .w = 14, .k = 128, .r = 3, .stride = 1,
                          .pad = 1, .io = DPT_CG_F32, .sb = DPT_CG_F32};
  char k[6][DPT_ENGINE_KEY_MAX];
  dpt_cg_key(&d, k[0], sizeof k[0]);
  d.nchw = 1;
  dpt_cg_key(&d, k[1], sizeof k[1]);
  d.deterministic = 1;
  dpt_cg_key(&d, k[2], sizeof k[2]);
  d.accumulate = 1;
  dpt_cg_key(&d, k[3], sizeof k[3]);
  d.tf32 = 1;
  dpt_cg_key(&d, k[4], sizeof k[4]);
  d.io = DPT_CG_F16;
  dpt_cg_key(&d, k[5], sizeof k[5]);
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++) CHECK(strcmp(k[i], k[j]), "keys %d and %d are the same: %s", i, j, k[i]);
  CHECK(strstr(k[0], "nhwc") && strstr(k[1], "nchw") && !strstr(k[1], "det") && strstr(k[2], " det"),
        "layout and determinism in the key: '%s' / '%s' / '%s'", k[0], k[1], k[2]);
  printf("keys: %s | %s\n", k[0], k[2]);
}

/* BN finalize's update goes to memory of its own: dpt_cg_aliased names a NEXT slot whose [C]
 * floats overlap RMEAN's or RVAR's (the same pointer, or a partial overlap), nothing otherwise
 * (adjacent buffers, other patterns, unused slots). */
static void host_aliased(void)
{
  static _Alignas(16) float buf[1024];
  struct dpt_cg_desc d = {.pattern = DPT_CG_BN_FINALIZE, .n = 1, .c = 64, .h = 1, .w = 16, .eps = 1e-5, .momentum = 0.1};
  void *ptrs[DPT_CG_NSLOTS] = {0};
  ptrs[DPT_CG_RMEAN] = buf, ptrs[DPT_CG_RVAR] = buf + 64;
  CHECK(dpt_cg_aliased(&d, ptrs) == -1, "no NEXT pointers: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RMEAN_NEXT] = buf + 512, ptrs[DPT_CG_RVAR_NEXT] = buf + 576;
  CHECK(dpt_cg_aliased(&d, ptrs) == -1, "own buffers: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RMEAN_NEXT] = buf + 128; /* right after RVAR: touching, not sharing */
  CHECK(dpt_cg_aliased(&d, ptrs) == -1, "adjacent buffers: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RMEAN_NEXT] = buf; /* in place, the way the fused step ran before issue 22 */
  CHECK(dpt_cg_aliased(&d, ptrs) == DPT_CG_RMEAN_NEXT, "in place: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RMEAN_NEXT] = buf + 512, ptrs[DPT_CG_RVAR_NEXT] = buf + 100; /* a partial overlap of RVAR */
  CHECK(dpt_cg_aliased(&d, ptrs) == DPT_CG_RVAR_NEXT, "partial overlap: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RVAR_NEXT] = buf + 1; /* ... and of both */
  CHECK(dpt_cg_aliased(&d, ptrs) == DPT_CG_RVAR_NEXT, "overlaps both: %d", dpt_cg_aliased(&d, ptrs));
  d.c = 16; /* the same pointers at 16 channels: RVAR_NEXT = RMEAN + 1 still overlaps */
  CHECK(dpt_cg_aliased(&d, ptrs) == DPT_CG_RVAR_NEXT, "16 channels: %d", dpt_cg_aliased(&d, ptrs));
  ptrs[DPT_CG_RVAR_NEXT] = buf + 80; /* 64 channels would reach RVAR's [64, 128); 16 end at 80 */
  CHECK(dpt_cg_aliased(&d, ptrs) == -1, "16 channels, after RVAR's 16: %d", dpt_cg_aliased(&d, ptrs));
  d.c = 64;
  CHECK(dpt_cg_aliased(&d, ptrs) == DPT_CG_RVAR_NEXT, "64 channels, inside RVAR: %d", dpt_cg_aliased(&d, ptrs));
  d.pattern = DPT_CG_SBR_APPLY; /* not BN finalize: the slots are not its */
  CHECK(dpt_cg_aliased(&d, ptrs) == -1, "another pattern: %d", dpt_cg_aliased(&d, ptrs));
  CHECK(dpt_cg_aliased(&d, NULL) == -1, "no pointers");
  /* dpt_cg_build refuses it before cuDNN sees it (DPT_E_INPUT naming the layer and what to do) */
  struct dpt_cg_ctx ctx;
  struct dpt_cg_op op;
  struct dpt_err err = {0};
  memset(&ctx, 0, sizeof ctx);
  ctx.dnn = (cudnnHandle_t)(uintptr_t)1; /* never used */
  d.pattern = DPT_CG_BN_FINALIZE, d.layer = "layer1.0.bn1";
  ptrs[DPT_CG_RVAR_NEXT] = buf + 64;
  int rc = dpt_cg_build(&ctx, &d, ptrs, &op, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "share memory") && strstr(err.msg, "layer1.0.bn1") &&
            strstr(err.msg, "buffers of their own"),
        "build with RVAR_NEXT = RVAR: rc %d: %s", rc, err.msg);
  printf("aliasing: %s\n", err.msg);
}

static void refused(struct dpt_cg_desc d, const char *why)
{
  struct dpt_cg_ctx ctx;
  struct dpt_cg_op op;
  struct dpt_err err = {0};
  void *ptrs[DPT_CG_NSLOTS] = {0};
  memset(&ctx, 0, sizeof ctx);
  ctx.dnn = (cudnnHandle_t)(uintptr_t)1; /* never used: the description is refused first */
  if (!strcmp(why, "no cuDNN handle")) ctx.dnn = NULL;
  d.layer = "layer1.0.conv2";
  int rc = dpt_cg_build(&ctx, &d, ptrs, &op, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, why) && strstr(err.msg, "layer1.0.conv2"), "%s: rc %d: %s", why, rc,
        err.msg);
}

static void host_bad_input(void)
{
  struct dpt_cg_desc conv = {.pattern = DPT_CG_FPROP, .n = 2, .c = 8, .h = 4, .w = 4, .k = 8, .r = 3, .stride = 1,
                             .pad = 1, .io = DPT_CG_F16, .sb = DPT_CG_F32};
  struct dpt_cg_desc d = conv;
  d.c = 0;
  refused(d, "an empty tensor");
  d = conv, d.r = 7, d.pad = 0; /* 4x4 input, 7x7 filter, no padding */
  refused(d, "a convolution without output");
  d = conv, d.pattern = DPT_CG_BN_FINALIZE, d.eps = 0, d.momentum = 0.1;
  refused(d, "BN finalize needs eps > 0");
  d.eps = 1e-5, d.momentum = 1.5;
  refused(d, "BN finalize needs eps > 0");
  d = conv, d.pattern = DPT_CG_SBR_CONV_STATS, d.nchw = 1;
  refused(d, "NCHW is for a single convolution");
  d = conv, d.pattern = 99;
  refused(d, "unknown pattern");
  refused(conv, "no cuDNN handle");
}

/* ---- device part ------------------------------------------------------------------------------ */

static void device_part(void)
{
  device_or_skip("test_cudnn_graph_align --device");
  enum { N = 2, C = 8, H = 4, W = 4, E = N * C * H * W };
  cudnnHandle_t dnn;
  if (cudnnCreate(&dnn) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "cudnnCreate failed\n");
    exit(1);
  }
  struct dpt_engine_cache cache;
  struct dpt_engine_ident id;
  struct dpt_err err = {0};
  memset(&id, 0, sizeof id);
  snprintf(id.gpu, sizeof id.gpu, "test-align");
  id.cudnn = (long)cudnnGetVersion();
  if (dpt_engine_cache_open(&cache, &id, "off", &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  struct dpt_cg_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.dnn = dnn;
  ctx.cudnn_version = id.cudnn;
  ctx.cache = &cache;
  ctx.workspace_limit = (size_t)16 << 20;
  CU(cudaMalloc(&ctx.workspace, ctx.workspace_limit));
  unsigned char *x, *y, *sb;
  CU(cudaMalloc((void **)&x, E * 2));
  CU(cudaMalloc((void **)&y, E * 2));
  CU(cudaMalloc((void **)&sb, 4096));
  unsigned short hx[E], hy[E], sentinel = 0x7c00; /* fp16 +inf */
  float hs[C], hb[C];
  for (int i = 0; i < E; i++) hx[i] = dpt_fp16_from_float((float)((i * 37) % 17 - 8) / 8.0f);
  for (int c = 0; c < C; c++) hs[c] = 0.25f * (float)(c + 1), hb[c] = (c % 2) ? 0.5f : -0.5f;
  for (int i = 0; i < E; i++) hy[i] = sentinel;
  CU(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice));
  /* aligned S at sb, B at sb + 256; the misaligned S at sb + 1028 (4 bytes past a boundary) */
  CU(cudaMemcpy(sb, hs, sizeof hs, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(sb + 256, hb, sizeof hb, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(sb + 1028, hs, sizeof hs, cudaMemcpyHostToDevice));
  struct dpt_cg_desc d = {.pattern = DPT_CG_SBR_APPLY, .n = N, .c = C, .h = H, .w = W, .io = DPT_CG_F16,
                          .sb = DPT_CG_F32, .relu = 1, .layer = "test.bn"};
  void *p[DPT_CG_NSLOTS] = {0};
  p[DPT_CG_X] = x, p[DPT_CG_Y] = y, p[DPT_CG_S] = sb + 1028, p[DPT_CG_B] = sb + 256;
  struct dpt_cg_op op;
  int rc = dpt_cg_build(&ctx, &d, p, &op, &err);
  CHECK(rc == DPT_E_UNSUPPORTED && strstr(err.msg, "operand S") && strstr(err.msg, "16-byte aligned"),
        "misaligned S at build: rc %d: %s", rc, err.msg);
  char key[DPT_ENGINE_KEY_MAX];
  dpt_cg_key(&d, key, sizeof key);
  CHECK(!dpt_engine_cache_none(&cache, key), "the refusal was stored as 'no engine' for %s", key);
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "the context after the refused build");
  p[DPT_CG_S] = sb;
  rc = dpt_cg_build(&ctx, &d, p, &op, &err);
  if (rc == DPT_E_UNSUPPORTED) {
    printf("sbr_apply fp16 has no engine here (%s): the execution checks are not run\n", err.msg);
  } else if (rc) {
    CHECK(rc == 0, "aligned build: rc %d: %s", rc, err.msg);
  } else {
    CU(cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice)); /* the timing runs wrote Y */
    p[DPT_CG_S] = sb + 1028;
    rc = dpt_cg_execute(&ctx, &op, p, &err);
    CHECK(rc == DPT_E_INPUT && strstr(err.msg, "operand S"), "misaligned S at execution: rc %d: %s", rc, err.msg);
    unsigned short got[E];
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "the context after the refused execution");
    CU(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (int i = 0; i < E; i++) untouched &= got[i] == sentinel;
    CHECK(untouched, "the refused execution wrote Y");
    p[DPT_CG_S] = sb;
    rc = dpt_cg_execute(&ctx, &op, p, &err);
    CHECK(rc == 0 && cudaDeviceSynchronize() == cudaSuccess, "aligned execution: rc %d: %s", rc, err.msg);
    CU(cudaMemcpy(got, y, sizeof got, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int i = 0; i < E; i++) {
      int c = i % C; /* NHWC */
      double want = fmax(0.0, (double)dpt_fp16_to_float(hx[i]) * hs[c] + hb[c]);
      double e = fabs((double)dpt_fp16_to_float(got[i]) - want) / fmax(1.0, fabs(want));
      if (e > worst) worst = e;
    }
    CHECK(worst <= 0x1p-10, "relu(x s + b): worst relative error %.3g > 2^-10 (fp16 rounding of one result)", worst);
    printf("aligned execution: worst relative error %.3g (bound 2^-10)\n", worst);
    dpt_cg_destroy(&op);
  }
  dpt_engine_cache_close(&cache);
  cudaFree(ctx.workspace);
  cudaFree(x);
  cudaFree(y);
  cudaFree(sb);
  cudnnDestroy(dnn);
}

int main(int argc, char **argv)
{
  if (argc > 1 && !strcmp(argv[1], "--device")) {
    device_part();
  } else {
    host_misaligned();
    host_keys();
    host_bad_input();
    host_aliased();
  }
  if (!failures) printf("test_cudnn_graph_align%s: all checks passed\n", argc > 1 ? " --device" : "");
  return failures != 0;
}
