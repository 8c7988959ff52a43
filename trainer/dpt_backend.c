/* dpt_backend.c — backend selection, gradient buckets and the backward walk every
 * backend shares. */
#include "dpt_backend.h"

#include <stdlib.h>
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
  o->fuse = NULL;
  o->cuda_graph = NULL;
  o->deterministic = 0;
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

static void buckets_free(struct dpt_backend *be)
{
  free(be->buckets);
  free(be->bucket_at);
  be->buckets = NULL;
  be->bucket_at = NULL;
  be->n_buckets = 0;
  be->bucket_fn = NULL;
  be->bucket_ctx = NULL;
}

int dpt_backend_set_buckets(struct dpt_backend *be, const struct dpt_bucket *b, int n,
                            dpt_bucket_ready_fn fn, void *ctx, struct dpt_err *err)
{
  const struct dpt_model *m = be->model;
  int rc = 0;
  buckets_free(be);
  if (n <= 0 || !fn) goto out;
  for (int k = 0; k < n; k++) {
    const struct dpt_layer_desc *f = &m->layers[b[k].first_layer < 0 || b[k].first_layer >= m->n_layers
                                                    ? 0 : b[k].first_layer];
    const struct dpt_layer_desc *l = &m->layers[b[k].last_layer < 0 || b[k].last_layer >= m->n_layers
                                                    ? 0 : b[k].last_layer];
    if (b[k].first_layer < 0 || b[k].first_layer > b[k].last_layer || b[k].last_layer >= m->n_layers ||
        b[k].off + b[k].len > m->n_params || (k && b[k].last_layer >= b[k - 1].first_layer) ||
        f->w_off != b[k].off || l->w_off + l->w_len + l->b_len != b[k].off + b[k].len) {
      rc = dpt_err_set(err, DPT_E_INPUT, "%s backend: gradient bucket %d (layers %d..%d, slab [%zu, +%zu)) "
                       "does not fit the model (%d layers, %zu parameters: the range must be exactly "
                       "those layers' parameters) or the buckets are not in backward order; plan them "
                       "with dpt_bucket_plan for this model", be->ops->name, k,
                       b[k].first_layer, b[k].last_layer, b[k].off, b[k].len, m->n_layers, m->n_params);
      goto out;
    }
  }
  be->buckets = malloc((size_t)n * sizeof *b);
  be->bucket_at = malloc((size_t)m->n_layers * sizeof *be->bucket_at);
  if (!be->buckets || !be->bucket_at) {
    buckets_free(be);
    rc = dpt_err_set(err, DPT_E_NOMEM, "%s backend: out of memory for %d gradient buckets", be->ops->name, n);
    goto out;
  }
  memcpy(be->buckets, b, (size_t)n * sizeof *b);
  for (int i = 0; i < m->n_layers; i++) be->bucket_at[i] = -1;
  for (int k = 0; k < n; k++) be->bucket_at[b[k].first_layer] = k;
  be->n_buckets = n;
  be->bucket_fn = fn;
  be->bucket_ctx = ctx;
out:
  if (!rc && be->ops->buckets_changed && (rc = be->ops->buckets_changed(be, err))) buckets_free(be);
  return rc;
}

int dpt_backend_backward_walk(struct dpt_backend *be, dpt_bucket_done_fn bucket_done, struct dpt_err *err)
{
  const struct dpt_model *m = be->model;
  int rc = 0;
  if (!be->grad_written && !(be->grad_written = malloc((size_t)m->n_tensors)))
    return dpt_err_set(err, DPT_E_NOMEM, "%s backend: out of memory for backward (%d tensors)", be->ops->name,
                       m->n_tensors);
  memset(be->grad_written, 0, (size_t)m->n_tensors);
  be->grad_written[m->layers[m->n_layers - 1].out] = 1; /* the output gradient the backend put there */
  for (int i = m->n_layers - 1; i >= 0; i--) {
    struct dpt_layer *l = &be->layers[i];
    if (!be->grad_written[l->desc->out])
      return dpt_err_set(err, DPT_E_RUNTIME, "%s backend: layer '%s' has no gradient flowing into its output "
                         "(a dead branch in the model)", be->ops->name, l->desc->name);
    if ((rc = l->ops->backward(l, err))) return rc;
    int k = be->n_buckets ? be->bucket_at[i] : -1;
    if (k < 0) continue;
    /* bucket k's gradients are final (cpu) or enqueued (cuda): the backend's part, then the hook */
    void *ready = NULL;
    if ((bucket_done && (rc = bucket_done(be, k, &ready, err))) ||
        (rc = be->bucket_fn(be->bucket_ctx, k, ready, err))) {
      dpt_err_prefix(err, "gradient bucket %d (layers %d..%d)", k, be->buckets[k].first_layer,
                     be->buckets[k].last_layer);
      return rc;
    }
  }
  return 0;
}

void *dpt_backend_host_alloc(struct dpt_backend *be, size_t bytes)
{
  return be->ops->host_alloc ? be->ops->host_alloc(be, bytes) : malloc(bytes ? bytes : 1);
}

void dpt_backend_host_free(struct dpt_backend *be, void *p)
{
  if (!p) return;
  if (be->ops->host_free) be->ops->host_free(be, p);
  else free(p);
}

void dpt_backend_destroy(struct dpt_backend *be)
{
  if (!be) return;
  buckets_free(be);
  free(be->grad_written);
  be->grad_written = NULL;
  be->ops->destroy(be);
}
