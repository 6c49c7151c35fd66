//! Identities: entities, their keys and their capabilities, kept in the
//! cluster map (`auth/<entity>`), and the keyring files that carry keys to
//! daemons and the CLI.
//!
//! * An **entity** is who connects: `osd.N`, `mgr.NAME`, `gateway.NAME` or
//!   `client.NAME` ([`EntityName`]).
//! * Each has a **key**: 256 random bits, written in base64 as in Ceph
//!   keyrings ([`AuthKey`]). Keys carry a generation number so that they
//!   can rotate ([`KeyState`]).
//! * Each has **capabilities** ([`Caps`], grammar in [`caps`]): what it may
//!   read, write or administer.
//!
//! # Where daemons find them
//!
//! Every daemon already watches the map; [`ClusterMap::credentials`] (or
//! [`lookup`] with an entity name as a peer sent it) answers "which keys
//! may `client.foo` prove itself with right now, and what may it do" from
//! that snapshot, with no etcd round trip per connection. Per connection,
//! not per I/O: check [`Caps::allows`] once per request kind and volume and
//! keep the answer with the connection.
//!
//! # Rotation
//!
//! `pontoon auth rotate ENTITY` makes a new key the *current* one (the one
//! `auth get` prints, generation + 1) and keeps the old one accepted as the
//! *previous* key until a grace period ends or `auth rotate --finish`.
//! Daemons that still hold the old key keep connecting meanwhile; a
//! connection that authenticated with the old key is not cut by the
//! rotation (the protocol re-checks only new connections). See
//! [`KeyState`] for the states.
//!
//! # Secrets
//!
//! [`AuthKey`]'s `Debug` prints no secret, and the whole-map JSON
//! ([`ClusterMap`]'s `Serialize`, used by status output) leaves the auth
//! table out. Only the map's own encoding in etcd ([`crate::keys`]) and
//! [`keyring`] files hold keys.

pub mod caps;
pub mod keyring;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use pontoon_types::{PoolId, VolumeId};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use caps::{Caps, CapsError, Grant, Op, Perm, Profile, Target};
pub use keyring::{Keyring, KeyringEntry};

use crate::model::{ClusterMap, MAX_NAME_LEN, is_valid_name};
use crate::{ClusterError, MapStore};

/// Bytes of a key: 256 bits.
pub const KEY_BYTES: usize = 32;

/// How long the previous key stays valid after `rotate` when no grace is
/// given: time to hand the new keyring to whoever uses the entity.
pub const DEFAULT_ROTATION_GRACE: Duration = Duration::from_secs(3600);

/// Most entities one cluster may hold (each is one etcd key).
pub const MAX_ENTITIES: usize = 100_000;

/// The entity every `pontoon up` cluster has: the operator's.
pub const ADMIN_ENTITY: &str = "client.admin";

/// Why an auth operation failed. Shown to operators as it is: one line.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// An entity name that is not `osd.N`, `mgr.NAME`, `gateway.NAME` or
    /// `client.NAME`.
    #[error("bad entity name {name:?}: {reason}")]
    BadEntity {
        /// The name as given.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Caps text that does not parse.
    #[error(transparent)]
    BadCaps(#[from] CapsError),
    /// A key that is not base64 of 32 bytes.
    #[error("bad key: {0}")]
    BadKey(String),
    /// No such entity in the map.
    #[error("entity {0} does not exist (see `pontoon auth ls`)")]
    UnknownEntity(String),
    /// `add` of an entity that exists.
    #[error("entity {0} already exists (change its caps with `pontoon auth caps`)")]
    EntityExists(String),
    /// The change would leave no entity with `allow *`.
    #[error("{0} is the last entity with `allow *`: add another admin first")]
    LastAdmin(String),
    /// `rotate` while a rotation is still in its grace period.
    #[error(
        "{entity} is already rotating (its previous key is accepted until {until}): \
         finish it with `pontoon auth rotate {entity} --finish` first"
    )]
    RotationInProgress {
        /// The entity.
        entity: String,
        /// When the previous key stops being accepted (UTC).
        until: String,
    },
    /// `rotate --finish` with no rotation going on.
    #[error("{0} is not rotating: nothing to finish")]
    NotRotating(String),
    /// Too many entities.
    #[error("the cluster already holds {MAX_ENTITIES} entities")]
    TooMany,
    /// A keyring file could not be read, parsed or written.
    #[error("keyring {path}: {reason}")]
    Keyring {
        /// The file.
        path: String,
        /// What went wrong (with the line when parsing).
        reason: String,
    },
    /// The map could not be read or changed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// The kind of an entity: the part of its name before the first dot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKind {
    /// `osd.N`: an OSD daemon; N is its id.
    Osd,
    /// `mgr.NAME`: a manager.
    Mgr,
    /// `gateway.NAME`: an NBD, NVMe/TCP or vhost gateway.
    Gateway,
    /// `client.NAME`: a person or program using the cluster.
    Client,
}

impl EntityKind {
    /// The name prefix, without the dot.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Osd => "osd",
            EntityKind::Mgr => "mgr",
            EntityKind::Gateway => "gateway",
            EntityKind::Client => "client",
        }
    }
}

/// An entity's name, `KIND.ID`, validated: `osd.N` with N a decimal OSD id
/// (no leading zeros, so one OSD has one name), or `mgr.`, `gateway.`,
/// `client.` followed by 1-128 characters of `[A-Za-z0-9._-]`. Such names
/// are safe in etcd keys, file names and INI section headers.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityName {
    kind: EntityKind,
    id: String,
}

impl EntityName {
    /// Parses and validates a name.
    pub fn parse(name: &str) -> Result<Self, AuthError> {
        let bad = |reason: &str| AuthError::BadEntity {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let Some((kind, id)) = name.split_once('.') else {
            return Err(bad(
                "expected TYPE.ID with TYPE osd, mgr, gateway or client (e.g. client.admin)",
            ));
        };
        let kind = match kind {
            "osd" => EntityKind::Osd,
            "mgr" => EntityKind::Mgr,
            "gateway" => EntityKind::Gateway,
            "client" => EntityKind::Client,
            _ => {
                return Err(bad(&format!(
                    "unknown type {kind:?}: expected osd, mgr, gateway or client"
                )));
            }
        };
        if kind == EntityKind::Osd {
            let canonical = id.parse::<u32>().ok().map(|n| n.to_string());
            if canonical.as_deref() != Some(id) {
                return Err(bad("an OSD's name is osd.N with N its numeric id"));
            }
        } else if !is_valid_name(id) {
            return Err(bad(&format!(
                "the part after \"{}.\" must be 1-{MAX_NAME_LEN} characters of [A-Za-z0-9._-]",
                kind.as_str()
            )));
        }
        Ok(Self {
            kind,
            id: id.to_string(),
        })
    }

    /// `osd.N`.
    pub fn osd(id: u32) -> Self {
        Self {
            kind: EntityKind::Osd,
            id: id.to_string(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> EntityKind {
        self.kind
    }

    /// The part after the dot.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The OSD id of an `osd.N` entity.
    pub fn osd_id(&self) -> Option<pontoon_types::OsdId> {
        match self.kind {
            EntityKind::Osd => self.id.parse().ok().map(pontoon_types::OsdId),
            _ => None,
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.kind.as_str(), self.id)
    }
}

impl fmt::Debug for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl FromStr for EntityName {
    type Err = AuthError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for EntityName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EntityName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A secret key: 256 random bits. Written as standard base64 (44
/// characters). Its `Debug` never shows the secret; compare with
/// [`AuthKey::matches`] (constant time).
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey([u8; KEY_BYTES]);

impl AuthKey {
    /// A new key from the operating system's random generator.
    pub fn generate() -> Self {
        use rand::TryRngCore as _;
        let mut k = [0u8; KEY_BYTES];
        rand::rngs::OsRng
            .try_fill_bytes(&mut k)
            .expect("the operating system's random generator failed");
        Self(k)
    }

    /// A key from its bytes (tests, and protocol code that derives keys).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// The secret bytes, for computing MACs. Never log them.
    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// The base64 text, as keyrings hold it. Never log it.
    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0)
    }

    /// Parses base64 text of exactly 32 bytes. The error never repeats the
    /// text (it may be a secret with a typo).
    pub fn from_base64(text: &str) -> Result<Self, AuthError> {
        let bytes = BASE64
            .decode(text.trim())
            .map_err(|_| AuthError::BadKey("not valid base64".into()))?;
        let bytes: [u8; KEY_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
            AuthError::BadKey(format!("{} bytes, expected {KEY_BYTES}", b.len()))
        })?;
        Ok(Self(bytes))
    }

    /// Whether `other` is this key, in time independent of where they differ.
    pub fn matches(&self, other: &[u8]) -> bool {
        other.len() == KEY_BYTES && self.0.iter().zip(other).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
    }
}

impl Drop for AuthKey {
    fn drop(&mut self) {
        // Best effort: copies made by moves are not reached.
        self.0 = [0; KEY_BYTES];
        std::hint::black_box(&self.0);
    }
}

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthKey(<secret>)")
    }
}

impl Serialize for AuthKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for AuthKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::from_base64(&s).map_err(serde::de::Error::custom)
    }
}

/// One key of an entity with its generation (1 for the first key, + 1 at
/// each rotation; a peer may name the generation it proves).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyVersion {
    /// 1, 2, ...: never reused for one entity.
    pub generation: u32,
    /// The secret.
    pub key: AuthKey,
    /// When it was made (Unix seconds).
    pub created_unix: u64,
}

/// Where an entity's keys are in their rotation.
///
/// ```text
///  add ──► Stable{current} ──rotate──► Rotating{current: new, previous: old, until}
///              ▲                          │
///              └── rotate --finish, ──────┘
///                  or rotate after `until` passed
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum KeyState {
    /// One key; the only one accepted.
    Stable {
        /// The key.
        current: KeyVersion,
    },
    /// `rotate` made `current`, which `auth get` prints and which is
    /// accepted from now on; `previous` is accepted as well until
    /// `previous_until_unix` (the grace period) or `rotate --finish`, so
    /// holders of the old keyring keep connecting while it is replaced.
    /// After `previous_until_unix` only `current` is accepted, even before
    /// `--finish` tidies the record.
    Rotating {
        /// The new key (higher generation).
        current: KeyVersion,
        /// The old key, still accepted in the grace period.
        previous: KeyVersion,
        /// End of the grace period (Unix seconds).
        previous_until_unix: u64,
    },
}

impl KeyState {
    /// The key to hand out (keyrings): the newest.
    pub fn current(&self) -> &KeyVersion {
        match self {
            KeyState::Stable { current } | KeyState::Rotating { current, .. } => current,
        }
    }

    /// The keys accepted at `now_unix`, newest first (one or two).
    pub fn valid_at(&self, now_unix: u64) -> impl Iterator<Item = &KeyVersion> {
        let previous = match self {
            KeyState::Rotating {
                previous,
                previous_until_unix,
                ..
            } if now_unix < *previous_until_unix => Some(previous),
            _ => None,
        };
        std::iter::once(self.current()).chain(previous)
    }

    /// Whether a rotation is in its grace period at `now_unix`.
    pub fn rotating_at(&self, now_unix: u64) -> Option<u64> {
        match self {
            KeyState::Rotating {
                previous_until_unix,
                ..
            } if now_unix < *previous_until_unix => Some(*previous_until_unix),
            _ => None,
        }
    }
}

/// One entity as the map stores it (key `auth/<entity>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRecord {
    /// Its name, also the key suffix.
    pub entity: EntityName,
    /// What it may do.
    pub caps: Caps,
    /// Its key(s).
    pub keys: KeyState,
    /// When it was added (Unix seconds).
    pub created_unix: u64,
}

impl AuthRecord {
    /// Checks what decoding alone cannot: generations positive and rising.
    pub fn validate(&self) -> Result<(), String> {
        match &self.keys {
            KeyState::Stable { current } if current.generation == 0 => {
                Err("key generation 0".into())
            }
            KeyState::Rotating {
                current, previous, ..
            } if previous.generation == 0 || current.generation <= previous.generation => {
                Err(format!(
                    "rotating from generation {} to {}",
                    previous.generation, current.generation
                ))
            }
            _ => Ok(()),
        }
    }
}

/// What a daemon needs to authenticate a peer and authorise its requests:
/// the keys accepted now (newest first, each with its generation) and the
/// caps. Owned, so it can cross to a data-path thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// Who.
    pub entity: EntityName,
    /// `(generation, key)` accepted now: the current key, then while a
    /// rotation is in its grace period the previous one.
    pub keys: Vec<(u32, AuthKey)>,
    /// What it may do.
    pub caps: Caps,
}

impl Credentials {
    /// The accepted key of that generation.
    pub fn key(&self, generation: u32) -> Option<&AuthKey> {
        self.keys
            .iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, k)| k)
    }

    /// Whether `proof` is one of the accepted keys; which generation.
    pub fn accepts(&self, proof: &[u8]) -> Option<u32> {
        self.keys
            .iter()
            .find(|(_, k)| k.matches(proof))
            .map(|(g, _)| *g)
    }
}

/// Seconds since the Unix epoch now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix seconds as `2026-11-26T12:00:00Z`.
pub fn format_unix(secs: u64) -> String {
    let (y, m, d, h, min, sec) = pontoon_types::civil_time(secs);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}Z")
}

impl ClusterMap {
    /// The credentials of `entity` at `now_unix` (see [`now_unix`]), from
    /// this map snapshot: `None` if the map does not know it (refuse the
    /// connection). What the protocol handshake calls once per connection.
    pub fn credentials(&self, entity: &EntityName, now_unix: u64) -> Option<Credentials> {
        let rec = self.auth.get(entity)?;
        Some(Credentials {
            entity: entity.clone(),
            keys: rec
                .keys
                .valid_at(now_unix)
                .map(|k| (k.generation, k.key.clone()))
                .collect(),
            caps: rec.caps.clone(),
        })
    }

    /// Whether `caps` allow `op` on a volume, named through this map
    /// (false for a volume or pool the map does not know).
    pub fn caps_allow_volume(&self, caps: &Caps, op: Op, volume: VolumeId) -> bool {
        let Some(v) = self.volumes.get(&volume) else {
            return false;
        };
        let Some(p) = self.pools.get(&v.pool) else {
            return false;
        };
        caps.allows(op, Some(&p.name), Some(&v.name))
    }

    /// Whether `caps` allow `op` on a pool as a whole.
    pub fn caps_allow_pool(&self, caps: &Caps, op: Op, pool: PoolId) -> bool {
        self.pools
            .get(&pool)
            .is_some_and(|p| caps.allows(op, Some(&p.name), None))
    }
}

/// [`ClusterMap::credentials`] for a name as a peer sent it, now: the
/// error says whether the name is malformed or unknown.
pub fn lookup(map: &ClusterMap, entity: &str) -> Result<Credentials, AuthError> {
    let name = EntityName::parse(entity)?;
    map.credentials(&name, now_unix())
        .ok_or_else(|| AuthError::UnknownEntity(name.to_string()))
}

/// Whether `map` can run its binary protocol in a protected mode: every
/// registered OSD needs a key to reach its peers, and some entity must
/// hold `allow *` so the cluster can still be managed. The error names
/// what is missing and how to add it.
pub fn check_protected_mode(map: &ClusterMap) -> Result<(), String> {
    let now = now_unix();
    let keyless: Vec<String> = map
        .osds
        .keys()
        .map(|id| EntityName::osd(id.0))
        .filter(|e| map.credentials(e, now).is_none_or(|c| c.keys.is_empty()))
        .map(|e| e.to_string())
        .collect();
    if !keyless.is_empty() {
        return Err(format!(
            "{} {} no key: add {} with `pontoon auth add osd.N allow profile osd` first",
            keyless.join(", "),
            if keyless.len() == 1 { "has" } else { "have" },
            if keyless.len() == 1 { "it" } else { "them" },
        ));
    }
    if !map.auth.values().any(|r| r.caps.is_admin()) {
        return Err(format!(
            "no entity holds `allow *`: add an admin first (`pontoon auth add {ADMIN_ENTITY} allow *`)"
        ));
    }
    Ok(())
}

/// The auth table of a map: entity → record.
pub type AuthTable = BTreeMap<EntityName, AuthRecord>;

/// Adds `entity` with `key` as generation 1. Refused if it exists.
pub fn add(
    table: &mut AuthTable,
    entity: &EntityName,
    caps: Caps,
    key: AuthKey,
    now: u64,
) -> Result<(), AuthError> {
    if table.contains_key(entity) {
        return Err(AuthError::EntityExists(entity.to_string()));
    }
    if table.len() >= MAX_ENTITIES {
        return Err(AuthError::TooMany);
    }
    table.insert(
        entity.clone(),
        AuthRecord {
            entity: entity.clone(),
            caps,
            keys: KeyState::Stable {
                current: KeyVersion {
                    generation: 1,
                    key,
                    created_unix: now,
                },
            },
            created_unix: now,
        },
    );
    Ok(())
}

fn record<'a>(
    table: &'a mut AuthTable,
    entity: &EntityName,
) -> Result<&'a mut AuthRecord, AuthError> {
    table
        .get_mut(entity)
        .ok_or_else(|| AuthError::UnknownEntity(entity.to_string()))
}

/// Refused if `entity` is the only holder of `allow *`.
fn check_not_last_admin(table: &AuthTable, entity: &EntityName) -> Result<(), AuthError> {
    let is_admin = table.get(entity).is_some_and(|r| r.caps.is_admin());
    let others = table
        .values()
        .any(|r| r.entity != *entity && r.caps.is_admin());
    if is_admin && !others {
        return Err(AuthError::LastAdmin(entity.to_string()));
    }
    Ok(())
}

/// Replaces `entity`'s caps; refused if that takes `allow *` from the last
/// entity holding it.
pub fn set_caps(table: &mut AuthTable, entity: &EntityName, caps: Caps) -> Result<(), AuthError> {
    record(table, entity)?;
    if !caps.is_admin() {
        check_not_last_admin(table, entity)?;
    }
    record(table, entity)?.caps = caps;
    Ok(())
}

/// Removes `entity`; refused for the last entity holding `allow *`.
pub fn remove(table: &mut AuthTable, entity: &EntityName) -> Result<AuthRecord, AuthError> {
    record(table, entity)?;
    check_not_last_admin(table, entity)?;
    Ok(table.remove(entity).expect("checked above"))
}

/// Starts a rotation: `key` becomes the current key (next generation), the
/// old current one stays accepted until `now + grace`. A rotation whose
/// grace has passed counts as finished; one still in its grace is refused
/// ([`AuthError::RotationInProgress`]). A zero grace drops the old key at
/// once (a revocation).
pub fn rotate(
    table: &mut AuthTable,
    entity: &EntityName,
    key: AuthKey,
    grace: Duration,
    now: u64,
) -> Result<(), AuthError> {
    let rec = record(table, entity)?;
    if let Some(until) = rec.keys.rotating_at(now) {
        return Err(AuthError::RotationInProgress {
            entity: entity.to_string(),
            until: format_unix(until),
        });
    }
    let old = rec.keys.current().clone();
    let current = KeyVersion {
        generation: old
            .generation
            .checked_add(1)
            .ok_or_else(|| AuthError::BadKey("key generation overflow".into()))?,
        key,
        created_unix: now,
    };
    rec.keys = if grace.is_zero() {
        KeyState::Stable { current }
    } else {
        KeyState::Rotating {
            current,
            previous: old,
            previous_until_unix: now.saturating_add(grace.as_secs().max(1)),
        }
    };
    Ok(())
}

/// Ends a rotation: only the current key stays. Refused if `entity` is
/// not rotating (an expired grace still counts as rotating here: `--finish`
/// tidies it).
pub fn finish_rotation(table: &mut AuthTable, entity: &EntityName) -> Result<(), AuthError> {
    let rec = record(table, entity)?;
    match &rec.keys {
        KeyState::Stable { .. } => Err(AuthError::NotRotating(entity.to_string())),
        KeyState::Rotating { current, .. } => {
            rec.keys = KeyState::Stable {
                current: current.clone(),
            };
            Ok(())
        }
    }
}

/// The map operations of `pontoon auth`. Each is one map update (the epoch
/// bumps, watchers see it); an error changes nothing.
impl MapStore {
    /// Adds an entity with a new random key.
    pub async fn auth_add(&self, entity: &EntityName, caps: Caps) -> Result<AuthRecord, AuthError> {
        let key = AuthKey::generate();
        let now = now_unix();
        let updated = self
            .update::<_, AuthError>(|m| {
                add(&mut m.auth, entity, caps.clone(), key.clone(), now)?;
                Ok(true)
            })
            .await?;
        Ok(updated.map.auth[entity].clone())
    }

    /// The entity's record, adding it with `caps` and a new key if it is
    /// missing (an existing one is returned untouched): what `pontoon up`
    /// runs for its admin and daemons at every start.
    pub async fn auth_ensure(
        &self,
        entity: &EntityName,
        caps: Caps,
    ) -> Result<AuthRecord, AuthError> {
        let key = AuthKey::generate();
        let now = now_unix();
        let updated = self
            .update::<_, AuthError>(|m| {
                if m.auth.contains_key(entity) {
                    return Ok(false);
                }
                add(&mut m.auth, entity, caps.clone(), key.clone(), now)?;
                Ok(true)
            })
            .await?;
        Ok(updated.map.auth[entity].clone())
    }

    /// [`auth_ensure`](Self::auth_ensure) for several entities in one
    /// update (one epoch); the records in the order asked.
    pub async fn auth_ensure_all(
        &self,
        entities: &[(EntityName, Caps)],
    ) -> Result<Vec<AuthRecord>, AuthError> {
        let keys: Vec<AuthKey> = entities.iter().map(|_| AuthKey::generate()).collect();
        let now = now_unix();
        let updated = self
            .update::<_, AuthError>(|m| {
                let mut changed = false;
                for ((entity, caps), key) in entities.iter().zip(&keys) {
                    if !m.auth.contains_key(entity) {
                        add(&mut m.auth, entity, caps.clone(), key.clone(), now)?;
                        changed = true;
                    }
                }
                Ok(changed)
            })
            .await?;
        Ok(entities
            .iter()
            .map(|(e, _)| updated.map.auth[e].clone())
            .collect())
    }

    /// The entity's record.
    pub async fn auth_get(&self, entity: &EntityName) -> Result<AuthRecord, AuthError> {
        self.load()
            .await?
            .auth
            .remove(entity)
            .ok_or_else(|| AuthError::UnknownEntity(entity.to_string()))
    }

    /// Replaces the entity's caps ([`set_caps`]).
    pub async fn auth_set_caps(
        &self,
        entity: &EntityName,
        caps: Caps,
    ) -> Result<AuthRecord, AuthError> {
        let updated = self
            .update::<_, AuthError>(|m| {
                set_caps(&mut m.auth, entity, caps.clone())?;
                Ok(true)
            })
            .await?;
        Ok(updated.map.auth[entity].clone())
    }

    /// Removes the entity ([`remove`]); its keys stop working at once.
    pub async fn auth_remove(&self, entity: &EntityName) -> Result<AuthRecord, AuthError> {
        let mut removed = None;
        self.update::<_, AuthError>(|m| {
            removed = Some(remove(&mut m.auth, entity)?);
            Ok(true)
        })
        .await?;
        Ok(removed.expect("set by the committed update"))
    }

    /// Rotates the entity's key ([`rotate`]) to a new random one.
    pub async fn auth_rotate(
        &self,
        entity: &EntityName,
        grace: Duration,
    ) -> Result<AuthRecord, AuthError> {
        let key = AuthKey::generate();
        let now = now_unix();
        let updated = self
            .update::<_, AuthError>(|m| {
                rotate(&mut m.auth, entity, key.clone(), grace, now)?;
                Ok(true)
            })
            .await?;
        Ok(updated.map.auth[entity].clone())
    }

    /// Ends the entity's rotation ([`finish_rotation`]).
    pub async fn auth_finish_rotation(&self, entity: &EntityName) -> Result<AuthRecord, AuthError> {
        let updated = self
            .update::<_, AuthError>(|m| {
                finish_rotation(&mut m.auth, entity)?;
                Ok(true)
            })
            .await?;
        Ok(updated.map.auth[entity].clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> EntityName {
        EntityName::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(b: u8) -> AuthKey {
        AuthKey::from_bytes([b; KEY_BYTES])
    }

    #[test]
    fn entity_names_are_parsed_and_validated() {
        for ok in [
            "osd.0",
            "osd.42",
            "mgr.a",
            "gateway.nbd-1",
            "client.admin",
            "client.a.b_c",
        ] {
            assert_eq!(name(ok).to_string(), ok);
        }
        assert_eq!(name("osd.7").osd_id(), Some(pontoon_types::OsdId(7)));
        assert_eq!(name("client.7").osd_id(), None);
        assert_eq!(name("gateway.x").kind(), EntityKind::Gateway);
        for (bad, why) in [
            ("admin", "TYPE.ID"),
            ("user.x", "unknown type \"user\""),
            ("osd.x", "numeric id"),
            ("osd.01", "numeric id"),
            ("osd.", "numeric id"),
            ("osd.4294967296", "numeric id"),
            ("client.", "1-128 characters"),
            ("client.a/b", "1-128 characters"),
            ("client.a b", "1-128 characters"),
        ] {
            let e = EntityName::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("bad entity name {bad:?}")), "{e}");
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = format!("client.{}", "a".repeat(MAX_NAME_LEN + 1));
        assert!(EntityName::parse(&long).is_err());
    }

    #[test]
    fn keys_are_256_random_bits_in_base64_and_never_debug_printed() {
        let a = AuthKey::generate();
        let b = AuthKey::generate();
        assert_ne!(a, b);
        let text = a.to_base64();
        assert_eq!(text.len(), 44);
        assert_eq!(AuthKey::from_base64(&text).unwrap(), a);
        assert_eq!(AuthKey::from_base64(&format!(" {text}\n")).unwrap(), a);
        assert!(!format!("{a:?}").contains(&text));
        assert!(!format!("{a:?}").contains(&text[..8]));
        assert!(a.matches(a.as_bytes()));
        assert!(!a.matches(b.as_bytes()));
        assert!(!a.matches(&a.as_bytes()[..31]));
        let e = AuthKey::from_base64("not base64!").unwrap_err().to_string();
        assert!(
            e.contains("not valid base64") && !e.contains("not base64!"),
            "{e}"
        );
        let e = AuthKey::from_base64(&BASE64.encode([1u8; 16]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("16 bytes, expected 32"), "{e}");
    }

    #[test]
    fn records_round_trip_through_json_in_both_key_states() {
        let mut t = AuthTable::new();
        let e = name("client.foo");
        add(
            &mut t,
            &e,
            Caps::parse("allow rw pool=rbd").unwrap(),
            key(1),
            100,
        )
        .unwrap();
        let stable = serde_json::to_string(&t[&e]).unwrap();
        assert!(stable.contains(r#""caps":"allow rw pool=rbd""#), "{stable}");
        assert!(stable.contains(r#""state":"stable""#), "{stable}");
        assert_eq!(serde_json::from_str::<AuthRecord>(&stable).unwrap(), t[&e]);
        rotate(&mut t, &e, key(2), Duration::from_secs(60), 200).unwrap();
        let rotating = serde_json::to_string(&t[&e]).unwrap();
        assert!(rotating.contains(r#""state":"rotating""#), "{rotating}");
        assert!(
            rotating.contains(r#""previous_until_unix":260"#),
            "{rotating}"
        );
        assert_eq!(
            serde_json::from_str::<AuthRecord>(&rotating).unwrap(),
            t[&e]
        );
        let spoiled = rotating.replace(r#""generation":2"#, r#""generation":1"#);
        let back: AuthRecord = serde_json::from_str(&spoiled).unwrap();
        assert!(back.validate().unwrap_err().contains("generation 1 to 1"));
    }

    #[test]
    fn rotation_keeps_the_old_key_valid_until_the_grace_ends_or_finish() {
        let mut map = ClusterMap::new("c");
        let e = name("client.foo");
        add(&mut map.auth, &e, Caps::admin(), key(1), 100).unwrap();
        let gens = |m: &ClusterMap, now| -> Vec<u32> {
            m.credentials(&e, now)
                .unwrap()
                .keys
                .iter()
                .map(|(g, _)| *g)
                .collect()
        };
        assert_eq!(gens(&map, 100), [1]);

        rotate(&mut map.auth, &e, key(2), Duration::from_secs(60), 1000).unwrap();
        assert_eq!(map.auth[&e].keys.current().generation, 2);
        assert_eq!(gens(&map, 1000), [2, 1], "both accepted, newest first");
        assert_eq!(gens(&map, 1059), [2, 1]);
        assert_eq!(gens(&map, 1060), [2], "grace over");
        let c = map.credentials(&e, 1000).unwrap();
        assert_eq!(c.accepts(key(1).as_bytes()), Some(1));
        assert_eq!(c.accepts(key(2).as_bytes()), Some(2));
        assert_eq!(c.accepts(key(3).as_bytes()), None);
        assert_eq!(c.key(1), Some(&key(1)));

        // A second rotation inside the grace is refused and changes nothing.
        let before = map.auth.clone();
        let err = rotate(&mut map.auth, &e, key(3), Duration::from_secs(60), 1030).unwrap_err();
        assert!(matches!(err, AuthError::RotationInProgress { .. }), "{err}");
        assert!(err.to_string().contains("--finish"), "{err}");
        assert_eq!(map.auth, before);

        finish_rotation(&mut map.auth, &e).unwrap();
        assert_eq!(gens(&map, 1030), [2]);
        assert!(matches!(
            finish_rotation(&mut map.auth, &e),
            Err(AuthError::NotRotating(_))
        ));

        // After the grace passed, rotating again is allowed.
        rotate(&mut map.auth, &e, key(3), Duration::from_secs(10), 2000).unwrap();
        rotate(&mut map.auth, &e, key(4), Duration::from_secs(10), 2010).unwrap();
        assert_eq!(gens(&map, 2010), [4, 3]);
        // A zero grace revokes the old key at once.
        finish_rotation(&mut map.auth, &e).unwrap();
        rotate(&mut map.auth, &e, key(5), Duration::ZERO, 3000).unwrap();
        assert_eq!(gens(&map, 3000), [5]);
        assert!(map.credentials(&name("client.other"), 0).is_none());
    }

    #[test]
    fn the_last_admin_cannot_be_removed_or_demoted() {
        let mut t = AuthTable::new();
        let admin = name("client.admin");
        let user = name("client.user");
        add(&mut t, &admin, Caps::admin(), key(1), 0).unwrap();
        add(&mut t, &user, Caps::none(), key(2), 0).unwrap();
        let before = t.clone();
        assert!(matches!(
            remove(&mut t, &admin),
            Err(AuthError::LastAdmin(_))
        ));
        let e = set_caps(&mut t, &admin, Caps::parse("allow r").unwrap()).unwrap_err();
        assert!(e.to_string().contains("last entity with `allow *`"), "{e}");
        assert_eq!(t, before, "nothing changed");
        // With a second admin, either may go.
        set_caps(&mut t, &user, Caps::admin()).unwrap();
        remove(&mut t, &admin).unwrap();
        assert!(matches!(
            remove(&mut t, &user),
            Err(AuthError::LastAdmin(_))
        ));
        assert!(matches!(
            remove(&mut t, &admin),
            Err(AuthError::UnknownEntity(_))
        ));
        assert!(matches!(
            add(&mut t, &user, Caps::none(), key(3), 0),
            Err(AuthError::EntityExists(_))
        ));
    }

    #[test]
    fn caps_are_checked_against_the_maps_names() {
        use crate::model::{FailureDomain, PoolRecord, VolumeRecord};
        let mut map = ClusterMap::new("c");
        map.pools.insert(
            PoolId(1),
            PoolRecord {
                id: PoolId(1),
                name: "a".into(),
                size: 1,
                min_size: 1,
                pgs: 1,
                failure_domain: FailureDomain::Osd,
            },
        );
        map.volumes.insert(
            VolumeId(5),
            VolumeRecord {
                id: VolumeId(5),
                name: "v".into(),
                pool: PoolId(1),
                size_bytes: 4096,
                object_size: 4096,
                snap_seq: 0,
                snapshots: Vec::new(),
                parent: None,
            },
        );
        let caps = Caps::parse("allow r volume=a/v").unwrap();
        assert!(map.caps_allow_volume(&caps, Op::Read, VolumeId(5)));
        assert!(!map.caps_allow_volume(&caps, Op::Write, VolumeId(5)));
        assert!(!map.caps_allow_volume(&caps, Op::Read, VolumeId(6)));
        assert!(!map.caps_allow_pool(&caps, Op::Read, PoolId(1)));
        let caps = Caps::parse("allow rw pool=a").unwrap();
        assert!(map.caps_allow_pool(&caps, Op::Write, PoolId(1)));
        assert!(!map.caps_allow_pool(&caps, Op::Write, PoolId(2)));
    }

    #[test]
    fn lookup_names_malformed_and_unknown_entities() {
        let mut map = ClusterMap::new("c");
        add(
            &mut map.auth,
            &name("osd.3"),
            Caps::profile(Profile::Osd),
            key(9),
            0,
        )
        .unwrap();
        let c = lookup(&map, "osd.3").unwrap();
        assert_eq!(c.keys, vec![(1, key(9))]);
        assert!(c.caps.allows(Op::OsdRole, None, None));
        assert!(matches!(
            lookup(&map, "osd.4"),
            Err(AuthError::UnknownEntity(_))
        ));
        assert!(matches!(
            lookup(&map, "osd"),
            Err(AuthError::BadEntity { .. })
        ));
    }

    #[test]
    fn unix_times_format_as_utc() {
        assert_eq!(format_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_unix(1_795_694_400), "2026-11-26T12:00:00Z");
        assert_eq!(format_unix(951_825_600), "2000-02-29T12:00:00Z");
    }
}
