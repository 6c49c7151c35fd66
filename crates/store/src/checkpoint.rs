//! Checkpoints: the whole object table written to one of two slots.
//!
//! A checkpoint is *fuzzy*: it is streamed while writes continue, so some
//! objects reflect journal records newer than its replay point. That is
//! safe because every journal entry is a blind, absolute assignment (set
//! these blocks, discard those, delete that object): replaying a record on a
//! state that already includes it changes nothing. Start-up loads the newest
//! valid slot and replays the journal from its replay point.
//!
//! Slot: `[header block][body...]`. The header carries the body's length and
//! checksum; a torn checkpoint fails its checksum and the older slot, whose
//! journal has not been trimmed yet, is used instead.

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, ObjectId, Version};

use crate::objects::{BlockEntry, Loc, ObjectMeta};
use pontoon_types::codec::{Decoder, Encoder, crc_with_zeroed_field};

const MAGIC: &[u8; 8] = b"PNTNCKPT";
const CRC_FIELD: usize = 4092;
/// Body bytes streamed per device write.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;
/// On-disk journal reference flag (same bit as in memory, different fields).
const DISK_JOURNAL_BIT: u64 = 1 << 63;
const DISK_IDX_BITS: u32 = 16;

/// Encodes a journal block reference as stored in a checkpoint.
pub(crate) fn disk_journal_ref(lpos: u64, data_idx: u32) -> u64 {
    debug_assert!(data_idx < 1 << DISK_IDX_BITS);
    DISK_JOURNAL_BIT | lpos << DISK_IDX_BITS | data_idx as u64
}

/// A checkpoint location as stored: a data block, or (record lpos, data index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DiskLoc {
    Data(u64),
    Journal { lpos: u64, idx: u32 },
}

fn decode_disk_loc(v: u64) -> DiskLoc {
    if v & DISK_JOURNAL_BIT == 0 {
        DiskLoc::Data(v)
    } else {
        DiskLoc::Journal {
            lpos: (v & !DISK_JOURNAL_BIT) >> DISK_IDX_BITS,
            idx: (v & ((1 << DISK_IDX_BITS) - 1)) as u32,
        }
    }
}

/// The header block of a checkpoint slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct CheckpointHeader {
    pub generation: u64,
    /// Journal position from which records must be re-applied.
    pub replay_lpos: u64,
    pub replay_prev_crc: u32,
    /// Oldest journal position still needed (for blocks not yet moved home).
    pub trim_lpos: u64,
    pub trim_prev_crc: u32,
    pub n_objects: u64,
    pub body_bytes: u64,
    pub body_crc: u32,
}

impl CheckpointHeader {
    pub(crate) fn encode(&self) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(BLOCK_SIZE);
        let mut e = Encoder::new(&mut b);
        e.bytes(MAGIC);
        e.u64(self.generation);
        e.u64(self.replay_lpos);
        e.u32(self.replay_prev_crc);
        e.u64(self.trim_lpos);
        e.u32(self.trim_prev_crc);
        e.u64(self.n_objects);
        e.u64(self.body_bytes);
        e.u32(self.body_crc);
        let crc = crc_with_zeroed_field(&b, CRC_FIELD);
        b[CRC_FIELD..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a header; `None` if it is not a valid checkpoint header.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < BLOCK_SIZE || &b[..8] != MAGIC {
            return None;
        }
        let stored = u32::from_le_bytes(b[CRC_FIELD..CRC_FIELD + 4].try_into().ok()?);
        if stored != crc_with_zeroed_field(&b[..BLOCK_SIZE], CRC_FIELD) {
            return None;
        }
        let mut d = Decoder::new(&b[8..]);
        Some(Self {
            generation: d.u64().ok()?,
            replay_lpos: d.u64().ok()?,
            replay_prev_crc: d.u32().ok()?,
            trim_lpos: d.u64().ok()?,
            trim_prev_crc: d.u32().ok()?,
            n_objects: d.u64().ok()?,
            body_bytes: d.u64().ok()?,
            body_crc: d.u32().ok()?,
        })
    }
}

/// Streams objects into 4 KiB-aligned chunks, checksumming as it goes.
pub(crate) struct BodyEncoder {
    chunk: AlignedBuf,
    pos: usize,
    crc: u32,
    bytes: u64,
    objects: u64,
}

impl BodyEncoder {
    pub(crate) fn new() -> Self {
        Self {
            chunk: AlignedBuf::zeroed(CHUNK_BYTES),
            pos: 0,
            crc: 0,
            bytes: 0,
            objects: 0,
        }
    }

    /// Upper bound of an object's encoded size.
    pub(crate) fn bound(meta: &ObjectMeta) -> usize {
        36 + meta.blocks.len() * 20
    }

    /// True when an object of `bound` bytes may not fit in the chunk.
    pub(crate) fn needs_drain(&self, bound: usize) -> bool {
        self.pos + bound > CHUNK_BYTES
    }

    /// Encodes one object. `disk_ref` turns a location into its on-disk form.
    pub(crate) fn push(
        &mut self,
        oid: &ObjectId,
        meta: &ObjectMeta,
        mut disk_ref: impl FnMut(Loc) -> u64,
    ) {
        debug_assert!(!self.needs_drain(Self::bound(meta)));
        let start = self.pos;
        let mut e = Encoder::at(&mut self.chunk, self.pos);
        e.u64(oid.volume.0);
        e.u64(oid.index);
        e.u64(meta.version.epoch);
        e.u64(meta.version.seq);
        let nruns_at = e.pos();
        e.u32(0);
        let mut nruns = 0u32;
        let mut i = 0;
        let blocks = &meta.blocks;
        while i < blocks.len() {
            let first = disk_ref(blocks[i].loc());
            let mut n = 1;
            while i + n < blocks.len()
                && blocks[i + n].blk == blocks[i].blk + n as u32
                && disk_ref(blocks[i + n].loc()) == first + n as u64
            {
                n += 1;
            }
            e.u32(blocks[i].blk);
            e.u32(n as u32);
            e.u64(first);
            for b in &blocks[i..i + n] {
                e.u32(b.crc);
            }
            nruns += 1;
            i += n;
        }
        self.pos = e.pos();
        self.chunk[nruns_at..nruns_at + 4].copy_from_slice(&nruns.to_le_bytes());
        self.crc = crc32c::crc32c_append(self.crc, &self.chunk[start..self.pos]);
        self.bytes += (self.pos - start) as u64;
        self.objects += 1;
    }

    /// Takes the whole blocks encoded so far (for writing), keeping the
    /// partial last block for the next chunk.
    pub(crate) fn drain_blocks(&mut self) -> AlignedBuf {
        let whole = self.pos / BLOCK_SIZE * BLOCK_SIZE;
        let rest = self.pos - whole;
        let mut next = AlignedBuf::zeroed(CHUNK_BYTES);
        next[..rest].copy_from_slice(&self.chunk[whole..self.pos]);
        let mut out = std::mem::replace(&mut self.chunk, next);
        out.set_len(whole);
        self.pos = rest;
        out
    }

    /// Ends the body: the last (zero-padded) blocks and the totals
    /// `(objects, body bytes, body crc)`.
    pub(crate) fn finish(mut self) -> (AlignedBuf, u64, u64, u32) {
        let len = self.pos.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
        self.chunk[self.pos..len].fill(0);
        self.chunk.set_len(len);
        (self.chunk, self.objects, self.bytes, self.crc)
    }
}

/// One object as decoded from a checkpoint body.
pub(crate) struct DecodedObject {
    pub oid: ObjectId,
    pub version: Version,
    /// (block, crc, location) in ascending block order.
    pub blocks: Vec<(u32, u32, DiskLoc)>,
}

/// Decodes a checkpoint body, calling `each` per object. Errors describe
/// the first inconsistency found.
pub(crate) fn decode_body(
    body: &[u8],
    n_objects: u64,
    object_blocks: u32,
    mut each: impl FnMut(DecodedObject) -> Result<(), String>,
) -> Result<(), String> {
    let mut d = Decoder::new(body);
    let trunc = |_| "checkpoint body truncated".to_string();
    for _ in 0..n_objects {
        let oid = ObjectId::new(d.u64().map_err(trunc)?, d.u64().map_err(trunc)?);
        let version = Version::new(d.u64().map_err(trunc)?, d.u64().map_err(trunc)?);
        let nruns = d.u32().map_err(trunc)?;
        let mut blocks = Vec::new();
        let mut next_min = 0u32;
        for _ in 0..nruns {
            let start = d.u32().map_err(trunc)?;
            let n = d.u32().map_err(trunc)?;
            let loc = d.u64().map_err(trunc)?;
            if n == 0 || start < next_min || start.checked_add(n).is_none_or(|e| e > object_blocks)
            {
                return Err(format!("object {oid}: bad block run {start}+{n}"));
            }
            next_min = start + n;
            for k in 0..n {
                let crc = d.u32().map_err(trunc)?;
                blocks.push((start + k, crc, decode_disk_loc(loc + k as u64)));
            }
        }
        each(DecodedObject {
            oid,
            version,
            blocks,
        })?;
    }
    if d.pos() as u64 != body.len() as u64 {
        return Err("checkpoint body has trailing bytes".into());
    }
    Ok(())
}

/// Builds a block entry (used when loading).
pub(crate) fn entry(blk: u32, crc: u32, loc: Loc) -> BlockEntry {
    BlockEntry::new(blk, crc, loc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_detects_damage() {
        let h = CheckpointHeader {
            generation: 7,
            replay_lpos: 100,
            replay_prev_crc: 3,
            trim_lpos: 90,
            trim_prev_crc: 4,
            n_objects: 2,
            body_bytes: 5000,
            body_crc: 99,
        };
        let mut b = h.encode();
        assert_eq!(CheckpointHeader::decode(&b), Some(h));
        b[20] ^= 4;
        assert_eq!(CheckpointHeader::decode(&b), None);
    }

    #[test]
    fn body_round_trips_with_runs_and_journal_refs() {
        let mut meta = ObjectMeta {
            version: Version::new(2, 3),
            blocks: vec![],
        };
        meta.blocks.push(BlockEntry::new(0, 10, Loc::Data(50)));
        meta.blocks.push(BlockEntry::new(1, 11, Loc::Data(51)));
        meta.blocks.push(BlockEntry::new(2, 12, Loc::Data(90)));
        meta.blocks.push(BlockEntry::new(
            7,
            13,
            Loc::Journal {
                recno: 4,
                buf: 0,
                off: 2,
            },
        ));
        let mut enc = BodyEncoder::new();
        let map = |l: Loc| match l {
            Loc::Data(p) => p,
            Loc::Journal { off, .. } => disk_journal_ref(1000, off),
        };
        enc.push(&ObjectId::new(1, 2), &meta, map);
        enc.push(&ObjectId::new(1, 3), &ObjectMeta::default(), map);
        let (body, n, bytes, crc) = enc.finish();
        assert_eq!(n, 2);
        assert_eq!(crc, crc32c::crc32c(&body[..bytes as usize]));
        let mut seen = vec![];
        decode_body(&body[..bytes as usize], n, 1024, |o| {
            seen.push((o.oid, o.version, o.blocks));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen[0].2[1], (1, 11, DiskLoc::Data(51)));
        assert_eq!(seen[0].2[2], (2, 12, DiskLoc::Data(90)));
        assert_eq!(
            seen[0].2[3],
            (7, 13, DiskLoc::Journal { lpos: 1000, idx: 2 })
        );
        assert!(seen[1].2.is_empty());
    }

    #[test]
    fn draining_keeps_the_stream_contiguous() {
        let mut enc = BodyEncoder::new();
        let meta = ObjectMeta {
            version: Version::new(1, 1),
            blocks: (0..1000)
                .map(|i| BlockEntry::new(i, i, Loc::Data(i as u64 * 2)))
                .collect(),
        };
        let mut stream = vec![];
        for i in 0..200 {
            if enc.needs_drain(BodyEncoder::bound(&meta)) {
                stream.extend_from_slice(&enc.drain_blocks());
            }
            enc.push(&ObjectId::new(0, i), &meta, |l| match l {
                Loc::Data(p) => p,
                _ => unreachable!(),
            });
        }
        let (last, n, bytes, crc) = enc.finish();
        stream.extend_from_slice(&last);
        assert_eq!(crc32c::crc32c(&stream[..bytes as usize]), crc);
        let mut count = 0;
        decode_body(&stream[..bytes as usize], n, 1024, |o| {
            assert_eq!(o.blocks.len(), 1000);
            count += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(count, 200);
    }
}
