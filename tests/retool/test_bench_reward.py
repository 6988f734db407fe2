"""scripts/bench_reward.py runs and reports what it promises (a small --n keeps it quick)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_reward.py"


def test_bench_prints_timing_agreement_and_differences(capsys, tmp_path) -> None:
    spec = importlib.util.spec_from_file_location("bench_reward", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_reward"] = bench  # its dataclass needs its module registered
    spec.loader.exec_module(bench)
    assert bench.main(["--n", "96", "--no-pin", "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"kit reward  : 96 responses in [\d.]+ ms total; per call mean [\d.]+ ms", out)
    assert re.search(r"verl strict : 96 responses in [\d.]+ ms total", out)
    cells = re.search(r"kit correct\s+(\d+)\s+(\d+)\n\s+kit wrong\s+(\d+)\s+(\d+)", out)
    assert cells and sum(int(c) for c in cells.groups()) == 96
    differing = int(re.search(r"Every case where they differ \((\d+)\):", out).group(1))
    assert differing == int(cells.group(2)) + int(cells.group(3)) > 0
    assert len(re.findall(r"^  #\d+ ", out, re.MULTILINE)) == differing
    # Every answer format is exercised; a box printed by the tool is the model's answer only for verl.
    for name, *_ in bench.FORMATS:
        assert re.search(rf"^{name}\s+\d+", out, re.MULTILINE), name
    row = re.search(r"^box_only_in_tool_output\s+(\d+)\s+(\d+)\s+(\d+)", out, re.MULTILINE)
    assert int(row.group(2)) == 0 and int(row.group(3)) == int(row.group(1))
    assert (tmp_path / "out.json").stat().st_size > 0
