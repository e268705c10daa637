"""The bench's lean webhook receiver verifies every delivery's signature with the product's
``webhooks.verify``: a wrong secret or a stale timestamp is counted bad and answered 400."""
from __future__ import annotations

import time

from opsboard.deliveries import webhooks
from opsboard_bench.receiver import State


def test_signed_deliveries_are_verified_and_bad_ones_counted():
    secret, other = webhooks.generate_secret(), webhooks.generate_secret()
    st = State()
    st.handle("POST", "/_bench/routes", {}, ('{"/hooks/a": {"secret": "%s"}, "/hooks/down": {"secret": "%s", '
                                            '"status": 503}}' % (secret, secret)).encode())
    body = b'{"data":{},"timestamp":"t","type":"x"}'
    now = int(time.time())
    good = webhooks.sign([secret], "msg_1", now, body)
    assert st.handle("POST", "/hooks/a", good, body)[0] == 200
    assert st.handle("POST", "/hooks/down", good, body)[0] == 503
    assert st.handle("POST", "/hooks/a", webhooks.sign([other], "msg_1", now, body), body)[0] == 400
    assert st.handle("POST", "/hooks/a", webhooks.sign([secret], "msg_1", now - 3600, body), body)[0] == 400
    assert st.handle("POST", "/hooks/a", good, body + b" ")[0] == 400
    assert st.handle("POST", "/hooks/unknown", good, body)[0] == 404
    assert st.counts == {"/hooks/a": {"requests": 4, "verified": 1, "bad": 3},
                         "/hooks/down": {"requests": 1, "verified": 1, "bad": 0}}
