//! Loopback throughput and latency of one RPC connection: a server thread
//! whose handler answers at once (reads return an uninitialised pooled
//! buffer, writes are acknowledged unread), and a client thread running
//! `depth` concurrent call loops.
//!
//! `cargo run --release -p pontoon-net --example net_bench [seconds]`

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::net::TcpListener;
use pontoon_buf::AlignedBuf;
use pontoon_net::{Frame, Handler, Limits, RpcConn, serve};
use pontoon_proto::{Message, ReadReq, Reply, Role, Target, WriteReq};
use pontoon_types::{Epoch, ObjectId, PgId, Version};

struct Null;

impl Handler for Null {
    async fn handle(self: Rc<Self>, _peer: Role, frame: Frame) -> (Message, Option<AlignedBuf>) {
        let ok = Message::Reply(Reply::ok(Version::ZERO));
        match frame.msg {
            Message::Read(r) => (ok, Some(AlignedBuf::for_read(r.len as usize))),
            _ => (ok, None),
        }
    }
}

fn target() -> Target {
    Target {
        pg: PgId::new(1, 1),
        epoch: Epoch(1),
        oid: ObjectId::new(1, 1),
    }
}

fn run_case(addr: SocketAddr, write: bool, size: usize, depth: usize, secs: f64) {
    compio::runtime::Runtime::new().unwrap().block_on(async move {
        let conn = RpcConn::connect(addr, Role::Client, Duration::from_secs(1))
            .await
            .unwrap();
        let data = vec![7u8; size];
        let lat = Rc::new(RefCell::new(Vec::new()));
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let t0 = Instant::now();
        let loops = (0..depth).map(|_| {
            let conn = conn.clone();
            let data = data.clone();
            let lat = lat.clone();
            async move {
                let msg = if write {
                    Message::Write(WriteReq {
                        target: target(),
                        offset: 0,
                        data_crc: 0,
                        fua: false,
                        fill: false,
                        snap_seq: 0,
                    })
                } else {
                    Message::Read(ReadReq {
                        target: target(),
                        offset: 0,
                        len: size as u32,
                        snap: None,
                    })
                };
                let d = write.then_some(&data[..]);
                while Instant::now() < end {
                    let t = Instant::now();
                    conn.call(&msg, d, Duration::from_secs(5)).await.unwrap();
                    lat.borrow_mut().push(t.elapsed());
                }
            }
        });
        futures::future::join_all(loops).await;
        let el = t0.elapsed().as_secs_f64();
        let mut lat = lat.borrow_mut();
        lat.sort();
        let n = lat.len();
        let p = |q: f64| lat[((n as f64 * q) as usize).min(n - 1)].as_secs_f64() * 1e6;
        println!(
            "{:5} {:>7} B  depth {:3}: {:>9.0} ops/s {:>8.1} MB/s  p50 {:>7.1} µs  p99 {:>7.1} µs",
            if write { "write" } else { "read" },
            size,
            depth,
            n as f64 / el,
            n as f64 * size as f64 / el / 1e6,
            p(0.5),
            p(0.99)
        );
    });
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        compio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                serve(listener, Rc::new(Null), Limits::default()).await;
            })
    });
    let addr = rx.recv().unwrap();
    for (write, size, depth) in [
        (false, 4096, 1),
        (false, 4096, 16),
        (false, 4096, 128),
        (true, 4096, 1),
        (true, 4096, 16),
        (true, 4096, 128),
        (false, 131072, 16),
        (true, 131072, 16),
        (false, 1 << 20, 8),
        (true, 1 << 20, 8),
    ] {
        run_case(addr, write, size, depth, secs);
    }
}
