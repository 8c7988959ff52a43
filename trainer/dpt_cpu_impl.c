/* dpt_cpu_impl.c — which oneDNN implementation runs each primitive (dpt_cpu_impl.h). */
#include "dpt_cpu_impl.h"

#include <oneapi/dnnl/dnnl_debug.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dpt_cpu_impl_is_ref(const_dnnl_primitive_desc_t pd)
{
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success) return 1;
  return !impl || !strncmp(impl, "ref", 3);
}

const char *dpt_cpu_impl_isa(void)
{
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "all";
  }
}

const char *dpt_cpu_impl_machine(char *buf, size_t n)
{
  char line[512], model[256] = "unknown CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !c) continue;
    c += 1 + (c[1] == ' ');
    c[strcspn(c, "\n")] = 0;
    snprintf(model, sizeof model, "%s", c);
    break;
  }
  if (f) fclose(f);
  snprintf(buf, n, "%s (oneDNN kernels: %s)", model, dpt_cpu_impl_isa());
  return buf;
}

/* "32x1x28x28" of the md pd has for what (src, diff_src, dst, ...); "" when none. */
static void dims_str(const_dnnl_primitive_desc_t pd, dnnl_query_t what, char *buf, size_t n)
{
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; md && i < md->ndims && len + 1 < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "x" : "", (long long)md->dims[i]);
}

static void log_add(struct dpt_cpu_impl_log *log, const char *fmt, ...)
{
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(line), room = sizeof log->text - log->len;
  if (strstr(log->text, line)) return; /* the same layer, pass and shapes said once */
  if (n + 64 < room) {
    memcpy(log->text + log->len, line, n + 1);
    log->len += n;
  } else if (!strstr(log->text, "... and more")) {
    snprintf(log->text + log->len, room, "... and more reference kernels\n");
    log->len += strlen(log->text + log->len);
  }
}

void dpt_cpu_impl_record(struct dpt_cpu_impl_log *log, const_dnnl_primitive_desc_t pd, const char *layer)
{
  log->n_prims++;
  if (!dpt_cpu_impl_is_ref(pd)) return;
  log->n_ref++;
  dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
  dnnl_prop_kind_t prop = dnnl_prop_kind_undef;
  const char *impl = NULL;
  dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind);
  dnnl_primitive_desc_query(pd, dnnl_query_prop_kind, 0, &prop);
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  char src[64], dst[64];
  int bwd = prop == dnnl_backward_data || prop == dnnl_backward;
  dims_str(pd, bwd ? dnnl_query_diff_src_md : dnnl_query_src_md, src, sizeof src);
  dims_str(pd, bwd || prop == dnnl_backward_weights ? dnnl_query_diff_dst_md : dnnl_query_dst_md, dst,
           sizeof dst);
  log_add(log,
          "oneDNN reference kernel (slow) for %s: %s %s, %s -> %s (%s): no JIT kernel of this CPU's ISA "
          "(%s) accepts it\n",
          layer, dnnl_prim_kind2str(kind), prop == dnnl_prop_kind_undef ? "" : dnnl_prop_kind2str(prop),
          src[0] ? src : "?", dst[0] ? dst : "?", impl ? impl : "unknown", dpt_cpu_impl_isa());
}

void dpt_cpu_conv_pds_free(struct dpt_cpu_conv_pds *p)
{
  if (p->fwd) dnnl_primitive_desc_destroy(p->fwd);
  if (p->bwd_d) dnnl_primitive_desc_destroy(p->bwd_d);
  if (p->bwd_w) dnnl_primitive_desc_destroy(p->bwd_w);
  memset(p, 0, sizeof *p);
}

/* The three passes for src -> dst; 0 when all exist, *n_ref = how many are reference code. */
static int conv_make(dnnl_engine_t eng, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *w_any,
                     const dnnl_memory_desc_t *dst, const dnnl_dims_t strides, const dnnl_dims_t pl,
                     const dnnl_dims_t pr, int need_bwd_d, struct dpt_cpu_conv_pds *p, int *n_ref)
{
  dnnl_convolution_desc_t cd;
  memset(p, 0, sizeof *p);
  *n_ref = 3;
  if (dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, src, w_any, NULL,
                                         dst, strides, pl, pr) != dnnl_success ||
      dnnl_primitive_desc_create(&p->fwd, &cd, NULL, eng, NULL) != dnnl_success)
    goto fail;
  const dnnl_memory_desc_t *s = dnnl_primitive_desc_query_md(p->fwd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *d = dnnl_primitive_desc_query_md(p->fwd, dnnl_query_dst_md, 0);
  if (dnnl_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, s, w_any, NULL, d, strides, pl,
                                                  pr) != dnnl_success ||
      dnnl_primitive_desc_create(&p->bwd_w, &cd, NULL, eng, p->fwd) != dnnl_success)
    goto fail;
  if (need_bwd_d &&
      (dnnl_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, s, w_any, d, strides, pl, pr) !=
           dnnl_success ||
       dnnl_primitive_desc_create(&p->bwd_d, &cd, NULL, eng, p->fwd) != dnnl_success ||
       !dnnl_memory_desc_equal(dnnl_primitive_desc_query_md(p->bwd_d, dnnl_query_diff_src_md, 0), s)))
    goto fail;
  *n_ref = dpt_cpu_impl_is_ref(p->fwd) + dpt_cpu_impl_is_ref(p->bwd_w) + (p->bwd_d ? dpt_cpu_impl_is_ref(p->bwd_d) : 0);
  return 0;
fail:
  dpt_cpu_conv_pds_free(p);
  return -1;
}

int dpt_cpu_conv_choose(dnnl_engine_t eng, const dnnl_memory_desc_t *src, const dnnl_dims_t sd,
                        const dnnl_memory_desc_t *w_any, const dnnl_dims_t dd, dnnl_format_tag_t dst_tag,
                        const dnnl_dims_t strides, const dnnl_dims_t pl, const dnnl_dims_t pr, int need_bwd_d,
                        int search, struct dpt_cpu_conv_pds *out, int *n_ref)
{
  static const dnnl_format_tag_t alts[] = {dnnl_format_tag_any, dnnl_aBcd8b, dnnl_aBcd16b,
                                           dnnl_nhwc,           dnnl_nchw,   dnnl_aBcd4b};
  dnnl_memory_desc_t smd, dmd;
  struct dpt_cpu_conv_pds cand;
  int found = -1, cref;
  *n_ref = 4; /* worse than any layout that has all passes */
  memset(out, 0, sizeof *out);
  if (src) smd = *src;
  else dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dst_tag);
  dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dst_tag);
  if (!conv_make(eng, &smd, w_any, &dmd, strides, pl, pr, need_bwd_d, out, &cref)) {
    found = 0;
    *n_ref = cref;
  }
  /* each input layout with the output layout any, then the same as the input */
  for (size_t i = 0; search && *n_ref && i < 2 * (sizeof alts / sizeof *alts); i++) {
    dnnl_format_tag_t st = alts[i / 2], dt = i % 2 ? st : dnnl_format_tag_any;
    if (i % 2 && st == dnnl_format_tag_any) continue;
    dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, st);
    dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dt);
    if (conv_make(eng, &smd, w_any, &dmd, strides, pl, pr, need_bwd_d, &cand, &cref)) continue;
    if (cref < *n_ref) {
      dpt_cpu_conv_pds_free(out);
      *out = cand;
      *n_ref = cref;
      found = 0;
    } else {
      dpt_cpu_conv_pds_free(&cand);
    }
  }
  return found;
}
