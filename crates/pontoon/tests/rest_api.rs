//! The manager's REST API on a real three-OSD `pontoon up` cluster, through
//! curl:
//! - `pontoon up` writes the API's address and token to cluster.toml, and
//!   `pontoon api token` prints the same token;
//! - no token or a wrong one gets 401; the OpenAPI description is public;
//! - every read endpoint answers the same JSON as the CLI's `--json`
//!   (status, health, df, du, osds, pools, volumes, PGs);
//! - admin operations (pools, volumes, resize, OSD out/in, settings,
//!   scrubs) made through the API are what the CLI then sees;
//! - bad JSON gets 400 with the parser's message, an unknown volume 404, a
//!   taken name or a pool in use 409;
//! - a standby manager (`pontoon mgr --http`) answers reads and admin
//!   operations too;
//! - every operation of the OpenAPI description is exercised;
//! - a restarted `pontoon up` keeps the token and the address.
//!
//! With PONTOON_LONG=1 and schemathesis installed (`pip install
//! schemathesis`), schemathesis also runs against the description.
//!
//! Needs etcd-server and curl.

mod common;

use common::*;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A REST client (curl) that remembers which operations it called.
struct Rest {
    base: String,
    token: String,
    called: RefCell<BTreeSet<(String, String)>>,
}

/// How a request authenticates.
#[derive(Clone, Copy)]
enum Auth<'a> {
    Token,
    None,
    Header(&'a str),
}

impl Rest {
    fn new(base: &str, token: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
            called: RefCell::default(),
        }
    }

    /// `method template` with `{...}` replaced by `args` in order; returns
    /// the status and the body (JSON; null when empty).
    fn call_as(
        &self,
        auth: Auth<'_>,
        method: &str,
        template: &str,
        args: &[&str],
        body: Option<&str>,
    ) -> (u16, Value) {
        let path = template.split_once('?').map_or(template, |(p, _)| p);
        self.called
            .borrow_mut()
            .insert((method.to_string(), path.to_string()));
        let mut url = String::new();
        let mut rest = template;
        let mut args = args.iter();
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').expect("closed {") + open;
            url.push_str(&rest[..open]);
            url.push_str(args.next().expect("an argument per {}"));
            rest = &rest[close + 1..];
        }
        url.push_str(rest);
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "30", "-X", method]).args([
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
        ]);
        let header;
        match auth {
            Auth::Token => {
                header = format!("Authorization: Bearer {}", self.token);
                cmd.args(["-H", &header]);
            }
            Auth::Header(h) => {
                cmd.args(["-H", h]);
            }
            Auth::None => {}
        }
        if let Some(b) = body {
            cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
        }
        let out = cmd
            .arg(format!("{}{url}", self.base))
            .stdin(Stdio::null())
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "curl {method} {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').expect("status line");
        let code: u16 = code.trim().parse().expect("status code");
        let v = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body)
                .unwrap_or_else(|e| panic!("{method} {url}: not JSON ({e}): {body}"))
        };
        (code, v)
    }

    /// A request with the token that must answer `status`.
    fn expect(
        &self,
        status: u16,
        method: &str,
        template: &str,
        args: &[&str],
        body: Option<&str>,
    ) -> Value {
        let (code, v) = self.call_as(Auth::Token, method, template, args, body);
        assert_eq!(code, status, "{method} {template} {args:?} {body:?}: {v}");
        v
    }

    fn get(&self, template: &str, args: &[&str]) -> Value {
        self.expect(200, "GET", template, args, None)
    }

    /// An error answer: its message.
    fn error(
        &self,
        status: u16,
        method: &str,
        template: &str,
        args: &[&str],
        body: Option<&str>,
    ) -> String {
        let v = self.expect(status, method, template, args, body);
        v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {template}: no error message: {v}"))
            .to_string()
    }
}

/// `v` without the keys the CLI adds that the API does not serve.
fn without(mut v: Value, keys: &[&str]) -> Value {
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}

/// Polls until `api()` equals `cli()` (both read the changing reports);
/// returns the last API answer.
fn same(what: &str, api: impl Fn() -> Value, cli: impl Fn() -> Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (a, c) = (api(), cli());
        if a == c {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the API and the CLI differ:\nAPI {a:#}\nCLI {c:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A value of `key = "value"` in cluster.toml.
fn cluster_toml(dir: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("cluster.toml")).ok()?;
    let prefix = format!("{key} = \"");
    text.lines().find_map(|l| {
        l.strip_prefix(&prefix)?
            .strip_suffix('"')
            .map(str::to_string)
    })
}

/// A `pontoon mgr` standby, stopped on drop.
struct Standby(Child);

impl Drop for Standby {
    fn drop(&mut self) {
        signal(self.0.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn all_clean(s: &Value) -> bool {
    s["osds"]["up"] == 3 && s["osds"]["in"] == 3 && s["pgs"]["states"]["active+clean"] == 16
}

#[test]
fn the_rest_api_answers_like_the_cli_and_admin_goes_through_it() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-rest-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let mut up = Up::start_sized(&dir, 3, "256M", &[]);
    eprintln!("cluster ready after {:?}", started.elapsed());

    // Where and how: cluster.toml (owner-only), `pontoon api token`, up's output.
    let http = cluster_toml(&dir, "http").expect("http in cluster.toml");
    let token = cluster_toml(&dir, "api_token").expect("api_token in cluster.toml");
    assert!(http.starts_with("http://127.0.0.1:"), "{http}");
    assert_eq!(token.len(), 64, "{token}");
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("cluster.toml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "cluster.toml holds the token");
    assert_eq!(ok(&dir, &["api", "token"]).trim(), token);
    let printed = std::fs::read_to_string(dir.join("up.out")).unwrap();
    assert!(printed.contains(&format!("http     {http}")), "{printed}");
    let api = Rest::new(&http, &token);

    // The token: none or a wrong one is a 401 with a JSON message.
    for auth in [
        Auth::None,
        Auth::Header("Authorization: Bearer 0000"),
        Auth::Header("Authorization: Basic cG9udG9vbjo="),
    ] {
        for (method, path) in [
            ("GET", "/api/v1/status"),
            ("POST", "/api/v1/volumes"),
            ("DELETE", "/api/v1/pools/p"),
        ] {
            let (code, v) = api.call_as(auth, method, path, &[], Some("{}"));
            assert_eq!(code, 401, "{method} {path}: {v}");
            assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
        }
    }
    let (code, spec) = api.call_as(Auth::None, "GET", "/api/v1/openapi.json", &[], None);
    assert_eq!(code, 200);
    assert_eq!(spec["openapi"], "3.0.3");

    // Pools through the API; the CLI sees them.
    let e = api.error(
        400,
        "POST",
        "/api/v1/pools",
        &[],
        Some(r#"{"name": "p", "size": 3,"#),
    );
    assert!(e.starts_with("invalid JSON body: EOF while parsing"), "{e}");
    let e = api.error(400, "POST", "/api/v1/pools", &[], Some(r#"{"name": "p"}"#));
    assert!(e.contains("missing field `size`"), "{e}");
    let p = api.expect(
        201,
        "POST",
        "/api/v1/pools",
        &[],
        Some(r#"{"name": "p", "size": 3, "pgs": 16, "failure_domain": "osd"}"#),
    );
    assert_eq!(p["min_size"], 2, "{p}");
    let e = api.error(
        409,
        "POST",
        "/api/v1/pools",
        &[],
        Some(r#"{"name": "p", "size": 1}"#),
    );
    assert!(e.contains("already exists"), "{e}");
    let pools = api.get("/api/v1/pools", &[]);
    assert_eq!(pools, json(&dir, &["pool", "ls", "--json"]));
    assert_eq!(api.get("/api/v1/pools/{name}", &["p"]), pools[0]);
    api.error(404, "GET", "/api/v1/pools/{name}", &["q"], None);

    // Volumes through the API; the CLI sees them.
    let v = api.expect(
        201,
        "POST",
        "/api/v1/volumes",
        &[],
        Some(r#"{"name": "v", "size": "64M"}"#),
    );
    assert_eq!(v["size_bytes"], 64u64 << 20, "{v}");
    assert_eq!(v["pool"], "p");
    let e = api.error(
        400,
        "POST",
        "/api/v1/volumes",
        &[],
        Some(r#"{"name": "w", "size": "12XB"}"#),
    );
    assert!(e.contains("invalid volume size \"12XB\""), "{e}");
    let e = api.error(404, "GET", "/api/v1/volumes/{name}", &["nope"], None);
    assert_eq!(e, "volume nope not found");
    let e = api.error(409, "DELETE", "/api/v1/pools/{name}", &["p"], None);
    assert!(e.contains("in use"), "{e}");
    let cli_vol = json(&dir, &["volume", "info", "v", "--json"]);
    assert_eq!(cli_vol["size_bytes"], 64u64 << 20);

    wait_status(&dir, "3 OSDs up/in and 16 PGs active+clean", all_clean);
    ok(
        &dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "8M", "--bs", "1M",
        ],
    );
    wait_json(
        &dir,
        &["du", "--json"],
        "v's data in the OSDs' reports",
        WAIT,
        |d| d[0]["used_bytes"].as_u64() >= Some(8 << 20),
    );
    eprintln!("pool clean and data written after {:?}", started.elapsed());

    // Every read answers what the CLI prints with --json.
    let status = same(
        "status",
        || api.get("/api/v1/status", &[]),
        || without(json(&dir, &["status", "--json"]), &["recovery"]),
    );
    assert_eq!(status["osds"]["up"], 3, "{status:#}");
    same(
        "health",
        || api.get("/api/v1/health", &[]),
        || json(&dir, &["health", "--json"]),
    );
    let df = same(
        "df",
        || api.get("/api/v1/df", &[]),
        || json(&dir, &["df", "--json"]),
    );
    assert!(
        df_volume(&df, "v")["used_bytes"].as_u64() > Some(0),
        "{df:#}"
    );
    same(
        "du",
        || api.get("/api/v1/du", &[]),
        || json(&dir, &["du", "--json"]),
    );
    same(
        "osds",
        || api.get("/api/v1/osds", &[]),
        || json(&dir, &["status", "--json"])["osds"].clone(),
    );
    same(
        "osd.1",
        || api.get("/api/v1/osds/{id}", &["osd.1"]),
        || json(&dir, &["status", "--json"])["osds"]["list"][1].clone(),
    );
    api.error(404, "GET", "/api/v1/osds/{id}", &["9"], None);
    let vols = same(
        "volumes",
        || api.get("/api/v1/volumes", &[]),
        || json(&dir, &["volume", "ls", "--json"]),
    );
    assert!(vols[0]["used_bytes"].as_u64() > Some(0), "{vols:#}");
    same(
        "volume v",
        || api.get("/api/v1/volumes/{name}", &["v"]),
        || json(&dir, &["volume", "info", "v", "--json"]),
    );
    let pgs = same(
        "pgs",
        || api.get("/api/v1/pgs", &[]),
        || json(&dir, &["pg", "ls", "--json"]),
    );
    assert_eq!(pgs.as_array().map(Vec::len), Some(16));
    same(
        "pgs of p",
        || api.get("/api/v1/pgs?pool=p", &[]),
        || json(&dir, &["pg", "ls", "--pool", "p", "--json"]),
    );
    let pool_id = p["id"].as_u64().expect("pool id");
    let pg_a = format!("{pool_id}.a");
    same(
        "pg a of p",
        || api.get("/api/v1/pgs/{pgid}", &[&pg_a]),
        || json(&dir, &["pg", "ls", "--json"])[10].clone(),
    );
    // The capacity history and endurance (their own tests check the
    // numbers): they answer.
    let h = api.get("/api/v1/df/history", &[]);
    assert!(h.is_object(), "{h:#}");
    let e = api.get("/api/v1/endurance", &[]);
    assert!(!e.is_null(), "{e:#}");
    eprintln!("reads compared after {:?}", started.elapsed());

    // Admin through the API; the CLI sees each change.
    let r = api.expect(
        200,
        "POST",
        "/api/v1/volumes/{name}/resize",
        &["v"],
        Some(r#"{"size": 134217728}"#),
    );
    assert_eq!(r["size"], "128.00 MiB");
    assert_eq!(
        json(&dir, &["volume", "info", "v", "--json"])["size_bytes"],
        128u64 << 20
    );
    let e = api.error(
        400,
        "POST",
        "/api/v1/volumes/{name}/resize",
        &["v"],
        Some(r#"{"size": "64M"}"#),
    );
    assert!(e.contains("shrinking"), "{e}");
    let out = api.expect(200, "POST", "/api/v1/osds/{id}/out", &["2"], None);
    assert_eq!(out, json!({"id": 2, "in": false}));
    assert_eq!(json(&dir, &["status", "--json"])["osds"]["in"], 2);
    api.expect(200, "POST", "/api/v1/osds/{id}/in", &["osd.2"], None);
    assert_eq!(json(&dir, &["status", "--json"])["osds"]["in"], 3);
    let set = api.expect(
        200,
        "PATCH",
        "/api/v1/settings",
        &[],
        Some(r#"{"full_ratios": {"nearfull": 0.8}, "deep_scrub_interval_secs": 86400}"#),
    );
    assert_eq!(set["full_ratios"]["nearfull"], 0.8);
    assert_eq!(
        json(&dir, &["df", "--json"])["full_ratios"]["nearfull"],
        0.8
    );
    assert_eq!(api.get("/api/v1/settings", &[]), set);
    api.expect(
        200,
        "PATCH",
        "/api/v1/settings",
        &[],
        Some(r#"{"full_ratios": {"nearfull": 0.85}}"#),
    );
    let e = api.error(
        400,
        "PATCH",
        "/api/v1/settings",
        &[],
        Some(r#"{"full_ratios": {"full": 2}}"#),
    );
    assert!(e.contains("full"), "{e}");
    let pg_0 = format!("{pool_id}.0");
    let s = api.expect(202, "POST", "/api/v1/pgs/{pgid}/scrub", &[&pg_0], None);
    assert_eq!(s["pgs"], json!([pg_0]));
    api.expect(
        202,
        "POST",
        "/api/v1/pgs/{pgid}/deep-scrub",
        &[&format!("{pool_id}.1")],
        None,
    );
    api.expect(202, "POST", "/api/v1/pools/{name}/scrub", &["p"], None);
    let s = api.expect(202, "POST", "/api/v1/pools/{name}/deep-scrub", &["p"], None);
    assert_eq!(s["pgs"].as_array().map(Vec::len), Some(16));
    wait_status(&dir, "all clean after out and in", all_clean);

    // A standby manager serves the same API from the same etcd.
    let port = free_port();
    let log = std::fs::File::create(dir.join("standby.log")).unwrap();
    let standby = Standby(
        Command::new(PONTOON)
            .args(["mgr", "--etcd", &up.etcd(), "--name", "rest-standby"])
            .args(etcd_flags(&dir, "mgr"))
            .args(["--http", &format!("127.0.0.1:{port}"), "--metrics", "off"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a standby manager"),
    );
    let other = Rest::new(&format!("http://127.0.0.1:{port}"), &token);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the standby did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = same(
        "status from the standby",
        || other.get("/api/v1/status", &[]),
        || without(json(&dir, &["status", "--json"]), &["recovery"]),
    );
    assert!(
        s["manager"].as_str().is_some_and(|m| m != "rest-standby"),
        "up's manager stays active: {s:#}"
    );
    same(
        "volumes from the standby",
        || other.get("/api/v1/volumes", &[]),
        || json(&dir, &["volume", "ls", "--json"]),
    );
    let (code, _) = other.call_as(Auth::None, "GET", "/api/v1/pools", &[], None);
    assert_eq!(code, 401, "the standby checks the token too");
    other.expect(
        201,
        "POST",
        "/api/v1/volumes",
        &[],
        Some(r#"{"name": "w", "size": 8388608}"#),
    );
    let names: Vec<Value> = json(&dir, &["volume", "ls", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].clone())
        .collect();
    assert_eq!(names, [json!("v"), json!("w")]);
    other.expect(204, "DELETE", "/api/v1/volumes/{name}", &["w"], None);
    drop(standby);

    // Removal; the CLI sees it.
    assert_eq!(
        api.expect(204, "DELETE", "/api/v1/volumes/{name}", &["v"], None),
        Value::Null
    );
    api.error(404, "DELETE", "/api/v1/volumes/{name}", &["v"], None);
    assert_eq!(json(&dir, &["volume", "ls", "--json"]), json!([]));
    api.expect(204, "DELETE", "/api/v1/pools/{name}", &["p"], None);
    assert_eq!(json(&dir, &["pool", "ls", "--json"]), json!([]));

    // Every operation of the description was exercised (by one client or
    // the other).
    let mut called = api.called.borrow().clone();
    called.extend(other.called.borrow().iter().cloned());
    let mut missing = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if method == "parameters" {
                continue;
            }
            let op = (method.to_ascii_uppercase(), path.clone());
            if !called.contains(&op) {
                missing.push(op);
            }
        }
    }
    assert!(missing.is_empty(), "not exercised: {missing:?}");
    if std::env::var_os("PONTOON_LONG").is_some() {
        schemathesis(&http, &token, &dir);
    }

    // A restart keeps the token and, being free, the address.
    let status = up.stop();
    assert!(status.success(), "pontoon up exited with {status}");
    let _up = Up::start_sized(&dir, 3, "256M", &[]);
    assert_eq!(cluster_toml(&dir, "api_token").as_deref(), Some(&*token));
    assert_eq!(cluster_toml(&dir, "http").as_deref(), Some(&*http));
    assert_eq!(api.get("/api/v1/status", &[])["osds"]["total"], 3);
    eprintln!("done after {:?}", started.elapsed());
}

/// Runs schemathesis (if installed) against the served description:
/// every operation, generated requests, responses checked against the
/// schemas and for server errors.
fn schemathesis(http: &str, token: &str, dir: &Path) {
    let Ok(probe) = Command::new("schemathesis").arg("--version").output() else {
        eprintln!("schemathesis is not installed: skipped (pip install schemathesis)");
        return;
    };
    eprintln!("{}", String::from_utf8_lossy(&probe.stdout).trim());
    // A pool and a volume for the generated requests to find.
    ok(dir, &["pool", "create", "st", "--size", "3", "--pgs", "8"]);
    ok(dir, &["volume", "create", "stv", "--size", "8M"]);
    let out = Command::new("schemathesis")
        .args(["run", &format!("{http}/api/v1/openapi.json")])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args([
            "--checks",
            "not_a_server_error,response_schema_conformance,negative_data_rejection,\
             status_code_conformance,content_type_conformance",
        ])
        .args(["--max-examples", "20", "--workers", "1"])
        // Its example database goes to the cluster's directory, not the source tree.
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run schemathesis");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found problems:\n{text}");
}
