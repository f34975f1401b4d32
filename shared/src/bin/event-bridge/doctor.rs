//! `doctor`: every check of `event_bridge::doctor`, a line each (or the report as JSON); exit 1
//! when one fails.

use std::io::Write;
use std::time::Duration;

use event_bridge::doctor::{self, Options, Platform};

use crate::Failure;
use crate::show::print_json;

pub(crate) async fn doctor(
    json: bool,
    platform: Option<&str>,
    reaper_every: Duration,
) -> Result<i32, Failure> {
    let options = Options {
        platform: platform.and_then(Platform::parse),
        reaper_every,
    };
    let lookup = |name: &str| std::env::var(name).ok();
    let report = doctor::run(&lookup, &options).await;
    if json {
        print_json(&report)?;
    } else {
        for check in &report.checks {
            out!("{}", check.line());
        }
    }
    match report.failed().count() {
        0 => Ok(0),
        n => Err(format!(
            "{n} of {} checks failed: apply each fix above, then run `event-bridge doctor` again",
            report.checks.len()
        )
        .into()),
    }
}
