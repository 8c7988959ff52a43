/* dpt_cpu_impl.h — which oneDNN implementation runs each primitive of the CPU backend.
 *
 * oneDNN picks, per primitive, the first implementation that accepts the shapes and
 * memory layouts on this CPU's ISA: a JIT kernel (jit:avx2, jit_1x1:avx512_core,
 * brgconv, x64:gemm:jit, ...) or, when none does, its reference code ("ref:any"),
 * a plain C loop that can be 100x slower.  Which layouts the JIT kernels accept
 * differs between ISAs: on AVX2 the 1-channel stem's weight gradient has no JIT
 * kernel with a plain input and a blocked output (70% of Fashion-MNIST's step ran
 * there), but has one with both channels-last.  So:
 *   - dpt_cpu_conv_choose builds a convolution's three primitive descriptors on the
 *     input's own layout and, when one of them is the reference code, on each pair
 *     (input layout, output layout) of a short list, keeping the first with the
 *     fewest reference kernels;
 *   - dpt_cpu_impl_record is called for every primitive the backend creates and
 *     keeps a line for each one that is still the reference code (layer, primitive,
 *     direction, shapes, the ISA), which the backend's notes give to dpt-train to
 *     print once at start. */
#ifndef DPT_CPU_IMPL_H
#define DPT_CPU_IMPL_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

/* 1 when pd runs oneDNN's reference code (implementation name "ref..."), or none is known. */
int dpt_cpu_impl_is_ref(const_dnnl_primitive_desc_t pd);

/* The implementations of the primitives one backend created. */
struct dpt_cpu_impl_log {
  int n_prims;     /* primitives recorded */
  int n_ref;       /* of them: oneDNN's reference code */
  size_t len;      /* strlen(text) */
  char text[8192]; /* one line per reference primitive (layer, what, shapes, ISA), '\n'-ended;
                      "... and N more" when full */
};

/* Record the primitive pd is created from, for layer (a model layer name, or e.g. "edge"). */
void dpt_cpu_impl_record(struct dpt_cpu_impl_log *log, const_dnnl_primitive_desc_t pd, const char *layer);

/* The ISA oneDNN's kernels use on this CPU (after ONEDNN_MAX_CPU_ISA): "avx2", "avx512_core", ... */
const char *dpt_cpu_impl_isa(void);

/* "AMD EPYC (oneDNN kernels: avx2)": /proc/cpuinfo's model name and dpt_cpu_impl_isa(), for
 * the job report (every CPU figure names its machine); buf returned. */
const char *dpt_cpu_impl_machine(char *buf, size_t n);

/* A convolution's three passes for one layout choice (bwd_d NULL when not needed). */
struct dpt_cpu_conv_pds {
  dnnl_primitive_desc_t fwd, bwd_d, bwd_w;
};

void dpt_cpu_conv_pds_free(struct dpt_cpu_conv_pds *p);

/* The convolution src (dims sd) -> dst (dims dd) with weights w_any (format any) and the
 * given strides and paddings, forward training + backward weights (+ backward data when
 * need_bwd_d).  src: the layout of the input tensor when it has one (NULL: free), dst_tag:
 * the output layout (any, or nhwc for channels-last runs); search: 1 = when a pass is
 * oneDNN's reference code, also try the input layouts any, nChw8c, nChw16c, nhwc, nchw,
 * nChw4c each with the output layout any and the same as the input, keeping the first
 * with the fewest reference passes.  Returns 0 with *out filled (the caller frees it) and
 * *n_ref = its reference passes, or -1 when no layout has all passes (out zeroed). */
int dpt_cpu_conv_choose(dnnl_engine_t eng, const dnnl_memory_desc_t *src, const dnnl_dims_t sd,
                        const dnnl_memory_desc_t *w_any, const dnnl_dims_t dd, dnnl_format_tag_t dst_tag,
                        const dnnl_dims_t strides, const dnnl_dims_t pl, const dnnl_dims_t pr, int need_bwd_d,
                        int search, struct dpt_cpu_conv_pds *out, int *n_ref);

#endif
