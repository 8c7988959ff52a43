/* test_fp16.c — dpt_fp16 against the compiler's _Float16 (libgcc's
 * round-to-nearest-even conversion), exhaustively for half -> float -> half
 * and on 2^24 float bit patterns spread over the whole range plus every
 * boundary (subnormals, ties, overflow, NaN). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dpt_fp16.h"

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
  printf("fp16: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
