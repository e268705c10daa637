"""Which jobs a worker process's slots are running, in a file the supervisor reads after a crash.

The database cannot tell a job a slot was running from one still waiting in
the prefetch buffer (one claim leases both).  After a crash the difference
matters: only a job that ran can have killed the process.  So a supervised
worker (see :mod:`worker.supervisor`) keeps one 16-byte record per slot in a
shared memory-mapped file: the job id when the slot starts a handler, zeros
when it ends.  A memory write costs nothing on the hot path, and the file
outlives the process (even ``SIGKILL``), so the supervisor reads what the
slots were running at the moment of death.

Record 0 is a header: its first byte is set when the process ran out of
records (more slot threads than the file holds); the reader then knows
nothing for certain and answers ``None`` (treat every held job as running).
"""
from __future__ import annotations

import mmap
import os
import threading
import uuid

RECORD = 16


class RunningFile:
    """The writer's side: one record per slot index, handed out and given back."""

    def __init__(self, path: str, records: int):
        self.path, self.records = path, records
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, RECORD * (records + 1))
            self.map = mmap.mmap(fd, RECORD * (records + 1))
        finally:
            os.close(fd)
        self.lock = threading.Lock()
        self.free = list(range(records, 0, -1))

    def take_index(self) -> int | None:
        """A record for a new slot thread; ``None`` (and the overflow mark) when none is left."""
        with self.lock:
            if self.free:
                return self.free.pop()
            self.map[0] = 1
            return None

    def give_back(self, index: int | None) -> None:
        if index is None:
            return
        self.clear(index)
        with self.lock:
            self.free.append(index)

    def mark(self, index: int | None, job_id: uuid.UUID) -> None:
        """The slot at ``index`` starts ``job_id`` (before its handler is called)."""
        if index is not None:
            self.map[index * RECORD:(index + 1) * RECORD] = job_id.bytes

    def clear(self, index: int | None) -> None:
        if index is not None:
            self.map[index * RECORD:(index + 1) * RECORD] = bytes(RECORD)


def read_running(path: str) -> set[uuid.UUID] | None:
    """The job ids the slots were running when the file was last written; ``None`` if unknown."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < RECORD or data[0]:
        return None
    zero = bytes(RECORD)
    return {uuid.UUID(bytes=data[i:i + RECORD]) for i in range(RECORD, len(data) - RECORD + 1, RECORD)
            if data[i:i + RECORD] != zero}
