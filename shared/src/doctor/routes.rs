//! The route table parses, with the sinks' own parser ([`crate::sink::route::from_source`]).
//!
//! A route's `secret_env` naming an unset variable stops that parser. Here it is parsed with a
//! stand-in for each unset secret instead, so that the table's shape is judged on its own and
//! each unset secret is reported once, by the `secret` check, with the routes that sign with it.
//! A secret that is set is parsed as it is (a Standard Webhooks secret that is not `whsec_` and
//! base64 fails here).

use std::cell::RefCell;

use base64::Engine;

use super::Check;
use crate::config::Config;
use crate::sink::route::{self, RouteTable, SinkSpec};

/// What the route check found: its line, the table when it parsed, and the unset secrets.
pub(super) struct Routes {
    pub(super) check: Check,
    pub(super) table: Option<RouteTable>,
    /// Each unset `secret_env` variable, with the routes that sign with it.
    pub(super) unset: Vec<(String, Vec<String>)>,
}

pub(super) fn check(config: &Config, lookup: &(dyn Fn(&str) -> Option<String> + Sync)) -> Routes {
    let Some(source) = &config.routes else {
        let handler = match config.handler {
            crate::config::HandlerKind::Log => "log",
            crate::config::HandlerKind::Noop => "noop",
        };
        let detail = format!("no ROUTES: every task goes to the built-in handler {handler}");
        return Routes {
            check: Check::pass("routes", detail),
            table: None,
            unset: Vec::new(),
        };
    };
    let unset = RefCell::new(Vec::new());
    let or_stand_in = |name: &str| {
        lookup(name).filter(|v| !v.trim().is_empty()).or_else(|| {
            unset.borrow_mut().push(name.to_string());
            Some(stand_in(name))
        })
    };
    match route::from_source(source, &or_stand_in) {
        Ok(table) => {
            let mut unset = unset.into_inner();
            unset.sort();
            unset.dedup();
            let signers = unset.into_iter().map(|var| {
                let routes = signing_with(&table, &var);
                (var, routes)
            });
            let detail = format!(
                "{} parses: {} routes{}",
                source.variable,
                table.routes.len(),
                if table.default.is_some() {
                    " and a default"
                } else {
                    ""
                }
            );
            Routes {
                check: Check::pass("routes", detail),
                unset: signers.collect(),
                table: Some(table),
            }
        }
        Err(e) => Routes {
            check: Check::fail(
                "routes",
                e.to_string()
                    .replace(&format!("; {}", route::ROUTE_FIX), ""),
                format!(
                    "correct the table in {} (the book's \"Routes, sinks and limits\" lists every field)",
                    source.variable
                ),
            ),
            table: None,
            unset: Vec::new(),
        },
    }
}

/// The secret parsed in place of unset variable `name`: a valid Standard Webhooks secret that
/// names it, so that the routes signing with it can be found in the parsed table.
fn stand_in(name: &str) -> String {
    let key = format!("doctor: {name} is not set");
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(key)
    )
}

/// The routes (`default` for the default route) whose secret is the stand-in for `var`.
fn signing_with(table: &RouteTable, var: &str) -> Vec<String> {
    let wanted = stand_in(var);
    let signs = |spec: &SinkSpec| matches!(spec, SinkSpec::Http { secret: Some(s), .. } if s.expose() == wanted);
    let mut routes: Vec<String> = (table.routes.iter())
        .filter(|(_, spec)| signs(spec))
        .map(|(name, _)| name.clone())
        .collect();
    if table.default.as_ref().is_some_and(signs) {
        routes.push("default".into());
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouteSource;
    use crate::doctor::Status;

    fn with_routes(text: &str) -> Config {
        Config {
            routes: Some(RouteSource {
                variable: "ROUTES",
                origin: "<inline JSON>".into(),
                text: text.into(),
            }),
            ..Config::default()
        }
    }

    #[test]
    fn an_unset_secret_is_reported_with_its_routes_not_as_a_bad_table() {
        let config = with_routes(
            r#"{"routes": {
                "a": {"sink": "http", "url": "https://h/a", "secret_env": "A_SECRET", "signature": "standard"},
                "b": {"sink": "http", "url": "https://h/b", "secret_env": "A_SECRET"},
                "c": {"sink": "http", "url": "https://h/c", "secret_env": "SET_SECRET"}},
              "default": {"sink": "http", "url": "https://h/d", "secret_env": "D_SECRET"}}"#,
        );
        let env = |name: &str| (name == "SET_SECRET").then(|| "s".to_string());
        let routes = check(&config, &env);
        assert_eq!(routes.check.status, Status::Pass, "{:?}", routes.check);
        assert_eq!(
            routes.unset,
            [
                (
                    "A_SECRET".to_string(),
                    vec!["a".to_string(), "b".to_string()]
                ),
                ("D_SECRET".to_string(), vec!["default".to_string()]),
            ]
        );
    }

    #[test]
    fn a_bad_table_fails_with_the_parsers_message() {
        let config = with_routes(r#"{"routes": {"a": {"sink": "kafka"}}}"#);
        let routes = check(&config, &|_: &str| None);
        assert_eq!(routes.check.status, Status::Fail);
        assert!(
            routes
                .check
                .detail
                .contains(r#"route "a": unknown variant `kafka`"#)
        );
        assert!(
            routes
                .check
                .fix
                .unwrap()
                .starts_with("correct the table in ROUTES")
        );
    }
}
