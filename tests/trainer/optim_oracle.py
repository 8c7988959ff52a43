#!/usr/bin/python3
"""Float64 oracles for test_optim.c's LARS and RMSprop warm-up cases, independent of dpt's C code.
Prints the C arrays test_optim.c embeds; rerun it after changing a case.

LARS: the MLPerf ResNet-50 reference's update
(mlcommons/training, image_classification/tensorflow2/lars_optimizer.py, compute_lr and
_resource_apply_dense) written out in numpy.

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


# RMSprop warm-up (Akiba et al. 2017, arXiv 1711.04325, section 2.1), dpt's reading of the mix:
#   a(e) = 1/2 exp(2 (e - c) / p) for e < c; 1/2 + (e - c) / p for c <= e < c + p/2; 1 after
#   g' = g + wd w (mask); m = mu2 m + (1 - mu2) g'^2; d = mu1 d - g' (a + (1 - a) lr_rms / lr / (sqrt(m) + eps));
#   w += lr d
RW0 = [0.5, -0.25, 1.5, -2.0, 0.75, 0.0]
RG0 = [0.1, -0.4, 0.02, 0.3, -0.05, 0.2]
RMASK = [1, 1, 1, 1, 0, 0]
R_EPOCHS = [0.0, 10.0, 12.0, 13.0]
R_LRS = [0.1, 0.2, 0.2, 0.05]
R_MU1, R_WD, R_LRMS, R_MU2, R_EPS, R_C, R_P = 0.9, 0.01, 3e-4, 0.99, 1e-8, 10.0, 5.0


def alpha_sgd(e):
    if e < R_C:
        return 0.5 * np.exp(2 * (e - R_C) / R_P)
    if e < R_C + R_P / 2:
        return 0.5 + (e - R_C) / R_P
    return 1.0


def run_rmsw():
    w = np.array(RW0, dtype=np.float64)
    d = np.zeros_like(w)
    m = np.zeros_like(w)
    for k, (e, lr) in enumerate(zip(R_EPOCHS, R_LRS)):
        g = np.array(RG0, dtype=np.float64) * (1 + 0.5 * k) + R_WD * w * np.array(RMASK)
        a = alpha_sgd(e)
        ar = (1 - a) * R_LRMS / lr
        m = R_MU2 * m + (1 - R_MU2) * g * g
        d = R_MU1 * d - g * (a + ar / (np.sqrt(m) + R_EPS))
        w = w + lr * d
    return w, d, m


for nest in (0, 1):
    w, mom, r = run(nest)
    print(c_array("lars_w%d" % nest, w))
    print(c_array("lars_v%d" % nest, mom))
    print(c_array("lars_r%d" % nest, r))
w, d, m = run_rmsw()
print(c_array("rmsw_w", w))
print(c_array("rmsw_d", d))
print(c_array("rmsw_m", m))
