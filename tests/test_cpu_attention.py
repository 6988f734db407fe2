"""``kit_packed_sdpa`` (platforms/cpu_attention.py): attention per packed sequence gives sdpa's numbers, forward and
backward, without sdpa's dense block-diagonal mask; everything that is not a packed row is sdpa's.

What would fail: sequences that attend across their boundary (a wrong split), a split that drops or reorders tokens,
a mask function that hides padding, and the cpu platform not naming it (then the CPU trainers compute the quadratic
way again, issue 42).
"""

from __future__ import annotations

import pytest
import torch

from platforms import stacks

pytest.importorskip("transformers")

import platforms.cpu_attention as packed  # noqa: E402  (registers the attention on import)
from platforms import CPU  # noqa: E402
from platforms.cpu import PACKED_ATTENTION, PACKED_ATTENTION_MODULE  # noqa: E402


def _model(attn: str) -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        attn_implementation=attn,
    )
    return Qwen3ForCausalLM(config).float()


def _packed_row(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(0, 128, (1, sum(lengths)))
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    return ids, positions


def test_the_sequence_starts_are_the_zero_positions() -> None:
    _, positions = _packed_row([3, 1, 4])
    assert packed.sequence_starts(positions) == [0, 3, 4]
    assert packed.sequence_starts(torch.arange(5).unsqueeze(0)) == [0]


def test_packed_rows_give_sdpas_logits_and_gradients() -> None:
    ids, positions = _packed_row([7, 1, 12, 5])
    ref, new = _model("sdpa"), _model(PACKED_ATTENTION)
    new.load_state_dict(ref.state_dict())
    outs = []
    for model in (ref, new):
        logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        logits.float().log_softmax(-1).gather(-1, ids.unsqueeze(-1)).mean().backward()
        outs.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (ref_logits, ref_grads), (new_logits, new_grads) = outs
    torch.testing.assert_close(new_logits, ref_logits, rtol=1e-4, atol=1e-5)
    for got, want in zip(new_grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_sequences_do_not_see_each_other() -> None:
    """Changing the first sequence leaves the second one's logits as they were: no attention across the boundary."""
    model = _model(PACKED_ATTENTION).eval()
    ids, positions = _packed_row([6, 6])
    changed = ids.clone()
    changed[0, :6] = (changed[0, :6] + 1) % 128
    with torch.no_grad():
        a = model(input_ids=ids, position_ids=positions, use_cache=False).logits
        b = model(input_ids=changed, position_ids=positions, use_cache=False).logits
    torch.testing.assert_close(a[0, 6:], b[0, 6:])
    assert not torch.allclose(a[0, :6], b[0, :6])


def test_a_padded_batch_is_sdpas() -> None:
    ref, new = _model("sdpa").eval(), _model(PACKED_ATTENTION).eval()
    new.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 128, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, use_cache=False).logits
        got = new(input_ids=ids, attention_mask=mask, use_cache=False).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=1e-4, atol=1e-5)


def test_the_cpu_platform_trains_with_it_in_both_phases() -> None:
    assert CPU.attn_implementation == PACKED_ATTENTION
    for phase in ("sft", "rl"):
        modules = {e.name: e.value for e in CPU.env(phase, stacks.REFERENCE, {})}["VERL_USE_EXTERNAL_MODULES"]
        assert PACKED_ATTENTION_MODULE in modules.split(","), (phase, modules)
    assert PACKED_ATTENTION_MODULE == packed.__name__  # the module verl imports is the one that registers it
    assert f"model.attn_implementation={PACKED_ATTENTION}" in CPU.verl_overrides("sft", stacks.REFERENCE)
