"""Traces across every hop: the API request, the outbox event, the job's attempt, the provider call.

W3C trace context (``traceparent``, ``tracestate``) comes in on the API, is stored with the event
(``outbox_events.trace_context``, migration 0072), copied by the relay to the event's jobs as the
correlation id is, and continued by the worker: one span per attempt, one per provider call, and
a webhook request carries ``traceparent`` on to the receiver.  OpenTelemetry's SDK makes and
exports the spans.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: then :func:`setup` installs no provider, no
processor and no exporter, and every helper here is one test of a module global (``_tracer is
None``) returning a shared no-op.  On, spans go to OTLP/HTTP (the exporter reads the standard
``OTEL_EXPORTER_OTLP_*`` variables: endpoint, headers, timeout) through a batch processor, whose
thread is started again in a process forked after set-up (the SDK does that).

The stored form (:func:`context_text`) is the ``traceparent`` value, then a space and the
``tracestate`` value when there is one: a traceparent never holds a space.
"""
from __future__ import annotations

import functools
import logging
import os
import urllib.parse
from typing import Mapping

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import retry
from .config import ConfigError

#: The standard variable (OpenTelemetry's) that turns tracing on.
ENDPOINT_VAR = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: The longest tracestate passed on (W3C asks every hop to pass at least 512 characters); a longer
#: one is dropped, the traceparent kept (migration 0072 bounds the stored text).
MAX_TRACESTATE = 512

log = logging.getLogger("opsboard.tracing")
_PROPAGATOR = TraceContextTextMapPropagator()
#: The tracer while tracing is on, else None (the one test every helper makes).
_tracer: trace.Tracer | None = None
_provider = None


def enabled() -> bool:
    """Whether this process records spans (:func:`setup` installed a provider)."""
    return _tracer is not None


def provider():
    """The SDK's tracer provider of this process while tracing is on (for Flask's instrumentation), else None."""
    return _provider


def setup(service: str, *, exporter=None, simple: bool = False) -> bool:
    """Turn tracing on for this process when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, or when an
    ``exporter`` is given (the tests' in-memory one); returns whether it is on.

    Called once at start by the web app (each gunicorn worker builds its app after the fork) and by
    the worker process.  ``service`` names the process in ``service.name`` (``opsboard-web``,
    ``opsboard-worker``) unless ``OTEL_SERVICE_NAME`` says otherwise.  ``simple`` exports each span
    as it ends (tests) instead of in batches.  A malformed endpoint raises :class:`ConfigError`
    (one line at start).  Idempotent: a second call keeps the first set-up.
    """
    global _tracer, _provider
    if _tracer is not None:
        return True
    endpoint = os.environ.get(ENDPOINT_VAR, "").strip()
    if exporter is None and not endpoint:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if exporter is None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{ENDPOINT_VAR} must be an http:// or https:// URL (the OTLP/HTTP collector), "
                              f"not {endpoint!r}")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint + /v1/traces, headers and timeout from OTEL_EXPORTER_OTLP_*
    name = os.environ.get("OTEL_SERVICE_NAME") or f"opsboard-{service}"
    tp = TracerProvider(resource=Resource.create({"service.name": name}))
    tp.add_span_processor(SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
    _provider, _tracer = tp, tp.get_tracer("opsboard")
    return True


def shutdown() -> None:
    """Flush and end this process's tracing (the worker's exit; tests turn it off again)."""
    global _tracer, _provider
    tp, _tracer, _provider = _provider, None, None
    if tp is not None:
        tp.shutdown()


def context_text(ctx: trace.SpanContext) -> str | None:
    """A span context in the stored form (``traceparent[ tracestate]``), or None when not valid."""
    if not ctx.is_valid:
        return None
    text = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    state = ctx.trace_state.to_header() if ctx.trace_state else ""
    return f"{text} {state}" if state and len(state) <= MAX_TRACESTATE else text


def _extract(text: str | None):
    """The OpenTelemetry context of a stored (or received) trace context; an empty one when it is
    None or not valid (a new trace then)."""
    if not text:
        return None
    parent, _, state = text.partition(" ")
    carrier = {"traceparent": parent}
    if state:
        carrier["tracestate"] = state
    return _PROPAGATOR.extract(carrier)


def request_context(headers: Mapping[str, str]) -> str | None:
    """What a write on the API stores as its trace context (``trace_context`` of the event or job).

    Tracing on: the request's own span (Flask's instrumentation made it a child of a valid
    ``traceparent``, or the root of a new trace), so the worker's spans hang under the API's.
    Tracing off: the caller's ``traceparent`` and ``tracestate`` themselves, when valid, so that a
    worker with tracing on still continues the caller's trace.  A malformed header is ignored
    (nothing stored), never an error.
    """
    if _tracer is not None:
        return context_text(trace.get_current_span().get_span_context())
    parent = headers.get("traceparent")
    if parent is None:
        return None  # the common request: one dict lookup
    carrier = {"traceparent": parent}
    state = headers.get("tracestate")
    if state:
        carrier["tracestate"] = state
    return context_text(trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context())


def inject(headers: dict) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``) to an outgoing request's headers;
    nothing while tracing is off or outside a span."""
    if _tracer is not None:
        _PROPAGATOR.inject(headers)


class _Span:
    """A span opened by :func:`attempt` or :func:`provider_call`: ``record(outcome)`` gives it the
    outcome's kind and code, and an error status for a failed one."""

    __slots__ = ("_cm", "span")

    def __init__(self, cm):
        self._cm, self.span = cm, None

    def __enter__(self):
        self.span = self._cm.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)

    def record(self, outcome) -> None:
        span = self.span
        if isinstance(outcome, retry.Outcome):
            span.set_attribute("opsboard.outcome", type(outcome).__name__.lower())
            code = getattr(outcome, "code", None)
            if code is not None:
                span.set_attribute("opsboard.error_code", code)
            if isinstance(outcome, (retry.Retryable, retry.Permanent, retry.Unknown)):
                span.set_status(Status(StatusCode.ERROR, code))
        elif isinstance(outcome, BaseException):
            span.record_exception(outcome)
            span.set_status(Status(StatusCode.ERROR, type(outcome).__name__))


class _NoSpan:
    """What :func:`attempt` and :func:`provider_call` give while tracing is off: does nothing."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record(self, outcome) -> None:
        pass


_NO_SPAN = _NoSpan()


def attempt(row: dict):
    """A span for one attempt of a claimed job (``with tracing.attempt(row) as span: ...;
    span.record(outcome)``), the child of the job's stored trace context, or the root of a new trace
    without one: job type, id, attempt, tenant and queue as attributes.  A no-op while tracing is off."""
    if _tracer is None:
        return _NO_SPAN
    return _Span(_tracer.start_as_current_span(
        f"job {row['type']}", context=_extract(row.get("trace_context")), kind=SpanKind.CONSUMER,
        attributes={"opsboard.job.type": row["type"], "opsboard.job.id": str(row["id"]),
                    "opsboard.job.attempt": row["attempts"], "opsboard.tenant.id": str(row["tenant_id"]),
                    "opsboard.job.queue": row["queue"]},
        record_exception=True, set_status_on_exception=True))


def provider_call(kind: str, **attributes):
    """A span for one call to a provider (``kind``: ``webhook``, ``smtp``, ``sms``, ``push``), the
    child of the current one (the attempt); ``attributes`` are added under ``opsboard.``.  A no-op
    while tracing is off.  Never give it a recipient's address or a secret: spans leave the product."""
    if _tracer is None:
        return _NO_SPAN
    return _Span(_tracer.start_as_current_span(
        f"{kind} send", kind=SpanKind.CLIENT,
        attributes={"opsboard.provider": kind, **{f"opsboard.{k}": v for k, v in attributes.items() if v is not None}},
        record_exception=True, set_status_on_exception=True))


def traced(kind: str):
    """Decorate a provider's call (``@tracing.traced("webhook")``): while tracing is on, each call is a
    :func:`provider_call` span with the outcome it returns (an outcome, or a result with ``outcome``
    and an HTTP ``status``); off, the call goes straight through (one test of a global)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if _tracer is None:
                return fn(*args, **kwargs)
            with provider_call(kind) as span:
                result = fn(*args, **kwargs)
                span.record(getattr(result, "outcome", result))
                status = getattr(result, "status", None)
                if isinstance(status, int):
                    span.span.set_attribute("http.response.status_code", status)
                return result
        return call
    return wrap


def load_contexts(pool, rows: list[dict]) -> None:
    """Give the claimed ``rows`` their stored trace context (``trace_context``), in one statement on a
    connection of ``pool``: the claim does not return it, so that a worker with tracing off reads
    nothing more per job (migration 0072).  Only while tracing is on; a failure leaves the rows
    without (their attempts start new traces)."""
    if _tracer is None or not rows:
        return
    from . import db

    try:
        with pool.connection() as conn:
            found = {r["id"]: r["trace_context"]
                     for r in db.all_rows(conn, "job_trace_contexts", {"ids": [row["id"] for row in rows]})}
    except Exception as exc:
        log.warning("trace contexts of a claimed batch not read (%s): its attempts start new traces",
                    type(exc).__name__)
        return
    for row in rows:
        row["trace_context"] = found.get(row["id"])
