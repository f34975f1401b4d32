//! `/task?key=…`: one task, by name, a name it had, or envelope id: its state, why it is where
//! it is and what would let it go (`explain`'s lines), and its status in full. Without a key,
//! the form that asks for one. A task nowhere is a 404 that says where it was looked for.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::shell::{Here, page};
use super::{Shared, unavailable};
use crate::inspect::{self, Explanation, Status};

pub(super) async fn show(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let viewer = shared.access.viewer(&headers);
    let key = query.get("key").map(|k| k.trim()).unwrap_or_default();
    if key.is_empty() {
        let body = html! { h1 { "Task" } (ask("")) };
        return page("Task", Here::Task, &viewer, None, body).into_response();
    }
    let found = (shared.session)
        .run(|queue| async move { inspect::status_and_why(&queue, key).await })
        .await;
    let (status, why) = match found {
        Ok(found) => found,
        Err(e) => return unavailable(&shared, &headers, &e),
    };
    let code = match status {
        Status::NotFound => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    };
    let body = html! {
        h1 { "Task " code { (key) } }
        (explained(&why))
        pre id="status" { (serde_json::to_string_pretty(&status).unwrap_or_default()) }
        (ask(key))
    };
    (code, page(key, Here::Task, &viewer, None, body)).into_response()
}

/// The state and one line per reason.
fn explained(why: &Explanation) -> Markup {
    let state = why.state.map_or("—", |s| s.name());
    html! {
        p { "State: " strong data-figure="state" { (state) } }
        ul id="why" {
            @for line in &why.lines { li { (line) } }
        }
    }
}

/// The form that asks for another task.
fn ask(key: &str) -> Markup {
    html! {
        form.filters method="get" action="/task" {
            label { "Name or id" input type="text" name="key" value=(key) placeholder="task-0000000042"; }
            button type="submit" { "Look up" }
        }
    }
}
