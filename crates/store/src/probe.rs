//! What a device holds before Pontoon formats it: a Pontoon store (and
//! whose), another program's data (a filesystem, a partition table, an LVM
//! or RAID member, swap), or nothing Pontoon recognises.
//!
//! The signatures are read from the device's first [`PROBE_BYTES`] bytes,
//! at the places `blkid -p` looks: ext2/3/4's magic at 1080, XFS's `XFSB`
//! at 0, btrfs's `_BHRfS_M` at 64 KiB + 64, an MBR's `55 AA` at 510, a
//! GPT's `EFI PART` at 512, LVM2's `LABELONE` in one of the first four
//! sectors, swap's `SWAPSPACE2` at the end of the first page, and a few
//! more. [`wipe_signatures`] clears those places (and the end of the
//! device, where a backup GPT and some RAID superblocks live) before a
//! format, so other tools do not find stale signatures on a Pontoon device.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use pontoon_types::BLOCK_SIZE;

use crate::layout::{DEVICE_MAGIC, DeviceHeader};

/// Bytes read from the start of a device to recognise what it holds (up to
/// btrfs's superblock at 64 KiB and a 64 KiB-page swap header).
pub const PROBE_BYTES: usize = 68 << 10;

/// Bytes [`wipe_signatures`] zeroes at each end of the device.
pub const WIPE_BYTES: u64 = 1 << 20;

/// What the start of a device holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contents {
    /// No signature this module knows: zeros, or data of no known format.
    Unrecognized,
    /// A Pontoon store: its header, or why the header could not be read
    /// (damaged, or a format version this build does not know).
    Pontoon(Result<DeviceHeader, String>),
    /// Another program's data, each described for people: `"ext4
    /// filesystem"`, `"GPT partition table"`, …
    Foreign(Vec<String>),
}

impl Contents {
    /// Whether formatting would destroy something Pontoon recognises.
    pub fn is_unrecognized(&self) -> bool {
        matches!(self, Contents::Unrecognized)
    }
}

/// Reads the start of `file` (a device or regular file) and says what it
/// holds.
pub fn probe(file: &File) -> io::Result<Contents> {
    let mut buf = vec![0u8; PROBE_BYTES];
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(probe_bytes(&buf))
}

/// Says what a device holds from its first bytes (up to [`PROBE_BYTES`];
/// fewer for a smaller device).
pub fn probe_bytes(head: &[u8]) -> Contents {
    if at(head, 0, DEVICE_MAGIC) {
        return Contents::Pontoon(if head.len() < BLOCK_SIZE {
            Err("the header block is cut short".into())
        } else {
            DeviceHeader::decode(head).map_err(|e| e.to_string())
        });
    }
    let found = foreign_signatures(head);
    if found.is_empty() {
        Contents::Unrecognized
    } else {
        Contents::Foreign(found.into_iter().map(String::from).collect())
    }
}

/// Whether `head` holds `magic` at `off`.
fn at(head: &[u8], off: usize, magic: &[u8]) -> bool {
    head.get(off..off + magic.len()) == Some(magic)
}

fn le16(head: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(head.get(off..off + 2)?.try_into().ok()?))
}

fn le32(head: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(head.get(off..off + 4)?.try_into().ok()?))
}

/// The ext superblock starts at 1024.
const EXT_SB: usize = 1024;
const EXT_MAGIC: u16 = 0xEF53;
const EXT3_COMPAT_HAS_JOURNAL: u32 = 0x4;
/// Incompat features ext2/3 never set: extents, 64bit, flex_bg.
const EXT4_INCOMPAT: u32 = 0x40 | 0x80 | 0x200;
/// Incompat feature of an external journal device.
const EXT_INCOMPAT_JOURNAL_DEV: u32 = 0x8;
const MD_MAGIC: u32 = 0xa92b_4efc;
const F2FS_MAGIC: u32 = 0xF2F5_2010;

/// Every foreign signature in `head`, file systems and volume managers
/// before partition tables.
fn foreign_signatures(head: &[u8]) -> Vec<&'static str> {
    let mut found = Vec::new();
    if le16(head, EXT_SB + 56) == Some(EXT_MAGIC) {
        let compat = le32(head, EXT_SB + 92).unwrap_or(0);
        let incompat = le32(head, EXT_SB + 96).unwrap_or(0);
        found.push(if incompat & EXT_INCOMPAT_JOURNAL_DEV != 0 {
            "ext3/4 external journal"
        } else if incompat & EXT4_INCOMPAT != 0 {
            "ext4 filesystem"
        } else if compat & EXT3_COMPAT_HAS_JOURNAL != 0 {
            "ext3 filesystem"
        } else {
            "ext2 filesystem"
        });
    }
    if at(head, 0, b"XFSB") {
        found.push("XFS filesystem");
    }
    if at(head, (64 << 10) + 64, b"_BHRfS_M") {
        found.push("btrfs filesystem");
    }
    if le32(head, 1024) == Some(F2FS_MAGIC) {
        found.push("F2FS filesystem");
    }
    if at(head, 0, b"hsqs") {
        found.push("squashfs filesystem");
    }
    if at(head, 32769, b"CD001") {
        found.push("ISO 9660 filesystem");
    }
    if at(head, 3, b"NTFS    ") {
        found.push("NTFS filesystem");
    }
    if at(head, 3, b"EXFAT   ") {
        found.push("exFAT filesystem");
    }
    let boot_sig = at(head, 510, &[0x55, 0xAA]);
    let fat = boot_sig
        && (at(head, 54, b"FAT12   ") || at(head, 54, b"FAT16   ") || at(head, 82, b"FAT32   "));
    if fat {
        found.push("FAT filesystem");
    }
    if at(head, 0, b"LUKS\xba\xbe") {
        found.push("LUKS encrypted volume");
    }
    if (0..4).any(|s| at(head, s * 512, b"LABELONE") && at(head, s * 512 + 24, b"LVM2 001")) {
        found.push("LVM2 physical volume");
    }
    if le32(head, 0) == Some(MD_MAGIC) || le32(head, 4096) == Some(MD_MAGIC) {
        found.push("Linux RAID (md) member");
    }
    if at(head, 0, b"bluestore block device") {
        found.push("Ceph BlueStore device");
    }
    if [4096usize, 8192, 16384, 65536]
        .iter()
        .any(|page| at(head, page - 10, b"SWAPSPACE2") || at(head, page - 10, b"SWAP-SPACE"))
    {
        found.push("swap space");
    }
    if at(head, 512, b"EFI PART") {
        found.push("GPT partition table");
    } else if boot_sig && !fat && !at(head, 3, b"NTFS    ") && !at(head, 3, b"EXFAT   ") {
        found.push("MBR (DOS) partition table");
    }
    found
}

/// Zeroes the first and last [`WIPE_BYTES`] of a device of `size` bytes
/// (all of it if smaller) and makes that durable: what a format destroys
/// anyway, so tools like `blkid` find no stale signature (a backup GPT at
/// the end, btrfs at 64 KiB) on a Pontoon device afterwards.
pub fn wipe_signatures(file: &File, size: u64) -> io::Result<()> {
    let zeros = vec![0u8; WIPE_BYTES as usize];
    let head = size.min(WIPE_BYTES);
    file.write_all_at(&zeros[..head as usize], 0)?;
    let tail_start = size.saturating_sub(WIPE_BYTES).max(head);
    file.write_all_at(&zeros[..(size - tail_start) as usize], tail_start)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{FormatOptions, OsdIdentity};
    use crate::{MemDevice, Store};

    fn blank() -> Vec<u8> {
        vec![0u8; PROBE_BYTES]
    }

    fn put(b: &mut [u8], off: usize, bytes: &[u8]) {
        b[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn foreign(b: &[u8]) -> Vec<String> {
        match probe_bytes(b) {
            Contents::Foreign(v) => v,
            other => panic!("expected a foreign signature, got {other:?}"),
        }
    }

    #[test]
    fn zeros_and_random_data_are_unrecognized() {
        assert_eq!(probe_bytes(&blank()), Contents::Unrecognized);
        assert_eq!(probe_bytes(&[]), Contents::Unrecognized);
        let noise: Vec<u8> = (0..PROBE_BYTES as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
            .collect();
        assert_eq!(probe_bytes(&noise), Contents::Unrecognized);
        // A short device is probed as far as it goes.
        assert_eq!(probe_bytes(&blank()[..600]), Contents::Unrecognized);
    }

    #[test]
    fn ext_versions_are_told_apart() {
        let mut b = blank();
        put(&mut b, 1080, &0xEF53u16.to_le_bytes());
        assert_eq!(foreign(&b), ["ext2 filesystem"]);
        put(&mut b, 1024 + 92, &0x4u32.to_le_bytes());
        assert_eq!(foreign(&b), ["ext3 filesystem"]);
        put(&mut b, 1024 + 96, &(0x40u32 | 0x2).to_le_bytes());
        assert_eq!(foreign(&b), ["ext4 filesystem"]);
    }

    #[test]
    fn filesystems_volumes_and_swap_are_named() {
        let cases: [(usize, &[u8], &str); 10] = [
            (0, b"XFSB", "XFS filesystem"),
            ((64 << 10) + 64, b"_BHRfS_M", "btrfs filesystem"),
            (24 + 512, b"LVM2 001", "LVM2 physical volume"),
            (4086, b"SWAPSPACE2", "swap space"),
            (65526, b"SWAPSPACE2", "swap space"),
            (0, b"LUKS\xba\xbe", "LUKS encrypted volume"),
            (4096, &MD_MAGIC.to_le_bytes(), "Linux RAID (md) member"),
            (1024, &F2FS_MAGIC.to_le_bytes(), "F2FS filesystem"),
            (32769, b"CD001", "ISO 9660 filesystem"),
            (0, b"bluestore block device", "Ceph BlueStore device"),
        ];
        for (off, magic, what) in cases {
            let mut b = blank();
            put(&mut b, off, magic);
            if what.starts_with("LVM2") {
                put(&mut b, 512, b"LABELONE");
            }
            assert_eq!(foreign(&b), [what], "{what}");
        }
    }

    #[test]
    fn partition_tables_and_boot_sectors() {
        let mut mbr = blank();
        put(&mut mbr, 510, &[0x55, 0xAA]);
        assert_eq!(foreign(&mbr), ["MBR (DOS) partition table"]);
        let mut gpt = mbr.clone();
        put(&mut gpt, 512, b"EFI PART");
        assert_eq!(foreign(&gpt), ["GPT partition table"]);
        let mut fat = mbr.clone();
        put(&mut fat, 82, b"FAT32   ");
        assert_eq!(foreign(&fat), ["FAT filesystem"]);
        let mut ntfs = mbr.clone();
        put(&mut ntfs, 3, b"NTFS    ");
        assert_eq!(foreign(&ntfs), ["NTFS filesystem"]);
        // A filesystem over a stale partition table: both are named.
        put(&mut mbr, 0, b"XFSB");
        assert_eq!(
            foreign(&mbr),
            ["XFS filesystem", "MBR (DOS) partition table"]
        );
    }

    #[test]
    fn pontoon_devices_show_their_header_and_identity() {
        let dev = MemDevice::new(64 << 20);
        let id = OsdIdentity {
            cluster_fsid: 42,
            cluster_name: "c".into(),
            osd: 3,
        };
        let opts = FormatOptions::default();
        let h = futures::executor::block_on(Store::format_as(&dev, None, &opts, Some(id.clone())))
            .unwrap();
        let image = dev.image();
        match probe_bytes(&image[..PROBE_BYTES]) {
            Contents::Pontoon(Ok(got)) => {
                assert_eq!(got, h);
                assert_eq!(got.identity, Some(id));
            }
            other => panic!("{other:?}"),
        }
        let mut damaged = image[..PROBE_BYTES].to_vec();
        damaged[200] ^= 0xff;
        assert!(matches!(probe_bytes(&damaged), Contents::Pontoon(Err(_))));
        assert!(matches!(
            probe_bytes(&image[..100]),
            Contents::Pontoon(Err(_))
        ));
    }

    #[test]
    fn an_identity_is_recorded_on_an_old_device_and_it_still_opens() {
        let dev = MemDevice::new(64 << 20);
        let opts = FormatOptions::default();
        let h = futures::executor::block_on(Store::format(&dev, None, &opts)).unwrap();
        assert_eq!(h.identity, None);
        let id = OsdIdentity {
            cluster_fsid: 7,
            cluster_name: "old".into(),
            osd: 0,
        };
        let h2 = futures::executor::block_on(Store::write_identity(&dev, id.clone())).unwrap();
        assert_eq!(h2.identity, Some(id));
        assert_eq!(
            DeviceHeader {
                identity: None,
                ..h2.clone()
            },
            h
        );
        let back = futures::executor::block_on(crate::read_header(&dev, None)).unwrap();
        assert_eq!(back, h2);
        let opened = futures::executor::block_on(Store::open(dev, None, 0));
        assert!(opened.is_ok(), "{:?}", opened.err());
    }

    #[test]
    fn wiping_clears_both_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev");
        let size = 3 * WIPE_BYTES + 4096;
        std::fs::write(&path, vec![0xa5u8; size as usize]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        wipe_signatures(&f, size).unwrap();
        let data = std::fs::read(&path).unwrap();
        let w = WIPE_BYTES as usize;
        assert!(data[..w].iter().all(|b| *b == 0));
        assert!(data[data.len() - w..].iter().all(|b| *b == 0));
        assert!(data[w..data.len() - w].iter().all(|b| *b == 0xa5));
        // A device smaller than both ends together is wiped whole.
        std::fs::write(&path, vec![0xa5u8; 8192]).unwrap();
        wipe_signatures(&f, 8192).unwrap();
        assert!(std::fs::read(&path).unwrap().iter().all(|b| *b == 0));
    }
}
