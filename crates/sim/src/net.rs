//! The simulated network between clients and OSD shards: latency, loss,
//! duplication (a stale copy of a request delivered again later),
//! reordering (independent delays) and partitions, one-way or both ways.
//! Requests reach the real shard's [`Handler`] in the target process;
//! if that process dies the caller sees the connection close.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use pontoon_buf::AlignedBuf;
use pontoon_client::CustomWire;
use pontoon_net::{Frame, Handler, NetError};
use pontoon_osd::{PEER_TIMEOUT, PeerError, Peers, Shard};
use pontoon_proto::{Message, Role};
use pontoon_types::{OsdId, PgId};

use crate::ctx::{Ctx, Fault};
use crate::disk::SimDisk;
use crate::executor::ProcId;

/// The shard type the simulator runs: the real one over simulated parts.
pub type SimShard = Shard<SimDisk, SimPeers>;

/// A place messages come from or go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Node {
    /// An OSD process.
    Osd(OsdId),
    /// A client process.
    Client(u32),
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Osd(o) => write!(f, "{o}"),
            Node::Client(c) => write!(f, "client.{c}"),
        }
    }
}

/// The address an OSD's single shard "listens" on.
pub fn osd_addr(osd: OsdId) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::new(10, 0, (osd.0 >> 8) as u8, osd.0 as u8), 6800))
}

/// The OSD an address belongs to.
fn osd_of(addr: SocketAddr) -> Option<OsdId> {
    match addr {
        SocketAddr::V4(a) if a.port() == 6800 => {
            let o = a.ip().octets();
            Some(OsdId(u32::from(o[2]) << 8 | u32::from(o[3])))
        }
        _ => None,
    }
}

/// A running OSD as the network sees it.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub proc: ProcId,
    pub shard: Rc<SimShard>,
}

/// The network.
pub struct Net {
    ctx: Rc<Ctx>,
    pub(crate) endpoints: RefCell<BTreeMap<OsdId, Endpoint>>,
    /// Directed cuts: `(a, b)` means nothing from `a` reaches `b`.
    pub(crate) cuts: RefCell<BTreeSet<(Node, Node)>>,
}

impl Net {
    /// A network with no endpoints and no cuts.
    pub fn new(ctx: Rc<Ctx>) -> Rc<Self> {
        Rc::new(Self {
            ctx,
            endpoints: RefCell::new(BTreeMap::new()),
            cuts: RefCell::new(BTreeSet::new()),
        })
    }

    fn cut(&self, from: Node, to: Node) -> bool {
        self.cuts.borrow().contains(&(from, to))
    }

    fn latency(&self) -> Duration {
        let f = &self.ctx.faults;
        if self.ctx.chance(f.delay) {
            self.ctx.note(Fault::Delay);
            Duration::from_micros(self.ctx.range(1_000, 400_000))
        } else {
            Duration::from_micros(self.ctx.range(20, 200))
        }
    }

    /// One request from `from` to `to` and its answer, within `timeout`.
    pub async fn request(
        self: &Rc<Self>,
        from: Node,
        to: OsdId,
        msg: &Message,
        data: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<(Message, Option<AlignedBuf>), NetError> {
        let (msg, data) = (msg.clone(), data.map(AlignedBuf::copy_from));
        let start = self.ctx.exec.elapsed();
        let remaining = |me: &Self| timeout.saturating_sub(me.ctx.exec.elapsed() - start);
        let lost = |me: &Self, a: Node, b: Node| {
            if me.cut(a, b) {
                return true;
            }
            if me.ctx.chance(me.ctx.faults.loss) {
                me.ctx.note(Fault::Loss);
                return true;
            }
            false
        };
        if lost(self, from, Node::Osd(to)) {
            pontoon_rt::sleep(timeout).await;
            return Err(NetError::Timeout);
        }
        pontoon_rt::sleep(self.latency()).await;
        let Some(ep) = self.endpoints.borrow().get(&to).cloned() else {
            return Err(NetError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                format!("{to} is not running"),
            )));
        };
        let role = match from {
            Node::Osd(o) => Role::Osd(o),
            Node::Client(_) => Role::Client,
        };
        // A stale second copy of an OSD's request, as a stalled handler or
        // a retry racing the original produces. Client requests are not
        // duplicated: TCP never does, and the client resends only after
        // its attempt timed out (which the loss and delay faults cause).
        if matches!(from, Node::Osd(_)) && self.ctx.chance(self.ctx.faults.duplicate) {
            self.ctx.note(Fault::Duplicate);
            let again = Frame {
                req_id: 0,
                msg: msg.clone(),
                data: data.as_ref().map(|d| AlignedBuf::copy_from(d)),
            };
            let shard = ep.shard.clone();
            let late = Duration::from_micros(self.ctx.range(100, 2_000_000));
            self.ctx.exec.spawn_on(ep.proc, async move {
                pontoon_rt::sleep(late).await;
                let _ = shard.handle(role, again).await;
            });
        }
        let (tx, rx) = oneshot::channel();
        let shard = ep.shard.clone();
        let frame = Frame {
            req_id: 0,
            msg,
            data,
        };
        self.ctx.exec.spawn_on(ep.proc, async move {
            let _ = tx.send(shard.handle(role, frame).await);
        });
        let answer = match pontoon_rt::timeout(remaining(self), rx).await {
            None => return Err(NetError::Timeout),
            Some(Err(_)) => return Err(NetError::Closed),
            Some(Ok(a)) => a,
        };
        if lost(self, Node::Osd(to), from) {
            pontoon_rt::sleep(remaining(self)).await;
            return Err(NetError::Timeout);
        }
        pontoon_rt::sleep(self.latency()).await;
        Ok(answer)
    }
}

/// [`Peers`] over the simulated network, speaking as one OSD.
pub struct SimPeers {
    pub(crate) me: OsdId,
    pub(crate) net: Rc<Net>,
}

impl Peers for SimPeers {
    async fn call(
        &self,
        osd: OsdId,
        _pg: PgId,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
    ) -> Result<(Message, Option<AlignedBuf>), PeerError> {
        self.net
            .request(
                Node::Osd(self.me),
                osd,
                msg,
                data.map(|d| &d[..]),
                PEER_TIMEOUT,
            )
            .await
            .map_err(|e| PeerError {
                osd,
                reason: e.to_string(),
            })
    }

    async fn ping(&self, osd: OsdId, _pg: PgId, timeout: Duration) -> Result<(), PeerError> {
        self.net
            .request(Node::Osd(self.me), osd, &Message::Ping, None, timeout)
            .await
            .map(|_| ())
            .map_err(|e| PeerError {
                osd,
                reason: e.to_string(),
            })
    }
}

/// The client library's wire over the simulated network.
pub struct ClientWire {
    pub(crate) me: u32,
    pub(crate) net: Rc<Net>,
}

impl CustomWire for ClientWire {
    fn call<'a>(
        &'a self,
        addr: SocketAddr,
        msg: &'a Message,
        data: Option<&'a [u8]>,
        timeout: Duration,
    ) -> LocalBoxFuture<'a, Result<(Message, Option<AlignedBuf>), NetError>> {
        Box::pin(async move {
            let Some(osd) = osd_of(addr) else {
                return Err(NetError::Closed);
            };
            self.net
                .request(Node::Client(self.me), osd, msg, data, timeout)
                .await
        })
    }
}
