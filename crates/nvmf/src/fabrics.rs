//! The Fabrics Connect command: its fields, its 1024-byte data, and the
//! "invalid parameter" location a refusal reports (NVMe over Fabrics 1.1,
//! Connect command and response).

use crate::command::{Sqe, Status};

/// Length of the Connect command's data.
pub(crate) const CONNECT_DATA_LEN: usize = 1024;
/// Byte offset of SUBNQN in the Connect data.
pub(crate) const SUBNQN_OFFSET: u16 = 256;
/// Byte offset of CNTLID in the Connect data.
pub(crate) const CNTLID_OFFSET: u16 = 16;
/// Byte offset of QID in the Connect command.
pub(crate) const QID_OFFSET: u16 = 42;
/// Byte offset of SQSIZE in the Connect command.
pub(crate) const SQSIZE_OFFSET: u16 = 44;
/// The controller id a host asks for to get a new (dynamic) controller.
pub(crate) const DYNAMIC_CNTLID: u16 = 0xFFFF;

/// A decoded Connect command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Connect {
    /// Queue id: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Connect attributes (bit 2: SQ flow control disabled).
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (admin queue).
    pub kato_ms: u32,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Controller id: [`DYNAMIC_CNTLID`] on the admin queue, the admin
    /// queue's controller on an I/O queue.
    pub cntlid: u16,
    /// The subsystem connected to.
    pub subnqn: String,
    /// The connecting host.
    pub hostnqn: String,
}

/// A refused Connect: the status and the response's DW0 (for Invalid
/// Parameters: the offset of the bad field, and whether it is in the
/// command or its data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The status.
    pub status: Status,
    /// Response DW0.
    pub dw0: u32,
    /// The refusal rests on the configuration (an unknown subsystem, a
    /// host not allowed), which a change arriving moments later may lift.
    pub config: bool,
}

impl Refusal {
    /// Invalid Parameters at `offset` of the command (`in_data` false) or
    /// of its data.
    pub fn invalid(offset: u16, in_data: bool) -> Self {
        Self {
            status: Status::CONNECT_INVALID_PARAMETERS,
            dw0: u32::from(offset) | (u32::from(in_data) << 16),
            config: false,
        }
    }

    /// Any other status (DW0 0).
    pub fn status(status: Status) -> Self {
        Self {
            status,
            dw0: 0,
            config: false,
        }
    }

    /// This refusal, marked as resting on the configuration.
    pub fn on_config(self) -> Self {
        Self {
            config: true,
            ..self
        }
    }
}

fn nqn_field(b: &[u8], offset: u16) -> Result<String, Refusal> {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let s = std::str::from_utf8(&b[..end]).map_err(|_| Refusal::invalid(offset, true))?;
    if s.is_empty() {
        return Err(Refusal::invalid(offset, true));
    }
    Ok(s.to_string())
}

/// Decodes a Connect command and its data.
pub(crate) fn parse(sqe: &Sqe, data: &[u8]) -> Result<Connect, Refusal> {
    let recfmt = sqe.dword(10) as u16;
    if recfmt != 0 {
        return Err(Refusal::status(Status::CONNECT_INCOMPATIBLE_FORMAT));
    }
    if data.len() < CONNECT_DATA_LEN {
        return Err(Refusal::status(Status::SGL_LENGTH_INVALID));
    }
    let mut hostid = [0u8; 16];
    hostid.copy_from_slice(&data[0..16]);
    Ok(Connect {
        qid: (sqe.dword(10) >> 16) as u16,
        sqsize: sqe.dword(11) as u16,
        cattr: (sqe.dword(11) >> 16) as u8,
        kato_ms: sqe.dword(12),
        hostid,
        cntlid: u16::from_le_bytes([data[16], data[17]]),
        subnqn: nqn_field(&data[256..512], SUBNQN_OFFSET)?,
        hostnqn: nqn_field(&data[512..768], 512)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::FABRICS_OPCODE;

    #[test]
    fn parses_fields_and_names_bad_ones() {
        let mut sqe = Sqe::new(FABRICS_OPCODE, 1);
        sqe.0[4] = 1;
        sqe.set_dword(10, 3 << 16)
            .set_dword(11, 127)
            .set_dword(12, 5000);
        let mut data = vec![0u8; 1024];
        data[16..18].copy_from_slice(&7u16.to_le_bytes());
        data[256..262].copy_from_slice(b"nqn.s1");
        data[512..518].copy_from_slice(b"nqn.h1");
        let c = parse(&sqe, &data).unwrap();
        assert_eq!((c.qid, c.sqsize, c.kato_ms, c.cntlid), (3, 127, 5000, 7));
        assert_eq!(
            (c.subnqn.as_str(), c.hostnqn.as_str()),
            ("nqn.s1", "nqn.h1")
        );
        data[256] = 0;
        assert_eq!(parse(&sqe, &data).unwrap_err(), Refusal::invalid(256, true));
        assert_eq!(
            parse(&sqe, &data[..100]).unwrap_err().status,
            Status::SGL_LENGTH_INVALID
        );
        sqe.set_dword(10, 1);
        assert_eq!(
            parse(&sqe, &data).unwrap_err().status,
            Status::CONNECT_INCOMPATIBLE_FORMAT
        );
    }
}
