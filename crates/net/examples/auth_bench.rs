//! What each wire mode costs one RPC connection on loopback: a server
//! thread whose handler answers at once (reads return a pooled buffer,
//! writes are acknowledged unread) and a client thread keeping `depth`
//! calls in flight, for 4 KiB reads and writes, in modes none,
//! authenticated and secure. The modes alternate round by round (so drift
//! hits all alike) and the median of the rounds is printed: frames per
//! second (one request + one answer per call), and CPU µs per call on the
//! client thread, the server thread and both, and heap allocations per
//! call (both threads, counted by a wrapping global allocator). Cost per
//! 4 KiB call is the difference to mode none.
//!
//! `cargo run --release -p pontoon-net --example auth_bench -- [secs] [rounds]`

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use compio::net::TcpListener;
use pontoon_buf::AlignedBuf;
use pontoon_net::auth::StaticKeys;
use pontoon_net::{
    ClientAuth, EntityKey, EntityKeys, Frame, Handler, Key, Limits, RpcConn, ServerAuth, WireMode,
    serve_auth,
};
use pontoon_proto::{Message, ReadReq, Reply, Role, Target, WriteReq};
use pontoon_types::{Epoch, ObjectId, PgId, Version};

/// The system allocator, counting allocations.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MODES: [WireMode; 3] = [WireMode::None, WireMode::Authenticated, WireMode::Secure];
const SIZE: usize = 4096;

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

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn target() -> Target {
    Target {
        pg: PgId::new(1, 1),
        epoch: Epoch(1),
        oid: ObjectId::new(1, 1),
    }
}

fn key() -> Key {
    Key::from_bytes([0x5a; 32])
}

struct Figures {
    calls_per_s: f64,
    client_us: f64,
    server_us: f64,
    allocs: f64,
}

fn run_case(
    addr: SocketAddr,
    mode: WireMode,
    write: bool,
    depth: usize,
    secs: f64,
    server_cpu_ns: &AtomicU64,
) -> Figures {
    compio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let auth = ClientAuth::new(mode, "client.bench", key()).unwrap();
            let conn =
                RpcConn::connect_auth(addr, &auth, Duration::from_secs(1), Limits::default())
                    .await
                    .unwrap();
            let data = vec![7u8; SIZE];
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
                    len: SIZE as u32,
                    snap: None,
                })
            };
            // Warm up (pools, caches).
            for _ in 0..1000 {
                conn.call(&msg, write.then_some(&data[..]), Duration::from_secs(5))
                    .await
                    .unwrap();
            }
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let done = Rc::new(std::cell::Cell::new(0u64));
            let (t0, c0, s0, a0) = (
                Instant::now(),
                thread_cpu(),
                server_cpu_ns.load(Ordering::Relaxed),
                ALLOCS.load(Ordering::Relaxed),
            );
            let loops = (0..depth).map(|_| {
                let conn = conn.clone();
                let (data, msg, done) = (&data, &msg, done.clone());
                async move {
                    while Instant::now() < end {
                        conn.call(msg, write.then_some(&data[..]), Duration::from_secs(5))
                            .await
                            .unwrap();
                        done.set(done.get() + 1);
                    }
                }
            });
            futures::future::join_all(loops).await;
            let (el, c1, a1) = (
                t0.elapsed().as_secs_f64(),
                thread_cpu(),
                ALLOCS.load(Ordering::Relaxed),
            );
            // Let the server thread publish its CPU time past the last call.
            compio::time::sleep(Duration::from_millis(60)).await;
            let s1 = server_cpu_ns.load(Ordering::Relaxed);
            let n = done.get() as f64;
            Figures {
                calls_per_s: n / el,
                client_us: (c1 - c0).as_secs_f64() * 1e6 / n,
                server_us: s1.saturating_sub(s0) as f64 / 1e3 / n,
                allocs: (a1 - a0) as f64 / n,
            }
        })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let server_cpu = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let cpu = server_cpu.clone();
    std::thread::spawn(move || {
        compio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                let mut keys = StaticKeys::default();
                keys.0.insert(
                    "client.bench".into(),
                    EntityKeys {
                        keys: vec![EntityKey {
                            generation: 1,
                            key: key(),
                        }],
                        caps: None,
                    },
                );
                let keys = Rc::new(keys);
                let mut addrs = Vec::new();
                for mode in MODES {
                    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                    addrs.push(listener.local_addr().unwrap());
                    let auth = Rc::new(ServerAuth::new(mode, "osd.0", keys.clone()).unwrap());
                    compio::runtime::spawn(serve_auth(
                        listener,
                        Rc::new(Null),
                        Limits::default(),
                        auth,
                    ))
                    .detach();
                }
                tx.send(addrs).unwrap();
                // Publish this thread's CPU time every 20 ms.
                loop {
                    cpu.store(thread_cpu().as_nanos() as u64, Ordering::Relaxed);
                    compio::time::sleep(Duration::from_millis(20)).await;
                }
            })
    });
    let addrs = rx.recv().unwrap();
    println!(
        "4 KiB calls on one loopback connection, {rounds} rounds of {secs} s per case, medians"
    );
    println!(
        "{:<12} {:>14} {:>10} {:>7} {:>10} {:>10} {:>12} {:>12}",
        "case", "mode", "calls/s", "x none", "client µs", "server µs", "+µs vs none", "allocs/call"
    );
    for (write, depth) in [(false, 32), (true, 32), (false, 1), (true, 1)] {
        let mut figs: Vec<Vec<Figures>> = MODES.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for i in 0..MODES.len() {
                // Rotate the order each round.
                let m = (i + round) % MODES.len();
                figs[m].push(run_case(
                    addrs[m],
                    MODES[m],
                    write,
                    depth,
                    secs,
                    &server_cpu,
                ));
            }
        }
        let med = |m: usize, f: fn(&Figures) -> f64| median(figs[m].iter().map(f).collect());
        let base_rate = med(0, |f| f.calls_per_s);
        let base_cpu = med(0, |f| f.client_us + f.server_us);
        for (m, mode) in MODES.iter().enumerate() {
            let rate = med(m, |f| f.calls_per_s);
            let (c, s) = (med(m, |f| f.client_us), med(m, |f| f.server_us));
            println!(
                "{:<12} {:>14} {:>10.0} {:>7.3} {:>10.2} {:>10.2} {:>12.2} {:>12.2}",
                format!("{} QD{depth}", if write { "write" } else { "read" }),
                mode.as_str(),
                rate,
                rate / base_rate,
                c,
                s,
                c + s - base_cpu,
                med(m, |f| f.allocs),
            );
        }
    }
}
