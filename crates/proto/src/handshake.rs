//! The authentication handshake's messages: what a connection says before
//! its first request when the cluster runs in an authenticated or secure
//! wire mode. They travel in ordinary frames (no data) but are not
//! [`crate::Message`]s: only the handshake reads them, and a serving
//! connection refuses them like any unknown request.
//!
//! ```text
//! client                                   server
//!   AuthHello{version, role, session,
//!             mode, entity, client nonce} ─►
//!                                        ◄─ AuthChallenge{mode, server entity, server nonce}
//!                                           (or a Reply error: unknown entity, mode mismatch)
//!   AuthProof{HMAC(key, transcript)}     ─►
//!                                        ◄─ AuthProof{HMAC(key, transcript)}
//!                                           (or a Reply error: bad proof)
//! ```
//!
//! The proofs and the session keys are computed by `pontoon-net`; this
//! module only encodes, bounds and decodes. Never panics on input.

use pontoon_types::OsdId;
use pontoon_types::codec::Decoder;

use crate::frame::ProtoError;
use crate::message::{Role, Session};

/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a handshake proof (an HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// Longest entity name a handshake carries.
pub const MAX_ENTITY_LEN: usize = 160;
/// Longest encoded handshake message: a receiver refuses a frame header
/// announcing more before reading its body.
pub const MAX_HANDSHAKE_META: u32 = 512;

/// The client's first frame when it authenticates: everything a
/// [`crate::Hello`] says, plus who it is, the wire mode it expects and its
/// nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthHello {
    /// [`crate::PROTOCOL_VERSION`] of the sender.
    pub version: u32,
    /// The role the sender claims; the server checks it against `entity`.
    pub role: Role,
    /// The sender's session and this connection's place in it.
    pub session: Option<Session>,
    /// The wire mode the sender expects (a number of `pontoon-net`'s mode).
    pub mode: u8,
    /// The sender's entity name (`osd.3`, `client.admin`).
    pub entity: String,
    /// Fresh random bytes.
    pub nonce: [u8; NONCE_LEN],
}

/// The server's answer to an [`AuthHello`] it accepts so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthChallenge {
    /// The server's wire mode.
    pub mode: u8,
    /// The server's entity name.
    pub entity: String,
    /// Fresh random bytes.
    pub nonce: [u8; NONCE_LEN],
}

/// A proof of knowing the client's key, from either side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthProof {
    /// HMAC-SHA256 over the handshake transcript.
    pub proof: [u8; PROOF_LEN],
}

fn err(what: &'static str, why: &'static str) -> ProtoError {
    ProtoError::Malformed(what, why)
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    let b = &name.as_bytes()[..name.len().min(MAX_ENTITY_LEN)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

fn get_name(d: &mut Decoder<'_>, what: &'static str) -> Result<String, ProtoError> {
    let len = d.u8().map_err(|_| err(what, "truncated"))? as usize;
    if len > MAX_ENTITY_LEN {
        return Err(err(what, "entity name too long"));
    }
    let b = d.bytes(len).map_err(|_| err(what, "truncated"))?;
    if !b.iter().all(|c| c.is_ascii_graphic()) {
        return Err(err(what, "entity name is not printable ASCII"));
    }
    // All ASCII: valid UTF-8.
    String::from_utf8(b.to_vec()).map_err(|_| err(what, "entity name is not ASCII"))
}

fn get_array<const N: usize>(
    d: &mut Decoder<'_>,
    what: &'static str,
) -> Result<[u8; N], ProtoError> {
    let b = d.bytes(N).map_err(|_| err(what, "truncated"))?;
    let mut out = [0u8; N];
    out.copy_from_slice(b);
    Ok(out)
}

fn end(d: &Decoder<'_>, what: &'static str) -> Result<(), ProtoError> {
    if d.remaining() != 0 {
        return Err(err(what, "trailing bytes"));
    }
    Ok(())
}

/// The role as the transcript and the wire write it: a tag and an OSD id.
pub fn role_bytes(role: Role) -> [u8; 5] {
    match role {
        Role::Client => [0; 5],
        Role::Osd(id) => {
            let b = id.0.to_le_bytes();
            [1, b[0], b[1], b[2], b[3]]
        }
    }
}

/// The session as the transcript and the wire write it.
pub fn session_bytes(session: Option<Session>) -> [u8; 17] {
    let mut out = [0u8; 17];
    if let Some(s) = session {
        out[0] = 1;
        out[1..9].copy_from_slice(&s.id.to_le_bytes());
        out[9..17].copy_from_slice(&s.seq.to_le_bytes());
    }
    out
}

impl AuthHello {
    /// Encodes the fields (at most [`MAX_HANDSHAKE_META`] bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&role_bytes(self.role));
        out.extend_from_slice(&session_bytes(self.session));
        out.push(self.mode);
        put_name(&mut out, &self.entity);
        out.extend_from_slice(&self.nonce);
        debug_assert!(out.len() <= MAX_HANDSHAKE_META as usize);
        out
    }

    /// Decodes the fields.
    pub fn decode(meta: &[u8]) -> Result<Self, ProtoError> {
        const W: &str = "auth hello";
        let mut d = Decoder::new(meta);
        let t = |_| err(W, "truncated");
        let version = d.u32().map_err(t)?;
        let role = match d.u8().map_err(t)? {
            0 => {
                d.u32().map_err(t)?;
                Role::Client
            }
            1 => Role::Osd(OsdId(d.u32().map_err(t)?)),
            _ => return Err(err(W, "unknown role")),
        };
        let session = match d.u8().map_err(t)? {
            0 => {
                d.bytes(16).map_err(t)?;
                None
            }
            1 => Some(Session {
                id: d.u64().map_err(t)?,
                seq: d.u64().map_err(t)?,
            }),
            _ => return Err(err(W, "bad session flag")),
        };
        let mode = d.u8().map_err(t)?;
        let entity = get_name(&mut d, W)?;
        let nonce = get_array(&mut d, W)?;
        end(&d, W)?;
        Ok(Self {
            version,
            role,
            session,
            mode,
            entity,
            nonce,
        })
    }
}

impl AuthChallenge {
    /// Encodes the fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entity.len());
        out.push(self.mode);
        put_name(&mut out, &self.entity);
        out.extend_from_slice(&self.nonce);
        out
    }

    /// Decodes the fields.
    pub fn decode(meta: &[u8]) -> Result<Self, ProtoError> {
        const W: &str = "auth challenge";
        let mut d = Decoder::new(meta);
        let mode = d.u8().map_err(|_| err(W, "truncated"))?;
        let entity = get_name(&mut d, W)?;
        let nonce = get_array(&mut d, W)?;
        end(&d, W)?;
        Ok(Self {
            mode,
            entity,
            nonce,
        })
    }
}

impl AuthProof {
    /// Encodes the fields.
    pub fn encode(&self) -> Vec<u8> {
        self.proof.to_vec()
    }

    /// Decodes the fields.
    pub fn decode(meta: &[u8]) -> Result<Self, ProtoError> {
        const W: &str = "auth proof";
        let mut d = Decoder::new(meta);
        let proof = get_array(&mut d, W)?;
        end(&d, W)?;
        Ok(Self { proof })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> AuthHello {
        AuthHello {
            version: 4,
            role: Role::Osd(OsdId(7)),
            session: Some(Session { id: 9, seq: 2 }),
            mode: 2,
            entity: "osd.7".into(),
            nonce: [5; NONCE_LEN],
        }
    }

    #[test]
    fn handshake_messages_round_trip() {
        let h = hello();
        assert_eq!(AuthHello::decode(&h.encode()).unwrap(), h);
        let c = AuthHello {
            role: Role::Client,
            session: None,
            entity: "client.admin".into(),
            ..hello()
        };
        assert_eq!(AuthHello::decode(&c.encode()).unwrap(), c);
        let ch = AuthChallenge {
            mode: 1,
            entity: "osd.1".into(),
            nonce: [1; NONCE_LEN],
        };
        assert_eq!(AuthChallenge::decode(&ch.encode()).unwrap(), ch);
        let p = AuthProof {
            proof: [3; PROOF_LEN],
        };
        assert_eq!(AuthProof::decode(&p.encode()).unwrap(), p);
        assert!(h.encode().len() <= MAX_HANDSHAKE_META as usize);
    }

    #[test]
    fn every_truncation_and_extension_of_a_handshake_message_is_refused() {
        let enc = hello().encode();
        for n in 0..enc.len() {
            assert!(AuthHello::decode(&enc[..n]).is_err(), "{n} bytes");
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(AuthHello::decode(&long).is_err());
        let mut bad = enc;
        // The entity name's first byte: a control character.
        bad[4 + 5 + 17 + 1 + 1] = 0x01;
        assert!(AuthHello::decode(&bad).is_err());
    }
}
