/* dpt_jpeg_kernels.h — the GPU loader's crop / resize / flip / normalise kernel
 * (dpt_jpeg_kernels.cu).  The launcher returns a cudaError_t value (0 on success). */
#ifndef DPT_JPEG_KERNELS_H
#define DPT_JPEG_KERNELS_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One image of the batch: its decoded pixels in the arena and where its tables lie. */
struct dpt_jpeg_kimage {
  unsigned long long src; /* byte offset of the decoded image in the arena: interleaved [h, w, c] */
  int pitch;              /* bytes per decoded row */
  int zero;               /* 1: a skipped record: the output image is all 0 */
};

/* Per-channel affine normalisation: v = pixel * scale[c] + shift[c] (scale = 1 / (255 std),
 * shift = -mean / std: the CPU path's expression). */
struct dpt_jpeg_knorm {
  float scale[4], shift[4];
};

/* For image b < n and output pixel (y, x) < (out, out): rows cy[b][2y], cy[b][2y+1] with weight
 * wy[b][y] on the second, columns cx[b][2x], cx[b][2x+1] with wx[b][x] (dpt_augment_tables:
 * the flip is in the column table), c channels of the arena image, bilinear as the CPU path
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
