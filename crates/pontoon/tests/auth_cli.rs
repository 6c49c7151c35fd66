//! Entities, keys and capabilities from the CLI, end to end on a real
//! `pontoon up` cluster: the keyrings `up` writes (0600, found through the
//! cluster directory), `pontoon auth add|ls|get|caps|rotate|rm|whoami`, the
//! errors (unknown entity, bad caps, the last admin, a wrong or missing
//! key, a non-admin identity) leaving the map unchanged, rotation with its
//! grace period, the keyring found through `PONTOON_KEYRING` and the
//! configuration file, entity tokens on the REST API, and no key in `ls`,
//! `--json` or status output.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The `key = ...` of a keyring text.
fn key_in(keyring: &str) -> String {
    keyring
        .lines()
        .find_map(|l| l.trim().strip_prefix("key = "))
        .unwrap_or_else(|| panic!("no key in {keyring:?}"))
        .to_string()
}

/// Runs `pontoon ARGS` with only the given environment added: no
/// `--cluster`, so no cluster directory to find a keyring in.
fn pontoon_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(PONTOON);
    cmd.args(args)
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .env_remove("PONTOON_KEYRING")
        .env_remove("PONTOON_NAME")
        .env("PONTOON_CONFIG", "/dev/null")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run pontoon");
    assert!(out.status.code().is_some(), "pontoon {args:?} was killed");
    out
}

/// `auth ls --json` as entity → row.
fn entities(dir: &Path) -> serde_json::Map<String, Value> {
    let v = json(dir, &["auth", "ls", "--json"]);
    v.as_array()
        .expect("an array")
        .iter()
        .map(|r| (r["entity"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

/// One HTTP/1.0 request to the manager; returns the status code.
fn http_status(http: &str, method: &str, path: &str, bearer: &str, body: &str) -> u16 {
    let addr = http.strip_prefix("http://").expect("http://ADDR");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the manager");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {bearer}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {reply:?}"))
}

#[test]
fn entities_keys_and_caps_round_trip_through_the_cli() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-auth-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let _up = Up::start(&dir, &[]);
    eprintln!("cluster ready after {:?}", started.elapsed());
    let etcd = _up.etcd();

    // `up` made a key per daemon and the admin's, in 0600 keyrings.
    let keys = dir.join("keys");
    assert_eq!(mode(&keys), 0o700);
    for e in ["client.admin", "osd.0", "mgr.up", "mgr.standby"] {
        let path = keys.join(format!("{e}.keyring"));
        assert_eq!(mode(&path), 0o600, "{e}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(&format!("[{e}]\n\tkey = ")), "{text}");
    }
    let admin_ring = keys.join("client.admin.keyring");
    let admin_key = key_in(&std::fs::read_to_string(&admin_ring).unwrap());
    assert_eq!(admin_key.len(), 44, "256 bits in base64");
    // `up` prints its summary after writing cluster.toml (what wait_ready
    // watches), once the daemons registered: wait for it, bounded.
    let deadline = Instant::now() + Duration::from_secs(15);
    let up_out = loop {
        let text = std::fs::read_to_string(dir.join("up.out")).unwrap();
        if text.contains("keys/client.admin.keyring") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(up_out.contains("keys/client.admin.keyring"), "{up_out}");

    let all = entities(&dir);
    assert_eq!(all["client.admin"]["caps"], "allow *", "{all:?}");
    assert_eq!(all["osd.0"]["caps"], "allow profile osd");
    assert_eq!(all["mgr.up"]["caps"], "allow profile mgr");
    assert_eq!(all["client.admin"]["key_generation"], 1);
    assert_eq!(all["client.admin"]["key_state"], "stable");
    let who = ok(&dir, &["auth", "whoami"]);
    assert!(
        who.contains("client.admin (keyring ")
            && who.contains("keys/client.admin.keyring")
            && who.contains("key generation 1 valid"),
        "{who}"
    );

    // add / get / get -o.
    let out = ok(
        &dir,
        &["auth", "add", "client.foo", "allow", "rw", "pool=rbd"],
    );
    assert!(out.contains("added client.foo"), "{out}");
    let got = ok(&dir, &["auth", "get", "client.foo"]);
    assert!(got.starts_with("[client.foo]\n\tkey = "), "{got}");
    assert!(got.contains("\tcaps = \"allow rw pool=rbd\"\n"), "{got}");
    let foo_key = key_in(&got);
    assert_ne!(foo_key, admin_key);
    let foo_ring = dir.join("foo.keyring");
    ok(
        &dir,
        &[
            "auth",
            "get",
            "client.foo",
            "-o",
            foo_ring.to_str().unwrap(),
        ],
    );
    assert_eq!(mode(&foo_ring), 0o600);
    assert_eq!(std::fs::read_to_string(&foo_ring).unwrap(), got);

    // Errors: one line each, exit 1, nothing changed.
    let before = entities(&dir);
    for (args, want) in [
        (
            vec!["auth", "add", "client.foo", "allow", "r"],
            "already exists",
        ),
        (
            vec!["auth", "rm", "client.nobody"],
            "client.nobody does not exist",
        ),
        (
            vec!["auth", "caps", "client.nobody", "allow", "r"],
            "does not exist",
        ),
        (vec!["auth", "get", "nobody"], "bad entity name \"nobody\""),
        (
            vec!["auth", "caps", "client.foo", "allow", "rwx", "pool=rbd"],
            "bad caps \"allow rwx pool=rbd\"",
        ),
        (
            vec!["auth", "add", "client.bar", "allow", "r", "volume=vm1"],
            "volume=POOL/vm1",
        ),
        (
            vec!["auth", "rm", "client.admin"],
            "last entity with `allow *`",
        ),
        (
            vec!["auth", "caps", "client.admin", "allow", "r"],
            "last entity with `allow *`",
        ),
        (
            vec!["auth", "rotate", "client.foo", "--finish"],
            "not rotating",
        ),
    ] {
        let e = fails(&dir, &args, 1);
        assert!(
            e.starts_with("error: ") && e.contains(want),
            "{args:?}: {e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }
    assert_eq!(entities(&dir), before, "failed commands changed nothing");

    // caps.
    let out = ok(
        &dir,
        &[
            "auth",
            "caps",
            "client.foo",
            "allow r volume=rbd/vm1, allow r pool=logs",
        ],
    );
    assert!(
        out.contains("\"allow r volume=rbd/vm1, allow r pool=logs\""),
        "{out}"
    );
    assert_eq!(
        entities(&dir)["client.foo"]["caps"],
        "allow r volume=rbd/vm1, allow r pool=logs"
    );

    // A valid key without admin caps, and a wrong key, are refused.
    let as_foo = [
        "--keyring",
        foo_ring.to_str().unwrap(),
        "--name",
        "client.foo",
    ];
    let e = fails(&dir, &[&["auth", "ls"][..], &as_foo].concat(), 1);
    assert!(e.contains("client.foo may not administer"), "{e}");
    let who = ok(&dir, &[&["auth", "whoami"][..], &as_foo].concat());
    assert!(who.contains("key generation 1 valid"), "{who}");

    // rotate: the new key is printed; the old one stays valid until --finish.
    let out = pontoon(&dir, &["auth", "rotate", "client.foo", "--grace", "10m"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new_key = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let note = String::from_utf8_lossy(&out.stderr);
    assert_eq!(new_key.len(), 44, "{new_key}");
    assert_ne!(new_key, foo_key);
    assert!(note.contains("generation 1 stays valid until"), "{note}");
    let row = &entities(&dir)["client.foo"];
    assert_eq!(row["key_generation"], 2, "{row}");
    assert_eq!(row["key_state"], "rotating", "{row}");
    assert_eq!(row["previous_generation"], 1, "{row}");
    assert_eq!(key_in(&ok(&dir, &["auth", "get", "client.foo"])), new_key);
    let who = ok(&dir, &[&["auth", "whoami"][..], &as_foo].concat());
    assert!(
        who.contains("key generation 1 valid"),
        "old key in grace: {who}"
    );
    let e = fails(&dir, &["auth", "rotate", "client.foo"], 1);
    assert!(e.contains("already rotating"), "{e}");
    let out = ok(&dir, &["auth", "rotate", "client.foo", "--finish"]);
    assert!(out.contains("only key generation 2 is valid"), "{out}");
    assert_eq!(entities(&dir)["client.foo"]["key_state"], "stable");
    let who = ok(&dir, &[&["auth", "whoami"][..], &as_foo].concat());
    assert!(who.contains("key NOT valid"), "old key after finish: {who}");

    // Rotating the admin rewrites the cluster directory's keyring.
    let out = pontoon(&dir, &["auth", "rotate", "client.admin", "--grace", "0"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let admin_key2 = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(String::from_utf8_lossy(&out.stderr).contains("revoked"));
    assert_eq!(
        key_in(&std::fs::read_to_string(&admin_ring).unwrap()),
        admin_key2
    );
    assert_eq!(mode(&admin_ring), 0o600);
    let who = ok(&dir, &["auth", "whoami"]);
    assert!(who.contains("key generation 2 valid"), "{who}");

    // Without the cluster directory: no keyring, then PONTOON_KEYRING, then
    // the configuration file's auth.keyring.
    let bare = ["auth", "ls", "--etcd", &etcd];
    // etcd's credentials (when `up` secured it) through the environment.
    let flags = etcd_flags(&dir, "mgr");
    let mut etcd_env: Vec<(String, String)> = Vec::new();
    for pair in flags.chunks(2) {
        let var = format!(
            "PONTOON_{}",
            pair[0]
                .trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        );
        etcd_env.push((var, pair[1].clone()));
    }
    let pontoon_env = |args: &[&str], extra: &[(&str, &str)]| {
        let mut env: Vec<(&str, &str)> = etcd_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        pontoon_env(args, &env)
    };
    let out = pontoon_env(&bare, &[]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("no keyring"), "{e}");
    let out = pontoon_env(&bare, &[("PONTOON_KEYRING", admin_ring.to_str().unwrap())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("client.foo"));
    let config = dir.join("pontoon.toml");
    std::fs::write(
        &config,
        format!("[auth]\nkeyring = {:?}\n", admin_ring.to_str().unwrap()),
    )
    .unwrap();
    let out = pontoon_env(&bare, &[("PONTOON_CONFIG", config.to_str().unwrap())]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let old_admin = dir.join("old-admin.keyring");
    std::fs::write(&old_admin, format!("[client.admin]\n\tkey = {admin_key}\n")).unwrap();
    let out = pontoon_env(&bare, &[("PONTOON_KEYRING", old_admin.to_str().unwrap())]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("not valid any more"), "revoked admin key: {e}");
    assert!(!e.contains(&admin_key), "{e}");

    // The REST API takes entity tokens; caps decide.
    let cluster_toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    let http = cluster_toml
        .lines()
        .find_map(|l| l.strip_prefix("http = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("http in cluster.toml");
    ok(&dir, &["auth", "caps", "client.foo", "allow r"]);
    let foo = format!("client.foo:{new_key}");
    let admin = format!("client.admin:{admin_key2}");
    let pool = r#"{"name":"rest","size":1,"pgs":8}"#;
    assert_eq!(http_status(http, "GET", "/api/v1/pools", &foo, ""), 200);
    assert_eq!(http_status(http, "POST", "/api/v1/pools", &foo, pool), 403);
    let stale = format!("client.foo:{foo_key}");
    assert_eq!(http_status(http, "GET", "/api/v1/pools", &stale, ""), 401);
    assert_eq!(
        http_status(http, "POST", "/api/v1/pools", &admin, pool),
        201
    );

    // rm; and no key anywhere in listings or status.
    let out = ok(&dir, &["auth", "rm", "client.foo"]);
    assert!(out.contains("removed client.foo"), "{out}");
    assert!(!entities(&dir).contains_key("client.foo"));
    assert_eq!(http_status(http, "GET", "/api/v1/pools", &foo, ""), 401);
    let ls = ok(&dir, &["auth", "ls"]);
    assert!(
        ls.contains("client.admin") && ls.contains("allow *"),
        "{ls}"
    );
    for text in [
        ls,
        ok(&dir, &["auth", "ls", "--json"]),
        ok(&dir, &["status", "--json"]),
    ] {
        for k in [&admin_key, &admin_key2, &foo_key, &new_key] {
            assert!(!text.contains(k.as_str()), "a key leaked: {text}");
        }
    }
    eprintln!("done after {:?}", started.elapsed());
}
