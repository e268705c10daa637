"""The job type registry: contracts are checked before anything is written."""
import math

import pytest

from opsboard import jobtypes
from opsboard.jobtypes import Field, InvalidPayload, UnknownJobType, define, get, validate
from tests.conftest import CATALOGUE


def _check_even(payload):
    if payload["n"] % 2:
        raise InvalidPayload("unit.contract: n must be even")


CONTRACT = define(CATALOGUE, "unit.contract", handler="tests.support.jobs:record", fields={
    "to": Field(str, max_length=20),
    "n": Field(int),
    "ratio": Field(float, required=False),
    "mode": Field(str, required=False, choices=("fast", "slow")),
    "tags": Field(list, required=False),
    "flag": Field(bool, required=False),
}, check=_check_even, max_attempts=4, queue="bulk", priority=7)


def test_get_returns_the_registered_type_and_its_policy():
    jt = get("unit.contract")
    assert jt is CONTRACT
    assert (jt.policy.queue, jt.policy.priority, jt.policy.max_attempts) == ("bulk", 7, 4)
    assert get("unit.contract", "1") is CONTRACT  # a version from a URL or a form


@pytest.mark.parametrize("name, version", [("unit.nope", 1), ("unit.contract", 2), ("unit.contract", None),
                                           ("unit.contract", "x")])
def test_unknown_type_or_version_raises(name, version):
    with pytest.raises(UnknownJobType) as e:
        get(name, version)
    assert e.value.code == "unknown_job_type"


def test_a_valid_payload_passes():
    p = {"to": "a", "n": 2, "ratio": 0.5, "mode": "fast", "tags": ["x"], "flag": True}
    assert validate(CONTRACT, p) is p
    assert validate(CONTRACT, {"to": "a", "n": 4, "mode": None})


@pytest.mark.parametrize("payload, words", [
    (["not", "a", "dict"], "JSON object"),
    ({"n": 2}, "'to' is required"),
    ({"to": "a", "n": 2, "extra": 1}, "unknown field"),
    ({"to": 5, "n": 2}, "'to' must be a string"),
    ({"to": "a", "n": "2"}, "'n' must be an integer"),
    ({"to": "a", "n": True}, "'n' must be an integer"),     # bool is not an int here
    ({"to": "a", "n": 2.0}, "'n' must be an integer"),
    ({"to": "a", "n": 2, "flag": 1}, "'flag' must be a boolean"),
    ({"to": "x" * 21, "n": 2}, "longer than 20"),
    ({"to": "a", "n": 2, "mode": "medium"}, "one of fast, slow"),
    ({"to": "a", "n": 3}, "n must be even"),
    ({"to": "a", "n": 2, "ratio": math.nan}, "not JSON"),
    ({"to": "a", "n": 2, "ratio": math.inf}, "not JSON"),
    ({"to": "a", "n": 2, "tags": [object()]}, "not JSON"),
    ({"to": "a\x00b", "n": 2}, "NUL"),
    ({"to": "a", "n": 2, "tags": [{"k": "\x00"}]}, "NUL"),
])
def test_invalid_payloads_raise(payload, words):
    with pytest.raises(InvalidPayload) as e:
        validate(CONTRACT, payload)
    assert words in str(e.value)
    assert e.value.code == "invalid_payload"


def test_a_number_field_accepts_integers():
    # JSON has one number type: 3 is a valid value for a float field.
    assert validate(CONTRACT, {"to": "a", "n": 2, "ratio": 3})
    with pytest.raises(InvalidPayload):
        validate(CONTRACT, {"to": "a", "n": 2, "ratio": False})


def test_payload_size_is_limited_in_utf8_bytes():
    free = define(CATALOGUE, "unit.free", handler="tests.support.jobs:record")
    limit = jobtypes.MAX_PAYLOAD_BYTES
    overhead = len('{"s":""}')
    assert validate(free, {"s": "x" * (limit - overhead)})
    with pytest.raises(InvalidPayload, match="bytes"):
        validate(free, {"s": "x" * (limit - overhead + 1)})
    # Persian letters are two bytes each in UTF-8.
    with pytest.raises(InvalidPayload, match="bytes"):
        validate(free, {"s": "س" * (limit // 2)})
    # Four bytes each: a quarter of the limit in characters is already over it with the JSON around.
    with pytest.raises(InvalidPayload, match="bytes"):
        validate(free, {"s": "😀" * (limit // 4)})
    assert validate(free, {"s": "😀" * ((limit - overhead) // 4)})


def test_a_type_without_fields_takes_any_object():
    free = define(CATALOGUE, "unit.free2", handler="tests.support.jobs:record")
    assert validate(free, {"anything": [1, {"x": None}]})


@pytest.mark.parametrize("kwargs", [
    {"queue": "urgent"}, {"max_attempts": 0}, {"timeout": 0}, {"backoff_base": -1}, {"priority": 40000},
])
def test_bad_policies_are_refused_at_definition(kwargs):
    with pytest.raises(ValueError):
        define(CATALOGUE, "unit.bad", handler="x:y", **kwargs)


@pytest.mark.parametrize("name", ["", "has space", "semi;colon", "x" * 101])
def test_bad_names_are_refused(name):
    with pytest.raises(ValueError):
        define(CATALOGUE, name, handler="x:y")


def test_redefining_replaces_and_versions_are_separate():
    v1 = define(CATALOGUE, "unit.versions", handler="a:b", max_attempts=2)
    v2 = define(CATALOGUE, "unit.versions", 2, handler="a:c", queue="critical")
    assert get("unit.versions", 1) is v1 and get("unit.versions", 2) is v2
    v1b = define(CATALOGUE, "unit.versions", handler="a:b", max_attempts=3)
    assert get("unit.versions").policy.max_attempts == 3 and v1b is not v1
    assert [(t.name, t.version) for t in jobtypes.all_types() if t.name == "unit.versions"] == \
        [("unit.versions", 1), ("unit.versions", 2)]
