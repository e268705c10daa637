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

Sending comes through here too (issue 42), for every template but the shipped texts:
:func:`render_for_sending` renders one template in :func:`sending_sandbox` (the worker's own pool
of the same processes, same deadline and memory limit) and keeps the last results in a small
cache keyed by the version's id and the variables: a published version never changes, so a
broadcast's thousand deliveries of one text pay for one round trip, not a thousand.  A render
that passes a bound raises :class:`render.TemplateProblem` (``too_slow``, ``too_large``,
``too_many_steps``...), which fails its delivery with that code; a pool that stays busy past the
deadline raises :class:`RenderUnavailable` (``busy``), which the delivery retries.
"""
from __future__ import annotations

import collections
import json
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


def render_many(cells: list[dict]) -> list[tuple]:
    """:func:`render.render` of each cell (keys: channel, locale, subject, body, variables):
    ``("ok", subject, body)`` or ``("problem", code, message)``."""
    out = []
    for c in cells:
        try:
            out.append(("ok", *render.render(c["channel"], c["locale"], c["subject"], c["body"], c["variables"])))
        except render.TemplateProblem as exc:
            out.append(("problem", exc.code, str(exc)))
    return out


_KINDS = {"preview": preview_many, "render": render_many}


def _serve(conn, memory_mb: int) -> None:
    """The child's loop: receive ``(kind, batch)``, answer ``(True, results)`` or ``(False, "ExceptionName")``."""
    _limit_memory(memory_mb)
    while True:
        try:
            kind, cells = conn.recv()
        except EOFError:
            return
        try:
            answer = (True, _KINDS[kind](cells))
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
        return self._ask("preview", cells)

    def render_many(self, cells: list[dict]) -> list[tuple]:
        """:func:`render_many` in a render process, under the deadline and the memory limit."""
        return self._ask("render", cells)

    def _ask(self, kind: str, cells: list[dict]):
        try:
            slot = self._idle.get(timeout=self.timeout)
        except queue.Empty:
            raise RenderUnavailable("busy", "every preview process is busy") from None
        try:
            if slot is None or not slot.process.is_alive():
                slot = _Slot(self._ctx, self.memory_mb)
            slot.conn.send((kind, cells))
            deadline = time.monotonic() + self.timeout
            if not slot.conn.poll(max(deadline - time.monotonic(), 0)):
                slot.kill()
                slot = None
                raise RenderUnavailable("too_slow", f"the render took longer than {self.timeout} s")
            ok, value = slot.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            if slot is not None:
                slot.kill()
            slot = None
            raise RenderUnavailable("too_slow", "the render process stopped") from None
        finally:
            self._idle.put(slot)
        if not ok:
            raise RenderUnavailable("too_slow" if value != "MemoryError" else "too_large", value)
        return value

    def warm(self) -> None:
        """Start every process not started yet, one at a time (each slot is away only while its process
        starts): the first render does not wait for a process to start."""
        for _ in range(self._idle.qsize()):
            try:
                slot = self._idle.get(timeout=self.timeout)
            except queue.Empty:
                return
            try:
                if slot is None or not slot.process.is_alive():
                    slot = _Slot(self._ctx, self.memory_mb)
            except Exception:  # noqa: BLE001 - started on first use instead
                slot = None
            finally:
                self._idle.put(slot)

    def close(self) -> None:
        while True:
            try:
                slot = self._idle.get_nowait()
            except queue.Empty:
                return
            if slot is not None:
                slot.kill()


# ---------------------------------------------------------------- sending (issue 42)

#: Rendered texts kept per process: (version id, channel, locale, variables) -> result.  A result is at
#: most two texts of render.MAX_OUTPUT characters; 256 entries bound the cache near 20 MB at worst.
CACHE_SIZE = 256

_sending: RenderSandbox | None = None
_sending_lock = threading.Lock()
_cache: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_cache_lock = threading.Lock()


def sending_sandbox() -> RenderSandbox:
    """The process's render pool for sending (the worker's), started on first use."""
    global _sending
    with _sending_lock:
        if _sending is None:
            _sending = RenderSandbox()
        return _sending


def warm_at_start(conn=None) -> None:
    """A worker's start hook (``catalogue.start_hooks``): start the sending render processes in the
    background, so that the first delivery of an author's template (an OTP's) does not wait for them."""
    threading.Thread(target=sending_sandbox().warm, name="template-render-warm", daemon=True).start()


def render_for_sending(template_id, channel: str, locale: str, subject: str, body: str,
                       variables: dict) -> tuple[str, str]:
    """Render a published version (``template_id``) for sending, bounded like a preview.

    Raises :class:`render.TemplateProblem` when the template passes a bound (``too_slow`` for the
    deadline, ``too_large`` for the memory limit, the sandbox's own codes otherwise) and
    :class:`RenderUnavailable` (``busy``) when no render process is free within the deadline.
    """
    try:
        key = (str(template_id), channel, locale, json.dumps(variables, sort_keys=True, default=str))
    except (TypeError, ValueError):
        key = None
    if key is not None:
        with _cache_lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
    else:
        hit = None
    if hit is None:
        cell = {"channel": channel, "locale": locale, "subject": subject, "body": body, "variables": variables}
        try:
            [hit] = sending_sandbox().render_many([cell])
        except RenderUnavailable as exc:
            if exc.code == "busy":
                raise
            hit = ("problem", exc.code, str(exc))
        if key is not None:
            with _cache_lock:
                _cache[key] = hit
                while len(_cache) > CACHE_SIZE:
                    _cache.popitem(last=False)
    if hit[0] == "problem":
        raise render.TemplateProblem(hit[1], hit[2])
    return hit[1], hit[2]
