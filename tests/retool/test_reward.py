"""The ReTool reward (recipes/retool/reward.py) and its verifier (recipes.retool.verify)."""

from __future__ import annotations

import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from recipes.retool import verify
from recipes.retool.reward import (
    REWARD_KWARGS,
    NumTurnsMissingError,
    RewardConfigError,
    compute_score,
    reward_kwargs_problems,
    shaped_score,
)
from recipes.retool.verify import MathVerifyPool, judge

KEYS = {
    "score",
    "acc",
    "acc_strict",
    "pred",
    "has_answer",
    "tool_rounds",
    "used_tool",
    "num_turns",
    "tool_failures",
    "verifier",
    "tool_tokens",
    "tool_tokens_trained",
    "trained_tokens",
}


def score(response: str, ground_truth: str = "204", num_turns: int = 4, **kwargs) -> dict:
    return compute_score("aime_2024", response, ground_truth, {"num_turns": num_turns}, **kwargs)


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{204}",
        "\\boxed{33.0}".replace("33.0", "204.0"),
        "\\boxed{ 204 }",
        "\\boxed{'204'}",
        "\\boxed{\\text{204}}",
        "$\\boxed{204}$.",
        "<answer>\n\\boxed{204}\n</answer>",
        "<answer>204</answer>",
        "\\fbox{204}",
        "\\boxed 204",
        "\\boxed{204^\\circ}",
        "\\boxed{t = 204}",
        "\\boxed{\\dfrac{408}{2}}",
        "\\boxed{204} " + "This matches the estimate from the first computation. " * 5,
    ],
)
def test_formats_verl_strict_rejects_are_correct(response: str) -> None:
    result = score("We compute carefully.\n" + response)
    assert result["acc"] is True and result["score"] == 1.0
    assert result["pred"] == "204"


def test_same_formats_fail_verl_math_dapo_strict() -> None:
    """Why this reward exists: verl's recipe scorer calls these wrong (compare the test above)."""
    from verl.utils.reward_score import math_dapo

    for response in ["\\boxed{204.0}", "\\boxed{ 204 }", "\\boxed{'204'}", "\\boxed{204} " + "x" * 120]:
        assert math_dapo.compute_score(response, "204", strict_box_verify=True)["score"] == -1.0
        assert score(response)["score"] == 1.0


@pytest.mark.parametrize(
    ("response", "verifier"),
    [
        ("\\boxed{205}", "integer"),
        ("\\boxed{204.5}", "rational"),
        ("\\boxed{\\frac{1}{2}}", "rational"),
        ("\\boxed{The final answer goes here.}", "integer"),
        ("I think it is 204 but I am not sure.", "no_answer"),
        ("truncated \\boxed{20", "no_answer"),
    ],
)
def test_wrong_or_missing_answers(response: str, verifier: str) -> None:
    result = score(response)
    assert result["acc"] is False and result["score"] == -1.0
    assert result["verifier"] == verifier
    assert result["has_answer"] is (verifier != "no_answer")


@pytest.mark.parametrize(
    ("shaping", "correct", "rounds", "expected"),
    [
        ("none", True, 0, 1.0),
        ("none", False, 0, -1.0),
        ("none", False, 3, -1.0),
        ("verl", True, 0, 1.0),
        ("verl", True, 5, 1.0),
        ("verl", False, 0, -1.0),
        ("verl", False, 1, -0.9),
        ("verl", False, 2, -0.8),
        ("verl", False, 3, -0.7),
        ("verl", False, 4, -0.6),
        ("verl", False, 7, -0.6),
        ("no_tool_penalty", True, 1, 1.0),
        ("no_tool_penalty", True, 0, 0.6),
        ("no_tool_penalty", False, 2, -1.0),
        ("no_tool_penalty", False, 0, -1.4),
    ],
)
def test_shaping_table(shaping: str, correct: bool, rounds: int, expected: float) -> None:
    response = "\\boxed{204}" if correct else "\\boxed{7}"
    result = score(response, num_turns=2 * rounds + 2, shaping=shaping)
    assert result["score"] == pytest.approx(expected)
    assert result["tool_rounds"] == rounds and result["used_tool"] is (rounds > 0)
    assert shaped_score(correct, rounds, shaping, 0.4) == pytest.approx(expected)


def test_default_shaping_is_no_tool_penalty() -> None:
    assert score("\\boxed{204}", num_turns=2)["score"] == pytest.approx(0.6)
    assert score("\\boxed{1}", num_turns=2)["score"] == pytest.approx(-1.4)


def test_penalty_size_is_configurable() -> None:
    assert score("\\boxed{204}", num_turns=2, no_tool_penalty=0.25)["score"] == pytest.approx(0.75)
    assert score("\\boxed{1}", num_turns=2, no_tool_penalty=0.25)["score"] == pytest.approx(-1.25)
    assert score("\\boxed{1}", num_turns=4, no_tool_penalty=0.25)["score"] == pytest.approx(-1.0)


def test_tool_rounds_from_num_turns() -> None:
    # ToolAgentLoop: num_turns = user_turns + assistant_turns + 1 = 2k + 2 (3 + 2k if the last call was cut off).
    for num_turns, rounds in [(2, 0), (3, 0), (4, 1), (5, 1), (6, 2), (18, 8)]:
        assert score("\\boxed{204}", num_turns=num_turns)["tool_rounds"] == rounds
    assert score("\\boxed{204}", num_turns=np.int32(6))["tool_rounds"] == 2  # verl passes numpy ints


def test_unknown_shaping_is_a_config_error() -> None:
    with pytest.raises(RewardConfigError, match="shaping=paper: one of none, verl, no_tool_penalty"):
        score("\\boxed{204}", shaping="paper")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verifier": "loose"}, "verifier=loose: one of kit, strict"),
        ({"no_tool_penalty": -0.1}, "no_tool_penalty=-0.1: a number >= 0"),
        ({"no_tool_penalty": "much"}, "no_tool_penalty=much: a number >= 0"),
        ({"verify_timeout_s": float("nan")}, "verify_timeout_s=nan: a number >= 0"),
        ({"verify_timeout_s": True}, "verify_timeout_s=True: a number >= 0"),
    ],
)
def test_bad_reward_kwargs_are_config_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(RewardConfigError, match=message):
        score("\\boxed{204}", **kwargs)


def test_kwargs_problems_lists_every_problem_and_unknown_keys_on_request() -> None:
    kwargs = {"shaping": "paper", "verifier": "loose", "penalty": 1}
    assert reward_kwargs_problems(kwargs) == [
        "shaping=paper: one of none, verl, no_tool_penalty",
        "verifier=loose: one of kit, strict",
    ]
    unknown = reward_kwargs_problems(kwargs, unknown_keys=True)[0]
    assert unknown.startswith("penalty: the kit's reward takes ") and "verifier" in unknown
    assert set(REWARD_KWARGS) == {"shaping", "no_tool_penalty", "verify_timeout_s", "verifier"}
    assert reward_kwargs_problems({"shaping": "verl", "verifier": "strict", "no_tool_penalty": 0}) == []


@pytest.mark.parametrize("extra_info", [None, {}, {"index": 3}])
def test_missing_num_turns_says_patch_series_not_applied(extra_info) -> None:
    with pytest.raises(NumTurnsMissingError, match="patch series is not applied"):
        compute_score("aime", "\\boxed{204}", "204", extra_info)


def test_num_turns_none_is_explained() -> None:
    with pytest.raises(NumTurnsMissingError, match="did not go through verl's agent loop"):
        compute_score("aime", "\\boxed{204}", "204", {"num_turns": None})


def test_accepts_reward_loop_kwargs_and_returns_the_same_keys_always() -> None:
    for response in ["\\boxed{204}", "\\boxed{3}", "", "\\boxed{x^2}"]:
        result = compute_score(
            "aime", response, "204", {"num_turns": 2}, reward_router_address=None, reward_model_tokenizer=None
        )
        assert set(result) == KEYS
        assert isinstance(result["score"], float) and isinstance(result["acc"], bool)
        assert isinstance(result["pred"], str) and isinstance(result["tool_rounds"], int)


def test_the_agent_loops_loss_mask_counts_pass_through() -> None:
    """The kit's agent loop's counts (recipes/retool/agent_loop.py) reach the dumps and reward_extra metrics through
    the reward; a response that did not come through that loop reads -1 on each (the loss mask's witness refuses it)."""
    counts = {"tool_tokens": 12, "tool_tokens_trained": 0, "trained_tokens": 40}
    result = compute_score("aime", "\\boxed{204}", "204", {"num_turns": 4, "kit_loss_mask": counts})
    assert {key: result[key] for key in counts} == counts
    unmeasured = compute_score("aime", "\\boxed{204}", "204", {"num_turns": 4})
    assert [unmeasured[key] for key in counts] == [-1, -1, -1] and set(unmeasured) == KEYS


def test_never_raises_on_any_string() -> None:
    rng = random.Random(1234)
    alphabet = list("\\{}$<>/answerboxedfbtool_responsecirc^'\" 0123456789.,-=\n") + [
        "\\boxed{",
        "</answer>",
        "<answer>",
    ]
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        result = compute_score("aime", text, str(rng.randint(0, 999)), {"num_turns": 4}, verify_timeout_s=0)
        assert set(result) == KEYS
    for text in ["\x00\\boxed{\x00}", "\ud800\\boxed{1}", "\\boxed{" + "\\" * 1001 + "}"]:
        assert set(compute_score("aime", text, "1", {"num_turns": 2}, verify_timeout_s=0)) == KEYS


def test_megabyte_response_is_scored_quickly() -> None:
    filler = "We try another approach and check it with code. " * 21_000  # ~1 MB
    responses = [
        filler + "\\boxed{204}",
        filler,
        "\\boxed{" * 100_000 + "204}",
        "<tool_response>" * 50_000 + "\\boxed{204}",
        "\\boxed{204}" + "}" * 1_000_000,
    ]
    start = time.perf_counter()
    results = [score(text) for text in responses]
    assert time.perf_counter() - start < 2.0
    assert results[0]["acc"] is True and results[1]["has_answer"] is False


def test_symbolic_answers_use_math_verify_and_work_in_threads() -> None:
    """math-verify's signal-based timeouts fail in worker threads; here it runs in its own process."""
    cases = [
        ("\\sqrt{18}", "3\\sqrt{2}", True),
        ("\\frac{\\pi}{2}", "\\pi/2", True),
        ("x^2+1", "1+x^2", True),
        ("2\\sqrt{3}", "3\\sqrt{2}", False),
    ]

    def check(case):
        pred, gold, _ = case
        return compute_score("math", f"\\boxed{{{pred}}}", gold, {"num_turns": 4}, verify_timeout_s=20)

    assert threading.current_thread() is threading.main_thread()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(check, cases * 2))
    for (pred, gold, expected), result in zip(cases * 2, results, strict=True):
        assert result["verifier"] == "math_verify", (pred, gold, result)
        assert result["acc"] is expected, (pred, gold, result)


def test_integer_ground_truth_against_symbolic_prediction() -> None:
    assert judge("\\sqrt{16}", "4", timeout_s=20).correct is True
    assert judge("2\\sqrt{3}", "12", timeout_s=20).correct is False
    assert judge("\\frac{8}{2}", "4").method == "rational"


FAKE_STUCK_WORKER = """
import json, sys, time
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    time.sleep(120)
"""


def test_math_verify_call_has_a_hard_time_bound(tmp_path, monkeypatch) -> None:
    """A verification that never returns costs at most its timeout, and the stuck worker is killed."""
    script = tmp_path / "stuck_worker.py"
    script.write_text(FAKE_STUCK_WORKER)
    monkeypatch.setattr(verify, "WORKER_SCRIPT", script)
    started: list[verify._Worker] = []

    class RecordedWorker(verify._Worker):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    monkeypatch.setattr(verify, "_Worker", RecordedWorker)
    pool = MathVerifyPool(size=1)
    monkeypatch.setattr(verify, "_pool", pool)
    for attempt in range(2):  # the second call gets a fresh worker (the stuck fake again) and is bounded again
        start = time.monotonic()
        verdict = judge("x^{2}", "y", timeout_s=0.5)
        elapsed = time.monotonic() - start
        assert verdict.correct is False and verdict.method == "math_verify_failed"
        assert elapsed < 3.0
        assert len(started) == attempt + 1
        assert started[-1].proc.poll() is not None  # killed, not leaked
        assert pool._count == 0 and not pool._idle
    pool.close()


def test_math_verify_worker_death_is_survived(monkeypatch) -> None:
    pool = MathVerifyPool(size=1)
    monkeypatch.setattr(verify, "_pool", pool)
    assert judge("\\sqrt{4}", "2", timeout_s=20).correct is True
    pool._idle[0].proc.kill()
    pool._idle[0].proc.wait()
    assert judge("\\sqrt{9}", "2", timeout_s=20).method == "math_verify_failed"  # the dead worker is dropped
    assert judge("\\sqrt{9}", "3", timeout_s=20).correct is True  # and replaced
    pool.close()


def test_reward_file_loads_by_path_like_verl(tmp_path) -> None:
    """verl imports custom_reward_function.path as `custom_module`, possibly without the kit on sys.path."""
    import subprocess

    from recipes.retool import RECIPE_DIR

    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('custom_module', {str(RECIPE_DIR / 'reward.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['custom_module'] = m; spec.loader.exec_module(m)\n"
        "print(m.compute_score('d', '\\\\boxed{7.0}', '7', {'num_turns': 4})['score'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env={})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"
