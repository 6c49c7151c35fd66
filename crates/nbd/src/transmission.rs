//! The transmission phase: one reader loop per connection parses requests,
//! reads write payloads into aligned buffers and dispatches every request
//! as its own task; finished requests queue their replies, which a writer
//! task serialises onto the socket in completion order.
//!
//! The reader stops pulling from the socket while the connection's
//! [`Budget`] is exhausted (requests in flight, payload bytes held), so a
//! client can never make the server buffer more than the configured bounds.
//!
//! Connection states, in order:
//! - *serving*: reading requests, dispatching them;
//! - *draining*: the reader has stopped (NBD_CMD_DISC, end of stream, a
//!   protocol violation, server stop); requests in flight finish and their
//!   replies are written;
//! - *closed*: the writer is done, the socket is shut down.

use std::future::Future;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use compio::io::{AsyncRead, AsyncWrite};
use compio::net::TcpStream;
use futures::FutureExt;
use pontoon_buf::AlignedBuf;
use pontoon_volume::{BlockVolume, VolumeError};
use tracing::{debug, warn};

use crate::NbdError;
use crate::handshake::{BASE_ALLOCATION_ID, Session};
use crate::proto::*;
use crate::rmw::{self, RangeLocks, covering};
use crate::server::ServerConfig;
use pontoon_net::budget::{Budget, Permit};
use pontoon_net::listener::Stop;
use pontoon_net::stream::{Inbound, OutBuf, Reply, ReplyQueue, write_replies};

/// A structured read is sent as separate data/hole chunks only if the
/// range has at most this many extents; otherwise as one data chunk.
const MAX_READ_EXTENTS: usize = 16;
/// Most descriptors in one block status reply.
const MAX_STATUS_DESCRIPTORS: usize = 1024;
/// Most bytes one block status request looks up.
const MAX_STATUS_QUERY: u64 = 1 << 30;
/// Most `allocation` calls one lookup makes.
const MAX_ALLOCATION_CALLS: usize = 64;
/// After refusing an oversized write, how long to keep draining the
/// client's payload so it can read the error before the socket closes.
const LINGER: Duration = Duration::from_secs(2);
/// Most payload bytes drained while lingering.
const LINGER_BYTES: u64 = 64 << 20;

/// Maps a volume error to the protocol's error numbers.
pub fn errno_of(e: &VolumeError) -> Errno {
    match e {
        VolumeError::InvalidArgument(_) => Errno::EINVAL,
        VolumeError::NoSpace(_) => Errno::ENOSPC,
        VolumeError::ReadOnly | VolumeError::PermissionDenied(_) => Errno::EPERM,
        VolumeError::Unavailable(_) | VolumeError::DataLoss(_) | VolumeError::Io(_) => Errno::EIO,
    }
}

/// What every task of one connection shares.
struct Conn<V> {
    volume: V,
    size: u64,
    locks: Rc<RangeLocks>,
    structured: bool,
    block_status: bool,
    sparse_reads: bool,
    max_payload: u32,
    queue: Rc<ReplyQueue>,
}

/// Why the reader stopped.
#[derive(Debug)]
enum End {
    /// NBD_CMD_DISC.
    Disconnect,
    /// Clean end of stream between requests.
    Eof,
    /// The server is stopping.
    Stopping,
    /// The writer failed (the client is gone).
    WriterFailed,
    /// Bad request magic or a similar violation that loses framing.
    Protocol(String),
    /// A socket error, or end of stream inside a request.
    Io(io::Error),
    /// A write longer than the payload limit: its payload was not read.
    Oversized(u32),
}

/// Serves one connection from the end of negotiation to the close.
/// `inbound` and `stream` are the connection's two directions (the socket,
/// or a TLS session's halves); `send_now` is the bare socket when replies
/// may be written to it directly (not under TLS).
pub(crate) async fn serve<V: BlockVolume, R: AsyncRead, W: AsyncWrite + Clone + 'static>(
    session: Session<V>,
    mut inbound: Inbound<R>,
    stream: W,
    send_now: Option<TcpStream>,
    locks: Rc<RangeLocks>,
    config: &ServerConfig,
    stop: &Stop,
) -> Result<(), NbdError> {
    let queue = Rc::new(match send_now {
        Some(socket) => ReplyQueue::new(socket),
        None => ReplyQueue::writer_only(),
    });
    let writer = compio::runtime::spawn(write_replies(stream.clone(), queue.clone()));
    let conn = Rc::new(Conn {
        volume: session.volume,
        size: session.size,
        locks,
        structured: session.structured,
        block_status: session.block_status,
        sparse_reads: config.sparse_reads,
        max_payload: config.max_payload,
        queue: queue.clone(),
    });
    let budget = Budget::new(config.max_in_flight, config.max_buffered_bytes);
    let end = read_requests(&conn, &mut inbound, &budget, stop).await;
    match &end {
        End::Protocol(why) => {
            warn!(export = %session.name, "protocol violation: {why}; disconnecting")
        }
        End::Oversized(len) => {
            warn!(export = %session.name, "{len}-byte write refused; disconnecting")
        }
        other => debug!(export = %session.name, ?other, "request loop ended; draining"),
    }
    drop(conn);
    // Every request in flight finishes and its reply is written (or
    // dropped, if the socket failed) before the socket closes.
    budget.idle().await;
    queue.close();
    let written = writer.await;
    let mut stream = stream;
    let shut = stream.shutdown().await;
    if let End::Oversized(len) = end {
        // Keep reading (and dropping) the refused payload for a moment, so
        // the client sees our error reply rather than a reset.
        let drain = inbound.discard(u64::from(len).min(LINGER_BYTES));
        let _ = compio::time::timeout(LINGER, drain).await;
    }
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!("reply writer: {e}"),
        Err(e) => debug!("reply writer task: {e:?}"),
    }
    if let Err(e) = shut {
        debug!("shutdown: {e}");
    }
    match end {
        End::Io(e) if e.kind() != io::ErrorKind::UnexpectedEof => Err(e.into()),
        _ => Ok(()),
    }
}

/// Races `f` with the stop signal unless the connection is already
/// stopping (then `f` only consumes buffered bytes and must not be raced).
async fn unless_stopped<F: Future>(stop: &Stop, stopping: bool, f: F) -> Option<F::Output> {
    if stopping {
        return Some(f.await);
    }
    stop.or_stop(f).await
}

/// The request loop: returns why it stopped.
async fn read_requests<V: BlockVolume, R: AsyncRead>(
    conn: &Rc<Conn<V>>,
    inbound: &mut Inbound<R>,
    budget: &Rc<Budget>,
    stop: &Stop,
) -> End {
    // Once stopping, only requests already buffered are answered (with
    // ESHUTDOWN); nothing more is read from the socket.
    let mut stopping = false;
    loop {
        if conn.queue.is_dead() {
            return End::WriterFailed;
        }
        if !stopping && stop.is_set() {
            stopping = true;
        }
        let raw: [u8; REQUEST_LEN] = if stopping {
            match inbound.try_array() {
                Some(r) => r,
                None => return End::Stopping,
            }
        } else {
            match unless_stopped(stop, false, inbound.read_array()).await {
                None => return End::Stopping,
                Some(Ok(Some(r))) => r,
                Some(Ok(None)) => return End::Eof,
                Some(Err(e)) => return End::Io(e),
            }
        };
        let req = match Request::decode(&raw) {
            Ok(r) => r,
            Err(e) => return End::Protocol(e.to_string()),
        };
        if req.command == Command::Disc {
            return End::Disconnect;
        }
        let check = conn.check(&req);
        let bytes = match (&check, req.command) {
            (Ok(()), Command::Read | Command::Write) => {
                let c = covering(req.offset, u64::from(req.length));
                (c.end - c.start) as usize
            }
            _ => 0,
        };
        // A request already parsed is answered even if the server starts
        // stopping while it waits for room (with ESHUTDOWN, below).
        let permit = match unless_stopped(stop, stopping, budget.acquire(bytes)).await {
            Some(p) => p,
            None => {
                stopping = true;
                budget.acquire(bytes).await
            }
        };
        if req.command == Command::Write {
            if req.length > conn.max_payload {
                let (errno, msg) = check.err().unwrap_or((Errno::EINVAL, String::new()));
                conn.reply_error(req.handle, errno, &msg, permit);
                return End::Oversized(req.length);
            }
            let len = req.length as usize;
            if stopping && inbound.buffered() < len {
                return End::Stopping;
            }
            let payload = match check {
                Ok(()) => {
                    let cover = covering(req.offset, u64::from(req.length));
                    let buf = AlignedBuf::for_read((cover.end - cover.start) as usize);
                    let at = (req.offset - cover.start) as usize;
                    match unless_stopped(stop, stopping, inbound.read_into(buf, at, len)).await {
                        None => return End::Stopping,
                        Some(Err(e)) => return End::Io(e),
                        Some(Ok(buf)) => Ok(buf),
                    }
                }
                Err(err) => {
                    match unless_stopped(stop, stopping, inbound.discard(len as u64)).await {
                        None => return End::Stopping,
                        Some(Err(e)) => return End::Io(e),
                        Some(Ok(())) => Err(err),
                    }
                }
            };
            if stopping {
                conn.reply_error(req.handle, Errno::ESHUTDOWN, "server is stopping", permit);
                continue;
            }
            match payload {
                Ok(buf) => spawn(conn.clone().execute(req, Some(buf), permit)),
                Err((errno, msg)) => conn.reply_error(req.handle, errno, &msg, permit),
            }
            continue;
        }
        if stopping {
            conn.reply_error(req.handle, Errno::ESHUTDOWN, "server is stopping", permit);
            continue;
        }
        match check {
            Ok(()) if req.command == Command::Flush => conn.clone().flush(req, permit),
            Ok(()) => spawn(conn.clone().execute(req, None, permit)),
            Err((errno, msg)) => conn.reply_error(req.handle, errno, &msg, permit),
        }
    }
}

fn spawn(f: impl Future<Output = ()> + 'static) {
    compio::runtime::spawn(f).detach();
}

/// Request type-specific command flags (FUA is accepted on every command,
/// as the protocol requires once SEND_FUA is advertised).
fn allowed_flags(cmd: Command, structured: bool) -> u16 {
    CMD_FLAG_FUA
        | match cmd {
            Command::Read if structured => CMD_FLAG_DF,
            Command::WriteZeroes => CMD_FLAG_NO_HOLE,
            Command::BlockStatus => CMD_FLAG_REQ_ONE,
            _ => 0,
        }
}

impl<V: BlockVolume> Conn<V> {
    /// Validates a request against the negotiated features and the export
    /// bounds; `Err` carries the error to reply with.
    fn check(&self, req: &Request) -> Result<(), (Errno, String)> {
        let einval = |m: String| Err((Errno::EINVAL, m));
        match req.command {
            Command::Read
            | Command::Write
            | Command::Flush
            | Command::Trim
            | Command::WriteZeroes
            | Command::BlockStatus => {}
            Command::Cache | Command::Unknown(_) | Command::Disc => {
                return einval(format!("unsupported command {}", req.command.to_wire()));
            }
        }
        let extra = req.flags & !allowed_flags(req.command, self.structured);
        if extra != 0 {
            return einval(format!("unsupported command flags {extra:#x}"));
        }
        let len = u64::from(req.length);
        if matches!(req.command, Command::Read | Command::Write) && req.length > self.max_payload {
            let errno = if req.flags & CMD_FLAG_DF != 0 {
                Errno::EOVERFLOW
            } else {
                Errno::EINVAL
            };
            return Err((
                errno,
                format!(
                    "length {} exceeds the maximum block size {}",
                    req.length, self.max_payload
                ),
            ));
        }
        if req.command == Command::Flush {
            return Ok(());
        }
        if req.command == Command::BlockStatus {
            if !self.block_status {
                return einval("no metadata context was negotiated".into());
            }
            if len == 0 {
                return einval("zero-length block status".into());
            }
        }
        if req
            .offset
            .checked_add(len)
            .is_none_or(|end| end > self.size)
        {
            let errno = match req.command {
                Command::Write | Command::WriteZeroes => Errno::ENOSPC,
                _ => Errno::EINVAL,
            };
            return Err((
                errno,
                format!(
                    "range {}+{} is past the end of the export ({} bytes)",
                    req.offset, req.length, self.size
                ),
            ));
        }
        Ok(())
    }

    /// Queues an error reply.
    fn reply_error(&self, handle: u64, errno: Errno, msg: &str, permit: Permit) {
        debug!(handle, ?errno, msg, "request failed");
        self.queue.push(Reply {
            parts: vec![self.error_bytes(handle, errno, msg)],
            permit: Some(permit),
        });
    }

    /// An error reply: a structured error chunk when structured replies are
    /// on (mandatory for reads, preferred otherwise), else a simple reply.
    fn error_bytes(&self, handle: u64, errno: Errno, msg: &str) -> OutBuf {
        let mut b = Vec::with_capacity(CHUNK_HEADER_LEN + 6 + msg.len());
        if self.structured {
            encode_error_chunk(&mut b, handle, errno, msg, true);
        } else {
            encode_simple_reply(&mut b, handle, errno);
        }
        OutBuf::Bytes(b)
    }

    /// The reply to a request that returns only a status.
    fn status_reply(&self, handle: u64, r: Result<(), VolumeError>) -> Vec<OutBuf> {
        match r {
            Ok(()) => vec![Self::ok_bytes(handle)],
            Err(e) => vec![self.error_bytes(handle, errno_of(&e), &e.to_string())],
        }
    }

    fn ok_bytes(handle: u64) -> OutBuf {
        let mut b = Vec::with_capacity(SIMPLE_REPLY_LEN);
        encode_simple_reply(&mut b, handle, Errno(0));
        OutBuf::Bytes(b)
    }

    /// Answers a FLUSH on the reader's task when the volume's flush is
    /// done at once (a cluster volume acknowledges only durable writes):
    /// no task, no loop turn. Otherwise it runs as its own task.
    fn flush(self: Rc<Self>, req: Request, permit: Permit) {
        match self.volume.flush().now_or_never() {
            Some(r) => self.queue.push(Reply {
                parts: self.status_reply(req.handle, r),
                permit: Some(permit),
            }),
            None => spawn(self.execute(req, None, permit)),
        }
    }

    /// Runs a validated request and queues its reply.
    async fn execute(self: Rc<Self>, req: Request, payload: Option<AlignedBuf>, permit: Permit) {
        let fua = req.flags & CMD_FLAG_FUA != 0;
        let (off, len) = (req.offset, u64::from(req.length));
        let done = |r| self.status_reply(req.handle, r);
        let parts = match req.command {
            Command::Read => self.read(&req).await,
            Command::Write => match payload {
                Some(buf) => done(rmw::write(&self.volume, &self.locks, off, len, buf, fua).await),
                None => done(Err(VolumeError::Io("write without payload".into()))),
            },
            Command::Flush => done(self.volume.flush().await),
            Command::Trim => done(rmw::trim(&self.volume, &self.locks, off, len, fua).await),
            Command::WriteZeroes => {
                let may_unmap = req.flags & CMD_FLAG_NO_HOLE == 0;
                done(rmw::write_zeroes(&self.volume, &self.locks, off, len, may_unmap, fua).await)
            }
            Command::BlockStatus => self.block_status(&req).await,
            Command::Cache | Command::Disc | Command::Unknown(_) => {
                vec![self.error_bytes(req.handle, Errno::EINVAL, "unsupported command")]
            }
        };
        self.queue.push(Reply {
            parts,
            permit: Some(permit),
        });
    }

    /// The reply to a READ.
    async fn read(&self, req: &Request) -> Vec<OutBuf> {
        let (off, len) = (req.offset, u64::from(req.length));
        let h = req.handle;
        if len == 0 {
            let mut b = Vec::new();
            if self.structured {
                encode_none_chunk(&mut b, h);
            } else {
                encode_simple_reply(&mut b, h, Errno(0));
            }
            return vec![OutBuf::Bytes(b)];
        }
        if !self.structured {
            return match rmw::read(&self.volume, off, len).await {
                Ok((buf, at)) => vec![
                    Self::ok_bytes(h),
                    OutBuf::Data {
                        buf: Rc::new(buf),
                        start: at,
                        end: at + len as usize,
                    },
                ],
                // No payload after an error header: the stream stays in sync.
                Err(e) => vec![self.error_bytes(h, errno_of(&e), &e.to_string())],
            };
        }
        if req.flags & CMD_FLAG_DF != 0 || !self.sparse_reads {
            return self.read_whole(h, off, len).await;
        }
        let extents = match self.extents(off, off + len, MAX_READ_EXTENTS + 1).await {
            Ok(x) if x.len() <= MAX_READ_EXTENTS && x.last().is_some_and(|e| e.1 == off + len) => x,
            // Fragmented, unknown or failed: send everything as data.
            _ => return self.read_whole(h, off, len).await,
        };
        if extents.len() == 1 && extents[0].2 {
            return self.read_whole(h, off, len).await;
        }
        // Read every data extent first, so that an error is known before
        // any chunk is marked final.
        let mut parts = Vec::with_capacity(2 * extents.len());
        let last = extents.len() - 1;
        for (i, &(start, end, allocated)) in extents.iter().enumerate() {
            let n = end - start;
            if allocated {
                match rmw::read(&self.volume, start, n).await {
                    Ok((buf, at)) => parts.extend(data_chunk(
                        h,
                        start,
                        Rc::new(buf),
                        at,
                        n as usize,
                        i == last,
                    )),
                    Err(e) => return vec![self.error_bytes(h, errno_of(&e), &e.to_string())],
                }
            } else {
                let mut b = Vec::with_capacity(CHUNK_HEADER_LEN + 12);
                encode_hole_chunk(&mut b, h, start, n as u32, i == last);
                parts.push(OutBuf::Bytes(b));
            }
        }
        debug_assert!(parts.len() <= 2 * MAX_READ_EXTENTS);
        parts
    }

    /// A structured read reply with all data in one chunk.
    async fn read_whole(&self, h: u64, off: u64, len: u64) -> Vec<OutBuf> {
        match rmw::read(&self.volume, off, len).await {
            Ok((buf, at)) => data_chunk(h, off, Rc::new(buf), at, len as usize, true),
            Err(e) => vec![self.error_bytes(h, errno_of(&e), &e.to_string())],
        }
    }

    /// The reply to a BLOCK_STATUS for `base:allocation`.
    async fn block_status(&self, req: &Request) -> Vec<OutBuf> {
        let h = req.handle;
        let start = req.offset;
        let end = start + u64::from(req.length).min(MAX_STATUS_QUERY);
        let one = req.flags & CMD_FLAG_REQ_ONE != 0;
        let max = if one { 1 } else { MAX_STATUS_DESCRIPTORS };
        let extents = match self.extents(start, end, max).await {
            Ok(x) if !x.is_empty() => x,
            Ok(_) => {
                return vec![self.error_bytes(
                    h,
                    Errno::EIO,
                    "volume reported no allocation extents",
                )];
            }
            Err(e) => return vec![self.error_bytes(h, errno_of(&e), &e.to_string())],
        };
        let descriptors: Vec<BlockDescriptor> = extents
            .iter()
            .map(|&(s, e, allocated)| BlockDescriptor {
                // Each extent lies inside the request, whose length is a u32.
                length: (e - s) as u32,
                flags: if allocated {
                    0
                } else {
                    STATE_HOLE | STATE_ZERO
                },
            })
            .collect();
        let mut b = Vec::with_capacity(CHUNK_HEADER_LEN + 4 + 8 * descriptors.len());
        encode_block_status_chunk(&mut b, h, BASE_ALLOCATION_ID, &descriptors, true);
        vec![OutBuf::Bytes(b)]
    }

    /// Allocation of `start..end` (inside the export) as consecutive
    /// `(start, end, allocated)` runs with adjacent equal runs merged, at
    /// most `max` of them: the result may stop short of `end`.
    async fn extents(
        &self,
        start: u64,
        end: u64,
        max: usize,
    ) -> Result<Vec<(u64, u64, bool)>, VolumeError> {
        let cover = covering(start, end - start);
        let mut out: Vec<(u64, u64, bool)> = Vec::new();
        let mut pos = cover.start;
        for _ in 0..MAX_ALLOCATION_CALLS {
            if pos >= cover.end {
                break;
            }
            let runs = self.volume.allocation(pos, cover.end - pos).await?;
            if runs.is_empty() {
                return Err(VolumeError::Io("allocation returned no extents".into()));
            }
            for run in runs {
                if run.len == 0 {
                    return Err(VolumeError::Io(
                        "allocation returned an empty extent".into(),
                    ));
                }
                let run_end = pos.saturating_add(run.len).min(cover.end);
                let (s, e) = (pos.max(start), run_end.min(end));
                pos = run_end;
                if s < e {
                    let n = out.len();
                    match out.last_mut() {
                        Some(last) if last.2 == run.allocated && last.1 == s => last.1 = e,
                        _ if n == max => return Ok(out),
                        _ => out.push((s, e, run.allocated)),
                    }
                }
                if pos >= cover.end {
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// One `OFFSET_DATA` chunk of `len` bytes of `buf` from `at`, for export
/// offset `offset`.
fn data_chunk(
    handle: u64,
    offset: u64,
    buf: Rc<AlignedBuf>,
    at: usize,
    len: usize,
    done: bool,
) -> Vec<OutBuf> {
    let mut b = Vec::with_capacity(CHUNK_HEADER_LEN + 8);
    // len is at most the payload limit, far below u32::MAX - 8.
    encode_data_chunk_header(&mut b, handle, offset, len as u32, done);
    vec![
        OutBuf::Bytes(b),
        OutBuf::Data {
            buf,
            start: at,
            end: at + len,
        },
    ]
}
