"""Email over SMTP (smtplib): STARTTLS or SSL and credentials from the settings, bounded time.

Reply classes: 2xx success (the reply's ``queued as <id>`` is kept as the
reference); 4xx retryable; 5xx permanent; a connection lost or a timeout after
DATA was sent is unknown.  The Message-ID is deterministic (from the message
id), so a resend after an ambiguous failure carries the same Message-ID.
"""
from __future__ import annotations

import re
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY

from opsboard import retry, tracing
from opsboard.config import ProviderSettings

_QUEUED = re.compile(rb"queued as ([A-Za-z0-9._-]+)", re.I)


def message_id(key: str, sender: str) -> str:
    domain = sender.rpartition("@")[2] or "opsboard.invalid"
    return f"<{key}@{domain}>"


def build(settings: ProviderSettings, key: str, to: str, subject: str, body: str, headers: dict | None = None,
          html: str | None = None) -> EmailMessage:
    """The message: text/plain, or multipart/alternative (text, then ``html``) when ``html`` is given."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = settings.smtp_from, to, subject
    msg["Message-ID"] = message_id(key, settings.smtp_from)
    for k, v in (headers or {}).items():
        msg[k] = v
    msg.set_content(body)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    return msg


@tracing.traced("smtp")
def send(settings: ProviderSettings, msg: EmailMessage) -> retry.Outcome:
    data_sent = False
    try:
        if settings.smtp_security == "ssl":
            client = smtplib.SMTP_SSL(settings.smtp_host, settings.smtp_port, timeout=settings.smtp_timeout,
                                      context=_tls(settings))
        else:
            client = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.smtp_timeout)
        with client:
            client.ehlo_or_helo_if_needed()
            if settings.smtp_security == "starttls":
                client.starttls(context=_tls(settings))
                client.ehlo()
            if settings.smtp_user:
                client.login(settings.smtp_user, settings.smtp_password)
            code, reply = client.mail(settings.smtp_from)
            if code != 250:
                return _by_code(code, reply)
            code, reply = client.rcpt(str(msg["To"]))
            if code not in (250, 251):
                return _by_code(code, reply)
            data_sent = True
            # CRLF line ends (RFC 5321): smtplib sends bytes as they are, and a server reads bare-LF
            # text as one line, refusing any message over 1,000 bytes as "line too long".
            code, reply = client.data(msg.as_bytes(policy=SMTP_POLICY))
            if code != 250:
                return _by_code(code, reply)
            m = _QUEUED.search(reply or b"")
            # The server's words: bytes that are not UTF-8 must not turn a sent message into an error.
            return retry.Success(ref=m.group(1).decode("utf-8", "replace") if m else "smtp_250")
    except smtplib.SMTPAuthenticationError as exc:
        return retry.Permanent(f"smtp_auth_{exc.smtp_code}", detail=_reply(exc.smtp_code, exc.smtp_error))
    except smtplib.SMTPResponseException as exc:
        return _by_code(exc.smtp_code, exc.smtp_error)
    except smtplib.SMTPServerDisconnected as exc:
        # smtplib reports a read timeout as "Connection unexpectedly closed: timed out".
        code = "smtp_timeout" if "timed out" in str(exc) else "smtp_disconnected"
        return retry.Unknown(code) if data_sent else retry.Retryable(code)
    except (socket.timeout, TimeoutError):
        return retry.Unknown("smtp_timeout") if data_sent else retry.Retryable("smtp_timeout")
    except ConnectionRefusedError:
        return retry.Retryable("smtp_connect_refused")
    except (ssl.SSLError, smtplib.SMTPNotSupportedError):
        return retry.Permanent("smtp_tls")
    except OSError as exc:
        return retry.Retryable(f"smtp_{type(exc).__name__.lower()}")


def _tls(settings: ProviderSettings) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=settings.smtp_ca_file or None)


def _reply(code: int, reply: bytes | str | None) -> str:
    """The server's reply as an attempt's detail (``SMTP 550: 5.1.1 mailbox unknown``), redacted:
    a reply often names the recipient's address."""
    text = reply.decode("utf-8", "replace") if isinstance(reply, (bytes, bytearray)) else (reply or "")
    return retry.redact(f"SMTP {code}: {' '.join(text.split())}")


def _by_code(code: int, reply: bytes | str | None = None) -> retry.Outcome:
    if 400 <= code < 500:
        return retry.Retryable(f"smtp_{code}", detail=_reply(code, reply))
    return retry.Permanent(f"smtp_{code}", detail=_reply(code, reply))
