"""patches/README.md lists every patch of the series with its problem, upstream status and covering test."""

from __future__ import annotations

from kit_testing import REPO_ROOT

PATCHES = sorted((REPO_ROOT / "patches").glob("*.patch"))
TABLE = (REPO_ROOT / "patches" / "README.md").read_text()


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in TABLE.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`00"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_patch_has_a_row_with_an_existing_test() -> None:
    rows = _rows()
    assert sorted(rows) == [p.name for p in PATCHES], "patches/README.md table and patches/*.patch differ"
    for name, cells in rows.items():
        problem, upstream, test = cells[1], cells[2], cells[3]
        assert problem and upstream, name
        test_paths = [t.strip("` ").split("::")[0] for t in test.split(",") if t.strip()]
        assert test_paths, f"{name}: no test named"
        for path in test_paths:
            assert (REPO_ROOT / path).is_file(), f"{name}: {path} does not exist"
