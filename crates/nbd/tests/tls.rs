//! The server over TLS with real clients, in-process over in-memory
//! volumes: libnbd (`nbds://`, `tls-psk-file`, `tls-certificates`) and
//! qemu (`tls-creds-psk`, `tls-creds-x509`) move data through one
//! server that takes both pre-shared keys and client certificates; a
//! plain client gets `NBD_REP_ERR_TLS_REQD`; STARTTLS with bytes behind it
//! is dropped. Credentials come from the `openssl` command line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tools::*;
use common::*;
use pontoon_nbd::proto::*;
use pontoon_nbd::{ExportAccess, ServerConfig, ServerHandle, TlsConfig, TlsMode};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for localhost/127.0.0.1, a client
/// certificate with CN `admin` in `dir/admin` (qemu's and libnbd's
/// layout), and `alice`'s key in `dir/alice/keys.psk` and `dir/server.psk`.
fn credentials(dir: &Path) {
    let key = |name: &str| {
        openssl(
            dir,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                name,
            ],
        )
    };
    key("ca-key.pem");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca-key.pem",
            "-subj",
            "/CN=CA",
            "-days",
            "2",
            "-out",
            "ca-cert.pem",
        ],
    );
    for (name, cn, ext) in [
        (
            "server",
            "localhost",
            "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
        ),
        ("client", "admin", "extendedKeyUsage=clientAuth\n"),
    ] {
        key(&format!("{name}-key.pem"));
        let csr = format!("{name}.csr");
        let subj = format!("/CN={cn}");
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                &format!("{name}-key.pem"),
                "-subj",
                &subj,
                "-out",
                &csr,
            ],
        );
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n{ext}"),
        )
        .unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
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
            ],
        );
    }
    std::fs::create_dir_all(dir.join("admin")).unwrap();
    for f in ["ca-cert.pem", "client-cert.pem", "client-key.pem"] {
        std::fs::copy(dir.join(f), dir.join("admin").join(f)).unwrap();
    }
    std::fs::create_dir_all(dir.join("alice")).unwrap();
    let key: String = pattern(7, 32).iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join("server.psk"), format!("alice:{key}\n")).unwrap();
    std::fs::write(dir.join("alice/keys.psk"), format!("alice:{key}\n")).unwrap();
}

fn tls_server(dir: &Path) -> ServerHandle {
    let p = |f: &str| Some(dir.join(f));
    serve_with(
        ServerConfig {
            tls: TlsConfig {
                mode: TlsMode::Require,
                cert: p("server-cert.pem"),
                key: p("server-key.pem"),
                ca: p("ca-cert.pem"),
                psk_file: p("server.psk"),
                ..Default::default()
            },
            access: ExportAccess::parse("alice=a;admin=*", None).unwrap(),
            ..Default::default()
        },
        &[("a", 64 * MIB), ("b", 64 * MIB)],
    )
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn psk_uri(server: &ServerHandle, dir: &Path, export: &str) -> String {
    format!(
        "nbds://alice@127.0.0.1:{}/{export}?tls-psk-file={}",
        server.local_addr().port(),
        path(&dir.join("alice/keys.psk"))
    )
}

fn x509_uri(server: &ServerHandle, dir: &Path, export: &str) -> String {
    format!(
        "nbds://localhost:{}/{export}?tls-certificates={}",
        server.local_addr().port(),
        path(&dir.join("admin"))
    )
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().to_path_buf();
    credentials(&d);
    (t, d)
}

#[test]
fn libnbd_copies_data_in_and_out_over_psk_and_over_x509() {
    let (_t, dir) = tmp();
    let server = tls_server(&dir);
    let src = dir.join("src");
    std::fs::write(&src, pattern(1, 5 * MIB as usize + 4096)).unwrap();
    run_ok(nbdcopy().args([path(&src), &psk_uri(&server, &dir, "a")]));
    let back = dir.join("back");
    run_ok(nbdcopy().args([&x509_uri(&server, &dir, "a"), path(&back)]));
    let back = std::fs::read(&back).unwrap();
    let src = std::fs::read(&src).unwrap();
    assert_eq!(back.len() as u64, 64 * MIB);
    assert!(back[..src.len()] == src[..], "data differs");
    // alice sees only "a".
    let list = run_ok(nbdinfo().args(["--list", "--json", &psk_uri(&server, &dir, "")])).stdout;
    assert!(list.contains("\"a\"") && !list.contains("\"b\""), "{list}");
    server.stop().unwrap();
}

#[test]
fn qemu_io_writes_and_verifies_over_psk_and_x509() {
    let (_t, dir) = tmp();
    let server = tls_server(&dir);
    let port = server.local_addr().port();
    let io = |object: String, host: &str, cmd: &str| {
        run_ok(qemu_io().args([
            "--object",
            &object,
            "--image-opts",
            &format!("driver=nbd,host={host},port={port},export=a,tls-creds=tls0"),
            "-c",
            cmd,
        ]))
    };
    let psk = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        path(&dir.join("alice"))
    );
    let x509 = format!(
        "tls-creds-x509,id=tls0,endpoint=client,dir={}",
        path(&dir.join("admin"))
    );
    let w = io(psk.clone(), "127.0.0.1", "write -P 0x3c 1M 3M").stdout;
    assert!(w.contains("wrote 3145728/3145728"), "{w}");
    let r = io(x509, "localhost", "read -P 0x3c 1M 3M").stdout;
    assert!(
        r.contains("read 3145728/3145728") && !r.contains("failed"),
        "{r}"
    );
    let r = io(psk, "127.0.0.1", "read -P 0x3c 1M 3M").stdout;
    assert!(
        r.contains("read 3145728/3145728") && !r.contains("failed"),
        "{r}"
    );
    server.stop().unwrap();
}

#[test]
fn a_plain_client_is_told_tls_is_required_and_bytes_after_starttls_drop_the_connection() {
    let (_t, dir) = tmp();
    let server = tls_server(&dir);
    let mut raw = Raw::connect(server.local_addr());
    for (opt, data) in [
        (OPT_LIST, Vec::new()),
        (OPT_STRUCTURED_REPLY, Vec::new()),
        (
            OPT_GO,
            InfoRequest {
                name: "a".into(),
                requests: vec![],
            }
            .encode(),
        ),
    ] {
        let replies = raw.option(opt, &data);
        assert_eq!(replies.len(), 1);
        assert_eq!(replies[0].0, REP_ERR_TLS_REQD, "option {opt}");
    }
    let replies = raw.option(OPT_ABORT, &[]);
    assert_eq!(replies[0].0, REP_ACK);

    // A STARTTLS followed at once by plain-text bytes (an injection
    // attempt) is not acknowledged: the server hangs up.
    let mut raw = Raw::connect(server.local_addr());
    let mut msg = OptionHeader {
        option: OPT_STARTTLS,
        length: 0,
    }
    .encode()
    .to_vec();
    msg.extend_from_slice(
        &OptionHeader {
            option: OPT_LIST,
            length: 0,
        }
        .encode(),
    );
    raw.send(&msg);
    assert!(raw.closed_by_server());
    server.stop().unwrap();
}
