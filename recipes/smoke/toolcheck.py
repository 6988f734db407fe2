"""The tool-call check between SFT and RL: does the SFT model open its answer with a well-formed tool call?

Why: the RL stage only exercises the tool and the sandbox if the policy emits calls verl's hermes parser accepts; a
model that never does makes RL a silent no-op for the tool. Sampling it here, before RL, names the cause early.
Runs in the pipeline's own process on the CPU (``torch`` and ``transformers`` are imported only when called).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def tool_call_rate(
    model_dir: Path,
    parquets: Sequence[Path],
    samples: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    max_prompts: int = 16,
) -> dict[str, Any]:
    """How often the model opens its answer with a tool call verl's hermes parser accepts (and names our tool).

    Prompts are rendered exactly as ToolAgentLoop renders them (chat template with the tool schema, generation
    prompt); ``samples`` completions per prompt at ``temperature`` (1.0 = the RL rollout's) plus one greedy one, for
    the first ``max_prompts`` prompts (HF generation on the CPU: 64 prompts of the learning check took 98 s).
    """
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recipes.retool.evaluate import parse_tool_calls
    from recipes.retool.schema import TOOL_NAME, TOOL_SCHEMA

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts = [
        tokenizer.apply_chat_template(row["prompt"], tools=[TOOL_SCHEMA], add_generation_prompt=True, tokenize=False)
        for file in parquets
        for row in pq.read_table(file, columns=["prompt"]).to_pylist()
    ][:max_prompts]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    stop = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    common = dict(max_new_tokens=max_new_tokens, eos_token_id=stop, pad_token_id=tokenizer.pad_token_id)
    width = batch["input_ids"].shape[1]
    torch.manual_seed(seed)
    with torch.no_grad():
        sampled = model.generate(
            **batch, do_sample=True, temperature=temperature, top_p=1.0, top_k=0, num_return_sequences=samples, **common
        )
        greedy = model.generate(**batch, do_sample=False, **common)

    def ok(ids: Any) -> tuple[bool, str]:
        text = tokenizer.decode(ids[width:], skip_special_tokens=False)
        return parse_tool_calls(text, TOOL_NAME)[1] > 0, text

    sampled_ok = [ok(ids) for ids in sampled]
    greedy_ok = [ok(ids) for ids in greedy]
    hits = sum(flag for flag, _ in sampled_ok)
    return {
        "prompts": len(prompts),
        "samples": len(sampled_ok),
        "well_formed": hits,
        "rate": hits / len(sampled_ok),
        "greedy_rate": sum(flag for flag, _ in greedy_ok) / len(greedy_ok),
        "temperature": temperature,
        "example": greedy_ok[0][1].replace("<|endoftext|>", ""),
    }
