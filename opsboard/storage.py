"""File storage for report results (and, later, ticket attachments).

Callers name a file by a *key* (``reports/<tenant>/<run>/report.csv``) and
stream it in and out; they never see a path.  :class:`LocalStorage` keeps
files under a folder (``OPSBOARD_STORAGE_DIR``, default
``<instance>/storage``); every write goes to a temporary file in the same
folder and is renamed into place, so a reader sees the whole old file or the
whole new one, never half, and a writer killed mid-way leaves no file under
the key (only a ``.tmp-*`` that :meth:`Storage.delete_prefix` removes).

Extension point: an S3-compatible store (MinIO, AWS, R2) implements the same
four methods with multipart upload in :meth:`Storage.open_write` (an upload is
only visible once completed, which gives the same all-or-nothing rule),
``GetObject`` streaming in :meth:`Storage.open_read`, ``HeadObject`` and
``ListObjectsV2`` + ``DeleteObjects``; :func:`from_config` picks it by URL
scheme.  Nothing else in opsboard knows which store is used.
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

#: A key: slash-separated segments of letters, digits, '.', '_', '-' and '@'; no '..', no leading slash.
_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@-]*(/[A-Za-z0-9_][A-Za-z0-9._@-]*)*$")
MAX_KEY = 512


class StorageError(Exception):
    """A key is malformed or missing; ``code`` is stable."""

    def __init__(self, message: str, code: str = "storage_error"):
        super().__init__(message)
        self.code = code


def check_key(key: str) -> str:
    if not isinstance(key, str) or len(key) > MAX_KEY or not _KEY_RE.match(key) or ".." in key.split("/"):
        raise StorageError(f"invalid storage key {key!r}", "invalid_key")
    return key


class Storage:
    """What every store offers (see the module docstring)."""

    @contextmanager
    def open_write(self, key: str) -> Iterator[BinaryIO]:
        """A binary file to write ``key``; it appears (atomically) only when the block ends without error."""
        raise NotImplementedError

    def open_read(self, key: str) -> BinaryIO:
        """The stored file, opened for binary reading; :class:`StorageError` (``not_found``) when missing."""
        raise NotImplementedError

    def size(self, key: str) -> int | None:
        """Bytes stored under ``key``, or ``None`` when nothing is."""
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> int:
        """Delete every file under ``prefix/`` (and unfinished writes there); returns how many."""
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        """Keys stored under ``prefix/``, sorted (unfinished writes are not listed)."""
        raise NotImplementedError


class LocalStorage(Storage):
    """Files under one folder on a local (or shared network) disk."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    @contextmanager
    def open_write(self, key: str) -> Iterator[BinaryIO]:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
        f = open(tmp, "wb")
        try:
            yield f
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(tmp, path)
        except BaseException:
            f.close()
            tmp.unlink(missing_ok=True)
            raise

    def open_read(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except FileNotFoundError:
            raise StorageError(f"nothing stored under {key}", "not_found") from None

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def delete_prefix(self, prefix: str) -> int:
        folder = self._path(prefix)
        if not folder.is_dir():
            return 0
        n = sum(1 for p in folder.rglob("*") if p.is_file())
        shutil.rmtree(folder, ignore_errors=True)
        return n

    def delete(self, key: str) -> bool:
        """Delete one file; ``False`` when there was none."""
        try:
            self._path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def list(self, prefix: str) -> list[str]:
        folder = self._path(prefix)
        if not folder.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)).replace(os.sep, "/") for p in folder.rglob("*")
                      if p.is_file() and not p.name.startswith(".tmp-"))


def storage_dir(config) -> Path:
    """``OPSBOARD_STORAGE_DIR``, else ``<instance folder>/storage``."""
    return Path(config.storage_dir) if config.storage_dir else Path(config.instance_dir) / "storage"


def from_config(config) -> Storage:
    """The configured store (local disk; an ``s3://`` URL would select the S3-compatible one)."""
    return LocalStorage(storage_dir(config))
