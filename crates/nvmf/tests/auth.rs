//! DH-HMAC-CHAP between the target and the crate's initiator over real
//! TCP: a host listed with a secret authenticates every queue before
//! anything else; the right secret gets I/O, a wrong one is refused with
//! AUTH_Failure1 "authentication failed", no secret gets nothing but
//! "Authentication Required" (no admin command, no I/O queue, no I/O);
//! bidirectional authentication works and a host refuses a controller
//! that answers with the wrong controller secret; keys made by
//! `nvme gen-dhchap-key` (nvme-cli) parse and authenticate.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use pontoon_nvmf::auth::{
    DhGroup, DhchapSecret, Explanation, HashId, HostAuth, HostAuthError, HostCredentials,
};
use pontoon_nvmf::command::{FABRICS_OPCODE, Sqe, Status, fctype};
use pontoon_nvmf::initiator::{
    ConnectParams, Controller, ControllerOptions, Error, Queue, hostid_for, reg,
};
use pontoon_nvmf::{SubsystemConfig, TargetConfig};

/// A host on the allow-list without a secret.
const OPEN_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-3333-4444-555555555555";

fn secret(byte: u8, transform: Option<HashId>) -> DhchapSecret {
    DhchapSecret::from_key(&[byte; 32], transform).expect("a 32-byte key")
}

/// `NQN` with `HOST` (authenticating with `auth`) and `OPEN_HOST` allowed.
fn subsystem(auth: HostAuth) -> SubsystemConfig {
    let mut s = default_subsystem();
    s.allowed_hosts.push(OPEN_HOST.into());
    s.auth = BTreeMap::from([(HOST.to_string(), auth)]);
    s
}

fn auth_target(auth: HostAuth) -> Target {
    target_with(
        TargetConfig::default(),
        vec![subsystem(auth)],
        &[("vol", VOL_SIZE)],
    )
}

fn options(creds: Option<HostCredentials>, io_queues: usize) -> ControllerOptions {
    let mut o = ControllerOptions::new(NQN, HOST);
    o.io_queues = io_queues;
    o.auth = creds;
    o
}

/// Writes, reads back and flushes through every I/O queue of `c`.
fn io_works(c: &mut Controller) {
    for i in 0..c.io_queue_count() {
        let data = pattern(i as u64, 2 * BLOCK);
        let lba = 100 + 8 * i as u64;
        c.io(i).write(1, lba, &data, false).expect("write");
        assert_eq!(c.io(i).read(1, lba, 2).expect("read"), data);
        c.io(i).flush(1).expect("flush");
    }
}

/// An admin queue connected as `HOST`, not authenticated.
fn bare_admin(addr: std::net::SocketAddr) -> Queue {
    Queue::connect(
        addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            ..Default::default()
        },
    )
    .expect("connect is answered")
}

#[test]
fn the_right_secret_authenticates_every_queue_and_gets_io() {
    let t = auth_target(HostAuth::new(secret(1, Some(HashId::Sha256))));
    let creds = HostCredentials::new(secret(1, Some(HashId::Sha256)));
    let mut c = Controller::connect_with(t.addr, options(Some(creds), 3)).expect("authenticates");
    let s = c
        .auth()
        .expect("the target asked the admin queue to authenticate");
    assert_eq!((s.hash, s.dhgroup), (HashId::Sha256, DhGroup::Ffdhe2048));
    assert!(!s.bidirectional);
    assert_eq!(c.io_queue_count(), 3);
    io_works(&mut c);
    // A host without a secret entry connects as before, without ATR.
    let mut open = Controller::connect_with(t.addr, {
        let mut o = ControllerOptions::new(NQN, OPEN_HOST);
        o.io_queues = 1;
        o
    })
    .expect("an allowed host without a secret connects");
    assert!(open.auth().is_none());
    io_works(&mut open);
    c.shutdown().expect("shutdown");
    t.stop();
}

#[test]
fn every_hash_and_dh_group_the_target_may_pick_works() {
    for (hash, group) in [
        (HashId::Sha256, DhGroup::Null),
        (HashId::Sha384, DhGroup::Ffdhe3072),
        (HashId::Sha512, DhGroup::Ffdhe4096),
        (HashId::Sha256, DhGroup::Ffdhe6144),
        (HashId::Sha512, DhGroup::Ffdhe8192),
    ] {
        let t = auth_target(HostAuth {
            hash: Some(hash),
            dhgroup: Some(group),
            ..HostAuth::new(secret(5, Some(HashId::Sha512)))
        });
        let creds = HostCredentials::new(secret(5, Some(HashId::Sha512)));
        let mut c = Controller::connect_with(t.addr, options(Some(creds), 1))
            .unwrap_or_else(|e| panic!("{hash}/{group}: {e}"));
        let s = c.auth().expect("authenticated");
        assert_eq!((s.hash, s.dhgroup), (hash, group));
        io_works(&mut c);
        t.stop();
    }
}

#[test]
fn a_wrong_secret_is_refused_with_failure1_authentication_failed() {
    let t = auth_target(HostAuth::new(secret(1, Some(HashId::Sha256))));
    for wrong in [
        secret(2, Some(HashId::Sha256)),
        // The same key bytes with another transformation: another key.
        secret(1, None),
    ] {
        let e = Controller::connect_with(t.addr, options(Some(HostCredentials::new(wrong)), 1))
            .expect_err("a wrong secret must be refused");
        match e {
            Error::Auth {
                qid: 0,
                error:
                    HostAuthError::Refused {
                        reason: 0x01,
                        explanation: Explanation::Failed,
                    },
            } => {}
            e => panic!("refused for another reason: {e}"),
        }
    }
    // The target serves the right secret afterwards.
    let creds = HostCredentials::new(secret(1, Some(HashId::Sha256)));
    let mut c = Controller::connect_with(t.addr, options(Some(creds), 1)).expect("authenticates");
    io_works(&mut c);
    t.stop();
}

#[test]
fn without_authentication_a_host_gets_no_admin_command_no_io_queue_and_no_io() {
    let t = auth_target(HostAuth::new(secret(1, None)));
    // The initiator itself refuses to go on without a secret.
    let e = Controller::connect_with(t.addr, options(None, 1)).expect_err("no secret");
    assert!(matches!(e, Error::AuthRequired), "{e}");

    // By hand: Connect answers with ATR; then nothing but AUTH works.
    let mut admin = bare_admin(t.addr);
    assert!(admin.auth_required(), "the Connect response lacks ATR");
    let cntlid = admin.cntlid();
    let e = admin
        .property_get(reg::CAP, true)
        .expect_err("a property read before authentication");
    assert_eq!(e.status(), Some(Status::AUTH_REQUIRED), "{e}");
    let e = admin
        .property_set(
            reg::CC,
            u64::from(reg::CC_EN | reg::CC_IOSQES | reg::CC_IOCQES),
            false,
        )
        .expect_err("enabling the controller before authentication");
    assert_eq!(e.status(), Some(Status::AUTH_REQUIRED), "{e}");
    let e = admin.keep_alive().expect_err("an admin command");
    assert_eq!(e.status(), Some(Status::AUTH_REQUIRED), "{e}");
    // AUTH commands with the wrong security protocol are refused.
    let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
    sqe.0[4] = fctype::AUTH_RECEIVE;
    sqe.0[41] = 1;
    sqe.0[42] = 1;
    sqe.0[43] = 0xEA;
    sqe.set_dword(11, 4096);
    let (cqe, _) = admin.call(sqe, None, 4096).expect("answered");
    assert_eq!(cqe.status, Status::INVALID_FIELD);
    // The controller never became ready: no I/O queue connects.
    let e = Queue::connect(
        t.addr,
        ConnectParams {
            subnqn: NQN.into(),
            hostnqn: HOST.into(),
            hostid: hostid_for(HOST),
            qid: 1,
            cntlid,
            kato_ms: 0,
            ..Default::default()
        },
    )
    .expect_err("an I/O queue of an unauthenticated controller");
    assert_eq!(e.status(), Some(Status::SEQUENCE_ERROR), "{e}");
    // A queue that never authenticates is closed after the handshake
    // timeout (30 s by default: not waited for here), and the host it
    // belongs to can still authenticate on a new connection.
    drop(admin);
    let creds = HostCredentials::new(secret(1, None));
    let mut c = Controller::connect_with(t.addr, options(Some(creds), 1)).expect("authenticates");
    io_works(&mut c);
    t.stop();
}

#[test]
fn an_io_queue_must_authenticate_itself_before_its_first_io() {
    let t = auth_target(HostAuth::new(secret(1, None)));
    let creds = HostCredentials::new(secret(1, None));
    // An authenticated, enabled controller with no I/O queue yet.
    let c = Controller::connect_with(t.addr, options(Some(creds.clone()), 0)).expect("admin");
    let mut q = Queue::handshake(t.addr, NO_DIGESTS, Duration::from_secs(10)).expect("handshake");
    q.fabrics_connect(&ConnectParams {
        subnqn: NQN.into(),
        hostnqn: HOST.into(),
        hostid: hostid_for(HOST),
        qid: 1,
        cntlid: c.cntlid(),
        kato_ms: 0,
        ..Default::default()
    })
    .expect("the I/O queue's Connect");
    assert!(q.auth_required(), "the I/O queue's Connect lacks ATR");
    let data = pattern(7, BLOCK);
    for attempt in [
        q.write(1, 10, &data, false),
        q.read(1, 10, 1).map(|_| ()),
        q.flush(1),
    ] {
        let e = attempt.expect_err("I/O before authentication");
        assert_eq!(e.status(), Some(Status::AUTH_REQUIRED), "{e}");
    }
    // Large writes are refused before any data is asked for (no R2T).
    let before = q.stats().r2ts;
    let big = pattern(8, 64 * BLOCK);
    let e = q.write(1, 10, &big, false).expect_err("a large write");
    assert_eq!(e.status(), Some(Status::AUTH_REQUIRED), "{e}");
    assert_eq!(
        q.stats().r2ts,
        before,
        "the target solicited data it refuses"
    );
    q.authenticate(&creds, HOST, NQN)
        .expect("the I/O queue authenticates");
    q.write(1, 10, &data, false)
        .expect("write after authentication");
    assert_eq!(q.read(1, 10, 1).expect("read"), data);
    t.stop();
}

#[test]
fn bidirectional_and_a_host_refuses_a_controller_with_the_wrong_secret() {
    let host_key = secret(1, Some(HashId::Sha256));
    let ctrl_key = secret(9, Some(HashId::Sha384));
    let t = auth_target(HostAuth {
        ctrl_secret: Some(ctrl_key.clone()),
        ..HostAuth::new(host_key.clone())
    });
    let mut creds = HostCredentials::new(host_key.clone());
    creds.ctrl_secret = Some(ctrl_key);
    let mut c = Controller::connect_with(t.addr, options(Some(creds.clone()), 2))
        .expect("bidirectional authentication");
    assert!(c.auth().expect("authenticated").bidirectional);
    io_works(&mut c);

    // The host expects another controller secret: the controller's answer
    // does not match it, and the host refuses the controller.
    creds.ctrl_secret = Some(secret(8, Some(HashId::Sha384)));
    let e = Controller::connect_with(t.addr, options(Some(creds.clone()), 1))
        .expect_err("a controller answering with the wrong secret");
    assert!(
        matches!(
            e,
            Error::Auth {
                qid: 0,
                error: HostAuthError::ControllerMismatch
            }
        ),
        "{e}"
    );

    // A target without a controller secret cannot answer a host that asks
    // for one: refused.
    let t2 = auth_target(HostAuth::new(host_key));
    let e = Controller::connect_with(t2.addr, options(Some(creds), 1)).expect_err("no ctrl key");
    assert!(
        matches!(
            e,
            Error::Auth {
                error: HostAuthError::Refused { .. },
                ..
            }
        ),
        "{e}"
    );
    // The first host's controller kept working throughout.
    io_works(&mut c);
    t.stop();
    t2.stop();
}

#[test]
fn adding_a_secret_ends_a_controller_that_did_not_authenticate() {
    let mut cfg = default_subsystem();
    let t = target_with(
        TargetConfig::default(),
        vec![cfg.clone()],
        &[("vol", VOL_SIZE)],
    );
    let mut c = Controller::connect_with(t.addr, options(None, 1)).expect("no auth yet");
    io_works(&mut c);
    cfg.auth = BTreeMap::from([(HOST.to_string(), HostAuth::new(secret(3, None)))]);
    t.subsystems.set(vec![cfg]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if c.keep_alive().is_err() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unauthenticated controller outlived the new secret"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let creds = HostCredentials::new(secret(3, None));
    let mut c = Controller::connect_with(t.addr, options(Some(creds), 1)).expect("authenticates");
    io_works(&mut c);
    t.stop();
}

/// Runs `nvme gen-dhchap-key ARGS` (nvme-cli; scripts/deps.sh installs it).
fn gen_dhchap_key(args: &[&str]) -> String {
    let out = Command::new("nvme")
        .arg("gen-dhchap-key")
        .args(args)
        .output()
        .expect("run `nvme gen-dhchap-key` (install nvme-cli: scripts/deps.sh test)");
    assert!(
        out.status.success(),
        "nvme gen-dhchap-key {args:?}: {out:?}"
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

#[test]
fn keys_made_by_nvme_gen_dhchap_key_parse_and_authenticate() {
    for (m, l) in [
        ("0", "32"),
        ("1", "32"),
        ("2", "48"),
        ("3", "64"),
        ("0", "48"),
    ] {
        let text = gen_dhchap_key(&["-m", m, "-l", l, "-n", HOST]);
        let key = DhchapSecret::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(key.key_len().to_string(), l);
        assert_eq!(key.transform_hash().map_or(0, |h| h.id()).to_string(), m);
        assert_eq!(key.expose().as_str(), text, "re-encoding changes the key");
        assert!(
            !key.to_string().contains(&text[10..20]),
            "Display leaks the key"
        );
        let ctrl = DhchapSecret::parse(&gen_dhchap_key(&["-m", m, "-l", l, "-n", NQN]))
            .expect("controller key");
        let t = auth_target(HostAuth {
            ctrl_secret: Some(ctrl.clone()),
            ..HostAuth::new(key.clone())
        });
        let mut creds = HostCredentials::new(key);
        creds.ctrl_secret = Some(ctrl);
        let mut c = Controller::connect_with(t.addr, options(Some(creds), 1))
            .unwrap_or_else(|e| panic!("-m {m} -l {l}: {e}"));
        assert!(c.auth().expect("authenticated").bidirectional);
        io_works(&mut c);
        t.stop();
    }
}
