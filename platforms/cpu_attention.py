"""Attention over packed sequences that costs what the sequences cost: ``attn_implementation="kit_packed_sdpa"``.

Why: with ``use_remove_padding=True`` verl packs a micro-batch's sequences into one row and tells them apart by their
``position_ids`` (each restarts at 0). FlashAttention's varlen kernel (CUDA, NPU) then attends within each sequence;
transformers' ``sdpa`` instead builds a block-diagonal causal mask over the whole row and attends densely through it,
so the work grows with the square of the *packed* length. On the CPU that is most of an RL update: one forward and
backward of SmolLM2-135M over 16 packed sequences of 150 tokens took 34.7 s with sdpa's mask and 20.2 s for the same
tokens as a padded batch (1 core, scripts/bench_learn_speed.py measures it in the learning check). This
implementation splits the row at the sequence starts and runs sdpa's causal kernel on each sequence alone: the same
numbers (tests/test_cpu_attention.py compares them with the masked sdpa), without the quadratic waste.

Registered on import (``VERL_USE_EXTERNAL_MODULES`` names this module in every verl process of a CPU run, from the
cpu platform's environment, ``platforms/cpu.py``): the attention function and its mask function, which asks for no
mask when the batch has no padding (the packed case) and is sdpa's own otherwise. Anything but a packed row
(padding, a KV cache, several rows) goes to sdpa unchanged. It lives in the platform layer because it is the cpu
platform's choice and the platform names it; it imports only its registered name from ``platforms/cpu.py``, which
never imports it (verl does, by the name ``PACKED_ATTENTION_MODULE``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from platforms.cpu import PACKED_ATTENTION as NAME


def sequence_starts(position_ids: torch.Tensor) -> list[int]:
    """Where each packed sequence begins in a ``(1, total)`` row of position ids: every position that is 0."""
    starts = (position_ids[0] == 0).nonzero().flatten().tolist()
    return starts if starts and starts[0] == 0 else [0, *starts]


def packed_sdpa_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """sdpa, one causal call per packed sequence; ``query``/``key``/``value`` are (batch, heads, tokens, dim)."""
    position_ids = kwargs.get("position_ids")
    packed = (
        attention_mask is None
        and position_ids is not None
        and query.shape[0] == 1
        and query.shape[2] == key.shape[2] == position_ids.shape[-1]
    )
    if not packed:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    bounds = [*sequence_starts(position_ids), query.shape[2]]
    parts = [
        sdpa_attention_forward(
            module, query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], None, dropout, scaling, True, **kwargs
        )[0]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return torch.cat(parts, dim=1), None  # sdpa's output is (batch, tokens, heads, dim)


def packed_sdpa_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """No mask for a batch without padding (the attention builds each sequence's causal block itself); sdpa's mask
    otherwise. ``attention_mask`` is the 2D padding mask transformers hands every mask function."""
    padding = kwargs.get("attention_mask")
    if padding is None or bool(padding.all()):
        return None
    return sdpa_mask(*args, **kwargs)


ALL_ATTENTION_FUNCTIONS.register(NAME, packed_sdpa_attention_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, packed_sdpa_mask)
