//! Each sink answers: an HTTP route's host answers a `HEAD` of its URL (any status counts: a
//! webhook that takes only `POST` may answer 405, and it is reachable all the same); an SQS
//! route's queue, and the dead-letter queue, answer `GetQueueAttributes`. Nothing is delivered.
//! Sinks that several routes share are asked once; all are asked at once, each within its
//! route's timeout, at most [`SINK_TIMEOUT`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Check, SINK_TIMEOUT};
use crate::config::Config;
use crate::sink::redact::redacted;
use crate::sink::route::{RouteTable, SinkSpec};

/// A sink to reach, and the routes that deliver to it.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Http { url: String, timeout: Duration },
    Sqs { queue_url: String },
}

/// One check per distinct sink, named by its routes (`default`, `dead letters`).
pub(super) async fn check(config: &Config, table: Option<&RouteTable>) -> Vec<Check> {
    let targets = targets(config, table);
    #[cfg(feature = "sqs")]
    let sqs = match targets.iter().any(|(t, _)| matches!(t, Target::Sqs { .. })) {
        true => Some(crate::sink::sqs::client().await),
        false => None,
    };
    #[cfg(feature = "sqs")]
    let sqs = sqs.as_ref();
    let reached = targets.iter().map(|(target, routes)| async move {
        let check = match target {
            Target::Http { url, timeout } => http(url, *timeout).await,
            #[cfg(feature = "sqs")]
            Target::Sqs { queue_url } => sqs_queue(sqs, queue_url).await,
            #[cfg(not(feature = "sqs"))]
            Target::Sqs { .. } => Check::skip("sink", "built without the sqs sink"),
        };
        check.on(routes.join(", "))
    });
    futures::future::join_all(reached).await
}

/// The sinks of the table and the dead-letter queue, each with the routes that use it.
fn targets(config: &Config, table: Option<&RouteTable>) -> Vec<(Target, Vec<String>)> {
    let mut found: BTreeMap<String, (Target, Vec<String>)> = BTreeMap::new();
    let mut add = |route: &str, spec: &SinkSpec| {
        let target = match spec {
            SinkSpec::Log => return,
            SinkSpec::Http { url, timeout, .. } => Target::Http {
                url: url.clone(),
                timeout: *timeout,
            },
            SinkSpec::Sqs { queue_url, .. } => Target::Sqs {
                queue_url: queue_url.clone(),
            },
        };
        let key = match &target {
            Target::Http { url, .. } => url.clone(),
            Target::Sqs { queue_url } => queue_url.clone(),
        };
        found
            .entry(key)
            .or_insert((target, Vec::new()))
            .1
            .push(route.to_string());
    };
    if let Some(table) = table {
        table.routes.iter().for_each(|(name, spec)| add(name, spec));
        if let Some(spec) = &table.default {
            add("default", spec);
        }
    }
    if let Some(queue_url) = &config.dead_letter_queue_url {
        let spec = SinkSpec::Sqs {
            queue_url: queue_url.clone(),
            group: None,
            batch: false,
        };
        add("dead letters", &spec);
    }
    found.into_values().collect()
}

#[cfg(feature = "http")]
async fn http(url: &str, timeout: Duration) -> Check {
    let shown = redacted(url);
    let client = reqwest::Client::builder()
        .timeout(timeout.min(SINK_TIMEOUT))
        .build();
    let answered = match client {
        Ok(client) => client.head(url).send().await,
        Err(e) => Err(e),
    };
    match answered {
        Ok(reply) => Check::pass(
            "sink",
            format!("{shown} answered HEAD with {}", reply.status()),
        ),
        Err(e) => {
            let host = url::Url::parse(url)
                .ok()
                .and_then(|u| u.host_str().map(String::from))
                .unwrap_or_default();
            Check::fail(
                "sink",
                format!("{shown}: {}", causes(&e.without_url())),
                format!("check the route's url, and that {host} takes connections from here"),
            )
        }
    }
}

#[cfg(not(feature = "http"))]
async fn http(_: &str, _: Duration) -> Check {
    Check::skip("sink", "built without the http sink")
}

/// An error with its causes, on one line (reqwest's own says only "error sending request").
#[cfg(feature = "http")]
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(feature = "sqs")]
async fn sqs_queue(client: Option<&aws_sdk_sqs::Client>, queue_url: &str) -> Check {
    let Some(client) = client else {
        return Check::skip("sink", "no SQS client");
    };
    let shown = redacted(queue_url);
    let asked = tokio::time::timeout(SINK_TIMEOUT, crate::sink::sqs::reachable(client, queue_url));
    match asked.await {
        Ok(Ok(())) => Check::pass("sink", format!("{shown} answered GetQueueAttributes")),
        Ok(Err(e)) if e.missing => Check::fail(
            "sink",
            e.message,
            "create the queue, or correct its queue_url (DEAD_LETTER_QUEUE_URL for dead letters)",
        ),
        Ok(Err(e)) => Check::fail(
            "sink",
            e.message,
            "check AWS_REGION, AWS_ENDPOINT_URL_SQS and these credentials (they need \
             sqs:GetQueueAttributes and sqs:SendMessage on the queue)",
        ),
        Err(_) => Check::fail(
            "sink",
            format!("{shown}: no answer within {} s", SINK_TIMEOUT.as_secs()),
            "check AWS_REGION, AWS_ENDPOINT_URL_SQS and that SQS is reachable from here",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_several_routes_share_is_asked_once_and_log_routes_not_at_all() {
        let table = crate::sink::route::parse(
            r#"{"routes": {
                "a": {"sink": "http", "url": "https://h/x"},
                "b": {"sink": "http", "url": "https://h/x"},
                "c": {"sink": "log"}},
              "default": {"sink": "sqs", "queue_url": "http://127.0.0.1:5000/1/q"}}"#,
            &|_: &str| None,
        )
        .unwrap();
        let config = Config {
            dead_letter_queue_url: Some("http://127.0.0.1:5000/1/q".into()),
            ..Config::default()
        };
        let targets = targets(&config, Some(&table));
        let routes: Vec<&Vec<String>> = targets.iter().map(|(_, r)| r).collect();
        assert_eq!(
            routes,
            [
                &vec!["default".to_string(), "dead letters".into()],
                &vec!["a".into(), "b".into()]
            ]
        );
    }
}
