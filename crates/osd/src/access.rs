//! Who may ask an OSD what: the map's entities, keys and caps as a shard
//! checks them, at a connection's handshake ([`MapKeys`], the protocol's
//! [`KeyLookup`]) and again on every request ([`AccessTable::authorize`]).
//!
//! Checking every request against the current map, not only at the
//! handshake, makes `auth rm`, the end of a rotation's grace period and
//! `auth caps` take effect on connections already open.
//!
//! In [`WireMode::None`] nothing is proven: every request is allowed, as
//! the hello's claimed role says (the cluster's choice, see
//! docs/security.md).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use pontoon_cluster::ClusterMap;
use pontoon_cluster::auth::{Caps, EntityName, KeyState, Op, now_unix};
use pontoon_net::{ClientAuth, EntityKey, EntityKeys, Key, KeyLookup, Peer};
use pontoon_proto::{Message, Role, Status};
use pontoon_types::{ObjectId, OsdId, WireMode};
use rustc_hash::FxHashMap;

/// One entity as a shard sees it.
#[derive(Clone, Debug)]
struct EntityAccess {
    /// `(generation, key, accepted until)`, newest first; `u64::MAX`: no end.
    keys: Vec<(u32, [u8; 32], u64)>,
    caps: Caps,
}

/// Why a request was refused: the status to answer with, and the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    /// [`Status::KeyRevoked`] when the connection's key is no longer
    /// accepted (the client reconnects with its current key and retries),
    /// else [`Status::PermissionDenied`].
    pub status: Status,
    /// Why, naming the entity.
    pub why: String,
}

fn denied(why: String) -> Denied {
    Denied {
        status: Status::PermissionDenied,
        why,
    }
}

/// The entities, keys and caps of one map, and the names caps refer to.
#[derive(Clone, Debug, Default)]
pub struct AccessTable {
    /// The cluster's mode.
    pub mode: WireMode,
    entities: FxHashMap<String, EntityAccess>,
    /// Pool and volume name of every volume, by volume id.
    volumes: FxHashMap<u64, (Arc<str>, Arc<str>)>,
}

impl AccessTable {
    /// The table of `map`.
    pub fn of(map: &ClusterMap) -> Self {
        let entities = map
            .auth
            .iter()
            .map(|(name, rec)| {
                let keys = match &rec.keys {
                    KeyState::Stable { current } => {
                        vec![(current.generation, *current.key.as_bytes(), u64::MAX)]
                    }
                    KeyState::Rotating {
                        current,
                        previous,
                        previous_until_unix,
                    } => vec![
                        (current.generation, *current.key.as_bytes(), u64::MAX),
                        (
                            previous.generation,
                            *previous.key.as_bytes(),
                            *previous_until_unix,
                        ),
                    ],
                };
                (
                    name.to_string(),
                    EntityAccess {
                        keys,
                        caps: rec.caps.clone(),
                    },
                )
            })
            .collect();
        let volumes = map
            .volumes
            .iter()
            .filter_map(|(id, v)| {
                let pool = map.pools.get(&v.pool)?;
                Some((
                    id.0,
                    (Arc::from(pool.name.as_str()), Arc::from(v.name.as_str())),
                ))
            })
            .collect();
        Self {
            mode: map.settings.ms_mode,
            entities,
            volumes,
        }
    }

    /// The keys `entity` may prove itself with now, for the handshake.
    pub fn keys(&self, entity: &str) -> Option<EntityKeys> {
        let now = now_unix();
        let e = self.entities.get(entity)?;
        let keys: Vec<EntityKey> = e
            .keys
            .iter()
            .filter(|(_, _, until)| now < *until)
            .map(|(generation, key, _)| EntityKey {
                generation: *generation,
                key: Key::from_bytes(*key),
            })
            .collect();
        Some(EntityKeys { keys, caps: None })
    }

    /// How OSD `me` connects to its peers in this map's mode: `None` when
    /// the mode needs a key and the map holds none for it.
    pub fn osd_credentials(&self, me: OsdId) -> Option<ClientAuth> {
        let name = EntityName::osd(me.0).to_string();
        let key = match self.mode {
            WireMode::None => [0; 32],
            _ => self.entities.get(&name)?.keys.first()?.1,
        };
        ClientAuth::new(self.mode, &name, Key::from_bytes(key)).ok()
    }

    /// Whether `peer` may send `msg`; the refusal says why. `osds` tells
    /// whether an OSD is one of the map's.
    pub fn authorize(
        &self,
        peer: &Peer,
        msg: &Message,
        is_osd: impl Fn(OsdId) -> bool,
    ) -> Result<(), Denied> {
        if matches!(msg, Message::Ping) {
            return Ok(());
        }
        if peer.mode != self.mode {
            // opened before `ms_mode` changed: in again, in the new mode
            return Err(Denied {
                status: Status::KeyRevoked,
                why: format!(
                    "the cluster's ms_mode is {}, this connection's {}: reconnect",
                    self.mode, peer.mode
                ),
            });
        }
        if peer.mode == WireMode::None {
            return Ok(());
        }
        let Some(entity) = peer.entity.as_deref() else {
            return Err(denied("the connection is not authenticated".into()));
        };
        let revoked = |why: String| Denied {
            status: Status::KeyRevoked,
            why,
        };
        let Some(e) = self.entities.get(entity) else {
            return Err(revoked(format!("{entity} was removed from the cluster")));
        };
        let now = now_unix();
        let key_ok = e
            .keys
            .iter()
            .any(|(g, _, until)| Some(*g) == peer.key_generation && now < *until);
        if !key_ok {
            return Err(revoked(format!(
                "{entity}'s key generation {} is no longer accepted (rotated out)",
                peer.key_generation.unwrap_or(0)
            )));
        }
        let object = |oid: ObjectId, op: Op| -> Result<(), Denied> {
            let (pool, volume) = self
                .volumes
                .get(&oid.volume.0)
                .map(|(p, v)| (Some(&**p), Some(&**v)))
                .unwrap_or((None, None));
            if e.caps.allows(op, pool, volume) {
                Ok(())
            } else {
                Err(denied(format!(
                    "{entity} may not {} volume {}{}",
                    if op == Op::Write { "write" } else { "read" },
                    pool.map(|p| format!("{p}/")).unwrap_or_default(),
                    volume.map_or_else(|| oid.volume.0.to_string(), str::to_string),
                )))
            }
        };
        match msg {
            Message::Ping => Ok(()),
            Message::Read(r) => object(r.target.oid, Op::Read),
            Message::Allocation(t) => object(t.oid, Op::Read),
            Message::Diff(d) => object(d.target.oid, Op::Read),
            Message::Write(w) => object(w.target.oid, Op::Write),
            Message::Discard(d) => object(d.target.oid, Op::Write),
            Message::SubOp(_)
            | Message::PeerQuery(_)
            | Message::Pull(_)
            | Message::PullLayer(_)
            | Message::Digest(_) => match peer.role {
                Role::Osd(id) if e.caps.allows(Op::OsdRole, None, None) && is_osd(id) => Ok(()),
                Role::Osd(id) if !is_osd(id) => {
                    Err(denied(format!("{id} is not an OSD of the map")))
                }
                _ => Err(denied(format!("{entity} may not send OSD requests"))),
            },
            _ => Ok(()),
        }
    }
}

/// The protocol's [`KeyLookup`] over the shard's current table (replaced
/// at every map).
#[derive(Clone, Default)]
pub struct MapKeys(pub Rc<RefCell<Arc<AccessTable>>>);

impl KeyLookup for MapKeys {
    fn keys(&self, entity: &str) -> Option<EntityKeys> {
        self.0.borrow().keys(entity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pontoon_cluster::auth::{self, AuthKey};
    use pontoon_cluster::{FailureDomain, PoolRecord, VolumeRecord};
    use pontoon_types::{PoolId, VolumeId};

    fn map() -> (ClusterMap, AuthKey) {
        let mut m = ClusterMap::new("t");
        let key = AuthKey::generate();
        let add = |m: &mut ClusterMap, name: &str, caps: &str| {
            auth::add(
                &mut m.auth,
                &EntityName::parse(name).unwrap(),
                Caps::parse(caps).unwrap(),
                key.clone(),
                1,
            )
            .unwrap();
        };
        add(&mut m, "client.ro", "allow r pool=a");
        add(&mut m, "client.rw", "allow rw pool=a");
        add(&mut m, "osd.1", "allow profile osd");
        add(&mut m, "client.fake", "allow *");
        for (id, name) in [(1, "a"), (2, "b")] {
            m.pools.insert(
                PoolId(id),
                PoolRecord {
                    id: PoolId(id),
                    name: name.into(),
                    size: 1,
                    min_size: 1,
                    pgs: 1,
                    failure_domain: FailureDomain::Osd,
                },
            );
            m.volumes.insert(
                VolumeId(u64::from(id)),
                VolumeRecord {
                    id: VolumeId(u64::from(id)),
                    name: format!("v{id}"),
                    pool: PoolId(id),
                    size_bytes: 1 << 20,
                    object_size: 1 << 20,
                    snap_seq: 0,
                    snapshots: Default::default(),
                    parent: None,
                },
            );
        }
        m.settings.ms_mode = WireMode::Authenticated;
        (m, key)
    }

    fn peer(entity: &str) -> Peer {
        Peer {
            role: pontoon_net::auth::role_of(entity),
            entity: Some(entity.into()),
            key_generation: Some(1),
            caps: None,
            mode: WireMode::Authenticated,
        }
    }

    #[test]
    fn caps_decide_every_request() {
        use pontoon_proto::{DiscardReq, Target};
        let (m, _) = map();
        let t = AccessTable::of(&m);
        let target = |vol| Target {
            pg: pontoon_types::PgId::new(1, 0),
            epoch: pontoon_types::Epoch(1),
            oid: ObjectId::new(vol, 0),
        };
        let discard = |vol| {
            Message::Discard(DiscardReq {
                target: target(vol),
                offset: 0,
                len: 4096,
                snap_seq: 0,
            })
        };
        let all = |_| true;
        assert!(
            t.authorize(&peer("client.ro"), &Message::Allocation(target(1)), all)
                .is_ok()
        );
        let no = t
            .authorize(&peer("client.ro"), &discard(1), all)
            .unwrap_err();
        assert_eq!(no.status, Status::PermissionDenied);
        assert!(no.why.contains("may not write volume a/v1"), "{no:?}");
        assert!(t.authorize(&peer("client.rw"), &discard(1), all).is_ok());
        let no = t
            .authorize(&peer("client.rw"), &discard(2), all)
            .unwrap_err();
        assert!(no.why.contains("b/v2"), "{no:?}");
        let diff = |vol| {
            Message::Diff(pontoon_proto::DiffReq {
                target: target(vol),
                from: pontoon_proto::DiffView::Nothing,
                to: pontoon_proto::DiffView::Head,
            })
        };
        assert!(t.authorize(&peer("client.ro"), &diff(1), all).is_ok());
        let no = t.authorize(&peer("client.rw"), &diff(2), all).unwrap_err();
        assert!(no.why.contains("may not read volume b/v2"), "{no:?}");
        let no = t
            .authorize(&peer("client.rw"), &Message::Pull(target(1)), all)
            .unwrap_err();
        assert!(no.why.contains("may not send OSD requests"), "{no:?}");
        // allow * is not an OSD
        assert!(
            t.authorize(&peer("client.fake"), &Message::Pull(target(1)), all)
                .is_err()
        );
        assert!(
            t.authorize(&peer("osd.1"), &Message::Pull(target(1)), all)
                .is_ok()
        );
        let no = t
            .authorize(&peer("osd.1"), &Message::Pull(target(1)), |_| false)
            .unwrap_err();
        assert!(no.why.contains("not an OSD of the map"), "{no:?}");
        let layer = Message::PullLayer(pontoon_proto::PullLayerReq {
            target: target(1),
            layer: 2,
        });
        let no = t.authorize(&peer("client.rw"), &layer, all).unwrap_err();
        assert!(no.why.contains("may not send OSD requests"), "{no:?}");
        assert!(t.authorize(&peer("osd.1"), &layer, all).is_ok());
        let no = t
            .authorize(&peer("client.gone"), &discard(1), all)
            .unwrap_err();
        assert_eq!(no.status, Status::KeyRevoked);
        assert!(no.why.contains("removed"), "{no:?}");
        let mut stale = peer("client.rw");
        stale.key_generation = Some(7);
        let no = t.authorize(&stale, &discard(1), all).unwrap_err();
        assert_eq!(no.status, Status::KeyRevoked);
        assert!(no.why.contains("rotated out"), "{no:?}");
        // a connection of mode none, opened before the cluster's mode
        // changed, must reconnect; pings still answer
        let old = Peer::unauthenticated(Role::Client);
        assert_eq!(
            t.authorize(&old, &discard(2), all).unwrap_err().status,
            Status::KeyRevoked
        );
        assert!(t.authorize(&old, &Message::Ping, all).is_ok());
        // mode none trusts the claim
        let mut m = m;
        m.settings.ms_mode = WireMode::None;
        assert!(
            AccessTable::of(&m)
                .authorize(&old, &discard(2), all)
                .is_ok()
        );
    }

    #[test]
    fn keys_in_grace_are_offered_until_it_ends() {
        let (mut m, _) = map();
        let name = EntityName::parse("client.rw").unwrap();
        let hour = std::time::Duration::from_secs(3600);
        auth::rotate(&mut m.auth, &name, AuthKey::generate(), hour, now_unix()).unwrap();
        let keys = AccessTable::of(&m).keys("client.rw").unwrap();
        assert_eq!(
            keys.keys.iter().map(|k| k.generation).collect::<Vec<_>>(),
            [2, 1]
        );
        auth::finish_rotation(&mut m.auth, &name).unwrap();
        let keys = AccessTable::of(&m).keys("client.rw").unwrap();
        assert_eq!(
            keys.keys.iter().map(|k| k.generation).collect::<Vec<_>>(),
            [2]
        );
        assert!(AccessTable::of(&m).keys("client.nobody").is_none());
    }
}
