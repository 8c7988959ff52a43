#!/usr/bin/env python3
"""A Lightning Trainer (DDP) script under `srun --dpt` (or `dpt-launch`) -- nothing
dpt-specific but reading devices and num_nodes from the environment.

Lightning 2.2 and later choose TorchElasticEnvironment before SLURMEnvironment: they take
RANK (the rank's position on dpt's planned ring), WORLD_SIZE, LOCAL_RANK, GROUP_RANK,
MASTER_ADDR (the node of plan rank 0) and MASTER_PORT from what dpt sets, so NCCL's (or
gloo's) ring follows the plan.  Older Lightning picks SLURMEnvironment under srun (ranks
by SLURM_PROCID: Slurm's order): pass plugins=[TorchElasticEnvironment()] there.
devices and num_nodes must be the ranks per node and the nodes: LOCAL_WORLD_SIZE and
GROUP_WORLD_SIZE.  On GPUs Lightning uses the LOCAL_RANK-th visible GPU; with Slurm's
--gpus-per-node (the node's GPUs visible) that is the plan's GPU, DPT_CUDA_DEVICE: dpt
numbers a node's ranks in the order of its GPUs.

    srun --dpt python3 train_lightning.py [--steps N] [--batch B] [--width W]
"""
import argparse
import os
import socket
import sys
import time

import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(pl.LightningModule):
    if torch.__version__ < "2.1" and sys.version_info >= (3, 11):
        def _register_sharded_tensor_state_dict_hooks_if_available(self):
            """torch < 2.1 cannot import torch.distributed._shard on Python 3.11 (Debian 12's
            torch 1.13): no sharded tensors here, so no hooks for them."""

    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch, _):
        x, y = batch
        return self.loss_fn(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01 * self.trainer.world_size, momentum=0.9)


class Speed(pl.Callback):
    def __init__(self, batch):
        self.batch, self.t0, self.n = batch, None, 0

    def on_train_batch_end(self, trainer, *_):
        if self.t0 is None:  # the first step builds DDP's buckets
            self.t0 = time.time()
        else:
            self.n += 1

    def on_train_end(self, trainer, pl_module):
        if trainer.global_rank == 0 and self.n:
            print(f"{self.n} steps, {self.n * self.batch * trainer.world_size / (time.time() - self.t0):.0f} "
                  f"samples/s", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--width", type=int, default=1024)
    a = ap.parse_args()

    torch.manual_seed(0)
    trainer = pl.Trainer(accelerator="gpu" if torch.cuda.is_available() else "cpu", strategy="ddp",
                         devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                         num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")), max_steps=a.steps,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Speed(a.batch)])
    print(f"rank {trainer.global_rank}/{trainer.world_size} local {trainer.local_rank} on "
          f"{os.environ.get('SLURMD_NODENAME') or socket.gethostname()} "
          f"({type(trainer.strategy.cluster_environment).__name__}, rendezvous "
          f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')})", flush=True)
    x = torch.randn(a.batch * a.steps, a.width)
    y = torch.randint(0, 10, (a.batch * a.steps,))
    trainer.fit(MLP(a.width), DataLoader(TensorDataset(x, y), batch_size=a.batch))
    # Lightning leaves the process group up.  Left to the interpreter's exit, gloo's worker
    # threads can still hold work when it is torn down: the rank aborts ("terminate called
    # without an active exception") after a good fit and srun reports the step failed.
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
