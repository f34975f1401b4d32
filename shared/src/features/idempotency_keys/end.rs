//! What a keyed task's end writes to its key: marked completed and filed by when it expires,
//! or deleted; only when the key is the task's own, at the version read.

use chrono::Utc;
use zookeeper_client as zk;

use super::Keys;
use crate::error::Result;
use crate::feature::{EndWrite, Leaving, Site};
use crate::layout::KEY_BUCKET_MS;
use crate::queue::KeyData;
use crate::task::Envelope;

/// The writes that mark the own keys of the completed tasks `leaving` completed, by the
/// index of each task: the key at the version read, and its expiry entry (whose bucket is
/// made first). No request when no task carries a key.
pub(super) async fn completed(
    feature: &Keys,
    site: &Site<'_>,
    leaving: &[Leaving<'_>],
) -> Result<Vec<(usize, EndWrite)>> {
    let owned = own_keys(site, leaving).await?;
    if owned.is_empty() {
        return Ok(Vec::new());
    }
    let now = Utc::now().timestamp_millis();
    let expires = now.saturating_add(crate::lease::millis(feature.window));
    let bucket = expires - expires.rem_euclid(KEY_BUCKET_MS);
    let (parent, path) = (
        site.layout.key_expiry(),
        site.layout.key_expiry_bucket(bucket),
    );
    (site.ensure_bucket(&feature.made, bucket, &parent, &path)).await?;
    let mut writes = Vec::with_capacity(owned.len() * 2);
    for own in owned {
        let data = KeyData {
            id: own.envelope.id.clone(),
            task: Some(leaving[own.at].name.to_string()),
            completed_at: Some(now),
        };
        let entry = site.layout.key_expiry_entry(bucket, own.key);
        writes.push((
            own.at,
            EndWrite::Set {
                path: own.path,
                data: serde_json::to_vec(&data)?,
                version: Some(own.version),
            },
        ));
        writes.push((
            own.at,
            EndWrite::Create {
                path: entry,
                data: Vec::new(),
            },
        ));
    }
    Ok(writes)
}

/// The writes that delete the own keys of the dead tasks `leaving`, at the version read, by
/// the index of each task.
pub(super) async fn dead(
    site: &Site<'_>,
    leaving: &[Leaving<'_>],
) -> Result<Vec<(usize, EndWrite)>> {
    let owned = own_keys(site, leaving).await?;
    let delete = |own: Own| {
        let version = Some(own.version);
        (
            own.at,
            EndWrite::Delete {
                path: own.path,
                version,
            },
        )
    };
    Ok(owned.into_iter().map(delete).collect())
}

/// `write` (a key's, read at version 0) at version 1: the key once its publisher named its
/// task in it.
pub(super) fn at_version_one(write: &EndWrite) -> EndWrite {
    let mut write = write.clone();
    if let EndWrite::Set { version, .. } | EndWrite::Delete { version, .. } = &mut write {
        *version = Some(1);
    }
    write
}

/// A key read as its task's own.
struct Own<'a> {
    /// The task's index among those leaving.
    at: usize,
    envelope: &'a Envelope,
    key: &'a str,
    path: String,
    version: i32,
}

/// The keys of `leaving` that are their tasks' own, read in one multi-read (none when no task
/// carries a key).
async fn own_keys<'a>(site: &Site<'_>, leaving: &'a [Leaving<'a>]) -> Result<Vec<Own<'a>>> {
    let keyed: Vec<(usize, &Envelope, &str)> = (leaving.iter().enumerate())
        .filter_map(|(at, one)| {
            let envelope = one.envelope?;
            Some((at, envelope, key_of(envelope)?))
        })
        .collect();
    let paths: Vec<String> = (keyed.iter())
        .map(|(_, _, key)| site.layout.key(key))
        .collect();
    let reads = site.read_all(&paths).await?;
    Ok((keyed.into_iter().zip(paths).zip(reads))
        .filter_map(|(((at, envelope, key), path), read)| {
            let version = own_version(&path, &envelope.id, read)?;
            Some(Own {
                at,
                envelope,
                key,
                path,
                version,
            })
        })
        .collect())
}

/// The key `envelope` holds: one it was published with and took (a producer of the 000
/// design, or a redrive that found its key taken, took none).
fn key_of(envelope: &Envelope) -> Option<&str> {
    envelope
        .idempotency_key
        .as_deref()
        .filter(|_| envelope.keyed)
}

/// The version of the key at `path`, as `read`, if it is the own key of the task with
/// envelope id `id`: it names that id and is not completed. A key another task took, one
/// already completed, or one that cannot be read is not touched.
fn own_version(path: &str, id: &str, read: Option<(Vec<u8>, zk::Stat)>) -> Option<i32> {
    let (bytes, stat) = read?;
    let ours = serde_json::from_slice::<KeyData>(&bytes)
        .is_ok_and(|key| key.id == id && key.completed_at.is_none());
    if !ours {
        tracing::info!(key = %path, task_id = %id, "idempotency key not this task's; left as it is");
        return None;
    }
    Some(stat.version)
}
