//! The one retry policy: after a failed ZooKeeper request, whether to send it again on the same
//! session, open a new session first, or give up. The functions, the worker, the CLI and a
//! publish riding out a lost connection (`outage.rs`) all decide through [`recovery`].

use zookeeper_client as zk;

use crate::error::Error;

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The link dropped or a request went unanswered, but the session lives: the client
    /// reconnects by itself within the session timeout, so the request may be sent again.
    SameSession,
    /// The session is over (expired, closed, moved): only a new one can go on.
    NewSession,
    /// Not a failure of the session or the link (a missing node, refused credentials, bad
    /// data): sending it again would fail the same way.
    GiveUp,
}

/// Decides how to recover from `error`; `session_over` is whether the client already knows its
/// session has ended (a terminal state), which settles the matter whatever the error says.
pub fn recovery(error: &Error, session_over: bool) -> Recovery {
    use zk::Error::*;
    let recovery = match error {
        Error::Zk { source, .. } => match source {
            // `Custom` is what an in-flight request gets when the connection dies under it.
            ConnectionLoss | Custom(_) | Timeout | Throttled => Recovery::SameSession,
            SessionExpired | ClientClosed | SessionMoved | NoHosts => Recovery::NewSession,
            _ => Recovery::GiveUp,
        },
        Error::Timeout { .. } => Recovery::SameSession,
        Error::Unreachable { .. } => Recovery::NewSession,
        _ => Recovery::GiveUp,
    };
    match recovery {
        Recovery::SameSession if session_over => Recovery::NewSession,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zk_error(source: zk::Error) -> Error {
        Error::Zk {
            op: "get",
            path: "/event-bridge/tasks".into(),
            source,
        }
    }

    #[test]
    fn each_error_has_one_recovery() {
        let cases = [
            (
                zk_error(zk::Error::ConnectionLoss),
                false,
                Recovery::SameSession,
            ),
            (zk_error(zk::Error::Timeout), false, Recovery::SameSession),
            (zk_error(zk::Error::Throttled), false, Recovery::SameSession),
            (
                zk_error(zk::Error::ConnectionLoss),
                true,
                Recovery::NewSession,
            ),
            (
                zk_error(zk::Error::SessionExpired),
                false,
                Recovery::NewSession,
            ),
            (
                zk_error(zk::Error::ClientClosed),
                false,
                Recovery::NewSession,
            ),
            (
                zk_error(zk::Error::SessionMoved),
                false,
                Recovery::NewSession,
            ),
            (zk_error(zk::Error::NoHosts), false, Recovery::NewSession),
            (zk_error(zk::Error::NoNode), false, Recovery::GiveUp),
            (zk_error(zk::Error::BadVersion), false, Recovery::GiveUp),
            (zk_error(zk::Error::NoAuth), false, Recovery::GiveUp),
            (zk_error(zk::Error::AuthFailed), false, Recovery::GiveUp),
            (zk_error(zk::Error::NoAuth), true, Recovery::GiveUp),
        ];
        for (error, over, want) in cases {
            assert_eq!(
                recovery(&error, over),
                want,
                "{error} (session over: {over})"
            );
        }
        let timeout = Error::Timeout {
            op: "get",
            path: "/x".into(),
            timeout_ms: 5,
        };
        assert_eq!(recovery(&timeout, false), Recovery::SameSession);
        let unreachable = Error::Unreachable {
            address: "127.0.0.1:1".into(),
            timeout_ms: 5,
            reason: "refused".into(),
        };
        assert_eq!(recovery(&unreachable, false), Recovery::NewSession);
        assert_eq!(
            recovery(&Error::TooLarge { size: 2, limit: 1 }, true),
            Recovery::GiveUp
        );
    }
}
