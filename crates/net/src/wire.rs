//! The two directions of one connection's socket: a buffered frame reader
//! that reads frame data straight into aligned buffers, and an outbound
//! queue drained by a writer task that puts whole frames on the socket
//! with vectored writes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::Shutdown;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use pontoon_buf::AlignedBuf;
use pontoon_proto::{FrameHeader, HEADER_LEN, MAX_DATA, MAX_META, Message, ProtoError};

use crate::budget::Permit;
use crate::seal::{Protect, TAG_LEN, tags_len};
use crate::send_now::{Sent, send_parts};

/// Size of the inbound buffer: headers, metadata and small data are copied
/// out of it, so one `recv` usually brings in several pipelined frames.
const INBOUND_BUF: usize = 64 * 1024;
/// Data up to this size goes through the inbound buffer; larger data is
/// read directly into its aligned buffer.
const COPY_THRESHOLD: usize = 16 * 1024;
/// Room reserved for a message's fields when a frame is encoded: most
/// fit (a larger one grows the buffer once).
const META_GUESS: usize = 96;
/// Request data up to this size is copied next to the header and metadata
/// (one allocation, one iovec); larger data goes into a pooled aligned buffer.
pub(crate) const INLINE_DATA: usize = 16 * 1024;
/// Most iovecs handed to one `sendmsg` (well under `IOV_MAX`).
const MAX_IOVECS: usize = 256;
/// Soft limit on bytes per vectored write, so permits are released steadily.
const MAX_BATCH_BYTES: usize = 8 << 20;

fn broken() -> io::Error {
    io::Error::other("inbound stream abandoned after a cancelled read")
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "no data from the peer in time")
}

/// Runs `fut` for at most `limit` (`None`: no limit; a limit too far in
/// the future to represent is no limit either). `None` when time ran out
/// (`fut` is then dropped).
pub(crate) async fn within<F: Future>(limit: Option<Duration>, fut: F) -> Option<F::Output> {
    match limit.filter(|d| Instant::now().checked_add(*d).is_some()) {
        Some(d) => compio::time::timeout(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// Shuts the socket down in both directions (wakes any pending receive on
/// it and sends FIN to the peer); errors (already closed) are ignored.
pub(crate) fn shutdown(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).shutdown(Shutdown::Both);
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The socket failed, or ended inside a frame header.
    Io(io::Error),
    /// The header arrived but is invalid (bad magic, oversized lengths).
    /// `req_id` is taken from the raw header bytes.
    Header {
        /// Request id field of the raw header.
        req_id: u64,
        /// Why the header is invalid.
        err: ProtoError,
    },
    /// The stream ended inside the frame's metadata or data.
    Truncated {
        /// Request id of the frame.
        req_id: u64,
    },
    /// The metadata does not decode as the frame's message type.
    Message {
        /// Request id of the frame.
        req_id: u64,
        /// Why.
        err: ProtoError,
    },
    /// The frame failed its integrity check (protected modes): the stream
    /// can no longer be trusted.
    Integrity {
        /// Request id in the frame's (unauthenticated) header.
        req_id: u64,
    },
}

/// The receiving side of a connection.
pub(crate) struct FrameReader {
    stream: TcpStream,
    /// Longest wait for bytes from the socket; `None`: forever.
    idle: Option<Duration>,
    /// Received bytes; `None` once a read was cancelled (the stream is then
    /// out of sync and must not be read again).
    buf: Option<Vec<u8>>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
    /// Checks (and decrypts) every frame, once the connection authenticated.
    open: Option<Protect>,
}

impl FrameReader {
    /// Wraps a connected socket.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            idle: None,
            buf: Some(Vec::with_capacity(INBOUND_BUF)),
            pos: 0,
            open: None,
        }
    }

    /// Checks every frame read from now on with `open` (the handshake
    /// finished in a protected mode).
    pub(crate) fn protect_with(&mut self, open: Protect) {
        self.open = Some(open);
    }

    /// Fails reads that receive nothing for `idle` with `TimedOut` (the
    /// reader is unusable afterwards).
    pub(crate) fn set_idle_timeout(&mut self, idle: Option<Duration>) {
        self.idle = idle;
    }

    /// Bytes received and not yet consumed.
    fn buffered(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() - self.pos)
    }

    /// Reads until at least `n` bytes (at most the buffer size) are
    /// buffered. Returns `Ok(false)` on end of stream with nothing
    /// buffered, and `UnexpectedEof` on end of stream with a partial message.
    async fn fill(&mut self, n: usize) -> io::Result<bool> {
        debug_assert!(n <= INBOUND_BUF);
        let mut buf = self.buf.take().ok_or_else(broken)?;
        if buf.len() - self.pos < n && self.pos > 0 {
            buf.copy_within(self.pos.., 0);
            buf.truncate(buf.len() - self.pos);
            self.pos = 0;
        }
        let mut result = Ok(true);
        while buf.len() < n {
            let len = buf.len();
            // On timeout the buffer goes with the cancelled read: `self.buf`
            // stays `None`, so the reader is marked broken.
            let BufResult(res, slice) = within(self.idle, self.stream.read(buf.slice(len..)))
                .await
                .ok_or_else(timed_out)?;
            buf = slice.into_inner();
            match res {
                Ok(0) if buf.is_empty() => {
                    result = Ok(false);
                    break;
                }
                Ok(0) => {
                    result = Err(io::ErrorKind::UnexpectedEof.into());
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.buf = Some(buf);
        result
    }

    /// Reads the next raw header; `None` on a clean end of stream before
    /// its first byte.
    pub(crate) async fn read_header(&mut self) -> io::Result<Option<[u8; HEADER_LEN]>> {
        if !self.fill(HEADER_LEN).await? {
            return Ok(None);
        }
        let buf = self.buf.as_ref().ok_or_else(broken)?;
        let mut out = [0u8; HEADER_LEN];
        out.copy_from_slice(&buf[self.pos..self.pos + HEADER_LEN]);
        self.pos += HEADER_LEN;
        Ok(Some(out))
    }

    /// Reads `len` bytes (bounded by the caller) into a new vector.
    pub(crate) async fn read_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            if self.buffered() == 0 && !self.fill(1).await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = (len - out.len()).min(self.buffered());
            let buf = self.buf.as_ref().ok_or_else(broken)?;
            out.extend_from_slice(&buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        Ok(out)
    }

    /// Reads `len` bytes (bounded by the caller) into a new aligned buffer:
    /// what is buffered is copied, the rest is received straight into it.
    pub(crate) async fn read_data(&mut self, len: usize) -> io::Result<AlignedBuf> {
        let mut dst = AlignedBuf::for_read(len);
        if len <= COPY_THRESHOLD && self.buffered() < len && !self.fill(len).await? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = len.min(self.buffered());
        if take > 0 {
            let buf = self.buf.as_ref().ok_or_else(broken)?;
            dst[..take].copy_from_slice(&buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        if take < len {
            if self.buf.is_none() {
                return Err(broken());
            }
            dst.set_len(take);
            let read = self.stream.read_exact(dst.slice(take..len));
            let Some(BufResult(res, slice)) = within(self.idle, read).await else {
                // Part of the data may have been consumed: out of sync.
                self.buf = None;
                return Err(timed_out());
            };
            dst = slice.into_inner();
            res?;
            dst.set_len(len);
        }
        Ok(dst)
    }

    /// Reads and drops everything until end of stream, an error or `max`
    /// bytes (used to let a peer read our last reply before we close, so
    /// that unread input does not turn the close into a reset).
    pub(crate) async fn drain(&mut self, max: usize) {
        let mut total = 0;
        while total < max {
            total += self.buffered();
            if let Some(b) = &self.buf {
                self.pos = b.len();
            }
            match self.fill(1).await {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
        }
    }

    /// Reads one whole frame: header, metadata, data. `Ok(None)` on a clean
    /// end of stream between frames. `before_body` runs after the header is
    /// validated and before the rest is read (the server waits for budget
    /// there, or refuses the frame); its value is passed back out.
    pub(crate) async fn read_frame<T, F, Fut>(
        &mut self,
        before_body: F,
    ) -> Result<Option<(FrameHeader, Message, Option<AlignedBuf>, T)>, ReadError>
    where
        F: FnOnce(&FrameHeader) -> Fut,
        Fut: Future<Output = Result<T, ProtoError>>,
    {
        let Some(raw) = self.read_header().await.map_err(ReadError::Io)? else {
            return Ok(None);
        };
        let req_id = raw_req_id(&raw);
        let hdr = FrameHeader::decode(&raw).map_err(|err| ReadError::Header { req_id, err })?;
        let extra = before_body(&hdr)
            .await
            .map_err(|err| ReadError::Message { req_id, err })?;
        let truncated = |e: io::Error| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ReadError::Truncated { req_id }
            } else {
                ReadError::Io(e)
            }
        };
        if self.open.is_some() {
            return self.read_protected(raw, hdr, extra).await;
        }
        // meta_len <= MAX_META was checked by decode.
        let meta = self
            .read_vec(hdr.meta_len as usize)
            .await
            .map_err(truncated)?;
        let msg = Message::decode(hdr.msg_type, &meta)
            .map_err(|err| ReadError::Message { req_id, err })?;
        let data = if hdr.data_len > 0 {
            // data_len <= MAX_DATA was checked by decode.
            Some(
                self.read_data(hdr.data_len as usize)
                    .await
                    .map_err(truncated)?,
            )
        } else {
            None
        };
        Ok(Some((hdr, msg, data, extra)))
    }

    /// The rest of a frame in a protected mode: its tags, fields and data,
    /// all read before anything is decoded; checked (and decrypted in
    /// place), then decoded.
    async fn read_protected<T>(
        &mut self,
        raw: [u8; HEADER_LEN],
        hdr: FrameHeader,
        extra: T,
    ) -> Result<Option<(FrameHeader, Message, Option<AlignedBuf>, T)>, ReadError> {
        let req_id = hdr.req_id;
        let truncated = |e: io::Error| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ReadError::Truncated { req_id }
            } else {
                ReadError::Io(e)
            }
        };
        let tl = tags_len(hdr.data_len);
        let mut tags = [0u8; 2 * TAG_LEN];
        if !self.fill(tl).await.map_err(truncated)? {
            return Err(ReadError::Truncated { req_id });
        }
        let buf = self
            .buf
            .as_ref()
            .ok_or_else(broken)
            .map_err(ReadError::Io)?;
        tags[..tl].copy_from_slice(&buf[self.pos..self.pos + tl]);
        self.pos += tl;
        let mut meta = self
            .read_vec(hdr.meta_len as usize)
            .await
            .map_err(truncated)?;
        let mut data = if hdr.data_len > 0 {
            Some(
                self.read_data(hdr.data_len as usize)
                    .await
                    .map_err(truncated)?,
            )
        } else {
            None
        };
        let open = self.open.as_mut().ok_or(ReadError::Integrity { req_id })?;
        open.open_frame(&raw, &tags[..tl], &mut meta, data.as_deref_mut())
            .map_err(|_| ReadError::Integrity { req_id })?;
        let msg = Message::decode(hdr.msg_type, &meta)
            .map_err(|err| ReadError::Message { req_id, err })?;
        Ok(Some((hdr, msg, data, extra)))
    }

    /// Reads one data-less frame of the handshake, whose header `allow`
    /// accepts: its header and undecoded fields. `Ok(None)` on a clean end
    /// of stream.
    pub(crate) async fn read_raw(
        &mut self,
        allow: impl FnOnce(&FrameHeader) -> Result<(), ProtoError>,
    ) -> Result<Option<(FrameHeader, Vec<u8>)>, ReadError> {
        let Some(raw) = self.read_header().await.map_err(ReadError::Io)? else {
            return Ok(None);
        };
        let req_id = raw_req_id(&raw);
        let hdr = FrameHeader::decode(&raw).map_err(|err| ReadError::Header { req_id, err })?;
        allow(&hdr).map_err(|err| ReadError::Message { req_id, err })?;
        if hdr.data_len != 0 {
            return Err(ReadError::Message {
                req_id,
                err: ProtoError::Malformed("handshake", "data in a handshake frame"),
            });
        }
        let meta = self
            .read_vec(hdr.meta_len as usize)
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::UnexpectedEof => ReadError::Truncated { req_id },
                _ => ReadError::Io(e),
            })?;
        Ok(Some((hdr, meta)))
    }
}

/// The request id field of a raw header, whether or not the header is valid.
fn raw_req_id(raw: &[u8; HEADER_LEN]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&raw[8..16]);
    u64::from_le_bytes(b)
}

/// One piece of outgoing bytes.
pub(crate) enum OutBuf {
    /// Headers, metadata and small data.
    Bytes(Vec<u8>),
    /// Frame data owned by the frame.
    Data(AlignedBuf),
    /// Frame data shared with others (e.g. the same write sent to several replicas).
    Shared(Rc<AlignedBuf>),
}

impl OutBuf {
    pub(crate) fn len(&self) -> usize {
        self.as_init().len()
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.as_init()
    }

    /// The bytes, writable: a shared buffer still shared with others is
    /// first replaced by a copy of its own (from the aligned-buffer pool).
    pub(crate) fn make_mut(&mut self) -> &mut [u8] {
        if let OutBuf::Shared(rc) = self {
            let own = match Rc::get_mut(rc) {
                Some(_) => None,
                None => Some(AlignedBuf::copy_from(rc)),
            };
            if let Some(b) = own {
                *self = OutBuf::Data(b);
            }
        }
        match self {
            OutBuf::Bytes(v) => v,
            OutBuf::Data(b) => b,
            // Unique, checked above.
            OutBuf::Shared(rc) => Rc::get_mut(rc).map_or(&mut [][..], |b| &mut b[..]),
        }
    }
}

impl IoBuf for OutBuf {
    fn as_init(&self) -> &[u8] {
        match self {
            OutBuf::Bytes(v) => v,
            OutBuf::Data(b) => b,
            OutBuf::Shared(b) => b,
        }
    }
}

/// What an outgoing frame keeps reserved until it is on the socket.
pub(crate) enum Hold {
    /// Nothing.
    None,
    /// A server request's permit (released once its reply is written).
    Permit(#[allow(dead_code)] Permit),
    /// A client call's permit, shared with the waiting call.
    Shared(#[allow(dead_code)] Rc<Permit>),
}

/// One complete frame, written contiguously.
pub(crate) struct Outgoing {
    /// Header and metadata (and small data).
    pub(crate) head: Vec<u8>,
    /// Frame data, if any and not inlined in `head`.
    pub(crate) data: Option<OutBuf>,
    /// Released once the frame is on the socket (or dropped).
    pub(crate) hold: Hold,
    /// Encoded with room for tags after the header (protected modes).
    pub(crate) protected: bool,
}

/// Frame data to send.
pub(crate) enum OutData<'a> {
    /// Borrowed bytes: copied.
    Slice(&'a [u8]),
    /// An owned buffer: sent as is.
    Owned(AlignedBuf),
    /// A shared buffer: sent as is.
    Shared(Rc<AlignedBuf>),
}

impl OutData<'_> {
    /// Bytes of data.
    pub(crate) fn len(&self) -> usize {
        match self {
            OutData::Slice(s) => s.len(),
            OutData::Owned(b) => b.len(),
            OutData::Shared(b) => b.len(),
        }
    }
}

/// Encodes a frame: header and metadata in one vector, followed by the
/// data (copied into the vector when small and borrowed). `protected`:
/// with room after the header for the tags the connection's sealing
/// writes (see [`crate::seal`]).
pub(crate) fn encode_frame(
    req_id: u64,
    msg: &Message,
    data: Option<OutData<'_>>,
    protected: bool,
) -> Result<Outgoing, ProtoError> {
    let data = data.filter(|d| d.len() > 0);
    let data_len = data.as_ref().map_or(0, OutData::len);
    if data_len > MAX_DATA as usize {
        return Err(ProtoError::TooLarge {
            what: "frame data",
            len: u32::try_from(data_len).unwrap_or(u32::MAX),
            max: MAX_DATA,
        });
    }
    let inline = match &data {
        Some(OutData::Slice(s)) if s.len() <= INLINE_DATA => s.len(),
        _ => 0,
    };
    let room = if protected {
        tags_len(data_len as u32)
    } else {
        0
    };
    // The fields are encoded in place behind the header and the tags'
    // room; the header, which says their length, is written after.
    let mut head = Vec::with_capacity(HEADER_LEN + room + META_GUESS + inline);
    head.resize(HEADER_LEN + room, 0);
    msg.encode_into(&mut head);
    let meta_len = head.len() - HEADER_LEN - room;
    if meta_len > MAX_META as usize {
        return Err(ProtoError::TooLarge {
            what: "message fields",
            len: u32::try_from(meta_len).unwrap_or(u32::MAX),
            max: MAX_META,
        });
    }
    let hdr = FrameHeader {
        msg_type: msg.msg_type() as u16,
        flags: 0,
        req_id,
        meta_len: meta_len as u32,
        data_len: data_len as u32,
    };
    head[..HEADER_LEN].copy_from_slice(&hdr.encode());
    let data = match data {
        None => None,
        Some(OutData::Slice(s)) if s.len() <= INLINE_DATA => {
            head.extend_from_slice(s);
            None
        }
        Some(OutData::Slice(s)) => Some(OutBuf::Data(AlignedBuf::copy_from(s))),
        Some(OutData::Owned(b)) => Some(OutBuf::Data(b)),
        Some(OutData::Shared(b)) => Some(OutBuf::Shared(b)),
    };
    Ok(Outgoing {
        head,
        data,
        hold: Hold::None,
        protected,
    })
}

/// Encodes a data-less handshake frame of `msg_type` with fields `meta`
/// (bounded by the caller).
pub(crate) fn encode_raw(msg_type: u16, req_id: u64, meta: &[u8]) -> Outgoing {
    let hdr = FrameHeader {
        msg_type,
        flags: 0,
        req_id,
        meta_len: meta.len() as u32,
        data_len: 0,
    };
    let mut head = Vec::with_capacity(HEADER_LEN + meta.len());
    head.extend_from_slice(&hdr.encode());
    head.extend_from_slice(meta);
    Outgoing {
        head,
        data: None,
        hold: Hold::None,
        protected: false,
    }
}

/// Writes one unprotected frame directly (used before the writer task
/// exists: the handshake).
pub(crate) async fn write_frame(stream: &mut TcpStream, frame: Outgoing) -> io::Result<()> {
    debug_assert!(!frame.protected);
    let mut iov = vec![OutBuf::Bytes(frame.head)];
    iov.extend(frame.data);
    let BufResult(res, _) = stream.write_vectored_all(iov).await;
    res
}

/// The queue of frames waiting for one connection's writer. It is bounded
/// by its producers: every frame holds (or follows) a budget permit. A
/// frame pushed while the writer is parked is sent at once by the pusher
/// (see [`crate::send_now`]).
pub(crate) struct OutQueue {
    state: RefCell<QueueState>,
    stream: TcpStream,
    /// Seals every frame pushed, once the connection authenticated.
    seal: RefCell<Option<Protect>>,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Outgoing>,
    /// No more frames will be pushed; the writer stops once empty.
    closed: bool,
    /// The socket failed or the connection was closed: frames are dropped
    /// instead of queued.
    dead: bool,
    waker: Option<Waker>,
}

impl Outgoing {
    /// Sends what the socket takes now; true if that was all of it, else
    /// the frame keeps what is left.
    fn send_now(&mut self, stream: &TcpStream) -> bool {
        let data = self.data.as_ref().map_or(&[][..], |d| d.as_init());
        match send_parts(stream, &[&self.head[..], data]) {
            Sent::All => true,
            Sent::Nothing => false,
            Sent::Rest(rest) => {
                self.head = rest;
                self.data = None;
                false
            }
        }
    }
}

impl OutQueue {
    /// The queue of the connection on `stream`.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self {
            state: RefCell::default(),
            stream,
            seal: RefCell::new(None),
        }
    }

    /// Seals every frame pushed from now on with `seal` (the handshake
    /// finished in a protected mode). Frames must then be encoded with
    /// room for their tags ([`OutQueue::is_protected`]).
    pub(crate) fn protect_with(&self, seal: Protect) {
        *self.seal.borrow_mut() = Some(seal);
    }

    /// True once frames are sealed.
    pub(crate) fn is_protected(&self) -> bool {
        self.seal.borrow().is_some()
    }

    /// Queues a frame for the writer, or sends it at once if the writer is
    /// parked with nothing in flight. Returns false (dropping the frame) if
    /// the connection can no longer write.
    ///
    /// In a protected mode the frame is sealed here, under the next
    /// sequence number: pushes are the order frames take on the socket.
    pub(crate) fn push(&self, mut frame: Outgoing) -> bool {
        let mut st = self.state.borrow_mut();
        if st.dead || st.closed {
            drop(st);
            drop(frame);
            return false;
        }
        let sealed = match self.seal.borrow_mut().as_mut() {
            None => !frame.protected,
            Some(seal) => {
                frame.protected
                    && seal
                        .seal_frame(&mut frame.head, frame.data.as_mut())
                        .is_ok()
            }
        };
        if !sealed {
            // A frame encoded for the wrong mode: a bug; never send it.
            debug_assert!(false, "frame encoded for another wire mode");
            drop(st);
            drop(frame);
            self.kill();
            return false;
        }
        if st.items.is_empty() && st.waker.is_some() && frame.send_now(&self.stream) {
            drop(st);
            drop(frame);
            return true;
        }
        st.items.push_back(frame);
        let w = st.waker.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
        true
    }

    /// Tells the writer no more frames will come; it stops once the queue
    /// is empty.
    pub(crate) fn close(&self) {
        let w = {
            let mut st = self.state.borrow_mut();
            st.closed = true;
            st.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Drops every queued frame and refuses new ones; the writer stops.
    pub(crate) fn kill(&self) {
        let (items, w) = {
            let mut st = self.state.borrow_mut();
            st.dead = true;
            st.closed = true;
            (std::mem::take(&mut st.items), st.waker.take())
        };
        drop(items);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// True once the connection can no longer write.
    pub(crate) fn is_dead(&self) -> bool {
        self.state.borrow().dead
    }

    fn try_next(&self) -> Option<Outgoing> {
        let mut st = self.state.borrow_mut();
        if st.dead {
            return None;
        }
        st.items.pop_front()
    }

    async fn next(&self) -> Option<Outgoing> {
        poll_fn(|cx| {
            let mut st = self.state.borrow_mut();
            if st.dead {
                Poll::Ready(None)
            } else if let Some(r) = st.items.pop_front() {
                Poll::Ready(Some(r))
            } else if st.closed {
                Poll::Ready(None)
            } else {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Writes queued frames to `stream` until the queue is closed and empty
/// (or killed), batching whatever is ready into one vectored write. On a
/// socket error, or a write that does not complete within `stall` (the
/// peer stopped reading), the queue is killed, the socket shut down (so the
/// reader wakes up) and the error returned.
pub(crate) async fn write_frames(
    mut stream: TcpStream,
    queue: Rc<OutQueue>,
    stall: Option<Duration>,
) -> io::Result<()> {
    while let Some(first) = queue.next().await {
        let mut iov: Vec<OutBuf> = Vec::new();
        let mut bytes = 0usize;
        let mut done = Vec::new();
        let mut next = Some(first);
        while let Some(mut frame) = next.take() {
            let head = std::mem::take(&mut frame.head);
            bytes += head.len();
            match iov.last_mut() {
                Some(OutBuf::Bytes(acc)) if acc.len() + head.len() <= INBOUND_BUF => {
                    acc.extend_from_slice(&head)
                }
                _ => iov.push(OutBuf::Bytes(head)),
            }
            if let Some(d) = frame.data.take() {
                bytes += d.len();
                iov.push(d);
            }
            done.push(frame);
            if iov.len() + 2 < MAX_IOVECS && bytes < MAX_BATCH_BYTES {
                next = queue.try_next();
            }
        }
        let res = match within(stall, stream.write_vectored_all(iov)).await {
            Some(BufResult(res, _iov)) => res,
            None => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not take our data in time",
            )),
        };
        drop(done);
        if let Err(e) = res {
            queue.kill();
            shutdown(&stream);
            return Err(e);
        }
    }
    Ok(())
}
