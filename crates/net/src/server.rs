//! The server side: an accept loop and, per connection, a hello exchange,
//! a reader that dispatches every request to its own handler task under
//! the connection's budget, and a writer that sends replies in completion
//! order.
//!
//! Connection states, in order:
//! - *hello*: the first frame must be a `Hello` of our protocol version
//!   (mode none) or an `AuthHello` followed by the rest of the
//!   authentication handshake (protected modes, see [`crate::auth`]),
//!   all within `hello_timeout`;
//! - *serving*: reading requests, dispatching them;
//! - *draining*: the reader stopped (end of stream, socket error, idle
//!   timeout, a frame that does not decode); requests in flight finish and
//!   their replies are written;
//! - *closed*: the writer is done; after an error reply the server lingers
//!   briefly so the peer can read it, then shuts the socket down.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::time::Duration;

use compio::net::{TcpListener, TcpStream};
use compio::runtime::JoinHandle;
use futures::FutureExt;
use pontoon_buf::AlignedBuf;
use pontoon_proto::handshake::MAX_HANDSHAKE_META;
use pontoon_proto::{
    AuthChallenge, AuthHello, AuthProof, FrameHeader, Message, MsgType, PROTOCOL_VERSION,
    ProtoError, Reply, Role, Session, Status,
};
use pontoon_types::{Epoch, Version};
use tracing::{debug, error, warn};

use crate::auth::{
    self, AuthError, Peer, ServerAuth, SessionKeys, Transcript, WireMode, check_entity_name,
    counters, role_of,
};
use crate::budget::{Budget, Permit};
use crate::session::{Member, Sessions};
use crate::wire::{
    FrameReader, Hold, OutData, OutQueue, Outgoing, ReadError, encode_frame, encode_raw, shutdown,
    within, write_frame, write_frames,
};
use crate::{Frame, Limits};

/// After an error reply, how long to keep reading (and dropping) the
/// peer's input so that it can read the reply before the socket closes.
const LINGER: Duration = Duration::from_secs(1);
/// Most bytes dropped while lingering.
const LINGER_BYTES: usize = 4 << 20;
/// Back-off after a failed accept (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Server side: what a listener calls for every request.
pub trait Handler: 'static {
    /// Answers one request from `peer`. Many run concurrently per
    /// connection (each in its own task, up to the connection's
    /// `max_in_flight`); replies go out in completion order, tagged with
    /// the request's id. The reply data, if any, follows the message in
    /// the frame.
    fn handle(
        self: Rc<Self>,
        peer: Role,
        frame: Frame,
    ) -> impl Future<Output = (Message, Option<AlignedBuf>)>;

    /// Answers one request from `peer`, as the connection's handshake
    /// established it: its role (derived from its proven entity in a
    /// protected mode), entity name, key generation and caps. What the
    /// server calls; by default it calls [`Handler::handle`] with the
    /// role. Implement it to check the entity or its caps per request.
    fn handle_from(
        self: Rc<Self>,
        peer: Rc<Peer>,
        frame: Frame,
    ) -> impl Future<Output = (Message, Option<AlignedBuf>)> {
        self.handle(peer.role, frame)
    }
}

/// Accepts connections forever, one task per connection running
/// [`serve_conn`] with `limits`.
///
/// Runs until its future is dropped (e.g. by dropping the `JoinHandle` of
/// the task running it, or by racing it against a stop signal); dropping it
/// closes the listener and every connection it accepted (their sockets are
/// shut down; handler tasks still running finish, their replies are dropped).
pub async fn serve<H: Handler>(listener: TcpListener, handler: Rc<H>, limits: Limits) {
    serve_auth(listener, handler, limits, Rc::new(ServerAuth::none())).await
}

/// [`serve`] with every connection authenticated as `auth` says (its mode
/// may change while serving: see [`ServerAuth::set_mode`]).
pub async fn serve_auth<H: Handler>(
    listener: TcpListener,
    handler: Rc<H>,
    limits: Limits,
    auth: Rc<ServerAuth>,
) {
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    let sessions = Rc::new(Sessions::default());
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                conns.retain(|h| !h.is_finished());
                if conns.len() >= limits.max_connections.max(1) {
                    crate::auth::counters::REFUSED_CONNECTIONS
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    debug!(%peer, open = conns.len(), "refused: too many connections");
                    drop(stream);
                    continue;
                }
                debug!(%peer, "accepted");
                conns.push(compio::runtime::spawn(serve_session_conn(
                    stream,
                    handler.clone(),
                    limits.clone(),
                    sessions.clone(),
                    auth.clone(),
                )));
            }
            Err(e) => {
                warn!("accept: {e}");
                compio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// What every task of one connection shares.
struct Conn<H> {
    handler: Rc<H>,
    peer: Rc<Peer>,
    queue: Rc<OutQueue>,
}

/// Shuts the socket down and drops queued frames when the connection ends,
/// however it ends (including its future being dropped).
struct Teardown {
    stream: TcpStream,
    queue: Rc<OutQueue>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        self.queue.kill();
        shutdown(&self.stream);
    }
}

/// Why the request reader stopped.
#[derive(Debug)]
enum End {
    /// Clean end of stream between frames.
    Eof,
    /// A socket error, an idle timeout, or end of stream inside a header.
    Io(io::Error),
    /// A frame that cannot be understood; answered, then the connection closes.
    Malformed { req_id: u64, detail: String },
    /// A newer connection of the client's session said hello: requests
    /// still arriving here are not dispatched (see [`crate::session`]).
    Superseded,
}

impl From<ReadError> for End {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => End::Io(e),
            ReadError::Header { req_id, err } | ReadError::Message { req_id, err } => {
                End::Malformed {
                    req_id,
                    detail: err.to_string(),
                }
            }
            ReadError::Truncated { req_id } => End::Malformed {
                req_id,
                detail: "connection ended inside a frame".into(),
            },
            ReadError::Integrity { req_id } => End::Malformed {
                req_id,
                detail: AuthError::Integrity.to_string(),
            },
        }
    }
}

/// Encodes a reply with no data (always fits in a frame); `protected`:
/// for a connection that seals its frames.
fn reply_frame(req_id: u64, reply: Reply, protected: bool) -> Option<Outgoing> {
    encode_frame(req_id, &Message::Reply(reply), None, protected).ok()
}

fn malformed(req_id: u64, detail: &str, protected: bool) -> Option<Outgoing> {
    reply_frame(
        req_id,
        Reply::error(Status::Malformed, Epoch(0), detail),
        protected,
    )
}

/// Serves one accepted connection until it closes.
///
/// Expects a `Hello` first (within `limits.hello_timeout`): answers
/// `Reply::ok`, or an error and closes when the protocol version differs;
/// any other first frame is answered `Malformed` and the connection closed.
/// Then reads frames and runs [`Handler::handle`] for each in its own task,
/// at most `limits.max_in_flight` at once and with at most
/// `limits.max_buffered_bytes` of data held; at either limit it stops
/// reading from the socket until some request completes (backpressure, not
/// errors). Replies are written as they complete, with their request's id.
///
/// A frame that fails to decode (bad magic, oversized lengths, unknown
/// type, malformed fields, stream ending inside it) is answered with
/// `Reply::error(Status::Malformed, Epoch(0), detail)` carrying its request
/// id, if its header arrived; then the connection stops reading, answers
/// the requests in flight and closes. Never panics on input.
///
/// A connection served on its own like this has no other connection of its
/// session to be superseded by; [`serve`] tracks sessions across the
/// connections it accepts.
pub async fn serve_conn<H: Handler>(stream: TcpStream, handler: Rc<H>, limits: Limits) {
    serve_conn_auth(stream, handler, limits, Rc::new(ServerAuth::none())).await
}

/// [`serve_conn`], authenticating the peer as `auth` says.
pub async fn serve_conn_auth<H: Handler>(
    stream: TcpStream,
    handler: Rc<H>,
    limits: Limits,
    auth: Rc<ServerAuth>,
) {
    serve_session_conn(stream, handler, limits, Rc::default(), auth).await
}

/// [`serve_conn`] among the other connections of `sessions`.
async fn serve_session_conn<H: Handler>(
    stream: TcpStream,
    handler: Rc<H>,
    limits: Limits,
    sessions: Rc<Sessions>,
    auth: Rc<ServerAuth>,
) {
    let addr: Option<SocketAddr> = stream.peer_addr().ok();
    if let Err(e) = stream.set_nodelay(true) {
        debug!(?addr, "cannot set TCP_NODELAY: {e}");
    }
    let queue = Rc::new(OutQueue::new(stream.clone()));
    let _teardown = Teardown {
        stream: stream.clone(),
        queue: queue.clone(),
    };
    let mut reader = FrameReader::new(stream.clone());

    let hello = within(
        Some(limits.hello_timeout),
        hello(&mut reader, stream.clone(), &auth),
    );
    let Accepted {
        peer,
        session,
        keys,
    } = match hello.await {
        None => {
            if auth.mode() != WireMode::None {
                counters::TIMED_OUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            return debug!(?addr, "no hello in time; closing");
        }
        Some(Err(why)) => {
            debug!(?addr, "hello failed: {why}; closing");
            if why.answered {
                linger(&mut reader, &stream).await;
            }
            return;
        }
        Some(Ok(said)) => said,
    };
    debug!(?addr, ?peer, ?session, "hello");
    if let Some(keys) = keys {
        let keys = *keys;
        reader.protect_with(keys.recv);
        queue.protect_with(keys.send);
    }
    let member = session.map(|s| sessions.join_as(peer.entity.as_deref(), s));

    reader.set_idle_timeout(limits.idle_timeout);
    let writer = compio::runtime::spawn(write_frames(
        stream.clone(),
        queue.clone(),
        limits.idle_timeout,
    ));
    let budget = Budget::new(limits.max_in_flight, limits.max_buffered_bytes);
    let conn = Rc::new(Conn {
        handler,
        peer,
        queue: queue.clone(),
    });
    let end = read_requests(&conn, &mut reader, &budget, member.as_ref()).await;
    drop(conn);
    let answered = match end {
        End::Eof => {
            debug!(?addr, "end of stream; draining");
            false
        }
        End::Io(e) => {
            debug!(?addr, "connection failed: {e}; draining");
            false
        }
        End::Malformed { req_id, detail } => {
            warn!(?addr, req_id, "malformed frame: {detail}; closing");
            malformed(req_id, &detail, queue.is_protected()).is_some_and(|f| queue.push(f))
        }
        End::Superseded => {
            let session = member.as_ref().map(Member::session);
            debug!(
                ?addr,
                ?session,
                "a newer connection of the session said hello; closing"
            );
            false
        }
    };
    // Every request in flight finishes and its reply is written (or
    // dropped, if the socket failed) before the socket closes.
    budget.idle().await;
    queue.close();
    match writer.await {
        Ok(Ok(())) => {
            if answered {
                linger(&mut reader, &stream).await;
            }
        }
        Ok(Err(e)) => debug!(?addr, "writing replies failed: {e}"),
        Err(e) => warn!(?addr, "reply writer ended abnormally: {e}"),
    }
    debug!(?addr, "closed");
}

/// Lets the peer read our last reply: stop sending, drop whatever it still
/// sends for a short while, then return (the caller closes).
async fn linger(reader: &mut FrameReader, stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).shutdown(std::net::Shutdown::Write);
    let _ = within(Some(LINGER), reader.drain(LINGER_BYTES)).await;
}

/// Why the hello exchange failed.
#[derive(Debug)]
struct HelloFailed {
    /// An error reply was sent (the peer may be reading it).
    answered: bool,
    why: String,
}

impl std::fmt::Display for HelloFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// What a successful hello establishes.
struct Accepted {
    peer: Rc<Peer>,
    session: Option<Session>,
    /// Session keys, in a protected mode (boxed: key schedules are large).
    keys: Option<Box<SessionKeys>>,
}

/// The first frame of a connection, answered with a refusal: the reply.
fn refusal(req_id: u64, status: Status, text: String) -> (u64, Reply) {
    (req_id, Reply::error(status, Epoch(0), text))
}

/// Reads the peer's `Hello` (or runs the authentication handshake) and
/// answers it; returns who the peer is, its session, if it named one, and
/// the connection's session keys in a protected mode.
async fn hello(
    reader: &mut FrameReader,
    mut out: TcpStream,
    auth: &ServerAuth,
) -> Result<Accepted, HelloFailed> {
    let failed = |answered, why: String| HelloFailed { answered, why };
    // Refuse anything but a small data-less Hello or AuthHello before
    // reading its body.
    let first = reader
        .read_raw(|h| {
            let hello =
                h.msg_type == MsgType::Hello as u16 || h.msg_type == MsgType::AuthHello as u16;
            if hello && h.data_len == 0 && h.meta_len <= MAX_HANDSHAKE_META {
                Ok(())
            } else {
                Err(ProtoError::Malformed("frame", "expected a Hello first"))
            }
        })
        .await;
    let (hdr, meta) = match first {
        Ok(None) => return Err(failed(false, "closed before hello".into())),
        Err(ReadError::Io(e)) => return Err(failed(false, e.to_string())),
        Err(e) => {
            let End::Malformed { req_id, detail } = End::from(e) else {
                return Err(failed(false, "unreadable hello".into()));
            };
            let sent = match malformed(req_id, &detail, false) {
                Some(f) => write_frame(&mut out, f).await.is_ok(),
                None => false,
            };
            return Err(failed(sent, detail));
        }
        Ok(Some(f)) => f,
    };
    let outcome = if hdr.msg_type == MsgType::AuthHello as u16 {
        authenticate(reader, &mut out, auth, &hdr, &meta).await
    } else {
        plain_hello(&hdr, &meta, auth)
    };
    let (req_id, reply, accepted) = match outcome {
        Ok(Step::Done(accepted, reply)) => (hdr.req_id, reply, Some(accepted)),
        Ok(Step::Refuse(req_id, reply)) => (req_id, reply, None),
        Err(f) => return Err(f),
    };
    let sent = match &reply {
        Some(Answer::Plain(r)) => match reply_frame(req_id, r.clone(), false) {
            Some(f) => write_frame(&mut out, f).await,
            None => Err(io::Error::other("cannot encode the hello reply")),
        },
        Some(Answer::Proof(p)) => {
            let f = encode_raw(MsgType::AuthProof as u16, req_id, &p.encode());
            write_frame(&mut out, f).await
        }
        None => Ok(()),
    };
    match (accepted, sent) {
        (Some(a), Ok(())) => Ok(a),
        (Some(_), Err(e)) => Err(failed(false, e.to_string())),
        (None, sent) => {
            let why = match reply {
                Some(Answer::Plain(r)) => format!("hello refused: {}", r.message),
                _ => "hello refused".into(),
            };
            Err(failed(sent.is_ok(), why))
        }
    }
}

/// The last answer of a hello.
enum Answer {
    Plain(Reply),
    Proof(AuthProof),
}

/// How the hello ends: accepted with a last answer, or refused with one.
enum Step {
    Done(Accepted, Option<Answer>),
    Refuse(u64, Option<Answer>),
}

fn refuse(req_id: u64, status: Status, text: String) -> Step {
    let (id, r) = refusal(req_id, status, text);
    Step::Refuse(id, Some(Answer::Plain(r)))
}

/// Refuses a handshake for `e`, counting it.
fn refuse_auth(req_id: u64, e: AuthError) -> Step {
    counters::refused(&e);
    let status = match e {
        AuthError::BadEntityName { .. } | AuthError::Handshake(_) => Status::Malformed,
        _ => Status::InvalidArgument,
    };
    refuse(req_id, status, e.to_string())
}

/// A plain `Hello` (mode none).
fn plain_hello(hdr: &FrameHeader, meta: &[u8], auth: &ServerAuth) -> Result<Step, HelloFailed> {
    let h = match Message::decode(hdr.msg_type, meta) {
        Ok(Message::Hello(h)) => h,
        Ok(_) => {
            return Ok(refuse(
                hdr.req_id,
                Status::Malformed,
                "expected a Hello first".into(),
            ));
        }
        Err(e) => return Ok(refuse(hdr.req_id, Status::Malformed, e.to_string())),
    };
    if h.version != PROTOCOL_VERSION {
        return Ok(refuse(
            hdr.req_id,
            Status::InvalidArgument,
            format!(
                "protocol version {} is not supported (this server speaks {PROTOCOL_VERSION})",
                h.version
            ),
        ));
    }
    if auth.mode() != WireMode::None {
        return Ok(refuse_auth(hdr.req_id, AuthError::Required(auth.mode())));
    }
    let accepted = Accepted {
        peer: Rc::new(Peer::unauthenticated(h.role)),
        session: h.session,
        keys: None,
    };
    Ok(Step::Done(
        accepted,
        Some(Answer::Plain(Reply::ok(Version::ZERO))),
    ))
}

/// The authentication handshake after an `AuthHello` (see [`crate::auth`]).
async fn authenticate(
    reader: &mut FrameReader,
    out: &mut TcpStream,
    auth: &ServerAuth,
    hdr: &FrameHeader,
    meta: &[u8],
) -> Result<Step, HelloFailed> {
    let failed = |answered, why: String| HelloFailed { answered, why };
    let id = hdr.req_id;
    let h = match AuthHello::decode(meta) {
        Ok(h) => h,
        Err(e) => return Ok(refuse_auth(id, AuthError::Handshake(e.to_string()))),
    };
    if h.version != PROTOCOL_VERSION {
        return Ok(refuse(
            id,
            Status::InvalidArgument,
            format!(
                "protocol version {} is not supported (this server speaks {PROTOCOL_VERSION})",
                h.version
            ),
        ));
    }
    let client_mode = WireMode::from_code(h.mode);
    let Some(mode) = client_mode.filter(|m| *m == auth.mode() && *m != WireMode::None) else {
        return Ok(refuse_auth(
            id,
            match client_mode {
                Some(client) => AuthError::ModeMismatch {
                    server: auth.mode(),
                    client,
                },
                None => AuthError::Handshake(format!("unknown wire mode {}", h.mode)),
            },
        ));
    };
    if let Err(e) = check_entity_name(&h.entity) {
        return Ok(refuse_auth(id, e));
    }
    if role_of(&h.entity) != h.role {
        let e = AuthError::RoleMismatch {
            entity: h.entity.clone(),
            claimed: format!("{:?}", h.role),
        };
        return Ok(refuse_auth(id, e));
    }
    let Some(keys) = auth.lookup(&h.entity) else {
        return Ok(refuse_auth(id, AuthError::UnknownEntity(h.entity)));
    };
    let server_nonce = match auth::nonce() {
        Ok(n) => n,
        Err(e) => return Ok(refuse_auth(id, e)),
    };
    let challenge = AuthChallenge {
        mode: mode.code(),
        entity: auth.entity().to_string(),
        nonce: server_nonce,
    };
    let f = encode_raw(MsgType::AuthChallenge as u16, id, &challenge.encode());
    if let Err(e) = write_frame(out, f).await {
        return Err(failed(false, e.to_string()));
    }
    let proof = reader
        .read_raw(|h| {
            if h.msg_type == MsgType::AuthProof as u16 && h.meta_len <= MAX_HANDSHAKE_META {
                Ok(())
            } else {
                Err(ProtoError::Malformed("auth proof", "expected an AuthProof"))
            }
        })
        .await;
    let (phdr, pmeta) = match proof {
        Ok(Some(p)) => p,
        Ok(None) => return Err(failed(false, "closed during the handshake".into())),
        Err(ReadError::Io(e)) => return Err(failed(false, e.to_string())),
        Err(e) => {
            let detail = match End::from(e) {
                End::Malformed { detail, .. } => detail,
                _ => "unreadable proof".into(),
            };
            return Ok(refuse_auth(id, AuthError::Handshake(detail)));
        }
    };
    let theirs = match AuthProof::decode(&pmeta) {
        Ok(p) => p,
        Err(e) => {
            return Ok(refuse_auth(
                phdr.req_id,
                AuthError::Handshake(e.to_string()),
            ));
        }
    };
    let t = Transcript::of(&h, mode, auth.entity(), server_nonce);
    let Some(key) = auth::proven_key(&t, &keys.keys, &theirs.proof) else {
        return Ok(refuse_auth(phdr.req_id, AuthError::BadProof(h.entity)));
    };
    let Some(session_keys) = SessionKeys::server(mode, &t, &key.key) else {
        let e = AuthError::Handshake("cannot set up the session keys".into());
        return Ok(refuse_auth(phdr.req_id, e));
    };
    let ours = AuthProof {
        proof: t.server_proof(&key.key),
    };
    counters::AUTHENTICATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let peer = Peer {
        role: role_of(&h.entity),
        entity: Some(h.entity),
        key_generation: Some(key.generation),
        caps: keys.caps,
        mode,
    };
    let accepted = Accepted {
        peer: Rc::new(peer),
        session: h.session,
        keys: Some(Box::new(session_keys)),
    };
    Ok(Step::Done(accepted, Some(Answer::Proof(ours))))
}

/// Reads and dispatches requests until the stream ends or breaks.
async fn read_requests<H: Handler>(
    conn: &Rc<Conn<H>>,
    reader: &mut FrameReader,
    budget: &Rc<Budget>,
    member: Option<&Member>,
) -> End {
    loop {
        let next = reader
            .read_frame(|h| {
                // Wait for room before reading the body: backpressure.
                let acquire = budget.acquire(h.data_len as usize);
                async move { Ok(acquire.await) }
            })
            .await;
        if conn.queue.is_dead() {
            return End::Io(io::Error::other("the reply writer failed"));
        }
        let (hdr, msg, data, permit) = match next {
            Ok(Some(f)) => f,
            Ok(None) => return End::Eof,
            Err(e @ ReadError::Integrity { .. }) => {
                counters::INTEGRITY_FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return e.into();
            }
            Err(e) => return e.into(),
        };
        if let Message::Hello(_) = msg {
            // Already said hello: refuse, stay in sync.
            let reply = Reply::error(Status::InvalidArgument, Epoch(0), "duplicate Hello");
            if let Some(mut f) = reply_frame(hdr.req_id, reply, conn.queue.is_protected()) {
                f.hold = Hold::Permit(permit);
                conn.queue.push(f);
            }
            continue;
        }
        // Checked right before dispatch, with no wait in between: a request
        // is either dispatched ahead of everything a newer connection of
        // the session brings, or never.
        if member.is_some_and(Member::is_superseded) {
            return End::Superseded;
        }
        let frame = Frame {
            req_id: hdr.req_id,
            msg,
            data,
        };
        compio::runtime::spawn(conn.clone().run(frame, permit)).detach();
    }
}

impl<H: Handler> Conn<H> {
    /// Runs one request's handler and queues its reply.
    ///
    /// A handler that panics (or returns a message that cannot be encoded)
    /// gets its request answered with `Status::Io` instead of leaving the
    /// peer waiting for its timeout; the panic is logged.
    async fn run(self: Rc<Self>, frame: Frame, mut permit: Permit) {
        let req_id = frame.req_id;
        let handled = AssertUnwindSafe(async {
            let (msg, data) = self
                .handler
                .clone()
                .handle_from(self.peer.clone(), frame)
                .await;
            // Reply data is held until written: count it.
            let len = data.as_ref().map_or(0, |d| d.len());
            let protected = self.queue.is_protected();
            (
                encode_frame(req_id, &msg, data.map(OutData::Owned), protected),
                len,
            )
        })
        .catch_unwind()
        .await;
        let out = match handled {
            Ok((Ok(f), len)) => {
                permit.grow(len);
                Some(f)
            }
            Ok((Err(e), _)) => {
                warn!(req_id, "reply cannot be sent: {e}");
                reply_frame(
                    req_id,
                    Reply::error(Status::Io, Epoch(0), format!("reply cannot be sent: {e}")),
                    self.queue.is_protected(),
                )
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                error!(req_id, "request handler panicked: {what}");
                reply_frame(
                    req_id,
                    Reply::error(Status::Io, Epoch(0), "internal error handling the request"),
                    self.queue.is_protected(),
                )
            }
        };
        if let Some(mut f) = out {
            f.hold = Hold::Permit(permit);
            self.queue.push(f);
        }
    }
}
