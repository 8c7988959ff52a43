#!/usr/bin/env python3
"""A Lightning Trainer program as users write it, started by `srun --dpt` or `dpt-launch`.

    lightning_check.py OUT_DIR

Trainer(accelerator="cpu", strategy="ddp", devices=LOCAL_WORLD_SIZE,
num_nodes=GROUP_WORLD_SIZE) chooses its cluster environment itself: Lightning >= 2.2
puts TorchElasticEnvironment (RANK, WORLD_SIZE, MASTER_ADDR, ... -- what dpt sets,
TORCHELASTIC_RUN_ID marking it) before SLURMEnvironment (SLURM_PROCID: Slurm's
order).  Each rank fits ddp_check.py's model for two steps on its shard of
ddp_check.py's global batches (SGD, lr 0.1, momentum 0.9) and writes
OUT_DIR/rank-<global_rank>.json in ddp_check.py's form, plus the environment class
Lightning chose; the 1e-5 bound against one process on the whole batch is
ddp_check.py's."""
import json
import os
import sys

import pytorch_lightning as pl
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_common import base_record  # noqa: E402
from ddp_check import GLOBAL_BATCH, STEPS, flat, model_and_data, train  # noqa: E402


class Module(pl.LightningModule):
    def _register_sharded_tensor_state_dict_hooks_if_available(self):
        """Debian's torch 1.13 cannot import torch.distributed._shard on Python 3.11 (a
        dataclass with a mutable default); on torch < 2.1 Lightning registers its
        ShardedTensor state-dict hooks from there.  No sharded tensor here: none needed."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()

    def training_step(self, batch, _):
        x, y = batch
        return self.loss_fn(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                         num_nodes=int(os.environ.get("GROUP_WORLD_SIZE", "1")), max_steps=STEPS,
                         use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    rank, world = trainer.global_rank, trainer.world_size
    model, x, y = model_and_data()
    shard = GLOBAL_BATCH // world
    lo = rank * shard
    data = TensorDataset(x[:, lo:lo + shard].reshape(-1, x.shape[2]), y[:, lo:lo + shard].reshape(-1))
    trainer.fit(Module(model), DataLoader(data, batch_size=shard, shuffle=False))
    params = flat(model)
    rec = base_record(rank, world, float(params.double().sum()))
    rec["cluster_environment"] = type(trainer.strategy.cluster_environment).__name__
    rec["node_rank"] = trainer.node_rank
    if rank == 0:
        ref, rx, ry = model_and_data()
        train(ref, rx, ry)
        rec["max_diff_vs_one_process"] = float((params - flat(ref)).abs().max())
        rec["max_move"] = float((flat(ref) - flat(model_and_data()[0])).abs().max())
    allp = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(allp, params)
    rec["max_diff_across_ranks"] = float(max((p - params).abs().max() for p in allp))
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump(rec, f)
    # Lightning leaves the process group up; left to the interpreter's exit, gloo can abort a
    # rank after a good fit ("terminate called without an active exception"): as users must.
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
