//! The NVMe/TCP PDU format (NVMe/TCP transport specification 1.0): the
//! 8-byte common header, each PDU type's fixed header, header and data
//! digests (CRC32C), and the checks a receiver makes before trusting a
//! length. Shared by the target and the test initiator, so both sides
//! agree on every byte; pure, so it is tested without sockets.

/// Length of the common header every PDU starts with.
pub const CH_LEN: usize = 8;
/// Length of a header or data digest.
pub const DIGEST_LEN: usize = 4;
/// Length of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// Header length of a command capsule (common header + 64-byte SQE).
pub const CMD_HLEN: usize = CH_LEN + 64;
/// Header length of a response capsule (common header + 16-byte CQE).
pub const RESP_HLEN: usize = CH_LEN + 16;
/// Header length of H2CData, C2HData and R2T.
pub const DATA_HLEN: usize = 24;
/// Header length of H2CTermReq and C2HTermReq.
pub const TERM_HLEN: usize = 24;
/// Longest termination request: its header plus up to 128 bytes of the
/// offending PDU's header.
pub const TERM_MAX_PLEN: usize = 152;
/// Smallest MAXH2CDATA the protocol allows.
pub const MIN_MAXH2CDATA: u32 = 4096;

/// PDU types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PduType {
    /// Initialize Connection Request (host to controller).
    IcReq = 0x00,
    /// Initialize Connection Response.
    IcResp = 0x01,
    /// Host to controller termination request.
    H2CTermReq = 0x02,
    /// Controller to host termination request.
    C2HTermReq = 0x03,
    /// Command capsule.
    CapsuleCmd = 0x04,
    /// Response capsule.
    CapsuleResp = 0x05,
    /// Host to controller data (write data after an R2T).
    H2CData = 0x06,
    /// Controller to host data (read data).
    C2HData = 0x07,
    /// Ready to transfer: the controller asks for write data.
    R2T = 0x09,
}

impl PduType {
    /// Decodes a PDU type byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0x00 => Self::IcReq,
            0x01 => Self::IcResp,
            0x02 => Self::H2CTermReq,
            0x03 => Self::C2HTermReq,
            0x04 => Self::CapsuleCmd,
            0x05 => Self::CapsuleResp,
            0x06 => Self::H2CData,
            0x07 => Self::C2HData,
            0x09 => Self::R2T,
            _ => return None,
        })
    }

    /// The fixed header length (HLEN) of this type.
    pub fn hlen(self) -> usize {
        match self {
            Self::IcReq | Self::IcResp => IC_LEN,
            Self::H2CTermReq | Self::C2HTermReq => TERM_HLEN,
            Self::CapsuleCmd => CMD_HLEN,
            Self::CapsuleResp => RESP_HLEN,
            Self::H2CData | Self::C2HData | Self::R2T => DATA_HLEN,
        }
    }

    /// Whether hosts send this type (the others come from controllers).
    pub fn from_host(self) -> bool {
        matches!(
            self,
            Self::IcReq | Self::H2CTermReq | Self::CapsuleCmd | Self::H2CData
        )
    }

    /// Whether this type carries a header digest once they are enabled.
    pub fn has_header_digest(self) -> bool {
        !matches!(
            self,
            Self::IcReq | Self::IcResp | Self::H2CTermReq | Self::C2HTermReq
        )
    }

    /// Whether this type may carry data (and then a data digest).
    pub fn may_carry_data(self) -> bool {
        matches!(self, Self::CapsuleCmd | Self::H2CData | Self::C2HData)
    }
}

/// Common header flag: a header digest follows the header.
pub const FLAG_HDGST: u8 = 1 << 0;
/// Common header flag: a data digest follows the data.
pub const FLAG_DDGST: u8 = 1 << 1;
/// Data PDU flag: last PDU of the transfer (of the command or of the R2T).
pub const FLAG_LAST_PDU: u8 = 1 << 2;
/// C2HData flag: the command succeeded; no response capsule follows.
pub const FLAG_SUCCESS: u8 = 1 << 3;

/// Fatal error status of a termination request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Fes {
    /// A header field is invalid; FEI holds its byte offset.
    InvalidHeaderField = 0x01,
    /// A PDU arrived that the protocol state does not allow.
    SequenceError = 0x02,
    /// The header digest does not match.
    HeaderDigest = 0x03,
    /// Data was sent outside the range the command or R2T allows.
    DataOutOfRange = 0x04,
    /// More data (or R2Ts) than the negotiated limit.
    DataLimitExceeded = 0x05,
    /// A parameter value (e.g. PFV) is not supported; FEI holds its offset.
    UnsupportedParameter = 0x06,
}

/// Header and data digests negotiated for a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    /// CRC32C over every header (except IC and termination PDUs).
    pub header: bool,
    /// CRC32C over every PDU's data.
    pub data: bool,
}

impl Digests {
    /// Decodes ICReq/ICResp's DGST byte.
    pub fn from_bits(b: u8) -> Self {
        Self {
            header: b & 1 != 0,
            data: b & 2 != 0,
        }
    }

    /// Encodes the DGST byte.
    pub fn bits(self) -> u8 {
        u8::from(self.header) | (u8::from(self.data) << 1)
    }

    fn header_len(self, t: PduType) -> usize {
        if self.header && t.has_header_digest() {
            DIGEST_LEN
        } else {
            0
        }
    }
}

/// The 8-byte common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU type byte (not yet validated).
    pub pdu_type: u8,
    /// Flags.
    pub flags: u8,
    /// Header length.
    pub hlen: u8,
    /// Offset of the data from the PDU's start (0 without data).
    pub pdo: u8,
    /// Total PDU length.
    pub plen: u32,
}

impl CommonHeader {
    /// Decodes the first 8 bytes of a PDU.
    pub fn decode(b: &[u8; CH_LEN]) -> Self {
        Self {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes into the first 8 bytes of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        out[0] = self.pdu_type;
        out[1] = self.flags;
        out[2] = self.hlen;
        out[3] = self.pdo;
        out[4..8].copy_from_slice(&self.plen.to_le_bytes());
    }
}

/// A received PDU that must not be processed: the receiver sends a
/// termination request with this status and closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (fatal error status {fes:?}, field offset {fei})")]
pub struct PduError {
    /// The fatal error status to report.
    pub fes: Fes,
    /// Field error information (the offending field's byte offset, or 0).
    pub fei: u32,
    /// What was wrong, for the log.
    pub reason: String,
}

impl PduError {
    /// An invalid header field at byte offset `fei`.
    pub fn field(fei: u32, reason: impl Into<String>) -> Self {
        Self {
            fes: Fes::InvalidHeaderField,
            fei,
            reason: reason.into(),
        }
    }

    /// A PDU the protocol state does not allow.
    pub fn sequence(reason: impl Into<String>) -> Self {
        Self {
            fes: Fes::SequenceError,
            fei: 0,
            reason: reason.into(),
        }
    }
}

/// Where the parts of a validated PDU are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The PDU type.
    pub pdu_type: PduType,
    /// Flags from the common header.
    pub flags: u8,
    /// Header length (fixed per type).
    pub hlen: usize,
    /// Whether a header digest follows the header.
    pub header_digest: bool,
    /// Padding bytes between the header (and its digest) and the data.
    pub pad: usize,
    /// Data bytes.
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub data_digest: bool,
}

impl Layout {
    /// Bytes after the common header up to the end of the header digest.
    pub fn rest_of_header(&self) -> usize {
        self.hlen - CH_LEN + if self.header_digest { DIGEST_LEN } else { 0 }
    }
}

/// Checks a received common header against the negotiated digests and a
/// bound on the data a PDU may carry, and says where its parts are. Every
/// length the receiver later trusts comes from here.
pub fn validate(
    ch: &CommonHeader,
    digests: Digests,
    max_data: usize,
    allowed: &[PduType],
) -> Result<Layout, PduError> {
    let t = PduType::from_u8(ch.pdu_type)
        .filter(|t| allowed.contains(t))
        .ok_or_else(|| PduError::field(0, format!("unexpected PDU type {:#x}", ch.pdu_type)))?;
    let hlen = t.hlen();
    if usize::from(ch.hlen) != hlen {
        return Err(PduError::field(
            2,
            format!("HLEN {} for a {t:?} (must be {hlen})", ch.hlen),
        ));
    }
    let plen = ch.plen as usize;
    if matches!(t, PduType::H2CTermReq | PduType::C2HTermReq) {
        if !(TERM_HLEN..=TERM_MAX_PLEN).contains(&plen) {
            return Err(PduError::field(
                4,
                format!("PLEN {plen} of a termination request"),
            ));
        }
        return Ok(Layout {
            pdu_type: t,
            flags: ch.flags,
            hlen,
            header_digest: false,
            pad: 0,
            data_len: plen - hlen,
            data_digest: false,
        });
    }
    if matches!(t, PduType::IcReq | PduType::IcResp) {
        if plen != IC_LEN {
            return Err(PduError::field(4, format!("PLEN {plen} of an IC PDU")));
        }
        return Ok(Layout {
            pdu_type: t,
            flags: ch.flags,
            hlen,
            header_digest: false,
            pad: 0,
            data_len: 0,
            data_digest: false,
        });
    }
    let hdgst = digests.header_len(t);
    if (ch.flags & FLAG_HDGST != 0) != (hdgst != 0) {
        return Err(PduError::field(
            1,
            "header digest flag disagrees with the negotiation",
        ));
    }
    let head = hlen + hdgst;
    if plen < head {
        return Err(PduError::field(
            4,
            format!("PLEN {plen} shorter than the header"),
        ));
    }
    let has_data = plen > head;
    if !has_data {
        if ch.flags & FLAG_DDGST != 0 {
            return Err(PduError::field(1, "data digest flag on a PDU without data"));
        }
        return Ok(Layout {
            pdu_type: t,
            flags: ch.flags,
            hlen,
            header_digest: hdgst != 0,
            pad: 0,
            data_len: 0,
            data_digest: false,
        });
    }
    if !t.may_carry_data() {
        return Err(PduError::field(
            4,
            format!("PLEN {plen}: a {t:?} carries no data"),
        ));
    }
    if (ch.flags & FLAG_DDGST != 0) != digests.data {
        return Err(PduError::field(
            1,
            "data digest flag disagrees with the negotiation",
        ));
    }
    let pdo = usize::from(ch.pdo);
    if pdo < head || pdo > plen {
        return Err(PduError::field(
            3,
            format!("PDO {pdo} outside {head}..={plen}"),
        ));
    }
    let ddgst = if digests.data { DIGEST_LEN } else { 0 };
    let data_len = plen
        .checked_sub(pdo + ddgst)
        .filter(|&n| n > 0)
        .ok_or_else(|| PduError::field(4, format!("PLEN {plen} leaves no room for data")))?;
    if data_len > max_data {
        return Err(PduError {
            fes: Fes::DataLimitExceeded,
            fei: 4,
            reason: format!("{data_len} data bytes in one PDU (limit {max_data})"),
        });
    }
    Ok(Layout {
        pdu_type: t,
        flags: ch.flags,
        hlen,
        header_digest: hdgst != 0,
        pad: pdo - head,
        data_len,
        data_digest: ddgst != 0,
    })
}

/// CRC32C of `bytes`, as NVMe/TCP digests use it.
pub fn digest(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Checks a header digest: `header` is the whole header (common header
/// included), `dgst` the 4 bytes after it.
pub fn check_header_digest(header: &[u8], dgst: &[u8]) -> Result<(), PduError> {
    if dgst.len() == DIGEST_LEN && digest(header).to_le_bytes() == dgst {
        Ok(())
    } else {
        Err(PduError {
            fes: Fes::HeaderDigest,
            fei: 0,
            reason: "header digest mismatch".into(),
        })
    }
}

/// Builds a PDU header of type `t`: common header, the type-specific bytes
/// `specific` (HLEN - 8 of them), and the header digest if enabled. `data`
/// is the length of the data that will follow (its digest is the sender's
/// business: see [`digest`]).
pub fn header(t: PduType, flags: u8, specific: &[u8], data: usize, digests: Digests) -> Vec<u8> {
    let hlen = t.hlen();
    debug_assert_eq!(specific.len(), hlen - CH_LEN);
    let hdgst = digests.header_len(t);
    let ddgst = if data > 0 && digests.data && t.may_carry_data() {
        DIGEST_LEN
    } else {
        0
    };
    let mut flags = flags;
    if hdgst != 0 {
        flags |= FLAG_HDGST;
    }
    if ddgst != 0 {
        flags |= FLAG_DDGST;
    }
    let pdo = if data > 0 { hlen + hdgst } else { 0 };
    let plen = hlen + hdgst + data + ddgst;
    let mut out = vec![0u8; hlen + hdgst];
    CommonHeader {
        pdu_type: t as u8,
        flags,
        hlen: hlen as u8,
        pdo: pdo as u8,
        plen: plen as u32,
    }
    .encode(&mut out);
    out[CH_LEN..hlen].copy_from_slice(specific);
    if hdgst != 0 {
        let d = digest(&out[..hlen]);
        out[hlen..].copy_from_slice(&d.to_le_bytes());
    }
    out
}

/// ICReq: the host's connection parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment (0-based, in dwords).
    pub hpda: u8,
    /// Digests the host asks for.
    pub digests: Digests,
    /// Most R2Ts outstanding per command (0-based).
    pub maxr2t: u32,
}

impl IcReq {
    /// Decodes the 120 bytes after the common header.
    pub fn decode(rest: &[u8]) -> Self {
        let (pfv, hpda, digests, maxr2t) = decode_ic(rest);
        Self {
            pfv,
            hpda,
            digests,
            maxr2t,
        }
    }

    /// Encodes the whole PDU.
    pub fn encode(&self) -> Vec<u8> {
        encode_ic(
            PduType::IcReq,
            self.pfv,
            self.hpda,
            self.digests,
            self.maxr2t,
        )
    }
}

/// ICReq and ICResp share one layout after the common header: PFV, the
/// sender's PDU data alignment, the digests, and a 32-bit limit (MAXR2T,
/// MAXH2CDATA).
fn decode_ic(rest: &[u8]) -> (u16, u8, Digests, u32) {
    (
        u16::from_le_bytes([rest[0], rest[1]]),
        rest[2],
        Digests::from_bits(rest[3]),
        u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]),
    )
}

fn encode_ic(t: PduType, pfv: u16, pda: u8, digests: Digests, limit: u32) -> Vec<u8> {
    let mut s = [0u8; IC_LEN - CH_LEN];
    s[0..2].copy_from_slice(&pfv.to_le_bytes());
    s[2] = pda;
    s[3] = digests.bits();
    s[4..8].copy_from_slice(&limit.to_le_bytes());
    header(t, 0, &s, 0, Digests::default())
}

/// ICResp: the controller's connection parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcResp {
    /// PDU format version (0).
    pub pfv: u16,
    /// Controller PDU data alignment (0-based, in dwords).
    pub cpda: u8,
    /// Digests enabled for the connection.
    pub digests: Digests,
    /// Most data bytes the host may put in one H2CData PDU.
    pub maxh2cdata: u32,
}

impl IcResp {
    /// Decodes the 120 bytes after the common header.
    pub fn decode(rest: &[u8]) -> Self {
        let (pfv, cpda, digests, maxh2cdata) = decode_ic(rest);
        Self {
            pfv,
            cpda,
            digests,
            maxh2cdata,
        }
    }

    /// Encodes the whole PDU.
    pub fn encode(&self) -> Vec<u8> {
        encode_ic(
            PduType::IcResp,
            self.pfv,
            self.cpda,
            self.digests,
            self.maxh2cdata,
        )
    }
}

/// The type-specific part of H2CData, C2HData and R2T: which command,
/// which transfer, and which byte range of the command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// The command's CID.
    pub cccid: u16,
    /// The transfer tag (R2T, H2CData); reserved in C2HData.
    pub ttag: u16,
    /// Offset of this PDU's data in the command's data.
    pub offset: u32,
    /// Length of this PDU's data (R2T: of the data asked for).
    pub len: u32,
}

impl DataHeader {
    /// Decodes the 16 bytes after the common header.
    pub fn decode(rest: &[u8]) -> Self {
        Self {
            cccid: u16::from_le_bytes([rest[0], rest[1]]),
            ttag: u16::from_le_bytes([rest[2], rest[3]]),
            offset: u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]),
            len: u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]),
        }
    }

    /// Builds a whole header of type `t` (H2CData, C2HData or R2T). For
    /// data PDUs `self.len` bytes of data follow it.
    pub fn encode(&self, t: PduType, flags: u8, digests: Digests) -> Vec<u8> {
        let mut s = [0u8; DATA_HLEN - CH_LEN];
        s[0..2].copy_from_slice(&self.cccid.to_le_bytes());
        s[2..4].copy_from_slice(&self.ttag.to_le_bytes());
        s[4..8].copy_from_slice(&self.offset.to_le_bytes());
        s[8..12].copy_from_slice(&self.len.to_le_bytes());
        let data = if t == PduType::R2T {
            0
        } else {
            self.len as usize
        };
        header(t, flags, &s, data, digests)
    }
}

/// Builds a termination request (H2C or C2H) quoting up to 128 bytes of
/// the offending PDU's header.
pub fn term_req(t: PduType, fes: Fes, fei: u32, offending: &[u8]) -> Vec<u8> {
    debug_assert!(matches!(t, PduType::H2CTermReq | PduType::C2HTermReq));
    let quoted = &offending[..offending.len().min(TERM_MAX_PLEN - TERM_HLEN)];
    let mut s = [0u8; TERM_HLEN - CH_LEN];
    s[0..2].copy_from_slice(&(fes as u16).to_le_bytes());
    s[2..6].copy_from_slice(&fei.to_le_bytes());
    let mut out = header(t, 0, &s, 0, Digests::default());
    out.extend_from_slice(quoted);
    let plen = out.len() as u32;
    out[4..8].copy_from_slice(&plen.to_le_bytes());
    out
}

/// Decodes a termination request's FES and FEI from the bytes after the
/// common header.
pub fn decode_term(rest: &[u8]) -> (u16, u32) {
    (
        u16::from_le_bytes([rest[0], rest[1]]),
        u32::from_le_bytes([rest[2], rest[3], rest[4], rest[5]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BOTH: Digests = Digests {
        header: true,
        data: true,
    };

    fn ch(b: &[u8]) -> CommonHeader {
        CommonHeader::decode(b[..CH_LEN].try_into().unwrap())
    }

    #[test]
    fn data_pdu_round_trips_with_digests() {
        let h = DataHeader {
            cccid: 7,
            ttag: 3,
            offset: 4096,
            len: 8192,
        };
        let bytes = h.encode(PduType::H2CData, FLAG_LAST_PDU, BOTH);
        assert_eq!(bytes.len(), DATA_HLEN + DIGEST_LEN);
        let c = ch(&bytes);
        assert_eq!(c.plen as usize, DATA_HLEN + 4 + 8192 + 4);
        let l = validate(&c, BOTH, 1 << 20, &[PduType::H2CData]).unwrap();
        assert_eq!(
            (l.data_len, l.pad, l.header_digest, l.data_digest),
            (8192, 0, true, true)
        );
        check_header_digest(&bytes[..DATA_HLEN], &bytes[DATA_HLEN..]).unwrap();
        assert_eq!(DataHeader::decode(&bytes[CH_LEN..DATA_HLEN]), h);
        let mut bad = bytes.clone();
        bad[10] ^= 1;
        assert_eq!(
            check_header_digest(&bad[..DATA_HLEN], &bad[DATA_HLEN..])
                .unwrap_err()
                .fes,
            Fes::HeaderDigest
        );
    }

    #[test]
    fn validation_names_the_bad_field() {
        let good = DataHeader {
            cccid: 1,
            ttag: 0,
            offset: 0,
            len: 4096,
        }
        .encode(PduType::C2HData, 0, Digests::default());
        let allowed = [PduType::C2HData];
        let nd = Digests::default();
        let mut c = ch(&good);
        c.hlen = 25;
        assert_eq!(validate(&c, nd, 1 << 20, &allowed).unwrap_err().fei, 2);
        let mut c = ch(&good);
        c.pdo = 8;
        assert_eq!(validate(&c, nd, 1 << 20, &allowed).unwrap_err().fei, 3);
        let mut c = ch(&good);
        c.flags |= FLAG_HDGST;
        assert_eq!(validate(&c, nd, 1 << 20, &allowed).unwrap_err().fei, 1);
        let c = ch(&good);
        assert_eq!(
            validate(&c, nd, 1024, &allowed).unwrap_err().fes,
            Fes::DataLimitExceeded
        );
        assert_eq!(
            validate(&c, nd, 1 << 20, &[PduType::R2T]).unwrap_err().fei,
            0
        );
    }

    #[test]
    fn ic_and_term_requests_encode_their_fields() {
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            digests: BOTH,
            maxr2t: 0,
        };
        let b = req.encode();
        assert_eq!(b.len(), IC_LEN);
        assert_eq!(IcReq::decode(&b[CH_LEN..]), req);
        let t = term_req(PduType::C2HTermReq, Fes::InvalidHeaderField, 2, &b[..72]);
        assert_eq!(t.len(), TERM_HLEN + 72);
        let c = ch(&t);
        assert_eq!(c.plen as usize, t.len());
        assert_eq!(decode_term(&t[CH_LEN..]), (1, 2));
        assert_eq!(
            term_req(PduType::C2HTermReq, Fes::SequenceError, 0, &[0; 500]).len(),
            152
        );
    }

    proptest! {
        /// Any 8 bytes either validate to a layout whose parts add up to
        /// PLEN within the bound, or are refused; never a panic.
        #[test]
        fn any_common_header_is_checked(b in proptest::array::uniform8(any::<u8>()), hd: bool, dd: bool) {
            let c = CommonHeader::decode(&b);
            let d = Digests { header: hd, data: dd };
            let all = [PduType::CapsuleCmd, PduType::H2CData, PduType::H2CTermReq, PduType::IcReq];
            if let Ok(l) = validate(&c, d, 1 << 20, &all) {
                let total = l.hlen + if l.header_digest { 4 } else { 0 } + l.pad + l.data_len
                    + if l.data_digest { 4 } else { 0 };
                prop_assert_eq!(total, c.plen as usize);
                prop_assert!(l.data_len <= 1 << 20 || !l.pdu_type.may_carry_data());
            }
        }
    }
}
