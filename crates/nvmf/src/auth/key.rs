//! DH-HMAC-CHAP secrets in the NVMe representation `DHHC-1:<hh>:<base64>:`
//! (NVMe Base Specification 2.x, "Secret representation"; what
//! `nvme gen-dhchap-key` prints and what Linux takes in `dhchap_secret=`
//! and nvmet's `dhchap_key`): `hh` names the hash that transforms the key
//! before use (00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512), and the base64
//! text holds the 32, 48 or 64 key bytes followed by their CRC-32
//! (little-endian).
//!
//! A [`DhchapSecret`] never shows its key: `Display` and `Debug` print
//! `DHHC-1:01:<redacted>`. Only [`DhchapSecret::expose`] gives the full
//! text back, for storing it where it is kept (the cluster map).

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::dhchap::{HashId, hmac};

/// Key lengths the representation allows, in bytes.
pub const KEY_LENGTHS: [usize; 3] = [32, 48, 64];

/// Longest text a secret may have (a 64-byte key: 10 + 92 + 1 characters);
/// longer input is refused before it is decoded.
const MAX_TEXT: usize = 128;

/// Why a secret's text was refused. It never carries the text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text does not start with `DHHC-1:` and a two-digit hash id.
    #[error("not a DH-HMAC-CHAP secret (expected DHHC-1:<00..03>:<base64>:)")]
    Format,
    /// The hash id is not 00..03.
    #[error(
        "unknown key transformation hash {0:#04x} (00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512)"
    )]
    Hash(u8),
    /// The base64 text does not decode.
    #[error("the key is not valid base64")]
    Base64,
    /// The key is not 32, 48 or 64 bytes long.
    #[error("key of {0} bytes (must be 32, 48 or 64)")]
    Length(usize),
    /// The CRC-32 after the key does not match it (a typo or truncation).
    #[error("key CRC-32 mismatch (mistyped or truncated secret)")]
    Crc,
}

/// CRC-32 as the representation uses it (IEEE 802.3, reflected, as zlib's).
pub(crate) fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

/// A DH-HMAC-CHAP secret: a host's or a controller's key.
#[derive(Clone)]
pub struct DhchapSecret {
    /// The hash that transforms the key (`None`: used as it is).
    transform: Option<HashId>,
    key: Zeroizing<Vec<u8>>,
}

impl DhchapSecret {
    /// Parses `DHHC-1:<hh>:<base64>:` (the trailing colon may be left out).
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        if text.len() > MAX_TEXT {
            return Err(KeyError::Format);
        }
        let rest = text.strip_prefix("DHHC-1:").ok_or(KeyError::Format)?;
        let (hh, b64) = rest.split_once(':').ok_or(KeyError::Format)?;
        if hh.len() != 2 || !hh.bytes().all(|c| c.is_ascii_digit()) {
            return Err(KeyError::Format);
        }
        let id: u8 = hh.parse().map_err(|_| KeyError::Format)?;
        let transform = match id {
            0 => None,
            _ => Some(HashId::from_id(id).ok_or(KeyError::Hash(id))?),
        };
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| KeyError::Base64)?);
        let Some(len) = raw.len().checked_sub(4) else {
            return Err(KeyError::Length(0));
        };
        if !KEY_LENGTHS.contains(&len) {
            return Err(KeyError::Length(len));
        }
        let want = u32::from_le_bytes([raw[len], raw[len + 1], raw[len + 2], raw[len + 3]]);
        if crc32(&raw[..len]) != want {
            return Err(KeyError::Crc);
        }
        Ok(Self {
            transform,
            key: Zeroizing::new(raw[..len].to_vec()),
        })
    }

    /// A secret holding `key` (32, 48 or 64 bytes), transformed with
    /// `transform` before use.
    pub fn from_key(key: &[u8], transform: Option<HashId>) -> Result<Self, KeyError> {
        if !KEY_LENGTHS.contains(&key.len()) {
            return Err(KeyError::Length(key.len()));
        }
        Ok(Self {
            transform,
            key: Zeroizing::new(key.to_vec()),
        })
    }

    /// A fresh random secret of `len` bytes (as `nvme gen-dhchap-key`
    /// makes without `--nqn`).
    pub fn generate(len: usize, transform: Option<HashId>) -> Result<Self, KeyError> {
        let mut key = Zeroizing::new(vec![0u8; len]);
        rand::fill(&mut key[..]);
        Self::from_key(&key, transform)
    }

    /// The transformation hash (`None` for `00`).
    pub fn transform_hash(&self) -> Option<HashId> {
        self.transform
    }

    /// The key's length in bytes.
    pub fn key_len(&self) -> usize {
        self.key.len()
    }

    /// The whole secret as text, `DHHC-1:<hh>:<base64>:`. Only for storing
    /// it: never log or print what this returns.
    pub fn expose(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new(self.key.to_vec());
        raw.extend_from_slice(&crc32(&self.key).to_le_bytes());
        Zeroizing::new(format!(
            "DHHC-1:{:02}:{}:",
            self.transform.map_or(0, HashId::id),
            STANDARD.encode(&raw[..])
        ))
    }

    /// The key as DH-HMAC-CHAP uses it for `nqn` (the host's NQN for a
    /// host secret, the subsystem's for a controller secret): with a
    /// transformation hash H, HMAC-H(key, NQN || "NVMe-over-Fabrics");
    /// else the key itself.
    pub(crate) fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.key.clone(),
            Some(h) => hmac(h, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

impl PartialEq for DhchapSecret {
    fn eq(&self, other: &Self) -> bool {
        self.transform == other.transform
            && self.key.len() == other.key.len()
            && bool::from(self.key.ct_eq(&other.key))
    }
}

impl Eq for DhchapSecret {}

impl FromStr for DhchapSecret {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::parse(s)
    }
}

impl fmt::Display for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DHHC-1:{:02}:<redacted>",
            self.transform.map_or(0, HashId::id)
        )
    }
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DhchapSecret({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness's default host NQN, used with `nvme gen-dhchap-key -n`.
    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";

    fn counting(n: usize) -> Vec<u8> {
        (0..n as u8).collect()
    }

    #[test]
    fn crc32_is_zlibs() {
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    /// Made by nvme-cli 2.4 / libnvme 1.3:
    /// `nvme gen-dhchap-key -s 000102...1f -l 32 -m 0 -n $HOSTNQN` (no
    /// transformation: the key is the secret given), and with `-l 64`.
    #[test]
    fn untransformed_keys_from_nvme_cli_parse_to_the_secret_given() {
        let k = DhchapSecret::parse("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
            .unwrap();
        assert_eq!(&k.key[..], &counting(32)[..]);
        assert_eq!(k.transform_hash(), None);
        assert_eq!(&k.transformed(HOSTNQN)[..], &counting(32)[..]);
        let k = DhchapSecret::parse(
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:",
        )
        .unwrap();
        assert_eq!(&k.key[..], &counting(64)[..]);
    }

    /// nvme-cli 2.x applies the `--nqn` transformation to the key it prints:
    /// `nvme gen-dhchap-key -s <secret> -m H -n NQN` prints HMAC-H(secret,
    /// NQN || "NVMe-over-Fabrics"). So libnvme's transformation of a known
    /// secret is a test vector for ours, for each hash.
    #[test]
    fn the_nqn_transformation_matches_libnvme() {
        let cases = [
            (
                HashId::Sha256,
                32,
                "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:",
            ),
            (
                HashId::Sha384,
                48,
                "DHHC-1:02:m86TqA71bku/ilvuoXttWzkXCWKMX6uLFCsLmpLRRD1070FP4P2/5bNEpXf9jTOGI4TYkA==:",
            ),
            (
                HashId::Sha512,
                64,
                "DHHC-1:03:fKZUIWBl30vQU+qyQoI5SlPMyHWHYXOU1B79aUY4YpucrMsbl5A6cUVmK1QoZEqgjBRJjiGStVEXvVaz1scF3rXwqYQ=:",
            ),
        ];
        for (hash, len, printed) in cases {
            let from_cli = DhchapSecret::parse(printed).unwrap();
            assert_eq!(from_cli.transform_hash(), Some(hash));
            let ours = DhchapSecret::from_key(&counting(len), Some(hash)).unwrap();
            assert_eq!(
                &ours.transformed(HOSTNQN)[..],
                &from_cli.key[..],
                "{hash:?}: our transformation differs from libnvme's"
            );
            // Transforming for another NQN gives another key.
            assert_ne!(
                &ours.transformed("nqn.2024-01.io.pontoon:other")[..],
                &from_cli.key[..]
            );
        }
    }

    #[test]
    fn malformed_secrets_are_refused_with_the_reason() {
        let good = "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:";
        assert!(DhchapSecret::parse(good).is_ok());
        assert!(
            DhchapSecret::parse(good.trim_end_matches(':')).is_ok(),
            "the trailing colon is optional"
        );
        assert_eq!(
            DhchapSecret::parse("DHHC-2:01:Fm2C:"),
            Err(KeyError::Format)
        );
        assert_eq!(DhchapSecret::parse("DHHC-1:1:Fm2C:"), Err(KeyError::Format));
        assert_eq!(
            DhchapSecret::parse(&good.replace(":01:", ":04:")),
            Err(KeyError::Hash(4))
        );
        assert_eq!(
            DhchapSecret::parse("DHHC-1:01:not*base64:"),
            Err(KeyError::Base64)
        );
        // One character changed: the CRC catches it.
        assert_eq!(
            DhchapSecret::parse(&good.replace("Fm2C", "Fm2D")),
            Err(KeyError::Crc)
        );
        // 16 key bytes + CRC.
        let short = {
            let mut raw = vec![7u8; 16];
            raw.extend_from_slice(&crc32(&[7u8; 16]).to_le_bytes());
            format!("DHHC-1:00:{}:", STANDARD.encode(raw))
        };
        assert_eq!(DhchapSecret::parse(&short), Err(KeyError::Length(16)));
        assert_eq!(DhchapSecret::parse(&"A".repeat(500)), Err(KeyError::Format));
    }

    #[test]
    fn secrets_print_redacted_and_round_trip_through_expose() {
        let text = "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:";
        let k = DhchapSecret::parse(text).unwrap();
        assert_eq!(k.to_string(), "DHHC-1:01:<redacted>");
        assert!(!format!("{k:?}").contains("Fm2C"));
        assert_eq!(k.expose().as_str(), text);
        let g = DhchapSecret::generate(48, Some(HashId::Sha384)).unwrap();
        assert_eq!(DhchapSecret::parse(&g.expose()).unwrap(), g);
        assert_ne!(DhchapSecret::generate(48, None).unwrap(), g);
    }
}
