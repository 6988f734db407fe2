"""Admission control and execution: bounded workers, a bounded queue, warm pool or cold one-shots.

Past ``workers`` running and ``max_queue`` waiting, a request is refused at once (HTTP 503 + SandboxError) so
clients back off instead of piling up behind a 70 s HTTP timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sandbox.isolation import IsolationPlan
from sandbox.metrics import Metrics
from sandbox.settings import SandboxSettings
from sandbox.worker_client import Job, Outcome, WorkerProcess, WorkerStartError

log = logging.getLogger("sandbox.executor")


class Overloaded(Exception):
    """All workers busy and the queue full."""


class WarmPool:
    """``size`` pre-started fork-server workers; a damaged or worn-out one is replaced in the background."""

    def __init__(self, settings: SandboxSettings, plan: IsolationPlan, metrics: Metrics) -> None:
        self.settings = settings
        self.plan = plan
        self.metrics = metrics
        self.idle: asyncio.Queue[WorkerProcess] = asyncio.Queue()
        self.all: set[WorkerProcess] = set()
        self.replacing: set[asyncio.Task[None]] = set()
        self.sample_info: dict[str, Any] = {}
        self.closed = False

    async def _spawn(self, slot: int) -> WorkerProcess:
        worker = await WorkerProcess.start(self.settings, self.plan, preload=True, one_shot=False, slot=slot)
        self.all.add(worker)
        self.sample_info = worker.info
        return worker

    async def start(self) -> None:
        workers = await asyncio.gather(*(self._spawn(slot) for slot in range(self.settings.workers)))
        for worker in workers:
            self.idle.put_nowait(worker)

    async def acquire(self) -> WorkerProcess:
        return await self.idle.get()

    def release(self, worker: WorkerProcess) -> None:
        """Back to the idle queue once the worker reports the run fully cleaned up (in the background)."""
        task = asyncio.create_task(self._settle(worker))
        self.replacing.add(task)
        task.add_done_callback(self.replacing.discard)

    async def _settle(self, worker: WorkerProcess) -> None:
        had_run = not worker.broken
        clean = await worker.wait_cleanup()
        if had_run and not clean:
            self.metrics.cleanup_failures += 1
        if clean and worker.requests_served < self.settings.recycle_after and not self.closed:
            self.idle.put_nowait(worker)
        else:
            await self._replace(worker)

    async def _replace(self, old: WorkerProcess) -> None:
        self.all.discard(old)
        self.metrics.worker_recycles += 1
        await (old.kill() if old.broken else old.close())
        while not self.closed:
            try:
                self.idle.put_nowait(await self._spawn(old.slot))
                return
            except WorkerStartError as exc:
                log.error("replacement worker failed to start: %s", exc)
                await asyncio.sleep(1.0)

    @property
    def ready(self) -> int:
        return self.idle.qsize()

    async def stop(self) -> None:
        self.closed = True
        for task in list(self.replacing):
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
            return await (self._run_cold(job) if self.pool is None else self._run_warm(job))
        finally:
            self.metrics.in_flight -= 1
            self.slots.release()

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
        if not await worker.wait_cleanup():
            self.metrics.cleanup_failures += 1
        with contextlib.suppress(Exception):
            await worker.close()
        self.cold_slots.put_nowait(worker.slot)
