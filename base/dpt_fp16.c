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

/* The buffer loops: x86-64 CPUs with F16C convert 8 values per instruction
 * (vcvtps2ph with round-to-nearest-even, vcvtph2ps), the same IEEE conversions as the
 * scalar code above (test_fp16 checks them against each other and against _Float16);
 * the scalar code handles the tails and CPUs without F16C.  On the 8-rank thin-tree
 * benchmark the scalar conversions, not the links, bounded fp16 on the wire. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define DPT_FP16_X86 1
#define F16C __attribute__((target("avx,f16c")))

F16C static size_t pack_f16c(dpt_half *dst, const float *src, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}
F16C static size_t unpack_f16c(float *dst, const dpt_half *src, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
  return i;
}
F16C static size_t accumulate_f16c(float *acc, const dpt_half *src, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i),
                                            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)))));
  return i;
}
F16C static size_t round_f16c(float *x, size_t n)
{
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                            _MM_FROUND_TO_NEAREST_INT)));
  return i;
}
#endif

#ifdef DPT_FP16_X86
/* CPUID.1:ECX: F16C (bit 29), AVX (28), OSXSAVE (27); and the OS saves YMM state
 * (XCR0 bits 1-2).  (clang 14's __builtin_cpu_supports does not know "f16c".) */
static int cpu_has_f16c(void)
{
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  if (!(c & (1u << 29)) || !(c & (1u << 28)) || !(c & (1u << 27)))
    return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 6u) == 6u;
}
#endif

static int simd_state = -1; /* -1: not probed yet, 0: scalar, 1: F16C */

static int use_simd(void)
{
  int s = __atomic_load_n(&simd_state, __ATOMIC_RELAXED);
  if (s < 0) {
#ifdef DPT_FP16_X86
    s = cpu_has_f16c();
#else
    s = 0;
#endif
    __atomic_store_n(&simd_state, s, __ATOMIC_RELAXED);
  }
  return s;
}

int dpt_fp16_simd(int enable)
{
  if (enable < 0)
    return use_simd();
  __atomic_store_n(&simd_state, -1, __ATOMIC_RELAXED);
  if (enable && use_simd())
    return 1;
  __atomic_store_n(&simd_state, 0, __ATOMIC_RELAXED);
  return 0;
}

void dpt_fp16_pack(dpt_half *dst, const float *src, size_t n)
{
  size_t i = 0;
#ifdef DPT_FP16_X86
  if (use_simd())
    i = pack_f16c(dst, src, n);
#endif
  for (; i < n; i++)
    dst[i] = to_half(src[i]);
}

void dpt_fp16_unpack(float *dst, const dpt_half *src, size_t n)
{
  size_t i = 0;
#ifdef DPT_FP16_X86
  if (use_simd())
    i = unpack_f16c(dst, src, n);
#endif
  for (; i < n; i++)
    dst[i] = to_float(src[i]);
}

void dpt_fp16_accumulate(float *acc, const dpt_half *src, size_t n)
{
  size_t i = 0;
#ifdef DPT_FP16_X86
  if (use_simd())
    i = accumulate_f16c(acc, src, n);
#endif
  for (; i < n; i++)
    acc[i] += to_float(src[i]);
}

void dpt_fp16_round(float *x, size_t n)
{
  size_t i = 0;
#ifdef DPT_FP16_X86
  if (use_simd())
    i = round_f16c(x, n);
#endif
  for (; i < n; i++)
    x[i] = to_float(to_half(x[i]));
}
