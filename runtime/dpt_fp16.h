/* dpt_fp16.h — IEEE 754 binary16 <-> binary32 conversion.
 *
 * float -> half rounds to nearest, ties to even (the rounding the hardware's
 * F16C / CUDA __float2half_rn use); overflow gives +-inf, NaN stays NaN (quiet),
 * subnormal halves are produced and read exactly.  half -> float is exact.
 * Used by the communicators (fp16 on the wire, fp32 accumulation) and by the
 * trainer.  Plain C, no intrinsics: the loops vectorise. */
#ifndef DPT_FP16_H
#define DPT_FP16_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t dpt_half; /* raw binary16 bits */

dpt_half dpt_fp16_from_float(float f);
float dpt_fp16_to_float(dpt_half h);

/* dst[i] = half(src[i]) for i < n.  dst: [n], src: [n]. */
void dpt_fp16_pack(dpt_half *dst, const float *src, size_t n);
/* dst[i] = float(src[i]). */
void dpt_fp16_unpack(float *dst, const dpt_half *src, size_t n);
/* acc[i] += float(src[i])  (fp32 accumulation of an fp16 contribution). */
void dpt_fp16_accumulate(float *acc, const dpt_half *src, size_t n);
/* x[i] = float(half(x[i])): round an fp32 buffer to values fp16 can hold. */
void dpt_fp16_round(float *x, size_t n);

#endif /* DPT_FP16_H */
