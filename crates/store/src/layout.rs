//! On-device layout: the device header and where each slice keeps its
//! checkpoints, journal and data.
//!
//! ```text
//! data device:    [header][slice 0][slice 1]...
//!   slice:        [checkpoint A][checkpoint B][journal (unless external)][data area]
//! journal device: [header][slice 0 journal][slice 1 journal]...
//! ```
//!
//! Each checkpoint slot is sized for the worst case (every data block in its
//! own object, no two contiguous), so metadata can never run out of room
//! before data does. One header block describes everything; every slice's
//! layout is computed from it, so slices share nothing on disk but that
//! read-only block.

use pontoon_types::{BLOCK_SIZE, BLOCK_SIZE_U64};

use crate::error::{Result, StoreError};
use pontoon_types::codec::{Decoder, Encoder, crc_with_zeroed_field};

/// The first 8 bytes of every Pontoon device.
pub const DEVICE_MAGIC: &[u8; 8] = b"PNTNSTOR";
/// Version 1. The OSD identity was appended to it later: headers written
/// before hold zeros there, which read as "no identity", so old devices
/// still open (and get an identity recorded on their next start with an id).
const FORMAT_VERSION: u32 = 1;
/// Longest cluster name an identity records (the cluster's own limit).
pub const MAX_IDENTITY_NAME: usize = 128;
const CRC_FIELD: usize = 4092;

/// Bytes a checkpoint needs per object header (oid, version, run count).
pub(crate) const CKPT_OBJECT_BYTES: u64 = 36;
/// Bytes a checkpoint needs per block in the worst case (its own run + crc).
pub(crate) const CKPT_BLOCK_BYTES: u64 = 20;
/// Smallest journal per slice: room for several maximal records.
pub const MIN_JOURNAL_BLOCKS: u64 = 4096;
/// Largest default journal per slice (1 GiB).
const MAX_DEFAULT_JOURNAL_BLOCKS: u64 = 262_144;
/// Largest object the store accepts (the block offset field has 12 bits).
pub const MAX_OBJECT_SIZE: u64 = 16 << 20;

/// Which role a device plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRole {
    /// Holds checkpoints, data and (unless external) the journal.
    Data = 0,
    /// Holds only journals (the write-buffer tier).
    Journal = 1,
}

/// How to lay out a new store.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// Independent slices (one per shard).
    pub slices: u32,
    /// Journal blocks per slice; `None` picks 1/16 of the slice, within bounds.
    pub journal_blocks: Option<u64>,
    /// Largest object in bytes (a multiple of 4 KiB, at most 16 MiB).
    pub object_size: u64,
}

impl Default for FormatOptions {
    fn default() -> Self {
        Self {
            slices: 1,
            journal_blocks: None,
            object_size: 4 << 20,
        }
    }
}

/// Which OSD of which cluster a data device belongs to, recorded in its
/// header when it is formatted for a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsdIdentity {
    /// The cluster's fsid.
    pub cluster_fsid: u128,
    /// The cluster's name when the device was formatted (for messages;
    /// the fsid is what is compared). At most [`MAX_IDENTITY_NAME`] bytes.
    pub cluster_name: String,
    /// The OSD's id.
    pub osd: u32,
}

/// The header at block 0 of every Pontoon device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceHeader {
    /// Random identity of this device's store.
    pub uuid: u128,
    /// Data or journal device.
    pub role: DeviceRole,
    /// Number of slices.
    pub slices: u32,
    /// Blocks per slice region on this device.
    pub slice_blocks: u64,
    /// Journal blocks per slice.
    pub journal_blocks: u64,
    /// Whether the journal lives on a separate device.
    pub journal_external: bool,
    /// For a data device with an external journal: the journal device's uuid.
    /// For a journal device: the data device's uuid.
    pub peer_uuid: u128,
    /// Largest object in bytes.
    pub object_size: u64,
    /// The cluster and OSD a data device was formatted for; `None` for a
    /// device formatted outside a cluster or before identities existed.
    pub identity: Option<OsdIdentity>,
}

impl DeviceHeader {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        let mut e = Encoder::new(&mut b);
        e.bytes(DEVICE_MAGIC);
        e.u32(FORMAT_VERSION);
        e.u32(self.role as u32);
        e.u128(self.uuid);
        e.u32(self.slices);
        e.u64(self.slice_blocks);
        e.u64(self.journal_blocks);
        e.u8(self.journal_external as u8);
        e.u128(self.peer_uuid);
        e.u64(self.object_size);
        match &self.identity {
            None => e.u8(0),
            Some(id) => {
                let mut n = id.cluster_name.len().min(MAX_IDENTITY_NAME);
                while !id.cluster_name.is_char_boundary(n) {
                    n -= 1;
                }
                let name = &id.cluster_name.as_bytes()[..n];
                e.u8(1);
                e.u128(id.cluster_fsid);
                e.u32(id.osd);
                e.u8(name.len() as u8);
                e.bytes(name);
            }
        }
        let crc = crc_with_zeroed_field(&b, CRC_FIELD);
        b[CRC_FIELD..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Self> {
        let bad = |why: &str| StoreError::NotFormatted(why.to_string());
        if b.len() < BLOCK_SIZE || &b[..8] != DEVICE_MAGIC {
            return Err(bad(
                "no Pontoon header at block 0 (run `pontoon format` or use a new file)",
            ));
        }
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&b[CRC_FIELD..CRC_FIELD + 4]);
        if u32::from_le_bytes(crc) != crc_with_zeroed_field(&b[..BLOCK_SIZE], CRC_FIELD) {
            return Err(StoreError::Corrupt(
                "device header checksum mismatch".into(),
            ));
        }
        let mut d = Decoder::new(&b[8..]);
        let trunc = |_| StoreError::Corrupt("device header truncated".into());
        let version = d.u32().map_err(trunc)?;
        if version != FORMAT_VERSION {
            return Err(bad(&format!("unsupported format version {version}")));
        }
        let role = match d.u32().map_err(trunc)? {
            0 => DeviceRole::Data,
            1 => DeviceRole::Journal,
            r => return Err(StoreError::Corrupt(format!("unknown device role {r}"))),
        };
        let h = DeviceHeader {
            uuid: d.u128().map_err(trunc)?,
            role,
            slices: d.u32().map_err(trunc)?,
            slice_blocks: d.u64().map_err(trunc)?,
            journal_blocks: d.u64().map_err(trunc)?,
            journal_external: d.u8().map_err(trunc)? != 0,
            peer_uuid: d.u128().map_err(trunc)?,
            object_size: d.u64().map_err(trunc)?,
            identity: match d.u8().map_err(trunc)? {
                0 => None,
                1 => {
                    let cluster_fsid = d.u128().map_err(trunc)?;
                    let osd = d.u32().map_err(trunc)?;
                    let len = usize::from(d.u8().map_err(trunc)?);
                    if len > MAX_IDENTITY_NAME {
                        return Err(StoreError::Corrupt(format!(
                            "device header names a cluster of {len} bytes"
                        )));
                    }
                    let name = std::str::from_utf8(d.bytes(len).map_err(trunc)?).map_err(|_| {
                        StoreError::Corrupt("device header: cluster name is not UTF-8".into())
                    })?;
                    Some(OsdIdentity {
                        cluster_fsid,
                        cluster_name: name.to_string(),
                        osd,
                    })
                }
                f => {
                    return Err(StoreError::Corrupt(format!(
                        "device header: unknown identity flag {f}"
                    )));
                }
            },
        };
        if h.slices == 0
            || h.object_size == 0
            || !h.object_size.is_multiple_of(BLOCK_SIZE_U64)
            || h.object_size > MAX_OBJECT_SIZE
        {
            return Err(StoreError::Corrupt(format!(
                "implausible device header {h:?}"
            )));
        }
        Ok(h)
    }
}

/// Where one slice keeps its structures, in absolute device blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceLayout {
    /// Slice index.
    pub slice: u32,
    /// First block of checkpoint slot A (slot B follows it).
    pub ckpt_start: u64,
    /// Blocks per checkpoint slot.
    pub ckpt_slot_blocks: u64,
    /// First journal block (on the journal device when external).
    pub journal_start: u64,
    /// Journal blocks.
    pub journal_blocks: u64,
    /// First data block.
    pub data_start: u64,
    /// Data blocks.
    pub data_blocks: u64,
    /// Largest object in blocks.
    pub object_blocks: u32,
    /// Whether the journal is on its own device.
    pub journal_external: bool,
}

impl SliceLayout {
    /// Computes slice `slice`'s layout from the data device header.
    pub fn compute(h: &DeviceHeader, slice: u32) -> Result<Self> {
        if slice >= h.slices {
            return Err(StoreError::InvalidArgument(format!(
                "slice {slice} does not exist (device has {} slices)",
                h.slices
            )));
        }
        let region = 1 + slice as u64 * h.slice_blocks;
        let inline_journal = if h.journal_external {
            0
        } else {
            h.journal_blocks
        };
        let (data_blocks, slot) = split_data_and_checkpoints(h.slice_blocks - inline_journal)
            .ok_or_else(|| StoreError::Corrupt("slice too small for its journal".into()))?;
        let journal_start = if h.journal_external {
            1 + slice as u64 * h.journal_blocks
        } else {
            region + 2 * slot
        };
        Ok(Self {
            slice,
            ckpt_start: region,
            ckpt_slot_blocks: slot,
            journal_start,
            journal_blocks: h.journal_blocks,
            data_start: region + 2 * slot + inline_journal,
            data_blocks,
            object_blocks: (h.object_size / BLOCK_SIZE_U64) as u32,
            journal_external: h.journal_external,
        })
    }
}

/// Splits `avail` blocks into (data blocks, blocks per checkpoint slot) so
/// that two worst-case checkpoints of the data area fit beside it.
fn split_data_and_checkpoints(avail: u64) -> Option<(u64, u64)> {
    let slot_for =
        |data: u64| (data * (CKPT_OBJECT_BYTES + CKPT_BLOCK_BYTES)).div_ceil(BLOCK_SIZE_U64) + 1;
    let per_block = BLOCK_SIZE_U64 + 2 * (CKPT_OBJECT_BYTES + CKPT_BLOCK_BYTES);
    let mut data = (avail.checked_sub(4)? * BLOCK_SIZE_U64) / per_block;
    while data > 0 && data + 2 * slot_for(data) > avail {
        data -= 1;
    }
    (data > 0).then(|| (data, slot_for(data)))
}

/// Chooses the layout for formatting: returns the data device header and,
/// when a journal device is given, its header.
pub(crate) fn plan(
    data_size: u64,
    journal_size: Option<u64>,
    opts: &FormatOptions,
) -> Result<(DeviceHeader, Option<DeviceHeader>)> {
    let inval = |s: String| Err(StoreError::InvalidArgument(s));
    if opts.slices == 0 || opts.slices > 256 {
        return inval(format!("slices must be 1..=256, not {}", opts.slices));
    }
    if opts.object_size == 0
        || !opts.object_size.is_multiple_of(BLOCK_SIZE_U64)
        || opts.object_size > MAX_OBJECT_SIZE
    {
        return inval(format!(
            "object size must be a multiple of 4 KiB up to 16 MiB, not {}",
            opts.object_size
        ));
    }
    let data_blocks = data_size / BLOCK_SIZE_U64;
    let slice_blocks = data_blocks.saturating_sub(1) / opts.slices as u64;
    let journal_blocks = match (opts.journal_blocks, journal_size) {
        (Some(j), _) => j,
        (None, Some(js)) => (js / BLOCK_SIZE_U64).saturating_sub(1) / opts.slices as u64,
        (None, None) => (slice_blocks / 16).clamp(MIN_JOURNAL_BLOCKS, MAX_DEFAULT_JOURNAL_BLOCKS),
    };
    if journal_blocks < MIN_JOURNAL_BLOCKS {
        return inval(format!(
            "journal of {} blocks per slice is below the minimum of {MIN_JOURNAL_BLOCKS} (16 MiB)",
            journal_blocks
        ));
    }
    if let Some(js) = journal_size
        && 1 + journal_blocks * opts.slices as u64 > js / BLOCK_SIZE_U64
    {
        return inval(format!(
            "journal device of {js} bytes cannot hold {} slices of {journal_blocks} blocks",
            opts.slices
        ));
    }
    let inline = if journal_size.is_some() {
        0
    } else {
        journal_blocks
    };
    let min_slice = inline + 64 + 4;
    if slice_blocks < min_slice
        || split_data_and_checkpoints(slice_blocks - inline).is_none_or(|(d, _)| d < 64)
    {
        return inval(format!(
            "device of {data_size} bytes is too small for {} slice(s) with a {} MiB journal each",
            opts.slices,
            (journal_blocks * BLOCK_SIZE_U64) >> 20
        ));
    }
    let uuid = rand::random::<u128>();
    let juuid = rand::random::<u128>();
    let data = DeviceHeader {
        uuid,
        role: DeviceRole::Data,
        slices: opts.slices,
        slice_blocks,
        journal_blocks,
        journal_external: journal_size.is_some(),
        peer_uuid: if journal_size.is_some() { juuid } else { 0 },
        object_size: opts.object_size,
        identity: None,
    };
    let journal = journal_size.map(|_| DeviceHeader {
        uuid: juuid,
        role: DeviceRole::Journal,
        slice_blocks: journal_blocks,
        peer_uuid: uuid,
        ..data.clone()
    });
    Ok((data, journal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let (h, _) = plan(1 << 30, None, &FormatOptions::default()).unwrap();
        let mut b = h.encode();
        assert_eq!(DeviceHeader::decode(&b).unwrap(), h);
        b[100] ^= 1;
        assert!(matches!(
            DeviceHeader::decode(&b),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            DeviceHeader::decode(&[0u8; 4096]),
            Err(StoreError::NotFormatted(_))
        ));
    }

    /// A header as written before identities existed: the same fields,
    /// nothing after `object_size`.
    fn encode_without_identity(h: &DeviceHeader) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        let mut e = Encoder::new(&mut b);
        e.bytes(DEVICE_MAGIC);
        e.u32(1);
        e.u32(h.role as u32);
        e.u128(h.uuid);
        e.u32(h.slices);
        e.u64(h.slice_blocks);
        e.u64(h.journal_blocks);
        e.u8(h.journal_external as u8);
        e.u128(h.peer_uuid);
        e.u64(h.object_size);
        let crc = crc_with_zeroed_field(&b, CRC_FIELD);
        b[CRC_FIELD..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn identity_round_trips_and_old_headers_have_none() {
        let (mut h, _) = plan(1 << 30, None, &FormatOptions::default()).unwrap();
        let old = encode_without_identity(&h);
        assert_eq!(DeviceHeader::decode(&old).unwrap(), h);
        assert_eq!(old, h.encode(), "no identity encodes as before");
        h.identity = Some(OsdIdentity {
            cluster_fsid: 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
            cluster_name: "prod-east".into(),
            osd: 7,
        });
        let b = h.encode();
        assert_eq!(DeviceHeader::decode(&b).unwrap(), h);
        // A name too long is cut, not allowed to spill over.
        let mut long = h.clone();
        long.identity.as_mut().unwrap().cluster_name = "x".repeat(300);
        let back = DeviceHeader::decode(&long.encode()).unwrap();
        assert_eq!(back.identity.unwrap().cluster_name.len(), MAX_IDENTITY_NAME);
    }

    #[test]
    fn slices_do_not_overlap_and_fit_the_device() {
        for (size, slices) in [
            (1u64 << 30, 1u32),
            (1 << 30, 2),
            (8 << 30, 4),
            (300 << 20, 3),
        ] {
            let opts = FormatOptions {
                slices,
                ..Default::default()
            };
            let (h, _) = plan(size, None, &opts).unwrap();
            let mut end_prev = 1;
            for s in 0..slices {
                let l = SliceLayout::compute(&h, s).unwrap();
                assert!(l.ckpt_start >= end_prev, "slices overlap");
                assert_eq!(l.journal_start, l.ckpt_start + 2 * l.ckpt_slot_blocks);
                assert_eq!(l.data_start, l.journal_start + l.journal_blocks);
                let slot_need =
                    (l.data_blocks * (CKPT_OBJECT_BYTES + CKPT_BLOCK_BYTES)).div_ceil(4096);
                assert!(l.ckpt_slot_blocks > slot_need);
                end_prev = l.data_start + l.data_blocks;
                assert!(end_prev <= 1 + (s as u64 + 1) * h.slice_blocks);
            }
            assert!(end_prev * 4096 <= size);
        }
    }

    #[test]
    fn too_small_devices_are_refused_clearly() {
        let e = plan(8 << 20, None, &FormatOptions::default()).unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
    }

    #[test]
    fn external_journal_moves_journal_off_the_data_device() {
        let (h, j) = plan(1 << 30, Some(256 << 20), &FormatOptions::default()).unwrap();
        let j = j.unwrap();
        assert!(h.journal_external);
        assert_eq!(j.peer_uuid, h.uuid);
        let l = SliceLayout::compute(&h, 0).unwrap();
        assert_eq!(l.journal_start, 1);
        assert_eq!(l.data_start, l.ckpt_start + 2 * l.ckpt_slot_blocks);
    }
}
