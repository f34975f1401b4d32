//! What every page shares: the head, the navigation, the mode and the sign-in button; and
//! how ages and durations read.

use maud::{DOCTYPE, Markup, html};

use super::access::Viewer;

/// The stylesheet, served at `/assets/dashboard.css` from the binary.
pub const CSS: &str = include_str!("assets/dashboard.css");

/// Which page the navigation marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Here {
    Overview,
    Dead,
    Task,
    Other,
}

/// A whole page. `refresh` reloads it every so many seconds.
pub fn page(
    title: &str,
    here: Here,
    viewer: &Viewer,
    refresh: Option<u32>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(seconds) = refresh {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { (title) " · event-bridge" }
                link rel="stylesheet" href="/assets/dashboard.css";
            }
            body {
                header {
                    span.brand { "event-bridge" }
                    nav {
                        a href="/" class=[(here == Here::Overview).then_some("here")] { "Overview" }
                        a href="/dead" class=[(here == Here::Dead).then_some("here")] { "Dead letters" }
                        a href="/task" class=[(here == Here::Task).then_some("here")] { "Task" }
                        a href="/metrics" { "Metrics" }
                    }
                    div.who { (who(viewer)) }
                }
                main { (body) }
            }
        }
    }
}

/// The mode badge, and the sign-in or sign-out control.
fn who(viewer: &Viewer) -> Markup {
    html! {
        @match viewer {
            Viewer::ReadOnly => span.badge { "read-only" },
            Viewer::SignedOut => {
                span.badge { "signed out" }
                a href="/login" { "Sign in" }
            }
            Viewer::Admin { csrf } => {
                span.badge.admin { "admin" }
                form.inline method="post" action="/logout" {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Sign out" }
                }
            }
        }
    }
}

/// A message page (a refusal, an error, what an action did).
pub fn message(title: &str, viewer: &Viewer, text: &str, error: bool) -> Markup {
    page(
        title,
        Here::Other,
        viewer,
        None,
        html! {
            h1 { (title) }
            p class={ "notice" @if error { " error" } } { (text) }
            p { a href="/" { "Back to the overview" } }
        },
    )
}

/// A span of milliseconds as people read it: `850 ms`, `42 s`, `7 min`, `3 h 5 min`, `2 d 4 h`.
pub fn duration(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let ms = ms.unsigned_abs();
    let (s, min, h, d) = (ms / 1000, ms / 60_000, ms / 3_600_000, ms / 86_400_000);
    let text = match () {
        _ if ms < 1000 => format!("{ms} ms"),
        _ if s < 60 => format!("{s} s"),
        _ if min < 60 => format!("{min} min"),
        _ if h < 24 => format!("{h} h {} min", min % 60),
        _ => format!("{d} d {} h", h % 24),
    };
    format!("{sign}{text}")
}

/// Milliseconds since the epoch as UTC, to the second.
pub fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_the_right_unit() {
        let read: Vec<String> = [850, 42_000, 420_000, 11_100_000, 187_200_000, -3_000]
            .iter()
            .map(|ms| duration(*ms))
            .collect();
        assert_eq!(
            read,
            ["850 ms", "42 s", "7 min", "3 h 5 min", "2 d 4 h", "-3 s"]
        );
    }

    #[test]
    fn text_in_a_page_is_escaped() {
        let html = message("t", &Viewer::ReadOnly, "<script>x</script>", true).into_string();
        assert!(html.contains("&lt;script&gt;x&lt;/script&gt;"));
        assert!(!html.contains("<script>x"));
    }
}
