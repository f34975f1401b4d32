//! Delivery by route: the handler the functions, the CLI and the worker run when `ROUTES` is
//! set, and the built-in handler when it is not.

use std::collections::HashMap;

use super::error::SinkError;
use super::route::{self, NoRoute, RouteTable, SinkSpec};
use crate::config::Config;
use crate::config::ConfigError;
use crate::error::Error;
use crate::handler::{Builtin, Delivered, Handler, HandlerError, HandlerKind};
use crate::limit::RouteLimits;
use crate::task::{OnDeadPolicy, Task};

/// One built sink.
pub enum Sink {
    /// Logs the task and succeeds.
    Log,
    /// POSTs to a webhook.
    #[cfg(feature = "http")]
    Http(super::http::HttpSink),
    /// Sends to an SQS queue.
    #[cfg(feature = "sqs")]
    Sqs(super::sqs::SqsSink),
}

impl Sink {
    /// Delivers `task`; what the sink answered.
    pub async fn deliver(&self, task: &Task) -> Result<Delivered, HandlerError> {
        let (sink, status, result) = match self {
            Sink::Log => {
                Builtin(HandlerKind::Log).handle(task).await?;
                ("log", None, None)
            }
            #[cfg(feature = "http")]
            Sink::Http(sink) => {
                let answer = sink.deliver(task).await?;
                ("http", Some(answer.status), answer.result)
            }
            #[cfg(feature = "sqs")]
            Sink::Sqs(sink) => {
                sink.deliver(task).await?;
                ("sqs", None, None)
            }
        };
        Ok(Delivered {
            sink: Some(sink.into()),
            status,
            result,
        })
    }
}

/// Delivers each task to the sink of its event type.
pub struct Router {
    routes: HashMap<String, Sink>,
    default: Option<Sink>,
    no_route: NoRoute,
    on_dead: OnDeadPolicy,
    limits: RouteLimits,
}

impl Router {
    /// Builds every sink of `table` (one SQS client for all SQS routes, from the standard AWS
    /// environment; a batching SQS route spawns its batcher on the current runtime, which ends
    /// when the router is dropped). An error names the route.
    pub async fn new(table: &RouteTable) -> Result<Self, Error> {
        let mut builder = Builder::default();
        let mut routes = HashMap::new();
        for (event_type, spec) in &table.routes {
            let sink = builder.build(spec).await;
            routes.insert(
                event_type.clone(),
                sink.map_err(|p| bad_route(&format!("route {event_type:?}"), p))?,
            );
        }
        let default = match &table.default {
            Some(spec) => Some(
                builder
                    .build(spec)
                    .await
                    .map_err(|p| bad_route("default route", p))?,
            ),
            None => None,
        };
        Ok(Router {
            routes,
            default,
            no_route: table.no_route,
            on_dead: table.on_dead.clone(),
            limits: table.limits.clone(),
        })
    }
}

/// Builds sinks, sharing what they can share (one SQS client).
#[derive(Default)]
struct Builder {
    #[cfg(feature = "sqs")]
    sqs_client: Option<aws_sdk_sqs::Client>,
}

impl Builder {
    async fn build(&mut self, spec: &SinkSpec) -> Result<Sink, String> {
        match spec {
            SinkSpec::Log => Ok(Sink::Log),
            SinkSpec::Http { .. } => self.http(spec),
            SinkSpec::Sqs { .. } => self.sqs(spec).await,
        }
    }

    #[cfg(feature = "http")]
    fn http(&self, spec: &SinkSpec) -> Result<Sink, String> {
        let SinkSpec::Http {
            url,
            secret,
            signature,
            timeout,
        } = spec
        else {
            unreachable!("an http spec");
        };
        let spec = super::http::HttpSpec {
            url: url.clone(),
            secret: secret.clone(),
            signature: *signature,
            timeout: *timeout,
        };
        let sink = super::http::HttpSink::new(spec).map_err(|e| e.0)?;
        Ok(Sink::Http(sink))
    }

    #[cfg(not(feature = "http"))]
    fn http(&self, _spec: &SinkSpec) -> Result<Sink, String> {
        Err("the http sink is not built in (cargo feature `http`)".into())
    }

    #[cfg(feature = "sqs")]
    async fn sqs(&mut self, spec: &SinkSpec) -> Result<Sink, String> {
        let SinkSpec::Sqs {
            queue_url,
            group,
            batch,
        } = spec
        else {
            unreachable!("an sqs spec");
        };
        if self.sqs_client.is_none() {
            self.sqs_client = Some(super::sqs::client().await);
        }
        let client = self.sqs_client.clone().expect("just set");
        let spec = super::sqs::SqsSpec {
            queue_url: queue_url.clone(),
            default_group: group.clone(),
            batch: *batch,
        };
        Ok(Sink::Sqs(super::sqs::SqsSink::new(client, spec)))
    }

    #[cfg(not(feature = "sqs"))]
    async fn sqs(&mut self, _spec: &SinkSpec) -> Result<Sink, String> {
        Err("the sqs sink is not built in (cargo feature `sqs`)".into())
    }
}

fn bad_route(name: &str, problem: String) -> Error {
    Error::Config(ConfigError {
        variable: "ROUTES",
        value: name.to_string(),
        problem: format!("{problem}; {}", super::route::ROUTE_FIX),
    })
}

impl Handler for Router {
    fn on_dead_policy(&self) -> OnDeadPolicy {
        self.on_dead.clone()
    }

    fn limits(&self) -> RouteLimits {
        self.limits.clone()
    }

    fn route_name(&self, event_type: &str) -> String {
        match (self.routes.contains_key(event_type), &self.default) {
            (true, _) => event_type.to_string(),
            (false, Some(_)) => "default".into(),
            (false, None) => "none".into(),
        }
    }

    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.handle_delivered(task).await.map(drop)
    }

    async fn handle_delivered(&self, task: &Task) -> Result<Delivered, HandlerError> {
        let event_type = &task.envelope.event_type;
        match self.routes.get(event_type).or(self.default.as_ref()) {
            Some(sink) => sink.deliver(task).await,
            None if self.no_route == NoRoute::Skip => {
                tracing::info!(task = %task.name, %event_type, "no route: skipped");
                Ok(Delivered::default())
            }
            None => {
                Err(SinkError::Permanent(format!("no route for event type {event_type:?}")).into())
            }
        }
    }
}

/// What the shipped functions run: routed delivery when `ROUTES` is set, else the built-in
/// handler of `EVENT_BRIDGE_HANDLER`.
pub enum Delivery {
    /// The built-in handler `EVENT_BRIDGE_HANDLER` names.
    Builtin(Builtin),
    /// Each task to its event type's route.
    Routed(Box<Router>),
}

impl Delivery {
    /// Parses `config`'s route table (reading the variables its `secret_env`s name from the
    /// process environment) and builds its sinks; the built-in handler without one.
    ///
    /// # Notable errors
    /// - [`Error::Config`] naming `ROUTES` or `ROUTES_FILE` and the route.
    pub async fn from_config(config: &Config) -> Result<Self, Error> {
        let Some(source) = &config.routes else {
            return Ok(Delivery::Builtin(Builtin(config.handler)));
        };
        let table = route::from_source(source, &|name| std::env::var(name).ok())?;
        Ok(Delivery::Routed(Box::new(Router::new(&table).await?)))
    }
}

impl Handler for Delivery {
    fn on_dead_policy(&self) -> OnDeadPolicy {
        match self {
            Delivery::Builtin(_) => OnDeadPolicy::default(),
            Delivery::Routed(router) => router.on_dead_policy(),
        }
    }

    fn limits(&self) -> RouteLimits {
        match self {
            Delivery::Builtin(_) => RouteLimits::default(),
            Delivery::Routed(router) => router.limits(),
        }
    }

    fn route_name(&self, event_type: &str) -> String {
        match self {
            Delivery::Builtin(_) => "builtin".into(),
            Delivery::Routed(router) => router.route_name(event_type),
        }
    }

    async fn handle(&self, task: &Task) -> Result<(), HandlerError> {
        self.handle_delivered(task).await.map(drop)
    }

    async fn handle_delivered(&self, task: &Task) -> Result<Delivered, HandlerError> {
        match self {
            Delivery::Builtin(handler) => handler.handle_delivered(task).await,
            Delivery::Routed(router) => router.handle_delivered(task).await,
        }
    }
}
