//! Signing in to an admin dashboard with `DASHBOARD_TOKEN`, and out again.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::Shared;
use super::access::{Viewer, expired_cookie, same_origin, session_cookie};
use super::form::{Fields, fields};
use super::shell::{Here, message, page};

/// How long a wrong token waits before its answer, to slow guessing.
const WRONG_TOKEN_PAUSE: Duration = Duration::from_secs(1);

pub(super) async fn form(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let viewer = shared.access.viewer(&headers);
    let body = html! {
        h1 { "Sign in" }
        @if matches!(viewer, Viewer::Admin { .. }) {
            p { "You are signed in. " a href="/" { "Go to the overview" } }
        } @else {
            form method="post" action="/login" {
                p {
                    label { "Token (" code { "DASHBOARD_TOKEN" } ") "
                        input type="password" name="token" autocomplete="current-password" autofocus; }
                }
                button.primary type="submit" { "Sign in" }
            }
        }
    };
    page("Sign in", Here::Other, &viewer, None, body).into_response()
}

pub(super) async fn sign_in(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !same_origin(&headers) {
        return refused(&shared, &headers, "the request came from another site");
    }
    let typed = fields(&body).first("token").unwrap_or_default().to_string();
    match shared.access.sign_in(&typed) {
        Some(id) => {
            tracing::info!("dashboard: an operator signed in");
            let cookie = [(header::SET_COOKIE, session_cookie(&id))];
            (cookie, Redirect::to("/")).into_response()
        }
        None => {
            tracing::warn!("dashboard: a sign-in with a wrong token");
            tokio::time::sleep(WRONG_TOKEN_PAUSE).await;
            refused(&shared, &headers, "That is not the token.")
        }
    }
}

pub(super) async fn sign_out(
    State(shared): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: Fields = fields(&body);
    if let Err(why) = shared.access.check_change(&headers, form.first("csrf")) {
        return refused(&shared, &headers, why);
    }
    shared.access.sign_out(&headers);
    ([(header::SET_COOKIE, expired_cookie())], Redirect::to("/")).into_response()
}

/// 403 with the reason.
pub(super) fn refused(shared: &Shared, headers: &HeaderMap, why: &str) -> Response {
    let viewer = shared.access.viewer(headers);
    (
        StatusCode::FORBIDDEN,
        message("Refused", &viewer, why, true),
    )
        .into_response()
}
