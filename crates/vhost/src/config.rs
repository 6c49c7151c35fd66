//! What the device offers: virtio and vhost-user feature bits and the
//! virtio-blk configuration space (virtio 1.2, 5.2.4).

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Bytes per virtio-blk sector: every offset on the wire is in sectors.
pub const SECTOR: u64 = 512;
/// Logical block size offered to the guest: the volume's block.
pub const BLOCK: u32 = 4096;
/// Largest data segment (a descriptor's length) the guest may use; with
/// [`SEG_MAX`] it bounds a request below the worker's 32 MiB limit.
pub const SIZE_MAX: u32 = 256 << 10;
/// Most data segments in one request (the descriptor chain holds two
/// more: header and status).
pub const SEG_MAX: u32 = 126;
/// Most sectors one discard or write-zeroes request may cover (16 MiB).
pub const MAX_DISCARD_SECTORS: u32 = (16 << 20) / SECTOR as u32;
/// Most ranges in one discard or write-zeroes request.
pub const MAX_DISCARD_SEG: u32 = 1;
/// The length of the serial number a GET_ID request returns.
pub const ID_BYTES: usize = 20;
/// Size of the configuration space through `write_zeroes_may_unmap` and
/// its padding.
pub const CONFIG_LEN: usize = 60;

/// The device's fixed shape.
#[derive(Debug, Clone, Copy)]
pub struct DeviceShape {
    /// Volume size in bytes.
    pub size: u64,
    /// Number of request queues.
    pub queues: u16,
    /// Writes refused.
    pub read_only: bool,
}

/// Virtio features offered.
pub fn features(shape: &DeviceShape) -> u64 {
    let mut f = [
        VIRTIO_F_VERSION_1,
        VIRTIO_RING_F_EVENT_IDX,
        VIRTIO_RING_F_INDIRECT_DESC,
        VIRTIO_BLK_F_SIZE_MAX,
        VIRTIO_BLK_F_SEG_MAX,
        VIRTIO_BLK_F_BLK_SIZE,
        VIRTIO_BLK_F_TOPOLOGY,
        VIRTIO_BLK_F_FLUSH,
        VIRTIO_BLK_F_MQ,
    ]
    .iter()
    .fold(0u64, |acc, bit| acc | 1u64 << bit);
    if shape.read_only {
        f |= 1 << VIRTIO_BLK_F_RO;
    } else {
        f |= 1 << VIRTIO_BLK_F_DISCARD | 1 << VIRTIO_BLK_F_WRITE_ZEROES;
    }
    f | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
}

/// vhost-user protocol features offered.
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::REPLY_ACK
}

/// The configuration space, little-endian as virtio 1.x requires.
pub fn config_space(shape: &DeviceShape) -> [u8; CONFIG_LEN] {
    let mut c = [0u8; CONFIG_LEN];
    let mut put = |at: usize, bytes: &[u8]| c[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &(shape.size / SECTOR).to_le_bytes()); // capacity
    put(8, &SIZE_MAX.to_le_bytes());
    put(12, &SEG_MAX.to_le_bytes());
    put(20, &BLOCK.to_le_bytes()); // blk_size
    put(24, &[0]); // physical_block_exp: physical block = logical block
    put(26, &((BLOCK as u64 / SECTOR) as u16).to_le_bytes()); // min_io_size
    put(28, &((BLOCK as u64 / SECTOR) as u32).to_le_bytes()); // opt_io_size
    put(32, &[1]); // writeback: flushes are sent (and cost nothing)
    put(34, &shape.queues.to_le_bytes());
    put(36, &MAX_DISCARD_SECTORS.to_le_bytes());
    put(40, &MAX_DISCARD_SEG.to_le_bytes());
    put(44, &((BLOCK as u64 / SECTOR) as u32).to_le_bytes()); // discard alignment
    put(48, &MAX_DISCARD_SECTORS.to_le_bytes()); // max_write_zeroes_sectors
    put(52, &MAX_DISCARD_SEG.to_le_bytes());
    put(56, &[1]); // write_zeroes_may_unmap
    c
}

/// The part of the configuration space at `offset..offset+size`; bytes past
/// its end read as zero.
pub fn config_slice(shape: &DeviceShape, offset: u32, size: u32) -> Vec<u8> {
    let c = config_space(shape);
    (offset as usize..offset as usize + size as usize)
        .map(|i| c.get(i).copied().unwrap_or(0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_describes_the_volume() {
        let shape = DeviceShape {
            size: 1 << 30,
            queues: 2,
            read_only: false,
        };
        let c = config_space(&shape);
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 2 << 20);
        assert_eq!(u32::from_le_bytes(c[20..24].try_into().unwrap()), 4096);
        assert_eq!(u16::from_le_bytes(c[34..36].try_into().unwrap()), 2);
        assert_eq!(config_slice(&shape, 20, 4), vec![0, 16, 0, 0]);
        assert_eq!(config_slice(&shape, 58, 4), vec![0, 0, 0, 0]);
        assert!(u64::from(SIZE_MAX) * u64::from(SEG_MAX) <= crate::worker::MAX_REQUEST_BYTES);
        let f = features(&shape);
        assert_ne!(f & 1 << VIRTIO_BLK_F_DISCARD, 0);
        assert_eq!(f & 1 << VIRTIO_BLK_F_RO, 0);
        let ro = features(&DeviceShape {
            read_only: true,
            ..shape
        });
        assert_ne!(ro & 1 << VIRTIO_BLK_F_RO, 0);
        assert_eq!(ro & 1 << VIRTIO_BLK_F_DISCARD, 0);
    }
}
