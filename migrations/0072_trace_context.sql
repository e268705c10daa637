-- 0072: the W3C trace context travels with an event and the jobs made from it (issue 46).
--
-- trace_context holds the caller's `traceparent`, then a space and its `tracestate` when it had one
-- (a traceparent has no space), exactly as opsboard.tracing writes it: the API stores it with the
-- event, the relay copies it to the event's jobs as it copies correlation_id, and a worker with
-- tracing on continues the trace from it (one span per attempt).  A nullable column without a
-- default: adding it rewrites nothing, and a job or event without a trace (the common case) spends
-- one bit of its row's NULL bitmap.  The claim does not return it: a worker with tracing on reads
-- the contexts of its claimed batch in one statement of its own (job_trace_contexts), so a worker
-- with tracing off moves not one byte more per job.  The length bounds what a caller can make us
-- store: 55 characters of traceparent and a tracestate of at most 512 (what W3C asks every hop to
-- pass on; opsboard.tracing drops a longer tracestate before it gets here).
ALTER TABLE outbox_events ADD COLUMN trace_context text
    CONSTRAINT outbox_events_trace_context_len CHECK (length(trace_context) <= 600);
ALTER TABLE jobs ADD COLUMN trace_context text
    CONSTRAINT jobs_trace_context_len CHECK (length(trace_context) <= 600);
