//! Signals: what a resumable task waits for ([`crate::resume::Steps::wait_for`]).
//!
//! ```text
//! signals/<key>                         its data version counts the signals sent to the key
//! signals/<key>/s-<sequence>            a signal not consumed yet: {"payload": …}
//! signals/<key>/w-<since>~<task name>   a task waiting for the key: {"waiting": <its path
//!                                       under delayed/>, "keys": [every key it waits for]}
//! ```
//!
//! A signal is consumed exactly once, in the multi-op that moves a waiting task back to its
//! lane with the signal's payload in its record ([`Signals::deliver`]) or that releases the
//! task that asked for the wait with it ([`crate::process`]): that multi-op deletes the
//! signal, so two consumers cannot both land. Signals and waits pair oldest first: a key two
//! tasks wait for wakes the one that waited first, and its next signal the other.
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
use crate::resume::{Entry, WaitOutcome};
use crate::task::{self, Body};

recipe!(
    /// Signals: kept until a wait consumes them, and delivered to tasks that wait (`signals`).
    Signals,
    signals
);

/// The longest key a signal may have, as a znode name.
pub const MAX_SIGNAL_KEY_NAME_BYTES: usize = 200;

const SIGNAL_PREFIX: &str = "s-";
const WAITER_PREFIX: &str = "w-";

/// How many signals one delivery hands out, at most, before it returns.
const DELIVER_PER_CALL: usize = 64;

/// Refuses a key no signal can have.
pub fn check_key(key: &str) -> std::result::Result<(), String> {
    if key.is_empty() {
        return Err("a signal's key is empty".into());
    }
    crate::task::fits_as_name("key", key, MAX_SIGNAL_KEY_NAME_BYTES)
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
    /// A waiting task took it: back in its lane under this name.
    Delivered { task: String },
    /// No task waits for its key: kept for the first wait, for `SIGNAL_KEEP_MS`.
    Kept,
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
        check_key(key).map_err(refuse)?;
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
                Ok(_) => {
                    let woken = self.deliver(key).await?;
                    return Ok(woken
                        .into_iter()
                        .next()
                        .map_or(Signalled::Kept, |task| Signalled::Delivered { task }));
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

    /// Hands `key`'s signals to its waiting tasks, oldest to oldest, while both are there; the
    /// tasks woken (by their new names).
    pub async fn deliver(self, key: &str) -> Result<Vec<String>> {
        let key_path = self.layout().signal_key(key);
        let mut woken = Vec::new();
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
            if let Woken::Task(name) = self.wake(key, &signal, &waiter).await? {
                woken.push(name);
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
    /// signals delivered that a signaller that stopped half-way left, and empty keys older
    /// than `keep_ms` deleted. How many tasks it woke.
    pub async fn sweep(self, now: &ZkTime, keep_ms: i64, limit: usize) -> Result<usize> {
        let parent = self.layout().signals();
        let keys = match self.client().list_children(&parent).await {
            Ok(keys) => keys,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::zk("list", parent, e)),
        };
        let start = usize::try_from(now.now_ms() / 1000).unwrap_or(0) % keys.len().max(1);
        let mut woken = 0;
        for name in keys.iter().cycle().skip(start).take(limit.min(keys.len())) {
            woken += self.sweep_key(name, now.now_ms() - keep_ms).await?;
        }
        Ok(woken)
    }

    async fn sweep_key(self, name: &str, before_ms: i64) -> Result<usize> {
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
        Ok(self.deliver(&decode_segment(name)).await?.len())
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
