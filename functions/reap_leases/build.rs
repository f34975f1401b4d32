//! Links this crate's binaries (the Lambda and Vercel functions) as position-dependent
//! executables: see `functions/platform/link.rs`, which both function crates include.

include!("../platform/link.rs");
