//! Who may do what on the dashboard. Without `--admin` it is read-only: no forms, and no
//! route that changes anything. With `--admin`, an operator signs in with `DASHBOARD_TOKEN`
//! and gets a session cookie (`HttpOnly`, `SameSite=Strict`); each change is a POST that
//! must carry the session's CSRF token and come from the dashboard's own origin. With no
//! token configured, `--admin` is refused unless `ALLOW_UNAUTHENTICATED` opens it (local use;
//! the CSRF token and origin check still apply). The token is never put in a page or a log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use sha2::{Digest, Sha256};

use crate::config::Config;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "event_bridge_session";
/// How long a sign-in lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// The dashboard's mode.
pub enum Access {
    ReadOnly,
    /// Admin actions for anyone on this address (`ALLOW_UNAUTHENTICATED`), with one CSRF token.
    Open {
        csrf: String,
    },
    /// Admin actions after signing in with the token (only its digest is kept).
    Token {
        digest: [u8; 32],
        sessions: Mutex<HashMap<String, Signed>>,
    },
}

/// A signed-in browser.
#[derive(Clone)]
pub struct Signed {
    csrf: String,
    until: Instant,
}

/// What a request may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Viewer {
    ReadOnly,
    /// Admin mode, not signed in.
    SignedOut,
    /// May change things; forms carry this CSRF token.
    Admin {
        csrf: String,
    },
}

impl Access {
    /// The mode `serve` was asked for.
    ///
    /// # Errors
    /// `--admin` with neither `DASHBOARD_TOKEN` nor `ALLOW_UNAUTHENTICATED`.
    pub fn new(admin: bool, config: &Config) -> Result<Access, String> {
        match (admin, &config.dashboard_token) {
            (false, _) => Ok(Access::ReadOnly),
            (true, Some(token)) => Ok(Access::Token {
                digest: digest(token.expose()),
                sessions: Mutex::new(HashMap::new()),
            }),
            (true, None) if config.allow_unauthenticated => Ok(Access::Open { csrf: random() }),
            (true, None) => Err(
                "serve --admin needs DASHBOARD_TOKEN (what operators type to \
                 sign in), or ALLOW_UNAUTHENTICATED=1 for local use"
                    .into(),
            ),
        }
    }

    /// The mode's name, for the start-up log.
    pub fn mode(&self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::Open { .. } => "admin, unauthenticated (ALLOW_UNAUTHENTICATED)",
            Access::Token { .. } => "admin, sign-in with DASHBOARD_TOKEN",
        }
    }

    pub fn is_admin(&self) -> bool {
        !matches!(self, Access::ReadOnly)
    }

    /// What the request's cookie allows.
    pub fn viewer(&self, headers: &HeaderMap) -> Viewer {
        match self {
            Access::ReadOnly => Viewer::ReadOnly,
            Access::Open { csrf } => Viewer::Admin { csrf: csrf.clone() },
            Access::Token { sessions, .. } => {
                let mut sessions = sessions.lock().expect("sessions lock");
                sessions.retain(|_, s| s.until > Instant::now());
                match cookie(headers).and_then(|id| sessions.get(&id)) {
                    Some(signed) => Viewer::Admin {
                        csrf: signed.csrf.clone(),
                    },
                    None => Viewer::SignedOut,
                }
            }
        }
    }

    /// A new session id when `typed` is the token.
    pub fn sign_in(&self, typed: &str) -> Option<String> {
        let Access::Token {
            digest: want,
            sessions,
        } = self
        else {
            return None;
        };
        if !same(&digest(typed), want) {
            return None;
        }
        let id = random();
        let signed = Signed {
            csrf: random(),
            until: Instant::now() + SESSION_LIFETIME,
        };
        sessions
            .lock()
            .expect("sessions lock")
            .insert(id.clone(), signed);
        Some(id)
    }

    /// Forgets the request's session.
    pub fn sign_out(&self, headers: &HeaderMap) {
        if let (Access::Token { sessions, .. }, Some(id)) = (self, cookie(headers)) {
            sessions.lock().expect("sessions lock").remove(&id);
        }
    }

    /// Whether a POST that changes something may go ahead: from our own origin, by an admin,
    /// with the session's CSRF token. The refusal says why (never with a secret).
    pub fn check_change(
        &self,
        headers: &HeaderMap,
        csrf: Option<&str>,
    ) -> Result<(), &'static str> {
        if !same_origin(headers) {
            return Err("the request came from another site");
        }
        match self.viewer(headers) {
            Viewer::Admin { csrf: want } if csrf.is_some_and(|c| same_str(c, &want)) => Ok(()),
            Viewer::Admin { .. } => {
                Err("the form's CSRF token is missing or stale: reload the page")
            }
            Viewer::SignedOut => Err("sign in first"),
            Viewer::ReadOnly => Err("this dashboard is read-only"),
        }
    }
}

/// Whether a browser's POST comes from the page's own origin: `Origin`, when sent, must be
/// this host's; a browser that sends none must say `Sec-Fetch-Site: same-origin` or send
/// neither (a script, not a browser).
pub fn same_origin(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let host = header("host").unwrap_or_default();
    match header("origin") {
        Some(origin) => {
            let bare = origin.split_once("://").map_or("", |(_, rest)| rest);
            !host.is_empty() && bare == host
        }
        None => matches!(
            header("sec-fetch-site"),
            None | Some("same-origin" | "none")
        ),
    }
}

/// The `Set-Cookie` value of a session.
pub fn session_cookie(id: &str) -> String {
    format!(
        "{COOKIE_NAME}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that ends a session.
pub fn expired_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.to_string())
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn same_str(a: &str, b: &str) -> bool {
    same(a.as_bytes(), b.as_bytes())
}

/// 244 random bits as hex (two version-4 UUIDs, from the system's generator).
fn random() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn token_access() -> Access {
        let config = Config {
            dashboard_token: Some(Secret::new("s3cret")),
            ..Config::default()
        };
        Access::new(true, &config).unwrap()
    }

    #[test]
    fn admin_without_a_token_is_refused_unless_opened_for_local_use() {
        let err = Access::new(true, &Config::default()).err().unwrap();
        assert!(err.contains("DASHBOARD_TOKEN") && err.contains("ALLOW_UNAUTHENTICATED"));
        let open = Config {
            allow_unauthenticated: true,
            ..Config::default()
        };
        assert!(matches!(Access::new(true, &open), Ok(Access::Open { .. })));
        assert!(matches!(
            Access::new(false, &Config::default()),
            Ok(Access::ReadOnly)
        ));
    }

    #[test]
    fn a_change_needs_the_session_its_csrf_token_and_our_origin() {
        let access = token_access();
        assert_eq!(access.sign_in("wrong"), None);
        let id = access.sign_in("s3cret").unwrap();
        let cookie = format!("a=b; {COOKIE_NAME}={id}");
        let own = headers(&[("host", "127.0.0.1:8080"), ("cookie", &cookie)]);
        let Viewer::Admin { csrf } = access.viewer(&own) else {
            panic!("signed in")
        };
        assert_eq!(access.check_change(&own, Some(&csrf)), Ok(()));
        assert!(access.check_change(&own, Some("forged")).is_err());
        assert!(access.check_change(&own, None).is_err());
        let foreign = headers(&[
            ("host", "127.0.0.1:8080"),
            ("cookie", &cookie),
            ("origin", "https://evil.example"),
        ]);
        assert!(access.check_change(&foreign, Some(&csrf)).is_err());
        let cross = headers(&[
            ("host", "h"),
            ("cookie", &cookie),
            ("sec-fetch-site", "cross-site"),
        ]);
        assert!(access.check_change(&cross, Some(&csrf)).is_err());
        access.sign_out(&own);
        assert_eq!(access.viewer(&own), Viewer::SignedOut);
    }

    #[test]
    fn a_same_origin_post_names_our_host() {
        let ok = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ]);
        assert!(same_origin(&ok));
        let other_port = headers(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:9")]);
        assert!(!same_origin(&other_port));
    }
}
