//! The daemon's one HTTP listener, on loopback only: the OTLP receiver (`otlp`), which relays
//! what it accepts to the user's own collector (`forward`, `[otlp] forward_to`), Durable
//! Streams reads of local sessions (`streams`), Claude Code's HTTP hooks (`hooks`) and the web
//! view (`web`: the page, its login and its API). Every request passes `guard` (loopback
//! `Host`, no foreign `Origin`, the bearer token of `token` or the web view's cookie); bodies
//! are bounded by `[http]
//! max_body_bytes`. Where it listens is `[http] listen` (`settings`), or `--http-listen`. A
//! port in use is not fatal: the socket is the daemon's main job, so it logs why, and `stats`
//! says the listener is off.

pub mod app;
pub mod forward;
pub mod guard;
pub mod hooks;
pub mod otlp;
pub mod peer;
pub mod settings;
pub mod streams;
pub mod token;
pub mod web;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tokio::sync::watch;

use crate::agent_procs::AgentProcs;
use crate::checkpoint::Checkpoints;
use crate::component::{Component, Stopping};
use crate::config::Config;
use crate::http::app::{App, HttpStats};
use crate::http::forward::Forwarder;
use crate::http::settings::{HttpConfig, Listen, OtlpConfig};
use crate::hub::Hub;
use crate::pipeline::Pipeline;
use crate::store::Store;

/// The parts of the daemon the handlers use.
pub struct DaemonParts {
    pub pipeline: Arc<Pipeline>,
    pub store: Store,
    pub hub: Arc<Hub>,
    pub checkpoints: Arc<Checkpoints>,
    pub agents: Arc<AgentProcs>,
}

/// The running listener (a component: stopped with the daemon).
pub struct HttpListener {
    /// Where it listens, or why it does not.
    pub state: Result<SocketAddr, String>,
    pub stats: Arc<HttpStats>,
    /// Where its token is; none while the listener is off.
    token_file: Option<std::path::PathBuf>,
    /// What the handlers share; none while the listener is off.
    app: Option<Arc<App>>,
    /// Relays accepted requests to `[otlp] forward_to`; none while the listener is off.
    forward: Option<Arc<Forwarder>>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl HttpListener {
    /// A listener that does not listen, and why.
    fn off(why: String) -> Arc<HttpListener> {
        Arc::new(HttpListener {
            state: Err(why),
            stats: Arc::default(),
            token_file: None,
            app: None,
            forward: None,
            stop: watch::channel(false).0,
            task: Mutex::new(None),
        })
    }

    /// Binds and serves `config`'s address; never fails the daemon's start (see the module
    /// docs).
    pub async fn start(
        config: &HttpConfig,
        otlp: &OtlpConfig,
        data_dir: &Path,
        daemon: DaemonParts,
    ) -> Arc<HttpListener> {
        let DaemonParts {
            pipeline,
            store,
            hub,
            checkpoints,
            agents,
        } = daemon;
        let addr = match config.listen() {
            Ok(Listen::At(a)) => a,
            Ok(Listen::Off) => return HttpListener::off("off ([http] listen = \"off\")".into()),
            Err(e) => return HttpListener::off(e),
        };
        let token = match token::load_or_create(data_dir) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "the HTTP listener is off: no token");
                return HttpListener::off(format!("no token: {e}"));
            }
        };
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(%addr, error = %e, "the HTTP listener is off: cannot listen there ([http] listen, --http-listen)");
                return HttpListener::off(format!("cannot listen on {addr}: {e}"));
            }
        };
        let bound = listener.local_addr().unwrap_or(addr);
        let stats = Arc::new(HttpStats::default());
        // Checked with the configuration; a target that fails here forwards nothing.
        let forward = Forwarder::start(otlp.forward_target().ok().flatten());
        let (stop, mut stopped) = watch::channel(false);
        let app = Arc::new(App {
            pipeline,
            store,
            hub,
            checkpoints,
            token: token.clone(),
            agents,
            noted_peers: Mutex::default(),
            allowed_origins: config.allowed_origins.clone(),
            max_body_bytes: config.max_body_bytes,
            stats: stats.clone(),
            forward: forward.clone(),
            bound,
            logins: web::login::Logins::new(token.clone()),
            cookie_name: web::login::cookie_name(bound.port()),
            web: OnceLock::new(),
        });
        let router = Router::new()
            .route("/v1/logs", post(otlp::logs))
            .route("/v1/metrics", post(otlp::metrics))
            .route("/hooks/claude-code", post(hooks::claude_code))
            // Reads only: any other method is answered 405 with `Allow: GET,HEAD`.
            .route(
                "/v1/stream/{session_id}",
                get(streams::get).head(streams::head),
            )
            .route("/", get(web::assets::index))
            .route("/assets/{name}", get(web::assets::file))
            .route("/login", get(web::login_route::handler))
            .route("/api/whoami", get(web::api::whoami))
            .route("/api/sessions", get(web::api::sessions))
            .route("/api/checkpoints", get(web::api::checkpoints))
            .route("/api/checkpoints/{id}/decide", post(web::api::decide))
            .route("/api/usage", get(web::api::usage))
            .route("/api/search", get(web::api::search))
            .layer(DefaultBodyLimit::max(config.max_body_bytes))
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                guard::check,
            ))
            .with_state(app.clone());
        tracing::info!(%bound, "HTTP listener ready (web view: /; OTLP: /v1/logs, /v1/metrics; sessions: /v1/stream/<id>; hooks: /hooks/claude-code)");
        let serving_stats = stats.clone();
        let max_connections = config.max_connections;
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let listener = peer::SameUser {
                inner: listener,
                stats: serving_stats,
                slots: Arc::new(tokio::sync::Semaphore::new(max_connections)),
            };
            let service = router.into_make_service_with_connect_info::<peer::PeerAddr>();
            if let Err(e) = axum::serve(listener, service)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "the HTTP listener stopped");
            }
        });
        Arc::new(HttpListener {
            state: Ok(bound),
            stats,
            token_file: Some(token::path(data_dir)),
            app: Some(app),
            forward: Some(forward),
            stop,
            task: Mutex::new(Some(task)),
        })
    }
}

impl HttpListener {
    /// Gives the web view's API the daemon's methods, once the daemon has started.
    pub fn set_backend(&self, backend: Arc<dyn web::WebBackend>) {
        if let Some(app) = &self.app {
            let _ = app.web.set(backend);
        }
    }

    /// Where it listens and what it received, for `stats`.
    pub fn stats(&self) -> dstream_sdk::protocol::HttpStats {
        let r = std::sync::atomic::Ordering::Relaxed;
        let f = self.forward.as_deref();
        dstream_sdk::protocol::HttpStats {
            listen: self.state.as_ref().ok().map(|a| a.to_string()),
            off: self.state.as_ref().err().cloned(),
            token_file: self.token_file.as_ref().map(|p| p.display().to_string()),
            otlp_records: self.stats.otlp_records.load(r),
            otlp_metric_points: self.stats.otlp_metric_points.load(r),
            refused: self.stats.refused.load(r),
            forward_to: f.and_then(|f| f.target()),
            forwarded: f.map_or(0, |f| f.stats.forwarded.load(r)),
            forward_dropped: f.map_or(0, |f| f.stats.dropped.load(r)),
            forward_errors: f.map_or(0, |f| f.stats.errors.load(r)),
            forward_queued_bytes: f.map_or(0, |f| f.queued_bytes()),
            forward_last_error: f.and_then(|f| f.stats.last_error.lock().unwrap().clone()),
        }
    }
}

impl Component for HttpListener {
    fn name(&self) -> &'static str {
        "http"
    }

    /// `[otlp] forward_to` and its headers take effect at once; `[http]` at the next start.
    fn reconfigure(&self, config: &Config) {
        if let Some(f) = &self.forward {
            f.set_target(config.otlp.forward_target().ok().flatten());
        }
    }

    fn stop(&self) -> Stopping<'_> {
        Box::pin(async move {
            let _ = self.stop.send(true);
            if let Some(f) = &self.forward {
                f.stop();
            }
            let task = self.task.lock().unwrap().take();
            if let Some(t) = task {
                // In-flight requests finish (their events are stored) before the pipeline stops.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(5), t).await;
            }
        })
    }
}
