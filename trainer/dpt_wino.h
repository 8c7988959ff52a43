/* dpt_wino.h — 3x3, pad-1 convolutions by Winograd's minimal filtering, for the CPU
 * backend's training step (forward, input gradient and weight gradient): at stride 1
 * F(m x m, 3 x 3), m = 4 (default) or 2 (Lavin & Gray, "Fast Algorithms for Convolutional
 * Neural Networks", 2016); at stride 2 the polyphase parts of dpt_wino_init_s2 below.
 *
 * oneDNN 2.6 has Winograd convolutions only for AVX-512 (jit_wino_4x3); on AVX2 its
 * direct kernels already run at ~92% of the FMA peak, so fewer multiplications are the
 * only way left to a faster step.  F(4x4,3x3) does a 4x4 output tile in 36 products
 * instead of 144 (F(2x2,3x3): 2x2 in 16 instead of 36): dpt writes the tile transforms
 * (dpt_wino_tf.c) and hands the alpha^2 matrix products per chunk of images (alpha = m + 2)
 * to oneDNN's sgemm.
 *
 * Per output tile t (input patch d_t alpha x alpha at (m ty - 1, m tx - 1), pad 1), per
 * input channel c and output channel k:
 *   V = BT d BT^T   U = G g G^T   M = sum_c U (.) V   y = AT M AT^T
 * and the step's gradients are the exact adjoints of that forward:
 *   dM = AT^T dy AT   dU = sum_t V (.) dM   dg = G^T dU G
 *   dV = sum_k U (.) dM   dx += BT^T dV BT   (overlapping patches add up)
 * The rounding error is bounded in tests/trainer/test_wino.c (F(2x2)'s transforms have
 * entries 0, +-1, +-1/2; F(4x4)'s up to 8, and 1/6, 1/24).
 *
 * Activations are oneDNN's blocked layout nChw<blk>c, [N][C/blk][H][W][blk] (blk 8 on
 * AVX2, 16 on AVX-512), weights and their gradient PyTorch's plain oihw [K][C][3][3]
 * (the parameter slab: no weight reorders).  Images go through in chunks whose transformed
 * tiles fit one workspace of dpt_wino_workspace() bytes. */
#ifndef DPT_WINO_H
#define DPT_WINO_H

#include <stddef.h>

#include "dpt_err.h"

struct dpt_wino {
  int N, C, K, H, W; /* batch, input / output channels, input size */
  int stride;        /* 1, or 2 (dpt_wino_init_s2) */
  int Ho, Wo;        /* output size: H x W at stride 1, ceil(H/2) x ceil(W/2) at stride 2 */
  int blk;           /* channel block of the activation layout: 8 or 16 */
  int m, a;          /* output tile m x m (2 or 4), input patch a x a (a = m + 2) */
  int th, tw;        /* tiles per image: ceil(Ho/m) x ceil(Wo/m) */
  int nc;            /* images per chunk, at most (dpt_wino_chunk) */
  int avx2;          /* 1: the transforms' AVX2 + FMA build (the CPU has both), 0: any x86-64 */
};

/* Plan the convolution with m x m output tiles; fails (DPT_E_UNSUPPORTED) when the shape is
 * outside what dpt_wino does (m not 2 or 4, blk not 8 or 16, C or K not a multiple of blk,
 * empty sizes). */
int dpt_wino_init(struct dpt_wino *w, int N, int C, int K, int H, int W, int blk, int m, struct dpt_err *err);

/* The same convolution at stride 2 (pad 1, output ceil(H/2) x ceil(W/2)), 4x4 output tiles,
 * by its four polyphase parts: the input's odd rows and columns meet the kernel's taps 0 and 2
 * (a 2-tap filter: F(4,2), 5 points), its even ones tap 1 (1 tap: no transform), so a 4x4 output
 * tile takes 5x5 + 2 (5x4) + 4x4 = 81 products per channel pair instead of 144 (1.78x fewer):
 *   F(4,2)  BT = [2 -1 -2 1 0; 0 2 1 -1 0; 0 -2 3 -1 0; 0 -1 0 1 0; 0 2 -1 -2 1]
 *           G  = [1/2 0; 1/2 1/2; 1/6 -1/6; 1/6 1/3; 0 1]   AT = [1 1 1 1 0; 0 1 -1 2 0;
 *           0 1 1 4 0; 0 1 -1 8 1]   (points 0, 1, -1, 2, infinity)
 * The odd-odd part is F(4x4,2x2) on the kernel's corners, the mixed ones F(4,2) x F(4,1), the
 * even-even one a 1x1 convolution with the centre tap; their outputs add up. */
int dpt_wino_init_s2(struct dpt_wino *w, int N, int C, int K, int H, int W, int blk, struct dpt_err *err);

/* The chunks forward and backward go through: dpt_wino_chunks(w) of them, chunk i the
 * images n0 .. n0+ni-1, sizes within one of each other, none above nc (which dpt_wino_init
 * sets from the workspace budget and a test may lower). */
int dpt_wino_chunks(const struct dpt_wino *w);
void dpt_wino_chunk(const struct dpt_wino *w, int i, int *n0, int *ni);

/* Bytes of workspace forward and backward need (one buffer may serve many layers). */
size_t dpt_wino_workspace(const struct dpt_wino *w);

/* y[N][K/blk][Ho][Wo][blk] = conv(x[N][C/blk][H][W][blk], g[K][C][3][3]). */
int dpt_wino_forward(const struct dpt_wino *w, const float *x, const float *g, float *y, void *ws,
                     struct dpt_err *err);

/* dg[K][C][3][3] = the weight gradient (overwritten); dx (when not NULL, overwritten) the
 * input gradient, both from dy (the layout of y), x and g. */
int dpt_wino_backward(const struct dpt_wino *w, const float *x, const float *g, const float *dy, float *dx,
                      float *dg, void *ws, struct dpt_err *err);

#endif
