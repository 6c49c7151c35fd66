//! The DH-HMAC-CHAP messages as they travel in AUTH_Send / AUTH_Receive
//! data (NVMe Base Specification 2.x, 8.3.4.5; Linux's `struct
//! nvmf_auth_dhchap_*_data` lay them out the same way). All integers are
//! little-endian. Decoding checks every length against the buffer before
//! reading; nothing here trusts the peer.
//!
//! | message | type/id | body after the 16-byte (failure: 8-byte) header |
//! |---|---|---|
//! | Negotiate | 00h/00h | SC_C, NAPD, then NAPD 64-byte protocol descriptors |
//! | Challenge | 01h/01h | HL, hash id, DH group id, DHVLEN, S1; C1, DH value |
//! | Reply | 01h/02h | HL, CVALID, DHVLEN, S2; R1, C2, DH value |
//! | Success1 | 01h/03h | HL, RVALID; R2 |
//! | Success2 | 01h/04h | — |
//! | Failure2 / Failure1 | 00h/F0h, F1h | reason code, explanation |

use super::dhchap::{DhGroup, HashId};

/// AUTH_Send / AUTH_Receive SECP: the DH-HMAC-CHAP protocol.
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP commands.
pub const SPSP: u8 = 0x01;
/// Connect response DW0 bit: authentication transaction required (ATR).
pub const CONNECT_ATR: u32 = 1 << 17;
/// Connect response DW0 bit: authentication and secure channel required.
pub const CONNECT_ASCR: u32 = 1 << 18;
/// Largest message either side sends or accepts: a Reply with SHA-512 and
/// ffdhe8192 is 16 + 2 * 64 + 1024 bytes; Linux reads into 4 KiB.
pub const MAX_MESSAGE: usize = 8192;

/// AUTH-Type of the common messages (Negotiate, Failure1, Failure2).
const TYPE_COMMON: u8 = 0x00;
/// AUTH-Type of the DH-HMAC-CHAP messages.
const TYPE_DHCHAP: u8 = 0x01;
/// AUTH-Id of each message.
mod id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}
/// AUTHID of the DH-HMAC-CHAP protocol descriptor.
const AUTHID_DHCHAP: u8 = 0x01;
/// Size of one protocol descriptor in a Negotiate.
const DESCRIPTOR_LEN: usize = 64;
/// Where the DH group ids start in a descriptor's id list.
const DH_IDS_AT: usize = 30;
/// Most ids of either kind in one descriptor.
const MAX_IDS: usize = 30;
/// Size of the Challenge, Reply, Success1 and Success2 headers.
const HEADER: usize = 16;
/// Size of a Failure message.
const FAILURE_LEN: usize = 8;

/// The reason code of an authentication failure.
pub const REASON_FAILED: u8 = 0x01;

/// Why an authentication failed: the explanation of a Failure1/Failure2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explanation {
    /// The response did not match: wrong secret (01h).
    Failed,
    /// The authentication protocol is not usable (02h).
    NotUsable,
    /// Secure channel concatenation asked for and not offered (03h).
    ConcatMismatch,
    /// No usable hash function (04h).
    HashUnusable,
    /// No usable DH group (05h).
    DhGroupUnusable,
    /// A field of the message is wrong (06h).
    IncorrectPayload,
    /// The message is not the one expected now (07h).
    IncorrectMessage,
    /// An explanation this code does not know.
    Other(u8),
}

impl Explanation {
    /// The protocol's code.
    pub fn code(self) -> u8 {
        match self {
            Self::Failed => 0x01,
            Self::NotUsable => 0x02,
            Self::ConcatMismatch => 0x03,
            Self::HashUnusable => 0x04,
            Self::DhGroupUnusable => 0x05,
            Self::IncorrectPayload => 0x06,
            Self::IncorrectMessage => 0x07,
            Self::Other(c) => c,
        }
    }

    /// The explanation with code `c`.
    pub fn from_code(c: u8) -> Self {
        match c {
            0x01 => Self::Failed,
            0x02 => Self::NotUsable,
            0x03 => Self::ConcatMismatch,
            0x04 => Self::HashUnusable,
            0x05 => Self::DhGroupUnusable,
            0x06 => Self::IncorrectPayload,
            0x07 => Self::IncorrectMessage,
            c => Self::Other(c),
        }
    }
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Self::Failed => "authentication failed (wrong secret)",
            Self::NotUsable => "authentication protocol not usable",
            Self::ConcatMismatch => "secure channel concatenation mismatch",
            Self::HashUnusable => "hash function not usable",
            Self::DhGroupUnusable => "DH group not usable",
            Self::IncorrectPayload => "incorrect payload",
            Self::IncorrectMessage => "incorrect protocol message",
            Self::Other(c) => return write!(f, "explanation {c:#04x}"),
        };
        f.write_str(s)
    }
}

/// A decoding error: the explanation the receiver answers with.
pub type Malformed = Explanation;

/// AUTH_Negotiate: the host's offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiate {
    /// Transaction id.
    pub tid: u16,
    /// Secure channel concatenation asked for (0: none).
    pub sc_c: u8,
    /// Hash ids offered (in the host's order; unknown ids kept as they are).
    pub hashes: Vec<u8>,
    /// DH group ids offered.
    pub dhgroups: Vec<u8>,
}

/// DH-HMAC-CHAP_Challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Transaction id.
    pub tid: u16,
    /// The hash chosen.
    pub hash: HashId,
    /// The DH group chosen.
    pub dhgroup: DhGroup,
    /// Sequence number S1.
    pub seqnum: u32,
    /// Challenge C1 (hash length).
    pub challenge: Vec<u8>,
    /// The controller's DH public value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Transaction id.
    pub tid: u16,
    /// Response R1.
    pub response: Vec<u8>,
    /// Challenge C2 for the controller, if the host asks it to
    /// authenticate itself (CVALID).
    pub challenge: Option<Vec<u8>>,
    /// Sequence number S2 (0: no bidirectional authentication).
    pub seqnum: u32,
    /// The host's DH public value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Success1 {
    /// Transaction id.
    pub tid: u16,
    /// Hash length.
    pub hl: u8,
    /// Response R2 to the host's challenge (RVALID), if it sent one.
    pub response: Option<Vec<u8>>,
}

/// A message either side may send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate (host).
    Negotiate(Negotiate),
    /// Challenge (controller).
    Challenge(Challenge),
    /// Reply (host).
    Reply(Reply),
    /// Success1 (controller).
    Success1(Success1),
    /// Success2 (host): the controller's response was right.
    Success2 {
        /// Transaction id.
        tid: u16,
    },
    /// Failure1 (controller) or Failure2 (host).
    Failure {
        /// Failure2 (from the host) rather than Failure1.
        from_host: bool,
        /// Transaction id.
        tid: u16,
        /// Reason code.
        reason: u8,
        /// Explanation.
        explanation: Explanation,
    },
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn header(b: &mut Vec<u8>, auth_type: u8, auth_id: u8, tid: u16) {
    b.extend_from_slice(&[auth_type, auth_id, 0, 0]);
    b.extend_from_slice(&tid.to_le_bytes());
}

impl Message {
    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Negotiate(_) => "Negotiate",
            Self::Challenge(_) => "Challenge",
            Self::Reply(_) => "Reply",
            Self::Success1(_) => "Success1",
            Self::Success2 { .. } => "Success2",
            Self::Failure {
                from_host: true, ..
            } => "Failure2",
            Self::Failure { .. } => "Failure1",
        }
    }

    /// The transaction id.
    pub fn tid(&self) -> u16 {
        match self {
            Self::Negotiate(m) => m.tid,
            Self::Challenge(m) => m.tid,
            Self::Reply(m) => m.tid,
            Self::Success1(m) => m.tid,
            Self::Success2 { tid } | Self::Failure { tid, .. } => *tid,
        }
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        match self {
            Self::Negotiate(m) => {
                header(&mut b, TYPE_COMMON, id::NEGOTIATE, m.tid);
                b.extend_from_slice(&[m.sc_c, 1]);
                let mut d = [0u8; DESCRIPTOR_LEN];
                let halen = m.hashes.len().min(MAX_IDS);
                let dhlen = m.dhgroups.len().min(MAX_IDS);
                d[0] = AUTHID_DHCHAP;
                d[2] = halen as u8;
                d[3] = dhlen as u8;
                d[4..4 + halen].copy_from_slice(&m.hashes[..halen]);
                d[4 + DH_IDS_AT..4 + DH_IDS_AT + dhlen].copy_from_slice(&m.dhgroups[..dhlen]);
                b.extend_from_slice(&d);
            }
            Self::Challenge(m) => {
                header(&mut b, TYPE_DHCHAP, id::CHALLENGE, m.tid);
                b.extend_from_slice(&[m.challenge.len() as u8, 0, m.hash.id(), m.dhgroup.id()]);
                b.extend_from_slice(&(m.dh_value.len() as u16).to_le_bytes());
                b.extend_from_slice(&m.seqnum.to_le_bytes());
                b.extend_from_slice(&m.challenge);
                b.extend_from_slice(&m.dh_value);
            }
            Self::Reply(m) => {
                header(&mut b, TYPE_DHCHAP, id::REPLY, m.tid);
                let hl = m.response.len();
                b.extend_from_slice(&[hl as u8, 0, u8::from(m.challenge.is_some()), 0]);
                b.extend_from_slice(&(m.dh_value.len() as u16).to_le_bytes());
                b.extend_from_slice(&m.seqnum.to_le_bytes());
                b.extend_from_slice(&m.response);
                match &m.challenge {
                    Some(c) => b.extend_from_slice(c),
                    None => b.resize(b.len() + hl, 0),
                }
                b.extend_from_slice(&m.dh_value);
            }
            Self::Success1(m) => {
                header(&mut b, TYPE_DHCHAP, id::SUCCESS1, m.tid);
                b.extend_from_slice(&[m.hl, 0, u8::from(m.response.is_some())]);
                b.resize(HEADER, 0);
                match &m.response {
                    Some(r) => b.extend_from_slice(r),
                    None => b.resize(HEADER + usize::from(m.hl), 0),
                }
            }
            Self::Success2 { tid } => {
                header(&mut b, TYPE_DHCHAP, id::SUCCESS2, *tid);
                b.resize(HEADER, 0);
            }
            Self::Failure {
                from_host,
                tid,
                reason,
                explanation,
            } => {
                let aid = if *from_host {
                    id::FAILURE2
                } else {
                    id::FAILURE1
                };
                header(&mut b, TYPE_COMMON, aid, *tid);
                b.extend_from_slice(&[*reason, explanation.code()]);
            }
        }
        debug_assert!(b.len() <= MAX_MESSAGE);
        b
    }

    /// Decodes a message (trailing bytes, e.g. zero padding up to the
    /// allocation length, are ignored). `Err` carries the explanation a
    /// receiver answers a malformed message with.
    pub fn decode(b: &[u8]) -> Result<Self, Malformed> {
        if b.len() < FAILURE_LEN {
            return Err(Explanation::IncorrectPayload);
        }
        let (auth_type, auth_id, tid) = (b[0], b[1], u16_at(b, 4));
        match (auth_type, auth_id) {
            (TYPE_COMMON, id::NEGOTIATE) => decode_negotiate(b, tid),
            // Failures are common messages; tolerate DH-HMAC-CHAP typed ones.
            (TYPE_COMMON | TYPE_DHCHAP, id::FAILURE1 | id::FAILURE2) => Ok(Self::Failure {
                from_host: auth_id == id::FAILURE2,
                tid,
                reason: b[6],
                explanation: Explanation::from_code(b[7]),
            }),
            (TYPE_DHCHAP, id::CHALLENGE) => decode_challenge(b, tid),
            (TYPE_DHCHAP, id::REPLY) => decode_reply(b, tid),
            (TYPE_DHCHAP, id::SUCCESS1) => {
                if b.len() < HEADER {
                    return Err(Explanation::IncorrectPayload);
                }
                let hl = b[6];
                let response = if b[8] & 1 != 0 {
                    let end = HEADER + usize::from(hl);
                    if hl == 0 || b.len() < end {
                        return Err(Explanation::IncorrectPayload);
                    }
                    Some(b[HEADER..end].to_vec())
                } else {
                    None
                };
                Ok(Self::Success1(Success1 { tid, hl, response }))
            }
            (TYPE_DHCHAP, id::SUCCESS2) => Ok(Self::Success2 { tid }),
            _ => Err(Explanation::IncorrectMessage),
        }
    }
}

fn decode_negotiate(b: &[u8], tid: u16) -> Result<Message, Malformed> {
    let (sc_c, napd) = (b[6], usize::from(b[7]));
    if napd == 0 || b.len() < FAILURE_LEN + napd * DESCRIPTOR_LEN {
        return Err(Explanation::IncorrectPayload);
    }
    let d = b[FAILURE_LEN..]
        .chunks_exact(DESCRIPTOR_LEN)
        .take(napd)
        .find(|d| d[0] == AUTHID_DHCHAP)
        .ok_or(Explanation::NotUsable)?;
    let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
    if halen > MAX_IDS || dhlen > MAX_IDS {
        return Err(Explanation::IncorrectPayload);
    }
    Ok(Message::Negotiate(Negotiate {
        tid,
        sc_c,
        hashes: d[4..4 + halen].to_vec(),
        dhgroups: d[4 + DH_IDS_AT..4 + DH_IDS_AT + dhlen].to_vec(),
    }))
}

fn decode_challenge(b: &[u8], tid: u16) -> Result<Message, Malformed> {
    if b.len() < HEADER {
        return Err(Explanation::IncorrectPayload);
    }
    let hl = usize::from(b[6]);
    let hash = HashId::from_id(b[8]).ok_or(Explanation::HashUnusable)?;
    let dhgroup = DhGroup::from_id(b[9]).ok_or(Explanation::DhGroupUnusable)?;
    let dhvlen = usize::from(u16_at(b, 10));
    if hl != hash.digest_len() || dhvlen != dhgroup.value_len() || b.len() < HEADER + hl + dhvlen {
        return Err(Explanation::IncorrectPayload);
    }
    Ok(Message::Challenge(Challenge {
        tid,
        hash,
        dhgroup,
        seqnum: u32_at(b, 12),
        challenge: b[HEADER..HEADER + hl].to_vec(),
        dh_value: b[HEADER + hl..HEADER + hl + dhvlen].to_vec(),
    }))
}

fn decode_reply(b: &[u8], tid: u16) -> Result<Message, Malformed> {
    if b.len() < HEADER {
        return Err(Explanation::IncorrectPayload);
    }
    let hl = usize::from(b[6]);
    let cvalid = b[8] & 1 != 0;
    let dhvlen = usize::from(u16_at(b, 10));
    if hl == 0 || b.len() < HEADER + 2 * hl + dhvlen {
        return Err(Explanation::IncorrectPayload);
    }
    let at = HEADER;
    Ok(Message::Reply(Reply {
        tid,
        response: b[at..at + hl].to_vec(),
        challenge: cvalid.then(|| b[at + hl..at + 2 * hl].to_vec()),
        seqnum: u32_at(b, 12),
        dh_value: b[at + 2 * hl..at + 2 * hl + dhvlen].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            Message::Negotiate(Negotiate {
                tid: 0x1234,
                sc_c: 0,
                hashes: vec![1, 2, 3],
                dhgroups: vec![0, 1, 2, 3, 4, 5],
            }),
            Message::Challenge(Challenge {
                tid: 9,
                hash: HashId::Sha384,
                dhgroup: DhGroup::Ffdhe2048,
                seqnum: 0xdead_beef,
                challenge: vec![7; 48],
                dh_value: vec![3; 256],
            }),
            Message::Reply(Reply {
                tid: 9,
                response: vec![1; 32],
                challenge: Some(vec![2; 32]),
                seqnum: 77,
                dh_value: vec![],
            }),
            Message::Reply(Reply {
                tid: 9,
                response: vec![1; 64],
                challenge: None,
                seqnum: 0,
                dh_value: vec![5; 384],
            }),
            Message::Success1(Success1 {
                tid: 1,
                hl: 32,
                response: Some(vec![4; 32]),
            }),
            Message::Success1(Success1 {
                tid: 1,
                hl: 32,
                response: None,
            }),
            Message::Success2 { tid: 5 },
            Message::Failure {
                from_host: false,
                tid: 5,
                reason: REASON_FAILED,
                explanation: Explanation::Failed,
            },
            Message::Failure {
                from_host: true,
                tid: 5,
                reason: REASON_FAILED,
                explanation: Explanation::HashUnusable,
            },
        ];
        for m in msgs {
            let mut b = m.encode();
            assert_eq!(Message::decode(&b), Ok(m.clone()), "{}", m.name());
            // Zero padding up to an allocation length is ignored.
            b.resize(4096, 0);
            assert_eq!(Message::decode(&b), Ok(m.clone()), "{} padded", m.name());
        }
    }

    /// The byte layout Linux uses (`struct nvmf_auth_dhchap_*_data`).
    #[test]
    fn layouts_match_linux() {
        let n = Message::Negotiate(Negotiate {
            tid: 2,
            sc_c: 0,
            hashes: vec![1, 2, 3],
            dhgroups: vec![0, 1],
        })
        .encode();
        assert_eq!(n.len(), 8 + 64);
        assert_eq!(&n[..8], &[0, 0, 0, 0, 2, 0, 0, 1]);
        assert_eq!(&n[8..15], &[1, 0, 3, 2, 1, 2, 3]);
        assert_eq!(&n[8 + 4 + 30..8 + 4 + 32], &[0, 1]);
        let f = Message::Failure {
            from_host: false,
            tid: 0x0102,
            reason: 1,
            explanation: Explanation::Failed,
        }
        .encode();
        assert_eq!(f, [0x00, 0xF1, 0, 0, 0x02, 0x01, 0x01, 0x01]);
        let c = Message::Challenge(Challenge {
            tid: 3,
            hash: HashId::Sha256,
            dhgroup: DhGroup::Null,
            seqnum: 0x0403_0201,
            challenge: vec![0xAA; 32],
            dh_value: vec![],
        })
        .encode();
        assert_eq!(&c[..16], &[1, 1, 0, 0, 3, 0, 32, 0, 1, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(c.len(), 16 + 32);
    }

    #[test]
    fn truncated_or_inconsistent_messages_are_refused() {
        assert_eq!(Message::decode(&[0; 4]), Err(Explanation::IncorrectPayload));
        assert_eq!(
            Message::decode(&[9, 9, 0, 0, 0, 0, 0, 0]),
            Err(Explanation::IncorrectMessage)
        );
        // Negotiate claiming two descriptors but holding one.
        let mut n = Message::Negotiate(Negotiate {
            tid: 1,
            sc_c: 0,
            hashes: vec![1],
            dhgroups: vec![0],
        })
        .encode();
        n[7] = 2;
        assert_eq!(Message::decode(&n), Err(Explanation::IncorrectPayload));
        // A descriptor of another protocol only.
        n[7] = 1;
        n[8] = 0x02;
        assert_eq!(Message::decode(&n), Err(Explanation::NotUsable));
        n[8] = AUTHID_DHCHAP;
        n[10] = 31;
        assert_eq!(Message::decode(&n), Err(Explanation::IncorrectPayload));
        // A Reply whose DHVLEN runs past the buffer.
        let mut r = Message::Reply(Reply {
            tid: 1,
            response: vec![1; 32],
            challenge: None,
            seqnum: 0,
            dh_value: vec![],
        })
        .encode();
        r[10] = 0x10;
        assert_eq!(Message::decode(&r), Err(Explanation::IncorrectPayload));
        // A Challenge whose HL is not the hash's.
        let mut c = Message::Challenge(Challenge {
            tid: 3,
            hash: HashId::Sha256,
            dhgroup: DhGroup::Null,
            seqnum: 1,
            challenge: vec![0xAA; 32],
            dh_value: vec![],
        })
        .encode();
        c[6] = 48;
        c.resize(200, 0);
        assert_eq!(Message::decode(&c), Err(Explanation::IncorrectPayload));
    }
}
