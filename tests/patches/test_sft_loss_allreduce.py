"""Patch: the SFT trainer averages train/val loss over data-parallel ranks on CPU too.

Unpatched 0.6.1 reduces with ReduceOp.AVG on CUDA, SUM + divide on NPU and not at all otherwise, so on CPU (gloo)
every rank logs its own local loss. The check runs ``FSDPSFTTrainer.training_step`` and ``validation_step`` in a
2-process gloo group with a different loss on each rank.
"""

from __future__ import annotations

from kit_testing import run_ranks

RANK_CODE = """
import os, torch, torch.distributed as dist
from omegaconf import OmegaConf
from tensordict import TensorDict
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
from torch.distributed.device_mesh import init_device_mesh
from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

rank = dist.get_rank()
local_loss = float(rank + 1)  # rank 0: 1.0, rank 1: 2.0 -> mean 1.5
trainer = FSDPSFTTrainer.__new__(FSDPSFTTrainer)  # only what the two steps touch
trainer.device_mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
trainer.device_name = "cpu"
trainer.config = OmegaConf.create(
    {"data": {"micro_batch_size_per_gpu": 1}, "model": {"strategy": "fsdp2"}, "optim": {"clip_grad": 1.0}}
)
trainer.fsdp_model = torch.nn.Linear(2, 1)
trainer.optimizer = torch.optim.SGD(trainer.fsdp_model.parameters(), lr=0.0)
trainer.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda step: 1.0)

def fake_loss(batch, do_backward=True, n_micro_batches=1):
    loss = trainer.fsdp_model.weight.sum() * 0 + local_loss / n_micro_batches
    if do_backward:
        loss.backward()
    return loss

trainer._compute_loss_and_backward = fake_loss
val_loss = trainer.validation_step(batch=None).item()
assert abs(val_loss - 1.5) < 1e-6, f"val loss not averaged over ranks: rank {rank} got {val_loss}"
metrics = trainer.training_step(TensorDict({"x": torch.zeros(2, 1)}, batch_size=2))
train_loss = metrics["train/loss"]
assert abs(train_loss - 1.5) < 1e-6, f"train loss not averaged over ranks: rank {rank} got {train_loss}"
dist.destroy_process_group()
"""


def check_sft_loss_allreduce_on_gloo() -> None:
    run_ranks(RANK_CODE)


def test_patched() -> None:
    check_sft_loss_allreduce_on_gloo()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_sft_loss_allreduce_on_gloo", match="loss not averaged over ranks")
