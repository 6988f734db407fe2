"""The kit's stacks as values: one :class:`Stack` object per stack holds every way the kit differs between them.

A *stack* is a verl release with the vLLM family it runs on, and the pins that go with them (``pins.env``): the
reference stack ``0.6.1`` (verl 0.6.1, vLLM/vllm-ascend 0.11.0; verl-recipe's retool requires it and the published
ReTool numbers come from it) and the current stack ``0.9.1`` (verl 0.9.1, vLLM/vllm-ascend 0.23.0). Each object below
names its verl's facts (:mod:`platforms.verl_facts`: the reward key, the SFT entry and keys, the reference-policy API,
the tool registry, the platform registry), its venv, its verl tree, its patch series, its image tag, its tiny model's
width and its own tests. Adding a stack is adding one object here and its ``V<digits>_`` keys in pins.env.

Which stack a command serves is decided **once**, at its entry point (:func:`resolve`: ``--stack``, else
``KIT_STACK``, else the stack whose verl this interpreter has, else the default), and the object is handed down
(``Plan.stack``, the platform's override methods, the launcher's modules take it as an argument). Library code never
reads ``KIT_STACK``; an entry point exports it (:func:`export`) so the processes it starts serve the same stack.
Modelled on vLLM's ``vllm/platforms/interface.py``: facts as fields of one object per kind, not branches at the use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from platforms import pins
from platforms.cli_errors import UsageError
from platforms.verl_facts import SFT_NODE, SFT_ROLES, VERL_061, VERL_091, VerlFacts

__all__ = ["SFT_NODE", "SFT_ROLES", "ENV_VAR", "Stack", "VerlFacts", "STACKS", "get", "resolve", "export"]

KIT_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "KIT_STACK"


@dataclass(frozen=True)
class Stack:
    """One stack: its name (the verl version it is built on), its verl's facts, and where its things live."""

    name: str
    verl: VerlFacts
    venv_name: str  # the stack's venv at the repo root (the test command builds it)
    folder_suffix: str  # its patched verl tree build/verl<suffix>, and its per-stack caches (the SmolLM2 folder)
    patch_subdir: str  # its `git am` series, relative to the repo root
    image_tag_suffix: str  # appended to a profile's kit image tag (docker/build.sh --stack)
    #: The hidden size of the main job's tiny model (``--fast``): its head_dim (hidden / 4) must be one the stack's vLLM
    #: CPU attention takes.
    tiny_hidden_size: int
    #: The KV block size (tokens) at which the stack's vLLM CPU build serves RL with prefix caching on; None: the
    #: ``cpu`` platform turns prefix caching off (:meth:`platforms.cpu.CpuPlatform.prefix_caching_overrides`).
    vllm_cpu_prefix_block: int | None
    #: Hydra choices the recipes need on this stack beyond their defaults list (which is written for the reference).
    config_choices: tuple[str, ...]
    tests_dir: str  # its own tests (the default run of scripts/test.sh --stack NAME); "" = the whole suite
    pins_prefix: str  # its keys in pins.env: V091_VERL_VERSION stands in for VERL_VERSION ("" = the plain keys)

    @cached_property
    def pins(self) -> dict[str, str]:
        return pins.for_prefix(self.pins_prefix)

    @property
    def venv(self) -> Path:
        return KIT_ROOT / self.venv_name

    @property
    def verl_tree(self) -> Path:
        return KIT_ROOT / "build" / f"verl{self.folder_suffix}"

    @property
    def patch_dir(self) -> Path:
        """``patches/`` keeps meaning the reference series (`git am patches/*.patch`); another lives beside it."""
        return KIT_ROOT / self.patch_subdir

    @property
    def is_default(self) -> bool:
        """The stack a command serves when nothing names one (pins.env KIT_DEFAULT_STACK)."""
        return self.name == default_name()

    @property
    def cli_option(self) -> str:
        """`` --stack NAME`` for a command printed for this stack to run again, empty for the default stack, which a
        command without the option already means (on a host whose interpreter holds no other stack's verl)."""
        return "" if self.is_default else f" --stack {self.name}"

    def vllm_cache_root(self, environ: Mapping[str, str]) -> str:
        """Where this stack's vLLM keeps its caches: vLLM's default root (``$XDG_CACHE_HOME/vllm``, else
        ``~/.cache/vllm``, vllm/envs.py ``VLLM_CACHE_ROOT``) with :attr:`folder_suffix`, so the reference keeps
        vLLM's own path. Why per stack: both vLLMs file a model class's probed facts under the same name
        (``modelinfos/<module>-<class>.json``, vllm 0.11 model_executor/models/registry.py:434-440, 0.23 :828-833),
        each stamped with its own source's hash, so running the stacks in turn makes each miss the other's entry and
        probe again in a fresh interpreter. A leading ``~`` stays for vLLM to expand on each node."""
        base = environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
        return f"{base.rstrip('/')}/vllm{self.folder_suffix}"

    def pin(self, key: str) -> str:
        if key not in self.pins:
            raise KeyError(f"{key} is not pinned for stack {self.name} in pins.env")
        return self.pins[key]

    def python_requirements(self) -> dict[str, str]:
        """PY_PINS as {distribution name: exact version}."""
        return pins.requirements(self.pin("PY_PINS"))

    def describe(self) -> str:
        """One line for tables and errors: which verl, which vLLM, which CANN."""
        return (
            f"stack {self.name}: verl {self.pin('VERL_VERSION')}, vLLM {self.pin('VLLM_VERSION')}"
            f" (vllm-ascend {self.pin('VLLM_ASCEND_VERSION')}, CANN {self.pin('CANN_VERSION')})"
        )

    def shell_view(self) -> dict[str, str]:
        """What the shell entry points set for this stack (scripts/lib/stack.sh evaluates it): its pins, and where
        its venv, verl tree, series and tests are: the shell's one reader of stacks is this one."""
        return {
            **self.pins,
            ENV_VAR: self.name,
            "KIT_VENV": str(self.venv),
            "KIT_VERL_TREE": str(self.verl_tree),
            "KIT_PATCH_DIR": str(self.patch_dir),
            "KIT_STACK_TESTS": self.tests_dir,
            "KIT_STACKS": " ".join(STACKS),
            "KIT_DEFAULT_STACK": default_name(),
        }


REFERENCE = Stack(
    name="0.6.1",
    verl=VERL_061,
    venv_name=".venv",
    folder_suffix="",
    patch_subdir="patches",
    image_tag_suffix="",
    # vLLM 0.11's CPU path runs a 64-wide model (head_dim 16), the one the reference's measurements were taken on
    # (docs/measurements/fast_pipeline.yaml)
    tiny_hidden_size=64,
    # kit: off. vLLM 0.11's CPU build decodes through IPEX, whose kernel dies ("Sliding window unsupported", vllm/v1/
    # attention/backends/cpu_attn.py:909) when a decode batch's sequences share cached blocks, as GRPO groups do
    # (tests/cpu/test_cpu_grpo_prefix_groups.py); without IPEX its prefix-cached prefill cannot run (:596)
    vllm_cpu_prefix_block=None,
    config_choices=(),
    tests_dir="",
    pins_prefix="",
)
CURRENT = Stack(
    name="0.9.1",
    verl=VERL_091,
    venv_name=".venv-0.9.1",
    folder_suffix="-0.9.1",  # kit: SmolLM2's fingerprint holds the transformers version: one folder per stack
    patch_subdir="patches/0.9.1",
    image_tag_suffix="-verl0.9.1",
    # kit: vLLM 0.23's CPU attention takes head sizes 32, 64, 80, ... only (vllm/v1/attention/backends/cpu_attn.py:
    # 62-63, CPU_ATTN.get_supported_head_sizes): 128 wide, head_dim 32
    tiny_hidden_size=128,
    # kit: on, in blocks of 32. vLLM 0.23's CPU attention is its own, without IPEX (vllm/v1/attention/backends/
    # cpu_attn.py), and takes blocks in multiples of 32 (vllm/platforms/cpu.py:124-129); its default of 128 is longer
    # than a learning-check turn (prompt ~89 tokens + a call ~30), so a turn's sequence would fill no block for the
    # next turn to reuse. verl 0.9.1 clears the cache after every weight sync (vllm_rollout.py:247-249). Measured on
    # 2 cores: the learning check's generation 46.4 s -> 30.1 s a step, its validation 72.5 s -> 46.4 s, the weight
    # sync's witness as clean (docs/measurements/learn_prefix_cache.yaml)
    vllm_cpu_prefix_block=32,
    # the recipes' `stack` group: which SFT trainer config the SFT recipes extend (recipes/config/verl_sft/)
    config_choices=("stack=0.9.1",),
    tests_dir="tests/stack091",
    pins_prefix="V091_",
)
#: Every stack by name, the reference first.
STACKS: Mapping[str, Stack] = {stack.name: stack for stack in (REFERENCE, CURRENT)}


def names() -> tuple[str, ...]:
    return tuple(STACKS)


def default_name() -> str:
    """pins.env's KIT_DEFAULT_STACK: what a command serves when nothing names a stack."""
    return pins.load()["KIT_DEFAULT_STACK"]


def _unknown(name: str, where: str) -> UsageError:
    return UsageError(f"unknown stack {name!r} ({where})", f"choose one of {', '.join(STACKS)}")


def get(name: str) -> Stack:
    """The stack called ``name``; another name is a usage error (one line, exit 2 at any command's boundary)."""
    if name not in STACKS:
        raise _unknown(name, "--stack")
    return STACKS[name]


def installed_name() -> str | None:
    """The stack whose verl this interpreter has (package metadata: verl is not imported), None for none or another."""
    version = (pins.installed_verl() or "").split("+")[0]
    return next((s.name for s in STACKS.values() if version and version == s.pin("VERL_VERSION")), None)


def resolve(flag: str | None = None, environ: Mapping[str, str] | None = None) -> Stack:
    """The stack a command serves, by the documented order: ``flag`` (``--stack``), else ``environ``'s
    ``KIT_STACK``, else the stack whose verl this interpreter has, else the default. Called once per entry point."""
    environ = os.environ if environ is None else environ
    if flag:
        return get(flag)
    chosen = environ.get(ENV_VAR, "").strip()
    if chosen:
        if chosen not in STACKS:
            raise _unknown(chosen, ENV_VAR)
        return STACKS[chosen]
    return STACKS[installed_name() or default_name()]


def flag_in(argv: Sequence[str]) -> str | None:
    """The value of ``--stack NAME`` / ``--stack=NAME`` among ``argv`` (the last one), None when absent: for entry
    points whose help texts show the chosen stack's facts, so must know it before the parser is built."""
    found = None
    for i, word in enumerate(argv):
        if word == "--stack" and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith("--stack="):
            found = word.split("=", 1)[1]
    return found


def export(stack: Stack) -> Stack:
    """An entry point's last step of choosing: the processes it starts (verl, its Ray workers, a child command)
    serve the same stack. The only write of ``KIT_STACK`` in the kit's Python."""
    os.environ[ENV_VAR] = stack.name
    return stack


def installed_problem(stack: Stack) -> str | None:
    """Why this interpreter cannot serve ``stack``: its verl is another version (None when it matches, or when no
    verl is installed: what needs verl then fails on its own)."""
    version = pins.installed_verl()
    if version is None or version.split("+")[0] == stack.pin("VERL_VERSION"):
        return None
    return (
        f"stack {stack.name} needs verl {stack.pin('VERL_VERSION')}, but this Python ({sys.executable}) has "
        f"verl {version}"
    )


def venv_hint(stack: Stack) -> str:
    """How to get an interpreter for ``stack``: its venv (built on first use by the test command) or its image."""
    return (
        f"use the stack's venv {stack.venv_name}/ (bash scripts/test.sh --stack {stack.name} --venv builds it), "
        f"or the image of docker/build.sh --stack {stack.name}"
    )
