"""Journeys through the real processes: the fixtures every journey shares, from their one home each."""
from tests.browser.test_ops_journey import browser, shots  # noqa: F401  (Debian's chromium, screenshots)
from tests.support.processes import stack  # noqa: F401  (gunicorn, python -m worker, the env pointing at the sandbox)
from tests.support.sandbox import sandbox  # noqa: F401  (the provider sandbox: aiosmtpd, SMS, Web Push, webhooks)
