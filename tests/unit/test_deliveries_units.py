"""Pure pieces of the delivery side: classification, Retry-After, settings, E.164, signing."""
from __future__ import annotations

import ipaddress
import time
from email.utils import formatdate

import pytest

from opsboard import retry
from opsboard.deliveries import webhooks
from opsboard.config import ConfigError
from opsboard.config import ProviderSettings
from opsboard.deliveries.messages import InvalidRecipient, check_e164, render
from opsboard.deliveries.providers import http


@pytest.mark.parametrize("status, kind", [(200, retry.Success), (204, retry.Success), (301, retry.Permanent),
                                          (400, retry.Permanent), (404, retry.Permanent), (410, retry.Permanent),
                                          (408, retry.Retryable), (429, retry.Retryable), (500, retry.Retryable),
                                          (503, retry.Retryable)])
def test_http_classification(status, kind):
    assert isinstance(http.classify(status, {}), kind)


def test_retry_after_seconds_and_http_date():
    assert http.classify(429, {"retry-after": "17"}).retry_after == 17
    later = formatdate(time.time() + 120, usegmt=True)
    assert 100 < http.retry_after({"retry-after": later}) <= 121
    assert http.retry_after({"retry-after": "soon"}) is None
    assert http.retry_after({}) is None


def test_ipv4_mapped_loopback_is_blocked():
    assert http._blocked(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert not http._blocked(ipaddress.ip_address("93.184.216.34"))


def test_settings_parse_and_refuse_bad_values():
    s = ProviderSettings.from_env({"OPSBOARD_WEBHOOK_ALLOW": "127.0.0.1, 10.0.0.0/8", "OPSBOARD_SMTP_PORT": "587",
                                   "OPSBOARD_SMTP_SECURITY": "starttls"})
    assert ipaddress.ip_address("10.2.3.4") in s.webhook_allow[1] and s.smtp_port == 587
    for env in ({"OPSBOARD_WEBHOOK_ALLOW": "not-an-ip"}, {"OPSBOARD_SMTP_SECURITY": "tls"},
                {"OPSBOARD_SMTP_PORT": "0"}, {"OPSBOARD_BREAKER_FAILURES": "x"}):
        with pytest.raises(ConfigError):
            ProviderSettings.from_env(env)


def test_e164():
    assert check_e164("+989121234567") == "+989121234567"
    with pytest.raises(InvalidRecipient):
        check_e164("00989121234567")


def test_render_templates():
    assert render("otp", 1, {"code": "123456", "minutes": 2})[1].startswith("Your opsboard code is 123456")
    with pytest.raises(KeyError):
        render("otp", 1, {})


def test_body_is_stable_and_signature_matches_the_spec_example():
    # The example of the Standard Webhooks specification.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    sig = webhooks.signature(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                             b'{"test": 2432232314}')
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

