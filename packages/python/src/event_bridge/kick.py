"""Kicks from Python: once tasks landed, start a drain of process_events through its HTTP
trigger, unless one is due already (the book's "Kicks: a task starts soon after its publish").

Off unless ``EVENT_BRIDGE_KICK=on``. The ``event-bridge-publish`` command kicks once after
its tasks landed; from code, after publishing::

    from event_bridge.kick import Kick

    kick = Kick.from_env()          # None when kicks are off
    if kick:
        kick.after_publish(zk, root="/event-bridge")

Kicks coalesce through the znode ``ROOT/kick`` (``{"at_ms": MS}``, ZooKeeper's time when the
kick was sent) exactly as the Rust publishers do, so all of them share it: the publisher that
creates it kicks, the others find it standing and do not; one older than ``KICK_STALE_MS``
(30 s) is a lost kick, taken over (written at the version read) by the next publisher, which
kicks again; a kicked drain deletes it. The trigger is POSTed with ``Authorization: Bearer
$CRON_SECRET``; its answer comes when the drain ends, so a publisher waits ``KICK_WAIT_MS`` (1 s)
at most and takes a request still unanswered then as sent. Only HTTP triggers are served here:
``lambda:`` targets (Lambda's Invoke API) are the Rust publishers' and the HTTP publish's.
A kick that fails never fails the publish: :meth:`Kick.after_publish` says what happened.
"""

import json
import os
import socket
import urllib.error
import urllib.request

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

STALE_MS = 30_000
WAIT_MS = 1_000


def _millis(environ, name, default, low, high):
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValueError(f"{name}={raw!r}: set whole milliseconds, {low} to {high}")
    return int(raw)


class Kick:
    """A publisher's kicks: the trigger's URL and secret, and the two bounds."""

    def __init__(self, url, secret=None, stale_ms=STALE_MS, wait_ms=WAIT_MS):
        if not url.startswith(("http://", "https://")):
            raise ValueError(
                f"EVENT_BRIDGE_KICK_URL={url!r}: this producer kicks an http(s) trigger only "
                "(process_events' …?drain=1)"
            )
        self.url, self.secret = url, secret
        self.stale_ms, self.wait_ms = stale_ms, wait_ms

    @classmethod
    def from_env(cls, environ=os.environ):
        """The kicks the environment asks for, or None when ``EVENT_BRIDGE_KICK`` is not on.
        Raises ``ValueError`` naming the variable that is wrong."""
        switch = environ.get("EVENT_BRIDGE_KICK", "").strip().lower()
        if switch in ("", "off", "false", "0", "no"):
            return None
        if switch not in ("on", "true", "1", "yes"):
            raise ValueError(f"EVENT_BRIDGE_KICK={switch!r}: set on or off")
        url = environ.get("EVENT_BRIDGE_KICK_URL", "").strip()
        if not url:
            raise ValueError("EVENT_BRIDGE_KICK_URL: required with EVENT_BRIDGE_KICK=on")
        secret = environ.get("CRON_SECRET", "").strip() or None
        stale = _millis(environ, "KICK_STALE_MS", STALE_MS, 1_000, 86_400_000)
        wait = _millis(environ, "KICK_WAIT_MS", WAIT_MS, 10, 600_000)
        return cls(url, secret, stale, wait)

    def after_publish(self, zk, root="/event-bridge", acl=None):
        """Kicks when a kick is due. Returns what happened: ``"standing"`` (a kick is due
        already), ``"kicked"``, or ``"failed: <why>"``; never raises."""
        try:
            if self.due(zk, root, acl) == "standing":
                return "standing"
            self.send()
            return "kicked"
        except Exception as e:  # the publish stands whatever the kick met
            return f"failed: {type(e).__name__}: {e}"

    def due(self, zk, root, acl=None):
        """``"made"`` or ``"taken_over"`` when this publisher kicks, else ``"standing"``."""
        path = f"{root}/kick"
        now = server_time(zk, root, acl)
        data = json.dumps({"at_ms": now}).encode()
        for _ in range(2):  # a node deleted between the create and the read is made again
            try:
                zk.create(path, data, acl=acl)
                return "made"
            except NodeExistsError:
                pass
            try:
                old, stat = zk.get(path)
            except NoNodeError:
                continue
            try:
                at_ms = int(json.loads(old)["at_ms"])
            except (ValueError, KeyError, TypeError):
                at_ms = None  # unreadable: a lost kick
            if at_ms is not None and now - at_ms < self.stale_ms:
                return "standing"
            try:
                zk.set(path, data, version=stat.version)
                return "taken_over"
            except (BadVersionError, NoNodeError):
                return "standing"
        return "standing"

    def send(self):
        """POSTs the trigger; an answer must be a success, none within the wait means sent."""
        request = urllib.request.Request(self.url, data=b"", method="POST")
        if self.secret:
            request.add_header("Authorization", f"Bearer {self.secret}")
        try:
            with urllib.request.urlopen(request, timeout=self.wait_ms / 1000) as answer:
                answer.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"the trigger answered {e.code}") from None
        except (socket.timeout, TimeoutError):
            return  # sent; the drain it started is still running
        except urllib.error.URLError as e:
            if isinstance(e.reason, (socket.timeout, TimeoutError)):
                return
            raise


def server_time(zk, root, acl=None):
    """ZooKeeper's time in ms, as our consumers read it: the mtime of a write to
    ``ROOT/clock`` (made when missing)."""
    path = f"{root}/clock"
    try:
        return zk.set(path, b"").mtime
    except NoNodeError:
        zk.ensure_path(root)
        try:
            zk.create(path, b"", acl=acl)
        except NodeExistsError:
            pass
        return zk.set(path, b"").mtime
