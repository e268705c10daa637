"""Template previews rendered in a few separate processes with a hard deadline and a memory limit.

The bounded sandbox of :mod:`.render` refuses what it can recognise (big powers and repeats, long
loops, deep recursion, huge output), but one C call (a format, a regular expression, an integer
operation it did not foresee) cannot be interrupted inside the web process, which every tenant
shares.  So the web renders previews here: :class:`RenderSandbox` keeps ``workers`` processes
(started from a ``forkserver``, never forked from a threaded web worker), sends each a batch of
cells, and waits at most ``timeout`` seconds; a process that does not answer in time is killed and
replaced, and the caller gets :class:`RenderTimeout`.  Each process has an address-space limit
(``memory_mb`` above its size at start), so a render that allocates too much fails with
MemoryError inside the child instead of swapping the host.

Sending does not come through here: the worker renders with the same bounded sandbox under the
job's own timeout.
"""
from __future__ import annotations

import multiprocessing
import queue
import threading
import time

from . import render

#: A preview answers within this many seconds (rendering; starting a process the first time is extra).
TIMEOUT = 2.0
WORKERS = 2
MEMORY_MB = 256


class RenderUnavailable(Exception):
    """No answer: ``code`` is ``too_slow`` (the deadline passed, the process was killed) or ``busy``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def preview_many(cells: list[dict]) -> list[render.Rendered]:
    """:func:`render.preview` of each cell (keys: channel, locale, subject, body, declared, sample)."""
    return [render.preview(c["channel"], c["locale"], c["subject"], c["body"], c["declared"], c["sample"])
            for c in cells]


def _limit_memory(memory_mb: int) -> None:
    try:
        import resource

        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * resource.getpagesize()
        limit = size + memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):   # not Linux: the deadline still holds
        pass


def _serve(conn, memory_mb: int) -> None:
    """The child's loop: receive a batch, answer ``(True, results)`` or ``(False, "ExceptionName")``."""
    _limit_memory(memory_mb)
    while True:
        try:
            cells = conn.recv()
        except EOFError:
            return
        try:
            answer = (True, preview_many(cells))
        except BaseException as exc:  # noqa: BLE001  (MemoryError included: the child must answer)
            answer = (False, type(exc).__name__)
        conn.send(answer)


class _Slot:
    def __init__(self, ctx, memory_mb: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, memory_mb), daemon=True, name="template-render")
        self.process.start()
        child.close()

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(1)
        finally:
            self.conn.close()


class RenderSandbox:
    """A small pool of render processes; :meth:`preview_many` renders with a hard deadline."""

    def __init__(self, workers: int = WORKERS, timeout: float = TIMEOUT, memory_mb: int = MEMORY_MB):
        self.timeout, self.memory_mb = timeout, memory_mb
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["opsboard.notifications.render"])
        self._idle: queue.Queue = queue.Queue()
        for _ in range(workers):
            self._idle.put(None)              # started on first use
        self._lock = threading.Lock()
        self._closed = False

    def preview_many(self, cells: list[dict]) -> list[render.Rendered]:
        try:
            slot = self._idle.get(timeout=self.timeout)
        except queue.Empty:
            raise RenderUnavailable("busy", "every preview process is busy") from None
        try:
            if slot is None or not slot.process.is_alive():
                slot = _Slot(self._ctx, self.memory_mb)
            slot.conn.send(cells)
            deadline = time.monotonic() + self.timeout
            if not slot.conn.poll(max(deadline - time.monotonic(), 0)):
                slot.kill()
                slot = None
                raise RenderUnavailable("too_slow", f"the preview took longer than {self.timeout} s")
            ok, value = slot.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            if slot is not None:
                slot.kill()
            slot = None
            raise RenderUnavailable("too_slow", "the preview process stopped") from None
        finally:
            self._idle.put(slot)
        if not ok:
            raise RenderUnavailable("too_slow" if value != "MemoryError" else "too_large", value)
        return value

    def close(self) -> None:
        while True:
            try:
                slot = self._idle.get_nowait()
            except queue.Empty:
                return
            if slot is not None:
                slot.kill()
