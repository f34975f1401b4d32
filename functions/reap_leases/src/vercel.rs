//! The Vercel handler: a cron request (`GET`, or `POST`) with `Authorization: Bearer
//! $CRON_SECRET` runs the reaper once; any other method is 405.

use std::sync::Arc;

use event_bridge::Session;
use platform::{HttpReply, admit};
use vercel_runtime::{Request, Response};

/// Handles one request.
pub async fn handle(
    session: Arc<Session>,
    req: Request,
) -> Result<Response<String>, vercel_runtime::Error> {
    if let Err(refused) = platform::intake::run_method(req.method().as_str()) {
        return platform::vercel::response(refused);
    }
    let authorization = platform::vercel::authorization(&req);
    platform::vercel::response(respond(&session, authorization).await)
}

/// The reply to a request with this `Authorization` header.
pub async fn respond(session: &Session, authorization: Option<&str>) -> HttpReply {
    if let Err(refused) = admit(session.config(), authorization) {
        return refused;
    }
    match crate::run(session).await {
        Ok(report) => HttpReply::ok(&report),
        Err(e) => HttpReply::failed(&e),
    }
}
