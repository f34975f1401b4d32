//! Integration tests: one binary, one module per topic, all against the real ZooKeeper that
//! `make test` starts (address in `ZK_TEST_ADDRESS`, default 127.0.0.1:2181). Every test works
//! in a chroot of its own, so tests never see each other's znodes.

mod harness;

mod cli;
mod deploy;
mod functions;
mod process;
mod queue;
mod reap;
mod routing;
mod security;
mod sink_http;
mod sink_sqs;
mod worker;
