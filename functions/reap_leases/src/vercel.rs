//! The Vercel handler: a cron request with `Authorization: Bearer $CRON_SECRET` runs the
//! reaper once.

use std::sync::Arc;

use vercel_runtime::{Request, Response};

use crate::platform::{self, HttpReply, Session};

/// Handles one request.
pub async fn handle(
    session: Arc<Session>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    let authorization = platform::authorization(&req);
    respond(&session, authorization).await.into_vercel()
}

/// The reply to a request with this `Authorization` header.
pub async fn respond(session: &Session, authorization: Option<&str>) -> HttpReply {
    if !session.authorized(authorization) {
        return HttpReply::unauthorized();
    }
    match crate::run(session).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
