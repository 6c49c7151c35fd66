//! etcd as `pontoon up` runs it by default: HTTPS only, a client
//! certificate of the cluster's own CA required, etcd's authentication on,
//! a user per kind of daemon limited to the cluster's prefix, the CLI as
//! `admin`. Hostile clients — curl over plain HTTP, without a certificate,
//! with a certificate of another CA (made by openssl), with the right
//! certificate but no user or a wrong password, a daemon's user reaching
//! outside its prefix — are refused while an honest client (fio through
//! the NBD gateway, writing and verifying) carries on.
//!
//! Needs etcd-server, curl, openssl, fio (`scripts/deps.sh test`).

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pontoon_testtools::{need, run};

/// Longest one curl or openssl call may take.
const TOOL: Duration = Duration::from_secs(15);

/// Standard base64, as etcd's JSON gateway takes keys and values.
fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What curl did: its exit status and what it printed.
struct Curl {
    ok: bool,
    body: String,
}

/// `curl ARGS URL` (POST of `json` when given), bounded.
fn curl(args: &[&str], url: &str, json: Option<&str>) -> Curl {
    let mut cmd = need("curl", "curl");
    cmd.args(["-sS", "--max-time", "10"]).args(args);
    if let Some(j) = json {
        cmd.args([
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            j,
        ]);
    }
    cmd.arg(url);
    let r = run(&mut cmd, TOOL);
    Curl {
        ok: r.success(),
        body: format!("{}{}", r.stdout, r.stderr),
    }
}

/// Whether etcd answered a request with data (a response header), not an
/// error.
fn served(c: &Curl) -> bool {
    c.ok && c.body.contains("\"header\"") && !c.body.contains("\"error\"")
}

/// `etcdctl` (v3 API) at `endpoint` with `tls` flags and, if given, the
/// user `name:password` (through the environment, not the command line).
fn etcdctl(
    endpoint: &str,
    tls: &[&str],
    user: Option<&str>,
    args: &[&str],
) -> pontoon_testtools::Ran {
    let mut cmd = need("etcdctl", "etcd-client");
    cmd.env("ETCDCTL_API", "3")
        .env_remove("ETCDCTL_USER")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=3s", "--command-timeout=5s"])
        .args(tls)
        .args(args);
    if let Some(u) = user {
        cmd.env("ETCDCTL_USER", u);
    }
    run(&mut cmd, TOOL)
}

/// A CA of our own and a client certificate it signed, by openssl:
/// (certificate, key).
fn foreign_client_cert(dir: &Path) -> (String, String) {
    let p = |f: &str| dir.join(f).display().to_string();
    let ossl = |args: &[&str]| {
        let r = run(need("openssl", "openssl").args(args), TOOL);
        assert!(r.success(), "openssl {args:?}: {}", r.report());
    };
    ossl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        &p("evil-ca.key"),
        "-out",
        &p("evil-ca.pem"),
        "-days",
        "2",
        "-subj",
        "/CN=pontoon etcd CA",
    ]);
    ossl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        &p("evil.key"),
        "-out",
        &p("evil.csr"),
        "-subj",
        "/CN=root",
    ]);
    std::fs::write(dir.join("evil.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    ossl(&[
        "x509",
        "-req",
        "-in",
        &p("evil.csr"),
        "-CA",
        &p("evil-ca.pem"),
        "-CAkey",
        &p("evil-ca.key"),
        "-CAcreateserial",
        "-out",
        &p("evil.pem"),
        "-days",
        "2",
        "-extfile",
        &p("evil.ext"),
    ]);
    (p("evil.pem"), p("evil.key"))
}

#[test]
fn etcd_refuses_strangers_and_confines_daemons_while_honest_io_continues() {
    let started = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("pontoon-etcdsec-")
        .tempdir()
        .expect("tempdir");
    let dir = tmp.path().canonicalize().expect("canonical tempdir");
    let nbd = format!("127.0.0.1:{}", free_port());
    let mut up = Up::start_with(&dir, 3, &["--nbd", &nbd]);
    eprintln!("cluster ready after {:?}", started.elapsed());
    let etcd = up.etcd();
    assert!(etcd.starts_with("https://127.0.0.1:"), "{etcd}");
    let pki = dir.join("etcd-pki");
    let f = |name: &str| pki.join(name).display().to_string();

    // The credentials are the owner's alone, and no password is in
    // cluster.toml, in `config show` or on any process's command line.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&pki), 0o700);
    let mut passwords = Vec::new();
    for e in std::fs::read_dir(&pki).unwrap() {
        let p = e.unwrap().path();
        assert_eq!(mode(&p), 0o600, "{}", p.display());
        if p.extension().is_some_and(|x| x == "password") {
            passwords.push(std::fs::read_to_string(&p).unwrap().trim().to_string());
        }
    }
    assert_eq!(passwords.len(), 7, "root, admin and five daemon users");
    let toml = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    assert!(toml.contains("etcd_user = \"admin\""), "{toml}");
    let shown = ok(&dir, &["config", "show", "--json"]);
    let mut cmdlines = String::new();
    for pid in up.pids() {
        let c = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdlines.push_str(&String::from_utf8_lossy(&c).replace('\0', " "));
        cmdlines.push('\n');
    }
    for pw in &passwords {
        for (what, text) in [
            ("cluster.toml", &toml),
            ("config show", &shown),
            ("cmdlines", &cmdlines),
        ] {
            assert!(!text.contains(pw.as_str()), "a password in {what}: {text}");
        }
    }
    // Every daemon has a user of its own, none is root.
    for user in ["osd", "nbd", "mgr"] {
        assert!(
            cmdlines.contains(&format!("--etcd-user {user} ")),
            "{cmdlines}"
        );
    }
    assert!(!cmdlines.contains("--etcd-user root"), "{cmdlines}");

    // The CLI (admin) and the daemons work.
    ok(&dir, &["pool", "create", "p", "--size", "3", "--pgs", "8"]);
    ok(&dir, &["volume", "create", "v", "--size", "64M"]);
    wait_status(&dir, "8 PGs active+clean", |s| {
        s["pgs"]["states"]["active+clean"].as_u64() == Some(8)
    });
    let epoch_before = json(&dir, &["status", "--json"])["epoch"].as_u64();

    // An honest client writes and verifies through the gateway meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let io = {
        let (stop, nbd) = (stop.clone(), nbd.clone());
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            for round in 0..20 {
                runs.push(fio_nbd_round(&nbd, "v", 1000 + round));
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            runs
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let hostile_from = Instant::now();

    let https = etcd.clone();
    let http = https.replacen("https://", "http://", 1);
    let epoch_key = "/pontoon/pontoon/epoch";
    let put_json = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        b64(epoch_key.as_bytes()),
        b64(b"999")
    );
    let certs = [
        format!("--cacert={}", f("ca.pem")),
        format!("--cert={}", f("client.pem")),
        format!("--key={}", f("client.key")),
    ];
    let certs: Vec<&str> = certs.iter().map(String::as_str).collect();

    // 1. Plain HTTP, curl and etcdctl without certificates: no answer.
    let c = curl(&[], &format!("{http}/v3/kv/put"), Some(&put_json));
    assert!(!served(&c), "plain HTTP was served: {}", c.body);
    let r = etcdctl(&http, &[], None, &["put", epoch_key, "999"]);
    assert!(!r.success(), "etcdctl over plain HTTP: {}", r.report());
    // The peer port too (a member's raft messages): plain HTTP and TLS
    // without a certificate get nothing.
    let peer = format!(
        "https://127.0.0.1:{}",
        toml.lines()
            .find_map(|l| l.strip_prefix("etcd_peer_port = \""))
            .and_then(|v| v.strip_suffix('"'))
            .expect("etcd_peer_port in cluster.toml")
    );
    for (what, args) in [
        ("plain HTTP", vec![]),
        ("TLS without a certificate", vec!["--cacert", &f("ca.pem")]),
    ] {
        let url = if args.is_empty() {
            peer.replacen("https://", "http://", 1)
        } else {
            peer.clone()
        };
        let c = curl(&args, &format!("{url}/members"), None);
        assert!(
            !(c.ok && c.body.contains("peerURLs")),
            "peer port, {what}: {}",
            c.body
        );
    }
    // 2. TLS without a client certificate: the handshake fails.
    let c = curl(
        &["--cacert", &f("ca.pem")],
        &format!("{https}/v3/kv/put"),
        Some(&put_json),
    );
    assert!(
        !c.ok && !served(&c),
        "no certificate was served: {}",
        c.body
    );
    let ca_only = format!("--cacert={}", f("ca.pem"));
    let r = etcdctl(&https, &[&ca_only], None, &["get", epoch_key]);
    assert!(
        !r.success(),
        "etcdctl without a certificate: {}",
        r.report()
    );
    // 3. A client certificate of another CA (named root, even): refused.
    let (evil_cert, evil_key) = foreign_client_cert(&dir);
    let c = curl(
        &[
            "--cacert",
            &f("ca.pem"),
            "--cert",
            &evil_cert,
            "--key",
            &evil_key,
        ],
        &format!("{https}/v3/kv/put"),
        Some(&put_json),
    );
    assert!(
        !c.ok && !served(&c),
        "a foreign certificate was served: {}",
        c.body
    );
    let evil = [
        ca_only.clone(),
        format!("--cert={evil_cert}"),
        format!("--key={evil_key}"),
    ];
    let evil: Vec<&str> = evil.iter().map(String::as_str).collect();
    let r = etcdctl(&https, &evil, None, &["put", epoch_key, "999"]);
    assert!(
        !r.success(),
        "etcdctl with a foreign certificate: {}",
        r.report()
    );
    // 4. The right certificate but no user, or a wrong password: etcd's
    //    authentication refuses (etcdctl, and the pontoon CLI itself).
    let r = etcdctl(&https, &certs, None, &["get", epoch_key]);
    assert!(
        !r.success(),
        "read with a certificate but no user: {}",
        r.report()
    );
    let r = etcdctl(&https, &certs, None, &["put", epoch_key, "999"]);
    assert!(
        !r.success(),
        "write with a certificate but no user: {}",
        r.report()
    );
    let r = etcdctl(
        &https,
        &certs,
        Some("osd:not-the-password"),
        &["get", epoch_key],
    );
    assert!(
        !r.success() && r.stderr.contains("authentication failed"),
        "a wrong password: {}",
        r.report()
    );
    let wrong = dir.join("wrong.password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let cli = |extra: &[&str]| {
        let mut cmd = Command::new(PONTOON);
        cmd.args(["status", "--etcd", &https, "--etcd-ca-file", &f("ca.pem")])
            .args(["--etcd-cert-file", &f("client.pem")])
            .args(["--etcd-key-file", &f("client.key")])
            .args(extra)
            .env_remove("PONTOON_CLUSTER")
            .env_remove("PONTOON_ETCD")
            .env("PONTOON_CONFIG", "/dev/null");
        run(&mut cmd, Duration::from_secs(30))
    };
    let r = cli(&[]);
    assert!(
        !r.success(),
        "status with a certificate but no user: {}",
        r.report()
    );
    let r = cli(&[
        "--etcd-user",
        "admin",
        "--etcd-password-file",
        wrong.to_str().unwrap(),
    ]);
    assert!(
        !r.success() && r.stderr.contains("authentication failed"),
        "status with a wrong password: {}",
        r.report()
    );
    let r = cli(&[
        "--etcd-user",
        "admin",
        "--etcd-password-file",
        &f("admin.password"),
    ]);
    assert!(r.success(), "status as admin by flags: {}", r.report());
    // The same credentials from the configuration file, as a node's
    // /etc/pontoon/pontoon.toml gives them to its daemons and the CLI.
    let toml = dir.join("node.toml");
    std::fs::write(
        &toml,
        format!(
            "[etcd]\nendpoints = [{https:?}]\nca_file = {:?}\ncert_file = {:?}\n\
             key_file = {:?}\nuser = \"admin\"\npassword_file = {:?}\n",
            f("ca.pem"),
            f("client.pem"),
            f("client.key"),
            f("admin.password"),
        ),
    )
    .unwrap();
    let mut cmd = Command::new(PONTOON);
    cmd.args(["status"])
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .env("PONTOON_CONFIG", &toml);
    let r = run(&mut cmd, Duration::from_secs(30));
    assert!(
        r.success(),
        "status as admin by pontoon.toml: {}",
        r.report()
    );

    // 5. A daemon's user: its prefix served, nothing outside it.
    let osd_pw = std::fs::read_to_string(pki.join("osd.password")).unwrap();
    let osd = format!("osd:{}", osd_pw.trim());
    let r = etcdctl(&https, &certs, Some(&osd), &["get", epoch_key]);
    assert!(
        r.success() && r.stdout.contains(epoch_key),
        "osd reading its prefix: {}",
        r.report()
    );
    for (what, cmd) in [
        (
            "another cluster's key",
            vec!["put", "/pontoon/other/epoch", "1"],
        ),
        ("a key outside /pontoon/", vec!["put", "/evil", "1"]),
        (
            "the whole keyspace",
            vec!["get", "", "--prefix", "--keys-only"],
        ),
        (
            "another cluster's prefix",
            vec!["get", "/pontoon/other/", "--prefix"],
        ),
        ("etcd's users", vec!["user", "add", "mallory:x"]),
        ("etcd's authentication", vec!["auth", "disable"]),
    ] {
        let r = etcdctl(&https, &certs, Some(&osd), &cmd);
        assert!(
            !r.success() && r.stderr.contains("permission denied"),
            "osd user reached {what}: {}",
            r.report()
        );
    }
    // The CLI as a daemon's user on another cluster: refused at connect.
    let r = cli(&[
        "--etcd-user",
        "osd",
        "--etcd-password-file",
        &f("osd.password"),
        "--cluster-name",
        "other",
    ]);
    assert!(
        !r.success() && r.stderr.contains("permission denied"),
        "{}",
        r.report()
    );
    let hostile_to = Instant::now();
    eprintln!("hostile attempts took {:?}", hostile_to - hostile_from);

    stop.store(true, Ordering::Relaxed);
    let runs = io.join().expect("fio thread");
    for (i, (_, _, passed, report)) in runs.iter().enumerate() {
        assert!(passed, "honest fio run {i} failed: {report}");
    }
    assert!(
        runs.iter()
            .any(|(s, e, _, _)| *s <= hostile_to && *e >= hostile_from),
        "no fio run overlapped the hostile attempts"
    );
    // No password in any log.
    for e in std::fs::read_dir(dir.join("log")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for pw in &passwords {
            assert!(!text.contains(pw.as_str()), "a password in {}", p.display());
        }
    }
    // Nothing the strangers sent changed the map.
    let s = json(&dir, &["status", "--json"]);
    assert!(s["epoch"].as_u64() >= epoch_before, "{s}");
    assert_ne!(s["epoch"].as_u64(), Some(999), "{s}");
    assert_eq!(s["osds"]["up"], 3, "{s}");
    eprintln!(
        "{} honest fio runs, all verified; total {:?}",
        runs.len(),
        started.elapsed()
    );
    assert!(up.stop().success());
}
