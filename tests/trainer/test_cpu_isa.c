/* test_cpu_isa: no primitive of a training step runs oneDNN's reference code (issue 21).
 *
 * For the networks of Fashion-MNIST (1x28, width 1/8, small stem), CIFAR-10 (3x32, width
 * 1/8, small stem), ImageNet (3x224, width 1) and grayscale ImageNet (1x224, width 1), as
 * dpt-train builds them: the CPU backend is created, one training step (forward, loss,
 * backward) and one evaluation forward run, and
 *   - the backend's notes (what dpt-train prints at start) name no reference kernel;
 *   - independently, oneDNN's own log of what it executed (ONEDNN_VERBOSE=1, captured from
 *     stdout) has no "ref" implementation among its exec lines, and has exec lines.
 * ctest runs it with ONEDNN_MAX_CPU_ISA unset and capped to AVX2 (an AVX-512 machine then
 * checks the AVX2 kernels' choices; an AVX2 machine runs the same twice).
 * The detectors are shown to work first: a convolution with a plain input and a
 * channels-last output (no JIT kernel on any ISA of oneDNN 2.6) is recorded as one reference
 * kernel with its layer, pass and shapes, and its execution shows as one "ref" exec line.
 * DPT_ISA_NETS=fmnist,cifar (default all four) picks networks. */
#include <fcntl.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dpt_backend.h"
#include "dpt_cpu_impl.h"
#include "dpt_optim.h"

#include "dpt_check.h"

/* stdout -> a temporary file while oneDNN prints its log */
static int saved_fd = -1;
static FILE *cap;

static void capture_begin(void)
{
  fflush(stdout);
  cap = tmpfile();
  if (!cap) {
    perror("tmpfile");
    exit(1);
  }
  saved_fd = dup(1);
  dup2(fileno(cap), 1);
}

/* Ends the capture; returns the exec lines seen and (in *n_ref) those with a ref implementation,
 * printing the first few of them. */
static int capture_end(int *n_ref)
{
  fflush(stdout);
  dup2(saved_fd, 1);
  close(saved_fd);
  rewind(cap);
  char line[4096];
  int n = 0;
  *n_ref = 0;
  while (fgets(line, sizeof line, cap)) {
    if (strncmp(line, "onednn_verbose,exec,", 20)) continue;
    n++;
    /* onednn_verbose,exec,cpu,<primitive>,<implementation>,<pass>,... */
    char *f = line;
    for (int k = 0; k < 4 && f; k++) f = strchr(f + 1, ',');
    if (f && !strncmp(f + 1, "ref", 3)) {
      if ((*n_ref)++ < 3) printf("  oneDNN executed: %s", line);
    }
  }
  fclose(cap);
  return n;
}

/* The detectors on a primitive that is reference code on every ISA. */
static void check_detectors(void)
{
  dnnl_engine_t eng;
  dnnl_stream_t strm;
  CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success, "engine");
  CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags) == dnnl_success, "stream");
  dnnl_dims_t sd = {2, 1, 8, 8}, wd = {8, 1, 3, 3}, dd = {2, 8, 8, 8}, st = {1, 1}, pad = {1, 1};
  dnnl_memory_desc_t s, w, d;
  dnnl_memory_desc_init_by_tag(&s, 4, sd, dnnl_f32, dnnl_nchw);
  dnnl_memory_desc_init_by_tag(&w, 4, wd, dnnl_f32, dnnl_oihw);
  dnnl_memory_desc_init_by_tag(&d, 4, dd, dnnl_f32, dnnl_nhwc);
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd = NULL;
  CHECK(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &s, &w, NULL, &d,
                                           st, pad, pad) == dnnl_success &&
            dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL) == dnnl_success,
        "probe convolution");
  struct dpt_cpu_impl_log log = {0};
  dpt_cpu_impl_record(&log, pd, "probe.conv");
  dpt_cpu_impl_record(&log, pd, "probe.conv"); /* the same primitive twice: said once */
  printf("detector (ISA %s): %s", dpt_cpu_impl_isa(), log.text);
  CHECK(log.n_prims == 2 && log.n_ref == 2, "probe: %d primitives, %d reference ones recorded (want 2, 2)",
        log.n_prims, log.n_ref);
  CHECK(strstr(log.text, "probe.conv: convolution forward_training, 2x1x8x8 -> 2x8x8x8") != NULL,
        "probe: the note does not name the layer, pass and shapes: %s", log.text);
  CHECK(strchr(log.text, '\n') == log.text + log.len - 1, "probe: said more than once: %s", log.text);
  float src[2 * 64] = {0}, wei[72] = {0}, dst[2 * 8 * 64];
  dnnl_memory_t ms, mw, md;
  dnnl_primitive_t prim;
  dnnl_memory_create(&ms, &s, eng, src);
  dnnl_memory_create(&mw, &w, eng, wei);
  dnnl_memory_create(&md, &d, eng, dst);
  dnnl_primitive_create(&prim, pd);
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
  capture_begin();
  dnnl_primitive_execute(prim, strm, 3, a);
  dnnl_stream_wait(strm);
  int nref, n = capture_end(&nref);
  CHECK(n == 1 && nref == 1, "probe: oneDNN's log shows %d exec line(s), %d of reference code (want 1, 1)", n, nref);
  /* the layout search finds JIT kernels for the 1-channel stem where the plain input has none */
  struct dpt_cpu_conv_pds p;
  int slow;
  dnnl_memory_desc_t w_any;
  dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any);
  CHECK(dpt_cpu_conv_choose(eng, &s, sd, &w_any, dd, dnnl_format_tag_any, st, pad, pad, 0, 1, &p, &slow) == 0,
        "stem: no convolution");
  CHECK(slow == 0, "stem 1x8x8 -> 8x8x8: %d pass(es) on reference code after the layout search", slow);
  dpt_cpu_conv_pds_free(&p);
  dnnl_primitive_destroy(prim);
  dnnl_memory_destroy(ms), dnnl_memory_destroy(mw), dnnl_memory_destroy(md);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
}

struct net {
  const char *name;
  int in_channels, image_size, small_stem, batch;
  double width;
};

static void check_net(const struct net *t)
{
  struct dpt_err err = {0};
  struct dpt_model_cfg cfg;
  struct dpt_model m;
  dpt_model_cfg_default(&cfg);
  cfg.in_channels = t->in_channels;
  cfg.image_size = t->image_size;
  cfg.small_stem = t->small_stem;
  cfg.width = t->width;
  cfg.num_classes = 10;
  if (dpt_model_resnet50(&m, &cfg, &err)) {
    CHECK(0, "%s: model: %s", t->name, err.msg);
    return;
  }
  struct dpt_backend_opts o;
  struct dpt_backend *be = NULL;
  dpt_backend_opts_default(&o);
  o.batch = t->batch;
  size_t nx = (size_t)t->batch * t->in_channels * t->image_size * t->image_size;
  float *x = calloc(nx, sizeof *x), *lg = malloc((size_t)t->batch * 10 * 4), *dl = malloc((size_t)t->batch * 10 * 4);
  int *labels = calloc((size_t)t->batch, sizeof *labels);
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  capture_begin();
  int rc = dpt_backend_create("cpu", &m, &o, &be, &err);
  if (!rc) rc = dpt_backend_forward(be, x, 1, lg, &err);
  if (!rc) dpt_softmax_xent(lg, labels, t->batch, 10, 0.0f, 1.0f / t->batch, dl, NULL, NULL);
  if (!rc) rc = dpt_backend_backward(be, dl, NULL, &err);
  if (!rc) rc = dpt_backend_forward(be, x, 0, lg, &err);
  int nref, n = capture_end(&nref);
  CHECK(rc == 0, "%s: %s", t->name, err.msg);
  const char *notes = be && be->ops->notes ? be->ops->notes(be) : "(no notes)";
  printf("%s (%dx%dx%d, width %g, batch %d, ISA %s): %d oneDNN executions, %d of reference code; notes: %s\n",
         t->name, t->in_channels, t->image_size, t->image_size, t->width, t->batch, dpt_cpu_impl_isa(), n, nref,
         *notes ? notes : "none");
  CHECK(n > 0, "%s: oneDNN's log is empty: ONEDNN_VERBOSE was not read (set before the first oneDNN call?)", t->name);
  CHECK(nref == 0, "%s: %d primitive execution(s) of oneDNN's reference code", t->name, nref);
  CHECK(*notes == 0, "%s: the backend says it runs reference kernels: %s", t->name, notes);
  if (be) dpt_backend_destroy(be);
  dpt_model_free(&m);
  free(x), free(lg), free(dl), free(labels);
}

int main(void)
{
  setenv("ONEDNN_VERBOSE", "1", 1); /* read at oneDNN's first call */
  check_detectors();
  static const struct net nets[] = {{"fmnist", 1, 28, 1, 32, 0.125},
                                    {"cifar", 3, 32, 1, 32, 0.125},
                                    {"imagenet", 3, 224, 0, 4, 1.0},
                                    {"imagenet-gray", 1, 224, 0, 4, 1.0}};
  const char *pick = getenv("DPT_ISA_NETS");
  for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) {
    char want[64];
    snprintf(want, sizeof want, ",%s,", nets[i].name);
    char list[256];
    snprintf(list, sizeof list, ",%s,", pick ? pick : "");
    if (!pick || strstr(list, want)) check_net(&nets[i]);
  }
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
