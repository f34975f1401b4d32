//! Delivery by route: the handler the functions run when `ROUTES` is set.

use std::collections::HashMap;

use crate::config::{ConfigError, HandlerKind};
use crate::handler::{Builtin, Handler, HandlerError};
use crate::sink::http::{HttpSink, HttpSpec};
use crate::sink::route::{NoRoute, RouteTable, SinkSpec};
use crate::sink::sqs::{self, SqsSink, SqsSpec};
use crate::task::Task;
use crate::{Config, Error};

/// One built sink.
pub enum Sink {
    Log,
    Http(HttpSink),
    Sqs(SqsSink),
}

impl Sink {
    pub async fn deliver(&self, task: &Task) -> Result<(), HandlerError> {
        match self {
            Sink::Log => Builtin(HandlerKind::Log).handle(task).await,
            Sink::Http(sink) => sink.deliver(task).await,
            Sink::Sqs(sink) => sink.deliver(task).await,
        }
    }
}

/// Delivers each task to the sink of its event type.
pub struct Router {
    routes: HashMap<String, Sink>,
    default: Option<Sink>,
    no_route: NoRoute,
}

impl Router {
    /// Builds every sink of `table` (one SQS client for all SQS routes, from the standard AWS
    /// environment; a batching SQS route spawns its batcher on the current runtime, which ends
    /// when the router is dropped). An error names the route.
    pub async fn new(table: &RouteTable) -> Result<Self, Error> {
        let uses_sqs = table
            .routes
            .values()
            .chain(&table.default)
            .any(|s| matches!(s, SinkSpec::Sqs { .. }));
        let sqs_client = if uses_sqs {
            Some(sqs::client().await)
        } else {
            None
        };
        let build = |name: &str, spec: &SinkSpec| -> Result<Sink, Error> {
            Ok(match spec {
                SinkSpec::Log => Sink::Log,
                SinkSpec::Http {
                    url,
                    secret,
                    timeout,
                } => {
                    let spec = HttpSpec {
                        url: url.clone(),
                        secret: secret.clone(),
                        timeout: *timeout,
                    };
                    Sink::Http(HttpSink::new(spec).map_err(|e| bad_route(name, e))?)
                }
                SinkSpec::Sqs {
                    queue_url,
                    group,
                    batch,
                } => {
                    let client = sqs_client.clone().expect("an SQS client for SQS routes");
                    let spec = SqsSpec {
                        queue_url: queue_url.clone(),
                        default_group: group.clone(),
                        batch: *batch,
                    };
                    Sink::Sqs(SqsSink::new(client, spec))
                }
            })
        };
        let mut routes = HashMap::new();
        for (event_type, spec) in &table.routes {
            routes.insert(
                event_type.clone(),
                build(&format!("route {event_type:?}"), spec)?,
            );
        }
        let default = match &table.default {
            Some(spec) => Some(build("default route", spec)?),
            None => None,
        };
        Ok(Router {
            routes,
            default,
            no_route: table.no_route,
        })
    }
}

fn bad_route(name: &str, problem: String) -> Error {
    Error::Config(ConfigError {
        variable: "ROUTES",
        value: name.to_string(),
        problem,
    })
}

impl Handler for Router {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        let event_type = &task.envelope.event_type;
        match self.routes.get(event_type).or(self.default.as_ref()) {
            Some(sink) => sink.deliver(task).await,
            None if self.no_route == NoRoute::Skip => {
                tracing::info!(task = %task.name, %event_type, "no route: skipped");
                Ok(())
            }
            None => Err(HandlerError::Permanent(format!(
                "no route for event type {event_type:?}"
            ))),
        }
    }
}

/// What the shipped functions run: routed delivery when `ROUTES` is set, else the built-in
/// handler of `EVENT_BRIDGE_HANDLER`.
pub enum Delivery {
    Builtin(Builtin),
    Routed(Box<Router>),
}

impl Delivery {
    pub async fn from_config(config: &Config) -> Result<Self, Error> {
        Ok(match &config.routes {
            Some(table) => Delivery::Routed(Box::new(Router::new(table).await?)),
            None => Delivery::Builtin(Builtin(config.handler)),
        })
    }
}

impl Handler for Delivery {
    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        match self {
            Delivery::Builtin(handler) => handler.handle(task).await,
            Delivery::Routed(router) => router.handle(task).await,
        }
    }
}
