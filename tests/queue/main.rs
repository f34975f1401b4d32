//! The queue on a real ZooKeeper (the one `make test` starts): claims, runs, reaping, the
//! worker, the `event-bridge` command and ACLs. Every test works in a chroot of its own.
//! Needs: ZooKeeper (`make zk-up`), the binaries (`cargo build --workspace --bins`).

mod audit;
mod batches;
mod book_handlers;
mod cancel;
mod cli;
mod connect;
mod dead;
mod debounce;
mod dedup;
mod dependencies;
mod doctor;
mod done;
mod doors;
mod expiry;
mod explain;
mod fairness;
mod gone_parent;
mod group_places;
mod groups;
mod holding;
mod idle;
mod ids;
mod key_gates;
mod lanes;
mod metrics;
mod packed_publish;
mod pause;
mod process;
mod progress;
mod publish_f;
mod queue;
mod reap;
mod results;
mod resume;
mod resume_runs;
mod resume_store;
mod schedules;
mod security;
mod signals;
mod walk;
mod worker;
