"""Publish event-bridge tasks from Python, with kazoo.

A task is a persistent sequential znode ``ROOT/tasks/task-NNNNNNNNNN`` holding an
``event-bridge/1`` envelope (docs/ARCHITECTURE.md, "The task envelope"). A task with
``priority="high"`` (or ``"low"``) waits in a lane of its own instead,
``ROOT/lanes/high/high-NNNNNNNNNN`` (``ROOT/lanes/low/low-…``): consumers take high before
normal before low (docs/WIRE-FORMAT.md, "Priority lanes"). A normal task with a
``concurrency_key`` (in no ``group``) waits in its key's lane,
``ROOT/lanes/keys/<key>/key.<key>.NNNNNNNNNN``, so that consumers take keys in turn
(docs/WIRE-FORMAT.md, "Key lanes")::

    from kazoo.client import KazooClient
    from event_bridge import publish

    zk = KazooClient(hosts="127.0.0.1:2181")   # "host:port[,host:port…][/chroot]"
    zk.start()
    name = publish(zk, "user.signup", {"user_id": 42}, idempotency_key="signup-42")
    zk.stop()

From the shell, with the package installed (one JSON line per task created:
``{"task": "task-…", "id": "…"}``)::

    event-bridge-publish --type user.signup --payload '{"user_id": 42}' [--count N]
    event-bridge-publish --type report.build --priority low   # high, normal (the default) or low

(``python -m event_bridge.producer`` is the same command.)

A debounced publish (``--debounce-key K --debounce 30s [--debounce-max 5m]``, or
``debounce={"key": K, "period_ms": 30000}`` from code) creates no task: it writes the envelope to
``ROOT/debounce/<K>``, replacing what is pending there, and prints
``{"published": "debounced", "id": "…", "key": K, "replaced": <the id replaced, or null>}``.
Our consumers make it a task, with the last payload, a period after the key's last publish
(and no later than the maximum after its first) (docs/WIRE-FORMAT.md, "Debounce").

``--zookeeper`` and ``--root`` default to ZOOKEEPER_CONNECTION_STRING and EVENT_BRIDGE_ROOT,
then to 127.0.0.1:2181 and /event-bridge, as for the functions. When ZOOKEEPER_AUTH
(``user:password``) is set, the CLI authenticates with it (digest) and creates the tasks
readable by that user only, as the functions do with the same variable; from code, pass
``auth_data=[("digest", "user:password")]`` to ``KazooClient`` and ``acl=CREATOR_ALL_ACL``.

With ``EVENT_BRIDGE_KICK=on`` (and ``EVENT_BRIDGE_KICK_URL``, ``CRON_SECRET``), the command
kicks a drain once its tasks landed, as our other doors do (:mod:`event_bridge.kick`).
"""

import argparse
import re
import datetime
import json
import os
import sys
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, NodeExistsError
from kazoo.security import CREATOR_ALL_ACL

from .kick import Kick

FORMAT = "event-bridge/1"
# ZooKeeper refuses requests over jute.maxbuffer (1 MiB by default); consumers need some room
# to add their bookkeeping to the envelope, so stay under the limit our own producers use.
MAX_BODY_BYTES = 1_000_000
# Written by consumers only; a producer must never set them.
CONSUMER_FIELDS = ("attempts", "last_error", "retry_at", "keyed")

# Fields whose publish writes more than the task: ``after`` registers a child with its parents
# (it waits under after/<id>), ``batch`` counts a member in its batch. This producer writes only
# the task, so it refuses them; the HTTP publish and ``event-bridge publish`` offer them.
NOT_OFFERED = ("after", "on_parent_dead", "batch")
# A W3C traceparent of version 00.
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")

# How long an idempotency key stays taken after its task completed (DEDUP_WINDOW_MS).
DEDUP_WINDOW_MS = int(os.environ.get("DEDUP_WINDOW_MS", 24 * 3600 * 1000))


# The longest a concurrency key may be as a znode name (bytes other than ASCII letters,
# digits, - and _ take three).
MAX_CONCURRENCY_KEY_NAME_BYTES = 1024


def check_concurrency_key(key):
    """Raises ``ValueError`` naming ``concurrency_key`` unless it is a non-empty string whose
    znode name fits MAX_CONCURRENCY_KEY_NAME_BYTES."""
    if not isinstance(key, str):
        raise ValueError(f"'concurrency_key' must be a string, not {key!r}")
    if not key:
        raise ValueError("'concurrency_key' is empty: give one of at least one character, or none")
    raw = key.encode("utf-8")
    name = sum(1 if (chr(b).isascii() and (chr(b).isalnum() or chr(b) in "-_")) else 3 for b in raw)
    if name > MAX_CONCURRENCY_KEY_NAME_BYTES:
        raise ValueError(
            f"'concurrency_key' is {len(raw)} bytes, {name} as a znode name, "
            f"over the {MAX_CONCURRENCY_KEY_NAME_BYTES} a key may take"
        )


# The priorities a task may have; normal, the default, is left out of the body.
PRIORITIES = ("high", "normal", "low")


def check_priority(priority):
    """Raises ``ValueError`` naming ``priority`` unless it is high, normal or low."""
    if not isinstance(priority, str) or priority not in PRIORITIES:
        raise ValueError(f"'priority' must be high, normal or low, not {priority!r}")


# The longest a debounce key may be as a znode name, and the longest period or maximum wait
# (a week, in ms).
MAX_DEBOUNCE_KEY_NAME_BYTES = 1024
MAX_DEBOUNCE_MS = 7 * 24 * 3600 * 1000
# What a duration's unit is worth in ms.
SPAN_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_span(field, text):
    """``text`` (a whole number and ms, s, m or h: ``30s``, ``5m``) in ms; ``ValueError``
    naming ``field`` otherwise."""
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h)", text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"'{field}' must be a number with a unit (ms, s, m or h), not {text!r}")
    return int(match[1]) * SPAN_UNITS[match[2]]


def debounce_of(key=None, period=None, maximum=None):
    """The ``debounce`` field for a key, a period and an optional maximum as the CLI takes
    them (``"30s"``, ``"5m"``); None when none is given. ``ValueError`` naming the field when
    one is missing or a duration is not one."""
    if key is None:
        if period is not None or maximum is not None:
            field = "debounce" if period is not None else "debounce_max"
            raise ValueError(f"'{field}' needs a 'debounce_key'")
        return None
    if period is None:
        raise ValueError("'debounce_key' needs a 'debounce' period, such as '30s'")
    debounce = {"key": key, "period_ms": parse_span("debounce", period)}
    if maximum is not None:
        debounce["max_ms"] = parse_span("debounce_max", maximum)
    return debounce


def is_ms(value):
    """Whether ``value`` is a whole number of ms (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_debounce(debounce, idempotency_key=None):
    """Raises ``ValueError`` naming the field unless ``debounce`` is a dict with a non-empty
    ``key`` that fits MAX_DEBOUNCE_KEY_NAME_BYTES as a znode name, a ``period_ms`` from 1 to
    a week and, if any, a ``max_ms`` from the period to a week; or when the task also has an
    idempotency key (a debounced publish replaces the pending task, a keyed one refuses a
    second)."""
    if not isinstance(debounce, dict):
        raise ValueError(f"'debounce' must be an object with key and period_ms, not {debounce!r}")
    key = debounce.get("key")
    if not isinstance(key, str):
        raise ValueError(f"'debounce_key' must be a string, not {key!r}")
    if not key:
        raise ValueError("'debounce_key' is empty: give one of at least one character")
    name = len(key_node(key))
    if name > MAX_DEBOUNCE_KEY_NAME_BYTES:
        raise ValueError(
            f"'debounce_key' is {len(key.encode('utf-8'))} bytes, {name} as a znode name, "
            f"over the {MAX_DEBOUNCE_KEY_NAME_BYTES} a key may take"
        )
    period = debounce.get("period_ms")
    if not is_ms(period) or not 1 <= period <= MAX_DEBOUNCE_MS:
        raise ValueError(
            f"'debounce' must be at least 1 ms and at most {MAX_DEBOUNCE_MS} ms, not {period!r}"
        )
    maximum = debounce.get("max_ms")
    if maximum is not None and (not is_ms(maximum) or not period <= maximum <= MAX_DEBOUNCE_MS):
        raise ValueError(
            f"'debounce_max' must be at least the period ({period} ms) and at most "
            f"{MAX_DEBOUNCE_MS} ms, not {maximum!r}"
        )
    if idempotency_key is not None:
        raise ValueError(
            "'debounce_key' and 'idempotency_key' do not go together: a debounced publish "
            "replaces the pending task, a keyed one refuses a second"
        )


def task_prefix(root, priority="normal", concurrency_key=None, group=None):
    """Where a task of ``priority`` is created: ``ROOT/tasks/task-`` for normal,
    ``ROOT/lanes/high/high-`` or ``ROOT/lanes/low/low-`` for the two others; a normal task with
    a ``concurrency_key`` and no ``group`` in its key's lane, ``ROOT/lanes/keys/<key>/key.<key>.``."""
    root = root.rstrip("/")
    if priority == "normal" and concurrency_key and group is None:
        node = key_node(concurrency_key)
        return f"{root}/lanes/keys/{node}/key.{node}."
    if priority == "normal":
        return root + "/tasks/task-"
    return f"{root}/lanes/{priority}/{priority}-"


def ensure_lane(zk, root, prefix, acl=None):
    """Creates the base paths and the parent of ``prefix`` (a key's lane is made by the first
    publish of its key) when missing."""
    ensure_paths(zk, root, acl)
    zk.ensure_path(prefix.rsplit("/", 1)[0], acl=acl)


# Fields a delivery sends as HTTP headers, or the queue names znodes after: one holding a
# control character (C0, which takes CR, LF and NUL in, or DEL) could never be delivered.
TEXT_FIELDS = ("id", "type", "group", "idempotency_key", "concurrency_key")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The most of a bad value a message quotes, in bytes.
SHOWN_BYTES = 100


def shown(value):
    """``value`` quoted for a message: whole when short, else its first SHOWN_BYTES bytes and
    its length."""
    raw = value.encode("utf-8")
    if len(raw) <= SHOWN_BYTES:
        return json.dumps(value)
    return json.dumps(raw[:SHOWN_BYTES].decode("utf-8", "ignore")) + f"… ({len(raw)} bytes)"


def check_text_fields(body):
    """Raises ``ValueError`` naming the field when a text field of the envelope ``body`` holds
    a control character, or ``group`` or ``type`` is empty."""
    texts = [(name, body.get(name)) for name in TEXT_FIELDS]
    texts.append(("debounce_key", (body.get("debounce") or {}).get("key")))
    for name, value in texts:
        if not isinstance(value, str):
            continue
        if value == "" and name in ("type", "group"):
            raise ValueError(f"'{name}' is empty: give one of at least one character")
        bad = CONTROL.search(value)
        if bad is not None:
            raise ValueError(
                f"'{name}' holds a control character (U+{ord(bad[0]):04X}), which no header "
                f"or znode name can carry: {shown(value)}")


def envelope(event_type, payload, **fields):
    """An ``event-bridge/1`` envelope: a fresh uuid id and the time now (UTC, RFC 3339).

    ``fields`` adds optional fields (``group``, ``idempotency_key``, ``concurrency_key``,
    ``priority``, ``debounce``, or your own; not ``after``, ``on_parent_dead`` or ``batch``) and
    may give ``id`` (your event's id, kept across retries) or ``time``.
    """
    for name in CONSUMER_FIELDS:
        if name in fields:
            raise ValueError(f"{name!r} is written by consumers, not producers")
    for name in NOT_OFFERED:
        if name in fields:
            raise ValueError(
                f"{name!r} is not offered by this producer: its publish writes more than the "
                "task; publish it through the HTTP publish or `event-bridge publish`")
    if "concurrency_key" in fields:
        check_concurrency_key(fields["concurrency_key"])
    if "priority" in fields:
        check_priority(fields["priority"])
        if fields["priority"] == "normal":
            del fields["priority"]  # the default: left out, as consumers expect
    if "debounce" in fields:
        debounce = fields["debounce"]
        check_debounce(debounce, fields.get("idempotency_key"))
        # A copy with the three fields consumers read; no maximum is left out, not null.
        fields["debounce"] = {k: debounce[k] for k in ("key", "period_ms", "max_ms")
                              if debounce.get(k) is not None}
    now = datetime.datetime.now(datetime.timezone.utc)
    body = {
        "format": FORMAT,
        "id": str(uuid.uuid4()),
        "type": event_type,
        "time": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "payload": payload,
    }
    body.update(fields)
    check_text_fields(body)
    return body


def ensure_paths(zk, root="/event-bridge", acl=None):
    """Creates ROOT, ROOT/tasks, ROOT/lanes/high, ROOT/lanes/low, ROOT/leases and ROOT/keys
    when missing (a concurrent create is fine)."""
    root = root.rstrip("/")
    lanes = (root + "/lanes/high", root + "/lanes/low")
    for path in (root + "/tasks", *lanes, root + "/leases", root + "/keys"):
        zk.ensure_path(path, acl=acl)


def key_node(key):
    """``key`` as one znode name: bytes other than ASCII letters, digits, ``-``, ``_`` as %XX."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
    encoded = "".join(chr(b) if b in safe else f"%{b:02X}" for b in key.encode("utf-8"))
    return encoded or "%"


def publish_keyed(zk, data, key, event_id, root="/event-bridge", acl=None, priority="normal",
                  lane=None):
    """Creates ``keys/<key>`` and the task, in the lane of ``priority``, in one transaction
    (docs/WIRE-FORMAT.md, "Idempotency keys"). Returns ``(name, True)`` for a new task,
    ``(name, False)`` when the key was taken (nothing created; ``name`` is the task that has
    it, or None if unknown)."""
    root = root.rstrip("/")
    key_path = f"{root}/keys/{key_node(key)}"
    prefix = lane or task_prefix(root, priority)
    for _ in range(5):
        tx = zk.transaction()
        tx.create(key_path, json.dumps({"id": event_id}).encode(), acl=acl)
        tx.create(prefix, data, acl=acl, sequence=True)
        results = tx.commit()
        if not isinstance(results[0], Exception):
            name = results[1].rsplit("/", 1)[1]
            named = {"id": event_id, "task": name}
            zk.set(key_path, json.dumps(named).encode(), version=0)
            return name, True
        # The operation that failed has its error; those before it were rolled back (the key
        # was free, the task's lane missing: a new concurrency key's).
        if any(isinstance(result, NoNodeError) for result in results):
            ensure_lane(zk, root, prefix, acl)
            continue
        if not isinstance(results[0], NodeExistsError):
            raise results[0]
        taken = existing(zk, key_path)
        if taken is not False:
            return taken, False
    raise KazooException(f"idempotency key {key!r} kept changing; try again")


def existing(zk, key_path):
    """The task that has the key at ``key_path``; False when the key is free (gone, or past
    its window after completion, in which case it is deleted)."""
    for _ in range(20):
        try:
            data, stat = zk.get(key_path)
        except NoNodeError:
            return False
        key = json.loads(data)
        completed = key.get("completed_at")
        if completed is not None and completed + DEDUP_WINDOW_MS <= time.time() * 1000:
            try:
                zk.delete(key_path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            return False
        if key.get("task") or completed is not None:
            return key.get("task")
        time.sleep(0.05)  # the winner writes its task's name right after its create
    return None


# The due index's bucket for keys no consumer has filed yet (docs/WIRE-FORMAT.md, "Debounce").
UNFILED_BUCKET = "0000000000000"
# A place's due time, 9999-12-31T23:59:59Z in ms (docs/WIRE-FORMAT.md, "Places").
PLACE_DUE_MS = 253_402_300_799_000


def write_debounced(zk, data, key, root="/event-bridge", acl=None):
    """Writes the envelope ``data`` to ``ROOT/debounce/<key>`` (docs/WIRE-FORMAT.md,
    "Debounce"): created when nothing is pending for the key, with the key's entry in the due
    index's unfiled bucket (and, for a grouped task, its place in its lane) in the same
    transaction; else rewritten at the version read (with the entry too when the rewrite may
    make the key due sooner). Returns the id of the envelope it replaced, or None when it
    created the node. A key pending in another group than ``data``'s is refused
    (``ValueError``)."""
    root = root.rstrip("/")
    node = key_node(key)
    path = f"{root}/debounce/{node}"
    entry = f"{root}/debounce-due/{UNFILED_BUCKET}/{node}"
    body = json.loads(data)
    for _ in range(5):
        try:
            pending, stat = zk.get(path)
        except NoNodeError:
            pending = None
        filed = zk.exists(entry) is not None
        if pending is None:
            done = create_debounced(zk, root, path, None if filed else entry, body, acl)
            if done:
                return None
            continue
        old = pending_envelope(pending)
        if old.get("group") != body.get("group"):
            raise ValueError(
                f"debounce_key {key!r} is pending in {group_name(old.get('group'))}: a publish "
                "of it keeps that group until it fires")
        rewrite = dict(body)
        if old.get("placed") is not None:
            rewrite["placed"] = old["placed"]
        sooner = falls_due_sooner(body.get("debounce", {}), old.get("debounce"))
        tx = zk.transaction()
        tx.set_data(path, body_bytes(rewrite), version=stat.version)
        if sooner and not filed:
            tx.create(entry, b"", acl=acl)
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return pending_id(pending)
        if any(isinstance(r, NoNodeError) for r in results[1:]):
            ensure_debounce_paths(zk, root, acl)
        # Otherwise another publish, or a consumer firing the task, got in first: read again.
    raise KazooException(f"debounce key {key!r} kept changing while it was published; try again")


def create_debounced(zk, root, path, entry, body, acl=None):
    """Creates the pending node ``path`` with the key's unfiled ``entry`` (None: one is there
    already) and, for a grouped task, its place; False when another publish created it first,
    or when a parent was missing (created now): look again."""
    tx = zk.transaction()
    if body.get("group") is not None:
        body = dict(body, placed=body["id"])
        place = place_body(body, {"debounce": {"key": body["debounce"]["key"]}})
        prefix = task_prefix(root, body.get("priority", "normal"), None, body["group"])
    tx.create(path, body_bytes(body), acl=acl)
    if entry is not None:
        tx.create(entry, b"", acl=acl)
    if body.get("group") is not None:
        tx.create(prefix, body_bytes(place), acl=acl, sequence=True)
    results = tx.commit()
    if not any(isinstance(r, Exception) for r in results):
        return True
    if any(isinstance(r, NoNodeError) for r in results):
        ensure_debounce_paths(zk, root, acl)
    return False


def ensure_debounce_paths(zk, root, acl=None):
    """Creates the base paths and the parents a debounced publish writes under."""
    ensure_paths(zk, root, acl)
    for parent in ("/debounce", f"/debounce-due/{UNFILED_BUCKET}"):
        zk.ensure_path(root + parent, acl=acl)


def place_body(task, stands_for):
    """The place that keeps grouped ``task``'s turn in its lane while it waits elsewhere
    (docs/WIRE-FORMAT.md, "Places")."""
    place = {"format": FORMAT, "id": task["id"], "type": task["type"], "time": task["time"],
             "payload": None, "group": task["group"], "retry_at": PLACE_DUE_MS,
             "place": stands_for}
    if task.get("on_dead") is not None:
        place["on_dead"] = task["on_dead"]
    return place


def pending_envelope(data):
    """The pending envelope ``data`` as a dict ({} when it is not one)."""
    try:
        body = json.loads(data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def group_name(group):
    return "no group" if group is None else f"group {group!r}"


def falls_due_sooner(debounce, pending):
    """Whether a publish asking for ``debounce`` may make a key pending with ``pending`` (its
    debounce, None when unreadable) due sooner: a shorter period, or a maximum shorter or new."""
    if not isinstance(pending, dict):
        return True
    mine, theirs = debounce.get("max_ms"), pending.get("max_ms")
    shorter_max = mine is not None and (theirs is None or mine < theirs)
    return debounce.get("period_ms", 0) < pending.get("period_ms", 0) or shorter_max


def pending_id(data):
    """The ``id`` of the pending envelope ``data`` ("" when it is not one)."""
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    return str(body.get("id", "")) if isinstance(body, dict) else ""


def publish_debounced(zk, event_type, payload, root="/event-bridge", acl=None, **fields):
    """Publishes one task debounced by ``fields["debounce"]`` (as :func:`debounce_of` makes
    it): no task is created now; its envelope waits under ``ROOT/debounce/<key>``, replacing
    the one pending there. Returns the id of the envelope it replaced, or None."""
    if "debounce" not in fields:
        raise ValueError("'debounce' is missing: give a key and a period (see debounce_of)")
    body = envelope(event_type, payload, **fields)
    return write_debounced(zk, body_bytes(body), body["debounce"]["key"], root, acl)


def body_bytes(body):
    """The envelope ``body`` as its znode's data; ``ValueError`` when ZooKeeper would refuse
    it."""
    data = json.dumps(body, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_BODY_BYTES:
        raise ValueError(
            f"task body is {len(data)} bytes, over {MAX_BODY_BYTES}: "
            "put large data in object storage and a reference in the payload"
        )
    return data


def publish(zk, event_type, payload, root="/event-bridge", acl=None, **fields):
    """Publishes one task; returns its name (``task-0000000042``, or ``high-…`` / ``low-…`` in
    those lanes). With ``idempotency_key`` in ``fields``, a key that is taken creates nothing
    and the name returned is that of the task that has it (:func:`publish_detailed` says which
    happened). With ``debounce``, it is ``debounce/<key>``, where the envelope waits
    (:func:`publish_debounced` says what it replaced)."""
    return publish_detailed(zk, event_type, payload, root, acl, **fields)[0]


def publish_detailed(zk, event_type, payload, root="/event-bridge", acl=None, **fields):
    """Publishes one task; returns ``(name, created)``: ``created`` is False when its
    idempotency key was taken and nothing was created.

    ``zk`` is a started ``KazooClient`` (a chroot in its hosts string is honoured);
    ``payload`` any JSON-serialisable value; ``acl`` the task's ACL (kazoo's default, open to
    anyone, when None; ``CREATOR_ALL_ACL`` on an authenticated session); ``fields`` as for
    :func:`envelope`. Raises ``ValueError`` for a body ZooKeeper would refuse, kazoo's errors
    otherwise.
    """
    if "debounce" in fields:
        publish_debounced(zk, event_type, payload, root, acl, **fields)
        return f"debounce/{fields['debounce']['key']}", True
    body = envelope(event_type, payload, **fields)
    if body.get("idempotency_key") is not None:
        body["keyed"] = True
    data = body_bytes(body)
    priority = body.get("priority", "normal")
    prefix = task_prefix(root, priority, body.get("concurrency_key"), body.get("group"))
    if body.get("keyed"):
        return publish_keyed(zk, data, body["idempotency_key"], body["id"], root, acl, priority,
                             prefix)
    try:
        path = zk.create(prefix, data, acl=acl, sequence=True)
    except NoNodeError:
        # First task under this root, or of this key: create the paths, then try again.
        ensure_lane(zk, root, prefix, acl)
        path = zk.create(prefix, data, acl=acl, sequence=True)
    return path.rsplit("/", 1)[1], True


def publish_one(zk, event_type, payload, root, acl, **fields):
    """Publishes one task with a fresh id; returns the line the CLI prints for it, as the
    Rust CLI does: ``{"task", "id"}``, ``{"task", "duplicate": true}`` for a taken key, or
    ``{"published": "debounced", "id", "key", "replaced"}``."""
    event_id = str(uuid.uuid4())
    if "debounce" in fields:
        replaced = publish_debounced(zk, event_type, payload, root, acl, id=event_id, **fields)
        key = fields["debounce"]["key"]
        return {"published": "debounced", "id": event_id, "key": key, "replaced": replaced}
    name, created = publish_detailed(zk, event_type, payload, root, acl, id=event_id, **fields)
    return {"task": name, "id": event_id} if created else {"task": name, "duplicate": True}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="event-bridge-publish", description="Publish event-bridge tasks."
    )
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get("ZOOKEEPER_CONNECTION_STRING", "127.0.0.1:2181"),
        help="host:port[,host:port…][/chroot] (env ZOOKEEPER_CONNECTION_STRING)",
    )
    parser.add_argument(
        "--root",
        default=os.environ.get("EVENT_BRIDGE_ROOT", "/event-bridge"),
        help="root znode of the queue (env EVENT_BRIDGE_ROOT)",
    )
    parser.add_argument("--type", required=True, help="event type, e.g. user.signup")
    parser.add_argument("--payload", default="{}", help="the payload, as JSON")
    parser.add_argument("--count", type=int, default=1, help="tasks to publish (each its own id)")
    parser.add_argument("--group", help="optional group field")
    parser.add_argument(
        "--concurrency-key",
        help="tasks with one key share their route's per_key limits (max_in_flight, rate)",
    )
    parser.add_argument(
        "--priority",
        metavar="{high,normal,low}",
        help="the lane the task waits in: consumers take high before normal before low",
    )
    parser.add_argument(
        "--traceparent",
        help="W3C Trace Context of the request the task comes from (00-<trace>-<span>-<flags>)",
    )
    parser.add_argument(
        "--idempotency-key",
        help="publish only if no task has this key (pending, held, or completed within "
        "DEDUP_WINDOW_MS); a duplicate prints the task that has it, with \"duplicate\": true",
    )
    parser.add_argument(
        "--debounce-key",
        help="publishes with this key within --debounce make one task, with the last payload",
    )
    parser.add_argument(
        "--debounce",
        metavar="PERIOD",
        help="with --debounce-key: the task is due this long after the key's last publish "
        "(a whole number and ms, s, m or h: 30s, 5m)",
    )
    parser.add_argument(
        "--debounce-max",
        metavar="MAX",
        help="with --debounce-key: and no later than this long after its first",
    )
    args = parser.parse_args(argv)

    try:
        payload = json.loads(args.payload)
    except ValueError as e:
        parser.error(f"--payload is not JSON: {e}")
    if args.count < 1:
        parser.error("--count must be at least 1")
    fields = {}
    if args.group is not None:
        fields["group"] = args.group
    if args.traceparent is not None:
        if not TRACEPARENT.fullmatch(args.traceparent):
            parser.error("--traceparent is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
        fields["traceparent"] = args.traceparent
    if args.idempotency_key is not None:
        fields["idempotency_key"] = args.idempotency_key
    if args.concurrency_key is not None:
        try:
            check_concurrency_key(args.concurrency_key)
        except ValueError as e:
            parser.error(f"--concurrency-key: {e}")
        fields["concurrency_key"] = args.concurrency_key
    if args.priority is not None:
        try:
            check_priority(args.priority)
        except ValueError as e:
            parser.error(f"--priority: {e}")
        fields["priority"] = args.priority
    try:
        debounce = debounce_of(args.debounce_key, args.debounce, args.debounce_max)
        if debounce is not None:
            check_debounce(debounce, args.idempotency_key)
    except ValueError as e:
        parser.error(str(e))
    if debounce is not None:
        fields["debounce"] = debounce

    try:
        kick = Kick.from_env()
    except ValueError as e:
        parser.error(str(e))

    auth = os.environ.get("ZOOKEEPER_AUTH")
    zk = KazooClient(
        hosts=args.zookeeper,
        timeout=10.0,
        auth_data=[("digest", auth)] if auth else None,
    )
    acl = CREATOR_ALL_ACL if auth else None
    try:
        zk.start(timeout=10)
    except Exception as e:  # kazoo raises its own timeout type
        print(f"event-bridge-publish: cannot connect to ZooKeeper at {args.zookeeper}: {e}", file=sys.stderr)
        return 1
    try:
        for _ in range(args.count):
            line = publish_one(zk, args.type, payload, args.root, acl, **fields)
            print(json.dumps(line), flush=True)
        if kick is not None:
            kicked = kick.after_publish(zk, args.root, acl)
            if kicked.startswith("failed"):
                print(f"event-bridge-publish: kick {kicked}; the publish stands", file=sys.stderr)
    except (KazooException, ValueError) as e:
        reason = type(e).__name__ + (f": {e}" if str(e) else "")
        print(f"event-bridge-publish: publishing under {args.root} failed: {reason}", file=sys.stderr)
        return 1
    finally:
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
