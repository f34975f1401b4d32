"""event-bridge for Python: publish tasks to its queue on ZooKeeper, and receive them as
signed webhooks that may suspend with a checkpoint.

- ``event_bridge.producer``: ``publish`` (and the ``event-bridge-publish`` command) over kazoo;
- ``event_bridge.kick``: ``Kick``, a drain of process_events started once tasks landed;
- ``event_bridge.webhooks``: ``verify`` and ``Delivery``, the Standard Webhooks check of a
  delivery and what its headers and envelope say;
- ``event_bridge.resume``: ``checkpoint``, ``resume_in`` and ``wait_for``, the ``202`` answers
  that suspend a task.
"""

from importlib.metadata import PackageNotFoundError, version as _version

from .kick import Kick
from .producer import envelope, publish, publish_detailed
from .resume import Answer, checkpoint, resume_in, wait_for
from .webhooks import Delivery, WebhookVerificationError, verify

try:
    #: event-bridge's one version, the same for the crate, the gem and the npm package.
    __version__ = _version("event-bridge")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "Answer",
    "Delivery",
    "Kick",
    "WebhookVerificationError",
    "checkpoint",
    "envelope",
    "publish",
    "publish_detailed",
    "resume_in",
    "verify",
    "wait_for",
]
