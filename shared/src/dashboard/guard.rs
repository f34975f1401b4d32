//! What every request and every answer passes through, before and after the routes.
//!
//! - [`host`]: a request must name the dashboard as its host: the address it is bound to (and
//!   `localhost` on loopback) or a `--public-name`. Anything else is answered 421 Misdirected
//!   Request before a route runs, so nothing is read or changed. This stops DNS rebinding: a
//!   page whose name the attacker points at our address afterwards is same-origin with us for
//!   the browser, which sends its own name as `Host` (and `Origin`).
//! - [`no_framing`]: no answer may be shown in another site's frame (`X-Frame-Options: DENY`
//!   and the CSP's `frame-ancestors 'none'`), against clickjacking the admin forms.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The hosts a request may name, in lower case, each with its port unless it is the default.
#[derive(Clone, Debug)]
pub struct Hosts(Vec<String>);

impl Hosts {
    /// The bound address as clients write it, `localhost` and the loopback addresses when they
    /// reach it, and the public names (already checked by [`public_name`]).
    pub fn new(bound: SocketAddr, public_names: &[String]) -> Hosts {
        let port = bound.port();
        let mut names = vec![bound.to_string()];
        let ip = bound.ip();
        if ip.is_loopback() || ip.is_unspecified() {
            names.push(format!("localhost:{port}"));
        }
        if ip.is_unspecified() {
            names.extend([format!("127.0.0.1:{port}"), format!("[::1]:{port}")]);
        }
        if port == 80 {
            // A browser leaves out the scheme's default port.
            let bare: Vec<String> = names
                .iter()
                .filter_map(|n| n.strip_suffix(":80"))
                .map(String::from)
                .collect();
            names.extend(bare);
        }
        names.extend(public_names.iter().cloned());
        Hosts(names)
    }

    /// Whether a request naming `host` is for this dashboard (case does not matter).
    pub fn admits(&self, host: &str) -> bool {
        self.0.iter().any(|name| name.eq_ignore_ascii_case(host))
    }
}

/// A `--public-name`, checked and in lower case: a DNS name or an IP address (IPv6 in
/// brackets), with a port when it is not the scheme's default, as browsers write `Host`.
///
/// # Errors
/// A scheme, a path, an empty name or a bad port, said in words.
pub fn public_name(text: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("{text:?} is not HOST or HOST:PORT ({why})"));
    if text.contains("://") || text.contains('/') {
        return bad("no scheme and no path: dashboard.example.com:8443");
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (text, None),
    };
    let named = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    let bracketed = host.starts_with('[')
        && host.ends_with(']')
        && host[1..host.len() - 1]
            .parse::<std::net::Ipv6Addr>()
            .is_ok();
    if host.is_empty() || !(named || bracketed) {
        return bad("a DNS name, an IPv4 address, or an IPv6 address in brackets");
    }
    if port.is_some_and(|p| !p.bytes().all(|b| b.is_ascii_digit()) || p.parse::<u16>().is_err()) {
        return bad("the port is a number up to 65535");
    }
    Ok(text.to_ascii_lowercase())
}

/// Lets a request through only when its `Host` (and the authority of an absolute request
/// line, which takes its place) names this dashboard; 421 otherwise.
pub async fn host(State(hosts): State<Arc<Hosts>>, request: Request, next: Next) -> Response {
    let named = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    let authority = request.uri().authority().map(|a| a.as_str());
    let ours = named.is_some_and(|h| hosts.admits(h)) && authority.is_none_or(|a| hosts.admits(a));
    if ours {
        return next.run(request).await;
    }
    tracing::warn!(host = ?named, authority = ?authority, "dashboard: refused a request for another host");
    let text = "421 Misdirected Request: this dashboard does not serve the host this request \
                names. Use its own address, or name it with serve --public-name.\n";
    (
        StatusCode::MISDIRECTED_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// The framing ban, added to every answer (a policy already set keeps its other directives).
pub async fn no_framing(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    let existing = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let policy = with_frame_ancestors_none(existing);
    if let Ok(value) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, value);
    }
    response
}

/// `policy` with its `frame-ancestors` directive (if any) replaced by `frame-ancestors 'none'`.
fn with_frame_ancestors_none(policy: &str) -> String {
    let mut directives: Vec<&str> = policy
        .split(';')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .filter(|d| !d.to_ascii_lowercase().starts_with("frame-ancestors"))
        .collect();
    directives.push("frame-ancestors 'none'");
    directives.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(bound: &str, public: &[&str]) -> Hosts {
        let public: Vec<String> = public.iter().map(|p| public_name(p).unwrap()).collect();
        Hosts::new(bound.parse().unwrap(), &public)
    }

    #[test]
    fn the_hosts_a_request_may_name() {
        let table: [(&str, &[&str], &str, bool); 16] = [
            ("127.0.0.1:8080", &[], "127.0.0.1:8080", true),
            ("127.0.0.1:8080", &[], "LOCALHOST:8080", true),
            ("127.0.0.1:8080", &[], "localhost", false),
            ("127.0.0.1:8080", &[], "127.0.0.1:8081", false),
            ("127.0.0.1:8080", &[], "evil.example", false),
            ("127.0.0.1:8080", &[], "evil.example:8080", false),
            ("[::1]:8080", &[], "[::1]:8080", true),
            ("[::1]:8080", &[], "localhost:8080", true),
            ("10.0.0.5:8080", &[], "localhost:8080", false),
            (
                "10.0.0.5:8080",
                &["dash.example.com"],
                "Dash.Example.COM",
                true,
            ),
            (
                "10.0.0.5:8080",
                &["dash.example.com"],
                "dash.example.com:8080",
                false,
            ),
            ("0.0.0.0:8080", &[], "127.0.0.1:8080", true),
            ("0.0.0.0:8080", &[], "localhost:8080", true),
            ("0.0.0.0:8080", &[], "10.0.0.5:8080", false),
            ("127.0.0.1:80", &[], "localhost", true),
            ("127.0.0.1:80", &[], "127.0.0.1", true),
        ];
        for (bound, public, host, admitted) in table {
            assert_eq!(
                hosts(bound, public).admits(host),
                admitted,
                "{bound} {public:?} {host}"
            );
        }
    }

    #[test]
    fn a_public_name_is_a_host_with_an_optional_port() {
        assert_eq!(
            public_name("Dash.Example.com:8443"),
            Ok("dash.example.com:8443".into())
        );
        assert_eq!(public_name("[::1]:8080"), Ok("[::1]:8080".into()));
        assert_eq!(public_name("[::1]"), Ok("[::1]".into()));
        assert_eq!(public_name("10.0.0.5"), Ok("10.0.0.5".into()));
        for bad in [
            "https://dash.example.com",
            "dash/x",
            "",
            ":80",
            "a:b",
            "a:70000",
            "a b",
            "[zz]",
        ] {
            assert!(public_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_policy_keeps_its_directives_and_forbids_framing() {
        assert_eq!(with_frame_ancestors_none(""), "frame-ancestors 'none'");
        assert_eq!(
            with_frame_ancestors_none("default-src 'self'; frame-ancestors *;"),
            "default-src 'self'; frame-ancestors 'none'"
        );
    }
}
