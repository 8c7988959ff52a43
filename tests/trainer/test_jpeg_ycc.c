/* test_jpeg_ycc: dpt_jpeg_ycc_rgb() (the GPU loader's chroma upsampling and colour
 * conversion, trainer/dpt_jpeg_ycc.h) against libturbojpeg, on the CPU.
 *
 * For every chroma sampling libturbojpeg writes (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1,
 * gray), sizes from 1 x 1 (narrow chroma planes, libjpeg's non-fancy case) over odd sizes
 * (clipped blocks, edge samples) to 500 x 375 (several iMCU rows: libjpeg upsamples with
 * context rows across them), a smooth field and noise (every rounding bias, clamping):
 * tjDecompressToYUVPlanes gives libjpeg's component planes (its IDCT, before
 * upsampling), dpt_jpeg_ycc_rgb() makes RGB of them, and that must equal tjDecompress2's
 * RGB (default flags: accurate IDCT, fancy upsampling) at every pixel.
 * Also shown: how far nearest-neighbour chroma (what nvJPEG gives without interpolation)
 * is from libjpeg's on the smooth 4:2:0 field, so the comparison can tell them apart.
 * usage: trainer_test_jpeg_ycc */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "dpt_jpeg_ycc.h"

#include "dpt_check.h"

static unsigned char *field(int w, int h, int noisy)
{
  unsigned char *px = malloc((size_t)w * h * 3);
  unsigned s = 2463534242u;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      unsigned char *p = px + ((size_t)y * w + x) * 3;
      if (noisy) {
        for (int k = 0; k < 3; k++) {
          s ^= s << 13, s ^= s >> 17, s ^= s << 5;
          p[k] = (unsigned char)(s >> 24);
        }
      } else { /* jpeg_cases.h's field: low-frequency sines and a ramp */
        p[0] = (unsigned char)lrint(128 + 90 * sin(x / 11.0));
        p[1] = (unsigned char)lrint(128 + 90 * cos(y / 9.0));
        p[2] = (unsigned char)lrint(40 + 170.0 * (x + y) / (w + h));
      }
    }
  return px;
}

/* The planes of a decoded file as dpt_jpeg_ycc describes them (p[] into planes[]). */
static void describe(struct dpt_jpeg_ycc *im, unsigned char *planes[3], int w, int h, int samp)
{
  memset(im, 0, sizeof *im);
  im->p[0] = planes[0];
  im->pitch[0] = tjPlaneWidth(0, w, samp);
  if (samp == TJSAMP_GRAY) return;
  for (int k = 1; k < 3; k++) {
    im->p[k] = planes[k];
    im->pitch[k] = tjPlaneWidth(k, w, samp);
  }
  im->cw = tjPlaneWidth(1, w, samp);
  im->ch = tjPlaneHeight(1, h, samp);
  im->hx = samp == TJSAMP_422 || samp == TJSAMP_420 ? 2 : samp == TJSAMP_411 ? 4 : 1;
  im->vy = samp == TJSAMP_420 || samp == TJSAMP_440 ? 2 : 1;
}

/* Largest |dpt_jpeg_ycc_rgb - libjpeg| over the image (nearest, 4:2:0 only: each chroma
 * sample repeated instead of libjpeg's triangle filter); *bad = pixels that differ. */
static int compare(int w, int h, int samp, int noisy, int nearest, long *bad)
{
  tjhandle c = tjInitCompress(), d = tjInitDecompress();
  unsigned char *px = field(w, h, noisy), *jpg = NULL, *rgb = malloc((size_t)w * h * 3), *planes[3] = {0};
  unsigned long len = 0;
  int worst = -1, ok = c && d && rgb;
  ok = ok && !tjCompress2(c, px, w, 0, h, TJPF_RGB, &jpg, &len, samp, 90, 0);
  ok = ok && !tjDecompress2(d, jpg, len, rgb, w, 0, h, TJPF_RGB, 0);
  for (int k = 0; ok && k < (samp == TJSAMP_GRAY ? 1 : 3); k++)
    ok = (planes[k] = malloc((size_t)tjPlaneWidth(k, w, samp) * tjPlaneHeight(k, h, samp))) != NULL;
  ok = ok && !tjDecompressToYUVPlanes(d, jpg, len, planes, w, NULL, h, 0);
  CHECK(ok, "%dx%d sampling %d: libturbojpeg: %s", w, h, samp, tjGetErrorStr2(d));
  *bad = 0;
  if (ok) {
    struct dpt_jpeg_ycc im;
    describe(&im, planes, w, h, samp);
    if (nearest) im.cw = 2; /* 4:2:0 with a 2-wide chroma plane: libjpeg's non-fancy rule, each sample repeated */
    worst = 0;
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        unsigned char o[3];
        dpt_jpeg_ycc_rgb(&im, x, y, o);
        const unsigned char *r = rgb + ((size_t)y * w + x) * 3;
        int m = 0;
        for (int k = 0; k < 3; k++) m = abs(o[k] - r[k]) > m ? abs(o[k] - r[k]) : m;
        *bad += m > 0;
        worst = m > worst ? m : worst;
      }
  }
  for (int k = 0; k < 3; k++) free(planes[k]);
  tjFree(jpg);
  free(rgb);
  free(px);
  if (c) tjDestroy(c);
  if (d) tjDestroy(d);
  return worst;
}

int main(void)
{
  static const struct { int samp; const char *name; } S[] = {{TJSAMP_444, "4:4:4"}, {TJSAMP_422, "4:2:2"},
                                                             {TJSAMP_420, "4:2:0"}, {TJSAMP_440, "4:4:0"},
                                                             {TJSAMP_411, "4:1:1"}, {TJSAMP_GRAY, "gray"}};
  static const int sizes[][2] = {{1, 1}, {2, 2}, {3, 1}, {4, 3}, {5, 7}, {6, 5}, {8, 8}, {9, 17},
                                 {16, 16}, {17, 2}, {33, 29}, {64, 48}, {500, 375}, {375, 500}};
  long pixels = 0;
  for (size_t s = 0; s < sizeof S / sizeof *S; s++) {
    long bad_s = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
      for (int noisy = 0; noisy < 2; noisy++) {
        long bad;
        int w = sizes[z][0], h = sizes[z][1], m = compare(w, h, S[s].samp, noisy, 0, &bad);
        CHECK(m == 0, "%s %dx%d %s: %ld pixels differ from libjpeg's RGB, by up to %d / 255", S[s].name, w, h,
              noisy ? "noise" : "smooth", bad, m);
        bad_s += bad;
        pixels += (long)w * h;
      }
    printf("%-5s: %ld pixels differ from libturbojpeg's RGB (14 sizes, smooth and noise)\n", S[s].name, bad_s);
  }
  long bad;
  int near = compare(500, 375, TJSAMP_420, 0, 1, &bad);
  printf("nearest-neighbour chroma instead, smooth 4:2:0 500x375: %ld pixels differ, by up to %d / 255\n", bad, near);
  CHECK(near > 0, "the comparison cannot tell nearest-neighbour chroma from libjpeg's (max difference %d)", near);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ok: %ld pixels equal to libturbojpeg's decode\n", pixels);
  return failures ? 1 : 0;
}
