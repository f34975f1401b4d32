//! The ACLs of the root and its base paths: do they grant these credentials what the bridge
//! needs (read, write, create, delete)?
//!
//! Judged from `getACL` and the credentials of `ZOOKEEPER_AUTH`, not by a probe write: a probe
//! would say something only of the one node it wrote under (and one under `tasks/` would take
//! a sequence number from the queue's lane), while every base path is read here, in one
//! pipelined round, writing nothing, and a failure names the path and the permission missing.
//! An entry applies to these credentials when it is `world:anyone`, or `digest` with the id
//! `ZOOKEEPER_AUTH` makes (`user:base64(sha1(user:password))`, as ZooKeeper computes it). Other
//! schemes (`ip`, `sasl`, `x509`) and a super user cannot be judged from here: a path those
//! may open is a warning, not a failure.

use base64::Engine;
use sha1::{Digest, Sha1};
use zookeeper_client as zk;

use super::Check;
use crate::config::Config;
use crate::queue::Queue;

/// What the bridge does under its root, and the words for each.
const NEEDED: [(zk::Permission, &str); 4] = [
    (zk::Permission::READ, "read"),
    (zk::Permission::WRITE, "write"),
    (zk::Permission::CREATE, "create"),
    (zk::Permission::DELETE, "delete"),
];

/// What the ACL of one path grants these credentials.
struct Judged {
    path: String,
    /// The needed permissions it does not grant.
    missing: Vec<&'static str>,
    /// Its entries of a scheme that cannot be judged here.
    unjudged: bool,
    /// The digest users it names.
    users: Vec<String>,
}

/// Fails naming the first path that denies a needed permission.
pub(super) async fn check(queue: &Queue, config: &Config) -> Check {
    let me = config
        .zookeeper_auth
        .as_ref()
        .map(|auth| digest_id(auth.expose()));
    let paths = paths(queue);
    // Requests go out as the futures are made: one round trip for all.
    let reads: Vec<_> = paths.iter().map(|p| queue.client().get_acl(p)).collect();
    let mut judged = Vec::new();
    for (path, read) in paths.iter().zip(futures::future::join_all(reads).await) {
        match read {
            Ok((acls, _)) => judged.push(judge(path, &acls, me.as_deref())),
            Err(zk::Error::NoNode) => {}
            // getACL needs read (or admin): its ACL shuts these credentials out.
            Err(zk::Error::NoAuth) => judged.push(Judged {
                path: path.clone(),
                missing: vec!["read"],
                unjudged: false,
                users: Vec::new(),
            }),
            Err(e) => {
                let fix = "check the zookeeper lines above, then run `event-bridge doctor` again";
                return Check::fail("acl", format!("getACL {path}: {e}"), fix);
            }
        }
    }
    let who = match &me {
        Some(id) => format!("digest user {}", id.split(':').next().unwrap_or("")),
        None => "anyone (no ZOOKEEPER_AUTH)".to_string(),
    };
    match judged.iter().find(|j| !j.missing.is_empty()) {
        None => Check::pass(
            "acl",
            format!(
                "{} paths grant {who} read, write, create and delete",
                judged.len()
            ),
        ),
        Some(denied) => refused(denied, &who, config),
    }
}

/// The root and the base paths below it (not the root's ancestors: once the root exists the
/// bridge needs nothing of them).
fn paths(queue: &Queue) -> Vec<String> {
    let root = queue.layout().root();
    let below = format!("{}/", root.trim_end_matches('/'));
    let mut paths = vec![root.to_string()];
    paths.extend((queue.base_paths().into_iter()).filter(|p| p.starts_with(&below)));
    paths
}

fn refused(denied: &Judged, who: &str, config: &Config) -> Check {
    let detail = format!(
        "{} does not grant {who} {}",
        denied.path,
        denied.missing.join(", ")
    );
    let users = match denied.users.is_empty() {
        true => "the user that created it".to_string(),
        false => denied.users.join(", "),
    };
    let grant = "grant these credentials read, write, create and delete on it (setAcl)";
    let fix = match &config.zookeeper_auth {
        None => format!("set ZOOKEEPER_AUTH to user:password of {users}, or {grant}"),
        Some(_) => format!("set ZOOKEEPER_AUTH to the password of {users}, or {grant}"),
    };
    match denied.unjudged {
        true => Check::warn(
            "acl",
            format!("{detail}, unless an ip, sasl or x509 entry of its ACL does"),
            fix,
        ),
        false => Check::fail("acl", detail, fix),
    }
}

/// What `acls` grant the credentials whose digest id is `me` (none: anyone).
fn judge(path: &str, acls: &[zk::Acl], me: Option<&str>) -> Judged {
    let mut granted = zk::Permission::NONE;
    let (mut unjudged, mut users) = (false, Vec::new());
    for acl in acls {
        match acl.scheme() {
            "world" if acl.id() == "anyone" => granted = granted | acl.permission(),
            "digest" => {
                if Some(acl.id()) == me {
                    granted = granted | acl.permission();
                }
                users.push(acl.id().split(':').next().unwrap_or("").to_string());
            }
            _ => unjudged = true,
        }
    }
    Judged {
        path: path.to_string(),
        missing: NEEDED
            .iter()
            .filter(|(perm, _)| !granted.has(*perm))
            .map(|(_, word)| *word)
            .collect(),
        unjudged,
        users,
    }
}

/// The id ZooKeeper's digest scheme gives `user:password`: `user:base64(sha1(user:password))`.
fn digest_id(credentials: &str) -> String {
    let user = credentials.split(':').next().unwrap_or("");
    let hash = Sha1::digest(credentials.as_bytes());
    let encoded = base64::engine::general_purpose::STANDARD.encode(hash);
    format!("{user}:{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_id_is_zookeepers() {
        // From ZooKeeper's own documentation of DigestAuthenticationProvider.generateDigest:
        // super:test hashes to D/InIHSb7yEEbrWz8b9l71RjZJU=.
        assert_eq!(
            digest_id("super:test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
    }

    #[test]
    fn entries_apply_by_scheme_and_credentials() {
        let mine = digest_id("bridge:s3cret");
        let other = digest_id("bridge:guess");
        let acl = |perm, scheme, id: &str| zk::Acl::new(perm, zk::AuthId::new(scheme, id));
        let open = [acl(zk::Permission::ALL, "world", "anyone")];
        let theirs = [acl(zk::Permission::ALL, "digest", &other)];
        let read_only = [
            acl(zk::Permission::READ, "world", "anyone"),
            acl(zk::Permission::ALL, "digest", &mine),
        ];
        let by_ip = [acl(zk::Permission::ALL, "ip", "10.0.0.0/8")];
        assert!(judge("/q", &open, None).missing.is_empty());
        assert!(judge("/q", &open, Some(&mine)).missing.is_empty());
        let denied = judge("/q", &theirs, Some(&mine));
        assert_eq!(denied.missing, ["read", "write", "create", "delete"]);
        assert_eq!(denied.users, ["bridge"]);
        assert!(judge("/q", &read_only, Some(&mine)).missing.is_empty());
        assert_eq!(judge("/q", &read_only, None).missing.len(), 3);
        let ip = judge("/q", &by_ip, None);
        assert!(ip.unjudged && ip.missing.len() == 4);
    }
}
