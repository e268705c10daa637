"""The errors the core raises, shared by the CLI, the web app and the worker.

:class:`UsageError` is a mistake in how a command was called: the CLI prints it
as one line and exits with status 2.

:class:`OpsError` is the one refusal of the core (a job not found, a status
that forbids an action, a request key reused...).  Its ``code`` is short and
stable: clients, tests and the audit trail match on it, never on the message.
``status`` is the HTTP status the web app answers with (one Flask handler,
:mod:`opsboard.web.errors`); it defaults from the code (:data:`STATUS_BY_CODE`),
so a new code only needs a line there or an explicit ``status=``.

The message is English, for logs, the CLI and the API.  Pages show it in the
reader's language: a message with values is a template with ``%(name)s``
placeholders and the values in ``params`` (``OpsError("no category %(category)s",
"invalid_category", params={"category": slug})``), so the web app can look the
template up in its catalog (:func:`opsboard.web.errors.human_message`).  The
catalog extraction reads the first argument of every ``OpsError(...)`` in
``opsboard/`` (``-k OpsError``, docs/i18n.md): write it as one
literal string, never an f-string.
"""
from __future__ import annotations


class UsageError(Exception):
    """A mistake in how the command was called: exit status 2."""


#: Stable error codes of the core -> HTTP status.  Codes not listed answer 400.
STATUS_BY_CODE: dict[str, int] = {
    # the target does not exist, or is outside the caller's tenant scope
    "not_found": 404,
    # the request is malformed or incomplete
    "reason_required": 400, "invalid_filter": 400, "search_too_short": 400, "invalid_resolution": 400,
    "invalid_tenant": 400,
    # the request is well formed but conflicts with the target's current state
    "invalid_status": 409, "job_expired": 409, "already_resolved": 409, "already_acknowledged": 409, "alert_closed": 409,
    "idempotency_conflict": 409, "request_key_reused": 409, "effect_key_conflict": 409,
    # tickets (opsboard.tickets): the workflow refuses (409 lists the allowed actions), a guard fails,
    # a role may never take the action, an attachment is refused
    "invalid_transition": 409, "decision_required": 409, "reopen_window_passed": 409, "not_a_request": 409,
    "already_assigned": 409, "forbidden": 403, "attachment_too_large": 413, "attachment_type_not_allowed": 415,
}


class OpsError(Exception):
    """A request the core refuses, with a stable ``code`` and the HTTP ``status`` it maps to.

    Example::

        raise OpsError("no such job", "not_found")              # status 404, from STATUS_BY_CODE
        raise OpsError("template is locked", "locked", status=423)
        raise OpsError("no category %(category)s", "invalid_category", params={"category": slug})
    """

    code = "ops_error"

    def __init__(self, message: str, code: str | None = None, *, status: int | None = None,
                 params: dict | None = None):
        #: The message before its values are filled in (the catalog's message id), and the values.
        self.template, self.params = message, dict(params or {})
        text = message % self.params if self.params else message
        super().__init__(text)
        if code:
            self.code = code
        self.message = text
        self.status = status if status is not None else STATUS_BY_CODE.get(self.code, 400)
