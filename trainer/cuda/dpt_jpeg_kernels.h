/* dpt_jpeg_kernels.h — the GPU loader's crop / resize / flip / normalise kernel
 * (dpt_jpeg_kernels.cu).  The launcher returns a cudaError_t value (0 on success). */
#ifndef DPT_JPEG_KERNELS_H
#define DPT_JPEG_KERNELS_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One image of the batch: its decoded pixels in the arena. */
struct dpt_jpeg_kimage {
  unsigned long long src;    /* byte offset in the arena of the interleaved image [h, w, c], or of its Y plane */
  unsigned long long cb, cr; /* planar == 1: byte offsets of the Cb and Cr planes */
  int pitch;                 /* bytes per row of the interleaved image / the Y plane */
  int cpitch;                /* bytes per row of the chroma planes */
  int cw, ch, hx, vy;        /* planar == 1: chroma plane size and expansion (struct dpt_jpeg_ycc) */
  int planar;                /* 0 interleaved; 1 YCbCr planes, 2 a gray Y plane: RGB as libjpeg makes it
                                (dpt_jpeg_ycc_rgb, c == 3 only) */
  int zero;                  /* 1: a skipped record: the output image is all 0 */
};

/* Per-channel affine normalisation: v = pixel * scale[c] + shift[c] (scale = 1 / (255 std),
 * shift = -mean / std: the CPU path's expression). */
struct dpt_jpeg_knorm {
  float scale[4], shift[4];
};

/* For image b < n and output pixel (y, x) < (out, out): rows cy[b][2y], cy[b][2y+1] with weight
 * wy[b][y] on the second, columns cx[b][2x], cx[b][2x+1] with wx[b][x] (dpt_augment_tables:
 * the flip is in the column table), c channels of the arena image (a planar image's four
 * source pixels made RGB first, as libjpeg makes them), bilinear as the CPU path
 * (top = p00 + (p01 - p00) fx, bottom likewise, top + (bottom - top) fy), normalised, written to
 * y: layout 0 = NCHW [n, c, out, out], 1 = NHWC [n, out, out, c_stored] (channels >= c are 0);
 * dtype 0 = fp32, 1 = fp16, 2 = bf16 (round to nearest even).
 * cx, cy: [n, 2 out] int32, wx, wy: [n, out] fp32, img: [n], all device memory. */
int dpt_jpeg_crop_resize(const unsigned char *arena, const struct dpt_jpeg_kimage *img, const int *cx,
                         const float *wx, const int *cy, const float *wy, int n, int out, int c, int c_stored,
                         int layout, int dtype, struct dpt_jpeg_knorm norm, void *y, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DPT_JPEG_KERNELS_H */
