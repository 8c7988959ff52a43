/* dpt_fp16.c — see dpt_fp16.h */
#include "dpt_fp16.h"

#include <string.h>

static inline uint32_t f2u(float f)
{
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float u2f(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round-to-nearest-even by integer arithmetic on the fp32 bits. */
static inline dpt_half to_half(float f)
{
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t h;

  if (ax >= 0x7f800000u) {                 /* inf or NaN */
    h = ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u;
  } else if (ax >= 0x477ff000u) {          /* rounds to >= 65520: overflow */
    h = 0x7c00u;
  } else if (ax >= 0x38800000u) {          /* normal half: exp >= -14 */
    uint32_t lsb = (ax >> 13) & 1u;
    h = (ax + 0x0fffu + lsb - 0x38000000u) >> 13;   /* rebias 127 -> 15, RNE */
  } else if (ax >= 0x33000000u) {          /* subnormal half (>= 2^-25) */
    uint32_t e = ax >> 23;                 /* 102..112 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;             /* 14..24: m >> shift = half mantissa */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u)))
      q++;
    h = q;
  } else {                                 /* underflows to zero */
    h = 0;
  }
  return (dpt_half)(sign | h);
}

static inline float to_float(dpt_half hv)
{
  uint32_t h = hv;
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;

  if (e == 0x1f)
    return u2f(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    /* zero or subnormal: m * 2^-24, exact in fp32 */
    float v = (float)m * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

dpt_half dpt_fp16_from_float(float f) { return to_half(f); }
float dpt_fp16_to_float(dpt_half h) { return to_float(h); }

void dpt_fp16_pack(dpt_half *dst, const float *src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = to_half(src[i]);
}

void dpt_fp16_unpack(float *dst, const dpt_half *src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = to_float(src[i]);
}

void dpt_fp16_accumulate(float *acc, const dpt_half *src, size_t n)
{
  for (size_t i = 0; i < n; i++)
    acc[i] += to_float(src[i]);
}

void dpt_fp16_round(float *x, size_t n)
{
  for (size_t i = 0; i < n; i++)
    x[i] = to_float(to_half(x[i]));
}
