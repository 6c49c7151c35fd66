//! The cryptography of DH-HMAC-CHAP: the hash functions and Diffie-Hellman
//! groups a transaction may negotiate, the HMAC responses, the augmented
//! challenge and the ephemeral FFDHE key exchange (NVMe Base Specification
//! 2.x, 8.3.4.5 "DH-HMAC-CHAP protocol"; the Linux kernel's
//! `drivers/nvme/common/auth.c` and nvmet's `auth.c` compute the same).
//!
//! - Host response R1 = HMAC(Kh, C1' || S1 || T || 00h || "HostHost" ||
//!   NQNh || 00h || NQNc), with Kh the host key transformed for NQNh.
//! - Controller response R2 = HMAC(Kc, C2' || S2 || T || 00h ||
//!   "Controller" || NQNc || 00h || NQNh), with Kc the controller key
//!   transformed for NQNc.
//! - S is the 32-bit sequence number and T the 16-bit transaction id, both
//!   little-endian; 00h is the secure channel byte (no concatenation here).
//! - Without a DH group C' is the challenge C itself; with one, the
//!   augmented challenge HMAC(H(g^xy mod p), C), g^xy written big-endian
//!   over the group's full length.
//!
//! The modular exponentiation is constant-time (crypto-bigint); private
//! exponents are 512 random bits, at least twice the strength of the
//! largest group (RFC 7919: 200 bits for ffdhe8192), and are zeroed when
//! dropped.

use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::{Zeroize, Zeroizing};

use super::ffdhe;

/// A hash function DH-HMAC-CHAP can negotiate (and that transforms keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashId {
    /// SHA-256 (id 1, 32-byte responses).
    Sha256,
    /// SHA-384 (id 2, 48-byte responses).
    Sha384,
    /// SHA-512 (id 3, 64-byte responses).
    Sha512,
}

impl HashId {
    /// Every hash, in the order a host offers them.
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    /// The hash with protocol id `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(Self::Sha256),
            2 => Some(Self::Sha384),
            3 => Some(Self::Sha512),
            _ => None,
        }
    }

    /// The protocol id.
    pub fn id(self) -> u8 {
        match self {
            Self::Sha256 => 1,
            Self::Sha384 => 2,
            Self::Sha512 => 3,
        }
    }

    /// Digest length in bytes (also the challenge and response length).
    pub fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
        }
    }

    /// The name operators use: `sha256`, `sha384`, `sha512`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256 => "sha256",
            Self::Sha384 => "sha384",
            Self::Sha512 => "sha512",
        }
    }

    /// Parses `sha256` (also `hmac(sha256)` and `SHA-256`, as nvmet and
    /// SPDK spell them), `sha384` or `sha512`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase().replace('-', "");
        let s = s
            .strip_prefix("hmac(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(&s);
        Self::ALL.into_iter().find(|h| h.name() == s)
    }
}

impl std::fmt::Display for HashId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Diffie-Hellman group DH-HMAC-CHAP can negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DhGroup {
    /// No key exchange (id 0): the challenge is used as it is.
    Null,
    /// RFC 7919 ffdhe2048 (id 1).
    Ffdhe2048,
    /// RFC 7919 ffdhe3072 (id 2).
    Ffdhe3072,
    /// RFC 7919 ffdhe4096 (id 3).
    Ffdhe4096,
    /// RFC 7919 ffdhe6144 (id 4).
    Ffdhe6144,
    /// RFC 7919 ffdhe8192 (id 5).
    Ffdhe8192,
}

impl DhGroup {
    /// Every group, in the order a host offers them.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The group with protocol id `id`.
    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.id() == id)
    }

    /// The protocol id.
    pub fn id(self) -> u8 {
        match self {
            Self::Null => 0,
            Self::Ffdhe2048 => 1,
            Self::Ffdhe3072 => 2,
            Self::Ffdhe4096 => 3,
            Self::Ffdhe6144 => 4,
            Self::Ffdhe8192 => 5,
        }
    }

    /// The name operators use: `null`, `ffdhe2048` ... `ffdhe8192`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Ffdhe2048 => "ffdhe2048",
            Self::Ffdhe3072 => "ffdhe3072",
            Self::Ffdhe4096 => "ffdhe4096",
            Self::Ffdhe6144 => "ffdhe6144",
            Self::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Parses a name as [`DhGroup::name`] gives it.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|g| g.name() == s)
    }

    /// Length of a public value (and of the shared secret) in bytes; 0 for
    /// the null group.
    pub fn value_len(self) -> usize {
        self.prime_hex().map_or(0, |h| h.len() / 2)
    }

    fn prime_hex(self) -> Option<&'static str> {
        match self {
            Self::Null => None,
            Self::Ffdhe2048 => Some(ffdhe::FFDHE2048),
            Self::Ffdhe3072 => Some(ffdhe::FFDHE3072),
            Self::Ffdhe4096 => Some(ffdhe::FFDHE4096),
            Self::Ffdhe6144 => Some(ffdhe::FFDHE6144),
            Self::Ffdhe8192 => Some(ffdhe::FFDHE8192),
        }
    }

    /// The group's prime and Montgomery parameters, computed once.
    fn params(self) -> Option<&'static Group> {
        static GROUPS: [OnceLock<Group>; 5] = [const { OnceLock::new() }; 5];
        let hex = self.prime_hex()?;
        let slot = &GROUPS[usize::from(self.id()) - 1];
        Some(slot.get_or_init(|| Group::new(hex)))
    }
}

impl std::fmt::Display for DhGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// HMAC-`hash` keyed with `key` over the concatenation of `parts`.
pub(crate) fn hmac(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        // HMAC takes keys of any length: this cannot fail.
        let mut m = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        for p in parts {
            m.update(p);
        }
        Zeroizing::new(m.finalize().into_bytes().to_vec())
    }
    match hash {
        HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
    }
}

/// H(`data`).
pub(crate) fn digest(hash: HashId, data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match hash {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    })
}

/// Which side a response proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// R1: the host proves it holds the host key.
    Host,
    /// R2: the controller proves it holds the controller key.
    Controller,
}

/// What a response is computed over, besides the key.
pub(crate) struct ResponseInput<'a> {
    /// The negotiated hash.
    pub hash: HashId,
    /// The challenge (C1 for the host's response, C2 for the controller's).
    pub challenge: &'a [u8],
    /// The shared secret g^xy mod p (empty for the null group).
    pub shared: &'a [u8],
    /// The sequence number (S1 or S2).
    pub seqnum: u32,
    /// The transaction id.
    pub tid: u16,
    /// The host's NQN.
    pub hostnqn: &'a str,
    /// The subsystem's NQN.
    pub subnqn: &'a str,
}

/// The augmented challenge HMAC(H(shared), challenge), or the challenge
/// itself without a shared secret.
pub(crate) fn augmented(hash: HashId, shared: &[u8], challenge: &[u8]) -> Zeroizing<Vec<u8>> {
    if shared.is_empty() {
        return Zeroizing::new(challenge.to_vec());
    }
    let k = digest(hash, shared);
    hmac(hash, &k, &[challenge])
}

/// The response of `role` with `key` (already transformed).
pub(crate) fn response(role: Role, key: &[u8], r: &ResponseInput<'_>) -> Zeroizing<Vec<u8>> {
    let c = augmented(r.hash, r.shared, r.challenge);
    let seq = r.seqnum.to_le_bytes();
    let tid = r.tid.to_le_bytes();
    let (label, first, second): (&[u8], &str, &str) = match role {
        Role::Host => (b"HostHost", r.hostnqn, r.subnqn),
        Role::Controller => (b"Controller", r.subnqn, r.hostnqn),
    };
    hmac(
        r.hash,
        key,
        &[
            &c,
            &seq,
            &tid,
            &[0],
            label,
            first.as_bytes(),
            &[0],
            second.as_bytes(),
        ],
    )
}

/// Bits of a private exponent.
const EXPONENT_BITS: u32 = 512;

/// A group's prime, ready for exponentiation.
struct Group {
    bits: u32,
    p: BoxedUint,
    params: BoxedMontyParams,
}

impl Group {
    fn new(hex: &str) -> Self {
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or_else(|_| unreachable!()))
            .collect();
        let bits = (bytes.len() * 8) as u32;
        let p = BoxedUint::from_be_slice(&bytes, bits).unwrap_or_else(|_| unreachable!());
        let odd = Odd::new(p.clone())
            .into_option()
            .unwrap_or_else(|| unreachable!());
        // The modulus is public: setting it up need not be constant-time.
        let params = BoxedMontyParams::new_vartime(odd);
        Self { bits, p, params }
    }

    fn to_bytes(&self, v: &BoxedUint) -> Vec<u8> {
        let b = v.to_be_bytes();
        let len = (self.bits / 8) as usize;
        // The precision is the prime's, a multiple of 64 bits: exact.
        debug_assert_eq!(b.len(), len);
        b[b.len() - len..].to_vec()
    }
}

/// Why a peer's public value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DhError {
    /// The value's length is not the group's.
    #[error("DH value of {got} bytes, the group's are {want}")]
    Length {
        /// Bytes received.
        got: usize,
        /// Bytes the group's values have.
        want: usize,
    },
    /// The value is outside 2..=p-2 (a small-subgroup or degenerate value).
    #[error("DH value out of range")]
    Range,
}

/// An ephemeral key pair of one transaction.
pub(crate) struct DhKeyPair {
    group: DhGroup,
    x: BoxedUint,
    /// g^x mod p, big-endian, the group's full length.
    pub public: Vec<u8>,
}

impl Drop for DhKeyPair {
    fn drop(&mut self) {
        self.x.zeroize();
    }
}

impl DhKeyPair {
    /// A fresh key pair in `group` (`None` for the null group).
    pub fn generate(group: DhGroup) -> Option<Self> {
        let g = group.params()?;
        let mut raw = Zeroizing::new([0u8; (EXPONENT_BITS / 8) as usize]);
        rand::fill(&mut raw[..]);
        // Never 0 or 1: set the top bit (a 512-bit exponent).
        raw[0] |= 0x80;
        let x =
            BoxedUint::from_be_slice(&raw[..], EXPONENT_BITS).unwrap_or_else(|_| unreachable!());
        let two = BoxedMontyForm::new(
            BoxedUint::from_be_slice(&[2], g.bits).unwrap_or_else(|_| unreachable!()),
            &g.params,
        );
        let public = g.to_bytes(&two.pow_bounded_exp(&x, EXPONENT_BITS).retrieve());
        Some(Self { group, x, public })
    }

    /// g^xy mod p from the peer's public value, big-endian over the
    /// group's full length. Refuses values outside 2..=p-2.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let g = self.group.params().unwrap_or_else(|| unreachable!());
        let want = (g.bits / 8) as usize;
        if peer.len() != want {
            return Err(DhError::Length {
                got: peer.len(),
                want,
            });
        }
        let y = BoxedUint::from_be_slice(peer, g.bits).map_err(|_| DhError::Range)?;
        let two = BoxedUint::from_be_slice(&[2], g.bits).map_err(|_| DhError::Range)?;
        let p_minus_2 = g.p.wrapping_sub(&two);
        // Public values: comparing them need not be constant-time.
        if y < two || y > p_minus_2 {
            return Err(DhError::Range);
        }
        let s = BoxedMontyForm::new(y, &g.params)
            .pow_bounded_exp(&self.x, EXPONENT_BITS)
            .retrieve();
        Ok(Zeroizing::new(g.to_bytes(&s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 4231 test case 2 ("Jefe"), for each hash.
    #[test]
    fn hmac_matches_rfc_4231() {
        let parts: [&[u8]; 2] = [b"what do ya want ", b"for nothing?"];
        assert_eq!(
            &hmac(HashId::Sha256, b"Jefe", &parts)[..],
            &hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")[..]
        );
        assert_eq!(
            &hmac(HashId::Sha384, b"Jefe", &parts)[..],
            &hex(concat!(
                "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e",
                "8e2240ca5e69e2c78b3239ecfab21649"
            ))[..]
        );
        assert_eq!(
            &hmac(HashId::Sha512, b"Jefe", &parts)[..],
            &hex(concat!(
                "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554",
                "9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
            ))[..]
        );
    }

    #[test]
    fn ids_names_and_lengths() {
        for h in HashId::ALL {
            assert_eq!(HashId::from_id(h.id()), Some(h));
            assert_eq!(HashId::parse(h.name()), Some(h));
            assert_eq!(digest(h, b"x").len(), h.digest_len());
        }
        assert_eq!(HashId::parse("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::parse("SHA-512"), Some(HashId::Sha512));
        assert_eq!(HashId::parse("md5"), None);
        assert_eq!(HashId::from_id(0), None);
        for g in DhGroup::ALL {
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::parse(g.name()), Some(g));
        }
        assert_eq!(DhGroup::from_id(6), None);
        let lens: Vec<usize> = DhGroup::ALL.iter().map(|g| g.value_len()).collect();
        assert_eq!(lens, [0, 256, 384, 512, 768, 1024]);
    }

    /// RFC 7919's primes are safe primes p = 2q + 1 of the form
    /// 2^b - 2^(b-64) + (floor(2^(b-130) e) + X) 2^64 - 1: the top and bottom
    /// 64 bits are ones, the next bits are e's (ADF85458A2BB4A9A), and, 2
    /// being a quadratic residue, 2^q = 1 mod p (which also makes p a
    /// Fermat probable prime to base 2).
    #[test]
    fn the_groups_are_rfc_7919s() {
        for group in DhGroup::ALL.into_iter().skip(1) {
            let h = group.prime_hex().unwrap();
            assert_eq!(h.len() / 2, group.value_len());
            assert!(h.starts_with("FFFFFFFFFFFFFFFFADF85458A2BB4A9A"), "{group}");
            assert!(h.ends_with("FFFFFFFFFFFFFFFF"), "{group}");
            let g = group.params().unwrap();
            let one = BoxedUint::from_be_slice(&[1], g.bits).unwrap();
            let q = g.p.wrapping_sub(&one).shr(1);
            let two =
                BoxedMontyForm::new(BoxedUint::from_be_slice(&[2], g.bits).unwrap(), &g.params);
            assert_eq!(two.pow(&q).retrieve(), one, "{group}: 2^q mod p is not 1");
        }
    }

    #[test]
    fn both_sides_of_an_exchange_agree_and_bad_values_are_refused() {
        for group in [DhGroup::Ffdhe2048, DhGroup::Ffdhe3072] {
            let a = DhKeyPair::generate(group).unwrap();
            let b = DhKeyPair::generate(group).unwrap();
            assert_eq!(a.public.len(), group.value_len());
            assert_ne!(a.public, b.public);
            let s1 = a.shared_secret(&b.public).unwrap();
            let s2 = b.shared_secret(&a.public).unwrap();
            assert_eq!(&s1[..], &s2[..]);
            assert_eq!(s1.len(), group.value_len());
            let n = group.value_len();
            let mut one = vec![0u8; n];
            one[n - 1] = 1;
            assert_eq!(a.shared_secret(&one).unwrap_err(), DhError::Range);
            assert_eq!(a.shared_secret(&vec![0xFF; n]).unwrap_err(), DhError::Range);
            assert!(matches!(
                a.shared_secret(&b.public[1..]),
                Err(DhError::Length { .. })
            ));
        }
        assert!(DhKeyPair::generate(DhGroup::Null).is_none());
    }

    #[test]
    fn responses_bind_every_input() {
        let base = ResponseInput {
            hash: HashId::Sha256,
            challenge: &[1; 32],
            shared: &[],
            seqnum: 7,
            tid: 3,
            hostnqn: "nqn.h",
            subnqn: "nqn.s",
        };
        let key = [9u8; 32];
        let r = response(Role::Host, &key, &base);
        assert_eq!(r.len(), 32);
        // By hand: HMAC(key, C || 07000000 || 0300 || 00 || HostHost ||
        // nqn.h || 00 || nqn.s).
        let mut msg = vec![1u8; 32];
        msg.extend_from_slice(&[7, 0, 0, 0, 3, 0, 0]);
        msg.extend_from_slice(b"HostHostnqn.h\0nqn.s");
        assert_eq!(&r[..], &hmac(HashId::Sha256, &key, &[&msg])[..]);
        assert_ne!(&r[..], &response(Role::Controller, &key, &base)[..]);
        for changed in [
            ResponseInput { seqnum: 8, ..base },
            ResponseInput { tid: 4, ..base },
            ResponseInput {
                hostnqn: "nqn.x",
                ..base
            },
            ResponseInput {
                challenge: &[2; 32],
                ..base
            },
            ResponseInput {
                shared: &[5; 256],
                ..base
            },
        ] {
            assert_ne!(&r[..], &response(Role::Host, &key, &changed)[..]);
        }
        assert_ne!(&r[..], &response(Role::Host, &[8u8; 32], &base)[..]);
    }
}
