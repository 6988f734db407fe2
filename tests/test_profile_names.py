"""Profiles and platforms are the only source of hardware names (issue 22, finding 1).

Every list of profile or platform names still spelled by hand (docs, usage comments, Dockerfiles, help text) must be
one of the sets the registries define, so adding a profile fails here until each list names it (the lists used to
omit ``h200`` in ~16 places); the CLIs' choices and help, the README's support matrix and docs/images.md's image
lines are checked against :data:`~platforms.profiles.PROFILES` itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kit_testing import REPO_ROOT

from platforms import PLATFORMS, PROFILES
from platforms.cli import build_parser as platform_parser
from platforms.cli import profiles_help
from platforms.images import build_parser as images_parser
from platforms.images import image_profiles
from platforms.stacks import REFERENCE
from recipes.launch.cli import build_parser as launch_parser
from recipes.launch.cli import build_run_parser

#: Where hand-written text lives; tests/ and patches/ (verl's own names) are not the kit's lists.
TEXT_SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".env", ""}
SKIPPED = ("tests/", "patches/")


def allowed_sets() -> dict[frozenset[str], str]:
    """The sets a spelled list may name, each with what it is: every profile, the profiles with an image, one
    platform's profiles, every platform, the platforms with devices (``--platform npu|cuda``)."""
    sets = {frozenset(PROFILES): "every profile", frozenset(PLATFORMS): "every platform"}
    sets[frozenset(p.name for p in PLATFORMS.values() if p.has_devices)] = "the platforms with devices"
    sets[frozenset(p.name for p in image_profiles())] = "the profiles with an image"
    for platform in PLATFORMS.values():
        own = frozenset(name for name, p in PROFILES.items() if p.platform is platform)
        if len(own) > 1:
            sets.setdefault(own, f"the {platform.name} profiles")
    return sets


def list_pattern() -> re.Pattern[str]:
    """Two or more names joined by ``|``, ``\\|`` (markdown tables), ``,``, ``/`` or ``or``, maybe in backticks."""
    names = "|".join(sorted({*PROFILES, *PLATFORMS}, key=len, reverse=True))
    token = rf"`?\b(?:{names})\b`?"
    sep = r"\s*(?:\\?\||,\s*or|,|/|\bor\b)\s*"
    return re.compile(rf"{token}(?:{sep}{token})+")


def spelled_lists(text: str) -> list[tuple[int, str, frozenset[str]]]:
    """(line, match, names) of every list in ``text``; a list may wrap onto the next line."""
    out = []
    names = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in sorted({*PROFILES, *PLATFORMS}, key=len)))
    flat = text.replace("\n#", " ").replace("\n", " ")  # comment and prose lines wrap: join them
    for match in list_pattern().finditer(flat):
        found = frozenset(names.findall(match.group(0)))
        line = text.count("\n", 0, min(match.start(), len(text))) + 1
        out.append((line, match.group(0), found))
    return out


def tracked_text_files() -> list[Path]:
    files = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    out = []
    for name in files.splitlines():
        path = REPO_ROOT / name
        if name.startswith(SKIPPED) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name.startswith("Dockerfile"):
            out.append(path)
    return out


def wrong_lists(paths: list[Path]) -> list[str]:
    allowed = allowed_sets()
    offenders = []
    for path in paths:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for line, spelled, names in spelled_lists(text):
            if len(names) > 1 and names not in allowed:
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{line}: {spelled!r}")
    return offenders


def test_every_spelled_list_of_hardware_names_is_a_registry_set() -> None:
    offenders = wrong_lists(tracked_text_files())
    sets = "; ".join(f"{what}: {'|'.join(sorted(names))}" for names, what in allowed_sets().items())
    assert not offenders, f"lists that are none of ({sets}):\n" + "\n".join(offenders)


def test_the_list_check_catches_a_missing_profile(tmp_path: Path) -> None:
    """The check itself: a usage line that leaves out one profile (h200, as ~16 places did) is reported."""
    names = [name for name in PROFILES if name != "h200"]
    sample = tmp_path / "run.sh"
    sample.write_text(f"#   bash recipes/run_x.sh [--hw {'|'.join(names)}] [--dry-run]\n")
    full = tmp_path / "ok.md"
    full.write_text(f"`--hw {'|'.join(PROFILES)}` and the images `{', '.join(p.name for p in image_profiles())}`\n")
    assert list_pattern().search(sample.read_text())
    offenders = [line.replace(str(REPO_ROOT), "") for line in _wrong_outside_repo([sample, full])]
    assert len(offenders) == 1 and "run.sh:1" in offenders[0], offenders


def _wrong_outside_repo(paths: list[Path]) -> list[str]:
    allowed = allowed_sets()
    return [
        f"{path}:{line}: {spelled!r}"
        for path in paths
        for line, spelled, names in spelled_lists(path.read_text())
        if len(names) > 1 and names not in allowed
    ]


def test_cli_choices_and_help_come_from_the_registry() -> None:
    """The launcher's, the platform CLI's and docker/build.sh's choices and help name every profile (with an image)."""
    run_help = build_run_parser().format_help()
    assert all(f"{p.name} ({p.devices_per_node} x" in profiles_help() for p in PROFILES.values() if p.devices_per_node)
    for text in (run_help, launch_parser().format_help(), platform_parser().format_help()):
        assert all(name in text for name in PROFILES), text
    build_help = images_parser("docker/build.sh", REFERENCE).format_help()
    assert "{" + ",".join(p.name for p in image_profiles()) + "}" in build_help


README = (REPO_ROOT / "README.md").read_text()
IMAGES_PAGE = (REPO_ROOT / "docs" / "images.md").read_text()
BUILD_LINE = re.compile(r"^docker/build\.sh --hw ([\w.]+) +# (\S+)", re.M)


def test_readme_support_matrix_has_every_profile() -> None:
    """One row per profile, with the profile's devices per node and memory per device."""
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\|[^|\n]*profile `([\w.]+)`[^\n]*$", README, re.M)}
    assert list(rows) == list(PROFILES), f"support matrix rows {list(rows)}, profiles {list(PROFILES)}"
    for name, profile in PROFILES.items():
        if profile.devices_per_node:
            assert str(profile.devices_per_node) in rows[name] and f"{profile.memory_gb_per_device} GB" in rows[name]


def test_images_page_has_every_image() -> None:
    """docs/images.md shows ``docker/build.sh --hw X`` with the default tag of every profile that has an image, and
    every such line of the README and the images page names its profile's own tag."""
    shown = dict(BUILD_LINE.findall(IMAGES_PAGE))
    for profile in image_profiles():
        assert profile.image is not None
        assert profile.name in shown, f"docs/images.md has no docker/build.sh --hw {profile.name} line"
    tags = {profile.name: profile.image.kit_tag(REFERENCE) for profile in image_profiles() if profile.image is not None}
    for page, text in (("README.md", README), ("docs/images.md", IMAGES_PAGE)):
        for name, tag in BUILD_LINE.findall(text):
            assert tags.get(name) == tag, (
                f"{page}: docker/build.sh --hw {name} shows {tag}, its tag is {tags.get(name)}"
            )
