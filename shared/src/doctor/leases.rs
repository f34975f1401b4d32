//! The versions of the consumers holding leases now, as each lease records it
//! (`consumerVersion`, see docs/WIRE-FORMAT.md); a lease without one (a 000-design consumer's,
//! or an earlier version's) counts as of an unknown version.

use std::collections::BTreeMap;

use super::Check;
use crate::lease::VERSION;
use crate::queue::{LeaseSeen, Queue};

/// Leases read, at most (in requests of [`BATCH`]).
const LEASES_READ: usize = 1_000;

/// Leases read in one request.
const BATCH: usize = 64;

/// Consumer ids named per version, at most.
const NAMED: usize = 3;

/// Passes, listing the versions; warns when a consumer runs another known version than this one.
pub(super) async fn check(queue: &Queue) -> Check {
    let seen = match read(queue).await {
        Ok(seen) => seen,
        Err(e) => {
            let fix = "grant these credentials read on the leases (see the acl line)";
            return Check::fail("leases", e.to_string(), fix);
        }
    };
    judge(&seen)
}

async fn read(queue: &Queue) -> crate::Result<Vec<LeaseSeen>> {
    let path = queue.layout().leases();
    let mut names = match queue.client().list_children(&path).await {
        Ok(names) => names,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => return Err(crate::Error::zk("list", path, e)),
    };
    names.sort();
    names.truncate(LEASES_READ);
    let mut seen = Vec::new();
    for chunk in names.chunks(BATCH) {
        let paths: Vec<String> = chunk.iter().map(|n| queue.layout().lease(n)).collect();
        let reads = queue.read_paths(&paths).await?;
        seen.extend(
            reads
                .into_iter()
                .flatten()
                .map(|(data, stat)| LeaseSeen::from_read(&data, &stat)),
        );
    }
    Ok(seen)
}

fn judge(seen: &[LeaseSeen]) -> Check {
    if seen.is_empty() {
        return Check::pass("leases", "none held now: no consumer is running a task");
    }
    let mut by_version: BTreeMap<Option<&str>, Vec<&str>> = BTreeMap::new();
    for lease in seen {
        let holder = lease.consumer_id.as_deref().unwrap_or("?");
        by_version
            .entry(lease.consumer_version.as_deref())
            .or_default()
            .push(holder);
    }
    let parts: Vec<String> = by_version
        .iter()
        .map(|(version, holders)| {
            let version = version.map_or("an unknown version".into(), |v| format!("version {v}"));
            let named = holders[..holders.len().min(NAMED)].join(", ");
            let more = if holders.len() > NAMED { ", …" } else { "" };
            format!("{} by {version} ({named}{more})", holders.len())
        })
        .collect();
    let detail = format!("{} held: {}", seen.len(), parts.join("; "));
    let others: Vec<&str> = (by_version.keys().flatten().copied())
        .filter(|v| *v != VERSION)
        .collect();
    match others.is_empty() {
        true => Check::pass("leases", detail),
        false => Check::warn(
            "leases",
            detail,
            format!(
                "upgrade the consumers at {} to {VERSION}: deploy the functions again and \
                 restart the workers",
                others.join(", ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn lease(holder: &str, version: Option<&str>) -> LeaseSeen {
        LeaseSeen {
            consumer_id: Some(holder.into()),
            fencing_token: 1,
            mtime: 1,
            progress: None,
            consumer_version: version.map(String::from),
        }
    }

    #[test]
    fn versions_are_counted_and_another_known_one_is_a_warning() {
        let ours = judge(&[lease("a", Some(VERSION)), lease("b", None)]);
        assert_eq!(ours.status, Status::Pass);
        assert_eq!(
            ours.detail,
            format!("2 held: 1 by an unknown version (b); 1 by version {VERSION} (a)")
        );
        let mixed = judge(&[lease("a", Some("0.0.1")), lease("b", Some(VERSION))]);
        assert_eq!(mixed.status, Status::Warn);
        assert!(
            mixed
                .fix
                .unwrap()
                .contains("upgrade the consumers at 0.0.1")
        );
        assert_eq!(judge(&[]).status, Status::Pass);
    }
}
