/* fuzz_jpeg.c — one --dataset imagenet record through the loaders' host path:
 * dpt_jpeg_hdr_parse() / dpt_jpeg_hdr_route() (the GPU loader's marker walk and
 * routing, trainer/dpt_jpeg_hdr.c), dpt_augment_crop() (the crop box of a
 * training record of that frame size), dpt_data_jpeg_decode() (libturbojpeg
 * header, DCT scaling, decode, CMYK conversion, truncation check) on the bytes in
 * memory, then dpt_data_jpeg_sample() (the box resized to out x out, flip,
 * normalisation; dpt_augment_tables).
 * Input: byte 0: bit 0 = grayscale (1 channel, else RGB), bits 1-3 = the shorter
 * side to DCT-scale towards {8, 16, 27, 37, 64, 128, 256, 0 = no DCT scaling},
 * bit 4 = flip, bit 5 = the random-resized crop of the training recipe (epoch =
 * byte 2) instead of the box below; byte 1: output side 1..64; byte 2: box corner
 * (low nibble y, high nibble x, in 16ths of the image; the box reaches the far
 * corner).  The rest is the file.  Files above 4 Mpixel are refused by the reader.
 * Seeds: trainer_test_jpeg --fuzz-corpus DIR (tests/trainer/test_jpeg.c).
 * Properties: the marker walk and the router take any bytes; a file routed to a
 * GPU decoder that libjpeg decodes has the parser's frame size; the crop box lies
 * in the image; decode: 0, or DPT_E_INPUT / DPT_E_NOMEM with a message naming the
 * input and the record; on success 1 <= w, h, w * h <= 4 Mpixel, the requested
 * channels, and every output value inside the normalised range of [0, 255]. */
#include <math.h>

#include "dpt_augment.h"
#include "dpt_data.h"
#include "dpt_jpeg_hdr.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const int sides[8] = {8, 16, 27, 37, 64, 128, 256, 0};
  if (size < 3)
    return 0;
  int ch = (data[0] & 1) ? 1 : 3, side = sides[(data[0] >> 1) & 7], flip = (data[0] >> 4) & 1;
  int rrc = (data[0] >> 5) & 1, out = data[1] % 64 + 1, by = data[2] & 15, bx = data[2] >> 4;
  const unsigned char *file = data + 3;
  size_t len = size - 3;
  struct dpt_jpeg_hdr h;
  const char *why = NULL;
  int prc = dpt_jpeg_hdr_parse(file, len, &h);
  enum dpt_jpeg_route route = dpt_jpeg_hdr_route(&h, prc, 1, 1L << 22, &why);
  FUZZ_CHECK(why != NULL && (route == DPT_JPEG_ROUTE_CPU || (!prc && h.complete && h.precision == 8)));
  struct dpt_jpeg j;
  struct dpt_err err = {0};
  FUZZ_CHECK(dpt_data_jpeg_init(&j, &err) == 0);
  j.max_pixels = 1L << 22;
  int rc = dpt_data_jpeg_decode(&j, file, len, ch, side, "fuzz.jpg", 0, &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    FUZZ_CHECK(strstr(err.msg, "fuzz.jpg (record 0)") != NULL);
    dpt_data_jpeg_free(&j);
    return 0;
  }
  FUZZ_CHECK(j.w >= 1 && j.h >= 1 && (long)j.src_w * j.src_h <= (1L << 22) && j.c == ch);
  FUZZ_CHECK(j.w <= j.src_w && j.h <= j.src_h);
  if (route != DPT_JPEG_ROUTE_CPU) FUZZ_CHECK(h.width == j.src_w && h.height == j.src_h);
  if (side == 0) FUZZ_CHECK(j.w == j.src_w && j.h == j.src_h);
  else FUZZ_CHECK((j.w < j.h ? j.w : j.h) >= side || (j.w == j.src_w && j.h == j.src_h));
  struct dpt_crop c;
  if (rrc) {
    struct dpt_augment a;
    dpt_augment_default(&a, 1, out, 7);
    dpt_augment_crop(&a, data[2], (long)size, j.src_w, j.src_h, &c);
  } else {
    c.x0 = j.src_w * bx / 16.0;
    c.y0 = j.src_h * by / 16.0;
    c.w = j.src_w - c.x0;
    c.h = j.src_h - c.y0;
    c.flip = flip;
  }
  FUZZ_CHECK(c.x0 >= 0 && c.y0 >= 0 && c.w > 0 && c.h > 0 && c.x0 + c.w <= j.src_w && c.y0 + c.h <= j.src_h);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  float *x = malloc((size_t)ch * out * out * sizeof *x);
  FUZZ_CHECK(x != NULL);
  FUZZ_CHECK(dpt_data_jpeg_sample(&j, &c, out, mean, std, x) == 0);
  for (int k = 0; k < ch; k++) {
    float lo = -mean[k] / std[k] - 1e-4f, hi = (1.0f - mean[k]) / std[k] + 1e-4f;
    for (int i = 0; i < out * out; i++) {
      float v = x[(size_t)k * out * out + i];
      FUZZ_CHECK(isfinite(v) && v >= lo && v <= hi);
    }
  }
  free(x);
  dpt_data_jpeg_free(&j);
  return 0;
}
