//! Identify data structures (NVMe base specification, Identify command):
//! the controller, a namespace, the active namespace list and the
//! namespace identification descriptors. Pure functions of the
//! configuration, 4096 bytes each.

use crate::config::{DISCOVERY_NQN, NamespaceConfig};
use crate::controller::{Controller, VERSION};

/// Size of every Identify data structure.
pub(crate) const IDENTIFY_LEN: usize = 4096;
/// LBA data size: 4 KiB, the volume block, so every command is aligned.
pub(crate) const LBA_SHIFT: u32 = 12;
/// Asynchronous event requests outstanding at once (AERL + 1).
pub(crate) const AER_LIMIT: usize = 4;
/// Error log entries kept (ELPE + 1).
pub(crate) const ERROR_LOG_ENTRIES: usize = 1;

/// What the controller data depends on besides the controller.
pub(crate) struct ControllerInfo<'a> {
    /// Highest namespace id (NN).
    pub max_nsid: u32,
    /// MDTS exponent (units of 4 KiB).
    pub mdts: u8,
    /// In-capsule data of I/O commands in bytes.
    pub in_capsule: u32,
    /// Serial number (ASCII, up to 20).
    pub serial: &'a str,
}

fn put_ascii(out: &mut [u8], s: &str) {
    out.fill(b' ');
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn put_str(out: &mut [u8], s: &str) {
    out.fill(0);
    let n = s.len().min(out.len() - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

fn put16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut [u8], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A serial number for a subsystem: stable, derived from its NQN.
pub(crate) fn serial_of(nqn: &str) -> String {
    let a = crc32c::crc32c(nqn.as_bytes());
    let b = crc32c::crc32c_append(a, b"pontoon");
    format!("PT{a:08x}{b:08x}")
}

/// Identify Controller (CNS 01h).
pub(crate) fn controller(c: &Controller, info: &ControllerInfo<'_>) -> Vec<u8> {
    let mut d = vec![0u8; IDENTIFY_LEN];
    put_ascii(&mut d[4..24], info.serial);
    put_ascii(&mut d[24..64], "Pontoon volume");
    put_ascii(&mut d[64..72], env!("CARGO_PKG_VERSION"));
    d[72] = 0; // RAB
    if !c.discovery {
        // CMIC: several controllers (hosts) may share the subsystem.
        d[76] = 1 << 1;
    }
    d[77] = info.mdts;
    put16(&mut d, 78, c.cntlid);
    put32(&mut d, 80, VERSION);
    if !c.discovery {
        // OAES: Namespace Attribute Notices.
        put32(&mut d, 92, 1 << 8);
    }
    d[111] = if c.discovery { 2 } else { 1 }; // CNTRLTYPE
    d[258] = 3; // ACL
    d[259] = (AER_LIMIT - 1) as u8; // AERL
    d[260] = 1 << 1; // FRMW: one slot, read-only
    d[261] = 1 << 2; // LPA: extended Get Log Page (offsets)
    d[262] = (ERROR_LOG_ENTRIES - 1) as u8; // ELPE
    put16(&mut d, 320, 10); // KAS: 1 s granularity (100 ms units)
    if !c.discovery {
        d[512] = 0x66; // SQES
        d[513] = 0x44; // CQES
    }
    put16(&mut d, 514, c.max_queue_entries); // MAXCMD
    put32(&mut d, 516, info.max_nsid); // NN
    if !c.discovery {
        // ONCS: Dataset Management, Write Zeroes.
        put16(&mut d, 520, (1 << 2) | (1 << 3));
        // VWC 0: no volatile write cache; a completed write is durable.
        // SGLS: SGLs supported, in-capsule data offsets (bit 20).
        put32(&mut d, 536, 1 | (1 << 20));
    } else {
        put32(&mut d, 536, 1 | (1 << 20));
    }
    let subnqn = if c.discovery {
        DISCOVERY_NQN
    } else {
        &c.assoc.subnqn
    };
    put_str(&mut d[768..1024], subnqn);
    // Fabrics: IOCCSZ and IORCSZ in 16-byte units, ICDOFF 0, dynamic model.
    put32(&mut d, 1792, (64 + info.in_capsule) / 16);
    put32(&mut d, 1796, 1);
    put16(&mut d, 1800, 0);
    d[1802] = 0;
    d[1803] = 1; // MSDBD
    // Power state 0: 9 W (centiwatts).
    put16(&mut d, 2048, 900);
    d
}

/// Identify Namespace (CNS 00h) of a namespace `blocks` LBAs long.
pub(crate) fn namespace(ns: &NamespaceConfig, blocks: u64, read_only: bool) -> Vec<u8> {
    let mut d = vec![0u8; IDENTIFY_LEN];
    put64(&mut d, 0, blocks); // NSZE
    put64(&mut d, 8, blocks); // NCAP
    put64(&mut d, 16, blocks); // NUSE
    d[25] = 0; // NLBAF: one format
    d[26] = 0; // FLBAS: format 0
    d[30] = 1; // NMIC: may be shared by several controllers
    // DLFEAT: deallocated blocks read as zeros; Write Zeroes may deallocate.
    d[33] = 0b001 | (1 << 3);
    // NSATTR bit 0: write protected (a snapshot); hosts mark the disk
    // read-only and writes fail with Namespace Is Write Protected.
    d[99] = u8::from(read_only);
    d[104..120].copy_from_slice(&ns.uuid); // NGUID
    put32(&mut d, 128, LBA_SHIFT << 16); // LBAF0: MS 0, LBADS 12, RP 0
    d
}

/// Active Namespace ID list (CNS 02h): ids greater than `after`, ascending.
pub(crate) fn active_list(nsids: impl Iterator<Item = u32>, after: u32) -> Vec<u8> {
    let mut d = vec![0u8; IDENTIFY_LEN];
    for (i, id) in nsids.filter(|&id| id > after).take(1024).enumerate() {
        put32(&mut d, i * 4, id);
    }
    d
}

/// Namespace Identification Descriptor list (CNS 03h): the NGUID and the
/// UUID, both the namespace's stable identity.
pub(crate) fn descriptors(ns: &NamespaceConfig) -> Vec<u8> {
    let mut d = vec![0u8; IDENTIFY_LEN];
    d[0] = 2; // NIDT: NGUID
    d[1] = 16;
    d[4..20].copy_from_slice(&ns.uuid);
    d[20] = 3; // NIDT: UUID
    d[21] = 16;
    d[24..40].copy_from_slice(&ns.uuid);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_stable_ascii_and_distinct() {
        let a = serial_of("nqn.a");
        assert_eq!(a, serial_of("nqn.a"));
        assert_ne!(a, serial_of("nqn.b"));
        assert_eq!(a.len(), 18);
        assert!(a.is_ascii());
    }

    #[test]
    fn namespace_fields() {
        let ns = NamespaceConfig {
            nsid: 1,
            volume: "v".into(),
            uuid: [7; 16],
        };
        let d = namespace(&ns, 1000, false);
        assert_eq!(u64::from_le_bytes(d[0..8].try_into().unwrap()), 1000);
        assert_eq!(d[99], 0);
        assert_eq!(namespace(&ns, 1000, true)[99], 1, "NSATTR write protected");
        assert_eq!(d[128 + 2], 12);
        let l = active_list([1, 3, 9].into_iter(), 1);
        assert_eq!(&l[..12], &[3, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        let x = descriptors(&ns);
        assert_eq!((x[0], x[1], x[20], x[21]), (2, 16, 3, 16));
    }
}
