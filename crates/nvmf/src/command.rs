//! NVMe submission and completion queue entries as they travel in
//! capsules: the 64-byte command (SQE) with its SGL descriptor, the 16-byte
//! completion (CQE), status codes, and the opcodes this target knows.

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;
/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// Admin command opcodes.
pub mod admin_op {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// NVM command set I/O opcodes.
pub mod io_op {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DSM: u8 = 0x09;
}

/// The Fabrics command opcode (its type is in byte 4, FCTYPE).
pub const FABRICS_OPCODE: u8 = 0x7F;

/// Fabrics command types.
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send (DH-HMAC-CHAP messages from the host).
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive (DH-HMAC-CHAP messages to the host).
    pub const AUTH_RECEIVE: u8 = 0x06;
    /// Disconnect (NVMe-oF 1.1+).
    pub const DISCONNECT: u8 = 0x08;
}

/// SGL descriptor identifier: data block, offset subtype (in-capsule data).
pub const SGL_IN_CAPSULE: u8 = 0x01;
/// SGL descriptor identifier: transport data block (data moved by
/// R2T/H2CData or C2HData).
pub const SGL_TRANSPORT: u8 = 0x5A;

/// A command's data pointer as a single SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sgl {
    /// Address (the offset into the capsule for in-capsule data).
    pub addr: u64,
    /// Length of the data in bytes.
    pub len: u32,
    /// Descriptor type (high nibble) and subtype (low nibble).
    pub id: u8,
}

/// A 64-byte submission queue entry. Accessors decode the fields the
/// target uses; nothing in it is trusted until checked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_LEN]);

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqe")
            .field("opcode", &self.opcode())
            .field("cid", &self.cid())
            .field("nsid", &self.nsid())
            .field("sgl", &self.sgl())
            .finish()
    }
}

impl Sqe {
    /// A zeroed command with an opcode and command id.
    pub fn new(opcode: u8, cid: u16) -> Self {
        let mut s = Self([0; SQE_LEN]);
        s.0[0] = opcode;
        s.0[2..4].copy_from_slice(&cid.to_le_bytes());
        s
    }

    /// The opcode.
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// The command identifier.
    pub fn cid(&self) -> u16 {
        u16::from_le_bytes([self.0[2], self.0[3]])
    }

    /// The namespace id (CDW1).
    pub fn nsid(&self) -> u32 {
        self.dword(1)
    }

    /// Sets the namespace id.
    pub fn set_nsid(&mut self, nsid: u32) -> &mut Self {
        self.set_dword(1, nsid)
    }

    /// The Fabrics command type (byte 4 of a Fabrics command).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }

    /// Command dword `n` (0..16).
    pub fn dword(&self, n: usize) -> u32 {
        let at = n * 4;
        u32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    /// Sets command dword `n`.
    pub fn set_dword(&mut self, n: usize, v: u32) -> &mut Self {
        self.0[n * 4..n * 4 + 4].copy_from_slice(&v.to_le_bytes());
        self
    }

    /// CDW10..11 as one 64-bit value (the starting LBA of I/O commands).
    pub fn slba(&self) -> u64 {
        u64::from(self.dword(10)) | (u64::from(self.dword(11)) << 32)
    }

    /// The SGL descriptor in the data pointer (bytes 24..40).
    pub fn sgl(&self) -> Sgl {
        let b = &self.0[24..40];
        Sgl {
            addr: u64::from_le_bytes(b[0..8].try_into().unwrap_or_default()),
            len: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            id: b[15],
        }
    }

    /// Sets the SGL descriptor (and PSDT to "SGL").
    pub fn set_sgl(&mut self, sgl: Sgl) -> &mut Self {
        self.0[1] = (self.0[1] & 0x3F) | 0x40;
        self.0[24..32].copy_from_slice(&sgl.addr.to_le_bytes());
        self.0[32..36].copy_from_slice(&sgl.len.to_le_bytes());
        self.0[36..39].fill(0);
        self.0[39] = sgl.id;
        self
    }
}

/// Status code types.
pub mod sct {
    /// Generic command status.
    pub const GENERIC: u8 = 0;
    /// Command specific status.
    pub const COMMAND_SPECIFIC: u8 = 1;
    /// Media and data integrity errors.
    pub const MEDIA: u8 = 2;
}

/// A completion status: type, code and Do Not Retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Status code type.
    pub sct: u8,
    /// Status code.
    pub sc: u8,
    /// Do Not Retry: the same command would fail again.
    pub dnr: bool,
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status {
        sct: sct::GENERIC,
        sc: 0,
        dnr: false,
    };
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Status = Status::generic(0x01);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Status = Status::generic(0x02);
    /// Command ID Conflict.
    pub const CID_CONFLICT: Status = Status::generic(0x03);
    /// Data Transfer Error.
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    /// Internal Error.
    pub const INTERNAL: Status = Status::generic(0x06);
    /// Invalid Namespace or Format.
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B);
    /// Command Sequence Error.
    pub const SEQUENCE_ERROR: Status = Status::generic(0x0C);
    /// SGL Descriptor Type Invalid.
    pub const SGL_TYPE_INVALID: Status = Status::generic(0x11);
    /// Data SGL Length Invalid.
    pub const SGL_LENGTH_INVALID: Status = Status::generic(0x0F);
    /// SGL Offset Invalid.
    pub const SGL_OFFSET_INVALID: Status = Status::generic(0x16);
    /// Transient Transport Error (may be retried).
    pub const TRANSIENT_TRANSPORT: Status = Status {
        sct: sct::GENERIC,
        sc: 0x22,
        dnr: false,
    };
    /// LBA Out of Range.
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80);
    /// Capacity Exceeded.
    pub const CAPACITY_EXCEEDED: Status = Status::generic(0x81);
    /// Namespace Not Ready (may be retried).
    pub const NAMESPACE_NOT_READY: Status = Status {
        sct: sct::GENERIC,
        sc: 0x82,
        dnr: false,
    };
    /// Namespace is Write Protected.
    pub const WRITE_PROTECTED: Status = Status::generic(0x20);
    /// Access Denied (media and data integrity errors): the cluster
    /// refused the gateway's identity or caps.
    pub const ACCESS_DENIED: Status = Status {
        sct: sct::MEDIA,
        sc: 0x86,
        dnr: true,
    };
    /// Unrecovered Read Error.
    pub const UNRECOVERED_READ: Status = Status {
        sct: sct::MEDIA,
        sc: 0x81,
        dnr: true,
    };
    /// Asynchronous Event Request Limit Exceeded.
    pub const AER_LIMIT: Status = Status::specific(0x05);
    /// Connect: Incompatible Format.
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::specific(0x80);
    /// Connect: Controller Busy.
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::specific(0x81);
    /// Connect: Invalid Parameters (DW0 says which).
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::specific(0x82);
    /// Connect: Invalid Host (not on the subsystem's allow-list).
    pub const CONNECT_INVALID_HOST: Status = Status::specific(0x84);
    /// Authentication Required: the queue has not authenticated
    /// (DH-HMAC-CHAP) and may carry only AUTH_Send / AUTH_Receive.
    pub const AUTH_REQUIRED: Status = Status::specific(0x91);
    /// Invalid Queue Identifier.
    pub const INVALID_QUEUE_ID: Status = Status::specific(0x01);
    /// Invalid Queue Size.
    pub const INVALID_QUEUE_SIZE: Status = Status::specific(0x02);
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Status = Status::specific(0x09);
    /// Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Status = Status::specific(0x0D);

    /// A generic status with Do Not Retry set.
    pub const fn generic(sc: u8) -> Status {
        Status {
            sct: sct::GENERIC,
            sc,
            dnr: true,
        }
    }

    /// A command-specific status with Do Not Retry set.
    pub const fn specific(sc: u8) -> Status {
        Status {
            sct: sct::COMMAND_SPECIFIC,
            sc,
            dnr: true,
        }
    }

    /// True for success.
    pub fn is_success(&self) -> bool {
        self.sct == 0 && self.sc == 0
    }

    /// The CQE status field (phase tag 0).
    pub fn field(&self) -> u16 {
        (u16::from(self.sc) << 1) | (u16::from(self.sct & 7) << 9) | (u16::from(self.dnr) << 15)
    }

    /// Decodes a CQE status field.
    pub fn from_field(f: u16) -> Status {
        Status {
            sc: (f >> 1) as u8,
            sct: ((f >> 9) & 7) as u8,
            dnr: f & 0x8000 != 0,
        }
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// Command-specific dword 0.
    pub dw0: u32,
    /// Command-specific dword 1.
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sqhd: u16,
    /// Submission queue id.
    pub sqid: u16,
    /// The command's id.
    pub cid: u16,
    /// Completion status.
    pub status: Status,
}

impl Cqe {
    /// Encodes the 16 bytes.
    pub fn encode(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.dw1.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.field().to_le_bytes());
        b
    }

    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; CQE_LEN]) -> Self {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            dw0: u32_at(0),
            dw1: u32_at(4),
            sqhd: u16_at(8),
            sqid: u16_at(10),
            cid: u16_at(12),
            status: Status::from_field(u16_at(14)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_field_layout() {
        // Connect Invalid Host: SCT 1, SC 0x84, DNR.
        let f = Status::CONNECT_INVALID_HOST.field();
        assert_eq!(f, (0x84 << 1) | (1 << 9) | 0x8000);
        assert_eq!(Status::from_field(f), Status::CONNECT_INVALID_HOST);
        assert_eq!(Status::SUCCESS.field(), 0);
    }

    #[test]
    fn sqe_and_cqe_round_trip() {
        let mut s = Sqe::new(io_op::WRITE, 0x1234);
        s.set_nsid(3)
            .set_dword(10, 0xdead_beef)
            .set_dword(11, 1)
            .set_sgl(Sgl {
                addr: 0,
                len: 8192,
                id: SGL_IN_CAPSULE,
            });
        assert_eq!((s.opcode(), s.cid(), s.nsid()), (io_op::WRITE, 0x1234, 3));
        assert_eq!(s.slba(), 0x1_dead_beef);
        assert_eq!(s.sgl().len, 8192);
        assert_eq!(s.sgl().id, SGL_IN_CAPSULE);
        let c = Cqe {
            dw0: 1,
            dw1: 2,
            sqhd: 3,
            sqid: 4,
            cid: 5,
            status: Status::LBA_OUT_OF_RANGE,
        };
        assert_eq!(Cqe::decode(&c.encode()), c);
    }
}
