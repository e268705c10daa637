"""The previous release, read from git history: its code (for the rolling-upgrade test) and the
names it reads (for the expand/contract check of new migrations).

The previous release is a fixed commit: the state of main before the current round of work
merged (``2cde535``, the main that landed at stop 31).  Move it forward when a release is cut, never to a commit after a contract
migration that release's workers would still need.  ``OPSBOARD_UPGRADE_FROM`` names another
commit for a one-off run (e.g. an older release, to try the upgrade across more migrations).

A fresh clone (what ``.ci/run`` runs in) has the full history; a shallow checkout that lacks the
commit, or a tree that is not a git checkout (an unpacked sdist), skips these tests with the
reason.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from opsboard.config import ROOT

PREVIOUS_RELEASE = "2cde535"

_MIGRATION = re.compile(r"^migrations/(\d{4})_[a-z0-9_]+\.sql$")


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60, check=check)


def previous_release() -> str:
    """The full hash of the previous release's commit; skips the test when the history lacks it."""
    commit = os.environ.get("OPSBOARD_UPGRADE_FROM") or PREVIOUS_RELEASE
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the previous release is read from git history")
    if _git("rev-parse", "--git-dir", check=False).returncode:
        pytest.skip(f"{ROOT} is not a git checkout: the previous release is read from git history")
    found = _git("rev-parse", "--verify", "-q", f"{commit}^{{commit}}", check=False)
    if found.returncode:
        shallow = _git("rev-parse", "--is-shallow-repository", check=False).stdout.decode().strip() == "true"
        why = "the checkout is shallow (git fetch --unshallow)" if shallow else "the history does not have it"
        pytest.skip(f"previous release {commit} is missing: {why}")
    return found.stdout.decode().strip()


def extract(commit: str, dest: Path) -> Path:
    """Write the tree of ``commit`` into ``dest`` (``git archive``) and return ``dest``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit],
                          capture_output=True, timeout=120, check=True).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own history, not an untrusted archive
    return dest


def migration_versions(commit: str) -> set[int]:
    """The migration versions shipped by ``commit``."""
    names = _git("ls-tree", "--name-only", commit, "migrations/").stdout.decode().split()
    return {int(m.group(1)) for n in names if (m := _MIGRATION.match(n))}


def code_reading(commit: str, name: str) -> list[str]:
    """The files of ``commit``'s product code (``opsboard/``, ``worker/``, SQL and Python, not its
    migrations) that mention ``name`` as a whole word: what that release's processes may read."""
    done = _git("grep", "-l", "-w", "-i", "-F", "-e", name, commit, "--",
                "opsboard/*.py", "opsboard/*.sql", "worker/*.py", check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"git grep failed: {done.stderr.decode().strip()}")
    return [line.split(":", 1)[1] for line in done.stdout.decode().splitlines() if line]
