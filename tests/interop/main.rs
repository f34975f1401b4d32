//! Other languages on one queue: the Ruby, Python and npm packages as `make packages` installs
//! them from their artifacts (their producers, the Rails flow, the webhook helpers, their one
//! version), and a consumer written to the 000 design beside ours.
//! Needs: ZooKeeper (`make zk-up`), the installed packages (`make packages`), Debian's Ruby with
//! ActiveJob, Rack and WEBrick (`make tools`), and the built binaries.

mod interop;
mod packages;
mod producer_fields;
mod producer_kicks;
mod rails;
