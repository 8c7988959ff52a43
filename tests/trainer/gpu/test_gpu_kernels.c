/* test_gpu_kernels: the residual blocks' element-wise kernels (trainer/cuda/dpt_cuda_kernels.cu:
 * dpt_cuda_add with and without ReLU, dpt_cuda_relu, dpt_cuda_relu_bwd plain and accumulating,
 * dpt_cuda_acc, and the residual add's one-pass backward dpt_cuda_add_bwd with and without the
 * ReLU's mask, each of its two outputs written or accumulated or absent) against the host, bit
 * for bit, at fp32, fp16 and bf16.  The host decodes each
 * 16-bit input exactly, applies the same one-element rule in float and rounds to nearest even
 * (IEEE: the device's __float2half_rn / __float2bfloat16_rn), so every output bit is fixed.
 * Each case runs where the 16-byte vector kernels take the bulk (aligned, n = 1,000,003: a
 * tail of 3 for 8-wide packs), on a tensor one element off alignment (the scalar kernels
 * alone), on short tensors (n = 1..17) and in place (y == a, dx accumulating): the third visit
 * vectorised these kernels, and every path they can take is held to the same bits.  Inputs hold
 * zeros of both signs, infinities and NaNs (a NaN passes ReLU, as CUDNN_PROPAGATE_NAN).
 * SKIPPED (77) without a usable CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "dpt_cuda_kernels.h"

#include "cu_check.h"
#include "dpt_check.h"

/* ---- exact host conversions -------------------------------------------------------------------- */
static float bits_f32(uint32_t u)
{
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t f32_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float f16_dec(uint16_t h)
{
  int e = (h >> 10) & 31, m = h & 1023;
  float s = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * (e ? ldexpf((float)(1024 + m), e - 25) : ldexpf((float)m, -24));
}
/* round to nearest even; NaN -> a quiet NaN */
static uint16_t f16_enc(float f)
{
  uint16_t sign = (f32_bits(f) >> 16) & 0x8000;
  if (isnan(f)) return 0x7fff;
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00; /* past the largest half + half an ulp */
  if (a < ldexp(1.0, -14)) return sign | (uint16_t)nearbyint(ldexp(a, 24)); /* subnormal (may round to 2^-14) */
  int e;
  double m = frexp(a, &e);          /* a = m 2^e, m in [0.5, 1) */
  double q = nearbyint(ldexp(m, 11)); /* 11 significant bits */
  if (q == 2048.0) q = 1024.0, e++;
  if (e - 1 + 15 >= 31) return sign | 0x7c00;
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((int)q - 1024);
}
static float bf16_dec(uint16_t b) { return bits_f32((uint32_t)b << 16); }
static uint16_t bf16_enc(float f)
{
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static const int SIZE[3] = {4, 2, 2};
static const char *const NAME[3] = {"fp32", "fp16", "bf16"};

static float dec(int dt, const void *p, size_t i)
{
  if (dt == DPT_DT_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == DPT_DT_F16 ? f16_dec(h) : bf16_dec(h);
}
static void enc(int dt, void *p, size_t i, float v)
{
  if (dt == DPT_DT_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == DPT_DT_F16 ? f16_enc(v) : bf16_enc(v);
}

static unsigned rng = 12345u;
static float frand(void)
{
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
/* mostly N(ish)(0, 4), with every 97th element special */
static float draw(size_t i)
{
  static const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-6f, -3e-5f, 70000.0f};
  if (i % 97 == 5) return sp[(i / 97) % 8];
  return 4.0f * (frand() + frand() + frand());
}

enum op { ADD, ADD_RELU, RELU, RELU_BWD, RELU_BWD_ACC, ACC, N_OP };
static const char *const OPN[N_OP] = {"add", "add+relu", "relu", "relu_bwd", "relu_bwd+acc", "acc"};

/* the one-element rules of dpt_cuda_kernels.cu, in float */
static float rule(enum op op, float a, float b, float o)
{
  switch (op) {
  case ADD: return a + b;
  case ADD_RELU: {
    float v = a + b;
    return !(v > 0.0f) && !isnan(v) ? 0.0f : v;
  }
  case RELU: return !(a > 0.0f) && !isnan(a) ? 0.0f : a;
  case RELU_BWD: return a > 0.0f ? b : 0.0f;
  case RELU_BWD_ACC: return o + (a > 0.0f ? b : 0.0f);
  default: return a + b; /* ACC: y (a, also the output) += x (b) */
  }
}

static int launch(enum op op, int dt, const void *a, const void *b, void *out, size_t n)
{
  switch (op) {
  case ADD: return dpt_cuda_add(a, b, out, dt, 0, n, 0);
  case ADD_RELU: return dpt_cuda_add(a, b, out, dt, 1, n, 0);
  case RELU: return dpt_cuda_relu(a, out, dt, n, 0);
  case RELU_BWD: return dpt_cuda_relu_bwd(a, b, out, dt, 0, n, 0);
  case RELU_BWD_ACC: return dpt_cuda_relu_bwd(a, b, out, dt, 1, n, 0);
  default: return dpt_cuda_acc(out, b, dt, n, 0); /* out holds a's values */
  }
}

/* One case: n elements at element offset `off` from a 256-byte aligned allocation; in place: the
 * output is a's buffer (ACC always is).  Returns the number of differing elements. */
static size_t one(enum op op, int dt, size_t n, size_t off, int in_place)
{
  size_t es = (size_t)SIZE[dt], bytes = (n + off) * es;
  unsigned char *ha = malloc(bytes), *hb = malloc(bytes), *ho = malloc(bytes), *got = malloc(bytes);
  void *da, *db, *dout;
  CU(cudaMalloc(&da, bytes));
  CU(cudaMalloc(&db, bytes));
  CU(cudaMalloc(&dout, bytes));
  for (size_t i = 0; i < n + off; i++) enc(dt, ha, i, draw(i)), enc(dt, hb, i, draw(i + 7)), enc(dt, ho, i, draw(i + 3));
  CU(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dout, ho, bytes, cudaMemcpyHostToDevice));
  in_place |= op == ACC;
  char *A = (char *)da + off * es, *B = (char *)db + off * es, *O = in_place ? A : (char *)dout + off * es;
  CU((cudaError_t)launch(op, dt, A, B, O, n));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(got, in_place ? da : dout, bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  const unsigned char *before = in_place ? ha : ho;
  for (size_t i = 0; i < n + off; i++) {
    float want;
    if (i < off) want = dec(dt, before, i); /* outside the tensor: untouched */
    else want = rule(op, dec(dt, ha, i), dec(dt, hb, i), dec(dt, before, i));
    unsigned char w[4];
    enc(dt, w, 0, want);
    float g = dec(dt, got, i), wq = dec(dt, w, 0);
    int same = isnan(wq) ? isnan(g) : !memcmp(got + i * es, w, es);
    if (!same && bad++ < 3)
      fprintf(stderr, "  %s %s n %zu off %zu%s: element %zu: got %.9g want %.9g (a %.9g b %.9g)\n", OPN[op], NAME[dt],
              n, off, in_place ? " in place" : "", i, g, wq, dec(dt, ha, i), dec(dt, hb, i));
  }
  CU(cudaFree(da));
  CU(cudaFree(db));
  CU(cudaFree(dout));
  free(ha), free(hb), free(ho), free(got);
  return bad;
}

/* dpt_cuda_add_bwd: g = dy masked by y > 0 (relu), written to / added to d0 and d1 (has1: d1 exists) */
static size_t one_add_bwd(int dt, size_t n, size_t off, int relu, int acc0, int acc1, int has1)
{
  size_t es = (size_t)SIZE[dt], bytes = (n + off) * es;
  unsigned char *h[4], *got0 = malloc(bytes), *got1 = malloc(bytes);
  void *d[4];
  for (int k = 0; k < 4; k++) { /* y, dy, d0, d1 */
    h[k] = malloc(bytes);
    for (size_t i = 0; i < n + off; i++) enc(dt, h[k], i, draw(i + 11 * (size_t)k));
    CU(cudaMalloc(&d[k], bytes));
    CU(cudaMemcpy(d[k], h[k], bytes, cudaMemcpyHostToDevice));
  }
  char *p[4];
  for (int k = 0; k < 4; k++) p[k] = (char *)d[k] + off * es;
  CU((cudaError_t)dpt_cuda_add_bwd(relu ? p[0] : NULL, p[1], p[2], acc0, has1 ? p[3] : NULL, acc1, dt, n, 0));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(got0, d[2], bytes, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(got1, d[3], bytes, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n + off; i++)
    for (int o = 0; o < 2; o++) {
      const unsigned char *got = o ? got1 : got0, *before = h[2 + o];
      int acc = o ? acc1 : acc0, touched = i >= off && (o == 0 || has1);
      float g = !relu || dec(dt, h[0], i) > 0.0f ? dec(dt, h[1], i) : 0.0f;
      float want = touched ? (acc ? dec(dt, before, i) + g : g) : dec(dt, before, i);
      unsigned char w[4];
      enc(dt, w, 0, want);
      float gv = dec(dt, got, i), wq = dec(dt, w, 0);
      int same = isnan(wq) ? isnan(gv) : !memcmp(got + i * es, w, es);
      if (!same && bad++ < 3)
        fprintf(stderr, "  add_bwd %s n %zu off %zu relu %d acc %d/%d d1 %d: output %d element %zu: got %.9g want %.9g\n",
                NAME[dt], n, off, relu, acc0, acc1, has1, o, i, gv, wq);
    }
  for (int k = 0; k < 4; k++) {
    CU(cudaFree(d[k]));
    free(h[k]);
  }
  free(got0), free(got1);
  return bad;
}

int main(void)
{
  device_or_skip("test_gpu_kernels");
  /* the host encoder against known values */
  CHECK(f16_enc(1.0f) == 0x3c00 && f16_enc(65504.0f) == 0x7bff && f16_enc(65520.0f) == 0x7c00 &&
        f16_enc(ldexpf(1.0f, -24)) == 0x0001 && f16_enc(-2.0f) == 0xc000 && f16_enc(1.0f + ldexpf(1.0f, -11)) == 0x3c00 &&
        f16_enc(1.0f + 3 * ldexpf(1.0f, -11)) == 0x3c02,
        "host fp16 rounding");
  CHECK(bf16_enc(1.0f) == 0x3f80 && bf16_enc(1.0f + ldexpf(1.0f, -8)) == 0x3f80 &&
        bf16_enc(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3f82, "host bf16 rounding");
  static const size_t small[] = {1, 2, 3, 7, 8, 9, 15, 16, 17};
  int cases = 0;
  for (int dt = 0; dt < 3; dt++)
    for (int op = 0; op < N_OP; op++) {
      size_t bad = one(op, dt, 1000003, 0, 0) + one(op, dt, 1000003, 1, 0) + one(op, dt, 4099, 0, 1) +
                   one(op, dt, 4099, 3, 1);
      cases += 4;
      for (size_t k = 0; k < sizeof small / sizeof *small; k++, cases++) bad += one(op, dt, small[k], k & 1, 0);
      CHECK(bad == 0, "%s %s: %zu element(s) differ from the host's", OPN[op], NAME[dt], bad);
    }
  for (int dt = 0; dt < 3; dt++)
    for (int v = 0; v < 16; v++) { /* relu, acc0, acc1, d1 present: every combination */
      int relu = v & 1, a0 = (v >> 1) & 1, a1 = (v >> 2) & 1, has1 = (v >> 3) & 1;
      size_t bad = one_add_bwd(dt, 1000003, 0, relu, a0, a1, has1) + one_add_bwd(dt, 4099, 1, relu, a0, a1, has1) +
                   one_add_bwd(dt, 9, 0, relu, a0, a1, has1);
      cases += 3;
      CHECK(bad == 0, "add_bwd %s relu %d acc %d/%d d1 %d: %zu element(s) differ from the host's", NAME[dt], relu, a0,
            a1, has1, bad);
    }
  CHECK(dpt_cuda_add_bwd(NULL, &cases, &cases, 0, &cases, 0, DPT_DT_F32, 1, 0) == (int)cudaErrorInvalidValue,
        "add_bwd with both outputs in one buffer is refused");
  printf("test_gpu_kernels: %d cases (%d ops and add_bwd x 3 types), %d failure(s)\n", cases, N_OP, failures);
  return failures ? 1 : 0;
}
