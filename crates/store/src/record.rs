//! Journal record format: one header (1..=8 blocks) of metadata entries,
//! followed by the data blocks written inline.
//!
//! A record is atomic: replay applies all of it or none. A write too large
//! for one record (recovery installing an object with many clones) goes as
//! a chain of records written together, each but the last flagged
//! [`FLAG_CONTINUED`]: replay applies a chain only if its last record is
//! there, so the chain is as atomic as one record. A record is valid only if
//! its header checksum matches, it sits at the logical position it names, it
//! chains to the previous record's header checksum, and every inline data
//! block matches its entry's checksum. The chain plus a per-open nonce means
//! that stale records left in the ring by an earlier life can never be taken
//! for the continuation of the current one.

use pontoon_buf::AlignedBuf;
use pontoon_types::{BLOCK_SIZE, ObjectId, Version};

use pontoon_types::codec::{Decoder, Encoder, Truncated, crc_with_zeroed_field};

/// Magic at the start of every record header ("PJRN").
const RECORD_MAGIC: u32 = 0x4e52_4a50;
/// Header flag: not a record, skip to the start of the ring.
pub(crate) const FLAG_WRAP: u32 = 1;
/// Header flag: the next record belongs to the same atomic write.
pub(crate) const FLAG_CONTINUED: u32 = 2;
/// Most header blocks a record may have.
pub(crate) const MAX_HEADER_BLOCKS: usize = 8;
/// Bytes before the first entry.
const FIXED_HEADER: usize = 40;
const CRC_FIELD: usize = 36;
/// Most entries a record may carry (bounded by the iovec count too).
pub(crate) const MAX_ENTRIES: usize = 512;

/// What an entry does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// Blocks written with their data inline in this record.
    WriteInline = 1,
    /// Blocks written elsewhere in the data area before this record.
    WriteRow = 2,
    /// Blocks deallocated.
    Discard = 3,
    /// The whole object removed.
    Delete = 4,
    /// The object exists (possibly empty) at this version; with a
    /// snapshot field, its snapshot sequence is set to it (recovery).
    Create = 5,
    /// Clone `snap` of the object is removed (snap trim).
    SnapTrim = 6,
    /// The object, head and clones, is removed and all its blocks freed.
    Purge = 7,
    /// Clone `snap` exists (complete if `start_blk` is 1): recovery
    /// installs clones this way before their blocks.
    CloneCreate = 8,
}

/// Entry flag: an 8-byte snapshot field follows the version.
const FLAG_SNAP: u8 = 1;
/// Entry flag: a raw change, outside the snapshot rules (recovery's
/// installs): with a snapshot field, writes and discards go to that clone.
const FLAG_RAW: u8 = 2;

/// One metadata change. For inline writes, the data is `nblk` blocks of
/// buffer `buf` starting at block `first`; on disk, buffers are laid out back
/// to back after the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub kind: EntryKind,
    pub oid: ObjectId,
    pub version: Version,
    pub start_blk: u32,
    pub nblk: u32,
    /// Inline: buffer index; row: unused.
    pub buf: u32,
    /// Inline: first block within the buffer; row: first data-area block.
    pub loc: u64,
    /// Index of this entry's first checksum in the record's checksum list.
    pub crc_off: u32,
    /// Snapshot sequence the change was issued under (0: none); for
    /// snap trims, clone creation and raw changes, the clone's id.
    pub snap: u64,
    /// Outside the snapshot rules (see [`EntryKind`]).
    pub raw: bool,
}

impl Entry {
    /// Encoded size in bytes.
    pub(crate) fn encoded_len(&self) -> usize {
        Self::encoded_len_of(self.kind, self.nblk, self.snap != 0)
    }

    /// Encoded size of an entry of `kind` covering `nblk` blocks, with or
    /// without a snapshot field.
    pub(crate) fn encoded_len_of(kind: EntryKind, nblk: u32, snap: bool) -> usize {
        36 + 8 * snap as usize
            + match kind {
                EntryKind::WriteInline | EntryKind::WriteRow => 16 + 4 * nblk as usize,
                EntryKind::Discard | EntryKind::CloneCreate => 8,
                EntryKind::Delete | EntryKind::Create | EntryKind::SnapTrim | EntryKind::Purge => 0,
            }
    }

    /// An entry of `kind` for `oid` with no range, data or snapshot.
    pub(crate) fn bare(kind: EntryKind, oid: ObjectId, version: Version) -> Self {
        Self {
            kind,
            oid,
            version,
            start_blk: 0,
            nblk: 0,
            buf: 0,
            loc: 0,
            crc_off: 0,
            snap: 0,
            raw: false,
        }
    }
}

/// The fixed fields of a record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHead {
    pub flags: u32,
    pub lpos: u64,
    pub prev_crc: u32,
    pub nonce: u32,
    pub header_blocks: u32,
    pub data_blocks: u32,
    pub n_entries: u32,
}

impl RecordHead {
    pub(crate) fn total_blocks(&self) -> u64 {
        self.header_blocks as u64 + self.data_blocks as u64
    }
}

/// Header blocks needed for entries whose encoded sizes sum to `bytes`.
pub(crate) fn header_blocks_for(bytes: usize) -> usize {
    (FIXED_HEADER + bytes).div_ceil(BLOCK_SIZE)
}

/// Largest sum of entry sizes one record can carry.
pub(crate) const MAX_ENTRY_BYTES: usize = MAX_HEADER_BLOCKS * BLOCK_SIZE - FIXED_HEADER;

/// Whether `entries` entries whose encoded sizes sum to `bytes` fit in one
/// record.
pub(crate) fn fits_one_record(entries: usize, bytes: usize) -> bool {
    entries <= MAX_ENTRIES && bytes <= MAX_ENTRY_BYTES
}

/// Where `entries`, in order, are cut into a chain of records (each as
/// full as it can be): the end index of each record's entries, and the
/// header blocks of the whole chain.
pub(crate) fn chain_cuts(entries: &[Entry]) -> (Vec<usize>, u64) {
    let mut cuts = Vec::new();
    let (mut n, mut bytes, mut header_blocks) = (0usize, 0usize, 0u64);
    for (i, e) in entries.iter().enumerate() {
        let len = e.encoded_len();
        if n > 0 && !fits_one_record(n + 1, bytes + len) {
            cuts.push(i);
            header_blocks += header_blocks_for(bytes) as u64;
            (n, bytes) = (0, 0);
        }
        n += 1;
        bytes += len;
    }
    if n > 0 {
        cuts.push(entries.len());
        header_blocks += header_blocks_for(bytes) as u64;
    }
    (cuts, header_blocks)
}

/// Encodes a record header. `buf_first[k]` is the record data block where
/// buffer `k` starts. Returns the header and its checksum.
pub(crate) fn encode(
    head: &RecordHead,
    entries: &[Entry],
    crcs: &[u32],
    buf_first: &[u32],
) -> (AlignedBuf, u32) {
    let len = head.header_blocks as usize * BLOCK_SIZE;
    let mut b = AlignedBuf::zeroed(len);
    let mut e = Encoder::new(&mut b);
    e.u32(RECORD_MAGIC);
    e.u32(head.flags);
    e.u64(head.lpos);
    e.u32(head.prev_crc);
    e.u32(head.nonce);
    e.u32(head.header_blocks);
    e.u32(head.data_blocks);
    e.u32(head.n_entries);
    e.u32(0);
    debug_assert_eq!(e.pos(), FIXED_HEADER);
    for en in entries {
        e.u8(en.kind as u8);
        let flags = if en.snap != 0 { FLAG_SNAP } else { 0 } | if en.raw { FLAG_RAW } else { 0 };
        e.bytes(&[flags, 0, 0]);
        e.u64(en.oid.volume.0);
        e.u64(en.oid.index);
        e.u64(en.version.epoch);
        e.u64(en.version.seq);
        if en.snap != 0 {
            e.u64(en.snap);
        }
        match en.kind {
            EntryKind::WriteInline | EntryKind::WriteRow => {
                e.u32(en.start_blk);
                e.u32(en.nblk);
                let loc = if en.kind == EntryKind::WriteInline {
                    buf_first[en.buf as usize] as u64 + en.loc
                } else {
                    en.loc
                };
                e.u64(loc);
                for c in &crcs[en.crc_off as usize..(en.crc_off + en.nblk) as usize] {
                    e.u32(*c);
                }
            }
            EntryKind::Discard | EntryKind::CloneCreate => {
                e.u32(en.start_blk);
                e.u32(en.nblk);
            }
            EntryKind::Delete | EntryKind::Create | EntryKind::SnapTrim | EntryKind::Purge => {}
        }
    }
    let crc = crc_with_zeroed_field(&b, CRC_FIELD);
    b[CRC_FIELD..CRC_FIELD + 4].copy_from_slice(&crc.to_le_bytes());
    (b, crc)
}

/// Why a block is not the record the reader expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalid {
    Magic,
    Position,
    Chain,
    Checksum,
    Malformed,
}

impl From<Truncated> for Invalid {
    fn from(_: Truncated) -> Self {
        Invalid::Malformed
    }
}

/// Decodes and checks the fixed part of a header from its first block.
pub(crate) fn decode_head(block: &[u8], lpos: u64, prev_crc: u32) -> Result<RecordHead, Invalid> {
    let mut d = Decoder::new(block);
    if d.u32()? != RECORD_MAGIC {
        return Err(Invalid::Magic);
    }
    let head = RecordHead {
        flags: d.u32()?,
        lpos: d.u64()?,
        prev_crc: d.u32()?,
        nonce: d.u32()?,
        header_blocks: d.u32()?,
        data_blocks: d.u32()?,
        n_entries: d.u32()?,
    };
    if head.lpos != lpos {
        return Err(Invalid::Position);
    }
    if head.prev_crc != prev_crc {
        return Err(Invalid::Chain);
    }
    if head.header_blocks == 0
        || head.header_blocks as usize > MAX_HEADER_BLOCKS
        || head.n_entries as usize > MAX_ENTRIES
    {
        return Err(Invalid::Malformed);
    }
    if head.flags & !(FLAG_WRAP | FLAG_CONTINUED) != 0
        || head.flags & FLAG_WRAP != 0
            && (head.flags & FLAG_CONTINUED != 0
                || head.data_blocks != 0
                || head.n_entries != 0
                || head.header_blocks != 1)
    {
        return Err(Invalid::Malformed);
    }
    Ok(head)
}

/// Checks a whole header's checksum and decodes its entries. Inline entries
/// come back with `buf = 0` and `loc` = their first record data block.
pub(crate) fn decode_entries(
    header: &[u8],
    head: &RecordHead,
    object_blocks: u32,
) -> Result<(u32, Vec<Entry>, Vec<u32>), Invalid> {
    let stored = u32::from_le_bytes([
        header[CRC_FIELD],
        header[CRC_FIELD + 1],
        header[CRC_FIELD + 2],
        header[CRC_FIELD + 3],
    ]);
    let crc = crc_with_zeroed_field(header, CRC_FIELD);
    if stored != crc {
        return Err(Invalid::Checksum);
    }
    let mut d = Decoder::new(&header[FIXED_HEADER..]);
    let mut entries = Vec::with_capacity(head.n_entries as usize);
    let mut crcs = Vec::new();
    for _ in 0..head.n_entries {
        let kind = match d.u8()? {
            1 => EntryKind::WriteInline,
            2 => EntryKind::WriteRow,
            3 => EntryKind::Discard,
            4 => EntryKind::Delete,
            5 => EntryKind::Create,
            6 => EntryKind::SnapTrim,
            7 => EntryKind::Purge,
            8 => EntryKind::CloneCreate,
            _ => return Err(Invalid::Malformed),
        };
        let pad = d.bytes(3)?;
        let flags = pad[0];
        if flags & !(FLAG_SNAP | FLAG_RAW) != 0 || pad[1] != 0 || pad[2] != 0 {
            return Err(Invalid::Malformed);
        }
        let oid = ObjectId::new(d.u64()?, d.u64()?);
        let version = Version::new(d.u64()?, d.u64()?);
        let snap = if flags & FLAG_SNAP != 0 { d.u64()? } else { 0 };
        if snap == 0
            && (flags & FLAG_SNAP != 0
                || matches!(kind, EntryKind::SnapTrim | EntryKind::CloneCreate))
        {
            return Err(Invalid::Malformed);
        }
        let mut en = Entry {
            kind,
            oid,
            version,
            start_blk: 0,
            nblk: 0,
            buf: 0,
            loc: 0,
            crc_off: crcs.len() as u32,
            snap,
            raw: flags & FLAG_RAW != 0,
        };
        match kind {
            EntryKind::WriteInline | EntryKind::WriteRow => {
                en.start_blk = d.u32()?;
                en.nblk = d.u32()?;
                en.loc = d.u64()?;
                if en.nblk == 0
                    || en
                        .start_blk
                        .checked_add(en.nblk)
                        .is_none_or(|e| e > object_blocks)
                {
                    return Err(Invalid::Malformed);
                }
                if kind == EntryKind::WriteInline
                    && en.loc + en.nblk as u64 > head.data_blocks as u64
                {
                    return Err(Invalid::Malformed);
                }
                for _ in 0..en.nblk {
                    crcs.push(d.u32()?);
                }
            }
            EntryKind::Discard => {
                en.start_blk = d.u32()?;
                en.nblk = d.u32()?;
                if en
                    .start_blk
                    .checked_add(en.nblk)
                    .is_none_or(|e| e > object_blocks)
                {
                    return Err(Invalid::Malformed);
                }
            }
            EntryKind::CloneCreate => {
                en.start_blk = d.u32()?;
                en.nblk = d.u32()?;
                if en.start_blk > 1 || en.nblk != 0 {
                    return Err(Invalid::Malformed);
                }
            }
            EntryKind::Delete | EntryKind::Create | EntryKind::SnapTrim | EntryKind::Purge => {}
        }
        entries.push(en);
    }
    Ok((crc, entries, crcs))
}

/// Checks inline data blocks against their entries' checksums.
pub(crate) fn verify_data(entries: &[Entry], crcs: &[u32], data: &[u8]) -> Result<(), Invalid> {
    for en in entries.iter().filter(|e| e.kind == EntryKind::WriteInline) {
        for i in 0..en.nblk as usize {
            let at = (en.loc as usize + i) * BLOCK_SIZE;
            let blk = data.get(at..at + BLOCK_SIZE).ok_or(Invalid::Malformed)?;
            if crc32c::crc32c(blk) != crcs[en.crc_off as usize + i] {
                return Err(Invalid::Checksum);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (RecordHead, Vec<Entry>, Vec<u32>) {
        let w = Entry {
            kind: EntryKind::WriteInline,
            oid: ObjectId::new(3, 9),
            version: Version::new(1, 7),
            start_blk: 5,
            nblk: 2,
            buf: 1,
            loc: 0,
            crc_off: 0,
            snap: 0,
            raw: false,
        };
        let r = Entry {
            kind: EntryKind::WriteRow,
            oid: ObjectId::new(3, 10),
            version: Version::new(1, 8),
            start_blk: 0,
            nblk: 1,
            buf: 0,
            loc: 777,
            crc_off: 2,
            snap: 9,
            raw: false,
        };
        let d = Entry {
            kind: EntryKind::Delete,
            oid: ObjectId::new(4, 1),
            version: Version::new(1, 9),
            start_blk: 0,
            nblk: 0,
            buf: 0,
            loc: 0,
            crc_off: 3,
            snap: 0,
            raw: true,
        };
        let entries = vec![w, r, d];
        let bytes: usize = entries.iter().map(Entry::encoded_len).sum();
        let head = RecordHead {
            flags: 0,
            lpos: 42,
            prev_crc: 0xdead_beef,
            nonce: 5,
            header_blocks: header_blocks_for(bytes) as u32,
            data_blocks: 3,
            n_entries: 3,
        };
        (head, entries, vec![11, 22, 33])
    }

    #[test]
    fn records_round_trip() {
        let (head, entries, crcs) = sample();
        let (b, crc) = encode(&head, &entries, &crcs, &[0, 1]);
        let h = decode_head(&b, 42, 0xdead_beef).unwrap();
        assert_eq!(h, head);
        let (c, de, dc) = decode_entries(&b, &h, 1024).unwrap();
        assert_eq!(c, crc);
        assert_eq!(dc, crcs);
        assert_eq!(de[0].loc, 1, "buffer 1 starts at data block 1");
        assert_eq!(
            de[1],
            Entry {
                crc_off: 2,
                ..entries[1]
            }
        );
        assert_eq!(de[2].kind, EntryKind::Delete);
    }

    #[test]
    fn wrong_position_chain_or_bits_are_rejected() {
        let (head, entries, crcs) = sample();
        let (mut b, _) = encode(&head, &entries, &crcs, &[0, 1]);
        assert_eq!(decode_head(&b, 43, 0xdead_beef), Err(Invalid::Position));
        assert_eq!(decode_head(&b, 42, 1), Err(Invalid::Chain));
        b[60] ^= 0x10;
        let h = decode_head(&b, 42, 0xdead_beef).unwrap();
        assert_eq!(decode_entries(&b, &h, 1024).unwrap_err(), Invalid::Checksum);
        assert_eq!(decode_head(&[0u8; 4096], 0, 0), Err(Invalid::Magic));
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 1u64;
        for _ in 0..2000 {
            let mut b = vec![0u8; 2 * BLOCK_SIZE];
            for x in b.iter_mut() {
                seed = pontoon_types::mix64(seed);
                *x = seed as u8;
            }
            b[..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
            b[8..16].copy_from_slice(&0u64.to_le_bytes());
            b[16..20].copy_from_slice(&0u32.to_le_bytes());
            if let Ok(h) = decode_head(&b, 0, 0) {
                let hb = (h.header_blocks as usize * BLOCK_SIZE).min(b.len());
                let _ = decode_entries(&b[..hb], &h, 1024);
            }
        }
    }
}
