//! Where tasks go: built-in sinks and the routing from event type to sink.

pub mod http;
pub mod sqs;
