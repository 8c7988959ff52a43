/* ckpt_compare A B TOL: parameters and momentum of two checkpoints agree to
 * TOL (max |a - b| / max |b|).  Exit 0 when they do, 1 when not, 2 on bad input. */
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
  *v = malloc(m->n_params * 4);
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
  if (a.n_params != b.n_params || a.global_step != b.global_step) {
    fprintf(stderr, "different models or steps (%llu vs %llu parameters, step %llu vs %llu)\n",
            (unsigned long long)a.n_params, (unsigned long long)b.n_params,
            (unsigned long long)a.global_step, (unsigned long long)b.global_step);
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
  double tol = atof(argv[3]);
  free(pa), free(va), free(pb), free(vb);
  printf("params max diff %.3g (rel %.3g), momentum max diff %.3g (rel %.3g), %.0f of %llu moved\n", ep,
         ep / mp, ev, ev / mv, moved, (unsigned long long)a.n_params);
  return (ep <= tol * mp && ev <= tol * mv && moved > 0) ? 0 : 1;
}
