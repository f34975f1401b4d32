//! The deploy files: `template.yaml` under cfn-lint, `vercel.json`'s crons against the Vercel
//! binaries, and the Lambda binary under `cargo lambda watch` / `invoke`.
//! Needs: ZooKeeper (`make zk-up`), cfn-lint and cargo-lambda (`make tools`).

mod deploy;
mod panic;
