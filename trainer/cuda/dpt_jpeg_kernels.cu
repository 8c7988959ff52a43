// dpt_jpeg_kernels.cu — crop + bilinear resize + flip + normalise of a decoded JPEG
// batch into the trainer's input layout and precision (see dpt_jpeg_kernels.h).
// One thread per output pixel; the sampling positions and weights come from the
// host (dpt_augment_tables, the CPU path's own tables), so both paths read the
// same source pixels with the same weights; the arithmetic is the CPU path's
// expression in fp32 (no fused multiply-add is forced either way).  An image
// nvJPEG decoded to planes is made RGB at the four pixels each output pixel reads,
// by libjpeg's upsampling and conversion (dpt_jpeg_ycc.h), so that the GPU path
// differs from the CPU path only by nvJPEG's IDCT.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "dpt_jpeg_kernels.h"
#include "dpt_jpeg_ycc.h"

namespace {

template <typename T> __device__ __forceinline__ T cast_out(float v);
template <> __device__ __forceinline__ float cast_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __half cast_out<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cast_out<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void crop_resize(const unsigned char *__restrict__ arena, const dpt_jpeg_kimage *__restrict__ img,
                            const int *__restrict__ cx, const float *__restrict__ wx, const int *__restrict__ cy,
                            const float *__restrict__ wy, int out, int c, int c_stored, int nhwc,
                            dpt_jpeg_knorm norm, T *__restrict__ y)
{
  const int b = blockIdx.y;
  const int pix = blockIdx.x * blockDim.x + threadIdx.x;
  const int plane = out * out;
  if (pix >= plane) return;
  const int oy = pix / out, ox = pix % out;
  const dpt_jpeg_kimage im = img[b];
  float v[4] = {0.f, 0.f, 0.f, 0.f};
  if (!im.zero) {
    const int *rx = cx + (size_t)b * 2 * out, *ry = cy + (size_t)b * 2 * out;
    const float fx = wx[(size_t)b * out + ox], fy = wy[(size_t)b * out + oy];
    const unsigned char *r0 = arena + im.src + (size_t)ry[2 * oy] * im.pitch;
    const unsigned char *r1 = arena + im.src + (size_t)ry[2 * oy + 1] * im.pitch;
    const size_t a = (size_t)rx[2 * ox] * c, bb = (size_t)rx[2 * ox + 1] * c;
    // a planar image's four source pixels in RGB: (y0, x0), (y0, x1), (y1, x0), (y1, x1); the host
    // decodes to planes only with 3 channels
    const bool planar = im.planar && c == 3;
    unsigned char q[4][3];
    if (planar) {
      const dpt_jpeg_ycc yc = {{arena + im.src, im.planar == 1 ? arena + im.cb : nullptr, arena + im.cr},
                               {im.pitch, im.cpitch, im.cpitch}, im.cw, im.ch, im.hx, im.vy};
      dpt_jpeg_ycc_rgb(&yc, rx[2 * ox], ry[2 * oy], q[0]);
      dpt_jpeg_ycc_rgb(&yc, rx[2 * ox + 1], ry[2 * oy], q[1]);
      dpt_jpeg_ycc_rgb(&yc, rx[2 * ox], ry[2 * oy + 1], q[2]);
      dpt_jpeg_ycc_rgb(&yc, rx[2 * ox + 1], ry[2 * oy + 1], q[3]);
    }
    for (int k = 0; k < c; k++) {
      const float p00 = planar ? q[0][k] : r0[a + k], p01 = planar ? q[1][k] : r0[bb + k],
                  p10 = planar ? q[2][k] : r1[a + k], p11 = planar ? q[3][k] : r1[bb + k];
      const float top = __fadd_rn(p00, __fmul_rn(__fsub_rn(p01, p00), fx));
      const float bot = __fadd_rn(p10, __fmul_rn(__fsub_rn(p11, p10), fx));
      const float s = __fadd_rn(top, __fmul_rn(__fsub_rn(bot, top), fy));
      v[k] = __fadd_rn(__fmul_rn(s, norm.scale[k]), norm.shift[k]);
    }
  }
  if (nhwc) {
    T *o = y + ((size_t)b * plane + pix) * c_stored;
    for (int k = 0; k < c_stored; k++) o[k] = cast_out<T>(k < c ? v[k] : 0.f);
  } else {
    T *o = y + (size_t)b * c * plane + pix;
    for (int k = 0; k < c; k++) o[(size_t)k * plane] = cast_out<T>(v[k]);
  }
}

template <typename T>
cudaError_t launch(const unsigned char *arena, const dpt_jpeg_kimage *img, const int *cx, const float *wx,
                   const int *cy, const float *wy, int n, int out, int c, int c_stored, int nhwc,
                   dpt_jpeg_knorm norm, void *y, cudaStream_t s)
{
  const int threads = 256;
  dim3 grid((unsigned)((out * out + threads - 1) / threads), (unsigned)n);
  crop_resize<T><<<grid, threads, 0, s>>>(arena, img, cx, wx, cy, wy, out, c, c_stored, nhwc, norm,
                                          static_cast<T *>(y));
  return cudaGetLastError();
}

} // namespace

extern "C" int dpt_jpeg_crop_resize(const unsigned char *arena, const struct dpt_jpeg_kimage *img, const int *cx,
                                    const float *wx, const int *cy, const float *wy, int n, int out, int c,
                                    int c_stored, int layout, int dtype, struct dpt_jpeg_knorm norm, void *y,
                                    cudaStream_t s)
{
  if (n < 1 || out < 1 || c < 1 || c > 4 || (layout == 1 && (c_stored < c || c_stored > 64)) || n > 65535)
    return (int)cudaErrorInvalidValue;
  const int nhwc = layout == 1;
  if (dtype == 0) return (int)launch<float>(arena, img, cx, wx, cy, wy, n, out, c, c_stored, nhwc, norm, y, s);
  if (dtype == 1) return (int)launch<__half>(arena, img, cx, wx, cy, wy, n, out, c, c_stored, nhwc, norm, y, s);
  if (dtype == 2)
    return (int)launch<__nv_bfloat16>(arena, img, cx, wx, cy, wy, n, out, c, c_stored, nhwc, norm, y, s);
  return (int)cudaErrorInvalidValue;
}
