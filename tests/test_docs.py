"""The README is the door and docs/ the manual; these checks keep every page true, as tests/test_readme.py keeps the
README's versions true.

- The README stays a door: at most 350 lines, what the kit is, the support matrix and the two commands on its first
  screen, every docs page linked from it and from docs/README.md, each page opening with what it is for.
- Every relative link and ``#anchor`` resolves: the file (or folder) exists, the anchor is a heading of that page
  (GitHub's slugs).
- Every command a ``bash`` block shows (and every ``$ `` line of a ``text`` block) exists and parses: a script exists,
  passes ``bash -n`` and lists each long option it is given in its ``--help``; a ``retool-*`` command is declared in
  pyproject.toml and lists each option in its (subcommand's) ``--help``; a ``python -m`` module exists. One ``--help``
  run per distinct command.
- Every time or size a page quotes (``12 s``, ``5.1 min``, ``9.42 GB``, ``1,362 tests``) names the measurement it comes
  from: its paragraph or table row, the paragraph that introduces its table or block (one ending in ``:``), or its
  section's first paragraph says "measured" with the machine (``2 cores``) or a pointer to the test, bench or record
  that produced it. The few figures that are settings or specifications, not measurements, are listed in
  ``NOT_MEASURED`` with the reason.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
from kit_testing import REPO_ROOT, kit_env

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 350
#: what "the first screen" holds at most
FIRST_SCREEN_LINES = 60


def _ids(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


# ------------------------------------------------------------------------------------------------ markdown reading

FENCE = re.compile(r"^\s*```")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")


@dataclass(frozen=True)
class Block:
    """One unit of a page: a paragraph or list, a table row, a fenced block or a heading."""

    kind: str  # text | row | fence | heading
    text: str
    line: int  # first line, 1-based
    lang: str = ""  # a fence's language


def blocks(text: str) -> list[Block]:
    """The page's units in order; a table is one ``row`` unit per body row (its header and rule are left out)."""
    out: list[Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            lang = line.strip()[3:].strip()
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            out.append(Block("fence", "\n".join(lines[i + 1 : j]), i + 1, lang))
            i = j + 1
        elif HEADING.match(line):
            out.append(Block("heading", line, i + 1))
            i += 1
        elif line.lstrip().startswith("|"):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                if j > i + 1:  # the header row and the |---| rule name no figures
                    out.append(Block("row", lines[j], j + 1))
                j += 1
            i = j
        elif line.strip():
            j = i
            while j < len(lines) and lines[j].strip() and not FENCE.match(lines[j]) and not HEADING.match(lines[j]):
                if lines[j].lstrip().startswith("|"):
                    break
                j += 1
            out.append(Block("text", "\n".join(lines[i:j]), i + 1))
            i = j
        else:
            i += 1
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets ``-1``, ``-2``, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for block in blocks(text):
        if block.kind == "heading":
            match = HEADING.match(block.text)
            assert match
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


# ------------------------------------------------------------------------------------------------ the door


def test_readme_is_a_door_not_a_manual() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the door takes {README_MAX_LINES}"


def test_readme_first_screen_says_what_and_how() -> None:
    """What the kit is (its title and first paragraphs), the support matrix and the two commands, without scrolling."""
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN_LINES])
    for shown in ("## Support matrix", "```bash\nbash scripts/smoke.sh\n```", "```bash\nbash scripts/test.sh\n```"):
        assert shown in first, f"{shown!r} is not on the README's first screen ({FIRST_SCREEN_LINES} lines)"


def test_every_docs_page_is_linked_from_the_readme_and_the_index() -> None:
    readme, index = README.read_text(), (DOCS / "README.md").read_text()
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=_ids)
def test_each_page_says_what_it_is_for(page: Path) -> None:
    text = page.read_text()
    first = next((block for block in blocks(text) if block.kind != "heading"), None)
    opening = first.text if first is not None and first.kind == "text" else ""
    assert text.startswith("# "), f"{_ids(page)} must start with its title"
    assert opening.startswith("This page is"), f"{_ids(page)}: its first paragraph must say what the page is for"


# ------------------------------------------------------------------------------------------------ links

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def link_problems(path: Path, text: str | None = None) -> list[str]:
    """The links of ``path`` (its ``text``, when given) that do not resolve."""
    problems = []
    text = path.read_text() if text is None else text
    for block in blocks(text):
        if block.kind == "fence":
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", block.text)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve()
            where = f"{_ids(path)}:{block.line}: {target}"
            if not file:
                if anchor not in anchors(text):
                    problems.append(f"{where}: no heading #{anchor} on this page")
            elif not dest.exists():
                problems.append(f"{where}: {file} does not exist")
            elif REPO_ROOT not in dest.parents and dest != REPO_ROOT:
                problems.append(f"{where}: points outside the kit")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
                problems.append(f"{where}: no heading #{anchor} in {_ids(dest)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_links_and_anchors_resolve(page: Path) -> None:
    assert link_problems(page) == []


# ------------------------------------------------------------------------------------------------ commands

#: programs that are not the kit's: shown, not checked
EXTERNAL = {"git", "pip", "hf", "curl", "docker", "mlflow", "ray", "npu-smi", "source", "export", "cd", "unset"}
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
PROMPT = re.compile(r"^\w*\$$")  # node0$, $
PLACEHOLDER = re.compile(r"<[^<>\s]+>")  # <node0-ip>, <0|1>
SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


@dataclass(frozen=True)
class Shown:
    page: str
    line: int
    text: str


def shown_commands(path: Path, text: str | None = None) -> Iterator[Shown]:
    """Each command line of the page's ``bash`` blocks (continuations joined), and the ``$ `` lines of its ``text``
    blocks."""
    for block in blocks(path.read_text() if text is None else text):
        if block.kind != "fence" or block.lang not in ("bash", "text"):
            continue
        joined = re.sub(r"\\\n\s*", " ", block.text)
        for offset, line in enumerate(joined.split("\n"), start=block.line + 1):
            line = line.strip()
            if block.lang == "text":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line and not line.startswith("#"):
                yield Shown(_ids(path), offset, line)


def split_commands(line: str) -> list[list[str]]:
    """A shell line as its simple commands (words), placeholders as ``X``, ``$(...)`` as a command of its own."""
    line = PLACEHOLDER.sub("X", line)
    inner = SUBSTITUTION.findall(line)
    line = SUBSTITUTION.sub("X", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    for words in commands:
        while words and (PROMPT.match(words[0]) or ENV_ASSIGNMENT.match(words[0])):
            words.pop(0)
    return [words for words in commands if words] + [c for text in inner for c in split_commands(text)]


def _pyproject_scripts() -> dict[str, str]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def _child_env() -> dict[str, str]:
    env = kit_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@functools.cache
def help_text(argv: tuple[str, ...]) -> str:
    """``argv --help``'s output (run once per distinct command)."""
    proc = subprocess.run(
        [*argv, "--help"], cwd=REPO_ROOT, env=_child_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"{' '.join(argv)} --help: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


@functools.cache
def bash_syntax(script: Path) -> str:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    return "" if proc.returncode == 0 else proc.stderr


def console_script(name: str) -> tuple[str, ...]:
    """How to run a ``[project.scripts]`` entry point from this checkout, installed or not."""
    module, _, func = _pyproject_scripts()[name].partition(":")
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import {func} as main; sys.exit(main())"
    return (sys.executable, "-c", code)


def subcommands(help: str) -> list[str]:
    """An argparse program's subcommands: the ``{a,b}`` line of its positional arguments."""
    match = re.search(r"^\s+\{([\w.,-]+)\}", help, re.M)
    return match.group(1).split(",") if match else []


def module_exists(name: str) -> bool:
    top, *rest = name.split(".")
    bases = [REPO_ROOT / top] if (REPO_ROOT / top).is_dir() else []
    if not bases:
        spec = importlib.util.find_spec(top)
        if spec is None:
            return False
        if not rest:
            return True
        bases = [Path(p) for p in spec.submodule_search_locations or []]
    for base in bases:
        path = base.joinpath(*rest)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file() or (path / "__main__.py").is_file():
            return True
    return False


def options_missing(words: list[str], help: str) -> list[str]:
    """The long options of ``words`` its help does not list (up to a ``--``, after which a command of its own runs)."""
    missing = []
    for word in words:
        if word == "--":
            break
        option = word.split("=", 1)[0]
        if re.fullmatch(r"--[\w-]+", option) and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help):
            missing.append(option)
    return missing


def command_problems(words: list[str]) -> list[str]:
    """What is wrong with one simple command as the docs show it; [] when it exists and takes its options."""
    first, args = words[0], words[1:]
    inner = args[args.index("--") + 1 :] if "--" in args else []
    problems = command_problems(inner) if inner else []
    if first in EXTERNAL:
        return problems
    if first == "bash" or first.endswith(".sh"):
        script = args[0] if first == "bash" and args else first
        args = args[1:] if first == "bash" else args
        relative = script.removeprefix("KIT/")
        path = REPO_ROOT / relative
        if not path.is_file():
            return [*problems, f"{script}: no such script in the kit"]
        if syntax := bash_syntax(path):
            return [*problems, f"{script}: bash -n: {syntax}"]
        missing = options_missing(args, help_text(("bash", relative)))
        return problems + [f"{script}: {option} is not in its --help" for option in missing]
    if first.startswith("retool-"):
        if first not in _pyproject_scripts():
            return [*problems, f"{first}: not a console script of pyproject.toml"]
        argv = console_script(first)
        choices = subcommands(help_text(argv))
        if choices:
            if not args or args[0] not in choices:
                return [*problems, f"{first}: {args[:1]} is none of its subcommands {choices}"]
            argv, args = (*argv, args[0]), args[1:]
        missing = options_missing(args, help_text(argv))
        return problems + [f"{' '.join([first, *argv[3:]])}: {option} is not in its --help" for option in missing]
    if first in ("python", "python3"):
        if args[:1] == ["-m"] and len(args) > 1:
            return problems if module_exists(args[1]) else [*problems, f"python -m {args[1]}: no such module"]
        if args and args[0].endswith(".py"):
            return problems if (REPO_ROOT / args[0]).is_file() else [*problems, f"{args[0]}: no such file"]
    return [*problems, f"{first}: not a command of the kit, nor one listed in EXTERNAL"]


def page_command_problems(path: Path, text: str | None = None) -> list[str]:
    problems = []
    for shown in shown_commands(path, text):
        if "..." in shown.text.split("#")[0]:
            continue  # an elided command (`...` stands for the rest), not one to run as shown
        for words in split_commands(shown.text):
            problems += [f"{shown.page}:{shown.line}: {problem}" for problem in command_problems(words)]
    return problems


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_command_shown_exists_and_takes_its_options(page: Path) -> None:
    assert page_command_problems(page) == []


def test_the_pages_show_commands() -> None:
    """The check above reads something: the README's doors and the pages show the kit's commands."""
    shown = [words[0] for page in PAGES for s in shown_commands(page) for words in split_commands(s.text)]
    assert {"bash", "retool-sandbox", "retool-doctor", "python", "docker/build.sh", "docker/run_npu.sh"} <= set(shown)
    assert len(shown) > 100


# ------------------------------------------------------------------------------------------------ numbers

FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)? ?(?:s|min|minutes|seconds|GB|MB|TB|GiB|MiB|GFLOPS)\b|(?<![\w.])\d[\d,]* tests\b"
)
MEASURED = re.compile(r"\bmeasured\b", re.I)
MACHINE = re.compile(r"\b\d+(?:[\s-][\w-]+)?\s+cores?\b|\b\d+-core\b|\bdocker(?:\.io)? \d")
POINTER = re.compile(
    r"tests/[\w/.-]+\.py|scripts/bench_\w+|\bbench_learn\b|summary\.json|\bissue \d+|measurements/[\w.-]+\.yaml"
)

#: figures that are settings or specifications, not measurements: the text around them (a regex whose match must
#: cover the figure) -> why it needs no measurement
NOT_MEASURED = {
    r"\d+ GB each|× \d+ GB": "memory per device: the hardware's specification (support matrix)",
    r"~\d+ of \d+ GB per device": "the dry run's memory estimate (named beside it) against the device's 64 GB",
    r"~393\.2 GB each": "the dry run's `checkpoint disk` estimate (named beside it; tests/test_measurements.py "
    "computes it)",
    r"\b1024 MB\b": "the tool's memory limit: SandboxFusion's and the reference's setting",
    r"\b4 GiB default": "the sandbox's default memory limit, a setting",
    r"100 GB /dev/shm": "the NPU run script's /dev/shm size, a setting",
    r"`KIT_RESTART_NODE_WAIT_S`,? \(?600 s|not whole after 600 s": "the restart supervisor's wait, a setting",
    r"port 1 s after|within 60 s": "the keep-alive supervisor's restart delay and give-up window, settings",
    r"CI's 60 minutes": "CI's time budget, a limit",
    r"\b503s\b": "HTTP status 503, not seconds",
    r"~540 MB": "SmolLM2-135M's fp32 weights (135M parameters × 4 bytes), a property of the model",
    r"~256 GB of host memory per A3 node, ~128 GB per A2 node": "planning guidance for offload (no measurement "
    "found: kept as written)",
    r"about 64 MB, scipy 35 MB": "download size of the pinned wheels, a property of the files (no measurement found)",
}


def _sourced(text: str) -> bool:
    return bool(MEASURED.search(text) and (MACHINE.search(text) or POINTER.search(text)))


def _allowed(text: str, start: int, end: int) -> bool:
    return any(m.start() <= start and end <= m.end() for rx in NOT_MEASURED for m in re.finditer(rx, text))


def in_context(text: str) -> Iterator[tuple[Block, str, str]]:
    """Each non-heading block of ``text`` with what may name its source: its caption (a table's: the text block before
    it, ending in ':') and its section's first paragraph. tests/test_measurements.py reads figures the same way."""
    found = blocks(text)
    section_intro = ""
    for i, block in enumerate(found):
        if block.kind == "heading":
            following = next((b for b in found[i + 1 :] if b.kind != "heading"), None)
            section_intro = following.text if following is not None and following.kind == "text" else ""
            continue
        j = i  # a table row's caption is the block before its table
        while block.kind == "row" and j > 0 and found[j - 1].kind == "row":
            j -= 1
        previous = found[j - 1] if j > 0 else None
        caption = previous.text if previous and previous.kind == "text" and previous.text.endswith(":") else ""
        yield block, caption, section_intro


def unsourced_figures(text: str, page: str = "page") -> list[str]:
    """The figures of ``text`` that name no measurement: their unit, the unit's caption (the text block before it,
    ending in ':') and their section's first paragraph say nothing of one."""
    problems = []
    for block, caption, section_intro in in_context(text):
        flat = " ".join(block.text.split())  # a phrase may wrap
        figures = [m for m in FIGURE.finditer(flat) if not _allowed(flat, m.start(), m.end())]
        if not figures:
            continue
        if any(_sourced(" ".join(context.split())) for context in (block.text, caption, section_intro)):
            continue
        shown = ", ".join(repr(m.group(0)) for m in figures)
        problems.append(f"{page}:{block.line}: {shown} names no measurement (say 'measured' with the machine or test)")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_every_figure_names_its_measurement(page: Path) -> None:
    assert unsourced_figures(page.read_text(), _ids(page)) == []


# ------------------------------------------------------------------------------------------------ the checks fail


def test_the_checks_catch_what_they_are_for() -> None:
    """Each check fails on the mistake it is for: a broken link or anchor, an unknown option or script, a figure
    without its measurement."""
    page = DOCS / "_probe.md"  # read as if it were a page of docs/; never written
    page_text = (
        "# Probe\n\n[a](recipes.md#no-such-heading) [b](no-such-page.md) [c](main-job.md#cpu-runs)\n\n"
        "```bash\nbash scripts/smoke.sh --no-such-option\nretool-sandbox serve --port 8080 --nope\n"
        "bash scripts/no_such.sh\nretool-nothing --x\npython -m recipes.no_such_module\n```\n"
    )
    links = link_problems(page, page_text)
    commands = page_command_problems(page, page_text)
    assert [p.split(": ", 1)[1] for p in links] == [
        "recipes.md#no-such-heading: no heading #no-such-heading in docs/recipes.md",
        "no-such-page.md: no-such-page.md does not exist",
    ]
    assert [p.split(": ", 1)[1] for p in commands] == [
        "scripts/smoke.sh: --no-such-option is not in its --help",
        "retool-sandbox serve: --nope is not in its --help",
        "scripts/no_such.sh: no such script in the kit",
        "retool-nothing: not a console script of pyproject.toml",
        "python -m recipes.no_such_module: no such module",
    ]
    figures = (
        "# T\n\nIntro.\n\nA step took 12.5 s and 3 min.\n\nMeasured on 2 cores: 9 s.\n\n"
        "See below:\n\n| a |\n|---|\n| 4 GB |\n"
    )
    assert unsourced_figures(figures) == [
        "page:5: '12.5 s', '3 min' names no measurement (say 'measured' with the machine or test)",
        "page:13: '4 GB' names no measurement (say 'measured' with the machine or test)",
    ]
    assert unsourced_figures("# T\n\nMeasured by tests/x.py:\n\n| a |\n|---|\n| 4 GB |\n") == []
