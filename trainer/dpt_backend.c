/* dpt_backend.c — backend selection. */
#include "dpt_backend.h"

#include <string.h>

#ifdef DPT_HAVE_CUDA_BACKEND
#include "dpt_backend_cuda.h"
#endif

void dpt_backend_opts_default(struct dpt_backend_opts *o)
{
  o->batch = 32;
  o->threads = 0;
  o->need_input_grad = 0;
  o->bn_momentum = 0.1f;
  o->bn_eps = 1e-5f;
  o->precision = NULL;
}

const char *dpt_backend_available(void)
{
#ifdef DPT_HAVE_CUDA_BACKEND
  return "cpu,cuda";
#else
  return "cpu";
#endif
}

const char *dpt_backend_auto(char *why, size_t why_len)
{
  if (why && why_len) why[0] = 0;
#ifdef DPT_HAVE_CUDA_BACKEND
  if (dpt_cuda_device_works(why, why_len)) return "cuda"; /* cuda only when a device works */
#endif
  return "cpu";
}

int dpt_backend_create(const char *name, const struct dpt_model *model,
                       const struct dpt_backend_opts *opts, struct dpt_backend **out,
                       struct dpt_err *err)
{
  *out = NULL;
  if (!name || !strcmp(name, "cpu"))
    return dpt_backend_cpu_create(model, opts, out, err);
  if (!strcmp(name, "auto")) {
#ifdef DPT_HAVE_CUDA_BACKEND
    if (!strcmp(dpt_backend_auto(NULL, 0), "cuda"))
      return dpt_backend_cuda_create(model, opts, out, err);
#endif
    return dpt_backend_cpu_create(model, opts, out, err);
  }
  if (!strcmp(name, "cuda")) {
#ifdef DPT_HAVE_CUDA_BACKEND
    return dpt_backend_cuda_create(model, opts, out, err);
#else
    return dpt_err_set(err, DPT_E_UNSUPPORTED,
                       "backend 'cuda': this dpt-train was built without the GPU backend "
                       "(no CUDA toolkit / cuDNN, or -DDPT_CUDA=OFF); use --backend cpu or auto");
#endif
  }
  return dpt_err_set(err, DPT_E_INPUT, "unknown backend '%s': expected cpu, cuda or auto", name);
}

void dpt_backend_destroy(struct dpt_backend *be)
{
  if (be) be->ops->destroy(be);
}
