"""Configuration parsing: every bad value is one clear ConfigError naming the setting."""
from __future__ import annotations

import pytest

from opsboard.config import Config, ConfigError, parse_queue_slots

GOOD_SECRET = "s" * 40


def env(**values) -> dict[str, str]:
    return {"OPSBOARD_ENV": "test", **values}


# ---------------------------------------------------------------- queue slots

@pytest.mark.parametrize("text, expected", [
    ("critical=2,default=8,bulk=2", {"critical": 2, "default": 8, "bulk": 2}),
    (" default = 3 , critical=1 ", {"default": 3, "critical": 1}),
    ("bulk=1,", {"bulk": 1}),
    ("default=1000", {"default": 1000}),
])
def test_parse_queue_slots_accepts(text, expected):
    assert parse_queue_slots(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("foo=1", "'foo=1' is not NAME=COUNT"),
    ("default", "'default' is not NAME=COUNT"),
    ("default=x", "'x' for default is not a whole number"),
    ("default=1.5", "is not a whole number"),
    ("default=0", "default=0 must be between 1 and 1000"),
    ("default=-2", "must be between 1 and 1000"),
    ("default=1001", "must be between 1 and 1000"),
    ("", "at least one queue"),
    (" , ", "at least one queue"),
    ("default=1,default=2", "default is given twice"),
])
def test_parse_queue_slots_rejects(text, fragment):
    with pytest.raises(ConfigError) as info:
        parse_queue_slots(text)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


# ---------------------------------------------------------------- numbers

def test_defaults_without_any_variable():
    c = Config.from_env(env())
    assert (c.lease_seconds, c.pool_min, c.pool_max, c.poll_interval) == (30, 1, 10, 1.0)
    assert c.worker_queues == {"critical": 2, "default": 8, "bulk": 2}
    assert c.database_url is None
    assert c.login_max_failures_account == 5 and c.login_max_failures_address == 20


def test_numbers_are_parsed():
    c = Config.from_env(env(OPSBOARD_LEASE_SECONDS="45", OPSBOARD_POLL_INTERVAL="0.25",
                            OPSBOARD_RETENTION_DAYS="0", OPSBOARD_WORKER_QUEUES="default=3",
                            DATABASE_URL="postgresql://x@h/db", OPSBOARD_JOB_MODULES=" a.b , c ,"))
    assert c.lease_seconds == 45
    assert c.poll_interval == 0.25
    assert c.retention_days == 0.0
    assert c.worker_queues == {"default": 3}
    assert c.database_url == "postgresql://x@h/db"
    assert c.job_modules == ("a.b", "c")


@pytest.mark.parametrize("name, value, fragment", [
    ("OPSBOARD_LEASE_SECONDS", "abc", "OPSBOARD_LEASE_SECONDS='abc' is not a whole number"),
    ("OPSBOARD_LEASE_SECONDS", "1", "OPSBOARD_LEASE_SECONDS=1 must be between 2 and 86400"),
    ("OPSBOARD_LEASE_SECONDS", "86401", "must be between 2 and 86400"),
    ("OPSBOARD_LEASE_SECONDS", "2.5", "is not a whole number"),
    ("OPSBOARD_POOL_MAX", "0", "OPSBOARD_POOL_MAX=0 must be between 1 and 500"),
    ("OPSBOARD_SHUTDOWN_GRACE_SECONDS", "-1", "must be between 0 and 3600"),
    ("OPSBOARD_POLL_INTERVAL", "fast", "OPSBOARD_POLL_INTERVAL='fast' is not a number"),
    ("OPSBOARD_POLL_INTERVAL", "0.001", "OPSBOARD_POLL_INTERVAL=0.001 must be between 0.01 and 60"),
    ("OPSBOARD_POLL_INTERVAL", "nan", "OPSBOARD_POLL_INTERVAL=nan must be between"),
    ("OPSBOARD_RETENTION_DAYS", "inf", "must be between 0.0 and 3650"),
    ("OPSBOARD_LOGIN_MAX_FAILURES_ACCOUNT", "0", "must be between 1 and 1000"),
    ("OPSBOARD_WORKER_QUEUES", "foo=1", "queue slots: 'foo=1'"),
])
def test_bad_values_name_the_variable(name, value, fragment):
    with pytest.raises(ConfigError) as info:
        Config.from_env(env(**{name: value}))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, lo, hi", [
    ("OPSBOARD_LEASE_SECONDS", 2, 86400),
    ("OPSBOARD_POOL_MIN", 0, 10),  # up to the default pool_max
    ("OPSBOARD_LOGIN_WINDOW_SECONDS", 1, 86400),
])
def test_int_bounds_are_inclusive(name, lo, hi):
    attr = name.removeprefix("OPSBOARD_").lower()
    assert getattr(Config.from_env(env(**{name: str(lo)})), attr) == lo
    assert getattr(Config.from_env(env(**{name: str(hi)})), attr) == hi


def test_empty_value_means_default():
    assert Config.from_env(env(OPSBOARD_LEASE_SECONDS="")).lease_seconds == 30


def test_pool_min_above_pool_max_is_refused():
    with pytest.raises(ConfigError, match="OPSBOARD_POOL_MIN=20 is larger than OPSBOARD_POOL_MAX=5"):
        Config.from_env(env(OPSBOARD_POOL_MIN="20", OPSBOARD_POOL_MAX="5"))
    assert Config.from_env(env(OPSBOARD_POOL_MIN="5", OPSBOARD_POOL_MAX="5")).pool_max == 5


# ---------------------------------------------------------------- mode and secret

@pytest.mark.parametrize("mode", ["staging", "prod", "TEST"])
def test_unknown_mode_is_refused(mode):
    with pytest.raises(ConfigError, match=f"OPSBOARD_ENV='{mode}' is not one of production, development, demo, test"):
        Config.from_env({"OPSBOARD_ENV": mode})


def test_mode_defaults_to_production_and_argument_wins():
    assert Config.from_env({}).mode == "production"
    assert Config.from_env({"OPSBOARD_ENV": "test"}, mode="demo").mode == "demo"


def test_production_without_secret_cannot_serve():
    c = Config.from_env({"OPSBOARD_ENV": "production"})
    assert c.secret_key == ""
    assert c.log_format == "json"
    with pytest.raises(ConfigError, match="OPSBOARD_SECRET_KEY is not set"):
        c.require_secret()


def test_production_with_short_secret_is_refused():
    with pytest.raises(ConfigError, match="OPSBOARD_SECRET_KEY is too short"):
        Config.from_env({"OPSBOARD_ENV": "production", "OPSBOARD_SECRET_KEY": "short"})


def test_production_with_long_secret_is_accepted():
    c = Config.from_env({"OPSBOARD_ENV": "production", "OPSBOARD_SECRET_KEY": GOOD_SECRET})
    assert c.secret_key == GOOD_SECRET
    c.require_secret()


def test_test_mode_gets_a_random_secret_each_time():
    a, b = Config.from_env(env()), Config.from_env(env())
    assert a.secret_key and b.secret_key and a.secret_key != b.secret_key
    assert a.log_format == "text"
    a.require_secret()


def test_development_secret_is_stable():
    a = Config.from_env({"OPSBOARD_ENV": "development"})
    assert a.secret_key == Config.from_env({"OPSBOARD_ENV": "development"}).secret_key != ""


def test_log_format_is_validated():
    with pytest.raises(ConfigError, match="OPSBOARD_LOG_FORMAT='xml' must be json or text"):
        Config.from_env(env(OPSBOARD_LOG_FORMAT="xml"))
    assert Config.from_env(env(OPSBOARD_LOG_FORMAT="json")).log_format == "json"


def test_replace_keeps_other_fields():
    c = Config.from_env(env(OPSBOARD_LEASE_SECONDS="40"))
    d = c.replace(login_max_failures_address=3)
    assert d.login_max_failures_address == 3
    assert d.lease_seconds == 40 and d.secret_key == c.secret_key
    assert c.login_max_failures_address == 20


def test_pgdata_defaults_under_instance_dir(tmp_path):
    c = Config.from_env(env(OPSBOARD_INSTANCE_DIR=str(tmp_path)))
    assert c.pgdata == tmp_path / "pgdata"
    assert Config.from_env(env(OPSBOARD_DATA_DIR=str(tmp_path / "pg"))).pgdata == tmp_path / "pg"


@pytest.mark.parametrize("name, value, fragment", [
    ("OPSBOARD_SMTP_PORT", "0", "OPSBOARD_SMTP_PORT=0 must be between 1 and 65535"),
    ("OPSBOARD_SMTP_PORT", "smtp", "OPSBOARD_SMTP_PORT='smtp' is not a whole number"),
    ("OPSBOARD_SMTP_SECURITY", "tls", "OPSBOARD_SMTP_SECURITY='tls' must be none, starttls or ssl"),
    ("OPSBOARD_SMTP_TIMEOUT", "0", "OPSBOARD_SMTP_TIMEOUT=0.0 must be between 0.1 and 300"),
    ("OPSBOARD_SMTP_FROM", "nobody", "OPSBOARD_SMTP_FROM='nobody' is not an email address"),
    ("OPSBOARD_SMTP_CA_FILE", "/nonexistent/ca.pem", "OPSBOARD_SMTP_CA_FILE='/nonexistent/ca.pem'"),
    ("OPSBOARD_SMS_URL", "ftp://gw/sms", "OPSBOARD_SMS_URL='ftp://gw/sms' is not an http(s) URL"),
    ("OPSBOARD_SMS_TIMEOUT", "soon", "OPSBOARD_SMS_TIMEOUT='soon' is not a number"),
    ("OPSBOARD_VAPID_PRIVATE_KEY", "not a key", "OPSBOARD_VAPID_PRIVATE_KEY is not a base64url P-256"),
    ("OPSBOARD_VAPID_SUBJECT", "ops@example.com", "OPSBOARD_VAPID_SUBJECT='ops@example.com' must start with"),
    ("OPSBOARD_PUSH_TIMEOUT", "-1", "OPSBOARD_PUSH_TIMEOUT=-1.0 must be between"),
    ("OPSBOARD_WEBHOOK_TIMEOUT", "nan", "OPSBOARD_WEBHOOK_TIMEOUT=nan must be between"),
    ("OPSBOARD_WEBHOOK_MAX_RESPONSE", "1e6", "OPSBOARD_WEBHOOK_MAX_RESPONSE='1e6' is not a whole number"),
    ("OPSBOARD_WEBHOOK_ALLOW", "127.0.0.1, intranet", "OPSBOARD_WEBHOOK_ALLOW: 'intranet' is not an address"),
    ("OPSBOARD_WEBHOOK_DISABLE_AFTER", "0", "OPSBOARD_WEBHOOK_DISABLE_AFTER=0.0 must be between"),
    ("OPSBOARD_BREAKER_FAILURES", "x", "OPSBOARD_BREAKER_FAILURES='x' is not a whole number"),
    ("OPSBOARD_BREAKER_FAILURE_RATE", "2", "OPSBOARD_BREAKER_FAILURE_RATE=2.0 must be between 0.01 and 1.0"),
    ("OPSBOARD_BREAKER_MIN_CALLS", "0", "OPSBOARD_BREAKER_MIN_CALLS=0 must be between"),
    ("OPSBOARD_BREAKER_WINDOW", "0.5", "OPSBOARD_BREAKER_WINDOW=0.5 must be between"),
    ("OPSBOARD_BREAKER_COOLDOWN_MAX", "5", "OPSBOARD_BREAKER_COOLDOWN_MAX=5.0 is smaller than"),
])
def test_bad_provider_values_name_the_variable(name, value, fragment):
    with pytest.raises(ConfigError) as info:
        Config.from_env(env(**{name: value}))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_provider_settings_are_part_of_the_config():
    from opsboard.deliveries.messages import generate_vapid_keys
    private, _ = generate_vapid_keys()
    c = Config.from_env(env(OPSBOARD_WEBHOOK_ALLOW="127.0.0.1, 10.0.0.0/8", OPSBOARD_SMTP_PORT="587",
                            OPSBOARD_SMTP_SECURITY="ssl", OPSBOARD_VAPID_PRIVATE_KEY=private,
                            OPSBOARD_SMS_URL="https://gw.example/sms/", OPSBOARD_BREAKER_FAILURES="7"))
    p = c.providers
    assert p.smtp_port == 587 and p.smtp_security == "ssl" and p.breaker_failures == 7
    assert p.sms_url == "https://gw.example/sms" and p.vapid_private_key == private
    assert [str(n) for n in p.webhook_allow] == ["127.0.0.1/32", "10.0.0.0/8"]
    assert private not in repr(c)  # secrets stay out of reprs (and so out of logs)
    assert Config.from_env(env()).providers == Config().providers  # defaults


@pytest.mark.parametrize("argv", [["opsboard", "migrate"], ["worker"]])
def test_a_bad_provider_value_stops_the_cli_with_one_line(argv, monkeypatch, capsys):
    monkeypatch.setenv("OPSBOARD_BREAKER_FAILURE_RATE", "lots")
    if argv[0] == "opsboard":
        from opsboard.cli import main
        code = main(argv[1:])
    else:
        from worker.cli import main
        code = main([])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == "opsboard: OPSBOARD_BREAKER_FAILURE_RATE='lots' is not a number"


def test_a_transaction_pooler_needs_a_direct_url_and_turns_off_what_it_cannot_carry():
    from opsboard import db

    with pytest.raises(ConfigError, match="OPSBOARD_DATABASE_POOLER='session' is not one of none, transaction"):
        Config.from_env({"OPSBOARD_DATABASE_POOLER": "session"})
    with pytest.raises(ConfigError, match="needs OPSBOARD_DIRECT_DATABASE_URL"):
        Config.from_env({"DATABASE_URL": "postgresql://app@bouncer:6432/ob", "OPSBOARD_DATABASE_POOLER": "transaction"})
    c = Config.from_env({"DATABASE_URL": "postgresql://app@bouncer:6432/ob", "OPSBOARD_DATABASE_POOLER": "transaction",
                         "OPSBOARD_DIRECT_DATABASE_URL": "postgresql://app@db:5432/ob"})
    assert (c.database_pooler, db.resolve_direct_url(c)) == ("transaction", "postgresql://app@db:5432/ob")
    assert db.resolve_direct_url(Config.from_env({"DATABASE_URL": "postgresql://app@db/ob"})) == "postgresql://app@db/ob"
    # Through the pooler: nothing prepared on the server, no settings in the startup packet.
    assert db.connection_kwargs("transaction") == {"prepare_threshold": None}
    assert db.connection_kwargs("none") == {"options": "-c jit=off"}
