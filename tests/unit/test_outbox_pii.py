"""The outbox's personal-data heuristic and payload contract (no database)."""
import pytest

from opsboard import outbox
from opsboard.outbox import EventField, EventRefused
from tests.conftest import CATALOGUE


@pytest.mark.parametrize("text,kind", [
    ("write to maria.rossi@example.com", "email"),
    ("+39 347 123 4567", "phone"),
    ("(0049) 30-1234567", "phone"),
    ("call 06 12345678 now", "phone"),
    ("shipped to Maria Rossi", "name"),
    ("Dear John Smith-Jones,", "name"),
])
def test_personal_data_is_detected(text, kind):
    assert outbox.personal_data_kind(text) == kind


@pytest.mark.parametrize("text", [
    "0190e1f2-1234-7abc-8def-0123456789ab", "ord_123456789012", "12345678-1234-7123-8123-123456789012",
    "free", "EUR", "order 42", "version 2.1.0", "2026-11-30T01:02:03Z", "A1234567",
])
def test_ids_and_codes_pass(text):
    assert outbox.personal_data_kind(text) is None


ET = outbox.EventType("test.thing_done", 1, "thing", {
    "thing_id": EventField(str), "note": EventField(str, required=False),
    "phone": EventField(str, required=False, pii=True), "tags": EventField(list, required=False)})


def test_unknown_field_is_refused_with_its_name():
    with pytest.raises(EventRefused) as e:
        outbox.validate_payload(ET, {"thing_id": "t1", "email": "x"})
    assert (e.value.code, e.value.field) == ("unknown_field", "payload.email")
    assert "allowed: note, phone, tags, thing_id" in str(e.value)


def test_pii_in_free_text_is_refused_unless_declared():
    with pytest.raises(EventRefused) as e:
        outbox.validate_payload(ET, {"thing_id": "t1", "note": "ask Maria Rossi"})
    assert (e.value.code, e.value.field) == ("personal_data", "payload.note")
    with pytest.raises(EventRefused) as e:
        outbox.validate_payload(ET, {"thing_id": "t1", "tags": ["ok", "a@b.io"]})
    assert e.value.field == "payload.tags[1]"
    outbox.validate_payload(ET, {"thing_id": "t1", "phone": "+39 347 123 4567"})  # declared pii


def test_missing_and_mistyped_fields():
    with pytest.raises(EventRefused, match="required") as e:
        outbox.validate_payload(ET, {})
    assert e.value.code == "missing_field"
    with pytest.raises(EventRefused) as e:
        outbox.validate_payload(ET, {"thing_id": 3})
    assert (e.value.code, e.value.field) == ("invalid_field", "payload.thing_id")


def test_upcasters_chain_and_refuse_gaps():
    outbox.define_event(CATALOGUE, "test.widget_made", 1, aggregate="widget", fields={"widget_id": EventField(str)})
    outbox.define_event(CATALOGUE, "test.widget_made", 2, aggregate="widget", fields={"widget_id": EventField(str),
                                                                        "size": EventField(int)})
    outbox.define_event(CATALOGUE, "test.widget_made", 3, aggregate="widget", fields={"widget_id": EventField(str),
                                                                        "size_mm": EventField(int)})
    outbox.define_upcaster(CATALOGUE, "test.widget_made", 1, lambda p: {**p, "size": 1})
    outbox.define_upcaster(CATALOGUE, "test.widget_made", 2, lambda p: {"widget_id": p["widget_id"], "size_mm": p["size"] * 10})
    assert outbox.upcast("test.widget_made", 1, {"widget_id": "w"}, 3) == {"widget_id": "w", "size_mm": 10}
    with pytest.raises(LookupError):
        outbox.upcast("test.widget_made", 3, {"widget_id": "w", "size_mm": 1}, 2)


def test_job_ids_sort_like_their_events():
    from opsboard.schema import new_id
    events = [new_id() for _ in range(1000)]
    for sub in ("a", "crm_webhook"):
        jobs = [outbox.job_id_for(e, sub) for e in events]
        assert jobs == sorted(jobs) and len(set(jobs)) == 1000
        assert all(j.version == 7 for j in jobs)
    assert outbox.job_id_for(events[0], "a") != outbox.job_id_for(events[0], "crm_webhook")
