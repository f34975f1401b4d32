//! Signing in to an admin dashboard with `DASHBOARD_TOKEN`, and out again. Wrong tokens are
//! limited across every connection ([`super::attempts`]) and each waits a second for its answer.

use std::time::{Duration, Instant};

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
    let place = match shared.attempts.take(Instant::now()) {
        Ok(place) => place,
        Err(wait) => return too_many(&shared, &headers, wait),
    };
    let typed = fields(&body).first("token").unwrap_or_default().to_string();
    match shared.access.sign_in(&typed) {
        Some(id) => {
            shared.attempts.give_back(place);
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

/// 429: the limit of wrong tokens is reached; the token was not looked at.
fn too_many(shared: &Shared, headers: &HeaderMap, wait: Duration) -> Response {
    tracing::warn!("dashboard: a sign-in refused, too many wrong tokens");
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let why = format!("Too many wrong tokens of late: try again in {seconds} s.");
    let viewer = shared.access.viewer(headers);
    let page = message("Too many sign-ins", &viewer, &why, true);
    let retry = [(header::RETRY_AFTER, seconds.to_string())];
    (StatusCode::TOO_MANY_REQUESTS, retry, page).into_response()
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
