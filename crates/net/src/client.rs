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
use pontoon_proto::handshake::MAX_HANDSHAKE_META;
use pontoon_proto::{
    AuthChallenge, AuthHello, AuthProof, FrameHeader, Hello, MAX_DATA, Message, MsgType,
    PROTOCOL_VERSION, ProtoError, Reply, Role, Session, Status,
};
use rustc_hash::FxHashMap;
use tracing::{debug, trace, warn};

use crate::auth::{
    self, AuthError, ClientAuth, SessionKeys, Transcript, WireMode, check_entity_name, counters,
};
use crate::budget::Budget;
use crate::wire::{
    FrameReader, Hold, OutData, OutQueue, ReadError, encode_frame, encode_raw, shutdown, within,
    write_frame, write_frames,
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
            ReadError::Integrity { .. } => NetError::Auth(AuthError::Integrity),
        }
    }
}

/// How a connection introduces itself.
#[derive(Clone, Debug)]
pub(crate) enum Credential {
    /// A plain hello claiming a role (mode none).
    Role(Role),
    /// An entity with its key, in its mode.
    Auth(Rc<ClientAuth>),
}

impl Credential {
    /// The role the connection speaks as.
    pub(crate) fn role(&self) -> Role {
        match self {
            Credential::Role(r) => *r,
            Credential::Auth(a) => a.role(),
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
        self.fail_with(&NetError::Closed);
    }

    /// [`Inner::fail`], failing outstanding calls with `why`.
    fn fail_with(&self, why: &NetError) {
        if self.closed.replace(true) {
            return;
        }
        self.queue.kill();
        shutdown(&self.stream);
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        for (_, tx) in pending {
            let _ = tx.send(Err(why.duplicate()));
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
    /// The server's entity, when the connection authenticated.
    server_entity: Option<String>,
    mode: WireMode,
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
        Self::connect_in_session(addr, &Credential::Role(role), None, timeout, limits).await
    }

    /// Connects as `auth`'s entity: in a protected mode, proves the
    /// entity's key, checks the server's proof and protects every frame
    /// (see [`crate::auth`]); in [`WireMode::None`], says a plain hello
    /// with the entity's role. `timeout` covers the TCP connect and the
    /// whole handshake.
    pub async fn connect_auth(
        addr: SocketAddr,
        auth: &ClientAuth,
        timeout: Duration,
        limits: Limits,
    ) -> Result<Rc<RpcConn>, NetError> {
        let cred = Credential::Auth(Rc::new(auth.clone()));
        Self::connect_in_session(addr, &cred, None, timeout, limits).await
    }

    /// [`RpcConn::connect_with`] as connection `session.seq` of a session
    /// (see [`Session`]): the server stops taking requests from the
    /// session's earlier connections.
    pub(crate) async fn connect_in_session(
        addr: SocketAddr,
        cred: &Credential,
        session: Option<Session>,
        timeout: Duration,
        limits: Limits,
    ) -> Result<Rc<RpcConn>, NetError> {
        let said = within(Some(timeout), handshake(addr, cred, session)).await;
        let Some(said) = said else {
            if matches!(cred, Credential::Auth(a) if a.mode() != WireMode::None) {
                counters::TIMED_OUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return Err(NetError::Timeout);
        };
        let Said {
            stream,
            mut reader,
            keys,
            server_entity,
        } = said.inspect_err(|e| {
            if let NetError::Auth(e) = e {
                counters::refused(e);
            }
        })?;
        let queue = Rc::new(OutQueue::new(stream.clone()));
        let mode = match (cred, keys) {
            (Credential::Auth(a), Some(keys)) => {
                reader.protect_with(keys.recv);
                queue.protect_with(keys.send);
                counters::AUTHENTICATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                a.mode()
            }
            _ => WireMode::None,
        };
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
            server_entity,
            mode,
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
        let mut frame = encode_frame(id, msg, data, inner.queue.is_protected())
            .map_err(|e| CallError::NotSent(NetError::Proto(e)))?;
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

    /// The entity the server named itself as and proved it belongs to the
    /// cluster (it holds our key); `None` in mode none.
    pub fn server_entity(&self) -> Option<&str> {
        self.server_entity.as_deref()
    }

    /// The connection's wire mode.
    pub fn mode(&self) -> WireMode {
        self.mode
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

/// What a finished handshake leaves.
struct Said {
    stream: TcpStream,
    reader: FrameReader,
    /// Session keys, in a protected mode.
    keys: Option<SessionKeys>,
    server_entity: Option<String>,
}

/// Connects, says hello (or authenticates) and checks the answer.
async fn handshake(
    addr: SocketAddr,
    cred: &Credential,
    session: Option<Session>,
) -> Result<Said, NetError> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let reader = FrameReader::new(stream.clone());
    match cred {
        Credential::Auth(a) if a.mode() != WireMode::None => {
            authenticate(stream, reader, a, session).await
        }
        _ => {
            let role = cred.role();
            let auth = match cred {
                Credential::Auth(a) => Some(&**a),
                Credential::Role(_) => None,
            };
            plain_hello(&mut stream, reader, role, session, auth)
                .await
                .map(|reader| Said {
                    stream,
                    reader,
                    keys: None,
                    server_entity: None,
                })
        }
    }
}

/// Mode none: sends `Hello{version, role, session}`, expects `Ok`.
async fn plain_hello(
    stream: &mut TcpStream,
    mut reader: FrameReader,
    role: Role,
    session: Option<Session>,
    auth: Option<&ClientAuth>,
) -> Result<FrameReader, NetError> {
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        role,
        session,
    });
    write_frame(stream, encode_frame(0, &hello, None, false)?).await?;
    match reader.read_frame(|_| async { Ok(()) }).await {
        Ok(Some((_, Message::Reply(r), _, ()))) if r.status == Status::Ok => Ok(reader),
        Ok(Some((_, Message::Reply(r), _, ()))) => Err(refused(&r, auth)),
        Ok(Some(_)) => Err(NetError::Proto(ProtoError::Malformed(
            "hello",
            "the answer is not a reply",
        ))),
        Ok(None) => Err(NetError::Closed),
        Err(e) => Err(e.into()),
    }
}

/// The error for a server's refusal `r`: an authentication error when it
/// is one, else [`NetError::HelloRefused`].
fn refused(r: &Reply, auth: Option<&ClientAuth>) -> NetError {
    match AuthError::from_refusal(&r.message, auth) {
        AuthError::Handshake(_) if auth.is_none_or(|a| a.mode() == WireMode::None) => {
            NetError::HelloRefused(format!("{:?}: {}", r.status, r.message))
        }
        e => NetError::Auth(e),
    }
}

/// Reads the server's next handshake frame: `expect`, or a refusal.
async fn read_step(
    reader: &mut FrameReader,
    expect: MsgType,
    auth: &ClientAuth,
) -> Result<Vec<u8>, NetError> {
    let allow = |h: &FrameHeader| {
        if (h.msg_type == expect as u16 || h.msg_type == MsgType::Reply as u16)
            && h.meta_len <= MAX_HANDSHAKE_META + 1024
        {
            Ok(())
        } else {
            Err(ProtoError::Malformed("handshake", "unexpected answer"))
        }
    };
    match reader.read_raw(allow).await {
        Ok(Some((h, meta))) if h.msg_type == expect as u16 => Ok(meta),
        Ok(Some((h, meta))) => match Message::decode(h.msg_type, &meta)? {
            Message::Reply(r) if r.status != Status::Ok => Err(refused(&r, Some(auth))),
            _ => Err(NetError::Auth(AuthError::Handshake(
                "the server accepted without authenticating: it does not run this mode".into(),
            ))),
        },
        Ok(None) => Err(NetError::Closed),
        Err(e) => Err(e.into()),
    }
}

/// A protected mode: `AuthHello`, challenge, our proof, the server's proof.
async fn authenticate(
    mut stream: TcpStream,
    mut reader: FrameReader,
    a: &ClientAuth,
    session: Option<Session>,
) -> Result<Said, NetError> {
    let hello = AuthHello {
        version: auth::VERSION,
        role: a.role(),
        session,
        mode: a.mode().code(),
        entity: a.entity().to_string(),
        nonce: auth::nonce().map_err(NetError::Auth)?,
    };
    let frame = encode_raw(MsgType::AuthHello as u16, 0, &hello.encode());
    write_frame(&mut stream, frame).await?;

    let meta = read_step(&mut reader, MsgType::AuthChallenge, a).await?;
    let ch = AuthChallenge::decode(&meta)?;
    let server_mode = WireMode::from_code(ch.mode).ok_or(NetError::Proto(
        ProtoError::Malformed("auth challenge", "unknown mode"),
    ))?;
    if server_mode != a.mode() {
        return Err(NetError::Auth(AuthError::ModeMismatch {
            server: server_mode,
            client: a.mode(),
        }));
    }
    check_entity_name(&ch.entity).map_err(NetError::Auth)?;
    let t = Transcript::of(&hello, a.mode(), &ch.entity, ch.nonce);
    let proof = AuthProof {
        proof: t.client_proof(a.key()),
    };
    let frame = encode_raw(MsgType::AuthProof as u16, 0, &proof.encode());
    write_frame(&mut stream, frame).await?;

    let meta = read_step(&mut reader, MsgType::AuthProof, a).await?;
    let theirs = AuthProof::decode(&meta)?;
    if !crate::seal::ct_eq(&theirs.proof, &t.server_proof(a.key())) {
        return Err(NetError::Auth(AuthError::ServerProof(ch.entity)));
    }
    let keys = SessionKeys::client(a.mode(), &t, a.key()).ok_or_else(|| {
        NetError::Auth(AuthError::Handshake(
            "cannot set up the session keys".into(),
        ))
    })?;
    let addr = addr_of(&stream);
    debug!(%addr, entity = a.entity(), server = %ch.entity, mode = %a.mode(), "authenticated");
    Ok(Said {
        stream,
        reader,
        keys: Some(keys),
        server_entity: Some(ch.entity),
    })
}

fn addr_of(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string())
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
            Err(ReadError::Integrity { req_id }) => {
                warn!(%addr, req_id, "an answer failed its integrity check; closing");
                counters::INTEGRITY_FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                inner.fail_with(&NetError::Auth(AuthError::Integrity));
                return;
            }
            Err(e) => {
                debug!(%addr, "connection failed: {e:?}");
                break;
            }
        }
    }
    inner.fail();
}
