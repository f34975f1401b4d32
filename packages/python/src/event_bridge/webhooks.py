"""Receiving event-bridge's webhooks: the signature check and what a delivery carries.

An HTTP route with ``"signature": "standard"`` signs each delivery as Standard Webhooks do
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature``). ``verify`` checks them with the
reference verifier (PyPI ``standardwebhooks``) and returns the task's envelope; ``Delivery``
adds what event-bridge's own headers say about this attempt::

    from event_bridge.webhooks import Delivery, WebhookVerificationError

    try:
        delivery = Delivery.verified(SECRET, raw_body, request_headers)   # SECRET: "whsec_…"
    except WebhookVerificationError:
        return 401
    delivery.payload, delivery.attempt, delivery.fencing_token, delivery.checkpoint

Pass the raw body, as bytes, before any JSON parsing: the signature covers those bytes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["Delivery", "WebhookVerificationError", "verify"]


def verify(secret: str, body: bytes, headers: Mapping[str, str]) -> Any:
    """The envelope (parsed JSON) of a delivery whose Standard Webhooks headers sign ``body``
    with ``secret`` (the route's ``whsec_…``), stamped within 5 minutes of this clock.

    Raises ``WebhookVerificationError`` for anything else, a malformed header or body
    included. ``headers`` is any mapping with ``items()`` (a dict, ``http.server``'s
    ``self.headers``, a framework's request headers); names are matched in any case. A
    secret that is not ``whsec_`` and base64 raises at once, as the configuration error it is.
    """
    webhook = Webhook(secret)
    try:
        return webhook.verify(body, {name: value for name, value in headers.items()})
    except WebhookVerificationError:
        raise
    except (ValueError, TypeError) as e:
        # The reference verifier lets a malformed signature (no comma, bad base64) or a body
        # that is not UTF-8 or JSON escape as what Python raised: a refusal all the same.
        raise WebhookVerificationError(f"malformed delivery: {type(e).__name__}: {e}") from None


def _header(headers: Mapping[str, str], name: str) -> Optional[str]:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _number(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Delivery:
    """One attempt of one task, as the HTTP sink sent it (the book's "Webhooks: the HTTP sink", docs/book/src/integrations/webhooks.md)."""

    #: The task's envelope: ``format``, ``id``, ``type``, ``time``, ``payload``, and ``resume``
    #: once the task was suspended by a 202.
    envelope: Any
    #: ``X-Event-Bridge-Task``: the task znode's name.
    task: Optional[str] = None
    #: ``X-Event-Bridge-Fencing-Token``: grows with every claim of the task. Refuse to write
    #: for a token lower than the highest you stored for the idempotency key.
    fencing_token: Optional[int] = None
    #: ``X-Event-Bridge-Attempt``: the claim's number, 1 on the first; a 202 counts none.
    attempt: Optional[int] = None
    #: ``Idempotency-Key``: the same on every attempt of the task.
    idempotency_key: Optional[str] = None
    #: ``X-Event-Bridge-Deadline``: answer by then (ms since the Unix epoch, sender's clock).
    deadline_ms: Optional[int] = None

    @classmethod
    def verified(cls, secret: str, body: bytes, headers: Mapping[str, str]) -> "Delivery":
        """The delivery of a request whose signature ``verify`` accepts (it raises
        ``WebhookVerificationError`` otherwise)."""
        envelope = verify(secret, body, headers)
        return cls(
            envelope=envelope,
            task=_header(headers, "x-event-bridge-task"),
            fencing_token=_number(_header(headers, "x-event-bridge-fencing-token")),
            attempt=_number(_header(headers, "x-event-bridge-attempt")),
            idempotency_key=_header(headers, "idempotency-key"),
            deadline_ms=_number(_header(headers, "x-event-bridge-deadline")),
        )

    @property
    def payload(self) -> Any:
        return self.envelope.get("payload")

    @property
    def resume(self) -> dict:
        """The envelope's ``resume`` record (``checkpoint``, ``done``), ``{}`` on a first
        delivery."""
        resume = self.envelope.get("resume")
        return resume if isinstance(resume, dict) else {}

    @property
    def checkpoint(self) -> Any:
        """What the last 202 answered as its checkpoint; None before any."""
        return self.resume.get("checkpoint")

    @property
    def wait_outcome(self) -> Optional[dict]:
        """How the last wait ended, when this delivery follows one: ``{"by": "signal", "key":
        …, "payload": …}`` or ``{"by": "timeout"}``; None otherwise."""
        done = self.resume.get("done") or []
        last = done[-1] if done else None
        if isinstance(last, dict) and last.get("kind") == "wait":
            return last.get("outcome")
        return None

    def time_left(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left before the deadline (0 once passed), None without one. Answer a 202
        with a checkpoint before it runs out."""
        if self.deadline_ms is None:
            return None
        now = time.time() if now is None else now
        return max(self.deadline_ms / 1000 - now, 0.0)
