/* dpt_fp16.h — IEEE 754 binary16 <-> binary32 conversion.
 *
 * float -> half rounds to nearest, ties to even (the rounding the hardware's
 * F16C / CUDA __float2half_rn use); overflow gives +-inf, NaN stays NaN (quiet),
 * subnormal halves are produced and read exactly.  half -> float is exact.
 * Used by the communicators (fp16 on the wire, fp32 accumulation) and by the
 * trainer.  The buffer functions use F16C on x86-64 CPUs that have it (8 values per
 * instruction, the same results), plain C elsewhere. */
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

/* Whether the buffer functions use the CPU's F16C instructions: enable < 0 asks,
 * 0 forces the plain C loops, 1 uses F16C when the CPU has it (the default).
 * Returns 1 if F16C is in use afterwards.  For tests and benchmarks. */
int dpt_fp16_simd(int enable);

#endif /* DPT_FP16_H */
