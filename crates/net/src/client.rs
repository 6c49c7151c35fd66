//! The client side: one multiplexed connection carrying many concurrent
//! calls, matched to their answers by request id.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use compio::net::TcpStream;
use compio::runtime::JoinHandle;
use futures::channel::oneshot;
use pontoon_buf::AlignedBuf;
use pontoon_proto::{
    Hello, MAX_DATA, Message, PROTOCOL_VERSION, ProtoError, Role, Session, Status,
};
use rustc_hash::FxHashMap;
use tracing::{debug, trace};

use crate::budget::Budget;
use crate::wire::{
    FrameReader, Hold, OutData, OutQueue, ReadError, encode_frame, shutdown, within, write_frame,
    write_frames,
};
use crate::{Limits, NetError};

/// An answer: the message and its data.
pub(crate) type Answer = (Message, Option<AlignedBuf>);

type Waiter = oneshot::Sender<Result<Answer, NetError>>;

/// Why a call failed, and whether its request had been handed to the
/// connection (then the peer may have acted on it).
pub(crate) enum CallError {
    /// The request never left this process.
    NotSent(NetError),
    /// The request was queued or sent.
    Sent(NetError),
}

impl CallError {
    pub(crate) fn into_inner(self) -> NetError {
        match self {
            CallError::NotSent(e) | CallError::Sent(e) => e,
        }
    }
}

impl From<ReadError> for NetError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => NetError::Io(e),
            ReadError::Header { err, .. } | ReadError::Message { err, .. } => NetError::Proto(err),
            ReadError::Truncated { .. } => NetError::Closed,
        }
    }
}

/// State shared by a connection's handle and its reader and writer tasks.
struct Inner {
    stream: TcpStream,
    /// Calls waiting for their answer, by request id.
    pending: RefCell<FxHashMap<u64, Waiter>>,
    next_id: Cell<u64>,
    closed: Cell<bool>,
    budget: Rc<Budget>,
    queue: Rc<OutQueue>,
}

impl Inner {
    /// Marks the connection closed, shuts the socket down and fails every
    /// outstanding call with [`NetError::Closed`]. Idempotent.
    fn fail(&self) {
        if self.closed.replace(true) {
            return;
        }
        self.queue.kill();
        shutdown(&self.stream);
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        for (_, tx) in pending {
            let _ = tx.send(Err(NetError::Closed));
        }
    }
}

/// Removes a call's waiter when the call ends, however it ends (answer,
/// timeout, the caller dropping the call), so a late answer is dropped.
struct PendingGuard<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.inner.pending.borrow_mut().remove(&self.id);
    }
}

/// How a caller that may stop wanting an answer says so: asked every
/// `every` while no answer has come, it answers whether it still wants
/// one (a client whose map moved the object to another primary does not).
pub struct KeepWaiting<'a> {
    /// How often to ask.
    pub every: Duration,
    /// Whether the answer is still wanted.
    pub still_wanted: &'a dyn Fn() -> bool,
    /// Why it would not be, for the error.
    pub why: &'static str,
}

/// Client side: one multiplexed connection to a server.
///
/// Calls may be issued concurrently from any number of tasks of the
/// thread that created the connection; each gets its own request id and
/// waits for its own answer, whatever order answers arrive in. Dropping the
/// last `Rc` closes the connection.
pub struct RpcConn {
    inner: Rc<Inner>,
    peer: SocketAddr,
    /// Reader and writer tasks: cancelled when the connection is dropped.
    _tasks: [JoinHandle<()>; 2],
}

impl std::fmt::Debug for RpcConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcConn")
            .field("peer", &self.peer)
            .field("closed", &self.inner.closed.get())
            .field("outstanding", &self.inner.pending.borrow().len())
            .finish()
    }
}

impl RpcConn {
    /// Connects with a timeout (covering the TCP connect and the hello),
    /// sends `Hello{version: PROTOCOL_VERSION, role}` and checks the reply
    /// is `Ok`. Uses the default [`Limits`].
    pub async fn connect(
        addr: SocketAddr,
        role: Role,
        timeout: Duration,
    ) -> Result<Rc<RpcConn>, NetError> {
        Self::connect_with(addr, role, timeout, Limits::default()).await
    }

    /// [`RpcConn::connect`] with explicit limits (`max_in_flight` and
    /// `max_buffered_bytes` bound this connection's outstanding calls).
    pub async fn connect_with(
        addr: SocketAddr,
        role: Role,
        timeout: Duration,
        limits: Limits,
    ) -> Result<Rc<RpcConn>, NetError> {
        Self::connect_in_session(addr, role, None, timeout, limits).await
    }

    /// [`RpcConn::connect_with`] as connection `session.seq` of a session
    /// (see [`Session`]): the server stops taking requests from the
    /// session's earlier connections.
    pub(crate) async fn connect_in_session(
        addr: SocketAddr,
        role: Role,
        session: Option<Session>,
        timeout: Duration,
        limits: Limits,
    ) -> Result<Rc<RpcConn>, NetError> {
        let (stream, reader) = within(Some(timeout), handshake(addr, role, session))
            .await
            .ok_or(NetError::Timeout)??;
        let queue = Rc::new(OutQueue::new(stream.clone()));
        let inner = Rc::new(Inner {
            stream: stream.clone(),
            pending: RefCell::default(),
            next_id: Cell::new(1),
            closed: Cell::new(false),
            budget: Budget::new(limits.max_in_flight, limits.max_buffered_bytes),
            queue: queue.clone(),
        });
        let writer = {
            let inner = inner.clone();
            compio::runtime::spawn(async move {
                if let Err(e) = write_frames(stream, queue, None).await {
                    debug!(%addr, "writing requests failed: {e}");
                }
                inner.fail();
            })
        };
        let reader = compio::runtime::spawn(read_answers(inner.clone(), reader, addr));
        debug!(%addr, "connected");
        Ok(Rc::new(RpcConn {
            inner,
            peer: addr,
            _tasks: [reader, writer],
        }))
    }

    /// Sends a request and waits for its answer (any message; usually a
    /// `Reply`, a `PeerInfo` for a `PeerQuery`) with its data.
    ///
    /// At most `max_in_flight` calls are outstanding per connection (and at
    /// most `max_buffered_bytes` of their data): further calls wait for a
    /// slot, first come first served. `timeout` covers the whole call,
    /// including that wait; on timeout the call's slot is released and a
    /// late answer dropped. If the connection breaks, every outstanding
    /// call fails with [`NetError::Closed`].
    pub async fn call(
        &self,
        msg: &Message,
        data: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, NetError> {
        self.try_call(msg, data.map(OutData::Slice), timeout)
            .await
            .map_err(CallError::into_inner)
    }

    /// [`RpcConn::call`] with data in a shared aligned buffer, sent without
    /// copying (e.g. the same write data sent to several replicas).
    pub async fn call_shared(
        &self,
        msg: &Message,
        data: Option<Rc<AlignedBuf>>,
        timeout: Duration,
    ) -> Result<Answer, NetError> {
        self.try_call(msg, data.map(OutData::Shared), timeout)
            .await
            .map_err(CallError::into_inner)
    }

    /// A call that tells whether its request was handed to the connection.
    pub(crate) async fn try_call(
        &self,
        msg: &Message,
        data: Option<OutData<'_>>,
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        self.try_call_watched(msg, data, timeout, None).await
    }

    /// [`RpcConn::try_call`] whose caller may stop waiting: every
    /// `keep.every` without an answer it is asked whether it still wants
    /// one. A call answered within the first period costs no more than an
    /// unwatched one (one timer).
    pub(crate) async fn try_call_watched(
        &self,
        msg: &Message,
        data: Option<OutData<'_>>,
        timeout: Duration,
        keep: Option<&KeepWaiting<'_>>,
    ) -> Result<Answer, CallError> {
        let Some(keep) = keep else {
            return match within(Some(timeout), self.call_inner(msg, data)).await {
                Some(r) => r,
                None => Err(CallError::Sent(NetError::Timeout)),
            };
        };
        let deadline = Instant::now() + timeout;
        let mut call = std::pin::pin!(self.call_inner(msg, data));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CallError::Sent(NetError::Timeout));
            }
            if let Some(r) = within(Some(left.min(keep.every)), &mut call).await {
                return r;
            }
            if !(keep.still_wanted)() {
                return Err(CallError::Sent(NetError::Abandoned(keep.why)));
            }
        }
    }

    async fn call_inner(
        &self,
        msg: &Message,
        data: Option<OutData<'_>>,
    ) -> Result<Answer, CallError> {
        let inner = &*self.inner;
        if inner.closed.get() {
            return Err(CallError::NotSent(NetError::Closed));
        }
        let data_len = data.as_ref().map_or(0, OutData::len);
        if data_len > MAX_DATA as usize {
            return Err(CallError::NotSent(NetError::Proto(ProtoError::TooLarge {
                what: "frame data",
                len: u32::try_from(data_len).unwrap_or(u32::MAX),
                max: MAX_DATA,
            })));
        }
        // Wait for a slot before copying the data: waiting calls hold no
        // buffers.
        let permit = Rc::new(inner.budget.acquire(data_len).await);
        if inner.closed.get() {
            return Err(CallError::NotSent(NetError::Closed));
        }
        let id = inner.next_id.get();
        inner.next_id.set(id.wrapping_add(1).max(1));
        let mut frame =
            encode_frame(id, msg, data).map_err(|e| CallError::NotSent(NetError::Proto(e)))?;
        // The slot stays taken while either the call waits or its request
        // is still queued.
        frame.hold = Hold::Shared(permit.clone());
        let (tx, rx) = oneshot::channel();
        inner.pending.borrow_mut().insert(id, tx);
        let _guard = PendingGuard { inner, id };
        if !inner.queue.push(frame) {
            return Err(CallError::NotSent(NetError::Closed));
        }
        let answer = rx.await;
        drop(permit);
        match answer {
            Ok(r) => r.map_err(CallError::Sent),
            Err(oneshot::Canceled) => Err(CallError::Sent(NetError::Closed)),
        }
    }

    /// True once the connection is closed or broken; it never reopens.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.get()
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Calls waiting for their answer.
    pub fn outstanding(&self) -> usize {
        self.inner.pending.borrow().len()
    }

    /// Closes the connection; pending calls fail with [`NetError::Closed`].
    pub fn close(&self) {
        self.inner.fail();
    }
}

impl Drop for RpcConn {
    fn drop(&mut self) {
        self.inner.fail();
    }
}

/// Connects, sends the hello and checks its answer.
async fn handshake(
    addr: SocketAddr,
    role: Role,
    session: Option<Session>,
) -> Result<(TcpStream, FrameReader), NetError> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        role,
        session,
    });
    write_frame(&mut stream, encode_frame(0, &hello, None)?).await?;
    let mut reader = FrameReader::new(stream.clone());
    match reader.read_frame(|_| async { Ok(()) }).await {
        Ok(Some((_, Message::Reply(r), _, ()))) if r.status == Status::Ok => Ok((stream, reader)),
        Ok(Some((_, Message::Reply(r), _, ()))) => Err(NetError::HelloRefused(format!(
            "{:?}: {}",
            r.status, r.message
        ))),
        Ok(Some(_)) => Err(NetError::Proto(ProtoError::Malformed(
            "hello",
            "the answer is not a reply",
        ))),
        Ok(None) => Err(NetError::Closed),
        Err(e) => Err(e.into()),
    }
}

/// Hands every answer to its waiting call until the connection ends, then
/// fails the connection.
async fn read_answers(inner: Rc<Inner>, mut reader: FrameReader, addr: SocketAddr) {
    loop {
        match reader.read_frame(|_| async { Ok(()) }).await {
            Ok(Some((hdr, msg, data, ()))) => {
                let waiter = inner.pending.borrow_mut().remove(&hdr.req_id);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(Ok((msg, data)));
                    }
                    None => trace!(%addr, req_id = hdr.req_id, "answer without a waiter dropped"),
                }
            }
            // The frame was read whole: the stream is still in sync, so
            // only that call fails.
            Err(ReadError::Message { req_id, err }) => {
                debug!(%addr, req_id, "undecodable answer: {err}");
                let waiter = inner.pending.borrow_mut().remove(&req_id);
                if let Some(tx) = waiter {
                    let _ = tx.send(Err(NetError::Proto(err)));
                }
            }
            Ok(None) => {
                debug!(%addr, "closed by the server");
                break;
            }
            Err(e) => {
                debug!(%addr, "connection failed: {e:?}");
                break;
            }
        }
    }
    inner.fail();
}
