"""Admission control and execution: bounded workers, a bounded queue, warm pool or cold one-shots.

Past ``workers`` running and ``max_queue`` waiting, a request is refused at once (HTTP 503 + SandboxError) so
clients back off instead of piling up behind a 70 s HTTP timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from sandbox.isolation import IsolationPlan
from sandbox.metrics import Metrics
from sandbox.settings import SandboxSettings
from sandbox.worker_client import Job, Outcome, WorkerProcess, WorkerStartError, WorkerUnavailable

log = logging.getLogger("sandbox.executor")

#: Workers one request may be handed to when each turns out dead before taking it (nothing ran on them). More
#: than one dead worker per request takes several deaths between the liveness check and the hand-over.
DELIVERY_ATTEMPTS = 3


class Overloaded(Exception):
    """All workers busy and the queue full."""


class WarmPool:
    """``size`` pre-started fork-server workers; a damaged, worn-out or dead one is replaced in the background.

    A worker can die while idle (OOM killer, an operator's kill -9): a watcher respawns it as soon as its process
    exits, and :meth:`acquire` checks each worker before handing it out, so no request is sent to a dead worker.
    """

    def __init__(self, settings: SandboxSettings, plan: IsolationPlan, metrics: Metrics) -> None:
        self.settings = settings
        self.plan = plan
        self.metrics = metrics
        self.idle: asyncio.Queue[WorkerProcess] = asyncio.Queue()
        self.parked: set[WorkerProcess] = set()  # idle and not known dead: what ``idle`` holds minus stale ones
        self.all: set[WorkerProcess] = set()
        self.background: set[asyncio.Task[None]] = set()
        self.sample_info: dict[str, Any] = {}
        self.closed = False

    def _in_background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _spawn(self, slot: int) -> WorkerProcess:
        worker = await WorkerProcess.start(self.settings, self.plan, preload=True, one_shot=False, slot=slot)
        self.all.add(worker)
        self.sample_info = worker.info
        self._in_background(self._watch(worker))
        return worker

    def _park(self, worker: WorkerProcess) -> None:
        self.parked.add(worker)
        self.idle.put_nowait(worker)

    async def _watch(self, worker: WorkerProcess) -> None:
        """Respawn a worker that dies while idle now, not when the next request finds it dead."""
        await worker.proc.wait()
        if worker in self.parked and not self.closed:
            self.parked.discard(worker)  # its entry in ``idle`` is now stale: acquire skips it
            self._found_dead(worker, f"died while idle (exit status {worker.proc.returncode})")

    def _found_dead(self, worker: WorkerProcess, how: str) -> None:
        log.warning("worker %s %s; replacing it", worker.proc.pid, how)
        worker.died = True
        worker.broken = True
        self._in_background(self._replace(worker))

    async def start(self) -> None:
        workers = await asyncio.gather(*(self._spawn(slot) for slot in range(self.settings.workers)))
        for worker in workers:
            self._park(worker)

    async def acquire(self) -> WorkerProcess:
        """An idle worker that is alive now; one found dead is replaced instead of being handed the request."""
        while True:
            worker = await self.idle.get()
            if worker not in self.parked:
                continue  # died while idle; its watcher is replacing it
            self.parked.discard(worker)
            if worker.alive():
                return worker
            self._found_dead(worker, "found dead before a hand-over")

    def release(self, worker: WorkerProcess) -> None:
        """Back to the idle queue once the worker reports the run fully cleaned up (in the background)."""
        self._in_background(self._settle(worker))

    async def _settle(self, worker: WorkerProcess) -> None:
        had_run = not worker.broken
        clean = await worker.wait_cleanup()
        if had_run and not clean:
            self.metrics.cleanup_failures += 1
        if clean and worker.requests_served < self.settings.recycle_after and not self.closed:
            self._park(worker)
        else:
            await self._replace(worker)

    async def _replace(self, old: WorkerProcess) -> None:
        self.all.discard(old)
        self.metrics.worker_recycles += 1
        self.metrics.worker_deaths += old.died
        await (old.kill() if old.broken else old.close())
        while not self.closed:
            try:
                self._park(await self._spawn(old.slot))
                return
            except WorkerStartError as exc:
                log.error("replacement worker failed to start: %s", exc)
                await asyncio.sleep(1.0)

    @property
    def ready(self) -> int:
        return len(self.parked)

    async def stop(self) -> None:
        self.closed = True
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*(w.kill() for w in list(self.all)), return_exceptions=True)
        self.all.clear()


class Executor:
    """Runs jobs under the concurrency bounds; owns the warm pool (or spawns one-shot workers with ``--cold``)."""

    def __init__(self, settings: SandboxSettings, plan: IsolationPlan, metrics: Metrics) -> None:
        self.settings = settings
        self.plan = plan
        self.metrics = metrics
        self.slots = asyncio.Semaphore(settings.workers)
        self.pool = None if settings.cold else WarmPool(settings, plan, metrics)
        self.worker_info: dict[str, Any] = {}
        self.started = False
        self.retiring: set[asyncio.Task[None]] = set()
        self.cold_slots: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(settings.workers):
            self.cold_slots.put_nowait(slot)

    async def start(self) -> None:
        if self.pool is not None:
            await self.pool.start()
            self.worker_info = self.pool.sample_info
        else:
            probe = await WorkerProcess.start(self.settings, self.plan, preload=False, one_shot=True)
            self.worker_info = probe.info
            await probe.close()
        self.started = True

    async def stop(self) -> None:
        for task in list(self.retiring):
            task.cancel()
        if self.pool is not None:
            await self.pool.stop()
        self.plan.cleanup()

    async def run(self, job: Job) -> Outcome:
        """Run ``job`` or raise :class:`Overloaded` without waiting."""
        if self.slots.locked() and self.metrics.queued >= self.settings.max_queue:
            self.metrics.rejected += 1
            raise Overloaded(
                f"sandbox overloaded: {self.settings.workers} running and {self.metrics.queued} queued "
                f"(--max-queue {self.settings.max_queue}); retry later"
            )
        self.metrics.queued += 1
        try:
            await self.slots.acquire()
        finally:
            self.metrics.queued -= 1
        self.metrics.in_flight += 1
        try:
            return await self._deliver(job, self._run_cold if self.pool is None else self._run_warm)
        finally:
            self.metrics.in_flight -= 1
            self.slots.release()

    async def _deliver(self, job: Job, run_once: Callable[[Job], Awaitable[Outcome]]) -> Outcome:
        """A worker that was dead before it took the job costs a retry on another worker, not the request: none
        of the code ran. A worker that dies once it has the job is the job's answer (code is never run twice)."""
        failure: WorkerUnavailable | None = None
        for _attempt in range(DELIVERY_ATTEMPTS):
            if failure is not None:
                self.metrics.retries += 1
            try:
                return await run_once(job)
            except WorkerUnavailable as exc:
                failure = exc
        message = f"no sandbox worker could take the request ({DELIVERY_ATTEMPTS} tries): {failure}"
        return Outcome("Error", None, 0.0, "", "", {}, message=message, damaged=True)

    async def _run_warm(self, job: Job) -> Outcome:
        assert self.pool is not None
        worker = await self.pool.acquire()
        try:
            return await worker.run(job, self.settings.output_limit_bytes)
        finally:
            self.pool.release(worker)

    async def _run_cold(self, job: Job) -> Outcome:
        slot = await self.cold_slots.get()
        try:
            worker = await WorkerProcess.start(
                self.settings, self.plan, preload=False, one_shot=True, slot=slot, known=self.worker_info
            )
        except WorkerStartError as exc:
            self.cold_slots.put_nowait(slot)
            return Outcome("Error", None, 0.0, "", "", {}, message=str(exc), damaged=True)
        try:
            return await worker.run(job, self.settings.output_limit_bytes)
        finally:
            task = asyncio.create_task(self._retire_cold(worker))
            self.retiring.add(task)
            task.add_done_callback(self.retiring.discard)

    async def _retire_cold(self, worker: WorkerProcess) -> None:
        self.metrics.worker_deaths += worker.died
        had_run = not worker.broken  # as in the warm pool: a dead or hung worker's run is not a cleanup failure
        if not await worker.wait_cleanup() and had_run:
            self.metrics.cleanup_failures += 1
        with contextlib.suppress(Exception):
            await worker.close()
        self.cold_slots.put_nowait(worker.slot)
