"""schemathesis over /api/v1/openapi.json: generated requests (valid and invalid)
never get a 500, and every answer matches the document (status, content type,
headers, body schema).  Bounded: a few dozen examples per operation."""
import os
import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                               response_schema_conformance, status_code_conformance)

from opsboard import apikeys, audit, auth
from tests.conftest import connect

EXAMPLES = int(os.environ.get("OPSBOARD_SCHEMATHESIS_EXAMPLES", "30"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


@pytest.fixture
def api_key(app):
    with connect(app.extensions["test_db_url"]) as c:
        tenant = auth.ensure_tenant(c, f"fuzz-{uuid.uuid4().hex[:6]}")
        # Room for every generated request: the rate limit is not what this test is about.
        c.execute("UPDATE tenants SET enqueue_rate = 100000, enqueue_burst = 100000 WHERE id = %s", (tenant["id"],))
        secret, _ = apikeys.create(c, tenant["id"], "fuzz", audit.Actor("test"))
    return secret


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_matches_its_openapi_document(app, api_key, mode):
    # Driven through hypothesis directly: schemathesis' pytest fixture loader does not run on pytest 9.
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 25  # events, jobs (2), otp (2), webhooks (7) + 6 ticket and 7 inbox operations (user token: 401 here)
    for operation in operations:
        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        def check(case):
            case.call_and_validate(headers={"Authorization": f"Bearer {api_key}"}, checks=CHECKS)

        check()
