//! Sessions: once a newer connection of a client's session has said hello,
//! the server dispatches nothing more from the session's older connections,
//! so a request left unread on an abandoned connection can never be applied
//! after the client's retry of it.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use compio::io::AsyncWriteExt;
use compio::net::TcpListener;
use pontoon_net::{ConnPool, Limits, NetError};
use pontoon_proto::*;
use pontoon_types::Version;

fn session(id: u64, seq: u64) -> Option<Session> {
    Some(Session { id, seq })
}

/// One request in flight per connection: a second one waits unread.
fn one_at_a_time() -> Limits {
    Limits {
        max_in_flight: 1,
        ..Limits::default()
    }
}

#[compio::test]
async fn a_request_left_unread_on_a_superseded_connection_is_never_handled() {
    let echo = Rc::new(Echo::default());
    let (addr, _server) = start(echo.clone(), one_at_a_time()).await;

    let mut old = Raw::connect_in(addr, session(9, 1)).await;
    // The first request holds the connection's only slot for 300 ms; the
    // write behind it stays unread until then.
    old.send(&msg_bytes(1, &slow_req(300), &[])).await;
    let stuck = b"an old write that must not land".repeat(8);
    old.send(&msg_bytes(2, &write_req(1, 0, &stuck), &stuck))
        .await;
    compio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        echo.handled.get(),
        1,
        "the write waits behind the slow request"
    );

    // The client gives the connection up and retries on a new one.
    let mut new = Raw::connect_in(addr, session(9, 2)).await;
    let retry = b"the retry".repeat(8);
    new.send(&msg_bytes(7, &write_req(1, 0, &retry), &retry))
        .await;
    let (h, m, _) = new.read_frame().await.expect("the retry's answer");
    assert_eq!(h.req_id, 7);
    assert_eq!(
        m,
        Message::Reply(Reply::ok(Version::new(0, retry.len() as u64)))
    );

    // The old connection still answers what it had dispatched, then closes
    // without dispatching the write.
    let (h, m, _) = old.read_frame().await.expect("the slow request's answer");
    assert_eq!(h.req_id, 1);
    assert!(matches!(m, Message::Reply(r) if r.status == Status::Ok));
    assert!(old.closed_by_server().await);
    assert_eq!(echo.handled.get(), 2, "the stuck write was never handled");

    // The new connection keeps serving.
    new.send(&msg_bytes(8, &read_req(1, 0, 4096), &[])).await;
    let (h, _, data) = new
        .read_frame()
        .await
        .expect("a read on the new connection");
    assert_eq!(h.req_id, 8);
    assert_eq!(data, pattern(1, 0, 4096));
}

#[compio::test]
async fn a_newer_connection_leaves_other_sessions_and_sessionless_ones_alone() {
    let echo = Rc::new(Echo::default());
    let (addr, _server) = start(echo.clone(), Limits::default()).await;
    let mut a1 = Raw::connect_in(addr, session(1, 1)).await;
    let mut b = Raw::connect_in(addr, session(2, 1)).await;
    let mut plain = Raw::connect(addr).await;
    let _a2 = Raw::connect_in(addr, session(1, 2)).await;

    for (i, c) in [&mut b, &mut plain].into_iter().enumerate() {
        c.send(&msg_bytes(i as u64 + 10, &read_req(3, 0, 4096), &[]))
            .await;
        let (h, _, data) = c.read_frame().await.expect("an answer");
        assert_eq!(h.req_id, i as u64 + 10);
        assert_eq!(data, pattern(3, 0, 4096));
    }
    let handled = echo.handled.get();
    a1.try_send(&msg_bytes(20, &read_req(3, 0, 4096), &[]))
        .await;
    assert!(a1.closed_by_server().await);
    assert_eq!(echo.handled.get(), handled);
}

#[compio::test]
async fn a_connection_older_than_a_live_one_of_its_session_dispatches_nothing() {
    let echo = Rc::new(Echo::default());
    let (addr, _server) = start(echo.clone(), Limits::default()).await;
    let _newer = Raw::connect_in(addr, session(4, 8)).await;
    let mut late = Raw::connect_in(addr, session(4, 3)).await;
    late.try_send(&msg_bytes(1, &read_req(0, 0, 4096), &[]))
        .await;
    assert!(late.closed_by_server().await);
    assert_eq!(echo.handled.get(), 0);
}

/// A pool keeps one session and says hello with a higher `seq` each time
/// it replaces a connection.
#[compio::test]
async fn a_pool_replaces_a_broken_connection_with_a_later_one_of_its_session() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hellos: Rc<RefCell<Vec<Option<Session>>>> = Rc::default();
    // A server that answers the hello, then closes at the first request.
    let server = {
        let hellos = hellos.clone();
        compio::runtime::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let mut c = Raw { stream };
                let Some((h, Message::Hello(hello), _)) = c.read_frame_or_end().await else {
                    continue;
                };
                hellos.borrow_mut().push(hello.session);
                let ok = msg_bytes(h.req_id, &Message::Reply(Reply::ok(Version::ZERO)), &[]);
                let _ = c.stream.write_all(ok).await;
                let _ = c.read_frame_or_end().await;
            }
        })
    };
    let pool = ConnPool::new(Role::Client, SECOND);
    for _ in 0..3 {
        let r = pool.call(addr, &read_req(0, 0, 4096), None, SECOND).await;
        assert!(
            matches!(r, Err(NetError::Closed | NetError::Io(_))),
            "the server closes at the first request: {r:?}"
        );
    }
    drop(server);
    let hellos = hellos.borrow();
    assert!(hellos.len() >= 3, "a new connection per call: {hellos:?}");
    let sessions: Vec<Session> = hellos.iter().map(|s| s.expect("a session")).collect();
    assert!(
        sessions.iter().all(|s| s.id == sessions[0].id),
        "{sessions:?}"
    );
    assert!(
        sessions.windows(2).all(|w| w[0].seq < w[1].seq),
        "seq rises: {sessions:?}"
    );
}
