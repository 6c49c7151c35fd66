//! DH-HMAC-CHAP (NVMe in-band authentication) through the NVMe/TCP
//! gateway of a real cluster (`pontoon up --nvmf`), with the Linux
//! kernel's nvme-tcp initiator in the vm-initiator guest (the
//! bookworm-backports 6.12 kernel: Debian 12's 6.1 has no NVMe auth) and
//! secrets made by `nvme gen-dhchap-key` (nvme-cli).
//!
//! The host is allowed with a host secret and a controller secret
//! (`pontoon nvmf host allow ... --dhchap-secret-file F` and the
//! controller secret from the environment, so neither is on a command
//! line). One boot runs every case, each judged here from the guest's
//! `AUTHTEST` lines:
//! 1. the right host secret connects, the kernel logs the admin queue
//!    authenticated, and the namespace writes and verifies (O_DIRECT);
//! 2. a wrong host secret is refused, for authentication;
//! 3. no secret is refused, for authentication;
//! 4. host and controller secrets (bidirectional) connect, the kernel
//!    logs the controller authenticated too, and the namespace writes and
//!    verifies;
//! 5. a wrong controller secret on the host's side is refused by the host.
//!
//! Then our own initiator reads, with the host secret, the block the
//! guest marked (so the kernel's writes reached the volume), is refused
//! without a secret, and refuses the gateway when it expects another
//! controller secret. No secret appears in `host ls` (text or JSON),
//! in the gateway's logs or on any process's command line.
//!
//! Needs etcd, nvme-cli and the vm-initiator harness (root, QEMU; one TCG
//! boot of about 20-30 s).

mod common;

use common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pontoon_nvmf::auth::{DhchapSecret, HostAuthError, HostCredentials};
use pontoon_nvmf::initiator::{Controller, ControllerOptions, Error};

const NQN: &str = "nqn.2024-01.io.pontoon:auth";
/// The host NQN the harness presents by default.
const VM_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
/// Where (in 4 KiB blocks) the guest writes its marker block.
const MARKER_BLOCK: u64 = 4096;

/// The guest's cases. Every result is an `AUTHTEST <case> ...` line the
/// host judges; the script fails only where the harness cannot go on.
const GUEST: &str = r#"#!/bin/sh
. /test/lib.sh
nvme_have_auth || fail "no NVMe in-band auth in this kernel ($(uname -r)): VM_KERNEL=backports"
nvme_admin_timeout 10
BASE="nqn=$NQN,transport=tcp,traddr=10.0.2.2,trsvcid=$PORT,hostnqn=$HOSTNQN,hostid=$(nvme_hostid "$HOSTNQN"),nr_io_queues=2"

# connect_case NAME OPTS: connect (must succeed), report what the kernel
# logged about authentication, write and verify 4 MiB with O_DIRECT.
connect_case() {
	n0=$(dmesg | wc -l)
	exec 3<>/dev/nvme-fabrics || fail "open /dev/nvme-fabrics"
	if ! nvmf_write "$2"; then
		exec 3>&-
		log "AUTHTEST $1 connect=refused err=$(nvmf_errno)"
		dmesg | tail -n +$((n0 + 1)) | sed "s/^/AUTHTEST $1 dmesg: /"
		return
	fi
	read -r resp <&3
	exec 3>&-
	NVME_INST=$(echo "$resp" | sed -n 's/.*instance=\([0-9]*\).*/\1/p')
	NVME_CTRL=/sys/class/nvme/nvme$NVME_INST
	i=0
	while [ "$(cat $NVME_CTRL/state 2>/dev/null)" != live ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done
	dmesg | tail -n +$((n0 + 1)) | grep -i authenticat | sed "s/^/AUTHTEST $1 dmesg: /"
	log "AUTHTEST $1 connect=ok state=$(cat $NVME_CTRL/state 2>/dev/null) queues=$(cat $NVME_CTRL/queue_count 2>/dev/null)"
	nvme_find_ns 1
	if (write_verify "$NVME_BDEV" 4 0 1); then
		log "AUTHTEST $1 io=verified"
	else
		log "AUTHTEST $1 io=failed"
	fi
	if [ "$1" = bidirectional ]; then
		{ printf 'AUTHTEST-MARKER %s' "$(cut -d' ' -f1 /proc/uptime)"; dd if=/dev/zero bs=4096 count=1 2>/dev/null; } | head -c 4096 > /tmp/marker.bin
		if dd if=/tmp/marker.bin of="$NVME_BDEV" bs=4096 seek=$MARKER_BLOCK count=1 oflag=direct conv=notrunc,fsync 2>/dev/null; then
			log "AUTHTEST marker $(head -c 40 /tmp/marker.bin | tr -d '\0')"
		fi
	fi
	nvme_delete
}

# refused_case NAME OPTS: the connect must fail.
refused_case() {
	n0=$(dmesg | wc -l)
	exec 3<>/dev/nvme-fabrics || fail "open /dev/nvme-fabrics"
	if nvmf_write "$2"; then
		read -r resp <&3
		exec 3>&-
		log "AUTHTEST $1 connect=ok (NOT refused)"
		NVME_INST=$(echo "$resp" | sed -n 's/.*instance=\([0-9]*\).*/\1/p')
		[ -n "$NVME_INST" ] && NVME_CTRL=/sys/class/nvme/nvme$NVME_INST && nvme_delete
		return
	fi
	exec 3>&-
	log "AUTHTEST $1 connect=refused err=$(nvmf_errno)"
	dmesg | tail -n +$((n0 + 1)) | grep -i 'nvme' | sed "s/^/AUTHTEST $1 dmesg: /"
}

step "1. right host secret"
connect_case host "$BASE,dhchap_secret=$KEY"
step "2. wrong host secret"
refused_case wrong-host "$BASE,dhchap_secret=$WRONG"
step "3. no secret"
refused_case no-secret "$BASE"
step "4. bidirectional"
connect_case bidirectional "$BASE,dhchap_secret=$KEY,dhchap_ctrl_secret=$CKEY"
step "5. wrong controller secret on the host's side"
refused_case wrong-ctrl "$BASE,dhchap_secret=$KEY,dhchap_ctrl_secret=$WRONG"
log "AUTHTEST-DONE"
exit 0
"#;

/// `nvme gen-dhchap-key -m 1 -n NQN` (nvme-cli; scripts/deps.sh installs it).
fn gen_key(nqn: &str) -> String {
    let out = Command::new("nvme")
        .args(["gen-dhchap-key", "-m", "1", "-n", nqn])
        .output()
        .expect("run `nvme gen-dhchap-key` (install nvme-cli: scripts/deps.sh test)");
    assert!(out.status.success(), "nvme gen-dhchap-key: {out:?}");
    let key = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string();
    assert!(key.starts_with("DHHC-1:01:"), "{key}");
    key
}

/// The guest's lines for `case` (prefix `AUTHTEST <case> `).
fn lines<'a>(out: &'a str, case: &str) -> Vec<&'a str> {
    let key = format!("AUTHTEST {case} ");
    out.lines().filter(|l| l.contains(&key)).collect()
}

/// Every file under `dir` a daemon or the CLI wrote text to (logs,
/// outputs), leaving out etcd's data, which holds the map.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !name.contains("etcd") {
                text_files(&p, out);
            }
        } else if name.ends_with(".log") || name.ends_with(".out") || name.ends_with(".err") {
            out.push(p);
        }
    }
}

#[test]
fn linux_hosts_authenticate_with_dh_hmac_chap_and_wrong_or_missing_secrets_are_refused() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-nvmf-auth-");
    let dir = dir.as_path();
    let key = gen_key(VM_HOST);
    let ckey = gen_key(NQN);
    let wrong = gen_key(VM_HOST);
    let secrets = [&key, &ckey, &wrong];
    // What a leak would show: each secret's base64 body.
    let bodies: Vec<String> = secrets.iter().map(|s| s[10..40].to_string()).collect();

    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut up = Up::start(dir, &["--nvmf", &addr.to_string()]);
    eprintln!("cluster ready after {:?}", started.elapsed());
    ok(dir, &["pool", "create", "p", "--size", "1", "--pgs", "8"]);
    ok(dir, &["volume", "create", "v", "--size", "64M"]);
    ok(dir, &["nvmf", "subsystem", "add", NQN]);
    assert_eq!(
        ok(dir, &["nvmf", "ns", "add", NQN, "v", "--nsid", "1"]),
        "1\n"
    );
    // The host secret from a file, the controller secret from the
    // environment: neither is on a command line.
    let key_file = dir.join("host.key");
    std::fs::write(&key_file, format!("{key}\n")).expect("write the key file");
    let out = pontoon_env(
        dir,
        &[
            "nvmf",
            "host",
            "allow",
            NQN,
            VM_HOST,
            "--dhchap-secret-file",
            &key_file.to_string_lossy(),
        ],
        &[("PONTOON_DHCHAP_CTRL_SECRET", ckey.as_str())],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("host and controller secrets"),
        "host allow: {out:?}"
    );
    // A malformed secret is refused before anything is stored.
    let bad = pontoon_env(
        dir,
        &["nvmf", "host", "set-keys", NQN, VM_HOST],
        &[("PONTOON_DHCHAP_SECRET", &key.replace(&key[12..16], "AAAA"))],
    );
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && err.contains("CRC"),
        "a mistyped secret was not refused: {bad:?}"
    );
    let hosts = json(dir, &["nvmf", "host", "ls", NQN, "--json"]);
    assert_eq!(hosts[0]["nqn"], VM_HOST, "{hosts:#}");
    assert_eq!(
        hosts[0]["dhchap"]["secret"], "DHHC-1:01:<redacted>",
        "{hosts:#}"
    );
    assert_eq!(
        hosts[0]["dhchap"]["ctrl_secret"], "DHHC-1:01:<redacted>",
        "{hosts:#}"
    );
    let text = ok(dir, &["nvmf", "host", "ls", NQN]);
    let subs = ok(dir, &["nvmf", "subsystem", "ls", "--json"]);
    for b in &bodies {
        assert!(
            !hosts.to_string().contains(b) && !text.contains(b) && !subs.contains(b),
            "a secret is in the listings:\n{hosts:#}\n{text}\n{subs}"
        );
    }

    // Our own initiator first: the gateway asks for authentication and
    // refuses a host without a secret.
    let mut opts = ControllerOptions::new(NQN, VM_HOST);
    opts.io_queues = 1;
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match Controller::connect_with(addr, opts.clone()) {
            Err(Error::AuthRequired) => break Error::AuthRequired,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "the gateway did not ask for authentication within 20 s: {other:?}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    eprintln!("our initiator without a secret: {e}");

    // The kernel, in the guest.
    let script_dir = tempfile::tempdir().expect("tempdir for the guest script");
    let script = script_dir.path().join("nvmf-auth-guest.sh");
    std::fs::write(&script, GUEST).expect("write the guest script");
    let args = vec![
        format!("PORT={}", addr.port()),
        format!("NQN={NQN}"),
        format!("HOSTNQN={VM_HOST}"),
        format!("KEY={key}"),
        format!("CKEY={ckey}"),
        format!("WRONG={wrong}"),
        format!("MARKER_BLOCK={MARKER_BLOCK}"),
    ];
    let r = pontoon_testtools::run_vm_env(
        &script.to_string_lossy(),
        &args,
        &[("VM_KERNEL", "backports")],
        Duration::from_secs(200),
    );
    let out = r.stdout.clone();
    eprintln!(
        "guest done after {:?}; its AUTHTEST lines:",
        started.elapsed()
    );
    for l in out.lines().filter(|l| l.contains("AUTHTEST")) {
        eprintln!("  {l}");
    }
    let report = || r.report();
    assert!(
        out.contains("AUTHTEST-DONE"),
        "the guest did not finish:\n{}",
        report()
    );

    for case in ["host", "bidirectional"] {
        let l = lines(&out, case);
        let all = l.join("\n");
        assert!(
            all.contains("connect=ok state=live"),
            "{case}: the right secret did not connect:\n{all}\n{}",
            report()
        );
        assert!(
            all.contains("qid 0: authenticated"),
            "{case}: the kernel did not log the admin queue authenticated:\n{all}"
        );
        assert!(
            all.contains("io=verified"),
            "{case}: the namespace did not write and verify:\n{all}\n{}",
            report()
        );
    }
    let bidi = lines(&out, "bidirectional").join("\n");
    assert!(
        bidi.contains("qid 0: controller authenticated"),
        "the kernel did not authenticate the controller:\n{bidi}"
    );
    assert!(
        !lines(&out, "host")
            .join("\n")
            .contains("controller authenticated"),
        "unidirectional mode authenticated the controller"
    );
    for (case, why) in [
        ("wrong-host", "the gateway refused the response"),
        (
            "no-secret",
            "the host has no secret for a gateway that asks for one",
        ),
        ("wrong-ctrl", "the host refused the gateway's response"),
    ] {
        let all = lines(&out, case).join("\n");
        assert!(
            all.contains("connect=refused"),
            "{case}: not refused ({why}):\n{all}\n{}",
            report()
        );
        assert!(
            all.to_ascii_lowercase().contains("authenticat"),
            "{case}: refused, but the kernel logged no authentication failure ({why}):\n{all}"
        );
    }
    let wrong_ctrl = lines(&out, "wrong-ctrl").join("\n");
    assert!(
        wrong_ctrl.contains("controller authentication failed"),
        "the host did not refuse the controller itself:\n{wrong_ctrl}"
    );
    let marker = out
        .lines()
        .find_map(|l| l.split("AUTHTEST marker ").nth(1))
        .unwrap_or_else(|| panic!("the guest wrote no marker block:\n{}", report()))
        .trim()
        .to_string();

    // The kernel's write reached the volume: our initiator, authenticated
    // with the same secrets, reads it back.
    let mut creds = HostCredentials::new(DhchapSecret::parse(&key).expect("host key"));
    creds.ctrl_secret = Some(DhchapSecret::parse(&ckey).expect("controller key"));
    opts.auth = Some(creds.clone());
    let mut c = Controller::connect_with(addr, opts.clone()).expect("our initiator authenticates");
    assert!(c.auth().is_some_and(|a| a.bidirectional));
    let block = c.io(0).read(1, MARKER_BLOCK, 1).expect("read the marker");
    let text = String::from_utf8_lossy(&block[..marker.len()]).into_owned();
    assert_eq!(
        text, marker,
        "the block the kernel wrote reads back otherwise"
    );
    let _ = c.shutdown();
    // With the wrong controller secret, our initiator refuses the gateway.
    creds.ctrl_secret = Some(DhchapSecret::parse(&wrong).expect("wrong key"));
    opts.auth = Some(creds);
    match Controller::connect_with(addr, opts) {
        Err(Error::Auth {
            error: HostAuthError::ControllerMismatch,
            ..
        }) => {}
        other => panic!("a wrong controller secret was not refused by the host: {other:?}"),
    }

    // No secret in any log, output or command line.
    let mut files = Vec::new();
    text_files(dir, &mut files);
    let mut gateway_said_authenticated = false;
    for f in &files {
        let t = std::fs::read_to_string(f).unwrap_or_default();
        gateway_said_authenticated |= t.contains("host authenticated (DH-HMAC-CHAP)");
        for b in &bodies {
            assert!(!t.contains(b), "a secret is in {}", f.display());
        }
    }
    eprintln!("{} log/output files checked", files.len());
    assert!(
        gateway_said_authenticated,
        "no log of the gateway records an authentication ({} files)",
        files.len()
    );
    for pid in up.pids().into_iter().chain([up.pid()]) {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        for b in &bodies {
            assert!(
                !cmdline.contains(b),
                "a secret is on the command line of {pid}"
            );
        }
    }
    assert!(
        pontoon_testtools::vm_passed(&r),
        "the guest test failed:\n{}",
        report()
    );
    assert!(up.stop().success());
    eprintln!("done after {:?}", started.elapsed());
}
