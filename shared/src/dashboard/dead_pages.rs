//! `/dead`: the dead letters, filtered by event type and reason, a page at a time; one letter
//! whole; and for admins, redrive or purge of the selected ones after a confirmation page.
//! A name that cannot be a dead letter's is not looked for: 404 for a letter, 400 for a form.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::access::Viewer;
use super::form::fields;
use super::shell::{Here, message, page};
use super::signin::refused;
use super::{Shared, unavailable};
use crate::dead::{self, Filter};
use crate::layout::{DEAD_NAME_SUFFIX, sequence};

/// Dead letters shown on one page.
const PAGE_SIZE: usize = 50;
/// Characters of a last error shown in the list (the letter's page has it whole).
const ERROR_SHOWN: usize = 160;

pub(super) async fn list(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let filter = Filter {
        event_type: query.get("type").cloned().unwrap_or_default(),
        reason: query.get("reason").cloned().unwrap_or_default(),
    };
    let after = query.get("after").cloned();
    let (f, a) = (filter.clone(), after.clone());
    let found = shared
        .session
        .run(|queue| {
            let (f, a) = (f.clone(), a.clone());
            async move { dead::page(&queue, &f, a.as_deref(), PAGE_SIZE).await }
        })
        .await;
    let found = match found {
        Ok(found) => found,
        Err(e) => return unavailable(&shared, &headers, &e),
    };
    let viewer = shared.access.viewer(&headers);
    let body = html! {
        h1 { "Dead letters (" span data-figure="dead-total" { (found.total) } ")" }
        (filters(&filter))
        @if found.records.is_empty() {
            p.muted { "No dead letter matches." }
        } @else if let Viewer::Admin { csrf } = &viewer {
            form method="post" action="/dead/confirm" {
                input type="hidden" name="csrf" value=(csrf);
                div.actions {
                    button type="submit" name="action" value="redrive" { "Redrive selected" }
                    button.danger type="submit" name="action" value="purge" { "Purge selected" }
                }
                (table(&found.records, true))
            }
        } @else {
            @if viewer == Viewer::SignedOut {
                p.muted { a href="/login" { "Sign in" } " to redrive or purge." }
            }
            (table(&found.records, false))
        }
        @if let Some(next) = &found.next_after {
            p { a href=(next_link(&filter, next)) { "Next page" } }
        }
    };
    page("Dead letters", Here::Dead, &viewer, None, body).into_response()
}

fn filters(filter: &Filter) -> Markup {
    html! {
        form.filters method="get" action="/dead" {
            label { "Type" input type="text" name="type" value=(filter.event_type) placeholder="exact"; }
            label { "Reason" input type="text" name="reason" value=(filter.reason) placeholder="a part of it"; }
            button type="submit" { "Filter" }
            a href="/dead" { "Clear" }
        }
    }
}

fn table(records: &[(String, Value)], selectable: bool) -> Markup {
    html! {
        table id="dead" {
            tr {
                @if selectable { th { "" } }
                th { "Name" } th { "Type" } th { "Reason" } th { "Attempts" } th { "Last error" } th { "Dead at" }
            }
            @for (name, record) in records {
                tr data-dead=(name) {
                    @if selectable {
                        td { input type="checkbox" name="name" value=(name) aria-label={ "select " (name) }; }
                    }
                    td { a href=(letter_link(name)) { code { (name) } } }
                    td { (dead::event_type(record).unwrap_or("—")) }
                    td { (text(record, "reason")) }
                    td.num { (record["attempts"].as_u64().unwrap_or(0)) }
                    td { (cut(&text(record, "last_error"), ERROR_SHOWN)) }
                    td { (text(record, "dead_at")) }
                }
            }
        }
    }
}

pub(super) async fn show(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if !is_dead_letter_name(&name) {
        return not_found(&shared, &headers, &name);
    }
    let n = name.clone();
    let record = shared
        .session
        .run(|queue| {
            let n = n.clone();
            async move { dead::show(&queue, &n).await }
        })
        .await;
    let viewer = shared.access.viewer(&headers);
    let record = match record {
        Ok(Some(record)) => record,
        Ok(None) => return not_found(&shared, &headers, &name),
        Err(e) => return unavailable(&shared, &headers, &e),
    };
    let pretty = serde_json::to_string_pretty(&record).unwrap_or_default();
    let body = html! {
        h1 { "Dead letter " code { (name) } }
        p { (text(&record, "reason")) }
        @if let Viewer::Admin { csrf } = &viewer {
            form.actions method="post" action="/dead/confirm" {
                input type="hidden" name="csrf" value=(csrf);
                input type="hidden" name="name" value=(name);
                button type="submit" name="action" value="redrive" { "Redrive" }
                button.danger type="submit" name="action" value="purge" { "Purge" }
            }
        }
        pre id="record" { (pretty) }
        p { a href="/dead" { "All dead letters" } }
    };
    page(&name, Here::Dead, &viewer, None, body).into_response()
}

/// The confirmation page of a redrive or purge: nothing changes until it is answered.
pub(super) async fn confirm(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = fields(&body);
    if let Err(why) = shared.access.check_change(&headers, form.first("csrf")) {
        return refused(&shared, &headers, why);
    }
    let viewer = shared.access.viewer(&headers);
    let names = form.all("name");
    let Some(action) = Action::of(form.first("action")) else {
        return refused(&shared, &headers, "no such action");
    };
    if names.is_empty() {
        let page = message(
            "Nothing selected",
            &viewer,
            "Select dead letters first.",
            true,
        );
        return (StatusCode::BAD_REQUEST, page).into_response();
    }
    if let Some(bad) = not_dead_letter_names(&shared, &headers, &names) {
        return bad;
    }
    let Viewer::Admin { csrf } = &viewer else {
        return refused(&shared, &headers, "sign in first");
    };
    let question = format!("{} {} dead letter(s)?", action.verb(), names.len());
    let body = html! {
        h1 { (question) }
        p { (action.consequence()) }
        ul { @for name in &names { li { code { (name) } } } }
        form.actions method="post" action="/dead/act" {
            input type="hidden" name="csrf" value=(csrf);
            input type="hidden" name="action" value=(action.name());
            input type="hidden" name="confirmed" value="yes";
            @for name in &names { input type="hidden" name="name" value=(name); }
            button type="submit" class=(action.button_class()) { "Yes, " (action.verb().to_lowercase()) " " (names.len()) }
            a href="/dead" { "Cancel" }
        }
    };
    page("Confirm", Here::Dead, &viewer, None, body).into_response()
}

/// Carries out a confirmed redrive or purge and says what it did.
pub(super) async fn act(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let form = fields(&body);
    if let Err(why) = shared.access.check_change(&headers, form.first("csrf")) {
        return refused(&shared, &headers, why);
    }
    let (Some(action), Some("yes")) = (Action::of(form.first("action")), form.first("confirmed"))
    else {
        return refused(&shared, &headers, "not confirmed");
    };
    let names = form.all("name");
    if let Some(bad) = not_dead_letter_names(&shared, &headers, &names) {
        return bad;
    }
    let viewer = shared.access.viewer(&headers);
    let done = match action {
        Action::Redrive => redrive(&shared, &names).await,
        Action::Purge => purge(&shared, &names).await,
    };
    match done {
        Ok(body) => page("Done", Here::Dead, &viewer, None, body).into_response(),
        Err(e) => unavailable(&shared, &headers, &e),
    }
}

async fn redrive(shared: &Shared, names: &[String]) -> crate::error::Result<Markup> {
    let report = shared
        .session
        .run(|queue| async move { dead::redrive(&queue, names).await })
        .await?;
    tracing::info!(redriven = report.redriven.len(), skipped = report.skipped.len(), names = ?names, "dashboard: redrive");
    Ok(html! {
        h1 { "Redriven " (report.redriven.len()) " of " (names.len()) }
        @if !report.redriven.is_empty() {
            table id="redriven" {
                tr { th { "Dead letter" } th { "Now pending as" } }
                @for r in &report.redriven { tr { td { code { (r.dead) } } td { code { (r.task) } } } }
            }
        }
        @for s in &report.skipped {
            p.notice { code { (s.dead) } " was not redriven: " (s.reason) }
        }
        p { a href="/dead" { "Back to the dead letters" } " · " a href="/" { "Overview" } }
    })
}

async fn purge(shared: &Shared, names: &[String]) -> crate::error::Result<Markup> {
    let purged = shared
        .session
        .run(|queue| async move { dead::purge(&queue, names).await })
        .await?;
    tracing::info!(purged, names = ?names, "dashboard: purge");
    Ok(html! {
        h1 { "Purged " span data-figure="purged" { (purged) } " of " (names.len()) }
        p { a href="/dead" { "Back to the dead letters" } " · " a href="/" { "Overview" } }
    })
}

/// Whether `name` has the shape of a dead letter's: its task's name (`task-0000000042`, or a
/// lane's `high-0000000042`), with the sequential suffix a taken name gets
/// (`~0000000003`) or without. No other name is listed, or can be read or changed.
fn is_dead_letter_name(name: &str) -> bool {
    let (task, suffix) = match name.split_once(DEAD_NAME_SUFFIX) {
        Some((task, suffix)) => (task, Some(suffix)),
        None => (name, None),
    };
    let sequential = |s: &str| {
        s.len() == 10
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'-')
            && s.parse::<i32>().is_ok()
    };
    sequence(task).is_some() && suffix.is_none_or(sequential)
}

/// 404: no such dead letter (gone, or a name none can have).
fn not_found(shared: &Shared, headers: &HeaderMap, name: &str) -> Response {
    let viewer = shared.access.viewer(headers);
    let text = format!("There is no dead letter {name} (redriven or purged, perhaps).");
    let page = message("Not found", &viewer, &text, true);
    (StatusCode::NOT_FOUND, page).into_response()
}

/// 400 when a form names something that cannot be a dead letter.
fn not_dead_letter_names(
    shared: &Shared,
    headers: &HeaderMap,
    names: &[String],
) -> Option<Response> {
    let bad = names.iter().find(|n| !is_dead_letter_name(n))?;
    let viewer = shared.access.viewer(headers);
    let text = format!("{bad:?} is not the name of a dead letter.");
    let page = message("Not a dead letter", &viewer, &text, true);
    Some((StatusCode::BAD_REQUEST, page).into_response())
}

#[derive(Clone, Copy)]
enum Action {
    Redrive,
    Purge,
}

impl Action {
    fn of(value: Option<&str>) -> Option<Action> {
        match value {
            Some("redrive") => Some(Action::Redrive),
            Some("purge") => Some(Action::Purge),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Action::Redrive => "redrive",
            Action::Purge => "purge",
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Action::Redrive => "Redrive",
            Action::Purge => "Purge",
        }
    }

    fn consequence(self) -> &'static str {
        match self {
            Action::Redrive => {
                "Each goes back to the queue as a new task, attempts reset, id kept."
            }
            Action::Purge => "Each is deleted for good; nothing keeps a copy.",
        }
    }

    fn button_class(self) -> &'static str {
        match self {
            Action::Redrive => "primary",
            Action::Purge => "danger",
        }
    }
}

fn text(record: &Value, field: &str) -> String {
    record[field].as_str().unwrap_or("—").to_string()
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

fn letter_link(name: &str) -> String {
    format!("/dead/{}", encode(name))
}

fn next_link(filter: &Filter, after: &str) -> String {
    format!(
        "/dead?type={}&reason={}&after={}",
        encode(&filter.event_type),
        encode(&filter.reason),
        encode(after)
    )
}

fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_dead_letters_get_are_looked_for() {
        for name in [
            "task-0000000042",
            "high-0000000042",
            "task--2147483648",
            "task-0000000042~0000000003",
            "task-0000000042~-000000003",
        ] {
            assert!(is_dead_letter_name(name), "{name}");
        }
        for name in [
            "",
            "\0",
            "..",
            "../tasks",
            "task-1",
            "task-0000000042/x",
            "task-0000000042~",
            "task-0000000042~../..",
            "task-0000000042~00000000003",
            "task-0000000042~0000000003~0000000001",
        ] {
            assert!(!is_dead_letter_name(name), "{name:?}");
        }
    }
}
