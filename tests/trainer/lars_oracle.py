#!/usr/bin/python3
"""Float64 oracle for test_optim.c's LARS case: the MLPerf ResNet-50 reference's update
(mlcommons/training, image_classification/tensorflow2/lars_optimizer.py, compute_lr and
_resource_apply_dense) written out in numpy, independent of dpt's C code.  Prints the C
arrays test_optim.c embeds; rerun it after changing the case.

Per tensor, not skipped: w_norm = |w|, g_norm = |g|, trust = eta w_norm / (g_norm + wd w_norm + eps)
where both norms are > 0, else 1; scaled_lr = lr trust; g += wd w.  Skipped (BN, bias):
scaled_lr = lr, g unchanged.  mom = m mom - scaled_lr g; w += mom (nesterov:
w += m mom - scaled_lr g).  eps = 0 is replaced by 1e-7 (`epsilon or backend_config.epsilon()`)."""
import numpy as np

# the case: (length, skip) per tensor; weights, gradients (scaled by 1 + k/2 at step k)
SEGS = [(6, 0), (3, 1), (3, 1), (4, 0), (2, 0)]
W0 = [0.8, -0.6, 0.4, 1.2, -1.0, 0.3,   1.0, 0.9, 1.1,   0.05, -0.02, 0.0,   0, 0, 0, 0,   0.7, -0.4]
G0 = [0.3, 0.1, -0.2, 0.05, 0.4, -0.35,   0.02, -0.01, 0.03,   0.5, -0.25, 0.125,   0.1, -0.3, 0.2, 0.05,   0, 0]
LRS = [0.5, 1.0, 0.25]
M, WD, ETA, EPS = 0.9, 0.01, 0.02, 0.0


def run(nesterov):
    w = np.array(W0, dtype=np.float64)
    mom = np.zeros_like(w)
    eps = EPS or 1e-7
    ratios = []
    for k, lr in enumerate(LRS):
        g_all = np.array(G0, dtype=np.float64) * (1 + 0.5 * k)
        ratios = []
        off = 0
        for n, skip in SEGS:
            s = slice(off, off + n)
            g = g_all[s].copy()
            scaled = lr
            r = 1.0
            if not skip:
                wn, gn = np.linalg.norm(w[s]), np.linalg.norm(g)
                r = ETA * wn / (gn + WD * wn + eps) if wn > 0 and gn > 0 else 1.0
                scaled = lr * r
                g = g + WD * w[s]
            mom[s] = mom[s] * M - g * scaled
            w[s] = w[s] + (mom[s] * M - g * scaled if nesterov else mom[s])
            ratios.append(r)
            off += n
    return w, mom, ratios


def c_array(name, v):
    return "static const double %s[%d] = {%s};" % (name, len(v), ", ".join("%.17g" % x for x in v))


for nest in (0, 1):
    w, mom, r = run(nest)
    print(c_array("lars_w%d" % nest, w))
    print(c_array("lars_v%d" % nest, mom))
    print(c_array("lars_r%d" % nest, r))
