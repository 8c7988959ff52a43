/* test_bucket: gradient buckets for the all-reduce during backward (dpt_bucket.h)
 * and the backend hook that hands them over (dpt_backend_set_buckets).
 *
 *  - Planner on ResNet-50: every parameter in exactly one bucket, contiguous
 *    slab ranges in reverse layer order (FC first), sizes in [target, target +
 *    largest layer) except the last, extremes (4 bytes -> one bucket per layer
 *    with parameters, huge -> one), 25 MiB -> 4 buckets; bad input: target 0,
 *    a slab layout that is not contiguous (names the layer).
 *  - CPU backend: with the hook set, backward calls it once per bucket in
 *    bucket order, and at that moment the bucket's range already holds its
 *    final gradients while the next bucket's range is still untouched (the
 *    slab is filled with NaN before backward): a bucket is handed over as soon
 *    as it is ready, not at the end.  A failing hook stops backward with its
 *    error, prefixed with the bucket; removing the hook stops the calls; a
 *    bucket table that does not fit the model (layers out of range, a range
 *    that is not exactly its layers' parameters, wrong order) is refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_backend.h"
#include "dpt_bucket.h"
#include "dpt_model.h"

#include "dpt_check.h"

static void check_plan(const struct dpt_model *m, size_t target, int expect_n)
{
  struct dpt_bucket *b;
  int nb;
  struct dpt_err err = {0};
  CHECK(dpt_bucket_plan(m, target, &b, &nb, &err) == 0, "buckets: %s", err.msg);
  unsigned char *seen = calloc(m->n_params, 1);
  size_t largest = 0;
  for (int i = 0; i < m->n_layers; i++)
    if ((m->layers[i].w_len + m->layers[i].b_len) * 4 > largest)
      largest = (m->layers[i].w_len + m->layers[i].b_len) * 4;
  size_t end = m->n_params;
  for (int k = 0; k < nb; k++) {
    CHECK(b[k].off + b[k].len == end, "bucket %d [%zu,+%zu) does not end where bucket %d starts (%zu)",
          k, b[k].off, b[k].len, k - 1, end);
    end = b[k].off;
    for (size_t i = b[k].off; i < b[k].off + b[k].len; i++) seen[i]++;
    if (k < nb - 1)
      CHECK(b[k].len * 4 >= target && b[k].len * 4 < target + largest,
            "bucket %d: %zu bytes for target %zu", k, b[k].len * 4, target);
    CHECK(m->layers[b[k].first_layer].w_off == b[k].off, "bucket %d starts at layer %d's block", k,
          b[k].first_layer);
    CHECK(b[k].first_layer <= b[k].last_layer && (k == 0 || b[k].last_layer < b[k - 1].first_layer),
          "bucket %d layers %d..%d after %d", k, b[k].first_layer, b[k].last_layer,
          k ? b[k - 1].first_layer : -1);
  }
  CHECK(end == 0, "buckets stop at %zu, not at the slab start", end);
  size_t bad = 0;
  for (size_t i = 0; i < m->n_params; i++) bad += seen[i] != 1;
  CHECK(bad == 0, "%zu parameters not in exactly one bucket", bad);
  CHECK(nb > 0 && m->layers[b[0].last_layer].type == DPT_LAYER_FC, "bucket 0 holds the FC layer");
  if (expect_n) CHECK(nb == expect_n, "%d buckets for target %zu, expected %d", nb, target, expect_n);
  printf("buckets target %zu bytes: %d\n", target, nb);
  free(seen);
  free(b);
}

static void test_plan(void)
{
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  struct dpt_err err = {0};
  dpt_model_cfg_default(&cfg);
  if (dpt_model_resnet50(&m, &cfg, &err)) exit(1);
  int with_params = 0;
  for (int i = 0; i < m.n_layers; i++) with_params += m.layers[i].w_len > 0;
  CHECK(with_params == 53 + 53 + 1, "%d layers with parameters", with_params);
  check_plan(&m, (size_t)4 << 20, 0);
  check_plan(&m, 4, with_params);       /* every layer its own bucket */
  check_plan(&m, (size_t)1 << 40, 1);   /* one bucket */
  /* 102 MB of fp32 gradients with 25 MiB buckets: 4 buckets (the last one small) */
  check_plan(&m, (size_t)25 << 20, 4);
  struct dpt_bucket *b;
  int nb;
  CHECK(dpt_bucket_plan(&m, 0, &b, &nb, &err) == DPT_E_INPUT && strstr(err.msg, "target"),
        "target 0: %s", err.msg);
  m.layers[m.n_layers - 1].w_off += 1; /* break the slab layout */
  CHECK(dpt_bucket_plan(&m, 1024, &b, &nb, &err) == DPT_E_INPUT && strstr(err.msg, "fc"),
        "non-contiguous: %s", err.msg);
  m.layers[m.n_layers - 1].w_off -= 1;
  dpt_model_free(&m);
}

struct hook {
  struct dpt_backend *be;
  const float *final;  /* [n_params] gradients of the same step without buckets */
  int calls, fail_at;
  size_t stale_seen;   /* elements of the next bucket still NaN at a call */
};

static int on_bucket(void *ctx, int k, void *ready, struct dpt_err *err)
{
  struct hook *h = ctx;
  const struct dpt_backend *be = h->be;
  const struct dpt_bucket *b = &be->buckets[k];
  CHECK(k == h->calls, "bucket %d handed over as call %d", k, h->calls);
  CHECK(ready == NULL, "cpu backend passed an event for bucket %d", k);
  h->calls++;
  if (k == h->fail_at) return dpt_err_set(err, DPT_E_RUNTIME, "test hook refuses");
  size_t diff = 0;
  for (size_t i = b->off; i < b->off + b->len; i++)
    diff += !(fabsf(be->grads[i] - h->final[i]) <= 1e-6f * (fabsf(h->final[i]) + 1e-6f));
  CHECK(diff == 0, "bucket %d [%zu,+%zu): %zu gradients not final when handed over", k, b->off, b->len, diff);
  if (k + 1 < be->n_buckets) {
    const struct dpt_bucket *n = &be->buckets[k + 1];
    size_t nan = 0;
    for (size_t i = n->off; i < n->off + n->len; i++) nan += isnan(be->grads[i]);
    CHECK(nan == n->len, "bucket %d: only %zu of %zu gradients of bucket %d still unwritten: handed over late",
          k, nan, n->len, k + 1);
    h->stale_seen += nan;
  }
  return 0;
}

static void test_cpu_hook(void)
{
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  struct dpt_err err = {0};
  dpt_model_cfg_default(&cfg);
  cfg.image_size = 16;
  cfg.in_channels = 3;
  cfg.num_classes = 10;
  cfg.small_stem = 1;
  cfg.width = 1.0 / 16;
  if (dpt_model_resnet50(&m, &cfg, &err)) exit(1);
  struct dpt_backend_opts o;
  struct dpt_backend *be;
  dpt_backend_opts_default(&o);
  o.batch = 2;
  if (dpt_backend_create("cpu", &m, &o, &be, &err)) {
    fprintf(stderr, "cpu backend: %s\n", err.msg);
    exit(1);
  }
  size_t np = m.n_params, nx = (size_t)o.batch * 3 * 16 * 16, nout = (size_t)o.batch * 10;
  float *x = malloc(nx * 4), *out = malloc(nout * 4), *dout = malloc(nout * 4), *final = malloc(np * 4);
  for (size_t i = 0; i < nx; i++) x[i] = (float)sin(0.37 * (double)i);
  for (size_t i = 0; i < nout; i++) dout[i] = (float)cos(1.3 * (double)i) / 4;
  CHECK(dpt_backend_forward(be, x, 1, out, &err) == 0 && dpt_backend_backward(be, dout, NULL, &err) == 0,
        "plain step: %s", err.msg);
  memcpy(final, be->grads, np * 4);

  struct dpt_bucket *b;
  int nb;
  CHECK(dpt_bucket_plan(&m, 16 << 10, &b, &nb, &err) == 0, "plan: %s", err.msg);
  CHECK(nb >= 4, "only %d buckets of 16 KiB for %zu parameters", nb, np);
  struct hook h = {.be = be, .final = final, .fail_at = -1};
  CHECK(dpt_backend_set_buckets(be, b, nb, on_bucket, &h, &err) == 0, "set: %s", err.msg);
  for (size_t i = 0; i < np; i++) be->grads[i] = NAN;
  CHECK(dpt_backend_forward(be, x, 1, out, &err) == 0 && dpt_backend_backward(be, dout, NULL, &err) == 0,
        "bucketed step: %s", err.msg);
  CHECK(h.calls == nb, "%d hook calls for %d buckets", h.calls, nb);
  size_t diff = 0;
  for (size_t i = 0; i < np; i++) diff += !(fabsf(be->grads[i] - final[i]) <= 1e-6f * (fabsf(final[i]) + 1e-6f));
  CHECK(diff == 0, "%zu gradients differ from the step without buckets", diff);
  printf("cpu backend: %d buckets handed over in order, each final when handed over, %zu later gradients "
         "not yet written at those moments\n", h.calls, h.stale_seen);

  /* a failing hook stops backward with its error */
  h.calls = 0;
  h.fail_at = 1;
  for (size_t i = 0; i < np; i++) be->grads[i] = NAN;
  CHECK(dpt_backend_forward(be, x, 1, out, &err) == 0, "forward: %s", err.msg);
  int rc = dpt_backend_backward(be, dout, NULL, &err);
  CHECK(rc == DPT_E_RUNTIME && strstr(err.msg, "gradient bucket 1") && strstr(err.msg, "test hook refuses"),
        "failing hook: rc %d, %s", rc, err.msg);
  CHECK(h.calls == 2, "backward went on after the hook failed (%d calls)", h.calls);

  /* no hook: no calls */
  CHECK(dpt_backend_set_buckets(be, NULL, 0, NULL, NULL, &err) == 0 && be->n_buckets == 0, "remove: %s", err.msg);
  h.calls = 0;
  CHECK(dpt_backend_forward(be, x, 1, out, &err) == 0 && dpt_backend_backward(be, dout, NULL, &err) == 0,
        "step without hook: %s", err.msg);
  CHECK(h.calls == 0, "hook called %d times after removal", h.calls);

  /* a table that does not fit the model */
  b[0].last_layer = m.n_layers + 3;
  rc = dpt_backend_set_buckets(be, b, nb, on_bucket, &h, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "bucket 0") && be->n_buckets == 0, "bad table: rc %d %s", rc, err.msg);
  b[0].last_layer = m.n_layers - 1;
  int first0 = b[0].first_layer;
  b[0].first_layer = m.n_layers + 7; /* out of range (and above last_layer): refused, nothing read */
  rc = dpt_backend_set_buckets(be, b, nb, on_bucket, &h, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "bucket 0"), "first layer out of range: rc %d %s", rc, err.msg);
  b[0].first_layer = first0;
  b[1].len -= 1; /* a range that is not its layers' parameters */
  rc = dpt_backend_set_buckets(be, b, nb, on_bucket, &h, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "bucket 1") && strstr(err.msg, "exactly"), "short range: rc %d %s", rc,
        err.msg);
  b[1].len += 1;
  struct dpt_bucket sw[2] = {b[1], b[0]}; /* not in backward order */
  rc = dpt_backend_set_buckets(be, sw, 2, on_bucket, &h, &err);
  CHECK(rc == DPT_E_INPUT && strstr(err.msg, "backward order"), "swapped buckets: rc %d %s", rc, err.msg);

  free(b);
  free(x), free(out), free(dout), free(final);
  dpt_backend_destroy(be);
  dpt_model_free(&m);
}

int main(void)
{
  test_plan();
  test_cpu_hook();
  if (!failures) printf("ok\n");
  return failures != 0;
}
