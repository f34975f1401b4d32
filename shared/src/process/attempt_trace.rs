//! What an attempt's CONSUMER span says of how it ended: a failed attempt (its handler's error,
//! its lease lost, its task dead-lettered) has status ERROR and an `error.type`, as the
//! OpenTelemetry conventions ask; a success, a suspension or a release at the deadline leaves
//! the status unset.

use tracing::Span;

use super::hold::HandlerEnd;
use crate::error::Result;
use crate::handler::HandlerError;
use crate::queue::TaskOutcome;

/// Why an attempt failed, as its span says it: a low-cardinality class and the error.
pub(super) type Failure = (&'static str, String);

/// How the handler's end failed the attempt, if it did: `retryable` or `permanent` (as the
/// handler classed its error), `lease_lost`, `abandoned`.
pub(super) fn failure(ended: &Result<HandlerEnd>) -> Option<Failure> {
    match ended {
        Ok(HandlerEnd::Finished(Err(error))) => match error {
            HandlerError::Retryable(e) | HandlerError::RetryAfter { error: e, .. } => {
                Some(("retryable", e.clone()))
            }
            HandlerError::Permanent(e) => Some(("permanent", e.clone())),
            HandlerError::Suspended => None,
        },
        Ok(HandlerEnd::Finished(Ok(_)) | HandlerEnd::Interrupted { .. }) => None,
        Ok(HandlerEnd::LeaseLost) => Some(("lease_lost", "the lease passed on".into())),
        Ok(HandlerEnd::Unvouched) => {
            Some(("abandoned", "no lease extension got through in time".into()))
        }
        Err(e) => Some(("_OTHER", e.to_string())),
    }
}

/// Marks `span` failed when the attempt was (`failure`), or when it ended in the dead letters
/// for another reason (`dead_lettered`: run out of interruptions).
pub(super) fn record(span: &Span, failure: Option<Failure>, outcome: &TaskOutcome) {
    match (failure, outcome) {
        (Some((error_type, error)), _) => crate::traces::failed(span, error_type, &error),
        (None, TaskOutcome::DeadLettered { reason }) => {
            crate::traces::failed(span, "dead_lettered", reason)
        }
        (None, _) => {}
    }
}
