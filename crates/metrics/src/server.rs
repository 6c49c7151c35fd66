//! `GET /metrics` over HTTP: an axum router on tokio, served either on the
//! caller's runtime ([`serve`]) or on a small thread of its own
//! ([`MetricsServer`], for daemons whose data path runs on compio).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Produces one scrape's text (Prometheus text format).
pub type Render = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// Wraps an async closure as a [`Render`].
pub fn render_fn<F, Fut>(f: F) -> Render
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + Send + 'static,
{
    Arc::new(move || Box::pin(f()))
}

/// The one route: `GET /metrics` answers with `render`'s text (merge it
/// into a bigger router as it is).
pub fn router(render: Render) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move { ([(CONTENT_TYPE, crate::CONTENT_TYPE)], render().await) }
        }),
    )
}

/// Binds `addr` (port 0: a free port) on the current tokio runtime.
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `render` on `listener` until the future is dropped.
pub async fn serve(listener: TcpListener, render: Render) -> io::Result<()> {
    axum::serve(listener, router(render)).await
}

/// A `/metrics` listener on a thread of its own with a one-thread tokio
/// runtime; other control-plane tasks may run there too ([`Self::runtime`]).
/// Dropping it stops the thread.
pub struct MetricsServer {
    addr: SocketAddr,
    runtime: tokio::runtime::Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `addr` and serves `render` there from a new thread.
    pub fn start(addr: SocketAddr, render: Render) -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = rt.block_on(bind(addr))?;
        let addr = listener.local_addr()?;
        let runtime = rt.handle().clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    let server =
                        axum::serve(listener, router(render)).with_graceful_shutdown(async move {
                            let _ = stop_rx.await;
                        });
                    if let Err(e) = server.await {
                        tracing::warn!("metrics listener: {e}");
                    }
                });
            })?;
        Ok(Self {
            addr,
            runtime,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The address listened on (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The thread's runtime, to run other small tasks on (they run while
    /// the server does).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Stops serving and joins the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Parses a `--metrics` value: `off` (`None`) or an address.
pub fn parse_metrics_addr(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("{s:?} is not an address (IP:PORT, port 0 for a free one) or `off`"))
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn serves_metrics_over_http() {
        let server = MetricsServer::start(
            "127.0.0.1:0".parse().unwrap(),
            render_fn(|| async { "pontoon_x 1\n".to_string() }),
        )
        .unwrap();
        let mut s = std::net::TcpStream::connect(server.local_addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
        assert!(body.contains("text/plain; version=0.0.4"), "{body}");
        assert!(body.ends_with("pontoon_x 1\n"), "{body}");
        server.stop();
        assert_eq!(parse_metrics_addr("off"), Ok(None));
        assert!(parse_metrics_addr("127.0.0.1:0").unwrap().is_some());
        assert!(parse_metrics_addr("nope").is_err());
    }
}
