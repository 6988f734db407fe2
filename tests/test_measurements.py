"""Numbers from measurements (issue 44): the times, sizes and counts the README, ``docs/`` and the ``--help`` texts
quote come from record files, ``docs/measurements/*.yaml`` (what was measured, the command, the commit, the date, the
machine, and the numbers as the texts quote them), and the texts name the file.

- A named record exists: every ``docs/measurements/...`` a page, a help text or a recipe config names, and every
  ``tests/...`` or ``scripts/...`` file a help text names.
- A quoted number agrees with its record: in a paragraph or table row that names a record (itself, the paragraph that
  introduces its table, one ending in ``:``, or its section's first paragraph), every figure (``592 s``, ``9.9 min``,
  ``1,350 tests``, ``107 GFLOPS``, ``0.53 → 0.94``, ``55% → 97%``) is one of the named records' numbers.
- The README and the help texts quote no figure without its record (settings and specifications aside:
  ``test_docs.NOT_MEASURED``); ``docs/`` pages that name no record still follow ``test_docs``' rule (measured, with
  the machine or the test).
- The 32B checkpoint's size is one number, the dry run's own ``checkpoint disk`` computation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import test_docs as docs_check
import yaml
from kit_testing import REPO_ROOT

RECORDS = REPO_ROOT / "docs" / "measurements"
NAMED = re.compile(r"(?:docs/)?measurements/([\w.-]+\.yaml)")
#: before → after pairs: accuracies and tool-call rates
PAIR = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%? → \d+(?:\.\d+)?%?")
UNITS = {"minutes": "min", "seconds": "s"}
#: the help texts the issue names: the main job's, the test command's and the console scripts'
HELPS = [("bash", "scripts/smoke.sh"), ("bash", "scripts/test.sh")]
#: figures that are not the kit's measurements, beside test_docs.NOT_MEASURED: the text around them -> why
NOT_RECORDED = {
    r"mean@30 \d\.\d+ → \d\.\d+": "the reference's published result (the Ascend sample's), not the kit's measurement",
    r"\d+ x \d+ GB (?:npu|cuda)": "a hardware profile's devices: the hardware's specification",
}


def normal(figure: str) -> str:
    """A figure as the records compare it: no ``~`` or thousands commas, units spelled one way, one space."""
    figure = figure.replace(",", "").replace("~", "").strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?) ?([A-Za-z%]+)", figure)
    if match:
        return f"{match.group(1)} {UNITS.get(match.group(2), match.group(2))}"
    return " ".join(figure.split())


def _numbers(node: object) -> set[str]:
    if isinstance(node, dict):
        return {n for value in node.values() for n in _numbers(value)}
    return {normal(str(node))}


def record_numbers(name: str) -> set[str]:
    """Every number a record holds (its ``numbers``, and an ``earlier`` run's), normalised."""
    data = yaml.safe_load((RECORDS / name).read_text())
    machine = {str(v) for v in (data.get("machine") or {}).values() if re.fullmatch(r"\d[\d,.]* ?\w+", str(v))}
    earlier = (data.get("earlier") or {}).get("numbers", {})
    return _numbers(data.get("numbers", {})) | _numbers(earlier) | {normal(v) for v in machine}


def figures(text: str) -> list[str]:
    flat = " ".join(text.split())
    spans = [m.span() for rx in NOT_RECORDED for m in re.finditer(rx, flat)]
    found = [*docs_check.FIGURE.finditer(flat), *PAIR.finditer(flat)]
    return [
        m.group(0)
        for m in sorted(found, key=lambda m: m.start())
        if not docs_check._allowed(flat, m.start(), m.end()) and not any(s <= m.start() < e for s, e in spans)
    ]


def disagreements(text: str, page: str = "page", strict: bool = False) -> list[str]:
    """Figures of ``text`` (a markdown page) that are not among the numbers of the records their unit names; with
    ``strict``, also the figures whose unit names no record."""
    problems: list[str] = []
    for block, caption, intro in docs_check.in_context(text):
        quoted = figures(block.text)
        if not quoted:
            continue
        names = {n for context in (block.text, caption, intro) for n in NAMED.findall(" ".join(context.split()))}
        problems += _check(quoted, names, f"{page}:{block.line}", strict)
    return problems


def _check(quoted: list[str], names: set[str], where: str, strict: bool) -> list[str]:
    if not names:
        return [f"{where}: {', '.join(map(repr, quoted))} names no record (docs/measurements/)"] if strict else []
    missing = sorted(n for n in names if not (RECORDS / n).is_file())
    if missing:
        return [f"{where}: docs/measurements/{n} does not exist" for n in missing]
    known = set().union(*(record_numbers(n) for n in names))
    wrong = [q for q in quoted if normal(q) not in known]
    return [f"{where}: {q!r} is not a number of {', '.join(sorted(names))}" for q in wrong]


def help_disagreements(text: str, where: str) -> list[str]:
    """A help text's paragraphs (blank-line separated), each strict: its figures name a record of the paragraph."""
    problems = []
    for k, paragraph in enumerate(re.split(r"\n\s*\n", text)):
        quoted = figures(paragraph)
        if quoted:
            names = set(NAMED.findall(" ".join(paragraph.split())))
            problems += _check(quoted, names, f"{where} (paragraph {k + 1})", strict=True)
    return problems


def help_texts() -> dict[str, str]:
    out = {" ".join(argv): docs_check.help_text(argv) for argv in HELPS}
    for name in docs_check._pyproject_scripts():
        out[name] = docs_check.help_text(docs_check.console_script(name))
    return out


# ------------------------------------------------------------------------------------------------ the records


@pytest.mark.parametrize("record", sorted(p.name for p in RECORDS.glob("*.yaml")))
def test_each_record_says_what_how_when_where(record: str) -> None:
    data = yaml.safe_load((RECORDS / record).read_text())
    for key in ("what", "command", "commit", "date", "machine", "numbers"):
        assert data.get(key), f"docs/measurements/{record}: no {key!r}"
    assert re.fullmatch(r"[0-9a-f]{7,40}", str(data["commit"])), f"{record}: commit {data['commit']!r}"
    assert "cores" in data["machine"], f"{record}: the machine's cores"
    for number in _numbers(data["numbers"]):
        assert re.match(r"\d", number), f"{record}: {number!r} is not a number"


# ------------------------------------------------------------------------------------------------ the texts


@pytest.mark.parametrize("page", docs_check.PAGES, ids=docs_check._ids)
def test_quoted_numbers_agree_with_their_records(page: Path) -> None:
    strict = page == docs_check.README
    assert disagreements(page.read_text(), docs_check._ids(page), strict=strict) == []


def test_help_texts_quote_their_records() -> None:
    problems = []
    for where, text in help_texts().items():
        problems += help_disagreements(text, where)
        for path in re.findall(r"(?<![\w/.-])((?:tests|scripts)/[\w/.-]*\w)", text):
            if not (REPO_ROOT / path).exists() and "$" not in path:
                problems.append(f"{where}: names {path}, which does not exist")
    assert problems == []


def test_named_records_exist() -> None:
    texts = {docs_check._ids(p): p.read_text() for p in docs_check.PAGES}
    texts |= {docs_check._ids(p): p.read_text() for p in sorted((REPO_ROOT / "recipes" / "config").glob("*.yaml"))}
    texts |= {docs_check._ids(p): p.read_text() for p in sorted((REPO_ROOT / "recipes" / "smoke").glob("*.py"))}
    missing = [f"{where}: docs/measurements/{name}" for where, text in texts.items() for name in NAMED.findall(text)]
    assert [m for m in missing if not (RECORDS / m.rsplit("/", 1)[1]).is_file()] == []


def test_the_32b_checkpoint_is_the_dry_runs_number() -> None:
    """One size for a 32B actor checkpoint, wherever quoted: the dry run's `checkpoint disk` row computes it."""
    from recipes.launch.run_inputs.catalog import QWEN25_32B
    from recipes.launch.sizing.budget import CKPT_BYTES_PER_PARAM, human

    size = human(QWEN25_32B.parameters * CKPT_BYTES_PER_PARAM)  # what the dry run prints: "393.2 GB"
    quoting = {
        "docs/recipes.md": (REPO_ROOT / "docs" / "recipes.md").read_text(),
        "recipes/config/retool_qwen2.5_32b_dapo.yaml": (
            REPO_ROOT / "recipes" / "config" / "retool_qwen2.5_32b_dapo.yaml"
        ).read_text(),
    }
    seen = []
    for where, text in quoting.items():
        for block in re.split(r"\n\s*\n|\n(?=\|)", text):
            flat = " ".join(block.replace("#", " ").split())
            if "checkpoint" in flat:  # the 32B's are the only checkpoint sizes these two files quote
                for quoted in re.findall(r"~?\d[\d.]* ?[GT]B(?= each\b| \(dry-run)", flat):
                    seen.append(quoted)
                    assert normal(quoted) == normal(size), f"{where}: {quoted!r}; the dry run computes {size}"
    assert len(seen) == 3, f"the 32B checkpoint's size is quoted 3 times (recipes.md twice, the yaml once): {seen}"


# ------------------------------------------------------------------------------------------------ the checks fail


def test_the_checks_catch_a_wrong_number_and_a_missing_record() -> None:
    page = (
        "# P\n\nIntro.\n\nMeasured ([ls](measurements/learn_speed.yaml)): 9.9 min, 107 GFLOPS, total 593 s.\n\n"
        "Stage times ([record](measurements/learn_speed.yaml)):\n\n| a | b |\n|---|---|\n"
        "| total | 592 s, 0.53 → 0.95 |\n\n"
        "From [nowhere](measurements/nowhere.yaml): 3 s.\n\nUnnamed: 4 s.\n"
    )
    assert disagreements(page, strict=True) == [
        "page:5: '593 s' is not a number of learn_speed.yaml",
        "page:11: '0.53 → 0.95' is not a number of learn_speed.yaml",
        "page:13: docs/measurements/nowhere.yaml does not exist",
        "page:15: '4 s' names no record (docs/measurements/)",
    ]
    assert help_disagreements("a\n\nthe learning check: 9.9 min (docs/measurements/learn_speed.yaml)\n", "h") == []
    assert help_disagreements("b: 9.8 min (docs/measurements/learn_speed.yaml)", "h") == [
        "h (paragraph 1): '9.8 min' is not a number of learn_speed.yaml"
    ]
