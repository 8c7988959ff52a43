/* fuzz_jpeg.c — one --dataset imagenet record through the loader's path
 * (trainer/dpt_data_jpeg.c): dpt_data_jpeg_decode() (libturbojpeg header,
 * DCT scaling, decode, CMYK conversion, truncation check) on the bytes in
 * memory, then dpt_data_jpeg_sample() (resize of the shorter side, crop window,
 * flip, normalisation).
 * Input: byte 0: bit 0 = grayscale (1 channel, else RGB), bits 1-3 = the
 * shorter side to resize to {8, 16, 27, 37, 64, 128, 256, 0 = no DCT scaling and
 * side 32}, bit 4 = flip; byte 1: output side 1..64; byte 2: crop offsets (low
 * nibble y, high nibble x, minus 4: windows reaching outside the image too).
 * The rest is the file.  Files above 4 Mpixel are refused by the reader (a
 * progressive JPEG's coefficient buffers grow with it).
 * Seeds: trainer_test_jpeg --fuzz-corpus DIR (tests/trainer/test_jpeg.c).
 * Properties: 0, or DPT_E_INPUT / DPT_E_NOMEM with a message naming the input
 * and the record; on success 1 <= w, h, w * h <= 4 Mpixel, the requested
 * channels, and every output value inside the normalised range of [0, 255]. */
#include <math.h>

#include "dpt_data.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const int sides[8] = {8, 16, 27, 37, 64, 128, 256, 0};
  if (size < 3)
    return 0;
  int ch = (data[0] & 1) ? 1 : 3, side = sides[(data[0] >> 1) & 7], flip = (data[0] >> 4) & 1;
  int out = data[1] % 64 + 1, oy = (data[2] & 15) - 4, ox = (data[2] >> 4) - 4;
  struct dpt_jpeg j;
  struct dpt_err err = {0};
  FUZZ_CHECK(dpt_data_jpeg_init(&j, &err) == 0);
  j.max_pixels = 1L << 22;
  int rc = dpt_data_jpeg_decode(&j, data + 3, size - 3, ch, side, "fuzz.jpg", 0, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(strstr(err.msg, "fuzz.jpg (record 0)") != NULL);
    dpt_data_jpeg_free(&j);
    return 0;
  }
  FUZZ_CHECK(j.w >= 1 && j.h >= 1 && (long)j.src_w * j.src_h <= (1L << 22) && j.c == ch);
  FUZZ_CHECK(j.w <= j.src_w && j.h <= j.src_h);
  if (side == 0) {
    side = 32;
    FUZZ_CHECK(j.w == j.src_w && j.h == j.src_h);
  } else {
    FUZZ_CHECK((j.w < j.h ? j.w : j.h) >= side || (j.w == j.src_w && j.h == j.src_h));
  }
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  float *x = malloc((size_t)ch * out * out * sizeof *x);
  FUZZ_CHECK(x != NULL);
  FUZZ_CHECK(dpt_data_jpeg_sample(&j, side, oy, ox, out, flip, mean, std, x) == 0);
  for (int c = 0; c < ch; c++) {
    float lo = -mean[c] / std[c] - 1e-4f, hi = (1.0f - mean[c]) / std[c] + 1e-4f;
    for (int k = 0; k < out * out; k++) {
      float v = x[(size_t)c * out * out + k];
      FUZZ_CHECK(isfinite(v) && v >= lo && v <= hi);
    }
  }
  free(x);
  dpt_data_jpeg_free(&j);
  return 0;
}
