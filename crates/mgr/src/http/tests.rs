//! The router against a real etcd (no OSDs): tokens, errors, admin
//! operations; and the OpenAPI description against the route list.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use pontoon_cluster::MapStore;
use pontoon_cluster::testkit::EtcdServer;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

#[test]
fn openapi_names_every_route_and_nothing_else() {
    let mut served: Vec<(String, String)> = routes()
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    served.sort();
    let described = openapi::operations(openapi::spec());
    let missing: Vec<_> = served.iter().filter(|r| !described.contains(r)).collect();
    let extra: Vec<_> = described.iter().filter(|d| !served.contains(d)).collect();
    assert!(
        missing.is_empty(),
        "routes not in openapi.json: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "openapi.json names no such route: {extra:?}"
    );
    // Only the description itself is public.
    let public: Vec<&str> = routes()
        .iter()
        .filter(|r| r.public)
        .map(|r| r.path)
        .collect();
    assert_eq!(public, [openapi::PATH]);
}

#[test]
fn every_openapi_reference_resolves() {
    fn walk(v: &Value, root: &Value, bad: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    let target = r
                        .strip_prefix("#")
                        .and_then(|p| root.pointer(p))
                        .filter(|t| !t.is_null());
                    if target.is_none() {
                        bad.push(r.clone());
                    }
                }
                m.values().for_each(|x| walk(x, root, bad));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, root, bad)),
            _ => {}
        }
    }
    let spec = openapi::spec();
    let mut bad = Vec::new();
    walk(spec, spec, &mut bad);
    assert!(bad.is_empty(), "unresolved $refs: {bad:?}");
    assert_eq!(spec["openapi"], "3.0.3");
    assert_eq!(spec["info"]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn tokens_are_64_hex_digits_and_differ() {
    let (a, b) = (new_token(), new_token());
    assert_eq!(a.len(), 2 * TOKEN_BYTES);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    assert_ne!(a, b);
    assert!(same(b"abc", b"abc"));
    assert!(!same(b"abc", b"abd"));
    assert!(!same(b"abc", b"abcd"));
}

/// A router on a fresh etcd, and its token.
struct Api {
    router: Router,
    token: String,
    _etcd: EtcdServer,
}

impl Api {
    async fn new() -> Self {
        let etcd = EtcdServer::start().expect("start etcd (scripts/deps.sh installs it)");
        let store = MapStore::connect(&etcd.endpoints(), "rest")
            .await
            .expect("connect");
        let token = ensure_token(&store).await.expect("token");
        // A second manager gets the same token.
        assert_eq!(ensure_token(&store).await.unwrap(), token);
        assert_eq!(store.api_token().await.unwrap().as_deref(), Some(&*token));
        Self {
            router: router(ApiState::new(store, token.clone(), "m1".into())),
            token,
            _etcd: etcd,
        }
    }

    /// Sends a request with `auth` as the Authorization header (if any);
    /// returns the status and the body (JSON, or null when empty).
    async fn send_as(
        &self,
        method: &str,
        uri: &str,
        auth: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(a) = auth {
            req = req.header(header::AUTHORIZATION, a);
        }
        let req = req
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let is_json = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("application/json"));
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap();
        if bytes.is_empty() {
            return (status, Value::Null);
        }
        assert!(is_json, "{method} {uri}: not JSON: {bytes:?}");
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn send(&self, method: &str, uri: &str, body: Option<&str>) -> (StatusCode, Value) {
        let auth = format!("Bearer {}", self.token);
        self.send_as(method, uri, Some(&auth), body).await
    }

    /// A request that must fail with `status`; returns the error message.
    async fn fails(&self, method: &str, uri: &str, body: Option<&str>, status: u16) -> String {
        let (got, v) = self.send(method, uri, body).await;
        assert_eq!(got.as_u16(), status, "{method} {uri} {body:?}: {v}");
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {uri}: no error message: {v}"))
            .to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_checks_tokens_and_answers_errors_as_json() {
    let api = Api::new().await;
    // No token, a wrong one, a malformed header: 401 with a JSON message.
    for auth in [
        None,
        Some("Bearer nope"),
        Some("Basic abc"),
        Some(api.token.as_str()),
    ] {
        let (status, v) = api.send_as("GET", "/api/v1/status", auth, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
    }
    let (status, _) = api
        .send_as("DELETE", "/api/v1/volumes/x", Some("Bearer nope"), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Unknown paths under /api/ need the token too, then are a JSON 404.
    let (status, _) = api.send_as("GET", "/api/v2/x", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let e = api.fails("GET", "/api/v2/x", None, 404).await;
    assert!(e.contains("no such endpoint: GET /api/v2/x"), "{e}");
    let e = api.fails("PUT", "/api/v1/volumes", None, 405).await;
    assert!(e.contains("does not take PUT"), "{e}");
    // The description is public.
    let (status, spec) = api.send_as("GET", openapi::PATH, None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(spec["openapi"], "3.0.3");

    let (status, s) = api.send("GET", "/api/v1/status", None).await;
    assert_eq!(status, StatusCode::OK, "{s}");
    assert_eq!(s["cluster"], "rest");
    assert_eq!(s["osds"]["total"], 0);
    let (_, osds) = api.send("GET", "/api/v1/osds", None).await;
    assert_eq!(osds, json!({"total": 0, "up": 0, "in": 0, "list": []}));
    let (_, df) = api.send("GET", "/api/v1/df", None).await;
    assert_eq!(df["raw"]["size_bytes"], 0, "{df}");
    assert!(df["full_ratios"]["full"].is_number(), "{df}");
    let e = api.fails("GET", "/api/v1/osds/7", None, 404).await;
    assert_eq!(e, "osd osd.7 not found");
    let e = api.fails("POST", "/api/v1/osds/seven/out", None, 400).await;
    assert!(e.contains("not an OSD id"), "{e}");
    let e = api.fails("POST", "/api/v1/osds/osd.7/in", None, 404).await;
    assert!(e.contains("not found"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_and_volumes_are_created_resized_and_removed() {
    let api = Api::new().await;
    // Bad bodies: 400 with the parser's message.
    let e = api.fails("POST", "/api/v1/pools", Some("{nope"), 400).await;
    assert!(
        e.starts_with("invalid JSON body: key must be a string"),
        "{e}"
    );
    let e = api.fails("POST", "/api/v1/pools", None, 400).await;
    assert!(e.contains("needs a JSON body"), "{e}");
    let e = api
        .fails("POST", "/api/v1/pools", Some(r#"{"name":"p"}"#), 400)
        .await;
    assert!(e.contains("missing field `size`"), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":1,"sise":2}"#),
            400,
        )
        .await;
    assert!(e.contains("unknown field `sise`"), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":"3"}"#),
            400,
        )
        .await;
    assert!(
        e.contains("invalid type: string \"3\", expected u32"),
        "{e}"
    );
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":1,"failure_domain":"rack"}"#),
            400,
        )
        .await;
    assert!(e.contains("unknown failure domain \"rack\""), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":2,"min_size":3}"#),
            400,
        )
        .await;
    assert!(e.contains("min_size 3"), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"bad/name","size":1}"#),
            400,
        )
        .await;
    assert!(e.contains("invalid argument"), "{e}");
    // No pool yet: a volume needs one.
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"v","size":"1G"}"#),
            400,
        )
        .await;
    assert!(e.contains("there is no pool"), "{e}");

    let (status, p) = api
        .send(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":1,"pgs":8}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{p}");
    assert_eq!(
        p,
        json!({"id": 0, "name": "p", "size": 1, "min_size": 1, "pgs": 8,
               "failure_domain": "osd", "volumes": 0})
    );
    let e = api
        .fails(
            "POST",
            "/api/v1/pools",
            Some(r#"{"name":"p","size":1}"#),
            409,
        )
        .await;
    assert_eq!(e, "pool p already exists");
    let (_, pools) = api.send("GET", "/api/v1/pools", None).await;
    assert_eq!(pools, json!([p]));
    let (_, one) = api.send("GET", "/api/v1/pools/p", None).await;
    assert_eq!(one, p);
    api.fails("GET", "/api/v1/pools/q", None, 404).await;

    // Volumes: sizes as the CLI takes them, or bytes.
    let (status, v) = api
        .send(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"v","size":"1G"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["size_bytes"], 1u64 << 30);
    assert_eq!(v["pool"], "p");
    assert_eq!(v["max_objects"], 256);
    assert_eq!(v["used_bytes"], 0);
    let (status, w) = api
        .send(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"w","size":8388608,"pool":"p"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{w}");
    assert_eq!(w["size"], "8.00 MiB");
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"x","size":"12XB"}"#),
            400,
        )
        .await;
    assert!(e.contains("invalid volume size \"12XB\""), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"x","size":4097}"#),
            400,
        )
        .await;
    assert!(e.contains("multiple of 4096"), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"x","size":-1}"#),
            400,
        )
        .await;
    assert!(e.contains("invalid volume size -1"), "{e}");
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"x","size":"1G","pool":"nope"}"#),
            404,
        )
        .await;
    assert_eq!(e, "pool nope not found");
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes",
            Some(r#"{"name":"v","size":"1G"}"#),
            409,
        )
        .await;
    assert_eq!(e, "volume v already exists");
    let (_, vols) = api.send("GET", "/api/v1/volumes", None).await;
    assert_eq!(vols, json!([v, w]));
    let (_, one) = api.send("GET", "/api/v1/volumes/v", None).await;
    assert_eq!(one, v);
    let e = api.fails("GET", "/api/v1/volumes/nope", None, 404).await;
    assert_eq!(e, "volume nope not found");

    // Resize: grow only.
    let e = api
        .fails(
            "POST",
            "/api/v1/volumes/v/resize",
            Some(r#"{"size":"512M"}"#),
            400,
        )
        .await;
    assert!(e.contains("shrinking it to 512.00 MiB"), "{e}");
    let (status, r) = api
        .send("POST", "/api/v1/volumes/v/resize", Some(r#"{"size":"2G"}"#))
        .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["size_bytes"], 2u64 << 30);
    api.fails(
        "POST",
        "/api/v1/volumes/nope/resize",
        Some(r#"{"size":"2G"}"#),
        404,
    )
    .await;
    api.fails("POST", "/api/v1/volumes/v/resize", Some("[]"), 400)
        .await;

    // PGs, scrubs, settings.
    let (_, pgs) = api.send("GET", "/api/v1/pgs?pool=p", None).await;
    assert_eq!(pgs.as_array().unwrap().len(), 8, "{pgs}");
    assert_eq!(pgs[0]["pgid"], "0.0");
    assert_eq!(pgs[0]["state"], "inactive", "no OSDs: {pgs}");
    let (_, pg) = api.send("GET", "/api/v1/pgs/0.7", None).await;
    assert_eq!(pg["pgid"], "0.7");
    api.fails("GET", "/api/v1/pgs/0.8", None, 404).await;
    api.fails("GET", "/api/v1/pgs/one", None, 400).await;
    api.fails("GET", "/api/v1/pgs?pool=nope", None, 404).await;
    let e = api.fails("GET", "/api/v1/pgs?colour=red", None, 400).await;
    assert!(e.contains("unknown field `colour`"), "{e}");
    let (status, r) = api.send("POST", "/api/v1/pgs/0.3/deep-scrub", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["pgs"], json!(["0.3"]));
    assert_eq!(r["deep"], true);
    let (status, r) = api.send("POST", "/api/v1/pools/p/scrub", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["pgs"].as_array().unwrap().len(), 8);
    api.fails("POST", "/api/v1/pools/nope/deep-scrub", None, 404)
        .await;
    api.fails("POST", "/api/v1/pgs/1.0/scrub", None, 404).await;
    let (_, settings) = api.send("GET", "/api/v1/settings", None).await;
    assert_eq!(settings["full_ratios"]["full"], 0.95);
    let e = api
        .fails(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"full_ratios":{"nearfull":0.99}}"#),
            400,
        )
        .await;
    assert!(e.contains("nearfull"), "{e}");
    let (status, settings) = api
        .send(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"full_ratios":{"nearfull":0.8},"deep_scrub_interval_secs":3600}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{settings}");
    assert_eq!(settings["full_ratios"]["nearfull"], 0.8);
    assert_eq!(settings["full_ratios"]["full"], 0.95);
    assert_eq!(settings["deep_scrub_interval_secs"], 3600);
    let (status, settings) = api
        .send(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"config":{"out_after":"15m","recovery_max_active":"5"},"flags":{"noout":true}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{settings}");
    assert_eq!(settings["osd"]["out_after_secs"], 900, "{settings}");
    assert_eq!(settings["osd"]["recovery_max_active"], 5, "{settings}");
    assert_eq!(settings["osd"]["flags"], json!(["noout"]), "{settings}");
    let (status, settings) = api
        .send(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"config":{"out_after":null},"flags":{"noout":false}}"#),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{settings}");
    assert_eq!(settings["osd"]["out_after_secs"], Value::Null, "{settings}");
    assert!(settings["osd"]["flags"].is_null(), "{settings}");
    let e = api
        .fails(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"config":{"recovery_max_active":"5","bogus":"1"}}"#),
            400,
        )
        .await;
    assert!(e.contains("bogus"), "{e}");
    let e = api
        .fails(
            "PATCH",
            "/api/v1/settings",
            Some(r#"{"flags":{"nodown":true}}"#),
            400,
        )
        .await;
    assert!(e.contains("nodown"), "{e}");

    // Removal: a pool in use is a conflict; a volume twice is not found.
    let e = api.fails("DELETE", "/api/v1/pools/p", None, 409).await;
    assert!(e.contains("in use"), "{e}");
    for name in ["v", "w"] {
        let (status, body) = api
            .send("DELETE", &format!("/api/v1/volumes/{name}"), None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(body, Value::Null);
    }
    api.fails("DELETE", "/api/v1/volumes/v", None, 404).await;
    let (status, _) = api.send("DELETE", "/api/v1/pools/p", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, pools) = api.send("GET", "/api/v1/pools", None).await;
    assert_eq!(pools, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_listens_and_stops() {
    let etcd = EtcdServer::start().expect("start etcd");
    let store = MapStore::connect(&etcd.endpoints(), "srv").await.unwrap();
    let (tx, rx) = watch::channel(false);
    let server = start("127.0.0.1:0".parse().unwrap(), store.clone(), "m1", rx)
        .await
        .expect("start");
    assert_ne!(server.addr.port(), 0);
    assert_eq!(store.api_token().await.unwrap(), Some(server.token.clone()));
    // The port is taken: a second server there fails with the address.
    let (_tx2, rx2) = watch::channel(false);
    let Err(e) = start(server.addr, store, "m2", rx2).await else {
        panic!("bound a taken port");
    };
    assert!(e.to_string().contains(&server.addr.to_string()), "{e}");
    let addr = server.addr;
    let text = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /api/v1/openapi.json HTTP/1.0\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    })
    .await
    .unwrap();
    assert!(text.starts_with("HTTP/1.0 200"), "{text:.200}");
    tx.send(true).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("stops within 5 s");
    r.unwrap().unwrap();
}
