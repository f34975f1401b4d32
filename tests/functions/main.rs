//! The two functions as their platforms run them: the Lambda handlers called directly, the
//! session they keep across invocations, and the binaries as processes (a Lambda cold start,
//! the Vercel builds as local HTTP servers), and one Lambda process serving concurrent
//! invocations (Lambda Managed Instances).
//! Needs: ZooKeeper (`make zk-up`), the binaries (`cargo build --workspace --bins`).

mod batches;
mod book;
mod concurrent;
mod debounced;
mod dependencies;
mod emf;
mod expiry;
mod functions;
mod kicks;
mod lambda_kicks;
mod methods;
mod openapi;
mod requests;
mod resumable;
