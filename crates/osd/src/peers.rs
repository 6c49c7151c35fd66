//! How a shard talks to other OSDs: a trait, so the deterministic simulator
//! can stand in for the network, and the real implementation over TCP.

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use pontoon_buf::AlignedBuf;
use pontoon_net::{ConnPool, NetError};
use pontoon_proto::{Message, Role};
use pontoon_types::{OsdId, PgId};

use crate::map::ShardMap;

/// Why a message to another OSD got no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{osd} unreachable: {reason}")]
pub struct PeerError {
    /// The OSD.
    pub osd: OsdId,
    /// What went wrong.
    pub reason: String,
}

/// Sends requests to the shard of another OSD that serves a PG.
pub trait Peers: 'static {
    /// Sends `msg` (with `data`, shared with the other members' requests
    /// rather than copied) to `osd`'s shard for `pg` and waits for the answer.
    fn call(
        &self,
        osd: OsdId,
        pg: PgId,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
    ) -> impl Future<Output = Result<(Message, Option<AlignedBuf>), PeerError>>;

    /// A heartbeat to `osd`'s shard for `pg`, answered within `timeout`.
    fn ping(
        &self,
        osd: OsdId,
        pg: PgId,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), PeerError>>;
}

/// How long one request to another OSD may take before it counts as failed.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// [`Peers`] over TCP, finding addresses in the current map.
pub struct NetPeers {
    me: OsdId,
    pool: Rc<ConnPool>,
    map: RefCell<Rc<ShardMap>>,
}

impl NetPeers {
    /// Peers speaking as OSD `me`.
    pub fn new(me: OsdId) -> Self {
        Self {
            me,
            pool: ConnPool::new(Role::Osd(me), Duration::from_secs(3)),
            map: RefCell::new(Rc::new(ShardMap::default())),
        }
    }

    /// Uses `map` for addresses, and its mode and this OSD's key in it for
    /// connections, from now on (connections already open are kept).
    pub fn set_map(&self, map: Rc<ShardMap>) {
        let old = std::mem::replace(&mut *self.map.borrow_mut(), map.clone());
        if std::sync::Arc::ptr_eq(&old.access, &map.access) {
            return;
        }
        match map.access.osd_credentials(self.me) {
            Some(auth) => self.pool.set_auth(auth),
            None => tracing::error!(
                osd = %self.me,
                mode = %map.access.mode,
                "the cluster's wire mode needs a key for {} and the map holds none: \
                 its peers will refuse it (pontoon auth add {} allow profile osd)",
                self.me,
                self.me
            ),
        }
    }

    /// Drops every connection (the OSD is stopping or fenced).
    pub fn close_all(&self) {
        self.pool.close_all();
    }

    /// `osd`'s address for `pg` in the current map.
    fn addr(&self, osd: OsdId, pg: PgId) -> Result<SocketAddr, PeerError> {
        self.map.borrow().addr_of(osd, pg).ok_or_else(|| PeerError {
            osd,
            reason: "no address in the map".into(),
        })
    }
}

/// A failed request to `osd` at `addr`.
fn failed(osd: OsdId, addr: SocketAddr, e: NetError) -> PeerError {
    PeerError {
        osd,
        reason: format!("{addr}: {e}"),
    }
}

impl Peers for NetPeers {
    async fn call(
        &self,
        osd: OsdId,
        pg: PgId,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
    ) -> Result<(Message, Option<AlignedBuf>), PeerError> {
        let addr = self.addr(osd, pg)?;
        let call = || async {
            self.pool
                .call_shared(addr, msg, data.cloned(), PEER_TIMEOUT)
                .await
                .map_err(|e| failed(osd, addr, e))
        };
        let answer = call().await?;
        match &answer.0 {
            // this OSD's key was rotated: once more on a connection made
            // with the current one
            Message::Reply(r) if r.status == pontoon_proto::Status::KeyRevoked => {
                self.pool.close(addr);
                call().await
            }
            _ => Ok(answer),
        }
    }

    /// A ping that times out also drops the connection: the next one
    /// reconnects, so a healed link is seen within a heartbeat instead of
    /// after TCP's retransmission back-off (seconds after a long cut).
    async fn ping(&self, osd: OsdId, pg: PgId, timeout: Duration) -> Result<(), PeerError> {
        let addr = self.addr(osd, pg)?;
        let answer = self.pool.call(addr, &Message::Ping, None, timeout).await;
        if matches!(answer, Err(NetError::Timeout)) {
            self.pool.close(addr);
        }
        match answer.map_err(|e| failed(osd, addr, e))? {
            (Message::Reply(r), _) if r.status == pontoon_proto::Status::Ok => Ok(()),
            (m, _) => Err(PeerError {
                osd,
                reason: format!("answered a ping with {:?}", m.msg_type()),
            }),
        }
    }
}
