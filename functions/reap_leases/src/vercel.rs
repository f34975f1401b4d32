//! The Vercel handler: a cron request with `Authorization: Bearer $CRON_SECRET` runs the
//! reaper once.

use std::sync::Arc;

use event_bridge::config::Secret;
use event_bridge::trigger;
use vercel_runtime::{Request, Response};

use crate::platform::{HttpReply, Session};

/// Handles one request.
pub async fn handle(
    session: Arc<Session>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    respond(&session, authorization).await.into_vercel()
}

/// The reply to a request with this `Authorization` header.
pub async fn respond(session: &Session, authorization: Option<&str>) -> HttpReply {
    if !trigger::authorized(
        authorization,
        session.config().cron_secret.as_ref().map(Secret::expose),
    ) {
        return HttpReply::unauthorized();
    }
    match crate::run(session).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
