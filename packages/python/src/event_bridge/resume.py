"""Answers that suspend a task: a webhook's ``202`` with a checkpoint.

A webhook whose work outlasts one delivery answers ``202`` with a JSON body, and event-bridge
releases the task without counting an attempt, then delivers it again with ``resume``
(``checkpoint``, the last one answered, and ``done``, the sleeps and waits so far) in its
envelope (the book's "Resumable tasks", docs/book/src/guides/resumable.md)::

    checkpoint({"row": 500})                              # again at once, in another run
    resume_in(30, checkpoint={"row": 500})                # again in 30 s, holding no lease
    wait_for(["order-7"], timedelta(hours=1), checkpoint={"row": 500})
                                                          # again on a signal for order-7,
                                                          # or after an hour

Each returns an ``Answer``: send ``answer.status`` (202), ``answer.headers`` and
``answer.body`` (bytes). A checkpoint left out (None) keeps the last one. The checks here are
the server's: an answer it would refuse (a span with no unit, no key, more than 16 keys, a key
too long for a znode name) raises ``ValueError`` here instead of sending the task to the dead
letters there.
"""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from typing import Any, Iterable, Union

__all__ = ["Answer", "checkpoint", "resume_in", "span", "wait_for"]

#: The most keys one wait may name.
MAX_WAIT_KEYS = 16
#: The longest a signal's key may be as a znode name (bytes other than ASCII letters, digits,
#: ``-`` and ``_`` take three).
MAX_KEY_NAME_BYTES = 200

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1))
_SPAN = re.compile(r"[0-9]+(ms|s|m|h|d)")
_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")

Span = Union[int, float, timedelta, str]


class Answer:
    """A ``202`` that suspends the task: its status, headers and JSON body."""

    status = 202
    headers = {"Content-Type": "application/json"}

    def __init__(self, fields: dict):
        #: The answer as a dict (``checkpoint``, ``resume_in``, ``wait_for``, ``timeout``).
        self.fields = fields

    @property
    def body(self) -> bytes:
        return json.dumps(self.fields, separators=(",", ":")).encode("utf-8")

    def __repr__(self) -> str:
        return f"Answer(202, {self.fields!r})"


def span(after: Span) -> str:
    """``after`` as event-bridge writes a span: a whole number and its unit (``1500ms``,
    ``90s``, ``30m``, ``1h``, ``7d``), the largest unit that says it exactly. Takes seconds
    (an int or a float, rounded up to the millisecond), a ``timedelta``, or such a string."""
    if isinstance(after, str):
        if not _SPAN.fullmatch(after):
            raise ValueError(f"{after!r} is not a span: a whole number and ms, s, m, h or d")
        return after
    if isinstance(after, timedelta):
        ms = math.ceil(after / timedelta(milliseconds=1))
    elif isinstance(after, (int, float)) and not isinstance(after, bool):
        if not math.isfinite(after):
            raise ValueError(f"{after!r} is not a number of seconds")
        ms = math.ceil(after * 1000)
    else:
        raise ValueError(f"{after!r} is not a span: seconds, a timedelta or a string like '90s'")
    if ms < 0:
        raise ValueError(f"a span cannot be negative: {after!r}")
    for unit, scale in _UNITS:
        if ms % scale == 0 and (ms or unit == "ms"):
            return f"{ms // scale}{unit}"
    raise AssertionError("ms divides by 1")


def _with(fields: dict, value: Any) -> Answer:
    if value is not None:
        fields = {"checkpoint": value, **fields}
    return Answer(fields)


def checkpoint(value: Any) -> Answer:
    """Deliver the task again at once (in another run), with ``value`` as its checkpoint."""
    return Answer({"checkpoint": value})


def resume_in(after: Span, checkpoint: Any = None) -> Answer:
    """Deliver the task again ``after`` from now (see ``span``); it holds no lease meanwhile."""
    return _with({"resume_in": span(after)}, checkpoint)


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"a wait's key must be a non-empty string, not {key!r}")
    name = sum(1 if b in _PLAIN else 3 for b in key.encode("utf-8"))
    if name > MAX_KEY_NAME_BYTES:
        raise ValueError(
            f"key {key[:40]!r}… is {name} bytes as a znode name, over the {MAX_KEY_NAME_BYTES} "
            "a signal's key may take"
        )
    return key


def wait_for(keys: Union[str, Iterable[str]], timeout: Span, checkpoint: Any = None) -> Answer:
    """Deliver the task again when any one of ``keys`` is signalled (or was, with a signal
    kept for it), or once ``timeout`` passed. The next delivery's ``Delivery.wait_outcome``
    says which: ``{"by": "signal", "key": …, "payload": …}`` or ``{"by": "timeout"}``."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        raise ValueError("a wait names no key")
    if len(keys) > MAX_WAIT_KEYS:
        raise ValueError(f"a wait names {len(keys)} keys, over the {MAX_WAIT_KEYS} it may")
    keys = [_check_key(key) for key in keys]
    return _with({"wait_for": keys, "timeout": span(timeout)}, checkpoint)
