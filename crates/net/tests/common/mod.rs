//! Shared pieces of the networking tests: an echo-style handler, a server
//! on 127.0.0.1:0 and a raw client that speaks bytes.

#![allow(dead_code)]

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use compio::BufResult;
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use pontoon_buf::AlignedBuf;
use pontoon_net::{Frame, Handler, Limits, serve};
use pontoon_proto::*;
use pontoon_types::{Epoch, ObjectId, PgId, Version};

pub const SECOND: Duration = Duration::from_secs(1);

/// Deterministic content of object `oid` at `offset`.
pub fn pattern(oid: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i).wrapping_mul(31) ^ oid.wrapping_mul(7)) as u8)
        .collect()
}

pub fn target(index: u64) -> Target {
    Target {
        pg: PgId::new(1, 2),
        epoch: Epoch(3),
        oid: ObjectId::new(4, index),
    }
}

pub fn read_req(index: u64, offset: u64, len: u32) -> Message {
    Message::Read(ReadReq {
        target: target(index),
        offset,
        len,
        snap: None,
    })
}

pub fn write_req(index: u64, offset: u64, data: &[u8]) -> Message {
    Message::Write(WriteReq {
        target: target(index),
        offset,
        data_crc: crc32c::crc32c(data),
        fua: false,
        fill: false,
        snap_seq: 0,
    })
}

/// A request the test handler answers after sleeping `ms` milliseconds.
pub fn slow_req(ms: u64) -> Message {
    Message::Discard(DiscardReq {
        target: target(0),
        offset: 0,
        len: ms,
        snap_seq: 0,
    })
}

/// Answers reads with [`pattern`] data, writes with `Ok` (version = data
/// length) after checking the data's crc, discards of `len` by sleeping
/// `len` ms; reads sleep a random few hundred µs so answers complete out
/// of order. Counts requests being handled.
#[derive(Default)]
pub struct Echo {
    pub active: Cell<usize>,
    pub max_active: Cell<usize>,
    pub handled: Cell<usize>,
}

struct Active<'a>(&'a Echo);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.set(self.0.active.get() - 1);
    }
}

impl Handler for Echo {
    async fn handle(self: Rc<Self>, _peer: Role, frame: Frame) -> (Message, Option<AlignedBuf>) {
        self.active.set(self.active.get() + 1);
        self.max_active
            .set(self.max_active.get().max(self.active.get()));
        self.handled.set(self.handled.get() + 1);
        let _active = Active(&self);
        let reply = |r: Reply| (Message::Reply(r), None);
        match frame.msg {
            Message::Read(r) if r.len <= 1 << 20 => {
                let us = rand::random_range(0..500);
                compio::time::sleep(Duration::from_micros(us)).await;
                let data = pattern(r.target.oid.index, r.offset, r.len as usize);
                (
                    Message::Reply(Reply::ok(Version::new(0, r.offset))),
                    Some(AlignedBuf::copy_from(&data)),
                )
            }
            Message::Write(w) => {
                let data = frame.data.as_deref().unwrap_or(&[]);
                if crc32c::crc32c(data) == w.data_crc {
                    reply(Reply::ok(Version::new(0, data.len() as u64)))
                } else {
                    reply(Reply::error(
                        Status::Checksum,
                        Epoch(0),
                        "data crc mismatch",
                    ))
                }
            }
            Message::Discard(d) if d.len <= 10_000 => {
                compio::time::sleep(Duration::from_millis(d.len)).await;
                reply(Reply::ok(Version::new(0, d.len)))
            }
            Message::PeerQuery(_) => (
                Message::PeerInfo(PeerInfo {
                    objects: vec![(ObjectId::new(1, 1), Version::new(2, 2))],
                    more: false,
                }),
                None,
            ),
            _ => reply(Reply::error(
                Status::InvalidArgument,
                Epoch(0),
                "unsupported",
            )),
        }
    }
}

/// A server for `handler` on 127.0.0.1 (port 0 = any); dropping the handle stops it.
pub async fn start_on<H: Handler>(
    addr: SocketAddr,
    handler: Rc<H>,
    limits: Limits,
) -> (SocketAddr, JoinHandle<()>) {
    // The previous listener on a fixed port may take a moment to go away.
    let mut tries = 0;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) if tries < 100 => {
                tries += 1;
                let _ = e;
                compio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("bind {addr}: {e}"),
        }
    };
    let addr = listener.local_addr().unwrap();
    (
        addr,
        compio::runtime::spawn(serve(listener, handler, limits)),
    )
}

pub async fn start<H: Handler>(handler: Rc<H>, limits: Limits) -> (SocketAddr, JoinHandle<()>) {
    start_on("127.0.0.1:0".parse().unwrap(), handler, limits).await
}

/// Encodes a frame by hand.
pub fn frame_bytes(msg_type: u16, req_id: u64, meta: &[u8], data: &[u8]) -> Vec<u8> {
    let h = FrameHeader {
        msg_type,
        flags: 0,
        req_id,
        meta_len: meta.len() as u32,
        data_len: data.len() as u32,
    };
    let mut b = h.encode().to_vec();
    b.extend_from_slice(meta);
    b.extend_from_slice(data);
    b
}

pub fn msg_bytes(req_id: u64, msg: &Message, data: &[u8]) -> Vec<u8> {
    frame_bytes(msg.msg_type() as u16, req_id, &msg.encode(), data)
}

pub fn hello_bytes(version: u32) -> Vec<u8> {
    msg_bytes(
        0,
        &Message::Hello(Hello {
            version,
            role: Role::Client,
            session: None,
        }),
        &[],
    )
}

/// A client speaking raw bytes.
pub struct Raw {
    pub stream: TcpStream,
}

impl Raw {
    /// Connects without saying hello.
    pub async fn connect_bare(addr: SocketAddr) -> Self {
        Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
        }
    }

    /// Connects and completes the hello.
    pub async fn connect(addr: SocketAddr) -> Self {
        Self::connect_in(addr, None).await
    }

    /// Connects and completes a hello naming `session`.
    pub async fn connect_in(addr: SocketAddr, session: Option<Session>) -> Self {
        let mut r = Self::connect_bare(addr).await;
        let hello = Message::Hello(Hello {
            version: PROTOCOL_VERSION,
            role: Role::Client,
            session,
        });
        r.send(&msg_bytes(0, &hello, &[])).await;
        let (h, m, _) = r.read_frame().await.expect("hello reply");
        assert_eq!(h.req_id, 0);
        assert_eq!(m, Message::Reply(Reply::ok(Version::ZERO)));
        r
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        let BufResult(res, _) = self.stream.write_all(bytes.to_vec()).await;
        res.unwrap();
    }

    /// Sends, ignoring errors (the server may have closed already).
    pub async fn try_send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes.to_vec()).await;
    }

    /// Stops sending (half close).
    pub fn shutdown_write(&self) {
        socket2::SockRef::from(&self.stream)
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
    }

    async fn read_n(&mut self, n: usize) -> Option<Vec<u8>> {
        let buf = Vec::with_capacity(n);
        let r = compio::time::timeout(5 * SECOND, self.stream.read_exact(buf.slice(..n))).await;
        let BufResult(res, slice) = r.expect("read timed out");
        res.ok()?;
        Some(slice.into_inner())
    }

    /// Reads one frame; `None` on end of stream.
    pub async fn read_frame(&mut self) -> Option<(FrameHeader, Message, Vec<u8>)> {
        let raw = self.read_n(HEADER_LEN).await?;
        let h = FrameHeader::decode(&raw.try_into().unwrap()).expect("server header");
        let meta = self.read_n(h.meta_len as usize).await.expect("meta");
        let data = self.read_n(h.data_len as usize).await.expect("data");
        let m = Message::decode(h.msg_type, &meta).expect("server message");
        Some((h, m, data))
    }

    /// Reads one frame; `None` on end of stream, a reset, or a frame cut
    /// short by either.
    pub async fn read_frame_or_end(&mut self) -> Option<(FrameHeader, Message, Vec<u8>)> {
        let raw = self.read_n(HEADER_LEN).await?;
        let h = FrameHeader::decode(&raw.try_into().unwrap()).expect("server header");
        let meta = self.read_n(h.meta_len as usize).await?;
        let data = self.read_n(h.data_len as usize).await?;
        let m = Message::decode(h.msg_type, &meta).expect("server message");
        Some((h, m, data))
    }

    /// Expects a `Malformed` reply for `req_id`.
    pub async fn expect_malformed(&mut self, req_id: u64) -> String {
        let (h, m, _) = self.read_frame().await.expect("a malformed reply");
        assert_eq!(h.req_id, req_id);
        match m {
            Message::Reply(r) if r.status == Status::Malformed => r.message,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    /// True when the server closed the connection (end of stream or reset)
    /// without sending anything more.
    pub async fn closed_by_server(&mut self) -> bool {
        let buf = Vec::with_capacity(64);
        let r = compio::time::timeout(5 * SECOND, self.stream.read(buf)).await;
        match r {
            Err(_) => false,
            Ok(BufResult(Ok(0), _)) => true,
            Ok(BufResult(Ok(_), _)) => false,
            Ok(BufResult(Err(_), _)) => true,
        }
    }
}

use compio::buf::{IntoInner, IoBuf};
use compio::io::AsyncRead;
