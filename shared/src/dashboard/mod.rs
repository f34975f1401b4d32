//! `event-bridge serve`: a web dashboard of the queue, with Prometheus text at `/metrics`.
//!
//! Pages are drawn on the server (maud) and served with their stylesheet from the binary; they
//! work without scripts (forms, links, a meta refresh). Every page reads ZooKeeper when it is
//! asked for, at the cost of the CLI's cheap looks ([`crate::inspect`], [`crate::stats`]);
//! a sampler records the figures every `sample_every` for the chart and for `/metrics`.
//!
//! - [`access`]: read-only, or admin behind a token, a session cookie and CSRF tokens.
//! - [`overview`]: `/`: figures, chart, leases, types, pauses, groups and schedules.
//! - [`dead_pages`]: `/dead`: dead letters by type and reason; show, redrive, purge.
//! - [`sampler`]: the figures over time, and the Prometheus gauges.
//! - [`signin`]: signing in with `DASHBOARD_TOKEN`, and out.
//! - [`history`], [`chart`], [`shell`], [`form`]: the samples, the SVG chart, what pages
//!   share, posted forms.

pub mod access;
pub mod chart;
mod dead_pages;
mod form;
pub mod history;
mod overview;
mod sampler;
mod shell;
mod signin;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::error::{Error, Result};
use crate::session::Session;
use access::Access;
use history::History;

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub listen: SocketAddr,
    /// Redrive and purge from the page (behind `DASHBOARD_TOKEN`).
    pub admin: bool,
    /// How often the figures are sampled for the chart and `/metrics`.
    pub sample_every: Duration,
}

/// What the chart covers.
pub const SPAN: Duration = Duration::from_secs(3600);

/// What every handler shares.
struct Dashboard {
    session: Arc<Session>,
    access: Access,
    history: Mutex<History>,
    metrics: PrometheusHandle,
}

type Shared = Arc<Dashboard>;

/// Serves the dashboard until `stop` turns true.
///
/// # Notable errors
/// - [`Error::Dashboard`] when `--admin` has no token and no opt-out, when the address cannot
///   be bound, or when another metrics recorder is installed.
pub async fn serve(
    session: Session,
    options: Options,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let refuse = |problem: String| Error::Dashboard {
        listen: options.listen.to_string(),
        problem,
    };
    let access = Access::new(options.admin, session.config()).map_err(refuse)?;
    let metrics = sampler::install_recorder().map_err(refuse)?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| refuse(format!("cannot listen: {e}")))?;
    let address = listener.local_addr().map_err(|e| refuse(e.to_string()))?;
    tracing::info!(listen = %address, mode = access.mode(), root = %session.config().root, "dashboard serving");
    let shared = Arc::new(Dashboard {
        session: Arc::new(session),
        access,
        history: Mutex::new(History::new(SPAN.as_millis() as i64)),
        metrics,
    });
    let sampling = tokio::spawn(sampler::run(shared.clone(), options.sample_every));
    let served = axum::serve(listener, router(shared))
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await;
    sampling.abort();
    served.map_err(|e| refuse(e.to_string()))
}

fn router(shared: Shared) -> Router {
    let mut router = Router::new()
        .route("/", get(overview::page))
        .route("/dead", get(dead_pages::list))
        .route("/dead/{name}", get(dead_pages::show))
        .route("/metrics", get(metrics))
        .route("/assets/dashboard.css", get(css));
    if shared.access.is_admin() {
        router = router
            .route("/login", get(signin::form).post(signin::sign_in))
            .route("/logout", post(signin::sign_out))
            .route("/dead/confirm", post(dead_pages::confirm))
            .route("/dead/act", post(dead_pages::act));
    }
    router.with_state(shared)
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
