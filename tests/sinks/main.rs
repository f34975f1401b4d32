//! The sinks on real tasks: webhooks to an HTTP receiver on loopback, SQS on moto's server,
//! and routing between them.
//! Needs: ZooKeeper (`make zk-up`), moto (`make moto-up`), the binaries.

mod doctor;
mod gauge;
mod key_limits;
mod limits;
mod results;
mod routing;
mod sink_http;
mod sink_sqs;
mod standard_webhooks;
mod traces;
