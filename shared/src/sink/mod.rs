//! Where tasks go: built-in sinks and the routing from event type to sink.
//!
//! - [`route`]: the route table (`ROUTES` / `ROUTES_FILE`), parsed and validated at cold start.
//! - [`router`]: the handler that delivers each task to its route's sink ([`router::Delivery`]
//!   is what the functions run).
//! - [`http`]: POST the envelope to a webhook, signed.
//! - [`sqs`]: send the payload to an SQS queue; the optional SQS dead-letter queue.

pub mod http;
pub mod route;
pub mod router;
pub mod sqs;
