//! `event-bridge serve`: a web dashboard of the queue, with Prometheus text at `/metrics`.
//!
//! Pages are drawn on the server (maud) and served with their stylesheet from the binary; they
//! work without scripts (forms, links, a meta refresh). Every page reads ZooKeeper when it is
//! asked for, at the cost of the CLI's cheap looks ([`crate::inspect`], [`crate::stats`]);
//! a sampler records the figures every `sample_every` for the chart and for `/metrics`.
//!
//! - `access`: read-only, or admin behind a token, a session cookie and CSRF tokens.
//! - `guard`: around every route: the `Host` a request names must be ours (421 otherwise),
//!   and no answer may be framed.
//! - `overview`: `/`: figures, chart, leases, types, pauses, groups and schedules.
//! - `dead_pages`: `/dead`: dead letters by type and reason; show, redrive, purge.
//! - `task_page`: `/task?key=`: one task's state, why it is there (`explain`), its status.
//! - `sampler`: the figures over time, and the Prometheus gauges.
//! - `signin`: signing in with `DASHBOARD_TOKEN`, and out; `attempts`: the limit on wrong
//!   tokens, across connections.
//! - `history`, `chart`, `shell`, `form`: the samples, the SVG chart, what pages
//!   share, posted forms.
//!
//! # How it works
//!
//! `event-bridge serve` draws its pages on the server (maud templates escape every value) and
//! serves them, with the stylesheet compiled into the binary, from axum; forms and a meta refresh
//! do what scripts would. Each page view reads ZooKeeper through the same cheap looks the CLI
//! uses, on a `Session` (so an expired session is replaced, as in the functions): the overview is
//! `detailed_stats` (three stats, a stat per waiting bucket, the oldest 1000 tasks for the type
//! counts), `leased` (a listing of `leases/`, as long as the tasks in flight, and a read of each
//! lease with its task: each held task's holder, expiry and progress, as of its last extension)
//! the schedules, and the batches (a listing of `batches/` and one multi-read of the first 50);
//! the dead-letter page lists `dead/` and reads records
//! 32 to a request until 50 pass the filter. Nothing lists `tasks/`. A name that no dead letter
//! can have (not a task's name, with or without the `~` suffix of a taken name: `%00`,
//! `../tasks`) is not looked for: 404 for a letter's page, 400 for a form naming it.
//!
//! `serve` binds its address before it connects to ZooKeeper, and prints where it serves only once
//! both have succeeded: a port in use ends it (exit 1) without that line.
//!
//! A sampler takes the figures every `--sample-every` (10 s; zero is a usage error): the three child counts and the
//! creates and deletes under `tasks/` come from one multi-read of stats (`cversion` counts creates
//! plus deletes, `numChildren` creates less deletes), so throughput (tasks leaving `tasks/` per
//! minute: completed, dead-lettered, cancelled, or set to wait) costs nothing extra. The last
//! hour of samples is kept in memory for the chart (lost on restart); the same figures are the
//! gauges and counters of `/metrics`.
//!
//! Admin actions: the token is kept as its SHA-256 digest and compared without early exit; a
//! sign-in makes a random session id (two version-4 UUIDs) and a random CSRF token, kept in
//! memory for 12 hours (a restart signs everyone out). A change must be a POST with the session
//! cookie (`HttpOnly`, `SameSite=Strict`), the session's CSRF token in the form, and an `Origin`
//! naming the dashboard's own host (or no `Origin` and no cross-site `Sec-Fetch-Site`: a script);
//! redrive and purge go through a confirmation page first. A wrong token waits a second before
//! its answer, and at most 10 wrong tokens a minute are taken across every connection: a sign-in
//! takes a place in that count before its token is compared (a right one gives it back), so a
//! burst sent at once is not all compared; past the limit the answer is 429 with `Retry-After`
//! and the token, right or not, is not looked at. Read-only mode registers none of these routes.
//!
//! Around every route (`dashboard/guard.rs`): a request must name the dashboard as its host, in
//! `Host` and in the authority of an absolute request line: the address it is bound to,
//! `localhost:<port>` when that is loopback (on `0.0.0.0` or `[::]`, the loopback addresses too),
//! and each `--public-name` (`HOST` or `HOST:PORT`, case aside, as a proxy in front passes `Host`
//! on). Anything else gets 421 Misdirected Request before a route runs, so nothing is read or
//! changed: this is what stops DNS rebinding, where a page whose name is pointed at our address
//! is same-origin with us for the browser, and its `Origin` matches its `Host`. Every answer,
//! refusals and 404s included, carries `X-Frame-Options: DENY` and a `Content-Security-Policy`
//! with `frame-ancestors 'none'`, so no other site can frame the admin forms.

mod access;
mod attempts;
mod chart;
mod dead_pages;
mod form;
mod guard;
mod history;
mod overview;
mod sampler;
mod shell;
mod signin;
mod task_page;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::session::Session;
use access::Access;
use attempts::Attempts;
use guard::Hosts;
pub use guard::public_name;
use history::History;

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The address to serve on.
    pub listen: SocketAddr,
    /// Redrive and purge from the page (behind `DASHBOARD_TOKEN`).
    pub admin: bool,
    /// How often the figures are sampled for the chart and `/metrics` (more than zero).
    pub sample_every: Duration,
    /// Names the dashboard answers to besides its own address (`HOST` or `HOST:PORT`, as
    /// [`public_name`] reads them): what a proxy in front of it passes on as `Host`.
    pub public_names: Vec<String>,
}

/// What the chart covers.
pub const SPAN: Duration = Duration::from_secs(3600);

/// What every handler shares.
struct Dashboard {
    session: Arc<Session>,
    access: Access,
    history: Mutex<History>,
    metrics: PrometheusHandle,
    /// The wrong tokens of the last minute, across every connection.
    attempts: Attempts,
}

type Shared = Arc<Dashboard>;

/// A dashboard bound to its address, not serving yet: what [`Server::run`] serves.
pub struct Server {
    listener: TcpListener,
    address: SocketAddr,
    access: Access,
    metrics: PrometheusHandle,
    hosts: Hosts,
    sample_every: Duration,
}

impl Server {
    /// Checks the options and the mode, installs the metrics recorder and binds the address.
    /// Connects to nothing: a dashboard that cannot start says so before ZooKeeper is asked.
    ///
    /// # Notable errors
    /// - [`Error::Dashboard`] when `--admin` has no token and no opt-out, when the sample
    ///   period is zero or a public name is not one, when the address cannot be bound, or
    ///   when another metrics recorder is installed.
    pub async fn bind(options: Options, config: &Config) -> Result<Server> {
        let refuse = |problem: String| Error::Dashboard {
            listen: options.listen.to_string(),
            problem,
        };
        if options.sample_every.is_zero() {
            return Err(refuse(
                "give --sample-every more than zero, e.g. 10s".into(),
            ));
        }
        let public_names = (options.public_names.iter())
            .map(|name| public_name(name))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(refuse)?;
        let access = Access::new(options.admin, config).map_err(refuse)?;
        let metrics = sampler::install_recorder().map_err(refuse)?;
        let listener = TcpListener::bind(options.listen).await.map_err(|e| {
            refuse(format!(
                "cannot listen ({e}): pass another --listen address"
            ))
        })?;
        let address = listener.local_addr().map_err(|e| refuse(e.to_string()))?;
        Ok(Server {
            listener,
            address,
            access,
            metrics,
            hosts: Hosts::new(address, &public_names),
            sample_every: options.sample_every,
        })
    }

    /// The address bound (its port chosen by the system when asked for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The mode's name: read-only, or how admins get in.
    pub fn mode(&self) -> &'static str {
        self.access.mode()
    }

    /// Serves the dashboard until `stop` turns true.
    ///
    /// # Notable errors
    /// - [`Error::Dashboard`] when serving fails.
    pub async fn run(
        self,
        session: Session,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let address = self.address;
        tracing::info!(listen = %address, mode = self.access.mode(), hosts = ?self.hosts, root = %session.config().root, "dashboard serving");
        let shared = Arc::new(Dashboard {
            session: Arc::new(session),
            access: self.access,
            history: Mutex::new(History::new(SPAN.as_millis() as i64)),
            metrics: self.metrics,
            attempts: Attempts::default(),
        });
        let sampling = tokio::spawn(sampler::run(shared.clone(), self.sample_every));
        let served = axum::serve(self.listener, router(shared, self.hosts))
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            })
            .await;
        sampling.abort();
        served.map_err(|e| Error::Dashboard {
            listen: address.to_string(),
            problem: e.to_string(),
        })
    }
}

/// The routes, inside the guard: the host check first, the framing ban on every answer.
fn router(shared: Shared, hosts: Hosts) -> Router {
    let mut router = Router::new()
        .route("/", get(overview::page))
        .route("/dead", get(dead_pages::list))
        .route("/dead/{name}", get(dead_pages::show))
        .route("/task", get(task_page::show))
        .route("/metrics", get(metrics))
        .route("/assets/dashboard.css", get(css));
    if shared.access.is_admin() {
        router = router
            .route("/login", get(signin::form).post(signin::sign_in))
            .route("/logout", post(signin::sign_out))
            .route("/dead/confirm", post(dead_pages::confirm))
            .route("/dead/act", post(dead_pages::act));
    }
    router
        .layer(middleware::from_fn_with_state(Arc::new(hosts), guard::host))
        .layer(middleware::map_response(guard::no_framing))
        .with_state(shared)
}

async fn metrics(axum::extract::State(shared): axum::extract::State<Shared>) -> Response {
    let text = shared.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

async fn css() -> Response {
    let headers = [
        (header::CONTENT_TYPE, "text/css; charset=utf-8"),
        (header::CACHE_CONTROL, "max-age=3600"),
    ];
    (headers, shell::CSS).into_response()
}

/// A page that could not be drawn because ZooKeeper failed: 503, with the error.
fn unavailable(shared: &Dashboard, headers: &HeaderMap, error: &Error) -> Response {
    tracing::warn!(error = %error, "dashboard page failed");
    let viewer = shared.access.viewer(headers);
    let page = shell::message(
        "ZooKeeper did not answer",
        &viewer,
        &error.to_string(),
        true,
    );
    (StatusCode::SERVICE_UNAVAILABLE, page).into_response()
}
