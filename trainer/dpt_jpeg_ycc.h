/* dpt_jpeg_ycc.h — one pixel of a decoded YCbCr JPEG in RGB, from its component
 * planes (the IDCT's output, before upsampling), exactly as libjpeg(-turbo)
 * makes it with its defaults: "fancy" chroma upsampling and the integer
 * YCbCr -> RGB conversion of jdcolor.c.  Header-only, for the host (C) and the
 * device (CUDA: dpt_jpeg_kernels.cu), so that the GPU loader's output depends on
 * nvJPEG only through its IDCT: nvJPEG decodes to planes (NVJPEG_OUTPUT_YUV) and
 * the crop kernel reads the pixels it samples through dpt_jpeg_ycc_rgb().
 *
 * libjpeg-turbo 2.1 (jdsample.c, jinit_upsampler), at full size (DCT scale 1):
 *   chroma expanded 2x across (4:2:2, 4:2:0): a triangle filter, output pixels at
 *     1/4 and 3/4 between chroma centres, 3/4 nearer + 1/4 further sample, with
 *     the row's / column's edge sample repeated; rounding biases alternate
 *     (h2v1: +1 / +2 for the left / right pixel of a pair, >> 2; h2v2: +8 / +7,
 *     >> 4 after the vertical pass, the vertical pass exact) — only when the
 *     chroma plane is more than 2 samples wide; else each sample is repeated;
 *   2x down only (4:4:0): the vertical triangle, >> 2 with +1 (upper pixel of a
 *     pair) / +2 (lower);
 *   other integral factors (4:1:1, 4:1:0): each sample repeated.
 * tests/trainer/test_jpeg_ycc.c checks every output pixel against libturbojpeg's
 * RGB decode of the same file (planes from tjDecompressToYUVPlanes): equal. */
#ifndef DPT_JPEG_YCC_H
#define DPT_JPEG_YCC_H

#ifdef __CUDACC__
#define DPT_JPEG_YCC_FN static __host__ __device__ __forceinline__
#else
#define DPT_JPEG_YCC_FN static inline
#endif

/* A decoded YCbCr (or gray) image as planes.  Row y of plane k starts at p[k] + y * pitch[k]. */
struct dpt_jpeg_ycc {
  const unsigned char *p[3]; /* Y, Cb, Cr; p[1] == NULL: a gray image (R = G = B = Y) */
  int pitch[3];              /* bytes per row of each plane */
  int cw, ch;                /* the chroma planes' size: ceil(width * h_c / h_max), likewise down */
  int hx, vy;                /* chroma expansion across / down: h_max / h_c, v_max / v_c (1, 2 or 4) */
};

DPT_JPEG_YCC_FN int dpt_jpeg_ycc_min(int a, int b) { return a < b ? a : b; }
DPT_JPEG_YCC_FN int dpt_jpeg_ycc_max(int a, int b) { return a > b ? a : b; }

/* Chroma plane c (a row pointer base and its pitch) upsampled at image pixel (x, y). */
DPT_JPEG_YCC_FN int dpt_jpeg_ycc_chroma(const unsigned char *c, int pitch, const struct dpt_jpeg_ycc *im, int x,
                                        int y)
{
  const int fancy_h = im->hx == 2 && im->cw > 2, cx = x / im->hx, cy = y / im->vy;
  if (im->vy == 2 && (fancy_h || im->hx == 1)) { /* vertical triangle: nearer row r, further rn */
    const int lower = y & 1, rn = lower ? dpt_jpeg_ycc_min(cy + 1, im->ch - 1) : dpt_jpeg_ycc_max(cy - 1, 0);
    const unsigned char *r0 = c + (long)cy * pitch, *r1 = c + (long)rn * pitch;
    if (im->hx == 1) return (3 * r0[cx] + r1[cx] + (lower ? 2 : 1)) >> 2; /* 4:4:0 */
    const int right = x & 1, nx = right ? dpt_jpeg_ycc_min(cx + 1, im->cw - 1) : dpt_jpeg_ycc_max(cx - 1, 0);
    const int t = 3 * r0[cx] + r1[cx], n = 3 * r0[nx] + r1[nx];
    return (3 * t + n + (right ? 7 : 8)) >> 4; /* 4:2:0 */
  }
  const unsigned char *r = c + (long)cy * pitch;
  if (im->vy == 1 && fancy_h) { /* 4:2:2 */
    const int right = x & 1, nx = right ? dpt_jpeg_ycc_min(cx + 1, im->cw - 1) : dpt_jpeg_ycc_max(cx - 1, 0);
    return (3 * r[cx] + r[nx] + (right ? 2 : 1)) >> 2;
  }
  return r[cx]; /* 4:4:4, narrow planes, 4:1:1, 4:1:0: the sample itself */
}

DPT_JPEG_YCC_FN unsigned char dpt_jpeg_ycc_clamp(int v) { return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* Pixel (x, y) of im in RGB (libjpeg's ycc_rgb_convert: 16-bit fixed point, the constants
 * FIX(1.40200), FIX(1.77200), FIX(0.71414), FIX(0.34414) = round(k * 65536), half added
 * before the arithmetic right shift; gray: R = G = B = Y). */
DPT_JPEG_YCC_FN void dpt_jpeg_ycc_rgb(const struct dpt_jpeg_ycc *im, int x, int y, unsigned char rgb[3])
{
  const int Y = im->p[0][(long)y * im->pitch[0] + x];
  if (!im->p[1]) {
    rgb[0] = rgb[1] = rgb[2] = (unsigned char)Y;
    return;
  }
  const int cb = dpt_jpeg_ycc_chroma(im->p[1], im->pitch[1], im, x, y) - 128;
  const int cr = dpt_jpeg_ycc_chroma(im->p[2], im->pitch[2], im, x, y) - 128;
  rgb[0] = dpt_jpeg_ycc_clamp(Y + ((91881 * cr + 32768) >> 16));
  rgb[1] = dpt_jpeg_ycc_clamp(Y + ((-46802 * cr - 22554 * cb + 32768) >> 16));
  rgb[2] = dpt_jpeg_ycc_clamp(Y + ((116130 * cb + 32768) >> 16));
}

#endif /* DPT_JPEG_YCC_H */
