"""Stand-alone math-verify worker process: one JSON request per stdin line, one JSON answer per stdout line.

Why a process: math-verify bounds its own run time with ``signal.alarm``, which only works in the main thread;
verl calls reward functions from executor threads, where math-verify's timeouts raise and verl's wrapper quietly
scores 0. Here math-verify runs in the main thread of its own process (its timeouts work), and the parent
(:mod:`recipes.retool.verify`) additionally kills the process if an answer does not come back in time, so no
pathological expression can stall a training step.

Run by path (``python mathverify_worker.py``), so it imports nothing from the kit and needs no PYTHONPATH.
Request: ``{"gold": str, "pred": str, "timeout": int}``; answer: ``{"ok": bool}`` or ``{"ok": false, "error": str}``.
The first line written is ``{"ready": true}`` once math-verify is imported.
"""

from __future__ import annotations

import json
import os
import sys


def _protocol_stream():
    """Keep the protocol on the real stdout and send anything libraries print to stderr instead."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def main() -> int:
    out = _protocol_stream()
    from math_verify import parse, verify

    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            request = json.loads(line)
            timeout = max(1, int(request.get("timeout", 3)))
            gold = parse("\\boxed{" + request["gold"] + "}", parsing_timeout=timeout)
            pred = parse("\\boxed{" + request["pred"] + "}", parsing_timeout=timeout)
            ok = bool(gold) and bool(pred) and bool(verify(gold, pred, timeout_seconds=timeout))
            answer = {"ok": ok}
        except BaseException as exc:  # math-verify's TimeoutException derives from BaseException
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
        out.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
