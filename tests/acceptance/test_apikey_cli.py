"""`opsboard apikey create` prints the key alone on its last line; list and revoke."""
import subprocess
import sys

from opsboard import auth
from opsboard.config import ROOT
from tests.conftest import connect, worker_env


def run(db_url, *args):
    return subprocess.run([sys.executable, "-m", "opsboard.cli", "apikey", *args], cwd=ROOT, env=worker_env(db_url),
                          capture_output=True, text=True, timeout=60)


def test_create_list_revoke(db_url):
    with connect(db_url) as c:
        auth.ensure_tenant(c, "acme")
    r = run(db_url, "create", "--tenant", "acme", "--name", "billing")
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip().splitlines()[-1]
    assert key.startswith("obk_") and " " not in key
    listed = run(db_url, "list", "--tenant", "acme").stdout
    assert key[:10] in listed and key not in listed and "live" in listed
    key_id = listed.split()[0]
    assert run(db_url, "revoke", key_id).returncode == 0
    assert "revoked" in run(db_url, "list", "--tenant", "acme").stdout
    with connect(db_url) as c:
        assert [r["action"] for r in c.execute("SELECT action FROM audit_log ORDER BY at").fetchall()] == [
            "apikey.create", "apikey.revoke"]
    bad = run(db_url, "create", "--tenant", "nope")
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr
