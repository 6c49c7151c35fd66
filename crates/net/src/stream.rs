//! The two directions of a front-end connection's socket (NBD, NVMe/TCP):
//! a buffered reader that hands out fixed-size protocol headers and reads
//! write payloads straight into aligned buffers, and a reply queue drained
//! by a writer task that serialises whole replies onto the socket with
//! vectored writes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};

use compio::BufResult;
use compio::buf::{IntoInner, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use compio::net::TcpStream;
use pontoon_buf::AlignedBuf;

use crate::budget::Permit;
use crate::send_now::{MAX_PARTS, Sent, send_parts};

/// Size of the inbound buffer: headers and small payloads are copied out of
/// it, so one `recv` usually brings in several pipelined requests.
const INBOUND_BUF: usize = 64 * 1024;
/// Payloads up to this size go through the inbound buffer; larger ones are
/// read directly into their destination.
const COPY_THRESHOLD: usize = 16 * 1024;
/// Most iovecs handed to one `sendmsg` (well under `IOV_MAX`).
const MAX_IOVECS: usize = 256;
/// Soft limit on bytes per vectored write, so permits are released steadily.
const MAX_BATCH_BYTES: usize = 8 << 20;

fn broken() -> io::Error {
    io::Error::other("inbound stream abandoned after a cancelled read")
}

/// The receiving side of a connection: a TCP socket, or any other byte
/// stream (a TLS session's plaintext).
pub struct Inbound<S = TcpStream> {
    stream: S,
    /// Received bytes; `None` once a read was cancelled (the stream is then
    /// out of sync and must not be read again).
    buf: Option<Vec<u8>>,
    /// Start of the unconsumed bytes in `buf`.
    pos: usize,
}

impl<S: AsyncRead> Inbound<S> {
    /// Wraps a connected socket (or stream).
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Some(Vec::with_capacity(INBOUND_BUF)),
            pos: 0,
        }
    }

    /// Bytes received and not yet consumed.
    pub fn buffered(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() - self.pos)
    }

    /// Reads until at least `n` bytes (at most the buffer size) are
    /// buffered. Returns `Ok(false)` on end of stream with nothing buffered,
    /// and `UnexpectedEof` on end of stream inside a message.
    async fn fill(&mut self, n: usize) -> io::Result<bool> {
        assert!(n <= INBOUND_BUF);
        let mut buf = self.buf.take().ok_or_else(broken)?;
        if buf.len() - self.pos < n && self.pos > 0 {
            buf.copy_within(self.pos.., 0);
            buf.truncate(buf.len() - self.pos);
            self.pos = 0;
        }
        let mut result = Ok(true);
        while buf.len() < n {
            let len = buf.len();
            let BufResult(res, slice) = self.stream.read(buf.slice(len..)).await;
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

    /// Takes `N` bytes already buffered, if there are that many.
    pub fn try_array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let buf = self.buf.as_ref()?;
        let bytes = buf.get(self.pos..self.pos + N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        self.pos += N;
        Some(out)
    }

    /// Reads the next `N`-byte message; `None` on a clean end of stream
    /// before its first byte.
    pub async fn read_array<const N: usize>(&mut self) -> io::Result<Option<[u8; N]>> {
        if !self.fill(N).await? {
            return Ok(None);
        }
        self.try_array().map(Some).ok_or_else(broken)
    }

    /// Reads `len` bytes (the caller bounds `len`) into a new vector.
    pub async fn read_vec(&mut self, len: usize) -> io::Result<Vec<u8>> {
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

    /// Reads `len` bytes into `dst[at..at + len]`. `dst` keeps its length.
    pub async fn read_into(
        &mut self,
        mut dst: AlignedBuf,
        at: usize,
        len: usize,
    ) -> io::Result<AlignedBuf> {
        let end = at + len;
        assert!(end <= dst.len());
        if len <= COPY_THRESHOLD && !self.fill(len).await? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = len.min(self.buffered());
        if take > 0 {
            let buf = self.buf.as_ref().ok_or_else(broken)?;
            dst[at..at + take].copy_from_slice(&buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        if take < len {
            if self.buf.is_none() {
                return Err(broken());
            }
            let full = dst.len();
            dst.set_len(at + take);
            let BufResult(res, slice) = self.stream.read_exact(dst.slice(at + take..end)).await;
            dst = slice.into_inner();
            res?;
            dst.set_len(full);
        }
        Ok(dst)
    }

    /// Reads and drops `len` bytes.
    pub async fn discard(&mut self, mut len: u64) -> io::Result<()> {
        while len > 0 {
            if self.buffered() == 0 && !self.fill(1).await? {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let take = len.min(self.buffered() as u64);
            self.pos += take as usize;
            len -= take;
        }
        Ok(())
    }
}

/// One piece of outgoing bytes.
pub enum OutBuf {
    /// Headers and small payloads.
    Bytes(Vec<u8>),
    /// A range of a data buffer (read data), possibly shared by several chunks.
    Data {
        /// The buffer.
        buf: Rc<AlignedBuf>,
        /// Start of the range.
        start: usize,
        /// End of the range.
        end: usize,
    },
}

impl IoBuf for OutBuf {
    fn as_init(&self) -> &[u8] {
        match self {
            OutBuf::Bytes(v) => v,
            OutBuf::Data { buf, start, end } => &buf[*start..*end],
        }
    }
}

/// One complete reply (all chunks of a structured reply), written
/// contiguously. Holds the request's budget permit until written.
pub struct Reply {
    /// Bytes to send, in order.
    pub parts: Vec<OutBuf>,
    /// Released once the reply is on the socket (or dropped).
    pub permit: Option<Permit>,
}

/// The queue of finished replies of one connection. A reply pushed while
/// the writer is parked is sent at once by the pusher (see
/// [`crate::send_now`]).
pub struct ReplyQueue {
    state: RefCell<QueueState>,
    /// The socket replies may be sent on at once; `None` when the bytes
    /// must go through the writer (a TLS session encrypts them there).
    stream: Option<TcpStream>,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Reply>,
    /// No more replies will be pushed; the writer stops once empty.
    closed: bool,
    /// The socket failed: replies are dropped instead of queued.
    dead: bool,
    waker: Option<Waker>,
}

impl Reply {
    /// Sends what the socket takes now; true if that was all of it, else
    /// the reply keeps what is left.
    fn send_now(&mut self, stream: &TcpStream) -> bool {
        if self.parts.len() > MAX_PARTS {
            return false;
        }
        let mut parts = [&[][..]; MAX_PARTS];
        for (slot, part) in parts.iter_mut().zip(&self.parts) {
            *slot = part.as_init();
        }
        match send_parts(stream, &parts[..self.parts.len()]) {
            Sent::All => true,
            Sent::Nothing => false,
            Sent::Rest(rest) => {
                self.parts = vec![OutBuf::Bytes(rest)];
                false
            }
        }
    }
}

impl ReplyQueue {
    /// The queue of the connection on `stream`.
    pub fn new(stream: TcpStream) -> Self {
        Self {
            state: RefCell::default(),
            stream: Some(stream),
        }
    }

    /// A queue whose replies all go through the writer task (for streams
    /// that are not a bare socket, such as a TLS session).
    pub fn writer_only() -> Self {
        Self {
            state: RefCell::default(),
            stream: None,
        }
    }

    /// Queues a reply for the writer, or sends it at once if the writer is
    /// parked with nothing in flight (drops it if the socket failed).
    pub fn push(&self, mut reply: Reply) {
        let mut st = self.state.borrow_mut();
        let sent = |reply: &mut Reply| self.stream.as_ref().is_some_and(|s| reply.send_now(s));
        if st.dead || (st.items.is_empty() && st.waker.is_some() && sent(&mut reply)) {
            drop(st);
            drop(reply);
            return;
        }
        st.items.push_back(reply);
        let w = st.waker.take();
        drop(st);
        if let Some(w) = w {
            w.wake();
        }
    }

    /// Tells the writer no more replies will come.
    pub fn close(&self) {
        let w = {
            let mut st = self.state.borrow_mut();
            st.closed = true;
            st.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// True once the socket failed.
    pub fn is_dead(&self) -> bool {
        self.state.borrow().dead
    }

    fn kill(&self) {
        let items = {
            let mut st = self.state.borrow_mut();
            st.dead = true;
            std::mem::take(&mut st.items)
        };
        drop(items);
    }

    fn try_next(&self) -> Option<Reply> {
        self.state.borrow_mut().items.pop_front()
    }

    async fn next(&self) -> Option<Reply> {
        poll_fn(|cx| {
            let mut st = self.state.borrow_mut();
            if let Some(r) = st.items.pop_front() {
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

/// Writes queued replies to `stream` until the queue is closed and empty,
/// batching whatever is ready into one vectored write. On a socket error
/// the queue is marked dead (pending replies are dropped) and the error
/// returned.
pub async fn write_replies<W: AsyncWrite>(mut stream: W, queue: Rc<ReplyQueue>) -> io::Result<()> {
    while let Some(first) = queue.next().await {
        let mut iov: Vec<OutBuf> = Vec::new();
        let mut bytes = 0usize;
        let mut done = Vec::new();
        let mut next = Some(first);
        while let Some(mut reply) = next.take() {
            for part in reply.parts.drain(..) {
                bytes += part.as_init().len();
                match (iov.last_mut(), part) {
                    (Some(OutBuf::Bytes(acc)), OutBuf::Bytes(b)) => acc.extend_from_slice(&b),
                    (_, part) => iov.push(part),
                }
            }
            done.push(reply);
            if iov.len() + 64 < MAX_IOVECS && bytes < MAX_BATCH_BYTES {
                next = queue.try_next();
            }
        }
        let BufResult(res, _iov) = stream.write_vectored_all(iov).await;
        drop(done);
        if let Err(e) = res {
            queue.kill();
            return Err(e);
        }
    }
    Ok(())
}
