"""Patch: ``topk_reduce_ratio_min_max`` all-gathers a shape-(1,) tensor instead of a 0-d one.

NCCL tolerates gathering a 0-d tensor into shape-(1,) buffers, gloo does not: on CPU every sync-mode
``generate_sequences`` of the FSDP worker fails with "ProcessGroupGloo::allgather: invalid tensor size".
"""

from __future__ import annotations

from kit_testing import run_ranks

RANK_CODE = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
from verl.utils.profiler.performance import topk_reduce_ratio_min_max
timing = [2.0, 6.0][dist.get_rank()]
ratio, lo, hi = topk_reduce_ratio_min_max(timing)
assert (lo, hi) == (2.0, 6.0), (lo, hi)
assert ratio == 0.5, ratio  # one rank of two is above the 90th percentile
dist.destroy_process_group()
print("RANK_OK", dist.get_rank() if dist.is_initialized() else os.environ["RANK"])
"""


def check_timing_allgather_on_gloo() -> None:
    run_ranks(RANK_CODE)


def test_patched() -> None:
    check_timing_allgather_on_gloo()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(__file__, "check_timing_allgather_on_gloo", match="invalid tensor size")
