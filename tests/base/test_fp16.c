/* test_fp16.c — dpt_fp16 against the compiler's _Float16 (libgcc's
 * round-to-nearest-even conversion), exhaustively for half -> float -> half
 * and on 2^24 float bit patterns spread over the whole range plus every
 * boundary (subnormals, ties, overflow, NaN); the buffer functions' F16C path
 * (when the CPU has it) against their plain C path on the same data. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_fp16.h"

#ifndef __FLT16_MANT_DIG__
/* The reference is the compiler's _Float16: GCC 12 has it on x86-64, clang before 15 does not
 * (Debian 12's clang 14 builds the project too). */
int main(void)
{
  printf("SKIPPED test_fp16: this compiler has no _Float16 (the reference); GCC runs it\n");
  return 77;
}
#else
static int failures;

static uint16_t ref_half(float f)
{
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

static float bits(uint32_t u)
{
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void check_float(float f)
{
  uint16_t want = ref_half(f), got = dpt_fp16_from_float(f);
  int want_nan = (want & 0x7c00) == 0x7c00 && (want & 0x3ff);
  int got_nan = (got & 0x7c00) == 0x7c00 && (got & 0x3ff);
  if (want_nan ? !got_nan || (got & 0x8000) != (want & 0x8000) : got != want) {
    if (failures++ < 10) {
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      fprintf(stderr, "FAIL: float 0x%08x (%.10g) -> half 0x%04x, expected 0x%04x\n", u, f, got,
              want);
    }
  }
}

static int same_float(float a, float b)
{
  uint32_t ua, ub;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  return (isnan(a) && isnan(b) && (ua >> 31) == (ub >> 31)) || ua == ub;
}

static int same_half(dpt_half a, dpt_half b)
{
  int na = (a & 0x7c00) == 0x7c00 && (a & 0x3ff), nb = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
  return (na && nb && (a & 0x8000) == (b & 0x8000)) || a == b;
}

/* The four buffer functions with F16C (if the CPU has it) and in plain C on n values:
 * every half pattern, then random float bit patterns and ordinary gradients; lengths
 * that are not a multiple of 8 exercise the tails. */
static void check_buffers(size_t n)
{
  float *src = malloc(n * sizeof *src), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  float *acc_a = malloc(n * sizeof *acc_a), *acc_b = malloc(n * sizeof *acc_b);
  dpt_half *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb), *hall = malloc(n * sizeof *hall);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  size_t bad = 0;
  if (!src || !a || !b || !acc_a || !acc_b || !ha || !hb || !hall) {
    fprintf(stderr, "FAIL: out of memory for %zu values\n", n);
    failures++;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint32_t u = (uint32_t)x;
    src[i] = (i % 3) ? ((float)(int32_t)u * 1e-9f) : bits(u); /* gradients, and any bits */
    hall[i] = (dpt_half)i;                                     /* every half, cyclically */
    acc_a[i] = acc_b[i] = (float)(i % 1000) * 0.25f;
  }
  for (int simd = 1; simd >= 0; simd--) {
    dpt_fp16_simd(simd);
    dpt_fp16_pack(simd ? ha : hb, src, n);
    dpt_fp16_unpack(simd ? a : b, hall, n);
    dpt_fp16_accumulate(simd ? acc_a : acc_b, hall, n);
  }
  for (size_t i = 0; i < n; i++)
    if (!same_half(ha[i], hb[i]) || !same_float(a[i], b[i]) || !same_float(acc_a[i], acc_b[i])) {
      if (bad++ < 5)
        fprintf(stderr, "FAIL: buffers (n=%zu) element %zu: pack 0x%04x/0x%04x unpack %g/%g acc %g/%g\n",
                n, i, ha[i], hb[i], a[i], b[i], acc_a[i], acc_b[i]);
    }
  for (int simd = 1; simd >= 0; simd--) {
    memcpy(simd ? a : b, src, n * sizeof *src);
    dpt_fp16_simd(simd);
    dpt_fp16_round(simd ? a : b, n);
  }
  for (size_t i = 0; i < n; i++)
    if (!same_float(a[i], b[i]) && bad++ < 5)
      fprintf(stderr, "FAIL: round (n=%zu) element %zu: %g vs %g\n", n, i, a[i], b[i]);
  failures += bad != 0;
  dpt_fp16_simd(1);
out:
  free(src); free(a); free(b); free(acc_a); free(acc_b); free(ha); free(hb); free(hall);
}

int main(void)
{
  uint64_t x = 88172645463325252ull;
  float buf[4], back[4];
  dpt_half hb[4];

  /* Every half: exact to float, and back to the same half. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = dpt_fp16_to_float((dpt_half)h);
    _Float16 r;
    uint16_t hh = (uint16_t)h;
    memcpy(&r, &hh, sizeof r);
    if (!((isnan(f) && isnan((float)r)) || f == (float)r)) {
      if (failures++ < 10)
        fprintf(stderr, "FAIL: half 0x%04x -> %.10g, expected %.10g\n", h, f, (float)r);
    }
    if (!isnan(f) && dpt_fp16_from_float(f) != h && failures++ < 10)
      fprintf(stderr, "FAIL: half 0x%04x does not round-trip\n", h);
    /* Ties and neighbours around every half value. */
    if (!isnan(f) && !isinf(f)) {
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      for (int d = -4097; d <= 4097; d += 1 + (d > -4090 && d < 4090 ? 1023 : 0))
        check_float(bits(u + (uint32_t)d));
    }
  }
  /* Random bit patterns over the whole float range. */
  for (int i = 0; i < (1 << 24); i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    check_float(bits((uint32_t)x));
  }
  check_float(65504.0f);
  check_float(65519.99f);
  check_float(65520.0f);
  check_float(-65520.0f);
  check_float(INFINITY);
  check_float(-INFINITY);
  check_float(NAN);
  check_float(ldexpf(1.0f, -25));
  check_float(ldexpf(1.5f, -25));
  check_float(ldexpf(1.0f, -26));
  check_float(-0.0f);

  /* Buffer helpers agree with the scalar ones. */
  buf[0] = 0.1f; buf[1] = -3.14159f; buf[2] = 70000.0f; buf[3] = 1e-6f;
  dpt_fp16_pack(hb, buf, 4);
  dpt_fp16_unpack(back, hb, 4);
  for (int i = 0; i < 4; i++)
    if (hb[i] != ref_half(buf[i]) || back[i] != (float)(_Float16)buf[i]) {
      failures++;
      fprintf(stderr, "FAIL: pack/unpack element %d\n", i);
    }
  memcpy(back, buf, sizeof buf);
  dpt_fp16_round(back, 4);
  for (int i = 0; i < 4; i++)
    if (back[i] != (float)(_Float16)buf[i]) {
      failures++;
      fprintf(stderr, "FAIL: round element %d\n", i);
    }
  memcpy(back, buf, sizeof buf);
  dpt_fp16_accumulate(back, hb, 4);
  for (int i = 0; i < 4; i++)
    if (back[i] != buf[i] + (float)(_Float16)buf[i]) {
      failures++;
      fprintf(stderr, "FAIL: accumulate element %d\n", i);
    }
  printf("fp16: F16C %s\n", dpt_fp16_simd(-1) ? "in use (checked against plain C)" : "not available (plain C)");
  check_buffers(1u << 20); /* every half 16 times over */
  check_buffers(65536 + 7);
  check_buffers(5);
  printf("fp16: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
#endif /* __FLT16_MANT_DIG__ */
