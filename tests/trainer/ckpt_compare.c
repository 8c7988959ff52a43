/* ckpt_compare A B TOL: parameters and optimizer state (the momentum buffer; RMSprop warm-up's
 * second moment after it, compared on its own) of two checkpoints agree to TOL
 * (max |a - b| / max |b|).  Exit 0 when they do, 1 when not, 2 on bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpt_ckpt.h"

static int load(const char *path, struct dpt_ckpt_meta *m, float **p, float **v)
{
  struct dpt_err err = {0};
  if (dpt_ckpt_load(path, NULL, m, NULL, NULL, NULL, NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return -1;
  }
  *p = malloc(m->n_params * 4);
  *v = malloc(m->n_opt_state * 4); /* set by the first load: n_params, or 2 n_params */
  float *s = malloc((m->n_state ? m->n_state : 1) * 4), *q = malloc((m->n_pending ? m->n_pending : 1) * 4);
  int rc = dpt_ckpt_load(path, NULL, m, *p, s, *v, q, &err);
  free(s);
  free(q);
  return rc;
}

int main(int argc, char **argv)
{
  if (argc != 4) {
    fprintf(stderr, "usage: ckpt_compare A B TOL\n");
    return 2;
  }
  struct dpt_ckpt_meta a, b;
  float *pa, *va, *pb, *vb;
  if (load(argv[1], &a, &pa, &va) || load(argv[2], &b, &pb, &vb)) return 2;
  if (a.n_params != b.n_params || a.global_step != b.global_step || a.n_opt_state != b.n_opt_state) {
    fprintf(stderr, "different models, steps or optimizers (%llu vs %llu parameters, step %llu vs %llu, %llu vs %llu "
            "optimizer-state values)\n", (unsigned long long)a.n_params, (unsigned long long)b.n_params,
            (unsigned long long)a.global_step, (unsigned long long)b.global_step, (unsigned long long)a.n_opt_state,
            (unsigned long long)b.n_opt_state);
    free(pa), free(va), free(pb), free(vb);
    return 1;
  }
  double ep = 0, ev = 0, mp = 0, mv = 0, moved = 0;
  for (size_t i = 0; i < a.n_params; i++) {
    ep = fmax(ep, fabs((double)pa[i] - pb[i]));
    ev = fmax(ev, fabs((double)va[i] - vb[i]));
    mp = fmax(mp, fabs((double)pb[i]));
    mv = fmax(mv, fabs((double)vb[i]));
    moved += vb[i] != 0;
  }
  double e2 = 0, m2 = 0; /* the second moment (rmsprop-warmup) */
  for (size_t i = a.n_params; i < a.n_opt_state; i++) {
    e2 = fmax(e2, fabs((double)va[i] - vb[i]));
    m2 = fmax(m2, fabs((double)vb[i]));
  }
  double tol = atof(argv[3]);
  free(pa), free(va), free(pb), free(vb);
  printf("params max diff %.3g (rel %.3g), momentum max diff %.3g (rel %.3g), %.0f of %llu moved", ep, ep / mp, ev,
         ev / mv, moved, (unsigned long long)a.n_params);
  if (a.n_opt_state > a.n_params) printf(", second moment max diff %.3g (rel %.3g)", e2, m2 > 0 ? e2 / m2 : 0.0);
  printf("\n");
  return (ep <= tol * mp && ev <= tol * mv && e2 <= tol * m2 && moved > 0) ? 0 : 1;
}
