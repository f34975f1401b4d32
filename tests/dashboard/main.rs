//! The dashboard (`event-bridge serve`) as its users meet it: pages in a real headless
//! Chromium (Debian's `chromium` and `chromium-driver`, driven over WebDriver), `/metrics` read
//! by a real Prometheus parser, and its refusals over plain HTTP.

mod browser;
mod http;
mod metrics;
mod refusals;
mod scene;
mod serve;
