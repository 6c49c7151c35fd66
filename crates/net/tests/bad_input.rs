//! Hostile and broken peers: each case checks the server's answer and the
//! close, and that another, well-behaved client keeps working throughout.

mod common;

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use compio::net::TcpListener;
use pontoon_net::{Limits, NetError, RpcConn, serve_conn};
use pontoon_proto::*;
use pontoon_types::{Epoch, Version};
use proptest::prelude::*;

async fn assert_healthy(conn: &RpcConn) {
    let (m, d) = conn.call(&read_req(3, 8, 64), None, SECOND).await.unwrap();
    assert_eq!(m, Message::Reply(Reply::ok(Version::new(0, 8))));
    assert_eq!(d.unwrap().as_slice(), &pattern(3, 8, 64)[..]);
}

fn quick_hello() -> Limits {
    Limits {
        hello_timeout: Duration::from_millis(200),
        ..Limits::default()
    }
}

#[compio::test]
async fn garbage_gets_a_malformed_reply_and_a_close_while_others_keep_working() {
    let (addr, _server) = start(Rc::new(Echo::default()), quick_hello()).await;
    let good = RpcConn::connect(addr, Role::Client, SECOND).await.unwrap();
    assert_healthy(&good).await;

    // Wrong magic.
    let mut c = Raw::connect(addr).await;
    let mut f = msg_bytes(41, &read_req(1, 0, 1), &[]);
    f[0] ^= 0xff;
    c.send(&f).await;
    assert!(c.expect_malformed(41).await.contains("magic"));
    assert!(c.closed_by_server().await);
    assert_healthy(&good).await;

    // Oversized meta_len and data_len (nothing more is sent: the server
    // must answer from the header alone).
    for (meta_len, data_len) in [(MAX_META + 1, 0), (0, MAX_DATA + 1), (u32::MAX, u32::MAX)] {
        let mut c = Raw::connect(addr).await;
        let h = FrameHeader {
            msg_type: MsgType::Write as u16,
            flags: 0,
            req_id: 42,
            meta_len,
            data_len,
        };
        c.send(&h.encode()).await;
        let why = c.expect_malformed(42).await;
        assert!(why.contains("exceeds"), "{why}");
        assert!(c.closed_by_server().await);
        assert_healthy(&good).await;
    }

    // Unknown message type.
    let mut c = Raw::connect(addr).await;
    c.send(&frame_bytes(999, 43, &[1, 2, 3], &[])).await;
    assert!(
        c.expect_malformed(43)
            .await
            .contains("unknown message type")
    );
    assert!(c.closed_by_server().await);

    // Malformed fields (a read request cut short, a reply with trailing bytes).
    let mut c = Raw::connect(addr).await;
    let meta = read_req(1, 0, 1).encode();
    c.send(&frame_bytes(MsgType::Read as u16, 44, &meta[..10], &[]))
        .await;
    assert!(c.expect_malformed(44).await.contains("read"));
    assert!(c.closed_by_server().await);
    let mut c = Raw::connect(addr).await;
    let mut meta = Message::Reply(Reply::ok(Version::ZERO)).encode();
    meta.push(0);
    c.send(&frame_bytes(MsgType::Reply as u16, 45, &meta, &[]))
        .await;
    c.expect_malformed(45).await;
    assert!(c.closed_by_server().await);
    assert_healthy(&good).await;

    // Truncated metadata, then end of stream.
    let mut c = Raw::connect(addr).await;
    let full = msg_bytes(46, &read_req(1, 0, 1), &[]);
    c.send(&full[..HEADER_LEN + 5]).await;
    c.shutdown_write();
    assert!(
        c.expect_malformed(46)
            .await
            .contains("ended inside a frame")
    );
    assert!(c.closed_by_server().await);

    // Truncated data, then end of stream.
    let mut c = Raw::connect(addr).await;
    let data = vec![5u8; 100_000];
    let full = msg_bytes(47, &write_req(1, 0, &data), &data);
    c.send(&full[..full.len() - 1]).await;
    c.shutdown_write();
    c.expect_malformed(47).await;
    assert!(c.closed_by_server().await);

    // Truncated header: nothing to answer, just a close.
    let mut c = Raw::connect(addr).await;
    c.send(&full[..10]).await;
    c.shutdown_write();
    assert!(c.closed_by_server().await);
    assert_healthy(&good).await;

    // Valid requests pipelined before the bad frame are still answered.
    let mut c = Raw::connect(addr).await;
    let mut bytes = msg_bytes(1, &slow_req(50), &[]);
    bytes.extend(msg_bytes(2, &read_req(9, 0, 10), &[]));
    bytes.extend(frame_bytes(999, 3, &[], &[]));
    c.send(&bytes).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (h, m, _) = c.read_frame().await.expect("three answers");
        ids.push(h.req_id);
        if h.req_id == 3 {
            assert!(matches!(m, Message::Reply(r) if r.status == Status::Malformed));
        }
    }
    ids.sort();
    assert_eq!(ids, [1, 2, 3]);
    assert!(c.closed_by_server().await);

    // A duplicate hello is refused but the connection stays in sync.
    let mut c = Raw::connect(addr).await;
    c.send(&hello_bytes(PROTOCOL_VERSION)).await;
    let (_, m, _) = c.read_frame().await.unwrap();
    assert!(matches!(m, Message::Reply(r) if r.status == Status::InvalidArgument));
    c.send(&msg_bytes(8, &read_req(2, 0, 3), &[])).await;
    let (h, _, d) = c.read_frame().await.unwrap();
    assert_eq!((h.req_id, d), (8, pattern(2, 0, 3)));

    assert_healthy(&good).await;
    assert!(!good.is_closed());
}

#[compio::test]
async fn the_first_frame_must_be_a_hello() {
    let (addr, _server) = start(Rc::new(Echo::default()), quick_hello()).await;
    let good = RpcConn::connect(addr, Role::Client, SECOND).await.unwrap();

    // A request instead of a hello: refused from the header, closed.
    let mut c = Raw::connect_bare(addr).await;
    c.send(&msg_bytes(5, &read_req(1, 0, 1), &[])).await;
    c.expect_malformed(5).await;
    assert!(c.closed_by_server().await);

    // A hello with data.
    let mut c = Raw::connect_bare(addr).await;
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        role: Role::Client,
        session: None,
    });
    c.send(&msg_bytes(6, &hello, &[1, 2, 3])).await;
    c.expect_malformed(6).await;
    assert!(c.closed_by_server().await);

    // Garbage instead of a hello.
    let mut c = Raw::connect_bare(addr).await;
    c.send(&[0xAB; 24]).await;
    c.expect_malformed(u64::from_le_bytes([0xAB; 8])).await;
    assert!(c.closed_by_server().await);

    // Another protocol version: an error reply, then a close.
    let mut c = Raw::connect_bare(addr).await;
    c.send(&hello_bytes(PROTOCOL_VERSION + 1)).await;
    let (h, m, _) = c.read_frame().await.unwrap();
    assert_eq!(h.req_id, 0);
    match m {
        Message::Reply(r) => {
            assert_eq!(r.status, Status::InvalidArgument);
            assert!(r.message.contains("version"), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(c.closed_by_server().await);

    // Silence: closed after the hello timeout.
    let mut c = Raw::connect_bare(addr).await;
    assert!(c.closed_by_server().await);

    // Half a hello, then silence.
    let mut c = Raw::connect_bare(addr).await;
    c.send(&hello_bytes(PROTOCOL_VERSION)[..26]).await;
    assert!(c.closed_by_server().await);

    assert_healthy(&good).await;
}

#[compio::test]
async fn a_refused_hello_is_reported_to_the_client() {
    // A fake server that refuses every hello.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = compio::runtime::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut c = Raw { stream };
        let _ = c.read_frame().await;
        let r = Reply::error(Status::ShuttingDown, Epoch(0), "go away");
        c.send(&msg_bytes(0, &Message::Reply(r), &[])).await;
    });
    let r = RpcConn::connect(addr, Role::Client, SECOND).await;
    match r {
        Err(NetError::HelloRefused(why)) => assert!(why.contains("go away"), "{why}"),
        other => panic!("{other:?}"),
    }
    fake.await.unwrap();
}

#[compio::test]
async fn a_broken_server_fails_the_client_not_the_process() {
    // A fake server that answers the hello, then sends garbage.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = compio::runtime::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut c = Raw { stream };
        let _ = c.read_frame().await;
        c.send(&msg_bytes(
            0,
            &Message::Reply(Reply::ok(Version::ZERO)),
            &[],
        ))
        .await;
        // Wait for two requests: answer the first with an undecodable
        // message (the stream stays in sync), the second with bad magic.
        let (h1, _, _) = c.read_frame().await.unwrap();
        let (h2, _, _) = c.read_frame().await.unwrap();
        c.send(&frame_bytes(MsgType::Reply as u16, h1.req_id, &[1, 2], &[]))
            .await;
        let mut bad = msg_bytes(h2.req_id, &Message::Reply(Reply::ok(Version::ZERO)), &[]);
        bad[1] ^= 1;
        c.send(&bad).await;
        c
    });
    let conn = RpcConn::connect(addr, Role::Client, SECOND).await.unwrap();
    let (q1, q2) = (read_req(1, 0, 1), read_req(2, 0, 1));
    let (r1, r2) = futures::join!(conn.call(&q1, None, SECOND), conn.call(&q2, None, SECOND));
    assert!(matches!(r1, Err(NetError::Proto(_))), "{r1:?}");
    assert!(matches!(r2, Err(NetError::Closed)), "{r2:?}");
    assert!(conn.is_closed());
    drop(fake.await.unwrap());
}

/// Feeds `bytes` (after a valid hello if `hello`) to `serve_conn` through a
/// real socket, reads whatever comes back until the server closes, and
/// checks that the server ends (without panicking) and answers sanely.
async fn feed(hello: bool, bytes: Vec<u8>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let limits = Limits {
        hello_timeout: Duration::from_millis(500),
        max_in_flight: 4,
        max_buffered_bytes: 1 << 20,
        ..Limits::default()
    };
    let server = async {
        let (stream, _) = listener.accept().await.unwrap();
        serve_conn(stream, Rc::new(Echo::default()), limits).await;
    };
    let client = async {
        let mut c = Raw::connect_bare(addr).await;
        if hello {
            c.send(&hello_bytes(PROTOCOL_VERSION)).await;
        }
        c.try_send(&bytes).await;
        c.shutdown_write();
        // Every answer is a well-formed frame; then end of stream.
        let mut answers = 0;
        while let Some((_, m, _)) = c.read_frame().await {
            assert!(
                matches!(m, Message::Reply(_) | Message::PeerInfo(_)),
                "{m:?}"
            );
            answers += 1;
            assert!(answers < 10_000);
        }
    };
    let both = futures::future::join(server, client);
    compio::time::timeout(Duration::from_secs(5), both)
        .await
        .expect("the server did not close the connection");
}

/// Bytes that look like frames: valid headers of any type with random
/// (often undecodable) fields, valid requests, and noise.
fn framed_garbage() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        // A plausible header with random metadata.
        (
            0u16..40,
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..80),
            0usize..3000
        )
            .prop_map(|(t, id, meta, data_len)| {
                let data = vec![0x5a; data_len];
                frame_bytes(t, id, &meta, &data)
            }),
        // A valid request.
        (any::<u64>(), 0u64..100_000, 0u32..5000).prop_map(|(id, off, len)| msg_bytes(
            id,
            &read_req(1, off, len),
            &[]
        )),
        (
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..5000)
        )
            .prop_map(|(id, d)| msg_bytes(id, &write_req(1, 0, &d), &d)),
        // A raw header with random lengths and type.
        proptest::array::uniform24(any::<u8>()).prop_map(|mut h| {
            h[..4].copy_from_slice(&MAGIC.to_le_bytes());
            h.to_vec()
        }),
        // Noise.
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    proptest::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_server(
        hello in any::<bool>(),
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..2048),
            framed_garbage(),
        ],
    ) {
        compio::runtime::Runtime::new().unwrap().block_on(feed(hello, bytes));
    }
}

#[compio::test]
async fn a_peer_that_stops_reading_is_disconnected() {
    let limits = Limits {
        idle_timeout: Some(Duration::from_millis(200)),
        ..Limits::default()
    };
    let (addr, _server) = start(Rc::new(Echo::default()), limits).await;
    let good = RpcConn::connect(addr, Role::Client, SECOND).await.unwrap();
    // Ask for 200 MiB of answers and read none of them.
    let mut c = Raw::connect(addr).await;
    let mut reqs = Vec::new();
    for i in 0..200 {
        reqs.extend(msg_bytes(i, &read_req(i, 0, 1 << 20), &[]));
    }
    c.send(&reqs).await;
    compio::time::sleep(Duration::from_millis(800)).await;
    // The good connection idled out meanwhile; a new one works.
    assert!(good.is_closed());
    let good = RpcConn::connect(addr, Role::Client, SECOND).await.unwrap();
    assert_healthy(&good).await;
    // Whatever was sent before the server gave up, then the end.
    let t = std::time::Instant::now();
    let mut answers = 0;
    while let Some((_, m, d)) = c.read_frame_or_end().await {
        assert!(matches!(m, Message::Reply(r) if r.status == Status::Ok));
        assert_eq!(d.len(), 1 << 20);
        answers += 1;
    }
    assert!(answers < 200, "the server never gave up");
    assert!(t.elapsed() < 3 * SECOND);
    // A timeout too large to represent means no timeout.
    let r = good.call(&slow_req(1), None, Duration::MAX).await.unwrap();
    assert_eq!(r.0, Message::Reply(Reply::ok(Version::new(0, 1))));
}
