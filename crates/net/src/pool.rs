//! Connections to many peers, created lazily and replaced when closed.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{LocalBoxFuture, Shared};
use pontoon_buf::AlignedBuf;
use pontoon_proto::{Message, Role, Session};
use rustc_hash::FxHashMap;

use crate::auth::ClientAuth;
use crate::client::{Answer, CallError, Credential, KeepWaiting, RpcConn};
use crate::wire::OutData;
use crate::{Limits, NetError};

/// A connect attempt that several callers may await.
type Connecting = Shared<LocalBoxFuture<'static, Result<Rc<RpcConn>, Rc<NetError>>>>;

enum Entry {
    Ready(Rc<RpcConn>),
    /// A connect attempt in progress, with its generation (so that an
    /// attempt finishing after `close`/`close_all` does not overwrite a
    /// newer entry).
    Connecting(u64, Connecting),
}

type Map = RefCell<FxHashMap<SocketAddr, Entry>>;

/// Connections to many peers, created lazily and replaced when closed.
///
/// One connection per address, shared by all callers of the thread that
/// owns the pool. A closed or broken connection is dropped from the pool
/// and a new one made on the next use.
///
/// The pool's connections form one [`Session`]: each new connection says
/// hello with a higher `seq`, so a server stops taking requests from the
/// connection it replaces (a request stuck unread on it cannot land after
/// its own retry).
pub struct ConnPool {
    /// How new connections introduce themselves.
    cred: RefCell<Credential>,
    connect_timeout: Duration,
    limits: Limits,
    conns: Rc<Map>,
    next_gen: Cell<u64>,
    session: u64,
}

impl std::fmt::Debug for ConnPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnPool")
            .field("role", &self.cred.borrow().role())
            .field("connections", &self.conns.borrow().len())
            .finish()
    }
}

impl ConnPool {
    /// A pool whose connections say hello as `role`, connect within
    /// `connect_timeout` and use the default [`Limits`].
    pub fn new(role: Role, connect_timeout: Duration) -> Rc<Self> {
        Self::with_limits(role, connect_timeout, Limits::default())
    }

    /// A pool whose connections use `limits`.
    pub fn with_limits(role: Role, connect_timeout: Duration, limits: Limits) -> Rc<Self> {
        Self::with_credential(Credential::Role(role), connect_timeout, limits)
    }

    /// A pool whose connections authenticate as `auth`'s entity, in its
    /// mode (see [`RpcConn::connect_auth`]).
    pub fn with_auth(auth: ClientAuth, connect_timeout: Duration, limits: Limits) -> Rc<Self> {
        Self::with_credential(Credential::Auth(Rc::new(auth)), connect_timeout, limits)
    }

    /// Connections made from now on authenticate with `auth` (a new key
    /// after a rotation, or the cluster's mode changed); open ones are kept.
    pub fn set_auth(&self, auth: ClientAuth) {
        *self.cred.borrow_mut() = Credential::Auth(Rc::new(auth));
    }

    fn with_credential(cred: Credential, connect_timeout: Duration, limits: Limits) -> Rc<Self> {
        Rc::new(Self {
            cred: RefCell::new(cred),
            connect_timeout,
            limits,
            conns: Rc::default(),
            next_gen: Cell::new(0),
            session: rand::random(),
        })
    }

    /// An open connection to `addr`: the existing one, or a new one.
    /// Concurrent callers for the same address share one connect attempt
    /// (and its outcome).
    pub async fn get(&self, addr: SocketAddr) -> Result<Rc<RpcConn>, NetError> {
        let attempt = {
            let mut map = self.conns.borrow_mut();
            match map.get(&addr) {
                Some(Entry::Ready(c)) if !c.is_closed() => return Ok(c.clone()),
                Some(Entry::Connecting(_, f)) => f.clone(),
                _ => {
                    let generation = self.next_gen.get();
                    self.next_gen.set(generation + 1);
                    let f = connect(
                        Rc::downgrade(&self.conns),
                        generation,
                        addr,
                        self.cred.borrow().clone(),
                        Session {
                            id: self.session,
                            seq: generation,
                        },
                        self.connect_timeout,
                        self.limits.clone(),
                    );
                    map.insert(addr, Entry::Connecting(generation, f.clone()));
                    f
                }
            }
        };
        attempt.await.map_err(|e| e.duplicate())
    }

    /// Convenience: [`ConnPool::get`] + [`RpcConn::call`]; if the pooled
    /// connection turns out closed before the request was sent, reconnects
    /// once. `timeout` bounds each call attempt; connecting is bounded by
    /// the pool's connect timeout.
    pub async fn call(
        &self,
        addr: SocketAddr,
        msg: &Message,
        data: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<Answer, NetError> {
        self.call_with(addr, msg, || data.map(OutData::Slice), timeout, None)
            .await
    }

    /// [`ConnPool::call_shared`] whose caller may stop waiting (see
    /// [`KeepWaiting`]); the connection stays, as after a timeout.
    pub async fn call_watched(
        &self,
        addr: SocketAddr,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
        timeout: Duration,
        keep: &KeepWaiting<'_>,
    ) -> Result<Answer, NetError> {
        self.call_with(
            addr,
            msg,
            || data.cloned().map(OutData::Shared),
            timeout,
            Some(keep),
        )
        .await
    }

    /// [`ConnPool::call`] with data in a shared aligned buffer, sent
    /// without copying.
    pub async fn call_shared(
        &self,
        addr: SocketAddr,
        msg: &Message,
        data: Option<Rc<AlignedBuf>>,
        timeout: Duration,
    ) -> Result<Answer, NetError> {
        self.call_with(
            addr,
            msg,
            || data.clone().map(OutData::Shared),
            timeout,
            None,
        )
        .await
    }

    async fn call_with<'a>(
        &self,
        addr: SocketAddr,
        msg: &Message,
        data: impl Fn() -> Option<OutData<'a>>,
        timeout: Duration,
        keep: Option<&KeepWaiting<'_>>,
    ) -> Result<Answer, NetError> {
        let mut retried = false;
        loop {
            let conn = self.get(addr).await?;
            match conn.try_call_watched(msg, data(), timeout, keep).await {
                Err(CallError::NotSent(NetError::Closed)) if !retried => retried = true,
                Err(e) => {
                    let e = e.into_inner();
                    // A timeout says nothing about the connection: its
                    // requests still arrive in order. Any other failure
                    // ends it, and only it (not a newer one to `addr`).
                    if !matches!(e, NetError::Timeout | NetError::Abandoned(_)) {
                        self.forget(addr, &conn);
                    }
                    return Err(e);
                }
                Ok(answer) => return Ok(answer),
            }
        }
    }

    /// Closes `conn` and drops it from the pool if it is still the
    /// connection to `addr`.
    fn forget(&self, addr: SocketAddr, conn: &Rc<RpcConn>) {
        let mut map = self.conns.borrow_mut();
        if matches!(map.get(&addr), Some(Entry::Ready(c)) if Rc::ptr_eq(c, conn)) {
            map.remove(&addr);
        }
        drop(map);
        conn.close();
    }

    /// Closes and forgets the connection to `addr`, if one is open: for a
    /// caller that judges it dead although it did not break (a small
    /// request on it timed out), so the next call reconnects instead of
    /// waiting for TCP's retransmissions to resume it.
    pub fn close(&self, addr: SocketAddr) {
        let ready = match self.conns.borrow().get(&addr) {
            Some(Entry::Ready(c)) => Some(c.clone()),
            _ => None,
        };
        if let Some(c) = ready {
            self.forget(addr, &c);
        }
    }

    /// Closes and forgets every connection. Connect attempts in progress
    /// still complete for their callers but are not pooled.
    pub fn close_all(&self) {
        let entries = std::mem::take(&mut *self.conns.borrow_mut());
        for (_, e) in entries {
            if let Entry::Ready(c) = e {
                c.close();
            }
        }
    }

    /// Addresses with an open (or opening) connection.
    pub fn len(&self) -> usize {
        self.conns.borrow().len()
    }

    /// True when the pool holds no connections.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A shared connect attempt that records its outcome in the pool.
fn connect(
    conns: Weak<Map>,
    generation: u64,
    addr: SocketAddr,
    cred: Credential,
    session: Session,
    timeout: Duration,
    limits: Limits,
) -> Connecting {
    async move {
        let r = RpcConn::connect_in_session(addr, &cred, Some(session), timeout, limits).await;
        if let Some(conns) = conns.upgrade() {
            let mut map = conns.borrow_mut();
            if matches!(map.get(&addr), Some(Entry::Connecting(g, _)) if *g == generation) {
                match &r {
                    Ok(c) => map.insert(addr, Entry::Ready(c.clone())),
                    Err(_) => map.remove(&addr),
                };
            }
        }
        r.map_err(Rc::new)
    }
    .boxed_local()
    .shared()
}
