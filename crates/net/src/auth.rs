//! Who is on the other end of a connection, proven before any request is
//! handled, and the per-connection keys that protect every frame after.
//!
//! # Modes
//!
//! One [`WireMode`] per cluster, as Ceph's msgr2 has them:
//! - [`WireMode::None`]: today's protocol. The first frame is a `Hello`
//!   claiming a role; nothing is proven or protected. The default until
//!   every daemon and client is given keys.
//! - [`WireMode::Authenticated`]: mutual authentication, then every frame
//!   carries a tag over its header, fields and data and an implicit
//!   sequence number (see [`crate::seal`]): nothing can be altered,
//!   replayed, reordered or dropped without the connection closing.
//!   Contents travel in the clear.
//! - [`WireMode::Secure`]: the same, with the fields and data encrypted
//!   (AES-256-GCM).
//!
//! A server runs exactly one mode and refuses a peer asking for another
//! ([`AuthError::ModeMismatch`]), including a client that sends no
//! credentials to a server that needs them ([`AuthError::Required`]).
//!
//! # Handshake
//!
//! In a protected mode the first frame is an `AuthHello` naming the
//! client's entity (`client.NAME`, `osd.N`, ...), its mode and a random
//! nonce. The server finds the entity's keys through its [`KeyLookup`]
//! (refusing an unknown one) and answers with its own name and nonce. The
//! client proves it holds its key with an HMAC-SHA256 of the transcript
//! (both nonces, both names, protocol version, mode, claimed role and
//! session); the server checks it against every key the entity has now
//! (two during a rotation) and answers with its own HMAC of the same
//! transcript under another label, proving it holds the key too. Both then
//! derive two session keys, one per direction, with HKDF-SHA256 from the
//! key, the nonces and the transcript. Nonces are fresh on both sides, so
//! no proof can be replayed, and the mode and version are inside what is
//! proven, so nothing can be downgraded. See [`Transcript`] for the bytes.
//!
//! The peer's role is derived from its proven entity name (`osd.N` is the
//! OSD `N`, anything else a client), never taken from its claim; a claim
//! that disagrees is refused. Handlers see the result as a [`Peer`].
//!
//! # Bounds
//!
//! The whole handshake runs within the server's `hello_timeout`; each
//! handshake message is at most [`pontoon_proto::handshake::MAX_HANDSHAKE_META`]
//! bytes, checked on its header; at most [`MAX_KEYS_TRIED`] keys are tried
//! per proof. Refusals and failures are counted in [`counters`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pontoon_proto::handshake::{MAX_ENTITY_LEN, NONCE_LEN, PROOF_LEN, role_bytes, session_bytes};
use pontoon_proto::{AuthHello, PROTOCOL_VERSION, Role, Session};
use pontoon_types::OsdId;
pub use pontoon_types::WireMode;
use ring::{hkdf, hmac};

use crate::seal::{Protect, ct_eq};

/// Bytes of an entity's key: 256 bits.
pub const KEY_LEN: usize = 32;
/// Most keys of one entity tried against a proof (the current key and, in
/// a rotation, the previous one; a little slack).
pub const MAX_KEYS_TRIED: usize = 4;

/// A 256-bit secret. `Debug` never prints it; dropping it overwrites it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl Key {
    /// The key with these bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        self.0 = [0; KEY_LEN];
        std::hint::black_box(&self.0);
    }
}

/// One key an entity may prove itself with, and its generation (which
/// rotation made it).
#[derive(Clone, Debug)]
pub struct EntityKey {
    /// Increases with every rotation.
    pub generation: u32,
    /// The secret.
    pub key: Key,
}

/// Whatever the server's [`KeyLookup`] wants handlers to have about an
/// authenticated peer (its capabilities): opaque to this crate, handed to
/// every request of the connection through [`Peer::caps`].
pub type Caps = Arc<dyn Any + Send + Sync>;

/// What a server knows about an entity now: the keys it may prove itself
/// with and its capabilities.
#[derive(Clone)]
pub struct EntityKeys {
    /// Valid keys, current first (during a rotation, also the previous
    /// one). Only the first [`MAX_KEYS_TRIED`] are tried; empty refuses
    /// the entity.
    pub keys: Vec<EntityKey>,
    /// Capabilities, for handlers ([`Peer::caps`]).
    pub caps: Option<Caps>,
}

impl fmt::Debug for EntityKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityKeys")
            .field("keys", &self.keys)
            .field("caps", &self.caps.is_some())
            .finish()
    }
}

/// Where a server finds the keys of the entity a peer names: implemented
/// over the cluster map by the daemon. Called once per connection, during
/// its handshake, on the thread serving the connection; it must not block.
pub trait KeyLookup {
    /// The keys and caps of `entity` (as the peer sent it: check it), or
    /// `None` if it is unknown or revoked (the connection is refused).
    fn keys(&self, entity: &str) -> Option<EntityKeys>;
}

/// A fixed table of keys: for tests and tools.
#[derive(Clone, Debug, Default)]
pub struct StaticKeys(pub std::collections::HashMap<String, EntityKeys>);

impl KeyLookup for StaticKeys {
    fn keys(&self, entity: &str) -> Option<EntityKeys> {
        self.0.get(entity).cloned()
    }
}

/// Checks the shape of an entity name: `kind.id`, `kind` lowercase
/// letters, `id` of `[A-Za-z0-9._-]`, at most [`MAX_ENTITY_LEN`] bytes.
/// (The cluster's own rules, in its identity model, are stricter; this
/// only keeps the handshake bounded and printable.)
pub fn check_entity_name(name: &str) -> Result<(), AuthError> {
    let bad = |why| AuthError::BadEntityName {
        name: name.chars().take(MAX_ENTITY_LEN).collect(),
        why,
    };
    if name.len() > MAX_ENTITY_LEN {
        return Err(bad("too long"));
    }
    let Some((kind, id)) = name.split_once('.') else {
        return Err(bad("expected KIND.ID, e.g. osd.3 or client.admin"));
    };
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(bad("the kind must be lowercase letters"));
    }
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(bad("the id must be 1 or more of [A-Za-z0-9._-]"));
    }
    Ok(())
}

/// The role an entity has: `osd.N` is the OSD `N`; anything else a client.
pub fn role_of(entity: &str) -> Role {
    match entity.strip_prefix("osd.").map(str::parse::<u32>) {
        Some(Ok(n)) if !entity[4..].starts_with('+') => Role::Osd(OsdId(n)),
        _ => Role::Client,
    }
}

/// How a client connects: as whom, with which key, in which mode.
#[derive(Clone, Debug)]
pub struct ClientAuth {
    mode: WireMode,
    entity: String,
    key: Key,
}

impl ClientAuth {
    /// Credentials of `entity` with `key`, for a cluster in `mode`. In
    /// [`WireMode::None`] nothing is proven: the connection says hello with
    /// the role of `entity`, as before.
    pub fn new(mode: WireMode, entity: &str, key: Key) -> Result<Self, AuthError> {
        check_entity_name(entity)?;
        Ok(Self {
            mode,
            entity: entity.to_string(),
            key,
        })
    }

    /// The mode.
    pub fn mode(&self) -> WireMode {
        self.mode
    }

    /// The entity.
    pub fn entity(&self) -> &str {
        &self.entity
    }

    /// The role the entity has.
    pub fn role(&self) -> Role {
        role_of(&self.entity)
    }

    pub(crate) fn key(&self) -> &Key {
        &self.key
    }
}

/// How a server accepts connections: its mode, its own entity name (sent
/// to clients) and where it finds the keys of the entities that connect.
pub struct ServerAuth {
    mode: std::cell::Cell<WireMode>,
    entity: String,
    keys: std::rc::Rc<dyn KeyLookup>,
}

impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerAuth")
            .field("mode", &self.mode.get())
            .field("entity", &self.entity)
            .finish_non_exhaustive()
    }
}

struct NoKeys;

impl KeyLookup for NoKeys {
    fn keys(&self, _: &str) -> Option<EntityKeys> {
        None
    }
}

impl ServerAuth {
    /// A server named `entity` (e.g. `osd.3`) in `mode`, finding peers'
    /// keys through `keys`.
    pub fn new(
        mode: WireMode,
        entity: &str,
        keys: std::rc::Rc<dyn KeyLookup>,
    ) -> Result<Self, AuthError> {
        check_entity_name(entity)?;
        Ok(Self {
            mode: std::cell::Cell::new(mode),
            entity: entity.to_string(),
            keys,
        })
    }

    /// Today's behaviour: no authentication.
    pub fn none() -> Self {
        Self {
            mode: std::cell::Cell::new(WireMode::None),
            entity: String::new(),
            keys: std::rc::Rc::new(NoKeys),
        }
    }

    /// The mode new connections must use.
    pub fn mode(&self) -> WireMode {
        self.mode.get()
    }

    /// Changes the mode for connections accepted from now on (the
    /// cluster's setting changed); connections already up keep theirs.
    pub fn set_mode(&self, mode: WireMode) {
        self.mode.set(mode);
    }

    /// The server's entity name.
    pub fn entity(&self) -> &str {
        &self.entity
    }

    pub(crate) fn lookup(&self, entity: &str) -> Option<EntityKeys> {
        self.keys.keys(entity).filter(|k| !k.keys.is_empty())
    }
}

/// Who sent a request, as the server established it at the connection's
/// handshake. Handlers get it through [`crate::Handler::handle_from`].
#[derive(Clone)]
pub struct Peer {
    /// The peer's role: derived from its proven entity in a protected
    /// mode; as claimed in its hello in [`WireMode::None`].
    pub role: Role,
    /// The proven entity name; `None` in [`WireMode::None`].
    pub entity: Option<String>,
    /// Generation of the key it proved itself with.
    pub key_generation: Option<u32>,
    /// What the [`KeyLookup`] gave for the entity at the handshake.
    pub caps: Option<Caps>,
    /// The connection's mode.
    pub mode: WireMode,
}

impl Peer {
    /// A peer that only claimed `role` (mode none).
    pub fn unauthenticated(role: Role) -> Self {
        Self {
            role,
            entity: None,
            key_generation: None,
            caps: None,
            mode: WireMode::None,
        }
    }

    /// True when the peer proved it is an OSD (not merely claimed it).
    pub fn is_proven_osd(&self) -> bool {
        self.entity.is_some() && matches!(self.role, Role::Osd(_))
    }
}

impl fmt::Debug for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Peer")
            .field("role", &self.role)
            .field("entity", &self.entity)
            .field("key_generation", &self.key_generation)
            .field("caps", &self.caps.is_some())
            .field("mode", &self.mode)
            .finish()
    }
}

/// Why authentication failed or a protected connection was closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The server has no key for the entity (never added, or removed).
    #[error("unknown entity {0}: the cluster holds no key for it (never added, or revoked)")]
    UnknownEntity(String),
    /// The client's proof matches none of the entity's keys.
    #[error("bad proof from {0}: it matches no key the cluster holds for that entity")]
    BadProof(String),
    /// The two sides run different modes.
    #[error("wire mode mismatch: the server runs {server}, the client asked for {client}")]
    ModeMismatch {
        /// The server's mode.
        server: WireMode,
        /// The client's mode.
        client: WireMode,
    },
    /// A client without credentials met a server that needs them.
    #[error(
        "authentication required: the server runs in {0} mode and the client sent no credentials"
    )]
    Required(WireMode),
    /// The claimed role is not the entity's.
    #[error("{entity} may not claim the role {claimed}: only osd.N entities speak as OSD N")]
    RoleMismatch {
        /// The entity.
        entity: String,
        /// The role it claimed.
        claimed: String,
    },
    /// A malformed entity name.
    #[error("bad entity name {name:?}: {why}")]
    BadEntityName {
        /// The name (truncated).
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The server could not prove it holds the client's key.
    #[error(
        "the server {0} failed to prove it holds our key: it is not part of the cluster, or holds another key for us"
    )]
    ServerProof(String),
    /// A frame failed its integrity check after the handshake.
    #[error("a frame failed its integrity check: tampered with or corrupted in transit")]
    Integrity,
    /// The handshake went wrong in another way.
    #[error("authentication handshake: {0}")]
    Handshake(String),
}

impl AuthError {
    /// The error a client reports for a server's refusal text (the server
    /// sends its [`AuthError`]'s text; unknown texts stay text).
    pub(crate) fn from_refusal(text: &str, client: Option<&ClientAuth>) -> Self {
        let entity = || client.map_or_else(String::new, |c| c.entity.clone());
        let client_mode = client.map_or(WireMode::None, |c| c.mode);
        let server_mode = |after: &str| {
            text.split_once(after)
                .and_then(|(_, rest)| rest.split([' ', ',']).next())
                .and_then(|m| m.parse::<WireMode>().ok())
        };
        if text.starts_with("unknown entity ") {
            AuthError::UnknownEntity(entity())
        } else if text.starts_with("bad proof from ") {
            AuthError::BadProof(entity())
        } else if text.starts_with("wire mode mismatch")
            && let Some(server) = server_mode("the server runs ")
        {
            AuthError::ModeMismatch {
                server,
                client: client_mode,
            }
        } else if text.starts_with("authentication required")
            && let Some(server) = server_mode("the server runs in ")
        {
            AuthError::Required(server)
        } else {
            AuthError::Handshake(format!("refused by the server: {text}"))
        }
    }
}

/// Handshake counters of this process (all listeners and connections),
/// for metrics.
pub mod counters {
    use super::*;

    /// Connections authenticated (either side).
    pub static AUTHENTICATED: AtomicU64 = AtomicU64::new(0);
    /// Refused: unknown or revoked entity.
    pub static UNKNOWN_ENTITY: AtomicU64 = AtomicU64::new(0);
    /// Refused: a proof that matches no key (server), or a server that
    /// could not prove itself (client).
    pub static BAD_PROOF: AtomicU64 = AtomicU64::new(0);
    /// Refused: mode mismatch, missing credentials, a role claim that is
    /// not the entity's, a malformed handshake.
    pub static REFUSED_OTHER: AtomicU64 = AtomicU64::new(0);
    /// Handshakes that did not finish within the hello timeout.
    pub static TIMED_OUT: AtomicU64 = AtomicU64::new(0);
    /// Frames that failed their integrity check (the connection closed).
    pub static INTEGRITY_FAILURES: AtomicU64 = AtomicU64::new(0);
    /// Connections closed at accept: the listener had its
    /// [`crate::Limits::max_connections`] open.
    pub static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

    /// Counts a refusal by its cause.
    pub(crate) fn refused(e: &AuthError) {
        let c = match e {
            AuthError::UnknownEntity(_) => &UNKNOWN_ENTITY,
            AuthError::BadProof(_) | AuthError::ServerProof(_) => &BAD_PROOF,
            AuthError::Integrity => &INTEGRITY_FAILURES,
            _ => &REFUSED_OTHER,
        };
        c.fetch_add(1, Relaxed);
    }
}

/// The bytes both proofs and the session keys are computed over:
///
/// ```text
/// "pontoon auth v1" | version u32 | mode u8 | claimed role (u8 tag, u32 osd)
/// | session (u8 flag, u64 id, u64 seq) | u8 len + client entity
/// | u8 len + server entity | client nonce (32) | server nonce (32)
/// ```
/// (integers little-endian). The client proof is
/// `HMAC-SHA256(key, "pontoon client proof" | transcript)`, the server's
/// `HMAC-SHA256(key, "pontoon server proof" | transcript)`, and the
/// session keys are the 64 bytes of `HKDF-SHA256(salt = client nonce |
/// server nonce, ikm = key, info = "pontoon session keys" | transcript)`:
/// the first 32 for client → server frames, the rest for server → client.
pub struct Transcript {
    bytes: Vec<u8>,
    client_nonce: [u8; NONCE_LEN],
    server_nonce: [u8; NONCE_LEN],
}

const LABEL: &[u8] = b"pontoon auth v1";
const CLIENT_PROOF: &[u8] = b"pontoon client proof";
const SERVER_PROOF: &[u8] = b"pontoon server proof";
const SESSION_KEYS: &[u8] = b"pontoon session keys";

fn put_name(out: &mut Vec<u8>, name: &str) {
    let b = &name.as_bytes()[..name.len().min(MAX_ENTITY_LEN)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

impl Transcript {
    /// The transcript of a handshake.
    #[allow(clippy::too_many_arguments)] // one per field of the layout above
    pub fn new(
        version: u32,
        mode: WireMode,
        role: Role,
        session: Option<Session>,
        client: &str,
        server: &str,
        client_nonce: [u8; NONCE_LEN],
        server_nonce: [u8; NONCE_LEN],
    ) -> Self {
        let mut bytes = Vec::with_capacity(128 + client.len() + server.len());
        bytes.extend_from_slice(LABEL);
        bytes.extend_from_slice(&version.to_le_bytes());
        bytes.push(mode.code());
        bytes.extend_from_slice(&role_bytes(role));
        bytes.extend_from_slice(&session_bytes(session));
        put_name(&mut bytes, client);
        put_name(&mut bytes, server);
        bytes.extend_from_slice(&client_nonce);
        bytes.extend_from_slice(&server_nonce);
        Self {
            bytes,
            client_nonce,
            server_nonce,
        }
    }

    /// The transcript of the handshake that `hello` opened, with the
    /// server's name and nonce. `mode` must be the hello's mode.
    pub(crate) fn of(
        hello: &AuthHello,
        mode: WireMode,
        server: &str,
        server_nonce: [u8; NONCE_LEN],
    ) -> Self {
        Self::new(
            hello.version,
            mode,
            hello.role,
            hello.session,
            &hello.entity,
            server,
            hello.nonce,
            server_nonce,
        )
    }

    /// The client's proof of holding `key`.
    pub fn client_proof(&self, key: &Key) -> [u8; PROOF_LEN] {
        hmac_sha256(key.bytes(), &[CLIENT_PROOF, &self.bytes])
    }

    /// The server's proof of holding `key`.
    pub fn server_proof(&self, key: &Key) -> [u8; PROOF_LEN] {
        hmac_sha256(key.bytes(), &[SERVER_PROOF, &self.bytes])
    }

    /// The two session keys: client → server, server → client.
    pub fn session_keys(&self, key: &Key) -> ([u8; KEY_LEN], [u8; KEY_LEN]) {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(&self.client_nonce);
        salt[NONCE_LEN..].copy_from_slice(&self.server_nonce);
        let mut okm = [0u8; 2 * KEY_LEN];
        hkdf_sha256(&salt, key.bytes(), &[SESSION_KEYS, &self.bytes], &mut okm);
        let mut c2s = [0u8; KEY_LEN];
        let mut s2c = [0u8; KEY_LEN];
        c2s.copy_from_slice(&okm[..KEY_LEN]);
        s2c.copy_from_slice(&okm[KEY_LEN..]);
        okm.fill(0);
        (c2s, s2c)
    }
}

/// HMAC-SHA256 of the concatenation of `parts`.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&k);
    for p in parts {
        ctx.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.sign().as_ref());
    out
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA256 (RFC 5869) of `ikm` with `salt` and the concatenation of
/// `info`, filling `out` (at most 255 × 32 bytes).
pub(crate) fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[&[u8]], out: &mut [u8]) {
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(ikm);
    // Only fails for an output longer than 255 hash lengths: ours are 64 bytes.
    let filled = prk
        .expand(info, Len(out.len()))
        .and_then(|okm| okm.fill(out));
    assert!(filled.is_ok(), "HKDF output of {} bytes", out.len());
}

/// The frame protection of one side of a connection that authenticated:
/// what it seals its frames with, and what it opens the peer's with.
pub(crate) struct SessionKeys {
    pub(crate) send: Protect,
    pub(crate) recv: Protect,
}

impl SessionKeys {
    /// The client's side.
    pub(crate) fn client(mode: WireMode, t: &Transcript, key: &Key) -> Option<Self> {
        let (c2s, s2c) = t.session_keys(key);
        Some(Self {
            send: Protect::new(mode, &c2s)?,
            recv: Protect::new(mode, &s2c)?,
        })
    }

    /// The server's side.
    pub(crate) fn server(mode: WireMode, t: &Transcript, key: &Key) -> Option<Self> {
        let (c2s, s2c) = t.session_keys(key);
        Some(Self {
            send: Protect::new(mode, &s2c)?,
            recv: Protect::new(mode, &c2s)?,
        })
    }
}

/// Which of `keys` (the first [`MAX_KEYS_TRIED`]) `proof` proves, in time
/// independent of which.
pub(crate) fn proven_key<'a>(
    t: &Transcript,
    keys: &'a [EntityKey],
    proof: &[u8; PROOF_LEN],
) -> Option<&'a EntityKey> {
    let mut found = None;
    for k in keys.iter().take(MAX_KEYS_TRIED) {
        if ct_eq(&t.client_proof(&k.key), proof) && found.is_none() {
            found = Some(k);
        }
    }
    found
}

/// A fresh nonce from the operating system's generator.
pub(crate) fn nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    use ring::rand::SecureRandom;
    let mut n = [0u8; NONCE_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| AuthError::Handshake("the system random generator failed".into()))?;
    Ok(n)
}

/// The protocol version this side speaks (for the transcript).
pub(crate) const VERSION: u32 = PROTOCOL_VERSION;

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn to_hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_test_cases_1_and_2() {
        let tag = hmac_sha256(&[0x0b; 20], &[b"Hi ", b"There"]);
        assert_eq!(
            to_hex(&tag),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let tag = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            to_hex(&tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hkdf_sha256_matches_rfc_5869_test_case_1() {
        let ikm = [0x0b; 22];
        let salt = hex("000102030405060708090a0b0c");
        let info = hex("f0f1f2f3f4f5f6f7f8f9");
        let mut okm = [0u8; 42];
        hkdf_sha256(&salt, &ikm, &[&info[..4], &info[4..]], &mut okm);
        assert_eq!(
            to_hex(&okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
        );
    }

    fn sample() -> Transcript {
        Transcript::new(
            4,
            WireMode::Secure,
            Role::Client,
            Some(Session { id: 7, seq: 2 }),
            "client.admin",
            "osd.3",
            [1; NONCE_LEN],
            [2; NONCE_LEN],
        )
    }

    /// The proofs and keys of one fixed handshake, pinned: a change to
    /// the transcript, the labels or the derivation breaks every peer
    /// built before it, so it must show up here.
    #[test]
    fn proofs_and_session_keys_of_a_fixed_handshake_are_pinned() {
        let key = Key::from_bytes([0x42; KEY_LEN]);
        let t = sample();
        let cp = t.client_proof(&key);
        let sp = t.server_proof(&key);
        let (c2s, s2c) = t.session_keys(&key);
        // Recomputed by hand from the documented layout.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"pontoon auth v1");
        bytes.extend_from_slice(&4u32.to_le_bytes());
        bytes.push(2);
        bytes.extend_from_slice(&[0; 5]);
        bytes.push(1);
        bytes.extend_from_slice(&7u64.to_le_bytes());
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.push(12);
        bytes.extend_from_slice(b"client.admin");
        bytes.push(5);
        bytes.extend_from_slice(b"osd.3");
        bytes.extend_from_slice(&[1; 32]);
        bytes.extend_from_slice(&[2; 32]);
        assert_eq!(t.bytes, bytes);
        let mut whole = b"pontoon client proof".to_vec();
        whole.extend_from_slice(&bytes);
        assert_eq!(cp, hmac_sha256(&[0x42; 32], &[&whole]));
        assert_ne!(cp, sp, "the two proofs differ");
        assert_ne!(c2s, s2c, "each direction has its own key");
        assert_eq!(
            [to_hex(&cp), to_hex(&sp), to_hex(&c2s), to_hex(&s2c)],
            PINNED.map(String::from),
        );
    }

    /// Computed independently (Python's `hmac` and `hashlib`, HKDF written
    /// out from RFC 5869) from the documented transcript layout.
    const PINNED: [&str; 4] = [
        "7d94c0b570e237a6dd8c218897484d901ad59545754438d8a580619b89dbee69",
        "a7cd32f4cbd14dca6518263decfb8602179831c098193c92f8300aebad6ec81d",
        "96e49b69597e4c980a0accb2684eef9a92b5239de7c94b86c147a5b779aac0ed",
        "d1183587bcb447324c627b1e9b3d6d82731ef0afa27815273c696a9c4327a89b",
    ];

    #[test]
    fn every_field_of_the_transcript_changes_the_proof() {
        let key = Key::from_bytes([9; KEY_LEN]);
        let base = sample().client_proof(&key);
        let variants = [
            Transcript::new(
                5,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Authenticated,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Osd(OsdId(0)),
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 3 }),
                "client.admin",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                None,
                "client.admin",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admim",
                "osd.3",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.4",
                [1; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.3",
                [3; 32],
                [2; 32],
            ),
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admin",
                "osd.3",
                [1; 32],
                [3; 32],
            ),
            // Moving a byte between the two names.
            Transcript::new(
                4,
                WireMode::Secure,
                Role::Client,
                Some(Session { id: 7, seq: 2 }),
                "client.admino",
                "sd.3",
                [1; 32],
                [2; 32],
            ),
        ];
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(v.client_proof(&key), base, "variant {i}");
        }
        assert_ne!(sample().client_proof(&Key::from_bytes([8; 32])), base);
    }

    #[test]
    fn the_role_comes_from_the_entity_name() {
        assert_eq!(role_of("osd.3"), Role::Osd(OsdId(3)));
        assert_eq!(role_of("osd.4294967295"), Role::Osd(OsdId(u32::MAX)));
        assert_eq!(role_of("osd.+3"), Role::Client);
        assert_eq!(role_of("osd.x"), Role::Client);
        assert_eq!(role_of("osd.4294967296"), Role::Client);
        assert_eq!(role_of("client.osd.3"), Role::Client);
        assert_eq!(role_of("gateway.nbd1"), Role::Client);
    }

    #[test]
    fn entity_names_are_checked() {
        for good in ["osd.0", "client.admin", "gateway.nbd-1", "mgr.a_b.c"] {
            check_entity_name(good).unwrap();
        }
        let long = format!("client.{}", "a".repeat(200));
        for bad in [
            "",
            "osd",
            ".x",
            "osd.",
            "Osd.1",
            "client.a b",
            "client.é",
            long.as_str(),
        ] {
            assert!(check_entity_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_refusal_text_comes_back_as_its_error() {
        let c = ClientAuth::new(WireMode::Secure, "client.x", Key::from_bytes([0; 32])).unwrap();
        for e in [
            AuthError::UnknownEntity("client.x".into()),
            AuthError::BadProof("client.x".into()),
            AuthError::ModeMismatch {
                server: WireMode::Authenticated,
                client: WireMode::Secure,
            },
            AuthError::Required(WireMode::Secure),
        ] {
            assert_eq!(AuthError::from_refusal(&e.to_string(), Some(&c)), e);
        }
        assert!(matches!(
            AuthError::from_refusal("something else", Some(&c)),
            AuthError::Handshake(_)
        ));
    }

    #[test]
    fn keys_never_show_in_debug_output() {
        let k = Key::from_bytes([0xab; 32]);
        let c = ClientAuth::new(WireMode::Secure, "client.x", k.clone()).unwrap();
        for s in [format!("{k:?}"), format!("{c:?}")] {
            assert!(
                !s.contains("171") && !s.contains("ab, ab") && !s.contains("0xab"),
                "{s}"
            );
        }
    }
}
