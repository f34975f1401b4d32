//! The secrets this configuration needs are set, derived from it:
//!
//! - every variable a route's `secret_env` names (its webhooks are signed with it);
//! - on Vercel, `CRON_SECRET`: its cron requests and drains carry it, and without it every
//!   request is refused (`ALLOW_UNAUTHENTICATED` opens them instead, for local use); and
//!   `PUBLISH_SECRET` for publishing over HTTP (a warning: not every deployment publishes so).
//!   On Lambda the Function URL is IAM's, and a worker has no HTTP trigger: neither is needed.
//!
//! `ZOOKEEPER_AUTH` is judged by the `acl` check, against the ACLs it must open.

use super::Check;
use crate::config::Config;

/// Where a deployment runs, which decides the HTTP triggers' secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// The functions on AWS Lambda.
    Lambda,
    /// The functions on Vercel.
    Vercel,
    /// A long-running `event-bridge worker`.
    Worker,
}

impl Platform {
    /// `lambda`, `vercel` or `worker`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "lambda" => Some(Platform::Lambda),
            "vercel" => Some(Platform::Vercel),
            "worker" => Some(Platform::Worker),
            _ => None,
        }
    }

    /// As the platform's own variables tell: `VERCEL` on Vercel, `AWS_LAMBDA_FUNCTION_NAME` on
    /// Lambda.
    pub(super) fn from_environment(lookup: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        if lookup("VERCEL").is_some() {
            Some(Platform::Vercel)
        } else if lookup("AWS_LAMBDA_FUNCTION_NAME").is_some() {
            Some(Platform::Lambda)
        } else {
            None
        }
    }
}

/// A line per secret needed (one saying none is, when none is); `unset` are the routes'
/// unset `secret_env` variables with the routes that sign with each.
pub(super) fn check(
    config: &Config,
    unset: &[(String, Vec<String>)],
    platform: Option<Platform>,
) -> Vec<Check> {
    let mut checks: Vec<Check> = unset
        .iter()
        .map(|(var, routes)| route_secret(var, routes))
        .collect();
    checks.extend(cron_secret(config, platform));
    if platform == Some(Platform::Vercel) && config.publish_secret.is_none() {
        checks.push(
            Check::warn(
                "secret",
                "not set: publishing and status over HTTP are refused (401)",
                "set PUBLISH_SECRET if producers publish over HTTP",
            )
            .on("PUBLISH_SECRET"),
        );
    }
    if checks.is_empty() {
        checks.push(Check::pass(
            "secret",
            "every secret this configuration needs is set",
        ));
    }
    checks
}

fn route_secret(var: &str, routes: &[String]) -> Check {
    let detail = format!(
        "not set, and route {} signs its webhooks with it (secret_env)",
        routes.join(", ")
    );
    let fix = format!(
        "set {var} to the routes' signing secret (whsec_… for \"signature\": \"standard\")"
    );
    Check::fail("secret", detail, fix).on(var)
}

/// `CRON_SECRET`, where the platform needs it (a warning where the platform is not known).
fn cron_secret(config: &Config, platform: Option<Platform>) -> Option<Check> {
    let refused = "not set: Vercel's cron requests and drains are refused (401)";
    let check = match (platform, &config.cron_secret, config.allow_unauthenticated) {
        (Some(Platform::Lambda | Platform::Worker), _, _) => return None,
        (_, Some(_), _) => Check::pass("secret", "set: HTTP triggers need its bearer"),
        (_, None, true) => Check::warn(
            "secret",
            "not set, and ALLOW_UNAUTHENTICATED lets anyone call the HTTP triggers",
            "set CRON_SECRET and unset ALLOW_UNAUTHENTICATED, unless this is for local use",
        ),
        (Some(Platform::Vercel), None, false) => Check::fail(
            "secret",
            refused,
            "set CRON_SECRET in the project's environment (Vercel sends it with its crons)",
        ),
        (None, None, false) => Check::warn(
            "secret",
            refused,
            "set CRON_SECRET if this deployment runs on Vercel (pass --platform to say where \
             it runs)",
        ),
    };
    Some(check.on("CRON_SECRET"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn statuses(checks: &[Check]) -> Vec<(String, Status)> {
        (checks.iter())
            .map(|c| (c.subject.clone().unwrap_or_default(), c.status))
            .collect()
    }

    #[test]
    fn the_secrets_needed_follow_the_routes_and_the_platform() {
        let config = Config::default();
        let unset = [("HOOK".to_string(), vec!["a".to_string()])];
        assert_eq!(
            statuses(&check(&config, &unset, Some(Platform::Lambda))),
            [("HOOK".into(), Status::Fail)]
        );
        assert_eq!(
            statuses(&check(&config, &[], Some(Platform::Vercel))),
            [
                ("CRON_SECRET".into(), Status::Fail),
                ("PUBLISH_SECRET".into(), Status::Warn)
            ]
        );
        assert_eq!(
            statuses(&check(&config, &[], None)),
            [("CRON_SECRET".into(), Status::Warn)]
        );
        let worker = check(&config, &[], Some(Platform::Worker));
        assert_eq!(statuses(&worker), [(String::new(), Status::Pass)]);
        let open = Config {
            allow_unauthenticated: true,
            ..Config::default()
        };
        assert_eq!(
            check(&open, &[], Some(Platform::Vercel))[0].status,
            Status::Warn
        );
    }
}
