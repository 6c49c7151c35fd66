//! The NBD gateway over TLS, driven by real clients: qemu (`qemu-img`,
//! `qemu-io` with `tls-creds-psk` and `tls-creds-x509`) and libnbd
//! (`nbdinfo`, `nbdcopy` with `nbds://` URIs, `tls-psk-file` and
//! `tls-certificates`), against a one-OSD cluster and a `pontoon nbd`
//! that requires TLS, accepts both pre-shared keys and client
//! certificates, and limits each identity to its export list:
//! `alice` (PSK) to volume `va`, `bob` (PSK) to pool `pb`, `admin` (a
//! client certificate's CN) to everything.
//!
//! Credentials are made with the `openssl` command line; keys.psk is in
//! psktool's `username:hexkey` form. Needs etcd-server, qemu-utils,
//! libnbd-bin and openssl (`scripts/deps.sh test`). Asserts on data and on
//! the clients' answers, never on time.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const MIB: usize = 1 << 20;
/// Each volume's size.
const VOL: &str = "64M";

/// Runs a command that must fail; returns its stdout and stderr.
fn refused(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = run_tool(cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{shown} succeeded: {text}");
    text
}

/// Bytes that no two calls share (xorshift over a seed).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The credentials of the test: a CA, the gateway's certificate, the
/// admin client's certificate (qemu's and libnbd's directory layout), and
/// PSK files.
struct Creds {
    dir: PathBuf,
}

impl Creds {
    fn make(root: &Path) -> Creds {
        let dir = root.join("tls");
        std::fs::create_dir_all(dir.join("admin")).expect("mkdir tls");
        std::fs::create_dir_all(dir.join("nocert")).expect("mkdir tls");
        let ossl = |args: &[&str]| {
            must(Command::new("openssl").current_dir(&dir).args(args));
        };
        let key = |name: &str| {
            ossl(&[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                name,
            ])
        };
        key("ca-key.pem");
        ossl(&[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca-key.pem",
            "-subj",
            "/CN=Pontoon test CA",
            "-days",
            "2",
            "-out",
            "ca-cert.pem",
        ]);
        let sign = |name: &str, cn: &str, ext: &str| {
            key(&format!("{name}-key.pem"));
            ossl(&[
                "req",
                "-new",
                "-key",
                &format!("{name}-key.pem"),
                "-subj",
                &format!("/CN={cn}"),
                "-out",
                &format!("{name}.csr"),
            ]);
            std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write ext");
            ossl(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca-cert.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}-cert.pem"),
            ]);
        };
        sign(
            "server",
            "localhost",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
        );
        sign(
            "client",
            "admin",
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=clientAuth\n",
        );
        // qemu's and libnbd's client directory: ca-cert.pem,
        // client-cert.pem, client-key.pem.
        for (from, to) in [
            ("ca-cert.pem", "admin/ca-cert.pem"),
            ("client-cert.pem", "admin/client-cert.pem"),
            ("client-key.pem", "admin/client-key.pem"),
            ("ca-cert.pem", "nocert/ca-cert.pem"),
        ] {
            std::fs::copy(dir.join(from), dir.join(to)).expect("copy credentials");
        }
        let hex = |seed: u64| -> String {
            random_bytes(seed, 32)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let (alice, bob) = (hex(0xa11ce), hex(0xb0b));
        // The gateway's keys, and each client's (qemu reads DIR/keys.psk).
        std::fs::write(
            dir.join("server.psk"),
            format!("alice:{alice}\nbob:{bob}\n"),
        )
        .expect("write server.psk");
        for (name, line) in [
            ("alice", format!("alice:{alice}\n")),
            ("bob", format!("bob:{bob}\n")),
            ("wrong", format!("alice:{}\n", hex(0xbad))),
            ("mallory", format!("mallory:{}\n", hex(0xbad))),
        ] {
            std::fs::create_dir_all(dir.join(name)).expect("mkdir psk dir");
            std::fs::write(dir.join(name).join("keys.psk"), line).expect("write keys.psk");
        }
        Creds { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// libnbd's URI for `export` as PSK user `user` (keys from `keys`).
    fn psk_uri(&self, port: u16, keys: &str, user: &str, export: &str) -> String {
        format!(
            "nbds://{user}@127.0.0.1:{port}/{export}?tls-psk-file={}",
            self.path(&format!("{keys}/keys.psk"))
        )
    }

    /// libnbd's URI for `export` with the certificates of `dir`.
    fn x509_uri(&self, port: u16, dir: &str, export: &str) -> String {
        format!(
            "nbds://localhost:{port}/{export}?tls-certificates={}",
            self.path(dir)
        )
    }

    /// qemu's `--object` for PSK user `user` (keys from `keys`).
    fn qemu_psk(&self, keys: &str, user: &str) -> String {
        format!(
            "tls-creds-psk,id=tls0,endpoint=client,dir={},username={user}",
            self.path(keys)
        )
    }

    /// qemu's `--object` for the admin certificate.
    fn qemu_x509(&self) -> String {
        format!(
            "tls-creds-x509,id=tls0,endpoint=client,dir={}",
            self.path("admin")
        )
    }
}

/// qemu's `--image-opts` for `export` over TLS.
fn qemu_nbd(port: u16, host: &str, export: &str) -> String {
    format!("driver=nbd,host={host},port={port},export={export},tls-creds=tls0")
}

/// A cluster with volumes `va` (pool `pa`) and `vb` (pool `pb`), and a
/// TLS-requiring gateway in front of it; stopped (by pid) on drop.
struct Rig {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    creds: Creds,
    port: u16,
    gateway: Option<Child>,
    up: Option<Up>,
}

impl Rig {
    fn start(name: &str) -> Rig {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("pontoon-nbd-tls-{name}-"))
            .tempdir()
            .expect("tempdir");
        let dir = tmp.path().canonicalize().expect("canonical tempdir");
        let creds = Creds::make(&dir);
        let up = Up::start(&dir, &[]);
        for (pool, vol) in [("pa", "va"), ("pb", "vb")] {
            ok(&dir, &["pool", "create", pool, "--size", "1", "--pgs", "8"]);
            ok(
                &dir,
                &["volume", "create", vol, "--size", VOL, "--pool", pool],
            );
        }
        let port = free_port();
        let log = std::fs::File::create(dir.join("nbd.out")).expect("nbd log");
        let gateway = Command::new(PONTOON)
            .arg("nbd")
            .arg("--cluster")
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--metrics", "off"])
            .args(["--tls-cert", &creds.path("server-cert.pem")])
            .args(["--tls-key", &creds.path("server-key.pem")])
            .args(["--tls-ca", &creds.path("ca-cert.pem")])
            .args(["--tls-psk-file", &creds.path("server.psk")])
            .args(["--export", "alice=va", "--export", "bob=pb/*"])
            .args(["--export", "admin=*"])
            .env_remove("PONTOON_CLUSTER")
            .env_remove("PONTOON_ETCD")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("run pontoon nbd");
        let mut rig = Rig {
            _tmp: tmp,
            dir,
            creds,
            port,
            gateway: Some(gateway),
            up: Some(up),
        };
        rig.wait_listening();
        rig
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            if let Some(g) = &mut self.gateway
                && let Ok(Some(status)) = g.try_wait()
            {
                panic!(
                    "pontoon nbd exited ({status}): {}",
                    std::fs::read_to_string(self.dir.join("nbd.out")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "pontoon nbd did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop_gateway(&mut self) {
        if let Some(mut g) = self.gateway.take() {
            signal(g.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            while g.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = g.kill();
            let _ = g.wait();
        }
    }

    fn gateway_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nbd.out")).unwrap_or_default()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop_gateway();
        drop(self.up.take());
    }
}

/// `qemu-img SUBCOMMAND --object OBJECT`.
fn qemu_img(sub: &str, object: &str) -> Command {
    let mut c = Command::new("qemu-img");
    c.args([sub, "--object", object]);
    c
}

#[test]
fn qemu_and_libnbd_read_and_write_volumes_over_tls_with_psk_and_x509() {
    let started = Instant::now();
    let mut rig = Rig::start("data");
    let (c, port, dir) = (&rig.creds, rig.port, rig.dir.clone());
    eprintln!("cluster and gateway up after {:?}", started.elapsed());

    // libnbd, x509 (admin) writes va; qemu, PSK (alice) reads it back.
    let src_a = random_bytes(1, 4 * MIB);
    std::fs::write(dir.join("a.src"), &src_a).expect("write a.src");
    must(Command::new("nbdcopy").args([
        dir.join("a.src").to_str().expect("utf-8"),
        &c.x509_uri(port, "admin", "va"),
    ]));
    must(
        qemu_img("convert", &c.qemu_psk("alice", "alice"))
            .args(["-O", "raw", "--image-opts"])
            .arg(qemu_nbd(port, "127.0.0.1", "va"))
            .arg(dir.join("a.out")),
    );
    let back = std::fs::read(dir.join("a.out")).expect("read a.out");
    assert_eq!(back.len(), 64 * MIB);
    assert!(back[..src_a.len()] == src_a[..], "va read over PSK differs");
    assert!(back[src_a.len()..].iter().all(|b| *b == 0));

    // qemu, x509 (admin) writes vb; libnbd, PSK (bob, pool pb) reads it.
    let src_b = random_bytes(2, 3 * MIB);
    std::fs::write(dir.join("b.src"), &src_b).expect("write b.src");
    must(
        qemu_img("convert", &c.qemu_x509())
            .args(["-n", "-f", "raw"])
            .arg(dir.join("b.src"))
            .arg("--target-image-opts")
            .arg(qemu_nbd(port, "localhost", "vb")),
    );
    must(Command::new("nbdcopy").args([
        &c.psk_uri(port, "bob", "bob", "vb"),
        dir.join("b.out").to_str().expect("utf-8"),
    ]));
    let back = std::fs::read(dir.join("b.out")).expect("read b.out");
    assert!(back[..src_b.len()] == src_b[..], "vb read over PSK differs");

    // qemu-io, PSK (alice): a pattern written and verified; then read by
    // libnbd over x509 and by qemu-io over x509.
    let io = |object: &str, host: &str, cmd: &str| {
        must(
            Command::new("qemu-io")
                .args(["--object", object, "--image-opts"])
                .arg(qemu_nbd(port, host, "va"))
                .args(["-c", cmd]),
        )
    };
    let w = io(
        &c.qemu_psk("alice", "alice"),
        "127.0.0.1",
        "write -P 0x5a 8M 1M",
    );
    assert!(w.contains("wrote 1048576/1048576"), "{w}");
    let r = io(&c.qemu_x509(), "localhost", "read -P 0x5a 8M 1M");
    assert!(
        r.contains("read 1048576/1048576") && !r.contains("failed"),
        "{r}"
    );
    must(Command::new("nbdcopy").args([
        &c.x509_uri(port, "admin", "va"),
        dir.join("a2.out").to_str().expect("utf-8"),
    ]));
    let back = std::fs::read(dir.join("a2.out")).expect("read a2.out");
    assert!(back[8 * MIB..9 * MIB].iter().all(|b| *b == 0x5a));
    assert!(back[..src_a.len()] == src_a[..]);

    // nbdinfo over PSK and x509 sees the export's size.
    for uri in [
        c.psk_uri(port, "alice", "alice", "va"),
        c.x509_uri(port, "admin", "vb"),
    ] {
        let info = must(Command::new("nbdinfo").args(["--json", &uri]));
        let v: serde_json::Value = serde_json::from_str(&info).expect("nbdinfo --json");
        assert_eq!(v["exports"][0]["export-size"], 64 * MIB as u64, "{info}");
    }
    rig.stop_gateway();
    let log = rig.gateway_log();
    for secret in std::fs::read_to_string(rig.creds.dir.join("server.psk"))
        .expect("read server.psk")
        .lines()
        .filter_map(|l| l.split_once(':').map(|(_, k)| k.to_string()))
    {
        assert!(!log.contains(&secret), "a PSK is in the gateway's log");
    }
    eprintln!("done after {:?}", started.elapsed());
}

/// NBD_REP_ERR_TLS_REQD.
const REP_ERR_TLS_REQD: u32 = 0x8000_0005;
const REP_ACK: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_LIST: u32 = 3;
const OPT_GO: u32 = 7;
const OPT_STRUCTURED_REPLY: u32 = 8;

/// A plain fixed-newstyle client on a raw socket.
struct RawClient(TcpStream);

impl RawClient {
    fn connect(port: u16) -> RawClient {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).expect("greeting");
        assert_eq!(&greeting[..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        // NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES
        s.write_all(&3u32.to_be_bytes()).expect("client flags");
        RawClient(s)
    }

    /// Sends an option; returns the final reply's type.
    fn option(&mut self, option: u32, data: &[u8]) -> u32 {
        let mut msg = b"IHAVEOPT".to_vec();
        msg.extend_from_slice(&option.to_be_bytes());
        msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
        msg.extend_from_slice(data);
        self.0.write_all(&msg).expect("send option");
        let mut hdr = [0u8; 20];
        self.0.read_exact(&mut hdr).expect("option reply");
        assert_eq!(
            u64::from_be_bytes(hdr[..8].try_into().unwrap()),
            0x3e889045565a9
        );
        assert_eq!(u32::from_be_bytes(hdr[8..12].try_into().unwrap()), option);
        let len = u32::from_be_bytes(hdr[16..20].try_into().unwrap());
        assert!(len < 4096);
        let mut body = vec![0u8; len as usize];
        self.0.read_exact(&mut body).expect("reply data");
        u32::from_be_bytes(hdr[12..16].try_into().unwrap())
    }
}

/// The export names `nbdinfo --list --json` shows at `uri`.
fn listed(uri: &str) -> Vec<String> {
    let out = must(Command::new("nbdinfo").args(["--list", "--json", uri]));
    let v: serde_json::Value = serde_json::from_str(&out).expect("nbdinfo --json");
    let mut names: Vec<String> = v["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .map(|e| e["export-name"].as_str().expect("export-name").to_string())
        .collect();
    names.sort();
    names
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

#[test]
fn plain_clients_wrong_keys_and_unlisted_volumes_are_refused() {
    let started = Instant::now();
    let rig = Rig::start("refuse");
    let (c, port) = (&rig.creds, rig.port);

    // A plain client gets NBD_REP_ERR_TLS_REQD for everything but ABORT.
    let mut raw = RawClient::connect(port);
    assert_eq!(raw.option(OPT_LIST, &[]), REP_ERR_TLS_REQD);
    assert_eq!(raw.option(OPT_STRUCTURED_REPLY, &[]), REP_ERR_TLS_REQD);
    assert_eq!(raw.option(OPT_GO, &go_data("va")), REP_ERR_TLS_REQD);
    assert_eq!(raw.option(99, &[]), REP_ERR_TLS_REQD);
    assert_eq!(raw.option(OPT_ABORT, &[]), REP_ACK);
    // libnbd without TLS cannot open the export (libnbd 1.14 reports
    // NBD_REP_ERR_TLS_REQD as "Operation not supported").
    let plain = refused(Command::new("nbdinfo").arg(format!("nbd://127.0.0.1:{port}/va")));
    assert!(
        plain.contains("opt_go") && plain.contains("without TLS"),
        "{plain}"
    );

    // A wrong key for a known user, and an unknown user, are refused.
    let wrong = refused(Command::new("nbdinfo").arg(c.psk_uri(port, "wrong", "alice", "va")));
    let unknown = refused(Command::new("nbdinfo").arg(c.psk_uri(port, "mallory", "mallory", "va")));
    eprintln!("wrong key: {wrong}\nunknown user: {unknown}");
    refused(
        qemu_img("info", &c.qemu_psk("wrong", "alice"))
            .args(["--image-opts"])
            .arg(qemu_nbd(port, "127.0.0.1", "va")),
    );
    // x509 without a client certificate is refused (a CA is configured).
    refused(Command::new("nbdinfo").arg(c.x509_uri(port, "nocert", "va")));

    // alice lists only va and cannot open vb; vb looks like a volume that
    // does not exist.
    assert_eq!(listed(&c.psk_uri(port, "alice", "alice", "")), ["va"]);
    let forbidden = refused(Command::new("nbdinfo").arg(c.psk_uri(port, "alice", "alice", "vb")));
    let missing = refused(Command::new("nbdinfo").arg(c.psk_uri(port, "alice", "alice", "vz")));
    assert_eq!(
        forbidden.replace("vb", "NAME"),
        missing.replace("vz", "NAME"),
        "a forbidden volume must look like a missing one"
    );
    refused(
        qemu_img("info", &c.qemu_psk("alice", "alice"))
            .args(["--image-opts"])
            .arg(qemu_nbd(port, "127.0.0.1", "vb")),
    );
    // bob (pool pb) sees vb only; admin (certificate CN) sees both.
    assert_eq!(listed(&c.psk_uri(port, "bob", "bob", "")), ["vb"]);
    assert_eq!(listed(&c.x509_uri(port, "admin", "")), ["va", "vb"]);
    eprintln!("done after {:?}", started.elapsed());
}
