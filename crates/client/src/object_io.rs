//! One request about one object, sent to its PG's primary and retried
//! across map changes, peering and recovery until it succeeds, fails for
//! good, or its deadline passes.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;

use pontoon_buf::AlignedBuf;
use pontoon_cluster::ClusterMap;
use pontoon_net::{AuthError, ClientAuth, ConnPool, KeepWaiting, Key, NetError};
use pontoon_proto::{Message, Reply, Role, Status, Target};
use pontoon_types::{ObjectId, WireMode};

use crate::ClientError;
use crate::map_feed::LocalMap;

/// How long one request may take, retries included.
pub const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one attempt may wait for its answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// How often an attempt still waiting asks whether the map has moved its
/// object to another primary or interval (an OSD frozen or cut off never
/// answers; its PG's next interval is served elsewhere).
const REROUTE_CHECK: Duration = Duration::from_secs(1);
/// First and longest pause between attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_millis(500);
/// How long OSDs may go on refusing this client's key before a request
/// fails with [`ClientError::PermissionDenied`] (an entity just added or
/// a key just rotated reaches every OSD with the next map, within this).
const AUTH_SETTLE: Duration = Duration::from_secs(3);

/// What a thread's requests share: the map view and the connections.
pub struct Transport {
    /// The thread's map view.
    pub map: LocalMap,
    /// How requests reach OSD shards.
    pub wire: Wire,
    /// The mode and identity generation the TCP pool's credentials were
    /// made for.
    creds: Cell<(WireMode, u64)>,
}

/// A request/answer exchange with an OSD shard that is not a TCP
/// connection: the deterministic simulator's network.
pub trait CustomWire {
    /// Sends `msg` (with `data`) to `addr` and waits at most `timeout` for the answer.
    fn call<'a>(
        &'a self,
        addr: SocketAddr,
        msg: &'a Message,
        data: Option<&'a [u8]>,
        timeout: Duration,
    ) -> LocalBoxFuture<'a, Result<(Message, Option<AlignedBuf>), NetError>>;
}

/// How a transport reaches OSD shards.
pub enum Wire {
    /// Pooled TCP connections (production).
    Tcp(Rc<ConnPool>),
    /// Another network (the simulator's).
    Custom(Rc<dyn CustomWire>),
}

impl Wire {
    /// One attempt, given up early once `keep` says the answer is no
    /// longer wanted.
    async fn call(
        &self,
        addr: SocketAddr,
        msg: &Message,
        data: Option<&Rc<AlignedBuf>>,
        timeout: Duration,
        keep: &KeepWaiting<'_>,
    ) -> Result<(Message, Option<AlignedBuf>), NetError> {
        match self {
            Wire::Tcp(pool) => pool.call_watched(addr, msg, data, timeout, keep).await,
            Wire::Custom(w) => {
                let deadline = pontoon_rt::now() + timeout;
                let data = data.map(|d| &d[..]);
                let mut call = std::pin::pin!(w.call(addr, msg, data, timeout));
                loop {
                    let left = deadline.saturating_duration_since(pontoon_rt::now());
                    if let Some(r) = pontoon_rt::timeout(left.min(keep.every), &mut call).await {
                        return r;
                    }
                    if left <= keep.every {
                        return Err(NetError::Timeout);
                    }
                    if !(keep.still_wanted)() {
                        return Err(NetError::Abandoned(keep.why));
                    }
                }
            }
        }
    }
}

impl Transport {
    /// A transport over `map`, speaking TCP.
    pub fn new(map: LocalMap) -> Rc<Self> {
        Self::with_wire(
            map,
            Wire::Tcp(ConnPool::new(Role::Client, Duration::from_secs(3))),
        )
    }

    /// A transport over `map` and `wire`.
    pub fn with_wire(map: LocalMap, wire: Wire) -> Rc<Self> {
        Rc::new(Self {
            map,
            wire,
            creds: Cell::new((WireMode::None, 0)),
        })
    }

    /// Brings the pool's credentials in line with the map's mode and the
    /// process's identity (a compare per request; work only when either
    /// moved). Refuses when the mode needs a key and there is none.
    fn credentials(&self, map: &ClusterMap) -> Result<(), ClientError> {
        let Wire::Tcp(pool) = &self.wire else {
            return Ok(());
        };
        let feed = self.map.feed();
        let want = (map.settings.ms_mode, feed.identity_generation());
        if self.creds.get() == want {
            return Ok(());
        }
        let auth = match (want.0, feed.identity()) {
            (mode, Some(id)) => ClientAuth::new(mode, &id.entity, Key::from_bytes(id.key)),
            (WireMode::None, None) => {
                ClientAuth::new(WireMode::None, "client.anonymous", Key::from_bytes([0; 32]))
            }
            (mode, None) => {
                return Err(ClientError::PermissionDenied(format!(
                    "the cluster's ms_mode is {mode}: this client needs an entity and its key \
                     (a keyring: --keyring FILE / --name ENTITY, or the cluster directory's keys/)"
                )));
            }
        }
        .map_err(|e| ClientError::PermissionDenied(e.to_string()))?;
        pool.set_auth(auth);
        self.creds.set(want);
        Ok(())
    }

    /// Sends the request `make(target, snap_seq)` about `oid` to its
    /// primary (with `data`, sent without copying); retries what is
    /// retryable. `snap_seq` is the snapshot sequence of `oid`'s volume in
    /// the map each attempt is routed by (the snap context writes carry).
    /// Returns the successful reply and its data.
    pub async fn call(
        &self,
        oid: ObjectId,
        make: impl Fn(Target, u64) -> Message,
        data: Option<&Rc<AlignedBuf>>,
    ) -> Result<(Reply, Option<AlignedBuf>), ClientError> {
        let deadline = pontoon_rt::now() + OP_TIMEOUT;
        let mut backoff = BACKOFF_MIN;
        let mut last: String;
        let mut refused_since: Option<Instant> = None;
        loop {
            let map = self.map.get();
            self.credentials(&map)?;
            match route(&map, oid) {
                Ok((target, addr)) => {
                    let snap_seq = map.volumes.get(&oid.volume).map_or(0, |v| v.snap_seq);
                    let msg = make(target, snap_seq);
                    let rerouted = || {
                        let now = self.map.get();
                        now.epoch != map.epoch
                            && route(&now, oid).is_ok_and(|r| r != (target, addr))
                    };
                    let keep = KeepWaiting {
                        every: REROUTE_CHECK,
                        still_wanted: &|| !rerouted(),
                        why: "the map moved the object to another primary or interval",
                    };
                    match self
                        .wire
                        .call(addr, &msg, data, ATTEMPT_TIMEOUT, &keep)
                        .await
                    {
                        Ok((Message::Reply(r), d)) if r.status == Status::Ok => return Ok((r, d)),
                        Ok((Message::Reply(r), _)) if r.status.is_retryable() => {
                            last = format!("{:?} from {addr}: {}", r.status, r.message);
                            if matches!(
                                r.status,
                                Status::StaleEpoch | Status::NotPrimary | Status::StaleSnapSeq
                            ) {
                                self.wait_for_newer_map(map.epoch.0, deadline).await;
                            }
                            if r.status == Status::KeyRevoked {
                                // reconnect with the identity's current key
                                if let Wire::Tcp(pool) = &self.wire {
                                    pool.close(addr);
                                }
                            }
                        }
                        Ok((Message::Reply(r), _)) => {
                            return Err(ClientError::from_status(&r, oid));
                        }
                        Ok((m, _)) => {
                            return Err(ClientError::Protocol(format!(
                                "{addr} answered {:?} to a request about {oid}",
                                m.msg_type()
                            )));
                        }
                        // The pool has dropped a connection that failed; a
                        // timed-out one stays, so the retry follows the
                        // first attempt on it, in order.
                        Err(NetError::Auth(
                            e @ (AuthError::UnknownEntity(_) | AuthError::BadProof(_)),
                        )) => {
                            let since = *refused_since.get_or_insert_with(pontoon_rt::now);
                            if pontoon_rt::now().saturating_duration_since(since) >= AUTH_SETTLE {
                                return Err(ClientError::PermissionDenied(format!("{addr}: {e}")));
                            }
                            // the OSD's map may lag ours (an entity just
                            // added): retry with the backoff below
                            last = format!("{addr}: {e}");
                        }
                        Err(e) => last = format!("{addr}: {e}"),
                    }
                }
                Err(why) => {
                    last = why;
                    self.wait_for_newer_map(map.epoch.0, deadline).await;
                }
            }
            if pontoon_rt::now() >= deadline {
                return Err(ClientError::Timeout {
                    what: format!("object {oid}"),
                    last,
                });
            }
            pontoon_rt::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Waits (bounded) until the feed publishes an epoch after `epoch`.
    async fn wait_for_newer_map(&self, epoch: u64, deadline: Instant) {
        let until = deadline.min(pontoon_rt::now() + Duration::from_secs(2));
        while self.map.feed().epoch() <= epoch && pontoon_rt::now() < until {
            pontoon_rt::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The target and primary address of `oid` in `map`.
fn route(map: &ClusterMap, oid: ObjectId) -> Result<(Target, SocketAddr), String> {
    let pg = map
        .pg_of_object(&oid)
        .ok_or_else(|| format!("volume of {oid} is not in map epoch {}", map.epoch))?;
    let rec = map
        .pgs
        .get(&pg)
        .ok_or_else(|| format!("pg {pg} is not in map epoch {}", map.epoch))?;
    let primary = rec
        .primary()
        .ok_or_else(|| format!("pg {pg} has no acting OSD in epoch {}", map.epoch))?;
    let addr = map
        .addr_of(primary, pg)
        .ok_or_else(|| format!("{primary} has no address in epoch {}", map.epoch))?;
    Ok((
        Target {
            pg,
            epoch: rec.interval,
            oid,
        },
        addr,
    ))
}
