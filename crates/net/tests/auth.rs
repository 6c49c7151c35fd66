//! Authenticated connections: mutual proof of the client entity's key
//! before any request, frames protected after it (authenticated and
//! secure modes), and every way a connection is refused.

mod common;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use common::*;
use compio::BufResult;
use compio::io::{AsyncRead, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use pontoon_buf::AlignedBuf;
use pontoon_net::auth::{StaticKeys, counters};
use pontoon_net::{
    AuthError, ClientAuth, ConnPool, EntityKey, EntityKeys, Frame, Handler, Key, KeyLookup, Limits,
    NetError, Peer, RpcConn, ServerAuth, WireMode, serve_auth,
};
use pontoon_proto::handshake::NONCE_LEN;
use pontoon_proto::*;
use pontoon_types::{Epoch, OsdId, Version};

const PROTECTED: [WireMode; 2] = [WireMode::Authenticated, WireMode::Secure];

fn key(b: u8) -> Key {
    Key::from_bytes([b; 32])
}

fn entity_keys(keys: &[(u32, u8)]) -> EntityKeys {
    EntityKeys {
        keys: keys
            .iter()
            .map(|&(generation, b)| EntityKey {
                generation,
                key: key(b),
            })
            .collect(),
        caps: Some(std::sync::Arc::new(format!("caps of {keys:?}"))),
    }
}

/// A key table that tests change while the server runs.
#[derive(Default)]
struct Table(RefCell<HashMap<String, EntityKeys>>);

impl Table {
    fn set(&self, entity: &str, keys: &[(u32, u8)]) {
        self.0
            .borrow_mut()
            .insert(entity.to_string(), entity_keys(keys));
    }
    fn revoke(&self, entity: &str) {
        self.0.borrow_mut().remove(entity);
    }
}

impl KeyLookup for Table {
    fn keys(&self, entity: &str) -> Option<EntityKeys> {
        self.0.borrow().get(entity).cloned()
    }
}

/// Answers reads with [`pattern`], echoes written data back after checking
/// its crc, and records who asked.
#[derive(Default)]
struct Who {
    peers: RefCell<Vec<Rc<Peer>>>,
}

impl Who {
    fn last(&self) -> Rc<Peer> {
        self.peers.borrow().last().cloned().expect("a request")
    }
}

impl Handler for Who {
    async fn handle(self: Rc<Self>, _peer: Role, _frame: Frame) -> (Message, Option<AlignedBuf>) {
        panic!("the server calls handle_from");
    }

    async fn handle_from(
        self: Rc<Self>,
        peer: Rc<Peer>,
        frame: Frame,
    ) -> (Message, Option<AlignedBuf>) {
        self.peers.borrow_mut().push(peer);
        match frame.msg {
            Message::Read(r) => (
                Message::Reply(Reply::ok(Version::new(0, r.offset))),
                Some(AlignedBuf::copy_from(&pattern(
                    r.target.oid.index,
                    r.offset,
                    r.len as usize,
                ))),
            ),
            Message::Write(w) => {
                let data = frame.data;
                let bytes = data.as_deref().unwrap_or(&[]);
                if crc32c::crc32c(bytes) != w.data_crc {
                    let e = Reply::error(Status::Checksum, Epoch(0), "data crc mismatch");
                    return (Message::Reply(e), None);
                }
                let v = Version::new(0, bytes.len() as u64);
                (Message::Reply(Reply::ok(v)), data)
            }
            _ => (Message::Reply(Reply::ok(Version::ZERO)), None),
        }
    }
}

struct Server {
    addr: SocketAddr,
    who: Rc<Who>,
    table: Rc<Table>,
    auth: Rc<ServerAuth>,
    _task: JoinHandle<()>,
}

async fn server(mode: WireMode, limits: Limits) -> Server {
    let table = Rc::new(Table::default());
    table.set("client.alice", &[(1, 0xa1)]);
    table.set("osd.7", &[(1, 0x07)]);
    let auth = Rc::new(ServerAuth::new(mode, "osd.1", table.clone()).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let who = Rc::new(Who::default());
    let task = compio::runtime::spawn(serve_auth(listener, who.clone(), limits, auth.clone()));
    Server {
        addr,
        who,
        table,
        auth,
        _task: task,
    }
}

fn alice(mode: WireMode) -> ClientAuth {
    ClientAuth::new(mode, "client.alice", key(0xa1)).unwrap()
}

async fn connect(addr: SocketAddr, auth: &ClientAuth) -> Result<Rc<RpcConn>, NetError> {
    RpcConn::connect_auth(addr, auth, SECOND, Limits::default()).await
}

/// Writes `data` and reads it back through `conn`, checking both answers.
async fn round_trip(conn: &RpcConn, index: u64, len: usize) {
    let data = pattern(index, 0, len);
    let (m, echoed) = conn
        .call(&write_req(index, 0, &data), Some(&data), 5 * SECOND)
        .await
        .unwrap();
    assert_eq!(m, Message::Reply(Reply::ok(Version::new(0, len as u64))));
    assert_eq!(
        echoed.as_deref().unwrap_or(&[]),
        &data[..],
        "{len} bytes echoed"
    );
    let (m, read) = conn
        .call(&read_req(index, 8, len as u32), None, 5 * SECOND)
        .await
        .unwrap();
    assert_eq!(m, Message::Reply(Reply::ok(Version::new(0, 8))));
    assert_eq!(read.as_deref().unwrap_or(&[]), &pattern(index, 8, len)[..]);
}

#[compio::test]
async fn the_right_key_authenticates_both_ways_and_carries_io_in_each_mode() {
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        let conn = connect(s.addr, &alice(mode)).await.unwrap();
        assert_eq!(conn.server_entity(), Some("osd.1"));
        assert_eq!(conn.mode(), mode);
        for len in [0, 1, 511, 513, 4096, 16 * 1024, 16 * 1024 + 1, 1 << 20] {
            round_trip(&conn, len as u64, len).await;
        }
        // Shared data (one buffer sent to several replicas) stays intact
        // for the next connection even though secure mode encrypts what
        // it sends.
        let shared = Rc::new(AlignedBuf::copy_from(&pattern(5, 0, 8192)));
        let conn2 = connect(s.addr, &alice(mode)).await.unwrap();
        for c in [&conn, &conn2] {
            let (m, echoed) = c
                .call_shared(&write_req(5, 0, &shared), Some(shared.clone()), SECOND)
                .await
                .unwrap();
            assert_eq!(
                m,
                Message::Reply(Reply::ok(Version::new(0, 8192))),
                "{mode}"
            );
            assert_eq!(echoed.as_deref(), Some(&shared[..]));
        }
        assert_eq!(&shared[..], &pattern(5, 0, 8192)[..]);
        // Many calls in flight at once, answered out of order.
        let calls = (0..64u64).map(|i| {
            let conn = conn.clone();
            async move { round_trip(&conn, 100 + i, [100, 4096, 70_000][i as usize % 3]).await }
        });
        futures::future::join_all(calls).await;
        let peer = s.who.last();
        assert_eq!(peer.entity.as_deref(), Some("client.alice"));
        assert_eq!(peer.role, Role::Client);
        assert_eq!(peer.mode, mode);
        assert_eq!(peer.key_generation, Some(1));
        let caps = peer.caps.clone().expect("caps");
        assert!(caps.downcast_ref::<String>().is_some());
    }
}

#[compio::test]
async fn an_osd_entity_is_that_osd_and_a_client_is_a_client_whatever_it_claims() {
    let s = server(WireMode::Secure, Limits::default()).await;
    let osd = ClientAuth::new(WireMode::Secure, "osd.7", key(0x07)).unwrap();
    let conn = connect(s.addr, &osd).await.unwrap();
    round_trip(&conn, 1, 10).await;
    let peer = s.who.last();
    assert_eq!(peer.role, Role::Osd(OsdId(7)));
    assert!(peer.is_proven_osd());
    // A client entity claiming the OSD role in its hello is refused.
    let mut raw = Raw::connect_bare(s.addr).await;
    let hello = AuthHello {
        version: PROTOCOL_VERSION,
        role: Role::Osd(OsdId(7)),
        session: None,
        mode: WireMode::Secure.code(),
        entity: "client.alice".into(),
        nonce: [0; NONCE_LEN],
    };
    raw.send(&frame_bytes(
        MsgType::AuthHello as u16,
        1,
        &hello.encode(),
        &[],
    ))
    .await;
    let (_, m, _) = raw.read_frame().await.expect("a refusal");
    match m {
        Message::Reply(r) => assert!(r.message.contains("may not claim the role"), "{r:?}"),
        other => panic!("{other:?}"),
    }
    assert!(raw.closed_by_server().await);
}

#[compio::test]
async fn no_key_a_wrong_key_and_an_unknown_entity_are_refused() {
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        // No credentials at all: today's plain hello.
        let r = RpcConn::connect(s.addr, Role::Client, SECOND).await;
        assert!(
            matches!(&r, Err(NetError::Auth(AuthError::Required(m))) if *m == mode),
            "{r:?}"
        );
        let r = RpcConn::connect(s.addr, Role::Osd(OsdId(7)), SECOND).await;
        assert!(
            matches!(&r, Err(NetError::Auth(AuthError::Required(_)))),
            "{r:?}"
        );
        // A wrong key.
        let wrong = ClientAuth::new(mode, "client.alice", key(0xa2)).unwrap();
        let r = connect(s.addr, &wrong).await;
        assert!(
            matches!(&r, Err(NetError::Auth(AuthError::BadProof(e))) if e == "client.alice"),
            "{r:?}"
        );
        let text = r.unwrap_err().to_string();
        assert!(text.starts_with("bad proof from client.alice"), "{text}");
        // An entity the cluster does not know.
        let mallory = ClientAuth::new(mode, "client.mallory", key(0xa1)).unwrap();
        let r = connect(s.addr, &mallory).await;
        assert!(
            matches!(&r, Err(NetError::Auth(AuthError::UnknownEntity(e))) if e == "client.mallory"),
            "{r:?}"
        );
        // An OSD key used for another OSD's name.
        let forged = ClientAuth::new(mode, "osd.3", key(0x07)).unwrap();
        let r = connect(s.addr, &forged).await;
        assert!(
            matches!(&r, Err(NetError::Auth(AuthError::UnknownEntity(_)))),
            "{r:?}"
        );
        assert!(s.who.peers.borrow().is_empty(), "no request was handled");
        // The honest client is still served.
        let conn = connect(s.addr, &alice(mode)).await.unwrap();
        round_trip(&conn, 1, 4096).await;
    }
    assert!(counters::BAD_PROOF.load(Relaxed) >= 2);
    assert!(counters::UNKNOWN_ENTITY.load(Relaxed) >= 4);
}

#[compio::test]
async fn a_revoked_entity_is_refused_from_its_next_connection() {
    let s = server(WireMode::Authenticated, Limits::default()).await;
    let conn = connect(s.addr, &alice(WireMode::Authenticated))
        .await
        .unwrap();
    round_trip(&conn, 1, 100).await;
    s.table.revoke("client.alice");
    let r = connect(s.addr, &alice(WireMode::Authenticated)).await;
    assert!(
        matches!(&r, Err(NetError::Auth(AuthError::UnknownEntity(_)))),
        "{r:?}"
    );
    // An entity with no valid key left is refused the same way.
    s.table.set("client.alice", &[]);
    let r = connect(s.addr, &alice(WireMode::Authenticated)).await;
    assert!(
        matches!(&r, Err(NetError::Auth(AuthError::UnknownEntity(_)))),
        "{r:?}"
    );
}

#[compio::test]
async fn mismatched_modes_are_refused_with_both_named() {
    let s = server(WireMode::Secure, Limits::default()).await;
    let r = connect(s.addr, &alice(WireMode::Authenticated)).await;
    assert!(
        matches!(
            &r,
            Err(NetError::Auth(AuthError::ModeMismatch {
                server: WireMode::Secure,
                client: WireMode::Authenticated
            }))
        ),
        "{r:?}"
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "wire mode mismatch: the server runs secure, the client asked for authenticated"
    );
    // A server of today (mode none) refuses a client that wants protection
    // rather than serve it unprotected.
    let (plain, _server) = start(Rc::new(Echo::default()), Limits::default()).await;
    let r = connect(plain, &alice(WireMode::Secure)).await;
    assert!(
        matches!(
            &r,
            Err(NetError::Auth(AuthError::ModeMismatch {
                server: WireMode::None,
                client: WireMode::Secure
            }))
        ),
        "{r:?}"
    );
    // Credentials in mode none: a plain hello with the entity's role.
    let conn = connect(plain, &alice(WireMode::None)).await.unwrap();
    assert_eq!(conn.mode(), WireMode::None);
    assert_eq!(conn.server_entity(), None);
    // The server's mode changes for new connections.
    s.auth.set_mode(WireMode::Authenticated);
    let conn = connect(s.addr, &alice(WireMode::Authenticated))
        .await
        .unwrap();
    round_trip(&conn, 1, 10).await;
}

#[compio::test]
async fn during_a_rotation_both_keys_are_accepted_and_only_the_new_one_after() {
    let s = server(WireMode::Secure, Limits::default()).await;
    s.table.set("client.alice", &[(2, 0xb2), (1, 0xa1)]);
    let old = connect(s.addr, &alice(WireMode::Secure)).await.unwrap();
    round_trip(&old, 1, 100).await;
    assert_eq!(s.who.last().key_generation, Some(1));
    let new_auth = ClientAuth::new(WireMode::Secure, "client.alice", key(0xb2)).unwrap();
    let new = connect(s.addr, &new_auth).await.unwrap();
    round_trip(&new, 2, 100).await;
    assert_eq!(s.who.last().key_generation, Some(2));
    // Rotation finished: the old key no longer opens a connection; the
    // connection it opened before goes on.
    s.table.set("client.alice", &[(2, 0xb2)]);
    let r = connect(s.addr, &alice(WireMode::Secure)).await;
    assert!(
        matches!(&r, Err(NetError::Auth(AuthError::BadProof(_)))),
        "{r:?}"
    );
    round_trip(&old, 3, 100).await;
    // A pool picks the new key up for its next connection.
    let pool = ConnPool::with_auth(alice(WireMode::Secure), SECOND, Limits::default());
    assert!(pool.get(s.addr).await.is_err());
    pool.set_auth(new_auth);
    let (m, _) = pool.call(s.addr, &slow_req(0), None, SECOND).await.unwrap();
    assert_eq!(m, Message::Reply(Reply::ok(Version::ZERO)));
}

#[compio::test]
async fn a_pool_reconnects_and_keeps_its_session_in_every_mode() {
    for mode in [WireMode::None, WireMode::Authenticated, WireMode::Secure] {
        let s = server(mode, Limits::default()).await;
        let pool = ConnPool::with_auth(alice(mode), SECOND, Limits::default());
        let data = pattern(1, 0, 4096);
        let (m, _) = pool
            .call(s.addr, &write_req(1, 0, &data), Some(&data), SECOND)
            .await
            .unwrap();
        assert_eq!(m, Message::Reply(Reply::ok(Version::new(0, 4096))));
        let first = pool.get(s.addr).await.unwrap();
        // The connection breaks: the pool's next call opens (and
        // authenticates) a new one.
        first.close();
        let (m, _) = pool
            .call(s.addr, &write_req(1, 0, &data), Some(&data), SECOND)
            .await
            .unwrap();
        assert_eq!(
            m,
            Message::Reply(Reply::ok(Version::new(0, 4096))),
            "{mode}"
        );
        let second = pool.get(s.addr).await.unwrap();
        assert!(!Rc::ptr_eq(&first, &second));
        pool.close(s.addr);
        round_trip(&pool.get(s.addr).await.unwrap(), 2, 20_000).await;
        let expect = match mode {
            WireMode::None => None,
            _ => Some("client.alice"),
        };
        assert_eq!(s.who.last().entity.as_deref(), expect, "{mode}");
    }
}

/// A man in the middle on loopback: forwards both ways, records what it
/// sees, and can flip a bit or replay a chunk on request.
#[derive(Default)]
struct Tap {
    seen: RefCell<Vec<u8>>,
    /// Flip the last bit of the next chunk client → server / server → client.
    flip_up: Cell<bool>,
    flip_down: Cell<bool>,
    /// Send the next chunk client → server twice.
    replay_up: Cell<bool>,
}

async fn pump(mut from: TcpStream, mut to: TcpStream, tap: Rc<Tap>, up: bool) {
    loop {
        let buf = Vec::with_capacity(64 * 1024);
        let BufResult(res, mut buf) = from.read(buf).await;
        match res {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        tap.seen.borrow_mut().extend_from_slice(&buf);
        let flip = if up { &tap.flip_up } else { &tap.flip_down };
        if flip.replace(false) {
            let last = buf.len() - 1;
            buf[last] ^= 1;
        }
        let twice = up && tap.replay_up.replace(false);
        if twice {
            let BufResult(res, _) = to.write_all(buf.clone()).await;
            if res.is_err() {
                break;
            }
        }
        let BufResult(res, _) = to.write_all(buf).await;
        if res.is_err() {
            break;
        }
    }
    let _ = socket2::SockRef::from(&to).shutdown(std::net::Shutdown::Write);
}

async fn tap(upstream: SocketAddr) -> (SocketAddr, Rc<Tap>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tap = Rc::new(Tap::default());
    let t = tap.clone();
    let task = compio::runtime::spawn(async move {
        let mut pumps = Vec::new();
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(upstream).await.unwrap();
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            pumps.push(compio::runtime::spawn(pump(
                client.clone(),
                server.clone(),
                t.clone(),
                true,
            )));
            pumps.push(compio::runtime::spawn(pump(
                server,
                client,
                t.clone(),
                false,
            )));
        }
    });
    (addr, tap, task)
}

async fn wait_closed(conn: &RpcConn) {
    let t = Instant::now();
    while !conn.is_closed() {
        assert!(t.elapsed() < 5 * SECOND, "the connection stayed open");
        compio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[compio::test]
async fn a_tampered_request_closes_the_connection_with_an_integrity_error() {
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        let (addr, tap, _t) = tap(s.addr).await;
        let conn = connect(addr, &alice(mode)).await.unwrap();
        round_trip(&conn, 1, 4096).await;
        let handled = s.who.peers.borrow().len();
        let before = counters::INTEGRITY_FAILURES.load(Relaxed);
        tap.flip_up.set(true);
        let data = pattern(2, 0, 4096);
        let r = conn
            .call(&write_req(2, 0, &data), Some(&data), 5 * SECOND)
            .await;
        match r {
            Ok((Message::Reply(r), _)) => {
                assert_eq!(r.status, Status::Malformed, "{mode}");
                assert!(r.message.contains("integrity check"), "{}", r.message);
            }
            Err(NetError::Closed) => {}
            other => panic!("{mode}: {other:?}"),
        }
        wait_closed(&conn).await;
        assert_eq!(
            s.who.peers.borrow().len(),
            handled,
            "{mode}: the tampered write was handled"
        );
        assert!(counters::INTEGRITY_FAILURES.load(Relaxed) > before);
    }
}

#[compio::test]
async fn a_tampered_answer_fails_the_client_with_an_integrity_error() {
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        let (addr, tap, _t) = tap(s.addr).await;
        let conn = connect(addr, &alice(mode)).await.unwrap();
        round_trip(&conn, 1, 4096).await;
        tap.flip_down.set(true);
        let r = conn.call(&read_req(1, 0, 4096), None, 5 * SECOND).await;
        assert!(
            matches!(r, Err(NetError::Auth(AuthError::Integrity))),
            "{mode}: {r:?}"
        );
        assert_eq!(
            r.unwrap_err().to_string(),
            "a frame failed its integrity check: tampered with or corrupted in transit"
        );
        assert!(conn.is_closed());
    }
}

#[compio::test]
async fn a_replayed_request_is_refused() {
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        let (addr, tap, _t) = tap(s.addr).await;
        let conn = connect(addr, &alice(mode)).await.unwrap();
        round_trip(&conn, 1, 100).await;
        let handled = s.who.peers.borrow().len();
        tap.replay_up.set(true);
        let data = pattern(2, 0, 4096);
        let r = conn
            .call(&write_req(2, 0, &data), Some(&data), 5 * SECOND)
            .await;
        assert!(r.is_ok(), "{mode}: the original arrives first: {r:?}");
        wait_closed(&conn).await;
        assert_eq!(
            s.who.peers.borrow().len(),
            handled + 1,
            "{mode}: the replayed copy was handled"
        );
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[compio::test]
async fn in_secure_mode_the_wire_never_shows_the_plaintext() {
    let secret = b"the launch codes are 0000 -- ".repeat(200);
    for mode in PROTECTED {
        let s = server(mode, Limits::default()).await;
        let (addr, tap, _t) = tap(s.addr).await;
        let conn = connect(addr, &alice(mode)).await.unwrap();
        for len in [20usize, 4096, secret.len()] {
            let data = &secret[..len];
            let (m, echoed) = conn
                .call(&write_req(9, 0, data), Some(data), SECOND)
                .await
                .unwrap();
            assert_eq!(m, Message::Reply(Reply::ok(Version::new(0, len as u64))));
            assert_eq!(echoed.as_deref(), Some(data));
        }
        let seen = tap.seen.borrow();
        let shown = contains(&seen, b"launch codes");
        // The request's fields too: the entity name shows in the
        // handshake, the object ids do not.
        match mode {
            WireMode::Secure => assert!(!shown, "plaintext on the wire in secure mode"),
            _ => assert!(shown, "the tap saw nothing: the check proves nothing"),
        }
        assert!(contains(&seen, b"client.alice"));
    }
}

#[compio::test]
async fn a_server_that_does_not_hold_our_key_is_not_trusted() {
    // An impostor: answers the hello with a challenge and any proof.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _impostor = compio::runtime::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut raw = Raw { stream };
        let _hello = raw_frame(&mut raw).await;
        let ch = AuthChallenge {
            mode: WireMode::Secure.code(),
            entity: "osd.1".into(),
            nonce: [7; NONCE_LEN],
        };
        raw.send(&frame_bytes(
            MsgType::AuthChallenge as u16,
            0,
            &ch.encode(),
            &[],
        ))
        .await;
        let _proof = raw_frame(&mut raw).await;
        let p = AuthProof { proof: [0; 32] };
        raw.send(&frame_bytes(MsgType::AuthProof as u16, 0, &p.encode(), &[]))
            .await;
        compio::time::sleep(SECOND).await;
    });
    let r = connect(addr, &alice(WireMode::Secure)).await;
    assert!(
        matches!(&r, Err(NetError::Auth(AuthError::ServerProof(s))) if s == "osd.1"),
        "{r:?}"
    );
}

async fn raw_frame(raw: &mut Raw) -> (FrameHeader, Vec<u8>) {
    let mut hdr = [0u8; HEADER_LEN];
    let BufResult(res, b) =
        compio::io::AsyncReadExt::read_exact(&mut raw.stream, vec![0u8; HEADER_LEN]).await;
    res.unwrap();
    hdr.copy_from_slice(&b);
    let h = FrameHeader::decode(&hdr).unwrap();
    let BufResult(res, meta) =
        compio::io::AsyncReadExt::read_exact(&mut raw.stream, vec![0u8; h.meta_len as usize]).await;
    res.unwrap();
    (h, meta)
}

#[compio::test]
async fn a_stalled_or_oversized_handshake_is_cut_short() {
    let limits = Limits {
        hello_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let s = server(WireMode::Secure, limits).await;
    // An AuthHello, then silence where the proof should be.
    let mut raw = Raw::connect_bare(s.addr).await;
    let hello = AuthHello {
        version: PROTOCOL_VERSION,
        role: Role::Client,
        session: None,
        mode: WireMode::Secure.code(),
        entity: "client.alice".into(),
        nonce: [0; NONCE_LEN],
    };
    raw.send(&frame_bytes(
        MsgType::AuthHello as u16,
        1,
        &hello.encode(),
        &[],
    ))
    .await;
    let (h, _) = raw_frame(&mut raw).await;
    assert_eq!(h.msg_type, MsgType::AuthChallenge as u16);
    let t = Instant::now();
    assert!(raw.closed_by_server().await);
    assert!(t.elapsed() < 2 * SECOND);
    // A handshake frame announcing more than a handshake needs is refused
    // on its header.
    let mut raw = Raw::connect_bare(s.addr).await;
    let mut big = frame_bytes(MsgType::AuthHello as u16, 2, &[], &[]);
    big[16..20].copy_from_slice(&100_000u32.to_le_bytes());
    raw.send(&big).await;
    let text = raw.expect_malformed(2).await;
    assert!(text.contains("expected a Hello first"), "{text}");
    // A garbled proof is refused as a handshake error.
    let mut raw = Raw::connect_bare(s.addr).await;
    raw.send(&frame_bytes(
        MsgType::AuthHello as u16,
        3,
        &hello.encode(),
        &[],
    ))
    .await;
    let _challenge = raw_frame(&mut raw).await;
    raw.send(&frame_bytes(MsgType::AuthProof as u16, 4, &[1, 2, 3], &[]))
        .await;
    let text = raw.expect_malformed(4).await;
    assert!(text.contains("authentication handshake"), "{text}");
    assert!(s.who.peers.borrow().is_empty());
}

#[compio::test]
async fn handshake_messages_outside_the_handshake_are_refused() {
    let s = server(WireMode::Authenticated, Limits::default()).await;
    let conn = connect(s.addr, &alice(WireMode::Authenticated))
        .await
        .unwrap();
    round_trip(&conn, 1, 10).await;
    // Mode none: an AuthHello after the hello is malformed.
    let (plain, _server) = start(Rc::new(Echo::default()), Limits::default()).await;
    let mut raw = Raw::connect(plain).await;
    raw.send(&frame_bytes(MsgType::AuthProof as u16, 5, &[0; 32], &[]))
        .await;
    let text = raw.expect_malformed(5).await;
    assert!(text.contains("outside the handshake"), "{text}");
    let _ = StaticKeys::default();
}
