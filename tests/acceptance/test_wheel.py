"""The built wheel works on its own: installed into a fresh virtual environment
and run from a folder outside the checkout (the source tree is not on
``sys.path``), it migrates an empty database, serves ``/login`` and a static
file through gunicorn, and refuses to call a database "up to date" when its
migrations are missing.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from opsboard.config import CHECKOUT
from tests.acceptance.test_cli import assert_one_line_error, free_port
from tests.conftest import app_url, connect, make_app_roles, wait_for

pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="builds the wheel from the source checkout")


def _run(*args, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A wheel built from the checkout, installed into a new virtual environment."""
    tmp = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", CHECKOUT, timeout=300)
    wheel, = (tmp / "dist").glob("opsboard-*.whl")
    _run(sys.executable, "-m", "venv", tmp / "venv", timeout=120)
    _run(tmp / "venv" / "bin" / "pip", "install", "-q", "--no-compile", wheel, timeout=600)
    run_dir = tmp / "run"  # the working folder of every command: not the checkout
    run_dir.mkdir()
    return tmp / "venv" / "bin", run_dir


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPSBOARD_", "PYTHON", "VIRTUAL_ENV")) and k != "DATABASE_URL"}
    env.update(extra)
    return env


def test_the_install_does_not_use_the_source_tree(installed):
    bin_dir, run_dir = installed
    probe = "import json, sys, opsboard, worker; print(json.dumps([opsboard.__file__, worker.__file__, sys.path]))"
    package, worker_package, path = json.loads(
        _run(bin_dir / "python", "-c", probe, cwd=run_dir, env=clean_env()).stdout)
    assert str(bin_dir.parent) in package and str(bin_dir.parent) in worker_package
    assert not any(p and Path(p).resolve().is_relative_to(CHECKOUT) for p in path), path
    assert "usage: opsboard" in _run(bin_dir / "opsboard", "--help", cwd=run_dir, env=clean_env()).stdout
    assert "--queues" in _run(bin_dir / "python", "-m", "worker", "--help", cwd=run_dir, env=clean_env()).stdout
    # The benchmarks travel in the wheel as a package of their own, beside opsboard and worker.
    listing = _run(bin_dir / "opsboard", "bench", "--list", cwd=run_dir, env=clean_env()).stdout
    assert listing.startswith("enqueue_single ") and "\nprune " in listing


def test_migrate_then_serve_login_and_static_files(installed, databases, tmp_path):
    bin_dir, run_dir = installed
    url = databases.empty()
    env = clean_env(DATABASE_URL=url, OPSBOARD_ENV="production", OPSBOARD_SECRET_KEY=secrets.token_hex(32))
    count = len(list((CHECKOUT / "migrations").glob("*.sql")))

    result = _run(bin_dir / "opsboard", "migrate", cwd=run_dir, env=env, timeout=120)
    assert f"{count} migration(s) applied" in result.stdout
    assert "database is up to date" in _run(bin_dir / "opsboard", "migrate", cwd=run_dir, env=env).stdout
    # Production serves as the application role (it refuses a superuser: row-level security).
    make_app_roles(url)
    env = {**env, "DATABASE_URL": app_url(url)}

    port = free_port()
    log = open(tmp_path / "gunicorn.log", "w")
    proc = subprocess.Popen([bin_dir / "gunicorn", "-b", f"127.0.0.1:{port}", "-w", "1", "opsboard.web.wsgi:app"],
                            cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT)

    def get(path: str, headers: dict | None = None):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read()

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"gunicorn exited {proc.returncode}: {(tmp_path / 'gunicorn.log').read_text()}")
        try:
            return json.loads(get("/readyz")[1])
        except OSError:
            return None

    try:
        # Ready means the web app found every migration applied: it read the packaged files too.
        assert wait_for(ready, timeout=30, message="gunicorn to answer")["status"] == "ready"
        status, body = get("/login")
        assert status == 200 and b'name="password"' in body
        status, body = get("/static/css/opsboard.css")
        assert status == 200 and body == (CHECKOUT / "static" / "css" / "opsboard.css").read_bytes()
        # The compiled fa catalog and the vendored font travel in the wheel (issue 14).
        status, body = get("/login", {"Accept-Language": "fa"})
        assert status == 200 and '<html lang="fa" dir="rtl"'.encode() in body and "گذرواژه".encode() in body
        status, body = get("/static/vendor/vazirmatn/Vazirmatn-wght.woff2")
        assert status == 200 and body[:4] == b"wOF2"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_an_install_without_migrations_refuses_to_migrate(installed, databases):
    """The bug this guards against: an install missing migrations/ said "database is up to date"."""
    bin_dir, run_dir = installed
    package = Path(_run(bin_dir / "python", "-c", "import opsboard; print(opsboard.__file__)",
                        cwd=run_dir, env=clean_env()).stdout.strip()).parent
    url = databases.empty()
    shutil.move(package / "migrations", package / "migrations.away")
    try:
        result = subprocess.run([bin_dir / "opsboard", "migrate"], cwd=run_dir, capture_output=True, text=True,
                                env=clean_env(DATABASE_URL=url, OPSBOARD_ENV="test"), timeout=60)
    finally:
        shutil.move(package / "migrations.away", package / "migrations")
    assert_one_line_error(result, "opsboard: no migration files in", str(package / "migrations"))
    with connect(url) as c:
        assert c.execute("SELECT to_regclass('schema_migrations') AS t").fetchone()["t"] is None
