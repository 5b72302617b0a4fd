//! The HTTP listener (`--httpPort`, off by default; `--httpBindIp`, loopback by
//! default): `/metrics` in Prometheus's text format (`prometheus.rs`), `/health` for
//! load balancers, and a live status page at `/` (`status.rs`). No MongoDB peer serves these; mongod's figures are its serverStatus,
//! which this listener turns into series without a monitoring agent in between.
//!
//! HTTP/1.1 through `hyper` (the tokio ecosystem's HTTP implementation) on the server's
//! own runtime: a scrape is one short request every few seconds, nothing on the path of
//! the MongoDB protocol's requests.

mod prometheus;
mod status;

/// A change stream's lag in entries is counted up to this many (a bounded scan per
/// stream and scrape; past it the figure means "at least").
pub const MAX_LAG_ENTRIES: u64 = 100_000;

use crate::state::ServerState;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Binds the listener; the caller spawns [`serve`] with it.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers HTTP requests on `listener` until the process ends.
pub async fn serve(listener: TcpListener, state: Arc<ServerState>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "HTTP accept failed");
                // The same back-off as the MongoDB listener's (out of descriptors).
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, std::convert::Infallible>(route(&state, &req)) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            // A client that breaks off mid-request ends its connection only.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

fn route(state: &ServerState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET\n".into(),
            "text/plain",
        );
    }
    match req.uri().path() {
        "/health" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/" => text(
            StatusCode::OK,
            status::PAGE.into(),
            "text/html; charset=utf-8",
        ),
        "/status.json" => text(StatusCode::OK, status::json(state), "application/json"),
        "/metrics" => text(
            StatusCode::OK,
            prometheus::render(state),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

fn text(status: StatusCode, body: String, content_type: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
