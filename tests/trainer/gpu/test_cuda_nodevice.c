/* test_cuda_nodevice: backend selection when no CUDA device is usable.
 *
 * ctest runs it twice: as it comes (on this GPU-less machine: no driver), and
 * with CUDA_VISIBLE_DEVICES=-1 (no visible device even on a GPU machine), so
 * the no-device path is exercised everywhere.  When a device IS usable (a GPU
 * machine, first run) it checks the other side: "auto" picks cuda.
 *
 *  - dpt_backend_create("cuda") fails at once: DPT_E_UNSUPPORTED (exit status
 *    1), *out NULL, the message says "no usable CUDA device" and quotes
 *    cudaGetDeviceCount's answer, and says what to do (--backend cpu/auto);
 *  - "auto" falls back to the CPU backend, which then works (one forward);
 *  - the build advertises "cpu,cuda";
 *  - a bad DPT_CUDA_PRECISION, DPT_CUDA_WORKSPACE_MB or DPT_CUDA_CONV is refused as bad input, and so is
 *    --deterministic with the fused step on (by option or DPT_CUDA_FUSE). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_backend.h"
#include "dpt_backend_cuda.h"

#include "dpt_check.h"

int main(void)
{
  struct dpt_model m;
  struct dpt_model_cfg cfg;
  struct dpt_err err = {0};
  struct dpt_backend_opts o;
  struct dpt_backend *be = (struct dpt_backend *)&m; /* must be reset to NULL on failure */
  char why[256];
  dpt_model_cfg_default(&cfg);
  cfg.width = 1.0 / 16;
  cfg.image_size = 16;
  cfg.small_stem = 1;
  cfg.num_classes = 10;
  if (dpt_model_resnet50(&m, &cfg, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  dpt_backend_opts_default(&o);
  o.batch = 2;
  CHECK(!strcmp(dpt_backend_available(), "cpu,cuda"), "available: %s", dpt_backend_available());

  int usable = dpt_cuda_device_usable(why, sizeof why);
  printf("CUDA_VISIBLE_DEVICES=%s usable=%d %s\n", getenv("CUDA_VISIBLE_DEVICES") ?
         getenv("CUDA_VISIBLE_DEVICES") : "(unset)", usable, why);
  if (usable) {
    CHECK(dpt_backend_create("auto", &m, &o, &be, &err) == 0, "auto: %s", err.msg);
    CHECK(be && !strcmp(be->ops->name, "cuda"), "auto picked %s with a usable device",
          be ? be->ops->name : "nothing");
    dpt_backend_destroy(be);
  } else {
    CHECK(strstr(why, "cudaGetDeviceCount"), "reason names cudaGetDeviceCount: %s", why);
    int rc = dpt_backend_create("cuda", &m, &o, &be, &err);
    printf("cuda: rc %d: %s\n", rc, err.msg);
    CHECK(rc == DPT_E_UNSUPPORTED && dpt_err_exit_status(&err) == 1, "rc %d", rc);
    CHECK(be == NULL, "no backend on failure");
    CHECK(strstr(err.msg, "no usable CUDA device") && strstr(err.msg, "cudaGetDeviceCount") &&
              strstr(err.msg, why + strlen("cudaGetDeviceCount failed: ")) &&
              strstr(err.msg, "--backend cpu"), "message: %s", err.msg);
    /* same through the explicit constructor, and with an empty model / no options
     * (dpt-train asks before it has built anything) */
    struct dpt_model empty = {0};
    rc = dpt_backend_cuda_create(&empty, NULL, &be, &err);
    CHECK(rc == DPT_E_UNSUPPORTED && be == NULL && strstr(err.msg, "no usable CUDA device"),
          "empty model: %d %s", rc, err.msg);
    be = (struct dpt_backend *)&m;
    rc = dpt_backend_create("auto", &m, &o, &be, &err);
    CHECK(rc == 0 && be && !strcmp(be->ops->name, "cpu"), "auto without a device: %d %s", rc, err.msg);
    if (be && rc == 0) {
      size_t nx = (size_t)o.batch * cfg.in_channels * cfg.image_size * cfg.image_size;
      float *x = calloc(nx, sizeof *x), logits[20];
      CHECK(dpt_backend_forward(be, x, 1, logits, &err) == 0, "cpu forward after auto: %s", err.msg);
      free(x);
      dpt_backend_destroy(be);
    }
  }
  setenv("DPT_CUDA_PRECISION", "fp64", 1);
  be = (struct dpt_backend *)&m;
  int rc = dpt_backend_create("cuda", &m, &o, &be, &err);
  CHECK(rc == DPT_E_INPUT && be == NULL && strstr(err.msg, "DPT_CUDA_PRECISION='fp64'"),
        "bad precision: %d %s", rc, err.msg);
  unsetenv("DPT_CUDA_PRECISION");
  const char *bad_ws[] = {"", "-1", "512k", "1e3", " 64", "16777217", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof bad_ws / sizeof *bad_ws; i++) {
    char want[64];
    setenv("DPT_CUDA_WORKSPACE_MB", bad_ws[i], 1);
    snprintf(want, sizeof want, "DPT_CUDA_WORKSPACE_MB='%s'", bad_ws[i]);
    be = (struct dpt_backend *)&m;
    rc = dpt_backend_create("cuda", &m, &o, &be, &err);
    CHECK(rc == DPT_E_INPUT && be == NULL && strstr(err.msg, want), "bad workspace cap '%s': %d %s", bad_ws[i], rc,
          err.msg);
  }
  unsetenv("DPT_CUDA_WORKSPACE_MB");
  const char *bad_conv[] = {"", "Graph", "cudnn", "legacy "};
  for (size_t i = 0; i < sizeof bad_conv / sizeof *bad_conv; i++) {
    char want[64];
    setenv("DPT_CUDA_CONV", bad_conv[i], 1);
    snprintf(want, sizeof want, "DPT_CUDA_CONV='%s'", bad_conv[i]);
    be = (struct dpt_backend *)&m;
    rc = dpt_backend_create("cuda", &m, &o, &be, &err);
    int ok = *bad_conv[i] ? rc == DPT_E_INPUT && strstr(err.msg, want) && strstr(err.msg, "legacy or graph")
                          : rc != DPT_E_INPUT; /* empty: unset, auto */
    CHECK(ok && (rc != 0 || be), "DPT_CUDA_CONV '%s': %d %s", bad_conv[i], rc, err.msg);
    if (rc == 0) dpt_backend_destroy(be);
  }
  for (const char *const *v = (const char *const[]){"auto", "legacy", "graph", NULL}; *v; v++)
    CHECK(dpt_cuda_conv_parse(*v) >= 0, "DPT_CUDA_CONV='%s' refused", *v);
  CHECK(dpt_cuda_conv_parse(NULL) == DPT_CUDA_CONV_AUTO && dpt_cuda_conv_parse("graph") == DPT_CUDA_CONV_GRAPH &&
            dpt_cuda_conv_parse("legacy") == DPT_CUDA_CONV_LEGACY && dpt_cuda_conv_parse("x") < 0,
        "dpt_cuda_conv_parse");
  unsetenv("DPT_CUDA_CONV");
  /* --deterministic with the fused step asked for (option or variable): its engines are timed */
  o.deterministic = 1;
  o.fuse = "on";
  be = (struct dpt_backend *)&m;
  rc = dpt_backend_create("cuda", &m, &o, &be, &err);
  CHECK(rc == DPT_E_INPUT && be == NULL && strstr(err.msg, "--deterministic with --fuse on"),
        "--deterministic --fuse on: %d %s", rc, err.msg);
  o.fuse = NULL;
  setenv("DPT_CUDA_FUSE", "on", 1);
  be = (struct dpt_backend *)&m;
  rc = dpt_backend_create("cuda", &m, &o, &be, &err);
  CHECK(rc == DPT_E_INPUT && be == NULL && strstr(err.msg, "--deterministic with DPT_CUDA_FUSE on"),
        "--deterministic, DPT_CUDA_FUSE=on: %d %s", rc, err.msg);
  unsetenv("DPT_CUDA_FUSE");
  o.deterministic = 0;
  dpt_model_free(&m);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
