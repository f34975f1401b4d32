//! URLs as logs, errors and `Debug` output show them: no credentials, no query, no fragment.

use url::Url;

/// `url` without credentials, query or fragment.
pub fn shown(url: &Url) -> String {
    let mut shown = url.clone();
    // Both fail only for URLs that cannot have credentials, which then have none to hide.
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// A URL given as text, shown as [`shown`] does; an unparsable one only as a placeholder,
/// since it may still hold a secret.
pub fn redacted(raw: &str) -> String {
    Url::parse(raw).map_or_else(|_| "<unparsable URL>".into(), |u| shown(&u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials_query_and_fragment() {
        let url = Url::parse("https://user:pw@example.com:8443/p/a?token=abc#frag").unwrap();
        assert_eq!(shown(&url), "https://example.com:8443/p/a");
        assert_eq!(redacted("not a url ?token=abc"), "<unparsable URL>");
    }
}
