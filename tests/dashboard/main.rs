//! The dashboard (`event-bridge serve`) as its users meet it: pages in a real headless
//! Chromium (Debian's `chromium` and `chromium-driver`, driven over WebDriver), `/metrics` read
//! by a real Prometheus parser, and its refusals over plain HTTP (other hosts, framing, wrong
//! tokens, bad names, how it starts).

mod browser;
mod hosts;
mod http;
mod metrics;
mod refusals;
mod scene;
mod serve;
mod start;
