/* dpt_cuda_kernels.h — launchers of the backend's own CUDA kernels
 * (dpt_cuda_kernels.cu).  Every launcher returns a cudaError_t value (0 on
 * success) so the caller can name the layer and shape in its message.
 * fp16 buffers are passed as void * (__half on the device). */
#ifndef DPT_CUDA_KERNELS_H
#define DPT_CUDA_KERNELS_H

#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the activation / weight copies (the DPT_DT_* below). */
enum { DPT_DT_F32 = 0, DPT_DT_F16 = 1, DPT_DT_BF16 = 2 };

/* y: dtype [n, hw, c_stored] = scale * x: fp32 [n, c, hw]; channels >= c are 0.
 * Also KCRS fp32 weights -> KRSC copies (n = K, c = C, hw = R*S). */
int dpt_cuda_nchw32_to_nhwc(const float *x, void *y, int dtype, int n, int c, size_t hw, int c_stored,
                            float scale, cudaStream_t s);
/* y: fp32 [n, c, hw] = scale * x: dtype [n, hw, c_stored] (padding dropped); also the
 * weight-gradient packing KRSC -> KCRS fp32 slab with scale = 1/loss_scale. */
int dpt_cuda_nhwc_to_nchw32(const void *x, int dtype, float *y, int n, int c, size_t hw, int c_stored,
                            float scale, cudaStream_t s);
/* y: dtype [n] = scale * x: fp32 [n] (in place allowed). */
int dpt_cuda_f32_to(const float *x, void *y, int dtype, float scale, size_t n, cudaStream_t s);
/* The same three casts with the loss scale read on the device (mixed precision: the
 * scaler lives there, dpt_loss_scale.h): the factor is scale * *dscale, or
 * scale / *dscale with inverse = 1 (dscale: device float; NULL = scale alone). */
int dpt_cuda_nchw32_to_nhwc_ds(const float *x, void *y, int dtype, int n, int c, size_t hw, int c_stored,
                               float scale, const float *dscale, int inverse, cudaStream_t s);
int dpt_cuda_nhwc_to_nchw32_ds(const void *x, int dtype, float *y, int n, int c, size_t hw, int c_stored,
                               float scale, const float *dscale, int inverse, cudaStream_t s);
int dpt_cuda_f32_to_ds(const float *x, void *y, int dtype, float scale, const float *dscale, int inverse, size_t n,
                       cudaStream_t s);
/* totals[0..3] (device doubles) += the batch's loss sum, top-1 and top-5 counts and valid
 * rows, from dpt_cuda_softmax_xent's loss [n] and rank [n]; one block, no atomics. */
int dpt_cuda_loss_accumulate(const float *loss, const int *rank, int n, double *totals, cudaStream_t s);
/* dpt_loss_scaler_update(scaler, *flag) on the device (scaler: device memory). */
struct dpt_loss_scaler;
int dpt_cuda_scaler_update(struct dpt_loss_scaler *scaler, const int *flag, cudaStream_t s);
/* Element-wise over dtype [n]: y = relu?(a + b); y = relu(x); dx (+)= (y > 0) * dy
 * (accumulate = 1 adds to dx: a second consumer's gradient); y += x. */
int dpt_cuda_add(const void *a, const void *b, void *y, int dtype, int relu, size_t n, cudaStream_t s);
int dpt_cuda_relu(const void *x, void *y, int dtype, size_t n, cudaStream_t s);
int dpt_cuda_relu_bwd(const void *y, const void *dy, void *dx, int dtype, int accumulate, size_t n,
                      cudaStream_t s);
int dpt_cuda_acc(void *y, const void *x, int dtype, size_t n, cudaStream_t s);
/* The residual add's backward in one pass: g = dy (masked by y > 0 where y is non-NULL: the add had a
 * ReLU), written to dx0 and dx1 (each NULL: none; acc: added), the element rules of relu_bwd and acc.
 * dx0 == dx1 is refused (cudaErrorInvalidValue). */
int dpt_cuda_add_bwd(const void *y, const void *dy, void *dx0, int acc0, void *dx1, int acc1, int dtype, size_t n,
                     cudaStream_t s);

/* y: fp16 [n, hw, c_stored] = scale * x: fp32 [n, c, hw]; channels >= c are 0.
 * Also KCRS fp32 weights -> KRSC fp16 (n = K, c = C, hw = R*S). */
int dpt_cuda_nchw32_to_nhwc16(const float *x, void *y, int n, int c, size_t hw, int c_stored,
                              float scale, cudaStream_t s);
/* y: fp32 [n, c, hw] = scale * x: fp16 [n, hw, c_stored] (padding dropped).
 * Also the gradient packing KRSC fp16 -> KCRS fp32 slab with scale = 1/loss_scale. */
int dpt_cuda_nhwc16_to_nchw32(const void *x, float *y, int n, int c, size_t hw, int c_stored,
                              float scale, cudaStream_t s);
int dpt_cuda_f32_to_f16(const float *x /* [n] */, void *y /* [n] */, float scale, size_t n,
                        cudaStream_t s);
int dpt_cuda_f16_to_f32(const void *x /* [n] */, float *y /* [n] */, float scale, size_t n,
                        cudaStream_t s);
/* *flag = 1 when any of x[n] is inf or NaN (flag is device memory, not cleared). */
int dpt_cuda_nonfinite(const float *x, size_t n, int *flag, cudaStream_t s);
/* Softmax cross-entropy, dpt_softmax_xent semantics: logits [n, k], labels [n]
 * (outside [0, k): ignored), dlogits [n, k] or NULL, loss [n] per row,
 * rank [n] = logits above the label's (-1 ignored): top-1 is rank 0, top-5 rank < 5. */
int dpt_cuda_softmax_xent(const float *logits, const int *labels, int n, int k, float smoothing,
                          float grad_scale, float *dlogits, float *loss, int *rank, cudaStream_t s);
/* The fused step's eval-mode BN (validation): scale = gamma / sqrt(rvar + eps), bias = beta -
 * rmean * scale, fp32 [c] each, what its convolution prologues and adds apply. */
int dpt_cuda_bn_eq_infer(const float *gamma, const float *beta, const float *rmean, const float *rvar, double eps,
                         int c, float *scale, float *bias, cudaStream_t s);
/* *p = v on the stream (a learning rate a captured graph reads from device memory). */
int dpt_cuda_set_f32(float *p, float v, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* DPT_CUDA_KERNELS_H */
