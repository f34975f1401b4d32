//! Task expiry: a task that no run has started by its `expires_at` is never run; it goes to
//! the dead letters with the reason `expired`.
//!
//! # How it works
//!
//! A task's expiry is its section `expires_at` (an RFC 3339 time, [`ExpiresAt`]), set by the
//! library ([`ExpiresAt::set`]), by `event-bridge publish --expires-in 10m` (counted from
//! ZooKeeper's time at the publish), or by an `expires_at` field of a JSON line or an HTTP
//! publish item. It joins the core through three hooks ([`Expiry`]):
//!
//! - at publish, an `expires_at` that is no RFC 3339 time is refused, naming the field;
//! - at claim, a task whose `expires_at` has come by ZooKeeper's clock (the time a claim judges
//!   every other time by) is buried with the reason `expired` before any handler sees it: the
//!   claim's own ending, so its group, key, batch and children see a death as for any other;
//! - in `explain`, a line says when it expires, or that it has expired.
//!
//! It is judged at every claim, a first or a later one, and nowhere else:
//!
//! - a retry whose backoff ends after the expiry is buried as expired when it is next claimed
//!   (as Celery's `expires` does), and so is a resumable task that wakes after it;
//! - a task that started before its expiry runs to its end: a handler is never stopped;
//! - a task that waits outside its lane when it expires (for its parents under `after/`, a
//!   debounced publish, a grouped task behind its group, a task under `delayed/`) waits on as
//!   it would; it is buried as expired when its turn comes and a claim meets it, never run.
//!   Its children then see a dead parent, and its group goes on (or pauses, with `on_dead`).
//!
//! A publish with an `expires_at` already past is published: its first claim buries it. A task
//! of a paused type is buried all the same when a claim meets it expired (a pause holds back
//! runs, and this is none); one cancelled first goes to the dead letters as cancelled.
//! Versions that know no expiry carry the field unread, and run such a task.

mod hooks;
mod section;

pub use hooks::{EXPIRED, Expiry};
pub use section::ExpiresAt;
