//! Log pages (Get Log Page): error information, SMART / health with the
//! controller's real I/O counters, firmware slots, the changed namespace
//! list, and the discovery log. Pure builders; [`crate::admin`] slices
//! them by the host's offset and length.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::config::SubsystemConfig;
use crate::controller::Counters;
use crate::identify::ERROR_LOG_ENTRIES;

/// Log page identifiers.
pub(crate) mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Discovery (discovery controllers only).
    pub const DISCOVERY: u8 = 0x70;
}

/// Error Information: no errors recorded (entries with error count 0).
pub(crate) fn error_info() -> Vec<u8> {
    vec![0u8; 64 * ERROR_LOG_ENTRIES]
}

/// NVMe "data units" are thousands of 512-byte units, rounded up.
fn data_units(bytes: u64) -> u128 {
    u128::from(bytes.div_ceil(512)).div_ceil(1000)
}

/// SMART / Health Information from the controller's counters. There is no
/// device temperature or wear to report: those belong to the OSDs'
/// drives, so the composite temperature is a nominal 300 K and wear 0.
pub(crate) fn smart(c: &Counters) -> Vec<u8> {
    let mut d = vec![0u8; 512];
    d[1..3].copy_from_slice(&300u16.to_le_bytes());
    d[3] = 100; // available spare %
    d[4] = 10; // spare threshold %
    let put =
        |d: &mut Vec<u8>, at: usize, v: u128| d[at..at + 16].copy_from_slice(&v.to_le_bytes());
    put(&mut d, 32, data_units(c.bytes_read.load(Ordering::Relaxed)));
    put(
        &mut d,
        48,
        data_units(c.bytes_written.load(Ordering::Relaxed)),
    );
    put(&mut d, 64, u128::from(c.reads.load(Ordering::Relaxed)));
    put(&mut d, 80, u128::from(c.writes.load(Ordering::Relaxed)));
    d
}

/// Firmware Slot Information: slot 1 active, holding this version.
pub(crate) fn firmware() -> Vec<u8> {
    let mut d = vec![0u8; 512];
    d[0] = 1;
    let v = env!("CARGO_PKG_VERSION").as_bytes();
    let slot = &mut d[8..16];
    slot.fill(b' ');
    slot[..v.len().min(8)].copy_from_slice(&v[..v.len().min(8)]);
    d
}

/// Changed Namespace List: up to 1024 ids, or 0xFFFFFFFF in the first
/// entry if more changed.
pub(crate) fn changed_namespaces(ids: &[u32]) -> Vec<u8> {
    let mut d = vec![0u8; 4096];
    if ids.len() > 1024 {
        d[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    } else {
        for (i, id) in ids.iter().enumerate() {
            d[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
        }
    }
    d
}

fn put_padded(out: &mut [u8], s: &str, pad: u8) {
    out.fill(pad);
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The discovery log: one entry per subsystem the host may see, each
/// reachable at `addr` over TCP.
pub(crate) fn discovery<'a>(
    generation: u64,
    subsystems: impl Iterator<Item = &'a SubsystemConfig>,
    addr: SocketAddr,
) -> Vec<u8> {
    let subs: Vec<&SubsystemConfig> = subsystems.take(1024).collect();
    let mut d = vec![0u8; 1024 * (1 + subs.len())];
    d[0..8].copy_from_slice(&generation.to_le_bytes());
    d[8..16].copy_from_slice(&(subs.len() as u64).to_le_bytes());
    for (i, s) in subs.iter().enumerate() {
        let e = &mut d[1024 * (i + 1)..1024 * (i + 2)];
        e[0] = 3; // TRTYPE: TCP
        e[1] = if addr.is_ipv4() { 1 } else { 2 }; // ADRFAM
        e[2] = 2; // SUBTYPE: NVM subsystem
        e[3] = 0; // TREQ: secure channel not specified
        e[4..6].copy_from_slice(&1u16.to_le_bytes()); // PORTID
        e[6..8].copy_from_slice(&0xFFFFu16.to_le_bytes()); // CNTLID: dynamic
        e[8..10].copy_from_slice(&32u16.to_le_bytes()); // ASQSZ
        put_padded(&mut e[32..64], &addr.port().to_string(), b' ');
        put_padded(&mut e[256..512], &s.nqn, 0);
        put_padded(&mut e[512..768], &addr.ip().to_string(), b' ');
        // TSAS: no security.
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_units_round_up() {
        assert_eq!(data_units(0), 0);
        assert_eq!(data_units(1), 1);
        assert_eq!(data_units(512_000), 1);
        assert_eq!(data_units(512_001), 2);
    }

    #[test]
    fn discovery_entries() {
        let s = SubsystemConfig {
            nqn: "nqn.test:a".into(),
            ..Default::default()
        };
        let d = discovery(5, [&s].into_iter(), "127.0.0.1:4420".parse().unwrap());
        assert_eq!(d.len(), 2048);
        assert_eq!(u64::from_le_bytes(d[8..16].try_into().unwrap()), 1);
        assert_eq!(&d[1024 + 32..1024 + 36], b"4420");
        assert_eq!(&d[1024 + 256..1024 + 266], b"nqn.test:a");
        assert_eq!(&d[1024 + 512..1024 + 521], b"127.0.0.1");
    }
}
