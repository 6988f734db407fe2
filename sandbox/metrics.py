"""Prometheus text exposition, hand-written: a dozen series do not justify a dependency."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
PREFIX = "retool_sandbox"


@dataclass
class Metrics:
    """Counters and gauges the server updates in place (single event loop: no locking needed)."""

    requests: Counter[str] = field(default_factory=Counter)  # by top-level status
    http_errors: Counter[int] = field(default_factory=Counter)  # refused requests by HTTP status
    latency_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum: float = 0.0
    execution_sum: float = 0.0  # the code's own run time, without queueing (the throughput a worker gives)
    executed: int = 0
    timeouts: int = 0
    truncated: int = 0
    in_flight: int = 0
    queued: int = 0
    rejected: int = 0
    worker_recycles: int = 0
    worker_deaths: int = 0  # workers that died by themselves (OOM killer, kill -9), idle or running
    retries: int = 0  # requests handed to another worker because the first was dead before it took them
    cleanup_failures: int = 0

    def observe(self, status: str, seconds: float, execution_s: float | None = None) -> None:
        self.requests[status] += 1
        self.latency_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.latency_sum += seconds
        if execution_s is not None:
            self.execution_sum += execution_s
            self.executed += 1

    @property
    def mean_execution_s(self) -> float:
        return self.execution_sum / self.executed if self.executed else 0.0

    def render(self, isolation: dict[str, str], workers_ready: int, workers: int, max_queue: int = 0) -> str:
        p = PREFIX
        lines = [
            f"# HELP {p}_requests_total /run_code requests answered, by top-level status.",
            f"# TYPE {p}_requests_total counter",
        ]
        for status in ("Success", "Failed", "SandboxError"):
            lines.append(f'{p}_requests_total{{status="{status}"}} {self.requests.get(status, 0)}')
        lines += [
            f"# HELP {p}_refused_total Requests refused before running, by HTTP status.",
            f"# TYPE {p}_refused_total counter",
        ]
        for code in sorted(self.http_errors):
            lines.append(f'{p}_refused_total{{code="{code}"}} {self.http_errors[code]}')
        lines += [
            f"# HELP {p}_request_duration_seconds Time from admission to answer for executed requests.",
            f"# TYPE {p}_request_duration_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip(LATENCY_BUCKETS_S, self.latency_counts, strict=False):
            cumulative += count
            lines.append(f'{p}_request_duration_seconds_bucket{{le="{bound}"}} {cumulative}')
        cumulative += self.latency_counts[-1]
        lines.append(f'{p}_request_duration_seconds_bucket{{le="+Inf"}} {cumulative}')
        lines.append(f"{p}_request_duration_seconds_sum {self.latency_sum:.6f}")
        lines.append(f"{p}_request_duration_seconds_count {cumulative}")
        scalars = [
            ("timeouts_total", "counter", "Runs stopped by the wall timeout.", self.timeouts),
            ("output_truncated_total", "counter", "Runs whose stdout or stderr hit the cap.", self.truncated),
            ("in_flight", "gauge", "Requests executing now.", self.in_flight),
            ("queued", "gauge", "Requests waiting for a worker.", self.queued),
            ("rejected_total", "counter", "Requests refused because workers and queue were full.", self.rejected),
            ("worker_recycles_total", "counter", "Workers replaced (worn out or damaged).", self.worker_recycles),
            ("worker_deaths_total", "counter", "Workers that died by themselves, idle or running.", self.worker_deaths),
            ("retries_total", "counter", "Requests re-sent: their worker died before taking them.", self.retries),
            (
                "cleanup_failures_total",
                "counter",
                "Runs whose processes survived the kill sweep.",
                self.cleanup_failures,
            ),
            ("workers", "gauge", "Configured worker slots.", workers),
            ("max_queue", "gauge", "Requests allowed to wait for a worker before the overload answer.", max_queue),
            ("workers_ready", "gauge", "Idle warm workers ready to fork.", workers_ready),
        ]
        for name, kind, help_text, value in scalars:
            lines += [f"# HELP {p}_{name} {help_text}", f"# TYPE {p}_{name} {kind}", f"{p}_{name} {value}"]
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(isolation.items()))
        lines += [
            f"# HELP {p}_isolation_info Isolation in effect (value is always 1).",
            f"# TYPE {p}_isolation_info gauge",
            f"{p}_isolation_info{{{labels}}} 1",
        ]
        return "\n".join(lines) + "\n"
