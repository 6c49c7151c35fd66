//! The REST API's endpoints. Reads answer with the same JSON as the CLI's
//! `--json` output (one definition of each view: [`crate::status`],
//! [`crate::listings`], `pontoon_cluster::space`); admin operations go
//! through [`crate::admin`] and [`MapStore`], as the CLI's do.
//!
//! [`routes`] is the one list of endpoints: the router is built from it,
//! and a test checks it against the OpenAPI description.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::handler::Handler;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use std::collections::BTreeMap;

use pontoon_cluster::osd_admin::{self, OsdFlag};
use pontoon_cluster::runtime_config::ConfigKey;
use pontoon_cluster::space::{FullRatios, space_report};
use pontoon_cluster::{ClusterError, ClusterSettings, FailureDomain, MapStore, PoolRecord};
use pontoon_types::{Epoch, OsdId, PgId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, JsonBody, Shared, openapi};
use crate::admin::{self, PoolSpec};
use crate::health::Health;
use crate::listings::{
    PgView, PoolView, VolumeView, parse_pgid, pg_views, pool_view, pool_views, volume_view,
    volume_views,
};
use crate::status::{OsdSummary, OsdView, Status};

/// How the API names the pool argument of a new volume in errors.
const POOL_FIELD: &str = "\"pool\"";

/// One endpoint.
pub struct Route {
    /// Its method.
    pub method: Method,
    /// Its path, in axum's syntax (`{name}` for a parameter), which is
    /// also OpenAPI's.
    pub path: &'static str,
    /// Served without the token (only the OpenAPI description).
    pub public: bool,
    /// The handler.
    pub handler: MethodRouter<Shared>,
}

fn route<H, T>(method: Method, path: &'static str, h: H) -> Route
where
    H: Handler<T, Shared>,
    T: 'static,
{
    let handler = match method.as_str() {
        "GET" => axum::routing::get(h),
        "POST" => axum::routing::post(h),
        "DELETE" => axum::routing::delete(h),
        "PATCH" => axum::routing::patch(h),
        other => unreachable!("no route uses {other}"),
    };
    Route {
        method,
        path,
        public: false,
        handler,
    }
}

/// Every endpoint of the REST API.
pub fn routes() -> Vec<Route> {
    use Method as M;
    vec![
        Route {
            public: true,
            ..route(M::GET, openapi::PATH, openapi::serve)
        },
        route(M::GET, "/api/v1/status", get_status),
        route(M::GET, "/api/v1/health", get_health),
        route(M::GET, "/api/v1/df", get_df),
        route(M::GET, "/api/v1/du", get_du),
        route(M::GET, "/api/v1/osds", get_osds),
        route(M::GET, "/api/v1/osds/{id}", get_osd),
        route(M::POST, "/api/v1/osds/{id}/out", osd_out),
        route(M::POST, "/api/v1/osds/{id}/in", osd_in),
        route(M::GET, "/api/v1/pools", get_pools),
        route(M::POST, "/api/v1/pools", create_pool),
        route(M::GET, "/api/v1/pools/{name}", get_pool),
        route(M::DELETE, "/api/v1/pools/{name}", remove_pool),
        route(M::POST, "/api/v1/pools/{name}/scrub", scrub_pool),
        route(M::POST, "/api/v1/pools/{name}/deep-scrub", deep_scrub_pool),
        route(M::GET, "/api/v1/volumes", get_volumes),
        route(M::POST, "/api/v1/volumes", create_volume),
        route(M::GET, "/api/v1/volumes/{name}", get_volume),
        route(M::DELETE, "/api/v1/volumes/{name}", remove_volume),
        route(M::POST, "/api/v1/volumes/{name}/resize", resize_volume),
        route(M::GET, "/api/v1/pgs", get_pgs),
        route(M::GET, "/api/v1/pgs/{pgid}", get_pg),
        route(M::POST, "/api/v1/pgs/{pgid}/scrub", scrub_pg),
        route(M::POST, "/api/v1/pgs/{pgid}/deep-scrub", deep_scrub_pg),
        route(M::GET, "/api/v1/settings", get_settings),
        route(M::PATCH, "/api/v1/settings", patch_settings),
    ]
}

type ApiResult<T> = Result<T, ApiError>;

/// The map and the OSDs' reports, read together.
async fn map_and_reports(
    store: &MapStore,
) -> Result<(pontoon_cluster::ClusterMap, Vec<pontoon_cluster::OsdReport>), ClusterError> {
    tokio::try_join!(store.load(), store.reports())
}

/// The status as `pontoon status --json` gathers it (without the
/// recovery rate, which the CLI measures over an interval).
async fn status_of(store: &MapStore) -> ApiResult<Status> {
    Ok(crate::status::load(store).await?)
}

/// `pontoon status --json`.
async fn get_status(State(s): State<Shared>) -> ApiResult<Json<Status>> {
    Ok(Json(status_of(&s.store).await?))
}

/// `pontoon health --json`.
async fn get_health(State(s): State<Shared>) -> ApiResult<Json<Health>> {
    Ok(Json(status_of(&s.store).await?.health))
}

/// `pontoon df --json`.
async fn get_df(State(s): State<Shared>) -> ApiResult<Response> {
    let (map, reports) = map_and_reports(&s.store).await?;
    Ok(Json(space_report(&map, &reports)).into_response())
}

/// `pontoon du --json`.
async fn get_du(State(s): State<Shared>) -> ApiResult<Response> {
    let (map, reports) = map_and_reports(&s.store).await?;
    Ok(Json(space_report(&map, &reports).volumes).into_response())
}

/// The `osds` part of `pontoon status --json`.
async fn get_osds(State(s): State<Shared>) -> ApiResult<Json<OsdSummary>> {
    Ok(Json(status_of(&s.store).await?.osds))
}

fn osd_id(s: &str) -> ApiResult<OsdId> {
    crate::listings::parse_osd_id(s).map_err(ApiError::bad_request)
}

/// One OSD as `status --json` lists it.
async fn get_osd(State(s): State<Shared>, Path(id): Path<String>) -> ApiResult<Json<OsdView>> {
    let id = osd_id(&id)?;
    status_of(&s.store)
        .await?
        .osds
        .list
        .into_iter()
        .find(|o| o.id == id.0)
        .map(Json)
        .ok_or_else(|| {
            ClusterError::NotFound {
                kind: "osd",
                name: id.to_string(),
            }
            .into()
        })
}

/// What `osd out|in` answer.
#[derive(Serialize)]
struct OsdInOut {
    id: u32,
    r#in: bool,
}

async fn set_in(s: &Shared, id: &str, in_cluster: bool) -> ApiResult<Json<OsdInOut>> {
    let id = osd_id(id)?;
    s.store.set_osd_in(id, in_cluster).await?;
    Ok(Json(OsdInOut {
        id: id.0,
        r#in: in_cluster,
    }))
}

/// `pontoon osd out ID`.
async fn osd_out(State(s): State<Shared>, Path(id): Path<String>) -> ApiResult<Json<OsdInOut>> {
    set_in(&s, &id, false).await
}

/// `pontoon osd in ID`.
async fn osd_in(State(s): State<Shared>, Path(id): Path<String>) -> ApiResult<Json<OsdInOut>> {
    set_in(&s, &id, true).await
}

/// `pontoon pool ls --json`.
async fn get_pools(State(s): State<Shared>) -> ApiResult<Json<Vec<PoolView>>> {
    Ok(Json(pool_views(&s.store.load().await?)))
}

fn no_pool(name: &str) -> ApiError {
    ClusterError::NotFound {
        kind: "pool",
        name: name.to_string(),
    }
    .into()
}

fn no_volume(name: &str) -> ApiError {
    ClusterError::NotFound {
        kind: "volume",
        name: name.to_string(),
    }
    .into()
}

/// One element of `pool ls --json`.
async fn get_pool(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<Json<PoolView>> {
    let map = s.store.load().await?;
    let p = map.pool_by_name(&name).ok_or_else(|| no_pool(&name))?;
    Ok(Json(pool_view(&map, p)))
}

/// The body of `POST /api/v1/pools`: `pontoon pool create`'s arguments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPool {
    name: String,
    size: u32,
    #[serde(default)]
    min_size: Option<u32>,
    #[serde(default)]
    pgs: Option<u32>,
    #[serde(default)]
    failure_domain: Option<String>,
}

/// `201 Created`, `Location: location`, `body`.
fn created(location: String, body: impl Serialize) -> Response {
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response()
}

/// `pontoon pool create`.
async fn create_pool(
    State(s): State<Shared>,
    JsonBody(p): JsonBody<NewPool>,
) -> ApiResult<Response> {
    let failure_domain = p
        .failure_domain
        .as_deref()
        .map(str::parse::<FailureDomain>)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let (pool, note): (PoolRecord, _) = admin::create_pool(
        &s.store,
        PoolSpec {
            name: p.name,
            size: p.size,
            min_size: p.min_size,
            pgs: p.pgs,
            failure_domain,
        },
    )
    .await?;
    if let Some(note) = note {
        tracing::info!(pool = %pool.name, "{note}");
    }
    let map = s.store.load().await?;
    let view = map
        .pool_by_name(&pool.name)
        .map_or_else(|| pool_view(&map, &pool), |p| pool_view(&map, p));
    Ok(created(format!("/api/v1/pools/{}", pool.name), view))
}

/// `pontoon pool rm`.
async fn remove_pool(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    s.store.remove_pool(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What a scrub request answers.
#[derive(Serialize)]
struct ScrubRequested {
    /// The PGs asked to scrub.
    pgs: Vec<String>,
    /// Deep (every block read) or light.
    deep: bool,
    /// The map epoch of the request.
    epoch: u64,
}

fn scrub_answer(pgs: Vec<PgId>, epoch: Epoch, deep: bool) -> Response {
    (
        StatusCode::ACCEPTED,
        Json(ScrubRequested {
            pgs: pgs.iter().map(ToString::to_string).collect(),
            deep,
            epoch: epoch.0,
        }),
    )
        .into_response()
}

async fn scrub_pool_req(s: &Shared, name: &str, deep: bool) -> ApiResult<Response> {
    let (pgs, epoch) = s.store.request_scrub(name, &[], deep).await?;
    Ok(scrub_answer(pgs, epoch, deep))
}

/// `pontoon pool scrub`.
async fn scrub_pool(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    scrub_pool_req(&s, &name, false).await
}

/// `pontoon pool deep-scrub`.
async fn deep_scrub_pool(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<Response> {
    scrub_pool_req(&s, &name, true).await
}

/// `pontoon volume ls --json`.
async fn get_volumes(State(s): State<Shared>) -> ApiResult<Json<Vec<VolumeView>>> {
    let (map, reports) = map_and_reports(&s.store).await?;
    Ok(Json(volume_views(&map, &space_report(&map, &reports))))
}

async fn volume_json(store: &MapStore, name: &str) -> ApiResult<VolumeView> {
    let (map, reports) = map_and_reports(store).await?;
    let v = map.volume_by_name(name).ok_or_else(|| no_volume(name))?;
    Ok(volume_view(&map, v, &space_report(&map, &reports)))
}

/// `pontoon volume info --json`.
async fn get_volume(
    State(s): State<Shared>,
    Path(name): Path<String>,
) -> ApiResult<Json<VolumeView>> {
    Ok(Json(volume_json(&s.store, &name).await?))
}

/// A size in a body: bytes (a number) or a string such as `"10G"`.
fn size_of(v: &Value) -> ApiResult<u64> {
    match v {
        Value::Number(n) => n.as_u64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "invalid volume size {n}: bytes must be a whole number"
            ))
        }),
        Value::String(s) => admin::parse_size("volume size", s).map_err(ApiError::bad_request),
        other => Err(ApiError::bad_request(format!(
            "invalid volume size {other}: expected bytes (a number) or a string such as \"10G\""
        ))),
    }
}

/// The body of `POST /api/v1/volumes`: `pontoon volume create`'s arguments.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewVolume {
    name: String,
    size: Value,
    #[serde(default)]
    pool: Option<String>,
}

/// `pontoon volume create`.
async fn create_volume(
    State(s): State<Shared>,
    JsonBody(v): JsonBody<NewVolume>,
) -> ApiResult<Response> {
    let size = size_of(&v.size)?;
    let (vol, _) =
        admin::create_volume(&s.store, &v.name, size, v.pool.as_deref(), POOL_FIELD).await?;
    let view = volume_json(&s.store, &vol.name).await?;
    Ok(created(format!("/api/v1/volumes/{}", vol.name), view))
}

/// The body of `POST /api/v1/volumes/{name}/resize`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resize {
    size: Value,
}

/// `pontoon volume resize`.
async fn resize_volume(
    State(s): State<Shared>,
    Path(name): Path<String>,
    JsonBody(r): JsonBody<Resize>,
) -> ApiResult<Json<VolumeView>> {
    let size = size_of(&r.size)?;
    admin::resize_volume(&s.store, &name, size).await?;
    Ok(Json(volume_json(&s.store, &name).await?))
}

/// `pontoon volume rm`.
async fn remove_volume(State(s): State<Shared>, Path(name): Path<String>) -> ApiResult<StatusCode> {
    s.store.remove_volume(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The query of `GET /api/v1/pgs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PgQuery {
    pool: Option<String>,
}

/// `pontoon pg ls [--pool P] --json`.
async fn get_pgs(
    State(s): State<Shared>,
    q: Result<Query<PgQuery>, QueryRejection>,
) -> ApiResult<Json<Vec<PgView>>> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (map, reports) = map_and_reports(&s.store).await?;
    if let Some(p) = &q.pool
        && map.pool_by_name(p).is_none()
    {
        return Err(no_pool(p));
    }
    Ok(Json(pg_views(&map, &reports, q.pool.as_deref())))
}

fn pg_id(s: &str) -> ApiResult<PgId> {
    parse_pgid(s).map_err(ApiError::bad_request)
}

/// One element of `pg ls --json`.
async fn get_pg(State(s): State<Shared>, Path(pgid): Path<String>) -> ApiResult<Json<PgView>> {
    let pg = pg_id(&pgid)?;
    let (map, reports) = map_and_reports(&s.store).await?;
    let name = pg.to_string();
    pg_views(&map, &reports, None)
        .into_iter()
        .find(|v| v.pgid == name)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("pg {name} not found")))
}

async fn scrub_pg_req(s: &Shared, pgid: &str, deep: bool) -> ApiResult<Response> {
    let pg = pg_id(pgid)?;
    let map = s.store.load().await?;
    let pool = map.pools.get(&pg.pool).ok_or_else(|| {
        ApiError::not_found(format!("pg {pg} not found: no pool has id {}", pg.pool.0))
    })?;
    if pg.index >= pool.pgs {
        return Err(ApiError::not_found(format!(
            "pg {pg} not found: pool {} has {} PGs",
            pool.name, pool.pgs
        )));
    }
    let (pgs, epoch) = s.store.request_scrub(&pool.name, &[pg.index], deep).await?;
    Ok(scrub_answer(pgs, epoch, deep))
}

/// `pontoon pg scrub`.
async fn scrub_pg(State(s): State<Shared>, Path(pgid): Path<String>) -> ApiResult<Response> {
    scrub_pg_req(&s, &pgid, false).await
}

/// `pontoon pg deep-scrub`.
async fn deep_scrub_pg(State(s): State<Shared>, Path(pgid): Path<String>) -> ApiResult<Response> {
    scrub_pg_req(&s, &pgid, true).await
}

/// The cluster-wide settings (full ratios, deep-scrub interval).
async fn get_settings(State(s): State<Shared>) -> ApiResult<Json<ClusterSettings>> {
    Ok(Json(s.store.load().await?.settings))
}

/// The body of `PATCH /api/v1/settings`: the fields to change.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsPatch {
    #[serde(default)]
    full_ratios: Option<RatiosPatch>,
    #[serde(default)]
    deep_scrub_interval_secs: Option<u64>,
    /// Runtime settings by their `pontoon config ls` names, as text
    /// (`pontoon config set KEY VALUE`); null returns one to its default.
    #[serde(default)]
    config: BTreeMap<String, Option<String>>,
    /// OSD flags to set (true) or unset (false): `pontoon osd set|unset`.
    #[serde(default)]
    flags: BTreeMap<String, bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RatiosPatch {
    nearfull: Option<f64>,
    backfillfull: Option<f64>,
    full: Option<f64>,
}

/// `pontoon osd set-nearfull-ratio|set-backfillfull-ratio|set-full-ratio`
/// and `pontoon pg set-deep-scrub-interval`, any of them at once.
async fn patch_settings(
    State(s): State<Shared>,
    JsonBody(p): JsonBody<SettingsPatch>,
) -> ApiResult<Json<ClusterSettings>> {
    if let Some(r) = p.full_ratios {
        s.store
            .set_full_ratios(|cur: &mut FullRatios| {
                if let Some(v) = r.nearfull {
                    cur.nearfull = v;
                }
                if let Some(v) = r.backfillfull {
                    cur.backfillfull = v;
                }
                if let Some(v) = r.full {
                    cur.full = v;
                }
            })
            .await?;
    }
    if let Some(secs) = p.deep_scrub_interval_secs {
        s.store.set_deep_scrub_interval(secs).await?;
    }
    if !p.config.is_empty() || !p.flags.is_empty() {
        let bad = |e: String| ApiError::bad_request(e);
        let config = p
            .config
            .iter()
            .map(|(k, v)| Ok((k.parse::<ConfigKey>().map_err(|e| bad(e.to_string()))?, v)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        let flags = p
            .flags
            .iter()
            .map(|(k, on)| Ok((k.parse::<OsdFlag>().map_err(bad)?, *on)))
            .collect::<Result<Vec<_>, ApiError>>()?;
        s.store
            .update::<_, ApiError>(|m| {
                let before = m.settings.clone();
                for (key, value) in &config {
                    key.apply(m, value.as_deref())
                        .map_err(|e| bad(e.to_string()))?;
                }
                for (flag, on) in &flags {
                    osd_admin::set_flag(m, *flag, *on);
                }
                Ok(m.settings != before)
            })
            .await?;
    }
    Ok(Json(s.store.load().await?.settings))
}
