//! Frame protection after the handshake, per direction of a connection.
//!
//! Both protected modes compute the same thing: AES-256-GCM under the
//! direction's session key, nonce = (frame sequence number, part), over two
//! parts of every frame:
//! - part 0: additional data = the 24-byte header, text = the message fields;
//! - part 1 (frames with data only): text = the data.
//!
//! The two 16-byte tags follow the header on the wire
//! (`header | tag0 | tag1? | fields | data`). In **secure** mode the fields
//! and data travel encrypted; the header stays readable (it says only the
//! message type, the request id and the lengths) and is authenticated. In
//! **authenticated** mode the fields and data travel in the clear; a small
//! part's tag (header and fields) is a GMAC, AES-256-GCM's tag of an empty
//! text with the header and fields together as associated data (the header
//! is fixed-size, so the concatenation is unambiguous), and a large part's
//! (data) is the tag encrypting it would have given, computed in scratch
//! space. The receiver computes the same and compares in constant time:
//! GCM's own integrity under a never-repeated nonce.
//!
//! The sequence number is never sent: each side counts the frames it sends
//! and receives, so a frame replayed, reordered, dropped or moved to
//! another connection fails its check, and the connection closes. Each
//! direction has its own key, so the two counters never share a nonce.
//!
//! Buffers are protected in place: the data a receiver reads into its
//! aligned buffer is decrypted there, owned send buffers are encrypted
//! there. Only data shared with other connections (one write sent to
//! several replicas) is copied, into a pooled aligned buffer, before being
//! encrypted, since each connection has its own key. Scratch space for
//! authenticated mode comes from the stack for small parts and from the
//! aligned-buffer pool otherwise: nothing goes to the allocator per frame.

use pontoon_buf::AlignedBuf;
use pontoon_proto::HEADER_LEN;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::auth::{KEY_LEN, WireMode};

/// Bytes of one tag.
pub(crate) const TAG_LEN: usize = 16;
/// Header and fields up to this size are tagged through a stack buffer in
/// authenticated mode.
const STACK_SCRATCH: usize = 512;

/// Bytes of tags that follow the header of a frame with `data_len` bytes
/// of data, in a protected mode.
pub(crate) fn tags_len(data_len: u32) -> usize {
    if data_len > 0 { 2 * TAG_LEN } else { TAG_LEN }
}

/// Why a frame could not be protected or opened (no detail: it is either
/// intact or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rejected;

/// One direction's AES-256-GCM key and frame counter.
pub(crate) struct Protect {
    key: LessSafeKey,
    /// Encrypt (secure) or only tag (authenticated).
    encrypt: bool,
    /// Sequence number of the next frame.
    seq: u64,
}

impl std::fmt::Debug for Protect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protect")
            .field("encrypt", &self.encrypt)
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

fn nonce(seq: u64, part: u32) -> Nonce {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&part.to_le_bytes());
    n[4..].copy_from_slice(&seq.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// Compares in time independent of where the slices differ.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Protect {
    /// A direction in `mode` (authenticated or secure) with `key`.
    pub(crate) fn new(mode: WireMode, key: &[u8; KEY_LEN]) -> Option<Self> {
        let encrypt = match mode {
            WireMode::None => return None,
            WireMode::Authenticated => false,
            WireMode::Secure => true,
        };
        let key = UnboundKey::new(&AES_256_GCM, key).ok()?;
        Some(Self {
            key: LessSafeKey::new(key),
            encrypt,
            seq: 0,
        })
    }

    /// Takes the next sequence number.
    fn next(&mut self) -> Result<u64, Rejected> {
        let seq = self.seq;
        // 2^64 frames never happen; refuse rather than reuse a nonce.
        self.seq = seq.checked_add(1).ok_or(Rejected)?;
        Ok(seq)
    }

    /// Authenticated mode's tag of `aad` and `text` (neither modified).
    /// Small parts (a header and its fields, up to [`STACK_SCRATCH`]
    /// bytes): GMAC, the GCM tag of an empty text with `aad || text` as
    /// associated data, from one stack copy. Larger ones (data): the tag
    /// encrypting `text` would give, computed in a pooled scratch buffer,
    /// since ring's stitched AES-GCM is faster over 4 KiB than its GHASH
    /// of associated data alone. Either way one nonce, one tag.
    fn tag_of(&self, n: Nonce, aad: &[u8], text: &[u8]) -> Result<Tag, Rejected> {
        let len = aad.len() + text.len();
        if len <= STACK_SCRATCH {
            let mut scratch = [0u8; STACK_SCRATCH];
            scratch[..aad.len()].copy_from_slice(aad);
            scratch[aad.len()..len].copy_from_slice(text);
            self.key
                .seal_in_place_separate_tag(n, Aad::from(&scratch[..len]), &mut [])
                .map_err(|_| Rejected)
        } else {
            let mut scratch = AlignedBuf::copy_from(text);
            self.key
                .seal_in_place_separate_tag(n, Aad::from(aad), &mut scratch)
                .map_err(|_| Rejected)
        }
    }

    /// Protects one part: encrypts `text` in place (secure) or leaves it
    /// (authenticated); returns its tag.
    fn seal_part(&self, seq: u64, part: u32, aad: &[u8], text: &mut [u8]) -> Result<Tag, Rejected> {
        if self.encrypt {
            self.key
                .seal_in_place_separate_tag(nonce(seq, part), Aad::from(aad), text)
                .map_err(|_| Rejected)
        } else {
            self.tag_of(nonce(seq, part), aad, text)
        }
    }

    /// Checks one part against `tag` and decrypts it in place (secure).
    fn open_part(
        &self,
        seq: u64,
        part: u32,
        aad: &[u8],
        tag: &[u8],
        text: &mut [u8],
    ) -> Result<(), Rejected> {
        let tag: [u8; TAG_LEN] = tag.try_into().map_err(|_| Rejected)?;
        if self.encrypt {
            self.key
                .open_in_place_separate_tag(
                    nonce(seq, part),
                    Aad::from(aad),
                    Tag::from(tag),
                    text,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| Rejected)
        } else {
            let want = self.tag_of(nonce(seq, part), aad, text)?;
            if ct_eq(want.as_ref(), &tag) {
                Ok(())
            } else {
                Err(Rejected)
            }
        }
    }

    /// Protects the next frame sent. `head` is `header | room for the
    /// tags | fields | inline data`; the data, if not inline, is `data`
    /// (a shared buffer is replaced by an encrypted copy in secure mode).
    pub(crate) fn seal_frame(
        &mut self,
        head: &mut [u8],
        data: Option<&mut crate::wire::OutBuf>,
    ) -> Result<(), Rejected> {
        let (hdr, rest) = head.split_at_mut_checked(HEADER_LEN).ok_or(Rejected)?;
        let meta_len = u32::from_le_bytes([hdr[16], hdr[17], hdr[18], hdr[19]]) as usize;
        let data_len = u32::from_le_bytes([hdr[20], hdr[21], hdr[22], hdr[23]]);
        let tl = tags_len(data_len);
        let (tags, body) = rest.split_at_mut_checked(tl).ok_or(Rejected)?;
        let (meta, inline) = body.split_at_mut_checked(meta_len).ok_or(Rejected)?;
        let seq = self.next()?;
        let t0 = self.seal_part(seq, 0, hdr, meta)?;
        tags[..TAG_LEN].copy_from_slice(t0.as_ref());
        if data_len == 0 {
            return if inline.is_empty() && data.is_none() {
                Ok(())
            } else {
                Err(Rejected)
            };
        }
        let t1 = match data {
            None if inline.len() == data_len as usize => self.seal_part(seq, 1, &[], inline)?,
            Some(out) if inline.is_empty() && out.len() == data_len as usize => {
                if self.encrypt {
                    let buf = out.make_mut();
                    self.seal_part(seq, 1, &[], buf)?
                } else {
                    self.tag_of(nonce(seq, 1), &[], out.bytes())?
                }
            }
            _ => return Err(Rejected),
        };
        tags[TAG_LEN..].copy_from_slice(t1.as_ref());
        Ok(())
    }

    /// Checks (and in secure mode decrypts, in place) the next frame
    /// received: its raw header, the tags that followed it, its fields and
    /// its data.
    pub(crate) fn open_frame(
        &mut self,
        hdr: &[u8; HEADER_LEN],
        tags: &[u8],
        meta: &mut [u8],
        data: Option<&mut [u8]>,
    ) -> Result<(), Rejected> {
        let seq = self.next()?;
        if tags.len() != tags_len(data.as_ref().map_or(0, |d| d.len() as u32)) {
            return Err(Rejected);
        }
        self.open_part(seq, 0, hdr, &tags[..TAG_LEN], meta)?;
        if let Some(d) = data {
            self.open_part(seq, 1, &[], &tags[TAG_LEN..], d)?;
        }
        Ok(())
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

    /// The GCM spec's test case 16 (AES-256, 60-byte text, 20 bytes of
    /// additional data, 96-bit IV): the primitive both modes stand on.
    #[test]
    fn aes_256_gcm_matches_the_gcm_specification_test_case_16() {
        let key = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
        let iv = hex("cafebabefacedbaddecaf888");
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let plain = hex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
             1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        );
        let cipher = hex(
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
             8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
        );
        let tag = hex("76fc6ece0f4e1768cddf8853bb2d551b");
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap());
        let n = || Nonce::try_assume_unique_for_key(&iv).unwrap();
        let mut buf = plain.clone();
        let t = k
            .seal_in_place_separate_tag(n(), Aad::from(&aad), &mut buf)
            .unwrap();
        assert_eq!(buf, cipher);
        assert_eq!(t.as_ref(), &tag[..]);
        // Authenticated mode: a small part's tag is GCM's over an empty
        // text with aad || text as associated data (GMAC); a large part's
        // is the tag encrypting it gives.
        let p = Protect {
            key: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap()),
            encrypt: false,
            seq: 0,
        };
        let all: Vec<u8> = aad.iter().chain(&plain).copied().collect();
        let gmac = k
            .seal_in_place_separate_tag(n(), Aad::from(&all), &mut [])
            .unwrap();
        assert_eq!(p.tag_of(n(), &aad, &plain).unwrap().as_ref(), gmac.as_ref());
        assert_ne!(gmac.as_ref(), &tag[..]);
        let long: Vec<u8> = plain.iter().cycle().take(3000).copied().collect();
        let mut enc = long.clone();
        let t_long = k
            .seal_in_place_separate_tag(n(), Aad::from(&aad), &mut enc)
            .unwrap();
        assert_eq!(
            p.tag_of(n(), &aad, &long).unwrap().as_ref(),
            t_long.as_ref()
        );
    }

    #[test]
    fn nonces_differ_by_part_and_sequence() {
        let a = nonce(1, 0);
        let b = nonce(1, 1);
        let c = nonce(2, 0);
        assert_ne!(a.as_ref(), b.as_ref());
        assert_ne!(a.as_ref(), c.as_ref());
        assert_eq!(
            nonce(0x0102, 1).as_ref(),
            &[1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn constant_time_compare_is_a_compare() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}

#[cfg(test)]
mod cost {
    use std::time::Instant;

    use pontoon_proto::{Message, ReadReq, Target, WriteReq};
    use pontoon_types::{Epoch, ObjectId, PgId};

    use super::*;
    use crate::wire::{OutData, encode_frame};

    fn target() -> Target {
        Target {
            pg: PgId::new(1, 1),
            epoch: Epoch(1),
            oid: ObjectId::new(1, 1),
        }
    }

    /// CPU cost of protecting and checking one 4 KiB write frame and one
    /// data-less read request, per mode, without sockets:
    /// `cargo test --release -p pontoon-net --lib cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn seal_and_open_cost_per_frame() {
        let n = 100_000;
        let data = AlignedBuf::copy_from(&[7u8; 4096]);
        let write = Message::Write(WriteReq {
            target: target(),
            offset: 0,
            data_crc: 0,
            fua: false,
            fill: false,
            snap_seq: 0,
        });
        let read = Message::Read(ReadReq {
            target: target(),
            offset: 0,
            len: 4096,
            snap: None,
        });
        for mode in [WireMode::None, WireMode::Authenticated, WireMode::Secure] {
            for (name, msg, with_data) in
                [("4 KiB write", &write, true), ("read req", &read, false)]
            {
                let mut tx = Protect::new(mode, &[1; 32]);
                let mut rx = Protect::new(mode, &[1; 32]);
                let t = Instant::now();
                for _ in 0..n {
                    let d = with_data.then(|| OutData::Owned(AlignedBuf::copy_from(&data)));
                    let mut f = encode_frame(1, msg, d, tx.is_some()).unwrap();
                    if let (Some(tx), Some(rx)) = (tx.as_mut(), rx.as_mut()) {
                        tx.seal_frame(&mut f.head, f.data.as_mut()).unwrap();
                        let hdr: [u8; HEADER_LEN] = f.head[..HEADER_LEN].try_into().unwrap();
                        let tl = tags_len(if with_data { 4096 } else { 0 });
                        let tags = f.head[HEADER_LEN..HEADER_LEN + tl].to_vec();
                        let mut meta = f.head[HEADER_LEN + tl..].to_vec();
                        let mut d = f.data.take().map(|d| AlignedBuf::copy_from(d.bytes()));
                        rx.open_frame(&hdr, &tags, &mut meta, d.as_deref_mut())
                            .unwrap();
                    }
                    std::hint::black_box(&f);
                }
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                println!("{mode:>14} {name:<12} {ns:8.0} ns per frame (encode + seal + open)");
            }
        }
    }
}
