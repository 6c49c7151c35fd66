//! The manager's HTTP server: the REST API under `/api/v1/` ([`api`]),
//! its OpenAPI description ([`openapi`]), and the place where the other
//! HTTP parts of the manager (`/metrics`, the dashboard at `/`) are merged
//! in ([`router`]).
//!
//! Every manager serves it, the active one and the standbys alike: reads
//! come from etcd, and admin operations go through the same [`MapStore`]
//! calls as the CLI (see [`crate::admin`]), which any process may make.
//!
//! # Token
//!
//! Every `/api/` request but the OpenAPI description needs
//! `Authorization: Bearer TOKEN`; a missing or wrong token gets 401. The
//! token lives in etcd (`config/api_token`, see
//! [`MapStore::ensure_api_token`]): the first manager to start creates a
//! random one (32 bytes, hex) and every later one uses it. `pontoon up`
//! writes it to `DIR/cluster.toml` as `api_token`; `pontoon api token`
//! prints it.
//!
//! An entity of the cluster ([`pontoon_cluster::auth`]) may instead send
//! `Authorization: Bearer ENTITY:KEY` (its name and its base64 key, as its
//! keyring holds them; a key in a rotation's grace period works too). Its
//! caps decide: `GET`/`HEAD` need cluster-wide read (`allow r`, `allow rw`,
//! `allow *`, a profile), anything else needs admin (`allow *`, `allow
//! profile mgr`); otherwise 403. The map is read per such request (no
//! cache), so a removed entity or a finished rotation takes effect at once.
//!
//! # Errors
//!
//! Errors are JSON, `{"error": "message"}`, with a fitting status: 400 for
//! a body that is not valid JSON or a request that can never succeed as
//! given, 401 without the token, 404 for an unknown pool, volume, OSD, PG
//! or endpoint, 405 for a method an endpoint lacks, 409 when the name is
//! taken or the object is in use, 413 for a change larger than etcd takes
//! in one transaction (a pool of too many PGs for its limits), 503 when
//! etcd cannot be reached.

pub mod api;
pub mod api_history;
pub mod openapi;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use pontoon_cluster::{ClusterError, MapStore};
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Random bytes in a new API token (hex-encoded: 64 characters).
pub const TOKEN_BYTES: usize = 32;
/// How long in-flight requests may run on after a stop.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What every handler can reach.
pub struct ApiState {
    /// The cluster map in etcd.
    pub store: MapStore,
    /// The token `/api/` requests must carry.
    pub token: String,
    /// This manager's name (its candidate name in the election).
    pub name: String,
}

/// The state, shared by every request.
pub type Shared = Arc<ApiState>;

impl ApiState {
    /// The state of manager `name`'s server for `store`'s cluster,
    /// checking `token`.
    pub fn new(store: MapStore, token: String, name: String) -> Shared {
        Arc::new(Self { store, token, name })
    }
}

/// A new random API token: [`TOKEN_BYTES`] bytes from the OS's generator,
/// in hex.
pub fn new_token() -> String {
    let bytes: [u8; TOKEN_BYTES] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cluster's API token, created (randomly) if it has none yet.
pub async fn ensure_token(store: &MapStore) -> Result<String, ClusterError> {
    store.ensure_api_token(&new_token()).await
}

/// The whole HTTP service of the manager.
///
/// The REST API's routes sit behind the token check; anything merged
/// below them is outside it. Other parts of the manager add their own
/// routers (state already applied, i.e. `Router<()>`) at the merge point:
/// `/metrics` (Prometheus scrapes without a token) and the dashboard's
/// static files at `/`. At most one merged router may set a fallback.
pub fn router(state: Shared) -> Router {
    let mut protected = Router::new();
    let mut public = Router::new();
    for route in routes() {
        if route.public {
            public = public.route(route.path, route.handler);
        } else {
            protected = protected.route(route.path, route.handler);
        }
    }
    let protected = protected
        // Any other path under /api/ is a JSON 404 (after the token check).
        .route("/api/{*rest}", axum::routing::any(no_such_endpoint))
        .method_not_allowed_fallback(method_not_allowed)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let public = public.method_not_allowed_fallback(method_not_allowed);
    let api: Router = protected.merge(public).with_state(state);
    // Merge point for the manager's other HTTP parts (public, no token):
    //     api.merge(crate::metrics::router(...)).merge(crate::dashboard::router(...))
    api.merge(crate::dashboard::router())
}

/// Every endpoint of the REST API (the OpenAPI description must name
/// each of them, and only them: a test checks).
pub fn routes() -> Vec<api::Route> {
    api::routes()
        .into_iter()
        .chain(api_history::routes())
        .collect()
}

/// A running HTTP server.
pub struct Server {
    /// The address it listens on (the port chosen when asked for port 0).
    pub addr: SocketAddr,
    /// The cluster's API token.
    pub token: String,
    /// The serving task; it ends after `stop` turns true.
    pub task: JoinHandle<std::io::Result<()>>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("cannot listen on {addr} for HTTP: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token could not be read or created.
    #[error("cannot get the API token: {0}")]
    Token(#[from] ClusterError),
}

/// Binds `addr` (port 0: a free port), gets the cluster's token (creating
/// it if needed) and serves [`router`] for manager `name` in a task until
/// `stop` turns true.
pub async fn start(
    addr: SocketAddr,
    store: MapStore,
    name: &str,
    stop: watch::Receiver<bool>,
) -> Result<Server, StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let token = ensure_token(&store).await?;
    let state = ApiState::new(store, token.clone(), name.to_string());
    let task = tokio::spawn(serve(listener, state, stop));
    Ok(Server { addr, token, task })
}

/// Serves [`router`] on `listener` until `stop` turns true (or its sender
/// is dropped); requests in flight then get [`STOP_GRACE`] to finish.
pub async fn serve(
    listener: TcpListener,
    state: Shared,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut stop2 = stop.clone();
    let server = axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = stop2.wait_for(|s| *s).await;
        })
        .into_future();
    tokio::select! {
        r = server => r,
        _ = async {
            let _ = stop.wait_for(|s| *s).await;
            tokio::time::sleep(STOP_GRACE).await;
        } => Ok(()),
    }
}

/// An error answer: `{"error": message}` with `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
}

impl ApiError {
    /// An error with `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// 400: the request can never succeed as given.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

impl From<ClusterError> for ApiError {
    fn from(e: ClusterError) -> Self {
        let status = match &e {
            ClusterError::NotFound { .. } => StatusCode::NOT_FOUND,
            ClusterError::AlreadyExists { .. } | ClusterError::InUse { .. } => StatusCode::CONFLICT,
            ClusterError::InvalidArgument(_)
            | ClusterError::PgMap(pontoon_cluster::PgMapError::Placement(_)) => {
                StatusCode::BAD_REQUEST
            }
            // More than etcd takes in one transaction (a pool of very
            // many PGs): the request must shrink, or etcd's limits grow.
            ClusterError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ClusterError::Etcd { .. }
            | ClusterError::Unavailable(_)
            | ClusterError::Conflict { .. }
            | ClusterError::NotLeader => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message });
        let mut resp = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// A JSON request body, parsed whatever its Content-Type says (so `curl
/// -d` works as typed); a body that does not parse as `T` is a 400 with
/// the parser's message.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::new(e.status(), e.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(
                "the request needs a JSON body (see /api/v1/openapi.json)",
            ));
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
        // serde takes a struct from an array too; a body is an object.
        if !value.is_object() {
            return Err(ApiError::bad_request(
                "invalid JSON body: expected an object",
            ));
        }
        T::deserialize(value)
            .map(JsonBody)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Lets `/api/` requests through only with the cluster's token.
async fn require_token(State(state): State<Shared>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    match given {
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing API token: send `Authorization: Bearer TOKEN` \
             (`pontoon api token` prints it; `pontoon up` writes it to cluster.toml)",
        )
        .into_response(),
        Some(v) => {
            let token = v
                .strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .map(str::trim);
            if token.is_some_and(|t| same(t.as_bytes(), state.token.as_bytes())) {
                next.run(req).await
            } else if let Some((entity, key)) = token.and_then(|t| t.split_once(':')) {
                match entity_allowed(&state, entity, key, req.method()).await {
                    Ok(()) => next.run(req).await,
                    Err(e) => e.into_response(),
                }
            } else {
                ApiError::new(StatusCode::UNAUTHORIZED, "wrong API token").into_response()
            }
        }
    }
}

/// Checks a `Bearer ENTITY:KEY` token against the map: the key must be
/// one the entity may use now, and its caps must allow the method (reads:
/// cluster-wide read; anything else: admin).
async fn entity_allowed(
    state: &ApiState,
    entity: &str,
    key: &str,
    method: &Method,
) -> Result<(), ApiError> {
    use pontoon_cluster::auth::{AuthKey, EntityName, Op};
    let wrong = || ApiError::new(StatusCode::UNAUTHORIZED, "wrong API token");
    let name = EntityName::parse(entity).map_err(|_| wrong())?;
    let key = AuthKey::from_base64(key).map_err(|_| wrong())?;
    let map = state.store.load().await?;
    let creds = map
        .credentials(&name, pontoon_cluster::auth::now_unix())
        .ok_or_else(wrong)?;
    if creds.accepts(key.as_bytes()).is_none() {
        return Err(wrong());
    }
    let op = if *method == Method::GET || *method == Method::HEAD {
        Op::Read
    } else {
        Op::Admin
    };
    if creds.caps.allows(op, None, None) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "{name} may not {} (caps: {:?})",
                if op == Op::Read {
                    "read the cluster"
                } else {
                    "change the cluster"
                },
                creds.caps.to_string()
            ),
        ))
    }
}

/// Compares in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn no_such_endpoint(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!(
        "no such endpoint: {method} {} (see /api/v1/openapi.json)",
        uri.path()
    ))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} does not take {method} (see /api/v1/openapi.json)",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests;
