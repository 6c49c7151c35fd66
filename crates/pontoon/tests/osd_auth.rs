//! The binary protocol in the cluster's `authenticated` mode, as `pontoon
//! up --ms-mode authenticated` runs it: hostile connections to every OSD
//! port are refused — no key, a claimed role without a key, an unknown
//! entity, a wrong key, a removed entity, a client posing as an OSD with
//! the admin's key, a real client sending OSD requests, an OSD entity that
//! is not in the map — and clients are held to their caps (read-only,
//! one pool), while an honest client (fio through the NBD gateway,
//! writing and verifying) carries on. Then keys rotate under that load
//! (the gateway's, through its keyring file, and an OSD's) and removing an
//! entity cuts its open connection: no honest I/O fails.
//!
//! Needs etcd-server and fio (`scripts/deps.sh test`).

mod common;

use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pontoon_cluster::ClusterMap;
use pontoon_cluster::auth::{AuthKey, EntityName, Keyring};
use pontoon_net::{ClientAuth, Key, Limits, NetError, Role, RpcConn, WireMode};
use pontoon_proto::{Message, ReadReq, Status, Target, WriteReq};
use pontoon_types::ObjectId;

/// Longest one probe may take.
const PROBE: Duration = Duration::from_secs(10);

/// The cluster map, read as the admin.
fn load_map(dir: &Path, etcd: &str) -> ClusterMap {
    let auth = etcd_auth(dir, "admin");
    tokio::runtime::Runtime::new()
        .expect("tokio")
        .block_on(async {
            let store =
                pontoon_cluster::MapStore::connect_with(&[etcd.to_string()], "pontoon", &auth)
                    .await
                    .expect("etcd");
            store.load().await.expect("map")
        })
}

/// Object 0 of `volume`: its target and primary's address.
fn object0(map: &ClusterMap, volume: &str) -> (Target, SocketAddr) {
    let v = map.volume_by_name(volume).expect("volume");
    let oid = ObjectId::new(v.id.0, 0);
    let pg = map.pg_of_object(&oid).expect("pg");
    let primary = map.primary(pg).expect("primary");
    (
        Target {
            pg,
            epoch: map.pgs[&pg].interval,
            oid,
        },
        map.addr_of(primary, pg).expect("addr"),
    )
}

/// Every shard address of every OSD.
fn osd_ports(map: &ClusterMap) -> Vec<SocketAddr> {
    map.osds.values().flat_map(|o| o.addrs.clone()).collect()
}

/// The key of `entity` in the local cluster's keyring of that name.
fn key_of(dir: &Path, entity: &str) -> Key {
    let name = EntityName::parse(entity).unwrap();
    let ring = Keyring::load(&dir.join(format!("keys/{entity}.keyring"))).expect("keyring");
    Key::from_bytes(*ring.get(&name).expect("entry").key.as_bytes())
}

fn auth(entity: &str, key: Key) -> ClientAuth {
    ClientAuth::new(WireMode::Authenticated, entity, key).unwrap()
}

/// How a probe ended: refused at connect, or the status of the answer.
#[derive(Debug)]
enum Outcome {
    Refused(String),
    Answer(Status, String),
}

/// Connects as `who` (a claimed role, or credentials), then sends each
/// message on the one connection.
fn probe(
    addr: SocketAddr,
    who: Result<Role, ClientAuth>,
    msgs: &[(Message, Option<Vec<u8>>)],
) -> Vec<Outcome> {
    compio::runtime::Runtime::new()
        .expect("compio")
        .block_on(async {
            let conn = match &who {
                Ok(role) => RpcConn::connect(addr, *role, PROBE).await,
                Err(a) => RpcConn::connect_auth(addr, a, PROBE, Limits::default()).await,
            };
            let conn = match conn {
                Ok(c) => c,
                Err(e) => return vec![Outcome::Refused(e.to_string())],
            };
            let mut out = Vec::new();
            for (m, data) in msgs {
                out.push(match conn.call(m, data.as_deref(), PROBE).await {
                    Ok((Message::Reply(r), _)) => Outcome::Answer(r.status, r.message.clone()),
                    Ok((m, _)) => Outcome::Answer(Status::Ok, format!("{:?}", m.msg_type())),
                    Err(NetError::Closed) => Outcome::Refused("closed".into()),
                    Err(e) => Outcome::Refused(e.to_string()),
                });
            }
            out
        })
}

fn read(t: Target) -> (Message, Option<Vec<u8>>) {
    (
        Message::Read(ReadReq {
            target: t,
            offset: 0,
            len: 4096,
            snap: None,
        }),
        None,
    )
}

fn write(t: Target) -> (Message, Option<Vec<u8>>) {
    let data = vec![0x5a; 4096];
    let crc = crc32c::crc32c(&data);
    (
        Message::Write(WriteReq {
            target: t,
            offset: 0,
            data_crc: crc,
            fua: false,
            fill: false,
            snap_seq: 0,
        }),
        Some(data),
    )
}

fn refused(o: &[Outcome], why: &str) {
    match o {
        [Outcome::Refused(e)] => {
            assert!(e.contains(why), "refused, but {e:?} does not say {why:?}")
        }
        other => panic!("expected a refusal saying {why:?}, got {other:?}"),
    }
}

fn denied(o: &Outcome, why: &str) {
    match o {
        Outcome::Answer(Status::PermissionDenied, m) => {
            assert!(m.contains(why), "{m:?} does not say {why:?}")
        }
        other => panic!("expected PermissionDenied saying {why:?}, got {other:?}"),
    }
}

fn allowed(o: &Outcome) {
    match o {
        Outcome::Answer(s, m) => assert!(
            !matches!(s, Status::PermissionDenied | Status::KeyRevoked),
            "refused: {s:?} {m}"
        ),
        Outcome::Refused(e) => panic!("connection refused: {e}"),
    }
}

/// fio rounds through the gateway (16 MiB written and verified each)
/// until `stop`. Returns (passed, report) per round.
fn honest_io(nbd: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(bool, String)>> {
    std::thread::spawn(move || {
        let mut runs = Vec::new();
        for round in 0..40 {
            let (_, _, passed, report) = fio_nbd_round(&nbd, "v", 2000 + round);
            runs.push((passed, report));
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        runs
    })
}

#[test]
fn osds_refuse_strangers_and_hold_clients_to_their_caps() {
    let (_tmp, dir) = tempdir("pontoon-osdauth-");
    let nbd = format!("127.0.0.1:{}", free_port());
    let mut up = Up::start_with(&dir, 3, &["--ms-mode", "authenticated", "--nbd", &nbd]);
    let etcd = up.etcd();
    assert_eq!(
        ok(&dir, &["config", "get", "ms_mode"]).trim(),
        "authenticated"
    );
    ok(&dir, &["pool", "create", "a", "--size", "3", "--pgs", "8"]);
    ok(&dir, &["pool", "create", "b", "--size", "3", "--pgs", "8"]);
    ok(
        &dir,
        &["volume", "create", "v", "--pool", "a", "--size", "64M"],
    );
    ok(
        &dir,
        &["volume", "create", "w", "--pool", "b", "--size", "16M"],
    );
    wait_status(&dir, "16 PGs active+clean", |s| {
        s["pgs"]["states"]["active+clean"].as_u64() == Some(16)
    });
    for (entity, caps) in [
        ("client.ro", "allow r pool=a"),
        ("client.a", "allow rw pool=a"),
        ("client.gone", "allow rw"),
        ("osd.7", "allow profile osd"),
    ] {
        let out = dir.join(format!("keys/{entity}.keyring"));
        let mut args = vec!["auth", "add", entity];
        args.extend(caps.split(' '));
        args.extend(["-o", out.to_str().unwrap()]);
        ok(&dir, &args);
    }
    ok(&dir, &["auth", "rm", "client.gone"]);
    let map = load_map(&dir, &etcd);
    let (va, primary_a) = object0(&map, "v");
    let (vb, primary_b) = object0(&map, "w");

    let stop = Arc::new(AtomicBool::new(false));
    let io = honest_io(nbd.clone(), stop.clone());
    std::thread::sleep(Duration::from_millis(500));

    // Every OSD port refuses connections that prove nothing or the wrong thing.
    let admin = key_of(&dir, "client.admin");
    for port in osd_ports(&map) {
        refused(
            &probe(port, Ok(Role::Client), &[read(va)]),
            "authentication required",
        );
        refused(
            &probe(port, Ok(Role::Osd(pontoon_types::OsdId(0))), &[read(va)]),
            "authentication required",
        );
        refused(
            &probe(
                port,
                Err(auth(
                    "client.stranger",
                    Key::from_bytes(*AuthKey::generate().as_bytes()),
                )),
                &[read(va)],
            ),
            "unknown entity",
        );
        refused(
            &probe(
                port,
                Err(auth(
                    "client.admin",
                    Key::from_bytes(*AuthKey::generate().as_bytes()),
                )),
                &[read(va)],
            ),
            "bad proof",
        );
        refused(
            &probe(
                port,
                Err(auth("client.gone", key_of(&dir, "client.gone"))),
                &[read(va)],
            ),
            "unknown entity",
        );
        // posing as an OSD with a client's key
        refused(
            &probe(port, Err(auth("osd.0", admin.clone())), &[read(va)]),
            "bad proof",
        );
        // a real client may not send OSD requests; nor may an OSD entity the map does not have
        let o = probe(
            port,
            Err(auth("client.a", key_of(&dir, "client.a"))),
            &[(Message::Pull(va), None)],
        );
        denied(&o[0], "may not send OSD requests");
        let o = probe(
            port,
            Err(auth("osd.7", key_of(&dir, "osd.7"))),
            &[(Message::Pull(va), None)],
        );
        denied(&o[0], "not an OSD of the map");
    }

    // Caps: read-only reads but cannot write; one pool's client cannot touch another's.
    let o = probe(
        primary_a,
        Err(auth("client.ro", key_of(&dir, "client.ro"))),
        &[read(va), write(va)],
    );
    allowed(&o[0]);
    denied(&o[1], "client.ro may not write volume a/v");
    let o = probe(
        primary_a,
        Err(auth("client.a", key_of(&dir, "client.a"))),
        &[write(va), read(va)],
    );
    allowed(&o[0]);
    allowed(&o[1]);
    let o = probe(
        primary_b,
        Err(auth("client.a", key_of(&dir, "client.a"))),
        &[read(vb), write(vb)],
    );
    denied(&o[0], "client.a may not read volume b/w");
    denied(&o[1], "client.a may not write volume b/w");
    // the CLI's client library says so in one line
    let ro = dir.join("keys/client.ro.keyring");
    let err = fails(
        &dir,
        &[
            "bench",
            "--volume",
            "v",
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--qd",
            "1",
            "--time",
            "1",
            "--name",
            "client.ro",
            "--keyring",
            ro.to_str().unwrap(),
        ],
        1,
    );
    assert!(
        err.contains("permission denied") && err.contains("client.ro may not write volume a/v"),
        "{err}"
    );

    // Removing an entity cuts its open connection at its next request.
    let tmp_key = dir.join("keys/client.tmp.keyring");
    ok(
        &dir,
        &[
            "auth",
            "add",
            "client.tmp",
            "allow",
            "rw",
            "-o",
            tmp_key.to_str().unwrap(),
        ],
    );
    let tmp = auth("client.tmp", key_of(&dir, "client.tmp"));
    let revoked = compio::runtime::Runtime::new().unwrap().block_on(async {
        // the OSD learns of the new entity with its next map
        let deadline = Instant::now() + Duration::from_secs(15);
        let conn = loop {
            match RpcConn::connect_auth(primary_a, &tmp, PROBE, Limits::default()).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => panic!("connect as client.tmp: {e}"),
                Err(_) => compio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let (m, d) = read(va);
        let before = conn.call(&m, d.as_deref(), PROBE).await.expect("read");
        ok(&dir, &["auth", "rm", "client.tmp"]);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let after = conn.call(&m, d.as_deref(), PROBE).await;
            match &after {
                Ok((Message::Reply(r), _)) if r.status == Status::KeyRevoked => {
                    break (before, after);
                }
                _ if Instant::now() > deadline => break (before, after),
                _ => compio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    assert!(
        matches!(&revoked.0.0, Message::Reply(r) if r.status != Status::PermissionDenied),
        "{:?}",
        revoked.0.0
    );
    assert!(
        matches!(&revoked.1, Ok((Message::Reply(r), _)) if r.status == Status::KeyRevoked && r.message.contains("removed")),
        "{:?}",
        revoked.1.as_ref().map(|a| &a.0)
    );

    // Keys rotate under load: the gateway's (it rereads its keyring file)
    // and an OSD's (it takes its own from the map); then the old ones end.
    let gw_ring = dir.join("keys/gateway.nbd.keyring");
    let before = std::fs::read_to_string(&gw_ring).unwrap();
    ok(
        &dir,
        &[
            "auth",
            "rotate",
            "gateway.nbd",
            "--grace",
            "1h",
            "-o",
            gw_ring.to_str().unwrap(),
        ],
    );
    assert_ne!(
        std::fs::read_to_string(&gw_ring).unwrap(),
        before,
        "the keyring holds the new key"
    );
    ok(&dir, &["auth", "rotate", "osd.1", "--grace", "1h"]);
    std::thread::sleep(Duration::from_secs(3));
    ok(&dir, &["auth", "rotate", "gateway.nbd", "--finish"]);
    ok(&dir, &["auth", "rotate", "osd.1", "--finish"]);
    std::thread::sleep(Duration::from_secs(6));
    stop.store(true, Ordering::Relaxed);
    let runs = io.join().expect("fio thread");
    assert!(runs.len() >= 2, "only {} fio rounds", runs.len());
    for (i, (passed, report)) in runs.iter().enumerate() {
        assert!(passed, "honest fio round {i} failed: {report}");
    }
    // The cluster stayed whole, and its OSDs counted what they refused.
    wait_status(&dir, "16 PGs active+clean", |s| {
        s["pgs"]["states"]["active+clean"].as_u64() == Some(16)
    });
    // What the OSDs refused is counted on their /metrics (the counters
    // are per process: one OSD's body holds one sample per reason).
    let status = json(&dir, &["status", "--json"]);
    let (mut denied_n, mut bad_proof, mut unknown) = (0u64, 0u64, 0u64);
    for d in status["daemons"].as_array().unwrap() {
        if d["kind"] != "osd" {
            continue;
        }
        let addr = d["metrics"].as_str().unwrap();
        let (_, body) =
            http_get(addr, "/metrics").unwrap_or_else(|| panic!("no metrics from {addr}"));
        let sum = |series: &str, label: &str| -> u64 {
            body.lines()
                .filter(|l| l.starts_with(series) && l.contains(label))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        denied_n += sum("pontoon_osd_requests_denied_total{", "");
        bad_proof += sum(
            "pontoon_osd_connections_refused_total{",
            "reason=\"bad_proof\"",
        );
        unknown += sum(
            "pontoon_osd_connections_refused_total{",
            "reason=\"unknown_entity\"",
        );
    }
    // per port: two bad proofs (wrong key, posing as osd.0), two unknown
    // (stranger, removed); two denied requests per port plus the caps ones
    let ports = osd_ports(&map).len() as u64;
    assert!(bad_proof >= 2 * ports, "bad_proof {bad_proof}");
    assert!(unknown >= 2 * ports, "unknown_entity {unknown}");
    assert!(denied_n >= 2 * ports + 4, "denied {denied_n}");
    eprintln!("{} honest fio rounds, all verified", runs.len());
    up.stop();
}
