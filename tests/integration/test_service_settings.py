"""The leader's services take their settings from Config (one source for each setting)."""
from datetime import timedelta

from opsboard.config import Config
from worker.services import default_services
from worker.services.pruner import Pruner


def _pruner(config: Config) -> Pruner:
    [pruner] = [s for s in default_services(config) if isinstance(s, Pruner)]
    return pruner


def _failures_left(conn) -> set[str]:
    return {r["email"] for r in conn.execute("SELECT email FROM login_failures WHERE email LIKE '%%@window.test'")}


def test_the_pruner_keeps_login_failures_for_the_configured_window(conn, t0):
    config = Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_LOGIN_WINDOW_SECONDS": "3600"})
    for email, age in (("20min@window.test", 20), ("50min@window.test", 50), ("70min@window.test", 70)):
        conn.execute("INSERT INTO login_failures (email, address, at) VALUES (%s, '127.0.0.1', %s)",
                     (email, t0 - timedelta(minutes=age)))
    _pruner(config).run_once(conn, now=t0)
    # The throttle counts an hour of failures: the pruner must not forget them after 15 minutes.
    assert _failures_left(conn) == {"20min@window.test", "50min@window.test"}


def test_the_default_window_still_applies_without_the_setting(conn, t0):
    config = Config.from_env({"OPSBOARD_ENV": "test"})
    assert config.login_window_seconds == 900
    for email, age in (("10min@window.test", 10), ("20min@window.test", 20)):
        conn.execute("INSERT INTO login_failures (email, address, at) VALUES (%s, '127.0.0.1', %s)",
                     (email, t0 - timedelta(minutes=age)))
    _pruner(config).run_once(conn, now=t0)
    assert _failures_left(conn) == {"10min@window.test"}


def test_the_pruner_keeps_jobs_for_the_configured_retention():
    config = Config.from_env({"OPSBOARD_ENV": "test", "OPSBOARD_RETENTION_DAYS": "30"})
    assert _pruner(config).config.retention_days == 30.0
