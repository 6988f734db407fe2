"""Patch: on CPU ``get_torch_device()`` returns a ``torch.cpu`` wrapper with the calls verl makes through it.

Unpatched 0.6.1 returns the bare ``torch.cpu`` module, which has no ``get_rng_state``/``set_rng_state``/
``manual_seed`` (the FSDP worker's rollout RNG juggling), ``memory_reserved``/``empty_cache``
(``aggressive_empty_cache`` on every rollout/trainer switch) or ``max_memory_allocated`` (actor metrics): the PPO
workers die with
"module 'torch.cpu' has no attribute 'get_rng_state'".
"""

from __future__ import annotations


def check_cpu_device_module() -> None:
    import torch
    from verl.utils.device import get_device_id, get_device_name, get_torch_device
    from verl.utils.flops_counter import get_device_flops
    from verl.utils.memory_utils import aggressive_empty_cache
    from verl.utils.profiler.performance import _get_current_mem_info, log_gpu_memory_usage

    assert get_device_name() == "cpu"
    device = get_torch_device()

    # the RNG dance of ActorRolloutRefWorker._build_rollout / rollout_mode / trainer_mode
    torch.manual_seed(7)
    torch_random_states = device.get_rng_state()
    device.manual_seed(1000)
    gen_random_states = device.get_rng_state()
    device.set_rng_state(torch_random_states)
    trainer_draw = torch.rand(4)
    device.set_rng_state(gen_random_states)  # rollout_mode
    gen_draw = torch.rand(4)
    torch.manual_seed(1000)
    assert torch.equal(gen_draw, torch.rand(4)), "generation RNG state was not the seeded one"
    torch.manual_seed(7)
    assert torch.equal(trainer_draw, torch.rand(4)), "trainer RNG state was not restored"

    # helpers called on every rollout/trainer switch and in the actor metrics
    aggressive_empty_cache(force_sync=True)
    device.empty_cache()
    assert device.max_memory_allocated() / 1024**3 == 0.0
    assert device.max_memory_reserved() / 1024**3 == 0.0

    # torch.cpu's own functions are still there, and the existing `device == torch.cpu` branches still match
    assert device.is_available() and device.current_device() == get_device_id() == "cpu"
    assert device == torch.cpu and torch.cpu == device and device != torch.cuda
    assert _get_current_mem_info() == ("0.00", "0.00", "0.00", "0.00")
    log_gpu_memory_usage("check", logger=None)
    assert get_device_flops(unit="G") == 448.0, get_device_flops(unit="G")
    assert device.get_device_name() == "CPU"


def test_patched() -> None:
    check_cpu_device_module()


def test_unpatched_fails(unpatched_verl) -> None:
    unpatched_verl.expect_failure(
        __file__, "check_cpu_device_module", match="module 'torch.cpu' has no attribute 'get_rng_state'"
    )
