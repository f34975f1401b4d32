//! Signals: what a resumable task waits for ([`crate::resume::Steps::wait_for`]).
//!
//! ```text
//! signals/<key>                         its data version counts the signals sent to the key
//! signals/<key>/s-<sequence>            a signal not consumed yet: {"payload": …}
//! signals/<key>/w-<since>~<task name>   a task waiting for the key: {"waiting": <its path
//!                                       under delayed/>, "keys": [every key it waits for]}
//! signals/<key>/d-<sequence>            signal s-<sequence> was taken by a wait, for its
//!                                       signaller to read: {"task": <its name>}
//! ```
//!
//! A signal is consumed exactly once, in the multi-op that moves a waiting task back to its
//! lane with the signal's payload in its record (its delivery) or that releases the task that
//! asked for the wait with it ([`crate::process`]): that multi-op deletes the signal, so two
//! consumers cannot both land. Signals and waits pair oldest first: a key two tasks wait for
//! wakes the one that waited first, and its next signal the other.
//!
//! Each signaller delivers its own signal, and only it: to the waiter whose turn among the
//! key's waiters is its signal's turn among the key's signals (the n-th oldest signal to the
//! n-th oldest waiter), or it is kept when there is no such waiter. Signallers that race so
//! take different waiters, and each answers with the task that got its own payload. A wait
//! that takes a kept signal leaves a note of it (`d-`) in the same multi-op, so a signaller
//! that finds its signal gone reads who took it. The reaper delivers only what a signaller
//! left for [`SIGNALLER_GRACE_MS`] (it stopped between its two writes), and deletes notes that
//! old.
//!
//! No signal is lost to a wait registered at the same time: the wait's multi-op checks the
//! key's version as read when it found no signal, and a signal's multi-op raises it, so a
//! wait that missed a signal fails and reads again; a signal that landed first is found by
//! the wait, one that landed after finds the wait's registration.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zookeeper_client as zk;

use super::ops::{Multi, Op, Part};
use crate::clock::ZkTime;
use crate::error::{Error, Result};
use crate::layout::decode_segment;
use crate::resume::{Entry, WaitOutcome, check_signal_key};
use crate::task::{self, Body};

recipe!(
    /// Signals: kept until a wait consumes them, and delivered to tasks that wait (`signals`).
    Signals,
    signals
);

const SIGNAL_PREFIX: &str = "s-";
const WAITER_PREFIX: &str = "w-";
const NOTE_PREFIX: &str = "d-";

/// How long a signal is its signaller's to deliver: the reaper delivers one only once it is
/// this old, and a note of a signal a wait took is kept this long for the signaller to read. A
/// signaller delivers its own within moments; one this late stopped between its writes.
pub const SIGNALLER_GRACE_MS: i64 = 60_000;

/// How many signals one delivery hands out, at most, before it returns.
const DELIVER_PER_CALL: usize = 64;

/// The note a wait that takes the signal at `signal` leaves for its signaller: its path and
/// data, naming task `task`.
pub(crate) fn taken_note(signal: &str, task: &str) -> (String, Vec<u8>) {
    let (key, name) = signal.rsplit_once('/').unwrap_or(("", signal));
    let sequence = name.strip_prefix(SIGNAL_PREFIX).unwrap_or(name);
    let data = serde_json::to_vec(&Note { task: task.into() }).unwrap_or_default();
    (format!("{key}/{NOTE_PREFIX}{sequence}"), data)
}

/// A note of a signal a wait took.
#[derive(Serialize, Deserialize)]
struct Note {
    task: String,
}

/// A signal, as kept.
#[derive(Serialize, Deserialize)]
struct Kept {
    payload: Value,
}

/// A task's registration as a waiter of a key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Waiter {
    /// Where the task waits under `delayed/`.
    pub(crate) waiting: String,
    /// Every key it waits for (it is registered under each).
    pub(crate) keys: Vec<String>,
}

/// The name of task `name`'s registration, waiting since `since_ms`.
pub(crate) fn waiter_name(since_ms: i64, name: &str) -> String {
    format!("{WAITER_PREFIX}{since_ms:013}~{name}")
}

/// What came of a signal.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signalled {
    /// A waiting task took its payload: back in its lane under this name.
    Delivered {
        /// The task's name in its lane.
        task: String,
    },
    /// No task waiting had its turn for it: kept for the first wait, for `SIGNAL_KEEP_MS`.
    Kept,
}

impl Signalled {
    /// The answer to signal `key`, as the HTTP door and the command give it
    /// (`SignalAnswer` in `docs/openapi.yaml`): `{"signal": key, "delivered": {"task": name}}`
    /// or `{"signal": key, "kept": true}`.
    pub fn answer(&self, key: &str) -> Value {
        match self {
            Signalled::Delivered { task } => {
                serde_json::json!({ "signal": key, "delivered": { "task": task } })
            }
            Signalled::Kept => serde_json::json!({ "signal": key, "kept": true }),
        }
    }
}

/// What a wait about to be registered found of a key.
pub(crate) struct Look {
    /// The key's data version when no signal was there.
    pub(crate) version: i32,
    /// The oldest signal not consumed: its path and payload.
    pub(crate) oldest: Option<(String, Value)>,
}

/// A registration as read.
enum Registration {
    Waits(Waiter),
    Gone,
    /// Not a registration this version can read.
    Unreadable,
}

/// What one pairing of a signal and a waiter came to.
enum Woken {
    Task(String),
    /// The waiter's task no longer waits: its registration removed.
    Stale,
    /// Another deliverer, a consumer or a promotion got there first.
    Raced,
}

impl Signals<'_> {
    /// Sends signal `key` with `payload`: delivered to the task that waited for it first, or
    /// kept for the first wait.
    ///
    /// # Notable errors
    /// [`Error::Signal`] for a key no signal can have or a payload too large; nothing is sent.
    pub async fn signal(self, key: &str, payload: &Value) -> Result<Signalled> {
        let refuse = |problem: String| Error::Signal {
            key: key.to_string(),
            problem,
        };
        check_signal_key(key).map_err(refuse)?;
        let kept = serde_json::to_vec(&Kept {
            payload: payload.clone(),
        })?;
        task::check_size(&kept).map_err(|e| refuse(e.to_string()))?;
        let key_path = self.layout().signal_key(key);
        let prefix = format!("{key_path}/{SIGNAL_PREFIX}");
        let mut multi = Multi::new();
        multi
            .push(Part::Signal, Op::CreateSequential(&prefix, &kept))
            .push(Part::Signal, Op::Set(&key_path, b"", -1));
        for _ in 0..super::Tries::Few.most() {
            self.ensure_key(&key_path).await?;
            match self.commit("signal", &multi).await? {
                Ok(results) => {
                    let created = match multi.result(&results, Part::Signal) {
                        Some(zk::MultiWriteResult::Create { path, .. }) => path.clone(),
                        _ => return Err(Error::zk("signal", prefix, zk::Error::NoNode)),
                    };
                    let name = created.rsplit('/').next().unwrap_or_default();
                    let own = format!("{key_path}/{name}");
                    let sent = self.hand_over(key, &own).await?;
                    let (answer, task) = match &sent {
                        Signalled::Delivered { task } => ("delivered", Some(task.as_str())),
                        Signalled::Kept => ("kept", None),
                    };
                    tracing::info!(key, signal = %name, answer, task, "signal sent");
                    return Ok(sent);
                }
                // The key was swept away between: made again.
                Err(failed) if failed.error == zk::Error::NoNode => continue,
                Err(failed) => return Err(failed.unexpected("signal")),
            }
        }
        Err(refuse("its key kept going away".into()))
    }

    /// Makes the key's znode (and `signals/`) when missing.
    async fn ensure_key(self, path: &str) -> Result<()> {
        let options = self.created(zk::CreateMode::Persistent);
        for _ in 0..2 {
            match self.client().create(path, b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::NoNode) => {
                    let parent = self.layout().signals();
                    match self.client().create(&parent, b"", &options).await {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(Error::zk("create", parent, e)),
                    }
                }
                Err(e) => return Err(Error::zk("create", path, e)),
            }
        }
        Err(Error::zk("create", path, zk::Error::NoNode))
    }

    /// The key's version and its oldest signal, for a wait about to be registered.
    pub(crate) async fn look(self, key: &str) -> Result<Look> {
        let key_path = self.layout().signal_key(key);
        self.ensure_key(&key_path).await?;
        loop {
            let (children, stat) = match self.client().get_children(&key_path).await {
                Ok(read) => read,
                Err(zk::Error::NoNode) => {
                    self.ensure_key(&key_path).await?;
                    continue;
                }
                Err(e) => return Err(Error::zk("list", key_path, e)),
            };
            let Some(oldest) = sorted(&children, SIGNAL_PREFIX).into_iter().next() else {
                return Ok(Look {
                    version: stat.version,
                    oldest: None,
                });
            };
            let path = format!("{key_path}/{oldest}");
            match self.kept(&path).await? {
                Some(payload) => {
                    return Ok(Look {
                        version: stat.version,
                        oldest: Some((path, payload)),
                    });
                }
                None => continue,
            }
        }
    }

    /// A kept signal's payload; `None` once consumed.
    async fn kept(self, path: &str) -> Result<Option<Value>> {
        match self.client().get_data(path).await {
            Ok((data, _)) => Ok(Some(
                serde_json::from_slice::<Kept>(&data).map_or(Value::Null, |k| k.payload),
            )),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// Delivers signal `own` of `key` (a path) to the waiter whose turn is its turn, or keeps
    /// it when there is none; when it is gone already, a wait took it (its note says which).
    async fn hand_over(self, key: &str, own: &str) -> Result<Signalled> {
        let key_path = self.layout().signal_key(key);
        let name = own.rsplit('/').next().unwrap_or_default();
        for _ in 0..DELIVER_PER_CALL {
            let children = match self.client().list_children(&key_path).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(Error::zk("list", key_path, e)),
            };
            let signals = sorted(&children, SIGNAL_PREFIX);
            let Some(turn) = signals.iter().position(|s| *s == name) else {
                return self.taken(own).await;
            };
            let Some(waiter) = sorted(&children, WAITER_PREFIX).get(turn).copied() else {
                return Ok(Signalled::Kept);
            };
            let waiter = format!("{key_path}/{waiter}");
            if let Woken::Task(task) = self.wake(key, own, &waiter).await? {
                return Ok(Signalled::Delivered { task });
            }
        }
        // Registrations kept going stale under it: kept, for the next wait or the reaper.
        Ok(Signalled::Kept)
    }

    /// What came of signal `own`, gone before its signaller delivered it: the task a wait's
    /// note names (the note then deleted), or kept when there is none (a wait took it after
    /// it was kept).
    async fn taken(self, own: &str) -> Result<Signalled> {
        let (note, _) = taken_note(own, "");
        match self.client().get_data(&note).await {
            Ok((data, _)) => {
                let _ = self.client().delete(&note, None).await;
                Ok(serde_json::from_slice::<Note>(&data)
                    .map_or(Signalled::Kept, |n| Signalled::Delivered { task: n.task }))
            }
            Err(zk::Error::NoNode) => Ok(Signalled::Kept),
            Err(e) => Err(Error::zk("get", note, e)),
        }
    }

    /// Hands `key`'s signals sent before `before_ms` (left by signallers that stopped between
    /// their writes) to its waiting tasks, oldest to oldest, while both are there; how many
    /// tasks it woke.
    async fn deliver_left(self, key: &str, before_ms: i64) -> Result<usize> {
        let key_path = self.layout().signal_key(key);
        let mut woken = 0;
        for _ in 0..DELIVER_PER_CALL {
            let children = match self.client().list_children(&key_path).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => break,
                Err(e) => return Err(Error::zk("list", key_path, e)),
            };
            let (signals, waiters) = (
                sorted(&children, SIGNAL_PREFIX),
                sorted(&children, WAITER_PREFIX),
            );
            let (Some(signal), Some(waiter)) = (signals.first(), waiters.first()) else {
                break;
            };
            let (signal, waiter) = (
                format!("{key_path}/{signal}"),
                format!("{key_path}/{waiter}"),
            );
            // Younger: still its signaller's to deliver (and so are those after it).
            match self.client().check_stat(&signal).await {
                Ok(Some(stat)) if stat.ctime >= before_ms => break,
                Ok(_) => {}
                Err(e) => return Err(Error::zk("stat", signal, e)),
            }
            if let Woken::Task(_) = self.wake(key, &signal, &waiter).await? {
                woken += 1;
            }
        }
        Ok(woken)
    }

    /// Moves the task registered at `waiter` back to its lane with the signal at `signal`, in
    /// one multi-op that deletes the signal and every registration of the task.
    async fn wake(self, key: &str, signal: &str, waiter: &str) -> Result<Woken> {
        let registered = match self.waiter(waiter).await? {
            Registration::Gone => return Ok(Woken::Raced),
            // Not ours to read: no task can be woken through it.
            Registration::Unreadable => return self.unregister(&[waiter.to_string()]).await,
            Registration::Waits(registered) => registered,
        };
        let registrations = self.registrations(waiter, &registered.keys);
        let (body, version) = match self.client().get_data(&registered.waiting).await {
            Ok((body, stat)) => (body, stat.version),
            Err(zk::Error::NoNode) => return self.unregister(&registrations).await,
            Err(e) => return Err(Error::zk("get", &registered.waiting, e)),
        };
        let Some(payload) = self.kept(signal).await? else {
            return Ok(Woken::Raced);
        };
        let outcome = WaitOutcome::Signal {
            key: key.to_string(),
            payload,
        };
        let name = registered.waiting.rsplit('/').next().unwrap_or_default();
        let name = super::parse_waiting(name).map_or(name, |(_, name)| name);
        let Some(woken) = signalled(&body, name, outcome) else {
            return self.unregister(&registrations).await;
        };
        let lock = self.groups().moved_lock(&body, name).await?;
        let mut extra = vec![Op::Delete(signal, -1)];
        extra.extend(registrations.iter().map(|r| Op::Delete(r, -1)));
        let waiting = registered.waiting.as_str();
        let moved = (self.delays())
            .to_lane_tail("wake", waiting, version, &woken, lock.as_ref(), extra)
            .await?;
        Ok(moved.map_or(Woken::Raced, |new| {
            tracing::info!(task = %name, now = %new, key, "signal delivered: task back in the queue");
            Woken::Task(new)
        }))
    }

    async fn waiter(self, path: &str) -> Result<Registration> {
        match self.client().get_data(path).await {
            Ok((data, _)) => {
                Ok(serde_json::from_slice(&data)
                    .map_or(Registration::Unreadable, Registration::Waits))
            }
            Err(zk::Error::NoNode) => Ok(Registration::Gone),
            Err(e) => Err(Error::zk("get", path, e)),
        }
    }

    /// The paths of the registration named as `waiter`'s under each of `keys`.
    fn registrations(self, waiter: &str, keys: &[String]) -> Vec<String> {
        let name = waiter.rsplit('/').next().unwrap_or_default();
        let at = |key: &String| format!("{}/{name}", self.layout().signal_key(key));
        keys.iter().map(at).collect()
    }

    /// Removes registrations whose task no longer waits.
    async fn unregister(self, registrations: &[String]) -> Result<Woken> {
        for path in registrations {
            match self.client().delete(path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(Error::zk("delete", path, e)),
            }
        }
        Ok(Woken::Stale)
    }

    /// The reaper's look at up to `limit` keys (a sample that moves with the clock): signals
    /// kept longer than `keep_ms` deleted, registrations whose task no longer waits removed,
    /// signals delivered that a signaller that stopped half-way left (once they are
    /// [`SIGNALLER_GRACE_MS`] old, as notes that old are deleted), and empty keys older than
    /// `keep_ms` deleted. How many tasks it woke.
    pub async fn sweep(self, now: &ZkTime, keep_ms: i64, limit: usize) -> Result<usize> {
        let parent = self.layout().signals();
        let keys = self.children_of(&parent).await?;
        let start = usize::try_from(now.now_ms() / 1000).unwrap_or(0) % keys.len().max(1);
        let mut woken = 0;
        for name in keys.iter().cycle().skip(start).take(limit.min(keys.len())) {
            woken += self
                .sweep_key(name, now.now_ms() - keep_ms, now.now_ms())
                .await?;
        }
        Ok(woken)
    }

    async fn sweep_key(self, name: &str, before_ms: i64, now_ms: i64) -> Result<usize> {
        let key_path = format!("{}/{name}", self.layout().signals());
        let (children, stat) = match self.client().get_children(&key_path).await {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::zk("list", key_path, e)),
        };
        if children.is_empty() {
            if stat.mtime < before_ms {
                match self.client().delete(&key_path, Some(stat.version)).await {
                    Ok(())
                    | Err(zk::Error::NoNode | zk::Error::NotEmpty | zk::Error::BadVersion) => {}
                    Err(e) => return Err(Error::zk("delete", key_path, e)),
                }
            }
            return Ok(0);
        }
        for signal in sorted(&children, SIGNAL_PREFIX) {
            let path = format!("{key_path}/{signal}");
            if let Ok(Some(stat)) = self.client().check_stat(&path).await
                && stat.ctime < before_ms
            {
                tracing::info!(signal = %path, "signal kept past SIGNAL_KEEP_MS unconsumed: deleted");
                let _ = self.client().delete(&path, Some(stat.version)).await;
            }
        }
        let noted_before = now_ms - SIGNALLER_GRACE_MS;
        for note in sorted(&children, NOTE_PREFIX) {
            let path = format!("{key_path}/{note}");
            if let Ok(Some(stat)) = self.client().check_stat(&path).await
                && stat.ctime < noted_before
            {
                let _ = self.client().delete(&path, Some(stat.version)).await;
            }
        }
        for waiter in sorted(&children, WAITER_PREFIX) {
            let path = format!("{key_path}/{waiter}");
            let registered = match self.waiter(&path).await? {
                Registration::Waits(registered) => registered,
                Registration::Gone => continue,
                Registration::Unreadable => {
                    self.unregister(std::slice::from_ref(&path)).await?;
                    continue;
                }
            };
            let waiting = self.client().check_stat(&registered.waiting).await;
            if matches!(waiting, Ok(None)) {
                let registrations = self.registrations(&path, &registered.keys);
                self.unregister(&registrations).await?;
            }
        }
        self.deliver_left(&decode_segment(name), noted_before).await
    }
}

/// The children of a key with `prefix`, oldest first (both kinds sort by their time).
fn sorted<'c>(children: &'c [String], prefix: &str) -> Vec<&'c String> {
    let mut of: Vec<&String> = children.iter().filter(|c| c.starts_with(prefix)).collect();
    of.sort_unstable();
    of
}

/// The body of a waiting task (`body`, named `name`) woken by `outcome`: its wait ended, due
/// now, its name until now remembered. `None` when it does not wait for a signal.
fn signalled(body: &[u8], name: &str, outcome: WaitOutcome) -> Option<Vec<u8>> {
    let Body::Envelope(mut envelope) = task::parse(body) else {
        return None;
    };
    let record = envelope.resume.as_mut()?;
    match record.done.last_mut()? {
        Entry::Wait {
            outcome: ended @ None,
            ..
        } => *ended = Some(outcome),
        _ => return None,
    }
    envelope.retry_at = None;
    envelope.moved_from.push(name.to_string());
    envelope.to_bytes().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_of_a_signal_taken_sits_beside_it_under_its_sequence() {
        let (path, data) = taken_note("/q/signals/order-7/s-0000000042", "task-0000000003");
        assert_eq!(path, "/q/signals/order-7/d-0000000042");
        let note: Note = serde_json::from_slice(&data).unwrap();
        assert_eq!(note.task, "task-0000000003");
    }
}
