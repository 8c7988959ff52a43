#!/usr/bin/python3
"""ChainerMN side of bench/train (chainer 7.8.1, which includes chainermn; CPU: numpy +
OpenBLAS, no iDeep): the same ResNet-50 v1.5 as torch_train.py and dpt-train (stride on
the 3x3 of each bottleneck; small stem 3x3/1 without max pool at <= 64 px), the same
steps on one fixed random batch: forward, softmax cross-entropy, backward, MomentumSGD
(lr 0.01, momentum 0.9) with WeightDecay(5e-5).  More than one rank: started by
`mpirun -n P` (mpi4py), chainermn.create_communicator('naive') (the CPU communicator:
MPI all-reduce of every gradient, over mpi4py) and create_multi_node_optimizer, as in
ChainerMN's ImageNet example.

Protocol shared with torch_train.py (bench.py reads it): after every step rank 0 prints
  STEP <i> <time.time()> <in-process step seconds>
(flushed), and each rank writes --out.<rank> at the end."""
import argparse
import json
import os
import sys
import time

T_IMPORT = time.time()
import numpy as np  # noqa: E402
import chainer  # noqa: E402
import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402


class Bottleneck(chainer.Chain):
    def __init__(self, inplanes, planes, stride=1, downsample=False):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(inplanes, planes, 1, 1, 0, nobias=True)
            self.bn1 = L.BatchNormalization(planes)
            self.conv2 = L.Convolution2D(planes, planes, 3, stride, 1, nobias=True)
            self.bn2 = L.BatchNormalization(planes)
            self.conv3 = L.Convolution2D(planes, planes * 4, 1, 1, 0, nobias=True)
            self.bn3 = L.BatchNormalization(planes * 4)
            if downsample:
                self.dconv = L.Convolution2D(inplanes, planes * 4, 1, stride, 0, nobias=True)
                self.dbn = L.BatchNormalization(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        idt = self.dbn(self.dconv(x)) if self.downsample else x
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + idt)


class ResNet50(chainer.Chain):
    def __init__(self, classes, small_stem):
        super().__init__()
        self.small_stem = small_stem
        blocks = []
        inplanes = 64
        for planes, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            blocks.append(Bottleneck(inplanes, planes, stride, stride != 1 or inplanes != planes * 4))
            inplanes = planes * 4
            blocks += [Bottleneck(inplanes, planes) for _ in range(1, n)]
        with self.init_scope():
            if small_stem:
                self.conv1 = L.Convolution2D(3, 64, 3, 1, 1, nobias=True)
            else:
                self.conv1 = L.Convolution2D(3, 64, 7, 2, 3, nobias=True)
            self.bn1 = L.BatchNormalization(64)
            self.blocks = chainer.ChainList(*blocks)
            self.fc = L.Linear(2048, classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        if not self.small_stem:
            h = F.max_pooling_2d(h, 3, 2, 1, cover_all=False)
        for b in self.blocks:
            h = b(h)
        return self.fc(F.average(h, axis=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="recorded; OpenBLAS reads OPENBLAS_NUM_THREADS")
    ap.add_argument("--steps", type=int, default=5, help="steps in all, the first one included")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    comm = None
    rank, world = 0, 1
    if "OMPI_COMM_WORLD_SIZE" in os.environ and int(os.environ["OMPI_COMM_WORLD_SIZE"]) > 1:
        import chainermn
        comm = chainermn.create_communicator("naive")
        rank, world = comm.rank, comm.size
    np.random.seed(1)
    model = ResNet50(a.classes, a.image_size <= 64)
    n_params = sum(p.size for p in model.params())
    opt = chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9)
    if comm is not None:
        import chainermn
        opt = chainermn.create_multi_node_optimizer(opt, comm)  # broadcasts the parameters at the first update
    opt.setup(model)
    opt.add_hook(chainer.optimizer_hooks.WeightDecay(5e-5))
    rs = np.random.RandomState(100 + rank)
    x = rs.standard_normal((a.batch, 3, a.image_size, a.image_size)).astype(np.float32)
    y = rs.randint(0, a.classes, a.batch).astype(np.int32)
    times = []
    with chainer.using_config("train", True):
        for step in range(a.steps):
            t = time.perf_counter()
            model.cleargrads()
            loss = F.softmax_cross_entropy(model(x), y)
            loss.backward()
            opt.update()  # multi-node: gradients all-reduced (mean) before the update
            times.append(time.perf_counter() - t)
            if rank == 0:
                print(f"STEP {step + 1} {time.time():.6f} {times[-1]:.6f} loss {float(loss.array):.4f}", flush=True)
    with open(f"{a.out}.{rank}", "w") as f:
        json.dump({"framework": "chainer " + chainer.__version__, "python": sys.version.split()[0],
                   "numpy": np.__version__, "rank": rank, "world": world, "threads": a.threads,
                   "parameters": int(n_params), "comm": "chainermn naive (mpi4py)" if comm else None,
                   "import_done": T_IMPORT, "step_s": times}, f)


if __name__ == "__main__":
    main()
