"""Read a child's stdout/stderr while it runs, keeping only the first N bytes.

The pipe is always drained (excess bytes are counted and dropped), so a program printing 10 MB never blocks on a
full pipe — SandboxFusion's pipe stall turns such programs into timeouts. Truncation is marked in the text.
"""

from __future__ import annotations

import asyncio
import os


def truncation_marker(dropped: int) -> str:
    return f"\n[output truncated: {dropped} more bytes]\n"


class CappedPipeReader(asyncio.Protocol):
    """asyncio protocol for the read end of a pipe; ``done`` resolves at EOF."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.ReadTransport | None = None

    @classmethod
    async def attach(cls, read_fd: int, limit: int) -> CappedPipeReader:
        """Take ownership of ``read_fd`` and start reading it."""
        loop = asyncio.get_running_loop()
        reader = cls(limit)
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        reader.transport, _ = await loop.connect_read_pipe(lambda: reader, pipe)
        return reader

    def data_received(self, data: bytes) -> None:
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.dropped += max(0, len(data) - max(room, 0))

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        """Decoded output; invalid UTF-8 becomes U+FFFD so the JSON answer is always valid."""
        out = bytes(self.kept).decode("utf-8", errors="replace")
        return out + truncation_marker(self.dropped) if self.dropped else out
