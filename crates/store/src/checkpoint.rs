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

/// Version 1: objects without snapshot state.
const MAGIC_V1: &[u8; 8] = b"PNTNCKPT";
/// Version 2: objects may carry a snapshot section (clones, holes, replay
/// mark) and removed snapshotted objects a tombstone, both flagged in the
/// run-count field's high bits, which version 1 never sets (runs are at
/// most 4096): a version 1 body decodes as version 2. Version 1 readers
/// reject the new magic instead of misreading the body.
const MAGIC_V2: &[u8; 8] = b"PNTNCKP2";
/// Run-count flag: a snapshot section follows the runs.
const RUNS_SNAP: u32 = 1 << 31;
/// Run-count flag: the object was removed; only its replay mark follows.
const RUNS_TOMBSTONE: u32 = 1 << 30;
const RUNS_MASK: u32 = RUNS_TOMBSTONE - 1;
/// Snapshot-section flag: the object has no head.
const SNAP_HEADLESS: u32 = 1;
/// Clone flag: the clone's view is whole.
const CLONE_COMPLETE: u32 = 1;
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
        e.bytes(MAGIC_V2);
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
        if b.len() < BLOCK_SIZE || (&b[..8] != MAGIC_V1 && &b[..8] != MAGIC_V2) {
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

    /// Upper bound of an object's encoded size (with a snapshot section
    /// whether or not it gets one).
    pub(crate) fn bound(meta: &ObjectMeta) -> usize {
        let snaps = meta.snaps.as_ref().map_or(0, |s| {
            s.clones
                .iter()
                .map(|c| 20 + 20 * c.entries.len())
                .sum::<usize>()
        });
        36 + meta.blocks.len() * 20 + 24 + 8 + snaps
    }

    /// True when an object of `bound` bytes may not fit in the chunk and
    /// draining would make room (else [`BodyEncoder::push`] grows it).
    pub(crate) fn needs_drain(&self, bound: usize) -> bool {
        self.pos + bound > self.chunk.len() && self.pos >= BLOCK_SIZE
    }

    fn make_room(&mut self, bound: usize) {
        if self.pos + bound > self.chunk.len() {
            let len = (self.pos + bound).div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
            let mut bigger = AlignedBuf::zeroed(len.max(CHUNK_BYTES));
            bigger[..self.pos].copy_from_slice(&self.chunk[..self.pos]);
            self.chunk = bigger;
        }
    }

    /// Encodes one object. `disk_ref` turns a location into its on-disk
    /// form. With `mark`, a snapshot section carries the journal position
    /// from which replay applies records to this object.
    pub(crate) fn push(
        &mut self,
        oid: &ObjectId,
        meta: &ObjectMeta,
        mark: Option<u64>,
        mut disk_ref: impl FnMut(Loc) -> u64,
    ) {
        self.make_room(Self::bound(meta));
        let start = self.pos;
        let mut e = Encoder::at(&mut self.chunk, self.pos);
        e.u64(oid.volume.0);
        e.u64(oid.index);
        e.u64(meta.version.epoch);
        e.u64(meta.version.seq);
        let nruns_at = e.pos();
        e.u32(0);
        let nruns = encode_runs(&mut e, &meta.blocks, &mut disk_ref);
        let flag = if let Some(mark) = mark {
            let empty = crate::snaps::SnapState::default();
            let s = meta.snaps.as_deref().unwrap_or(&empty);
            e.u64(mark);
            e.u64(s.seq);
            e.u32(if s.headless { SNAP_HEADLESS } else { 0 });
            e.u32(s.clones.len() as u32);
            for c in &s.clones {
                e.u64(c.id);
                e.u32(if c.complete { CLONE_COMPLETE } else { 0 });
                let blocks: Vec<BlockEntry> =
                    c.entries.iter().filter(|x| !x.is_hole()).copied().collect();
                e.u32(count_runs(&blocks, &mut disk_ref));
                encode_runs(&mut e, &blocks, &mut disk_ref);
                let hs: Vec<u32> = c
                    .entries
                    .iter()
                    .filter(|x| x.is_hole())
                    .map(|x| x.blk)
                    .collect();
                let mut runs: Vec<(u32, u32)> = Vec::new();
                for b in hs {
                    match runs.last_mut() {
                        Some((s, n)) if *s + *n == b => *n += 1,
                        _ => runs.push((b, 1)),
                    }
                }
                e.u32(runs.len() as u32);
                for (s, n) in runs {
                    e.u32(s);
                    e.u32(n);
                }
            }
            RUNS_SNAP
        } else {
            debug_assert!(meta.snaps.is_none(), "snapshot state needs a replay mark");
            0
        };
        self.pos = e.pos();
        self.chunk[nruns_at..nruns_at + 4].copy_from_slice(&(nruns | flag).to_le_bytes());
        self.crc = crc32c::crc32c_append(self.crc, &self.chunk[start..self.pos]);
        self.bytes += (self.pos - start) as u64;
        self.objects += 1;
    }

    /// Encodes that `oid` was removed; replay applies records from `mark`
    /// on to it.
    pub(crate) fn push_tombstone(&mut self, oid: &ObjectId, mark: u64) {
        self.make_room(44);
        let start = self.pos;
        let mut e = Encoder::at(&mut self.chunk, self.pos);
        e.u64(oid.volume.0);
        e.u64(oid.index);
        e.u64(0);
        e.u64(0);
        e.u32(RUNS_TOMBSTONE);
        e.u64(mark);
        self.pos = e.pos();
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
        debug_assert!(rest < BLOCK_SIZE);
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

/// How many runs [`encode_runs`] makes of `blocks`.
fn count_runs(blocks: &[BlockEntry], disk_ref: &mut impl FnMut(Loc) -> u64) -> u32 {
    let mut nruns = 0u32;
    let mut prev: Option<(u32, u64)> = None;
    for b in blocks {
        let r = disk_ref(b.loc());
        if prev.is_none_or(|(pb, pr)| pb + 1 != b.blk || pr + 1 != r) {
            nruns += 1;
        }
        prev = Some((b.blk, r));
    }
    nruns
}

/// Encodes `blocks` as runs (adjacent in the object and on disk); returns
/// the run count.
fn encode_runs(
    e: &mut Encoder<'_>,
    blocks: &[BlockEntry],
    disk_ref: &mut impl FnMut(Loc) -> u64,
) -> u32 {
    let mut nruns = 0u32;
    let mut i = 0;
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
    nruns
}

/// (block, crc, location) in ascending block order.
pub(crate) type DecodedBlocks = Vec<(u32, u32, DiskLoc)>;

/// One clone as decoded from a checkpoint body.
pub(crate) struct DecodedClone {
    pub id: u64,
    pub complete: bool,
    pub blocks: DecodedBlocks,
    /// Hole runs: (first block, count), ascending.
    pub holes: Vec<(u32, u32)>,
}

/// An object's snapshot section as decoded.
pub(crate) struct DecodedSnaps {
    pub mark: u64,
    pub seq: u64,
    pub headless: bool,
    pub clones: Vec<DecodedClone>,
}

/// One object as decoded from a checkpoint body.
pub(crate) struct DecodedObject {
    pub oid: ObjectId,
    pub version: Version,
    pub blocks: DecodedBlocks,
    pub snaps: Option<DecodedSnaps>,
    /// Removed: only `tombstone_mark` means anything.
    pub tombstone_mark: Option<u64>,
}

fn decode_runs(
    d: &mut Decoder<'_>,
    oid: ObjectId,
    nruns: u32,
    object_blocks: u32,
) -> Result<DecodedBlocks, String> {
    let trunc = |_| "checkpoint body truncated".to_string();
    let mut blocks = Vec::new();
    let mut next_min = 0u32;
    for _ in 0..nruns {
        let start = d.u32().map_err(trunc)?;
        let n = d.u32().map_err(trunc)?;
        let loc = d.u64().map_err(trunc)?;
        if n == 0 || start < next_min || start.checked_add(n).is_none_or(|e| e > object_blocks) {
            return Err(format!("object {oid}: bad block run {start}+{n}"));
        }
        next_min = start + n;
        for k in 0..n {
            let crc = d.u32().map_err(trunc)?;
            blocks.push((start + k, crc, decode_disk_loc(loc + k as u64)));
        }
    }
    Ok(blocks)
}

/// Decodes a checkpoint body (version 1 or 2), calling `each` per object.
/// Errors describe the first inconsistency found.
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
        let raw = d.u32().map_err(trunc)?;
        if raw & RUNS_TOMBSTONE != 0 {
            if raw != RUNS_TOMBSTONE {
                return Err(format!("object {oid}: malformed tombstone"));
            }
            let mark = d.u64().map_err(trunc)?;
            each(DecodedObject {
                oid,
                version,
                blocks: Vec::new(),
                snaps: None,
                tombstone_mark: Some(mark),
            })?;
            continue;
        }
        let blocks = decode_runs(&mut d, oid, raw & RUNS_MASK, object_blocks)?;
        let snaps = if raw & RUNS_SNAP != 0 {
            let mark = d.u64().map_err(trunc)?;
            let seq = d.u64().map_err(trunc)?;
            let flags = d.u32().map_err(trunc)?;
            let nclones = d.u32().map_err(trunc)?;
            if flags & !SNAP_HEADLESS != 0 || nclones as u64 > seq {
                return Err(format!("object {oid}: malformed snapshot section"));
            }
            let mut clones: Vec<DecodedClone> = Vec::new();
            for _ in 0..nclones {
                let id = d.u64().map_err(trunc)?;
                let cflags = d.u32().map_err(trunc)?;
                if cflags & !CLONE_COMPLETE != 0
                    || id == 0
                    || id > seq
                    || clones.last().is_some_and(|c| c.id >= id)
                {
                    return Err(format!("object {oid}: malformed clone {id}"));
                }
                let nruns = d.u32().map_err(trunc)?;
                let blocks = decode_runs(&mut d, oid, nruns, object_blocks)?;
                let nholes = d.u32().map_err(trunc)?;
                let mut holes: Vec<(u32, u32)> = Vec::new();
                for _ in 0..nholes {
                    let start = d.u32().map_err(trunc)?;
                    let n = d.u32().map_err(trunc)?;
                    let after_last = holes.last().map_or(0, |&(s, k)| s + k);
                    if n == 0
                        || start < after_last
                        || start.checked_add(n).is_none_or(|e| e > object_blocks)
                    {
                        return Err(format!(
                            "object {oid}: bad hole run {start}+{n} in clone {id}"
                        ));
                    }
                    holes.push((start, n));
                }
                clones.push(DecodedClone {
                    id,
                    complete: cflags & CLONE_COMPLETE != 0,
                    blocks,
                    holes,
                });
            }
            Some(DecodedSnaps {
                mark,
                seq,
                headless: flags & SNAP_HEADLESS != 0,
                clones,
            })
        } else {
            None
        };
        each(DecodedObject {
            oid,
            version,
            blocks,
            snaps,
            tombstone_mark: None,
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
            snaps: None,
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
        enc.push(&ObjectId::new(1, 2), &meta, None, map);
        enc.push(&ObjectId::new(1, 3), &ObjectMeta::default(), None, map);
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
    fn version_1_headers_still_load() {
        let h = CheckpointHeader {
            generation: 3,
            body_bytes: 10,
            ..Default::default()
        };
        let mut b = h.encode();
        assert_eq!(&b[..8], MAGIC_V2);
        b[..8].copy_from_slice(MAGIC_V1);
        let crc = crc_with_zeroed_field(&b, CRC_FIELD);
        b[CRC_FIELD..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(CheckpointHeader::decode(&b), Some(h));
        b[..8].copy_from_slice(b"PNTNCKP3");
        assert_eq!(CheckpointHeader::decode(&b), None);
    }

    /// A version 1 body (as the old encoder wrote it: no flags, no
    /// snapshot sections) decodes unchanged.
    #[test]
    fn version_1_bodies_decode() {
        let mut v1 = Vec::new();
        for x in [1u64, 2, 0, 5] {
            v1.extend_from_slice(&x.to_le_bytes());
        }
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&4u32.to_le_bytes());
        v1.extend_from_slice(&2u32.to_le_bytes());
        v1.extend_from_slice(&100u64.to_le_bytes());
        v1.extend_from_slice(&7u32.to_le_bytes());
        v1.extend_from_slice(&8u32.to_le_bytes());
        let mut seen = vec![];
        decode_body(&v1, 1, 64, |o| {
            assert!(o.snaps.is_none() && o.tombstone_mark.is_none());
            seen.push((o.oid, o.version, o.blocks));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![(
                ObjectId::new(1, 2),
                Version::new(0, 5),
                vec![(4, 7, DiskLoc::Data(100)), (5, 8, DiskLoc::Data(101))]
            )]
        );
    }

    #[test]
    fn snapshot_sections_and_tombstones_round_trip() {
        use crate::snaps::{CloneMeta, SnapState};
        let mut c1 = CloneMeta::new(3, false);
        c1.entries = vec![
            BlockEntry::hole(0),
            BlockEntry::hole(1),
            BlockEntry::new(2, 20, Loc::Data(7)),
            BlockEntry::new(3, 21, Loc::Data(8)),
            BlockEntry::hole(9),
        ];
        let mut c2 = CloneMeta::new(5, true);
        c2.entries = vec![BlockEntry::new(
            1,
            22,
            Loc::Journal {
                recno: 1,
                buf: 0,
                off: 3,
            },
        )];
        let meta = ObjectMeta {
            version: Version::new(4, 4),
            blocks: vec![BlockEntry::new(0, 1, Loc::Data(1))],
            snaps: Some(Box::new(SnapState {
                seq: 6,
                headless: false,
                clones: vec![c1, c2],
                clone_blocks: 3,
                holes: 3,
            })),
        };
        let mut enc = BodyEncoder::new();
        let map = |l: Loc| match l {
            Loc::Data(p) => p,
            Loc::Journal { off, .. } => disk_journal_ref(500, off),
        };
        enc.push(&ObjectId::new(9, 1), &meta, Some(77), map);
        enc.push_tombstone(&ObjectId::new(9, 2), 78);
        enc.push(&ObjectId::new(9, 3), &ObjectMeta::default(), None, map);
        let (body, n, bytes, _) = enc.finish();
        assert!(
            bytes as usize
                <= 44 + BodyEncoder::bound(&meta) + BodyEncoder::bound(&ObjectMeta::default())
        );
        let mut seen = vec![];
        decode_body(&body[..bytes as usize], n, 64, |o| {
            seen.push(o);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 3);
        let s = seen[0].snaps.as_ref().unwrap();
        assert_eq!((s.mark, s.seq, s.headless), (77, 6, false));
        assert_eq!(s.clones[0].id, 3);
        assert!(!s.clones[0].complete);
        assert_eq!(
            s.clones[0].blocks,
            vec![(2, 20, DiskLoc::Data(7)), (3, 21, DiskLoc::Data(8))]
        );
        assert_eq!(s.clones[0].holes, vec![(0, 2), (9, 1)]);
        assert!(s.clones[1].complete);
        assert_eq!(
            s.clones[1].blocks,
            vec![(1, 22, DiskLoc::Journal { lpos: 500, idx: 3 })]
        );
        assert_eq!(seen[1].tombstone_mark, Some(78));
        assert!(seen[2].snaps.is_none() && seen[2].tombstone_mark.is_none());
    }

    #[test]
    fn draining_keeps_the_stream_contiguous() {
        let mut enc = BodyEncoder::new();
        let meta = ObjectMeta {
            snaps: None,
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
            enc.push(&ObjectId::new(0, i), &meta, None, |l| match l {
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
