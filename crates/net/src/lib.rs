//! Pontoon's networking layer: multiplexed RPC connections that carry the
//! wire protocol of [`pontoon_proto`] over compio TCP sockets.
//!
//! # Concurrency model
//!
//! Everything here is single-threaded and `!Send`: a shard (one thread,
//! one compio runtime, one io_uring) owns its listener, its connections and
//! its connection pool, shares state through `Rc`/`RefCell`/`Cell`, and
//! never takes a lock. Running N shards means N threads, each calling
//! [`serve`] on its own listener and owning its own [`ConnPool`].
//!
//! Every connection, on either side, has
//! - one **reader task** that reads frames (24-byte header, metadata into a
//!   vector, data straight into an [`AlignedBuf`]): on the server it spawns
//!   one task per request running [`Handler::handle`]; on the client it
//!   hands each answer to the waiting [`RpcConn::call`] by request id;
//! - one **writer task** fed by a local queue, that batches whatever frames
//!   are ready into one vectored `sendmsg` (header and metadata coalesced,
//!   data as its own iovec, never copied);
//! - a **budget** of requests and data bytes in flight.
//!
//! Requests are pipelined and answered out of order: the server writes each
//! reply as soon as its handler finishes, tagged with the request's id.
//!
//! # Bounds
//!
//! Per connection, with the [`Limits`] in force:
//! - **server**: at most `max_in_flight` requests are being handled or have
//!   replies waiting for the socket, and at most `max_buffered_bytes` of
//!   their data (request data read, reply data not yet written) is held.
//!   When either limit is reached the reader stops reading from the socket
//!   until some request completes: backpressure through TCP, never an error.
//!   The outbound queue holds only frames of admitted requests, so it is
//!   bounded by the same budget. Metadata is bounded by
//!   [`pontoon_proto::MAX_META`], data by [`pontoon_proto::MAX_DATA`], both
//!   checked on the header before anything is allocated.
//! - **client**: at most `max_in_flight` calls are outstanding and at most
//!   `max_buffered_bytes` of their request data is queued or in flight;
//!   further calls wait for a slot, first come first served. A slot is
//!   released when the call returns (answer, error, timeout or the caller
//!   dropping it) *and* its request has left the outbound queue, so a stalled
//!   socket cannot make the queue grow. Answer data is bounded by
//!   `max_in_flight` × `MAX_DATA`.
//!
//! # Failures
//!
//! A server that receives a frame it cannot decode answers
//! `Reply::error(Status::Malformed, ..)` with the frame's request id when its
//! header arrived, then stops reading, finishes the requests in flight,
//! writes their replies and closes the connection. Nothing read from the
//! network can make this crate panic. A client whose connection breaks fails
//! every outstanding call with [`NetError::Closed`]; a [`ConnPool`] replaces
//! closed connections on the next use.
//!
//! # Connection set-up
//!
//! The first frame on every connection is a `Hello` from the connecting
//! side, answered with a `Reply`: `Ok`, or an error (then the server closes)
//! when the protocol version differs. The server passes the peer's [`Role`]
//! to every [`Handler::handle`] call.
//!
//! In a protected [`WireMode`] (authenticated or secure, one setting per
//! cluster) the first frame is an `AuthHello` instead, and both sides prove
//! they hold the client entity's key before any request is handled; every
//! frame after carries tags under per-connection keys, and in secure mode
//! is encrypted (see [`auth`]). The server then passes the proven [`Peer`]
//! (entity, role derived from it, caps) to [`Handler::handle_from`]. The
//! default stays [`WireMode::None`]: [`serve`], [`RpcConn::connect`] and
//! [`ConnPool::new`] behave as before; [`serve_auth`],
//! [`RpcConn::connect_auth`] and [`ConnPool::with_auth`] take the keys.
//!
//! # Example
//!
//! ```
//! use std::rc::Rc;
//! use std::time::Duration;
//!
//! use pontoon_buf::AlignedBuf;
//! use pontoon_net::{Frame, Handler, Limits, RpcConn, serve};
//! use pontoon_proto::{Message, Reply, Role};
//! use pontoon_types::Version;
//!
//! struct Hi;
//!
//! impl Handler for Hi {
//!     async fn handle(self: Rc<Self>, _peer: Role, frame: Frame) -> (Message, Option<AlignedBuf>) {
//!         // Echo the request's data back.
//!         (Message::Reply(Reply::ok(Version::ZERO)), frame.data)
//!     }
//! }
//!
//! compio::runtime::Runtime::new().unwrap().block_on(async {
//!     let listener = compio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
//!     let addr = listener.local_addr().unwrap();
//!     let server = compio::runtime::spawn(serve(listener, Rc::new(Hi), Limits::default()));
//!     let conn = RpcConn::connect(addr, Role::Client, Duration::from_secs(1)).await.unwrap();
//!     let msg = Message::Reply(Reply::ok(Version::ZERO)); // any message will do here
//!     let (answer, data) = conn.call(&msg, Some(b"hello"), Duration::from_secs(1)).await.unwrap();
//!     assert_eq!(answer, Message::Reply(Reply::ok(Version::ZERO)));
//!     assert_eq!(data.as_deref(), Some(&b"hello"[..]));
//!     drop(server); // stops the listener and its connections
//! });
//! ```

#![warn(missing_docs)]

pub mod auth;
pub mod budget;
mod client;
pub mod listener;
mod pool;
mod seal;
mod send_now;
mod server;
mod session;
pub mod stream;
mod wire;

use std::time::Duration;

use pontoon_buf::AlignedBuf;
use pontoon_proto::{Message, ProtoError};

pub use auth::{
    AuthError, Caps, ClientAuth, EntityKey, EntityKeys, Key, KeyLookup, Peer, ServerAuth, WireMode,
};
pub use client::{KeepWaiting, RpcConn};
pub use pontoon_proto::Role;
pub use pool::ConnPool;
pub use server::{Handler, serve, serve_auth, serve_conn, serve_conn_auth};

/// One decoded frame.
#[derive(Debug)]
pub struct Frame {
    /// The request id the sender chose; the reply carries it back.
    pub req_id: u64,
    /// The message.
    pub msg: Message,
    /// The frame's data (`None` when it has none).
    pub data: Option<AlignedBuf>,
}

/// Errors of the networking layer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A socket operation failed (including connecting).
    #[error("network I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not valid protocol, or a message to
    /// send does not fit in a frame.
    #[error("protocol error: {0}")]
    Proto(#[from] ProtoError),
    /// The connection is closed (by either side, or because it broke).
    #[error("connection closed")]
    Closed,
    /// The operation did not complete in time.
    #[error("timed out")]
    Timeout,
    /// The caller stopped waiting for the answer (see [`KeepWaiting`]);
    /// like a timeout, it says nothing about the connection.
    #[error("no longer wanted: {0}")]
    Abandoned(&'static str),
    /// The server answered the hello with an error.
    #[error("hello refused: {0}")]
    HelloRefused(String),
    /// Authentication failed (unknown entity, bad proof, mode mismatch,
    /// ...), or a frame failed its integrity check and the connection
    /// closed.
    #[error("{0}")]
    Auth(#[from] auth::AuthError),
    /// Too many requests are outstanding. Not returned by this crate's
    /// calls (they wait for a slot instead); kept for callers that refuse
    /// rather than wait.
    #[error("too many requests in flight")]
    TooManyInFlight,
}

impl NetError {
    /// A copy of this error, for handing one outcome to several waiters
    /// (I/O errors keep their kind and text).
    pub(crate) fn duplicate(&self) -> NetError {
        match self {
            NetError::Io(e) => NetError::Io(std::io::Error::new(e.kind(), e.to_string())),
            NetError::Proto(e) => NetError::Proto(e.clone()),
            NetError::Closed => NetError::Closed,
            NetError::Timeout => NetError::Timeout,
            NetError::Abandoned(why) => NetError::Abandoned(why),
            NetError::HelloRefused(s) => NetError::HelloRefused(s.clone()),
            NetError::Auth(e) => NetError::Auth(e.clone()),
            NetError::TooManyInFlight => NetError::TooManyInFlight,
        }
    }
}

/// Limits of one connection (server and client side).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most requests in flight (server: being handled or with replies not
    /// yet written; client: outstanding calls). Values below 1 count as 1.
    /// Default 128.
    pub max_in_flight: usize,
    /// Most data bytes held for requests in flight (server: request data
    /// being handled and reply data not yet written; client: request data
    /// of outstanding calls). A single frame larger than this is admitted
    /// alone. Default 64 MiB.
    pub max_buffered_bytes: usize,
    /// Server: close a connection on which no frame arrives for this long
    /// (requests in flight are still answered). `None`: never. Default
    /// `None`. Unused by clients.
    pub idle_timeout: Option<Duration>,
    /// Server: how long a new connection has to send its `Hello`. Default
    /// 5 s. Clients bound their hello with the connect timeout instead.
    pub hello_timeout: Duration,
    /// Server: most connections open at once on one listener; one more is
    /// closed as soon as it is accepted. Default 1024. Unused by clients.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_in_flight: 128,
            max_buffered_bytes: 64 << 20,
            idle_timeout: None,
            hello_timeout: Duration::from_secs(5),
            max_connections: 1024,
        }
    }
}
