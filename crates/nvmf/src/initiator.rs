//! A small blocking NVMe/TCP host, for tests and benchmarks of the target
//! (and of any other NVMe/TCP controller).
//!
//! [`Queue`] is one NVMe/TCP connection: the ICReq/ICResp exchange, the
//! Fabrics Connect, and commands with their data moved in-capsule, by
//! R2T/H2CData (writes) or by C2HData (reads), header and data digests
//! included. Commands can be pipelined ([`Queue::submit`] and
//! [`Queue::reap`]) or sent one at a time ([`Queue::call`]).
//! [`Controller`] does what a host does on top: admin queue, enable,
//! Identify, Number of Queues, I/O queues, and the admin commands tests
//! need. [`discover`] reads a discovery controller's log page. A
//! controller that asks for in-band authentication (the Connect
//! response's ATR bit) gets DH-HMAC-CHAP on every queue
//! ([`Queue::authenticate`]) with the [`HostCredentials`] in
//! [`ControllerOptions::auth`].
//!
//! Everything the target sends is checked before it is used (PDU layout,
//! digests, which command a PDU names, data offsets and lengths), and every
//! socket operation has a timeout, so a broken target fails a test rather
//! than hanging it. The PDU encoding is the crate's own [`crate::pdu`] and
//! [`crate::command`].

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::DISCOVERY_NQN;
use crate::auth::message::{CONNECT_ASCR, CONNECT_ATR, MAX_MESSAGE, SECP_DHCHAP, SPSP};
use crate::auth::{AuthSummary, HostAuthError, HostCredentials, HostExchange};
use crate::command::{
    CQE_LEN, Cqe, FABRICS_OPCODE, SGL_IN_CAPSULE, SGL_TRANSPORT, Sgl, Sqe, Status, admin_op,
    fctype, io_op,
};
use crate::pdu::{
    self, CH_LEN, CommonHeader, DIGEST_LEN, DataHeader, Digests, IcReq, IcResp, Layout, PduType,
};

/// Default timeout of every socket operation and of waits for the target.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// In-capsule data the admin queue takes (NVMe/TCP fixes it at 8 KiB).
pub const ADMIN_IN_CAPSULE: usize = 8192;
/// Length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// The CNTLID a host sends in an admin queue's Connect (dynamic controller).
pub const DYNAMIC_CNTLID: u16 = 0xFFFF;
/// Default keep-alive timeout of [`ControllerOptions`], in milliseconds.
pub const DEFAULT_KATO_MS: u32 = 30_000;
/// Largest data one received PDU may carry before the initiator refuses it.
const MAX_RECV_PDU_DATA: usize = 16 << 20;

/// Controller property offsets and bits (NVMe base specification, 3.1).
pub mod reg {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// CC.EN: enable.
    pub const CC_EN: u32 = 1;
    /// CC.IOSQES = 6 (64-byte SQEs).
    pub const CC_IOSQES: u32 = 6 << 16;
    /// CC.IOCQES = 4 (16-byte CQEs).
    pub const CC_IOCQES: u32 = 4 << 20;
    /// CC.SHN = 01b: normal shutdown notification.
    pub const CC_SHN_NORMAL: u32 = 1 << 14;
    /// CC.SHN mask (bits 15:14).
    pub const CC_SHN_MASK: u32 = 3 << 14;
    /// CSTS.RDY.
    pub const CSTS_RDY: u32 = 1;
    /// CSTS.CFS: controller fatal status.
    pub const CSTS_CFS: u32 = 1 << 1;
    /// CSTS.SHST mask (bits 3:2).
    pub const CSTS_SHST_MASK: u32 = 3 << 2;
    /// CSTS.SHST = 10b: shutdown processing complete.
    pub const CSTS_SHST_COMPLETE: u32 = 2 << 2;
}

/// Log page identifiers.
pub mod log_page {
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

/// Feature identifiers.
pub mod feature {
    /// Number of Queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Asynchronous Event Configuration bit: namespace attribute notices.
    pub const AEC_NS_ATTR: u32 = 1 << 8;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESCRIPTORS: u8 = 0x03;
}

/// What went wrong talking to a target.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A socket operation failed.
    #[error("I/O error: {0}")]
    Io(io::Error),
    /// The target did not answer in time.
    #[error("timed out waiting for the target")]
    Timeout,
    /// The target closed (or reset) the connection.
    #[error("connection closed by the target")]
    Closed,
    /// The target sent something the protocol does not allow.
    #[error("protocol violation by the target: {0}")]
    Protocol(String),
    /// The target sent a C2HTermReq.
    #[error("target terminated the connection (C2HTermReq FES {fes:#x}, FEI {fei})")]
    Terminated {
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
    /// A command completed with an error status (a refused Connect too).
    #[error("command failed with {status:?} (dw0 {dw0:#x})")]
    Status {
        /// The NVMe status.
        status: Status,
        /// Completion dword 0 (Connect: which parameter was invalid).
        dw0: u32,
    },
    /// The caller asked for something this initiator cannot send.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The controller requires DH-HMAC-CHAP and no host secret was given.
    #[error("the controller requires DH-HMAC-CHAP authentication and no host secret was given")]
    AuthRequired,
    /// DH-HMAC-CHAP failed: the controller refused the host, or the
    /// controller did not prove the controller secret.
    #[error("DH-HMAC-CHAP authentication of queue {qid} failed: {error}")]
    Auth {
        /// The queue.
        qid: u16,
        /// What went wrong.
        error: HostAuthError,
    },
}

impl Error {
    /// The NVMe status of a failed command, if that is what this is.
    pub fn status(&self) -> Option<Status> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Self::Timeout,
            ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => Self::Closed,
            _ => Self::Io(e),
        }
    }
}

/// Result of the initiator's operations.
pub type Result<T> = std::result::Result<T, Error>;

/// Parameters of a queue's Fabrics Connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The subsystem's NQN.
    pub subnqn: String,
    /// The host's NQN.
    pub hostnqn: String,
    /// The host identifier.
    pub hostid: [u8; 16],
    /// Queue id: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Keep-alive timeout in milliseconds (admin queue; 0 disables).
    pub kato_ms: u32,
    /// [`DYNAMIC_CNTLID`] for an admin queue, the admin queue's controller
    /// id for an I/O queue.
    pub cntlid: u16,
    /// Header and data digests to ask for.
    pub digests: Digests,
}

impl Default for ConnectParams {
    fn default() -> Self {
        Self {
            subnqn: String::new(),
            hostnqn: String::new(),
            hostid: [0; 16],
            qid: 0,
            sqsize: 31,
            kato_ms: DEFAULT_KATO_MS,
            cntlid: DYNAMIC_CNTLID,
            digests: Digests::default(),
        }
    }
}

/// A finished command: its completion and, for a read, its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The completion queue entry.
    pub cqe: Cqe,
    /// Data the target sent (empty unless the command read data; shorter
    /// than asked for if the command moved less than its SGL allows).
    pub data: Vec<u8>,
    /// Bytes the command moved: read data received, or write data sent
    /// (in the capsule or on R2Ts).
    pub transferred: usize,
}

/// Counts of what crossed one connection, so tests can check which data
/// path was used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Commands submitted.
    pub commands: u64,
    /// Writes whose data went in the command capsule.
    pub in_capsule_writes: u64,
    /// R2T PDUs answered.
    pub r2ts: u64,
    /// H2CData PDUs sent.
    pub h2c_pdus: u64,
    /// C2HData PDUs received.
    pub c2h_pdus: u64,
}

/// A PDU as received, for tests that look at raw protocol exchanges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPdu {
    /// Its type.
    pub pdu_type: PduType,
    /// Common header flags.
    pub flags: u8,
    /// The header (HLEN bytes, common header included, digest excluded).
    pub header: Vec<u8>,
    /// The data (without padding or digest); a termination request's
    /// quoted header.
    pub data: Vec<u8>,
}

impl RawPdu {
    /// A termination request's (FES, FEI).
    pub fn term(&self) -> Option<(u16, u32)> {
        matches!(self.pdu_type, PduType::C2HTermReq | PduType::H2CTermReq)
            .then(|| pdu::decode_term(&self.header[CH_LEN..]))
    }

    /// A response capsule's CQE.
    pub fn cqe(&self) -> Option<Cqe> {
        (self.pdu_type == PduType::CapsuleResp).then(|| cqe_of(&self.header))
    }

    /// The data header of an R2T, H2CData or C2HData.
    pub fn data_header(&self) -> Option<DataHeader> {
        matches!(
            self.pdu_type,
            PduType::R2T | PduType::H2CData | PduType::C2HData
        )
        .then(|| DataHeader::decode(&self.header[CH_LEN..]))
    }
}

fn cqe_of(header: &[u8]) -> Cqe {
    let mut b = [0u8; CQE_LEN];
    b.copy_from_slice(&header[CH_LEN..CH_LEN + CQE_LEN]);
    Cqe::decode(&b)
}

/// PDU types a controller may send to a host once the connection is up.
const C2H_TYPES: [PduType; 4] = [
    PduType::CapsuleResp,
    PduType::C2HData,
    PduType::R2T,
    PduType::C2HTermReq,
];

/// Reads one whole PDU from `r`, checking its layout and digests. For
/// raw exchanges (before ICResp pass `Digests::default()`).
pub fn read_pdu(r: &mut impl Read, digests: Digests, allowed: &[PduType]) -> Result<RawPdu> {
    let mut ch = [0u8; CH_LEN];
    r.read_exact(&mut ch)?;
    let (layout, header) = read_header_rest(r, ch, digests, allowed)?;
    let mut data = vec![0u8; layout.data_len];
    read_data(r, &layout, &mut data)?;
    Ok(RawPdu {
        pdu_type: layout.pdu_type,
        flags: layout.flags,
        header,
        data,
    })
}

/// Given the common header, reads and checks the rest of the header and
/// its digest; returns the layout and the HLEN header bytes.
fn read_header_rest(
    r: &mut impl Read,
    ch: [u8; CH_LEN],
    digests: Digests,
    allowed: &[PduType],
) -> Result<(Layout, Vec<u8>)> {
    let c = CommonHeader::decode(&ch);
    let layout = pdu::validate(&c, digests, MAX_RECV_PDU_DATA, allowed)
        .map_err(|e| Error::Protocol(format!("bad PDU header {ch:02x?}: {e}")))?;
    let mut header = vec![0u8; CH_LEN + layout.rest_of_header()];
    header[..CH_LEN].copy_from_slice(&ch);
    r.read_exact(&mut header[CH_LEN..])?;
    if layout.header_digest {
        pdu::check_header_digest(&header[..layout.hlen], &header[layout.hlen..])
            .map_err(|e| Error::Protocol(format!("{:?}: {e}", layout.pdu_type)))?;
    }
    header.truncate(layout.hlen);
    let mut pad = vec![0u8; layout.pad];
    r.read_exact(&mut pad)?;
    Ok((layout, header))
}

/// Reads a PDU's data (exactly `layout.data_len` bytes) into `out` and
/// checks its digest.
fn read_data(r: &mut impl Read, layout: &Layout, out: &mut [u8]) -> Result<()> {
    r.read_exact(out)?;
    if layout.data_digest {
        let mut d = [0u8; DIGEST_LEN];
        r.read_exact(&mut d)?;
        if pdu::digest(out).to_le_bytes() != d {
            return Err(Error::Protocol(format!(
                "{:?}: data digest mismatch",
                layout.pdu_type
            )));
        }
    }
    Ok(())
}

/// One outstanding command.
#[derive(Debug)]
struct Pending {
    /// Write data still to be sent on R2Ts (transport SGL writes only).
    out: Option<Vec<u8>>,
    /// Bytes of `out` asked for by R2Ts so far.
    r2t_asked: usize,
    /// Read buffer (len = bytes expected).
    input: Vec<u8>,
    /// Bytes of `input` received so far (C2HData arrive in order).
    got: usize,
    /// The last C2HData has arrived.
    last_seen: bool,
}

/// One NVMe/TCP connection (one queue pair).
pub struct Queue {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    digests: Digests,
    maxh2cdata: usize,
    h2c_pdu_limit: Option<usize>,
    cpda: u8,
    qid: u16,
    sqsize: u16,
    cntlid: u16,
    in_capsule: usize,
    block_size: u32,
    timeout: Duration,
    next_cid: u16,
    pending: HashMap<u16, Pending>,
    done: VecDeque<Completion>,
    stats: QueueStats,
    sendbuf: Vec<u8>,
    /// The Connect response asked for authentication (ATR).
    auth_required: bool,
    /// Authentication transactions started (their ids).
    next_tid: u16,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("qid", &self.qid)
            .field("cntlid", &self.cntlid)
            .field("digests", &self.digests)
            .field("in_flight", &self.pending.len())
            .finish()
    }
}

fn tcp_connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<TcpStream> {
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(
        || Error::Invalid("address resolved to nothing".into()),
        Error::from,
    ))
}

impl Queue {
    /// Connects a queue: TCP, ICReq/ICResp, then the Fabrics Connect.
    /// A refused Connect is an [`Error::Status`] carrying its status.
    pub fn connect(addr: impl ToSocketAddrs, params: ConnectParams) -> Result<Self> {
        let mut q = Self::handshake(addr, params.digests, DEFAULT_TIMEOUT)?;
        q.fabrics_connect(&params)?;
        Ok(q)
    }

    /// TCP connect and the ICReq/ICResp exchange only (no Connect yet):
    /// checks PFV 0, MAXH2CDATA >= 4096 and that the digests asked for
    /// are the ones enabled.
    pub fn handshake(
        addr: impl ToSocketAddrs,
        digests: Digests,
        timeout: Duration,
    ) -> Result<Self> {
        let stream = tcp_connect(addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone()?;
        let mut q = Self {
            reader: BufReader::with_capacity(256 << 10, stream),
            writer,
            digests: Digests::default(),
            maxh2cdata: pdu::MIN_MAXH2CDATA as usize,
            h2c_pdu_limit: None,
            cpda: 0,
            qid: 0,
            sqsize: 0,
            cntlid: DYNAMIC_CNTLID,
            in_capsule: 0,
            block_size: 4096,
            timeout,
            next_cid: 0,
            pending: HashMap::new(),
            done: VecDeque::new(),
            stats: QueueStats::default(),
            sendbuf: Vec::new(),
            auth_required: false,
            next_tid: 0,
        };
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            digests,
            maxr2t: 0,
        };
        q.send_raw(&req.encode())?;
        let p = read_pdu(
            &mut q.reader,
            Digests::default(),
            &[PduType::IcResp, PduType::C2HTermReq],
        )?;
        if let Some((fes, fei)) = p.term() {
            return Err(Error::Terminated { fes, fei });
        }
        let resp = IcResp::decode(&p.header[CH_LEN..]);
        if resp.pfv != 0 {
            return Err(Error::Protocol(format!("ICResp PFV {}", resp.pfv)));
        }
        if resp.maxh2cdata < pdu::MIN_MAXH2CDATA {
            return Err(Error::Protocol(format!(
                "ICResp MAXH2CDATA {} < {}",
                resp.maxh2cdata,
                pdu::MIN_MAXH2CDATA
            )));
        }
        if resp.digests != digests {
            return Err(Error::Protocol(format!(
                "asked for digests {digests:?}, ICResp enabled {:?}",
                resp.digests
            )));
        }
        if resp.cpda > 31 {
            return Err(Error::Protocol(format!("ICResp CPDA {}", resp.cpda)));
        }
        q.digests = resp.digests;
        q.maxh2cdata = resp.maxh2cdata as usize;
        q.cpda = resp.cpda;
        Ok(q)
    }

    /// Sends the Fabrics Connect (in-capsule data, 1024 bytes) and returns
    /// the controller id from the response.
    pub fn fabrics_connect(&mut self, p: &ConnectParams) -> Result<u16> {
        for (name, nqn) in [("subsystem", &p.subnqn), ("host", &p.hostnqn)] {
            if nqn.len() > 255 {
                return Err(Error::Invalid(format!("{name} NQN longer than 255 bytes")));
            }
        }
        let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
        sqe.0[4] = fctype::CONNECT;
        sqe.0[40..42].copy_from_slice(&0u16.to_le_bytes());
        sqe.0[42..44].copy_from_slice(&p.qid.to_le_bytes());
        sqe.0[44..46].copy_from_slice(&p.sqsize.to_le_bytes());
        sqe.0[46] = 0;
        sqe.0[48..52].copy_from_slice(&p.kato_ms.to_le_bytes());
        let mut data = vec![0u8; CONNECT_DATA_LEN];
        data[0..16].copy_from_slice(&p.hostid);
        data[16..18].copy_from_slice(&p.cntlid.to_le_bytes());
        data[256..256 + p.subnqn.len()].copy_from_slice(p.subnqn.as_bytes());
        data[512..512 + p.hostnqn.len()].copy_from_slice(p.hostnqn.as_bytes());
        self.qid = p.qid;
        // Until the Connect completes, one command may be in flight.
        self.sqsize = p.sqsize;
        let cid = self.submit_inner(sqe, Some(&data), 0, CONNECT_DATA_LEN)?;
        let c = self.wait_for(cid)?;
        if !c.cqe.status.is_success() {
            return Err(Error::Status {
                status: c.cqe.status,
                dw0: c.cqe.dw0,
            });
        }
        self.cntlid = c.cqe.dw0 as u16;
        if c.cqe.dw0 & CONNECT_ASCR != 0 {
            return Err(Error::Protocol(
                "the controller requires a secure channel (ASCR), which this initiator lacks"
                    .into(),
            ));
        }
        self.auth_required = c.cqe.dw0 & CONNECT_ATR != 0;
        if p.qid == 0 {
            self.in_capsule = ADMIN_IN_CAPSULE;
        }
        Ok(self.cntlid)
    }

    /// Whether the Connect response asked this queue to authenticate
    /// (ATR) before anything else.
    pub fn auth_required(&self) -> bool {
        self.auth_required
    }

    /// One DH-HMAC-CHAP transaction on this queue as `hostnqn` with
    /// subsystem `subnqn`: Negotiate, Challenge, Reply, Success1 (and
    /// Success2 or Failure2 when `creds` hold a controller secret). A
    /// refusal by the controller, or a controller whose response does not
    /// match the controller secret, is an [`Error::Auth`].
    pub fn authenticate(
        &mut self,
        creds: &HostCredentials,
        hostnqn: &str,
        subnqn: &str,
    ) -> Result<AuthSummary> {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1);
        let qid = self.qid;
        let fail = |error| Error::Auth { qid, error };
        let mut x = HostExchange::new(creds.clone(), hostnqn, subnqn, tid);
        self.auth_send(&x.negotiate())?;
        let challenge = self.auth_receive(4096)?;
        let reply = x.reply(&challenge).map_err(fail)?;
        self.auth_send(&reply)?;
        let success1 = self.auth_receive(4096)?;
        let finish = x.success1(&success1);
        if let Some(m) = finish.send {
            self.auth_send(&m)?;
        }
        let summary = finish.result.map_err(fail)?;
        self.auth_required = false;
        Ok(summary)
    }

    fn auth_sqe(fctype: u8, len: usize) -> Result<Sqe> {
        if len == 0 || len > MAX_MESSAGE {
            return Err(Error::Invalid(format!(
                "authentication message of {len} bytes"
            )));
        }
        let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
        sqe.0[4] = fctype;
        sqe.0[41] = SPSP;
        sqe.0[42] = SPSP;
        sqe.0[43] = SECP_DHCHAP;
        sqe.set_dword(11, len as u32);
        Ok(sqe)
    }

    /// AUTH_Send with `msg` as its data.
    pub fn auth_send(&mut self, msg: &[u8]) -> Result<()> {
        let sqe = Self::auth_sqe(fctype::AUTH_SEND, msg.len())?;
        self.call_ok(sqe, Some(msg), 0)?;
        Ok(())
    }

    /// AUTH_Receive of `al` bytes.
    pub fn auth_receive(&mut self, al: usize) -> Result<Vec<u8>> {
        let sqe = Self::auth_sqe(fctype::AUTH_RECEIVE, al)?;
        let (_, data) = self.call_ok(sqe, None, al)?;
        Ok(data)
    }

    /// The controller id the Connect returned.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The queue id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The digests enabled on this connection.
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// The target's MAXH2CDATA.
    pub fn maxh2cdata(&self) -> usize {
        self.maxh2cdata
    }

    /// Makes every H2CData PDU carry at most `bytes` (below MAXH2CDATA),
    /// as hosts may: the target must take any split. None: MAXH2CDATA.
    pub fn set_h2c_pdu_limit(&mut self, bytes: Option<usize>) {
        self.h2c_pdu_limit = bytes.map(|b| b.max(1));
    }

    /// Largest write data sent in the command capsule (larger writes wait
    /// for R2Ts). 8 KiB on the admin queue; 0 on an I/O queue until set
    /// (the [`Controller`] sets it from Identify's IOCCSZ).
    pub fn in_capsule(&self) -> usize {
        self.in_capsule
    }

    /// Sets the in-capsule data limit.
    pub fn set_in_capsule(&mut self, bytes: usize) {
        self.in_capsule = bytes;
    }

    /// The logical block size the I/O helpers use (4096 by default).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Sets the logical block size the I/O helpers use.
    pub fn set_block_size(&mut self, bytes: u32) {
        self.block_size = bytes;
    }

    /// The timeout of socket operations.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the timeout of socket operations.
    pub fn set_timeout(&mut self, t: Duration) -> Result<()> {
        self.timeout = t;
        self.writer.set_read_timeout(Some(t))?;
        self.writer.set_write_timeout(Some(t))?;
        Ok(())
    }

    /// What crossed this connection so far.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Commands submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.pending.len() + self.done.len()
    }

    /// Sends bytes as they are (for tests of malformed PDUs).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.write_all(bytes)?;
        Ok(())
    }

    /// Receives the next PDU as it is, without acting on it (for tests).
    pub fn recv_pdu(&mut self) -> Result<RawPdu> {
        read_pdu(&mut self.reader, self.digests, &C2H_TYPES)
    }

    /// Waits up to `within` for the target to close the connection,
    /// discarding whatever it sends meanwhile. True if it closed.
    pub fn wait_closed(&mut self, within: Duration) -> Result<bool> {
        let deadline = Instant::now() + within;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            self.writer.set_read_timeout(Some(left))?;
            let r = self.reader.read(&mut buf);
            self.writer.set_read_timeout(Some(self.timeout))?;
            match r {
                Ok(0) => return Ok(true),
                Ok(_) => {}
                Err(e) => match Error::from(e) {
                    Error::Closed => return Ok(true),
                    Error::Timeout => return Ok(false),
                    e => return Err(e),
                },
            }
        }
    }

    /// Closes the connection (both directions).
    pub fn close(self) {
        let _ = self.writer.shutdown(Shutdown::Both);
    }

    /// The underlying socket (for tests that need it, e.g. half-close).
    pub fn socket(&self) -> &TcpStream {
        &self.writer
    }

    /// Sends a command without waiting for it: `data_out` is write data
    /// (in-capsule if it fits, else sent on the target's R2Ts while
    /// reaping), `data_in_len` the bytes a read expects. The command id
    /// in `sqe` is replaced; the one used is returned. At most SQSIZE + 1
    /// commands may be in flight.
    pub fn submit(&mut self, sqe: Sqe, data_out: Option<&[u8]>, data_in_len: usize) -> Result<u16> {
        self.submit_inner(sqe, data_out, data_in_len, self.in_capsule)
    }

    fn submit_inner(
        &mut self,
        mut sqe: Sqe,
        data_out: Option<&[u8]>,
        data_in_len: usize,
        in_capsule: usize,
    ) -> Result<u16> {
        if self.pending.len() > usize::from(self.sqsize) {
            return Err(Error::Invalid(format!(
                "{} commands in flight on a queue of {} entries",
                self.pending.len(),
                u32::from(self.sqsize) + 1
            )));
        }
        let data_out = data_out.filter(|d| !d.is_empty());
        if data_out.is_some() && data_in_len > 0 {
            return Err(Error::Invalid(
                "a command cannot both read and write".into(),
            ));
        }
        let len = data_out.map_or(data_in_len, <[u8]>::len);
        let len32 = u32::try_from(len)
            .map_err(|_| Error::Invalid(format!("{len} bytes in one command")))?;
        let cid = self.alloc_cid();
        sqe.0[2..4].copy_from_slice(&cid.to_le_bytes());
        let mut pending = Pending {
            out: None,
            r2t_asked: 0,
            input: Vec::new(),
            got: 0,
            last_seen: false,
        };
        let capsule_data: &[u8] = match data_out {
            Some(d) if d.len() <= in_capsule => {
                sqe.set_sgl(Sgl {
                    addr: 0,
                    len: len32,
                    id: SGL_IN_CAPSULE,
                });
                self.stats.in_capsule_writes += 1;
                pending.r2t_asked = d.len();
                d
            }
            Some(d) => {
                sqe.set_sgl(Sgl {
                    addr: 0,
                    len: len32,
                    id: SGL_TRANSPORT,
                });
                pending.out = Some(d.to_vec());
                &[]
            }
            None => {
                sqe.set_sgl(Sgl {
                    addr: 0,
                    len: len32,
                    id: SGL_TRANSPORT,
                });
                pending.input = vec![0u8; data_in_len];
                &[]
            }
        };
        let hdr = pdu::header(
            PduType::CapsuleCmd,
            0,
            &sqe.0,
            capsule_data.len(),
            self.digests,
        );
        self.send_pdu(hdr, capsule_data)?;
        self.pending.insert(cid, pending);
        self.stats.commands += 1;
        Ok(cid)
    }

    fn alloc_cid(&mut self) -> u16 {
        loop {
            let cid = self.next_cid;
            self.next_cid = self.next_cid.wrapping_add(1);
            if !self.pending.contains_key(&cid) && !self.done.iter().any(|c| c.cqe.cid == cid) {
                return cid;
            }
        }
    }

    /// Sends a PDU header (from [`pdu::header`]) and its data, adding the
    /// padding CPDA asks for and the data digest.
    fn send_pdu(&mut self, mut hdr: Vec<u8>, data: &[u8]) -> Result<()> {
        let mut pad = 0;
        if !data.is_empty() && self.cpda != 0 {
            let align = (usize::from(self.cpda) + 1) * 4;
            pad = (align - hdr.len() % align) % align;
            if pad != 0 {
                let mut ch = [0u8; CH_LEN];
                ch.copy_from_slice(&hdr[..CH_LEN]);
                let mut c = CommonHeader::decode(&ch);
                c.pdo += pad as u8;
                c.plen += pad as u32;
                c.encode(&mut hdr);
                let hlen = usize::from(c.hlen);
                if hdr.len() > hlen {
                    let d = pdu::digest(&hdr[..hlen]);
                    hdr[hlen..].copy_from_slice(&d.to_le_bytes());
                }
            }
        }
        let mut buf = std::mem::take(&mut self.sendbuf);
        buf.clear();
        buf.extend_from_slice(&hdr);
        buf.resize(buf.len() + pad, 0);
        buf.extend_from_slice(data);
        if !data.is_empty() && self.digests.data {
            buf.extend_from_slice(&pdu::digest(data).to_le_bytes());
        }
        let r = self.writer.write_all(&buf);
        self.sendbuf = buf;
        r?;
        Ok(())
    }

    /// Waits for the next completion of any command in flight (answering
    /// R2Ts and collecting read data meanwhile).
    pub fn reap(&mut self) -> Result<Completion> {
        if let Some(c) = self.done.pop_front() {
            return Ok(c);
        }
        if self.pending.is_empty() {
            return Err(Error::Invalid("no command in flight".into()));
        }
        loop {
            if let Some(c) = self.step(None)? {
                return Ok(c);
            }
        }
    }

    /// Waits for the completion of command `cid`, keeping others that
    /// complete meanwhile for [`Queue::reap`].
    pub fn wait_for(&mut self, cid: u16) -> Result<Completion> {
        self.wait_for_inner(cid, None)
    }

    /// Like [`Queue::wait_for`], but gives up with [`Error::Timeout`]
    /// after `within` if no PDU at all arrives (the queue stays usable).
    pub fn wait_for_timeout(&mut self, cid: u16, within: Duration) -> Result<Completion> {
        self.wait_for_inner(cid, Some(Instant::now() + within))
    }

    fn wait_for_inner(&mut self, cid: u16, deadline: Option<Instant>) -> Result<Completion> {
        loop {
            if let Some(i) = self.done.iter().position(|c| c.cqe.cid == cid)
                && let Some(c) = self.done.remove(i)
            {
                return Ok(c);
            }
            if !self.pending.contains_key(&cid) {
                return Err(Error::Invalid(format!("command {cid} is not in flight")));
            }
            let wait = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::Timeout);
                    }
                    Some(left)
                }
                None => None,
            };
            if let Some(c) = self.step(wait)? {
                if c.cqe.cid == cid {
                    return Ok(c);
                }
                self.done.push_back(c);
            }
        }
    }

    /// Sends one command and waits for it: returns its CQE (whatever the
    /// status) and the data it read.
    pub fn call(
        &mut self,
        sqe: Sqe,
        data_out: Option<&[u8]>,
        data_in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        let cid = self.submit(sqe, data_out, data_in_len)?;
        let c = self.wait_for(cid)?;
        Ok((c.cqe, c.data))
    }

    /// Like [`Queue::call`], but a status other than success is an
    /// [`Error::Status`].
    pub fn call_ok(
        &mut self,
        sqe: Sqe,
        data_out: Option<&[u8]>,
        data_in_len: usize,
    ) -> Result<(Cqe, Vec<u8>)> {
        let (cqe, data) = self.call(sqe, data_out, data_in_len)?;
        check(&cqe)?;
        Ok((cqe, data))
    }

    /// Reads the first byte of the next PDU, waiting at most `wait` (if
    /// given) for it: a timeout then leaves the stream in step.
    fn read_common_header(&mut self, wait: Option<Duration>) -> Result<[u8; CH_LEN]> {
        let mut ch = [0u8; CH_LEN];
        if let Some(w) = wait {
            self.writer
                .set_read_timeout(Some(w.max(Duration::from_millis(1))))?;
            let r = self.reader.read(&mut ch[..1]);
            self.writer.set_read_timeout(Some(self.timeout))?;
            match r {
                Ok(0) => return Err(Error::Closed),
                Ok(_) => {}
                Err(e) => return Err(e.into()),
            }
            self.reader.read_exact(&mut ch[1..])?;
        } else {
            self.reader.read_exact(&mut ch)?;
        }
        Ok(ch)
    }

    /// Receives and handles one PDU; returns a completion if it was one.
    fn step(&mut self, wait: Option<Duration>) -> Result<Option<Completion>> {
        let ch = self.read_common_header(wait)?;
        let (layout, header) = read_header_rest(&mut self.reader, ch, self.digests, &C2H_TYPES)?;
        match layout.pdu_type {
            PduType::CapsuleResp => {
                let cqe = cqe_of(&header);
                let mut p = self.pending.remove(&cqe.cid).ok_or_else(|| {
                    Error::Protocol(format!("response for command {} not in flight", cqe.cid))
                })?;
                // A command may move less than its SGL describes (Get
                // Features, say); the Read and Write helpers check theirs.
                let transferred = if p.input.is_empty() {
                    p.r2t_asked
                } else {
                    p.got
                };
                p.input.truncate(p.got);
                Ok(Some(Completion {
                    cqe,
                    data: p.input,
                    transferred,
                }))
            }
            PduType::C2HData => {
                let dh = DataHeader::decode(&header[CH_LEN..]);
                let p = self.pending.get_mut(&dh.cccid).ok_or_else(|| {
                    Error::Protocol(format!("C2HData for command {} not in flight", dh.cccid))
                })?;
                let (off, len) = (dh.offset as usize, dh.len as usize);
                if len != layout.data_len {
                    return Err(Error::Protocol(format!(
                        "C2HData DATAL {len} but {} data bytes",
                        layout.data_len
                    )));
                }
                if p.last_seen || off != p.got || off + len > p.input.len() {
                    return Err(Error::Protocol(format!(
                        "C2HData for command {} at {off}+{len}: expected offset {} of {}{}",
                        dh.cccid,
                        p.got,
                        p.input.len(),
                        if p.last_seen {
                            " after its last PDU"
                        } else {
                            ""
                        }
                    )));
                }
                read_data(&mut self.reader, &layout, &mut p.input[off..off + len])?;
                p.got += len;
                self.stats.c2h_pdus += 1;
                if layout.flags & pdu::FLAG_LAST_PDU != 0 {
                    p.last_seen = true;
                    if p.got != p.input.len() {
                        return Err(Error::Protocol(format!(
                            "C2HData LAST_PDU for command {} after {} of {} bytes",
                            dh.cccid,
                            p.got,
                            p.input.len()
                        )));
                    }
                }
                if layout.flags & pdu::FLAG_SUCCESS != 0 {
                    return Err(Error::Protocol(format!(
                        "C2HData SUCCESS flag for command {}, but this host did not disable \
                         SQ flow control",
                        dh.cccid
                    )));
                }
                Ok(None)
            }
            PduType::R2T => {
                let dh = DataHeader::decode(&header[CH_LEN..]);
                self.answer_r2t(dh)?;
                Ok(None)
            }
            PduType::C2HTermReq => {
                let mut quoted = vec![0u8; layout.data_len];
                let _ = self.reader.read_exact(&mut quoted);
                let (fes, fei) = pdu::decode_term(&header[CH_LEN..]);
                Err(Error::Terminated { fes, fei })
            }
            t => Err(Error::Protocol(format!("unexpected {t:?}"))),
        }
    }

    fn answer_r2t(&mut self, dh: DataHeader) -> Result<()> {
        let p = self.pending.get_mut(&dh.cccid).ok_or_else(|| {
            Error::Protocol(format!("R2T for command {} not in flight", dh.cccid))
        })?;
        let Some(out) = p.out.take() else {
            return Err(Error::Protocol(format!(
                "R2T for command {} that has no data to transfer",
                dh.cccid
            )));
        };
        let (off, len) = (dh.offset as usize, dh.len as usize);
        if len == 0 || off + len > out.len() || off != p.r2t_asked {
            let e = Error::Protocol(format!(
                "R2T for command {} asks {off}+{len} of {} bytes ({} asked before)",
                dh.cccid,
                out.len(),
                p.r2t_asked
            ));
            p.out = Some(out);
            return Err(e);
        }
        p.r2t_asked += len;
        self.stats.r2ts += 1;
        let mut at = off;
        let end = off + len;
        let mut result = Ok(());
        let chunk = self
            .h2c_pdu_limit
            .map_or(self.maxh2cdata, |l| l.min(self.maxh2cdata));
        while at < end {
            let n = (end - at).min(chunk);
            let last = at + n == end;
            let h = DataHeader {
                cccid: dh.cccid,
                ttag: dh.ttag,
                offset: at as u32,
                len: n as u32,
            }
            .encode(
                PduType::H2CData,
                if last { pdu::FLAG_LAST_PDU } else { 0 },
                self.digests,
            );
            result = self.send_pdu(h, &out[at..at + n]);
            if result.is_err() {
                break;
            }
            self.stats.h2c_pdus += 1;
            at += n;
        }
        if let Some(p) = self.pending.get_mut(&dh.cccid) {
            p.out = Some(out);
        }
        result
    }

    // ---- Fabrics and admin commands usable on any queue ----

    /// Fabrics Property Get: `wide` reads 8 bytes, else 4.
    pub fn property_get(&mut self, offset: u32, wide: bool) -> Result<u64> {
        let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
        sqe.0[4] = fctype::PROPERTY_GET;
        sqe.0[40] = u8::from(wide);
        sqe.0[44..48].copy_from_slice(&offset.to_le_bytes());
        let (cqe, _) = self.call_ok(sqe, None, 0)?;
        Ok(u64::from(cqe.dw0) | (u64::from(cqe.dw1) << 32))
    }

    /// Fabrics Property Set: `wide` writes 8 bytes, else 4.
    pub fn property_set(&mut self, offset: u32, value: u64, wide: bool) -> Result<()> {
        let mut sqe = Sqe::new(FABRICS_OPCODE, 0);
        sqe.0[4] = fctype::PROPERTY_SET;
        sqe.0[40] = u8::from(wide);
        sqe.0[44..48].copy_from_slice(&offset.to_le_bytes());
        sqe.0[48..56].copy_from_slice(&value.to_le_bytes());
        self.call_ok(sqe, None, 0)?;
        Ok(())
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> Result<()> {
        self.call_ok(Sqe::new(admin_op::KEEP_ALIVE, 0), None, 0)?;
        Ok(())
    }

    // ---- NVM I/O commands ----

    /// Reads `nlb` blocks at `slba`.
    pub fn read(&mut self, nsid: u32, slba: u64, nlb: u32) -> Result<Vec<u8>> {
        let len = nlb as usize * self.block_size as usize;
        let cid = self.submit(rw_sqe(io_op::READ, nsid, slba, nlb, false)?, None, len)?;
        let c = self.wait_for(cid)?;
        check(&c.cqe)?;
        check_moved(&c, len)?;
        Ok(c.data)
    }

    /// Writes `data` (a whole number of blocks) at `slba`.
    pub fn write(&mut self, nsid: u32, slba: u64, data: &[u8], fua: bool) -> Result<()> {
        let nlb = self.blocks_of(data.len())?;
        let cid = self.submit(rw_sqe(io_op::WRITE, nsid, slba, nlb, fua)?, Some(data), 0)?;
        let c = self.wait_for(cid)?;
        check(&c.cqe)?;
        check_moved(&c, data.len())
    }

    /// Flush.
    pub fn flush(&mut self, nsid: u32) -> Result<()> {
        let mut sqe = Sqe::new(io_op::FLUSH, 0);
        sqe.set_nsid(nsid);
        self.call_ok(sqe, None, 0)?;
        Ok(())
    }

    /// Write Zeroes of `nlb` blocks at `slba`; `deac` lets the target
    /// deallocate them.
    pub fn write_zeroes(&mut self, nsid: u32, slba: u64, nlb: u32, deac: bool) -> Result<()> {
        self.call_ok(write_zeroes_sqe(nsid, slba, nlb, deac)?, None, 0)?;
        Ok(())
    }

    /// Dataset Management with the deallocate attribute over `ranges`
    /// of (starting LBA, number of blocks).
    pub fn deallocate(&mut self, nsid: u32, ranges: &[(u64, u32)]) -> Result<()> {
        let (sqe, data) = dsm_deallocate(nsid, ranges)?;
        self.call_ok(sqe, Some(&data), 0)?;
        Ok(())
    }

    fn blocks_of(&self, bytes: usize) -> Result<u32> {
        let bs = self.block_size as usize;
        if bytes == 0 || !bytes.is_multiple_of(bs) {
            return Err(Error::Invalid(format!(
                "{bytes} bytes is not a whole number of {bs}-byte blocks"
            )));
        }
        u32::try_from(bytes / bs).map_err(|_| Error::Invalid(format!("{bytes} bytes")))
    }
}

/// Checks that a successful Read or Write moved all of its `len` bytes.
pub fn check_moved(c: &Completion, len: usize) -> Result<()> {
    if c.cqe.status.is_success() && c.transferred != len {
        return Err(Error::Protocol(format!(
            "command {} succeeded having moved {} of its {len} bytes",
            c.cqe.cid, c.transferred
        )));
    }
    Ok(())
}

/// A non-success status as an [`Error::Status`].
pub fn check(cqe: &Cqe) -> Result<()> {
    if cqe.status.is_success() {
        Ok(())
    } else {
        Err(Error::Status {
            status: cqe.status,
            dw0: cqe.dw0,
        })
    }
}

/// A Read (opcode 0x02) or Write (0x01) of `nlb` blocks at `slba` (data
/// pointer left for [`Queue::submit`]).
pub fn rw_sqe(opcode: u8, nsid: u32, slba: u64, nlb: u32, fua: bool) -> Result<Sqe> {
    if nlb == 0 || nlb > 0x1_0000 {
        return Err(Error::Invalid(format!("{nlb} blocks in one command")));
    }
    let mut sqe = Sqe::new(opcode, 0);
    sqe.set_nsid(nsid)
        .set_dword(10, slba as u32)
        .set_dword(11, (slba >> 32) as u32)
        .set_dword(12, (nlb - 1) | if fua { 1 << 30 } else { 0 });
    Ok(sqe)
}

/// A Write Zeroes (opcode 0x08) of `nlb` blocks at `slba`.
pub fn write_zeroes_sqe(nsid: u32, slba: u64, nlb: u32, deac: bool) -> Result<Sqe> {
    let mut sqe = rw_sqe(io_op::WRITE_ZEROES, nsid, slba, nlb, false)?;
    if deac {
        let d = sqe.dword(12) | (1 << 25);
        sqe.set_dword(12, d);
    }
    Ok(sqe)
}

/// A Dataset Management (opcode 0x09) deallocating `ranges` of (starting
/// LBA, number of blocks), and its data.
pub fn dsm_deallocate(nsid: u32, ranges: &[(u64, u32)]) -> Result<(Sqe, Vec<u8>)> {
    if ranges.is_empty() || ranges.len() > 256 {
        return Err(Error::Invalid(format!("{} DSM ranges", ranges.len())));
    }
    let mut data = Vec::with_capacity(ranges.len() * 16);
    for &(slba, nlb) in ranges {
        data.extend_from_slice(&0u32.to_le_bytes());
        data.extend_from_slice(&nlb.to_le_bytes());
        data.extend_from_slice(&slba.to_le_bytes());
    }
    let mut sqe = Sqe::new(io_op::DSM, 0);
    sqe.set_nsid(nsid)
        .set_dword(10, ranges.len() as u32 - 1)
        .set_dword(11, 1 << 2);
    Ok((sqe, data))
}

/// An Identify command (opcode 0x06) for `cns` and `nsid`.
pub fn identify_sqe(cns: u8, nsid: u32) -> Sqe {
    let mut sqe = Sqe::new(admin_op::IDENTIFY, 0);
    sqe.set_nsid(nsid).set_dword(10, u32::from(cns));
    sqe
}

/// A Get Log Page (opcode 0x02) of `len` bytes (a multiple of 4) at
/// `offset` of log `lid`.
pub fn get_log_page_sqe(lid: u8, len: usize, offset: u64) -> Result<Sqe> {
    if len == 0 || !len.is_multiple_of(4) || !offset.is_multiple_of(4) {
        return Err(Error::Invalid(format!(
            "log page read of {len} bytes at {offset}"
        )));
    }
    let numd = u32::try_from(len / 4 - 1).map_err(|_| Error::Invalid(format!("{len} bytes")))?;
    let mut sqe = Sqe::new(admin_op::GET_LOG_PAGE, 0);
    sqe.set_nsid(0xFFFF_FFFF)
        .set_dword(10, u32::from(lid) | ((numd & 0xFFFF) << 16))
        .set_dword(11, numd >> 16)
        .set_dword(12, offset as u32)
        .set_dword(13, (offset >> 32) as u32);
    Ok(sqe)
}

fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches(['\0', ' '])
        .to_string()
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from(u32_at(b, i)) | (u64::from(u32_at(b, i + 4)) << 32)
}

fn need(b: &[u8], len: usize, what: &str) -> Result<()> {
    if b.len() < len {
        Err(Error::Protocol(format!(
            "{what}: {} bytes, expected {len}",
            b.len()
        )))
    } else {
        Ok(())
    }
}

/// The Identify Controller fields tests look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI vendor id (bytes 0-1).
    pub vid: u16,
    /// Serial number (4-23), trailing spaces removed.
    pub sn: String,
    /// Model number (24-63).
    pub mn: String,
    /// Firmware revision (64-71).
    pub fr: String,
    /// Maximum data transfer size, as a power of two of the minimum page
    /// size (77); 0 = no limit.
    pub mdts: u8,
    /// Controller id (78-79).
    pub cntlid: u16,
    /// Version (80-83).
    pub ver: u32,
    /// Optional asynchronous events supported (92-95).
    pub oaes: u32,
    /// Controller type (111): 1 I/O, 2 discovery, 3 administrative.
    pub cntrltype: u8,
    /// Asynchronous event request limit, 0-based (259).
    pub aerl: u8,
    /// Log page attributes (261).
    pub lpa: u8,
    /// Keep alive support granularity in 100 ms units (320-321).
    pub kas: u16,
    /// SQ entry sizes (512).
    pub sqes: u8,
    /// CQ entry sizes (513).
    pub cqes: u8,
    /// Maximum outstanding commands (514-515).
    pub maxcmd: u16,
    /// Number of namespaces (516-519).
    pub nn: u32,
    /// Optional NVM command support (520-521).
    pub oncs: u16,
    /// Volatile write cache (525).
    pub vwc: u8,
    /// SGL support (536-539).
    pub sgls: u32,
    /// Subsystem NQN (768-1023).
    pub subnqn: String,
    /// I/O command capsule supported size in 16-byte units (1792-1795).
    pub ioccsz: u32,
    /// I/O response capsule supported size in 16-byte units (1796-1799).
    pub iorcsz: u32,
    /// In-capsule data offset in 16-byte units (1800-1801).
    pub icdoff: u16,
    /// Fabrics controller attributes (1802).
    pub fcatt: u8,
    /// Maximum SGL data block descriptors (1803).
    pub msdbd: u8,
}

impl IdentifyController {
    /// Decodes the 4096-byte Identify Controller data.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(b, 4096, "Identify Controller")?;
        Ok(Self {
            vid: u16_at(b, 0),
            sn: ascii(&b[4..24]),
            mn: ascii(&b[24..64]),
            fr: ascii(&b[64..72]),
            mdts: b[77],
            cntlid: u16_at(b, 78),
            ver: u32_at(b, 80),
            oaes: u32_at(b, 92),
            cntrltype: b[111],
            aerl: b[259],
            lpa: b[261],
            kas: u16_at(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: u16_at(b, 514),
            nn: u32_at(b, 516),
            oncs: u16_at(b, 520),
            vwc: b[525],
            sgls: u32_at(b, 536),
            subnqn: ascii(&b[768..1024]),
            ioccsz: u32_at(b, 1792),
            iorcsz: u32_at(b, 1796),
            icdoff: u16_at(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
        })
    }

    /// In-capsule data an I/O command may carry (IOCCSZ * 16 - 64).
    pub fn in_capsule_bytes(&self) -> usize {
        (self.ioccsz as usize * 16).saturating_sub(64)
    }
}

/// The Identify Namespace fields tests look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace size in blocks (0-7).
    pub nsze: u64,
    /// Namespace capacity (8-15).
    pub ncap: u64,
    /// Namespace utilization (16-23).
    pub nuse: u64,
    /// Namespace features (24).
    pub nsfeat: u8,
    /// Number of LBA formats, 0-based (25).
    pub nlbaf: u8,
    /// Formatted LBA size (26).
    pub flbas: u8,
    /// Deallocate logical block features (33).
    pub dlfeat: u8,
    /// Namespace attributes (99); bit 0: write protected.
    pub nsattr: u8,
    /// NGUID (104-119).
    pub nguid: [u8; 16],
    /// EUI64 (120-127).
    pub eui64: [u8; 8],
    /// LBA formats (128..): (metadata size, LBADS, relative performance).
    pub lbaf: Vec<(u16, u8, u8)>,
}

impl IdentifyNamespace {
    /// Decodes the 4096-byte Identify Namespace data.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(b, 4096, "Identify Namespace")?;
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[104..120]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&b[120..128]);
        let nlbaf = b[25];
        let lbaf = (0..=usize::from(nlbaf).min(63))
            .map(|i| {
                let at = 128 + 4 * i;
                (u16_at(b, at), b[at + 2], b[at + 3] & 3)
            })
            .collect();
        Ok(Self {
            nsze: u64_at(b, 0),
            ncap: u64_at(b, 8),
            nuse: u64_at(b, 16),
            nsfeat: b[24],
            nlbaf,
            flbas: b[26],
            dlfeat: b[33],
            nsattr: b[99],
            nguid,
            eui64,
            lbaf,
        })
    }

    /// The block size of the formatted LBA format, in bytes.
    pub fn block_size(&self) -> Option<u64> {
        let i = usize::from(self.flbas & 0xF);
        self.lbaf
            .get(i)
            .and_then(|&(_, lbads, _)| 1u64.checked_shl(u32::from(lbads)))
    }
}

/// One Namespace Identification Descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsDescriptor {
    /// Type: 1 EUI64, 2 NGUID, 3 UUID, 4 CSI.
    pub nidt: u8,
    /// The identifier.
    pub nid: Vec<u8>,
}

/// Decodes a Namespace Identification Descriptor list.
pub fn parse_ns_descriptors(b: &[u8]) -> Result<Vec<NsDescriptor>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() && b[at] != 0 {
        let (nidt, nidl) = (b[at], usize::from(b[at + 1]));
        if at + 4 + nidl > b.len() {
            return Err(Error::Protocol(format!(
                "namespace descriptor at {at} of length {nidl} runs past the list"
            )));
        }
        out.push(NsDescriptor {
            nidt,
            nid: b[at + 4..at + 4 + nidl].to_vec(),
        });
        at += 4 + nidl;
    }
    Ok(out)
}

/// Decodes a list of 32-bit namespace ids, ending at the first 0.
pub fn parse_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// How [`Controller::connect_with`] sets up a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerOptions {
    /// The subsystem's NQN.
    pub subnqn: String,
    /// The host's NQN.
    pub hostnqn: String,
    /// Host identifier (the same on every queue).
    pub hostid: [u8; 16],
    /// I/O queues to create (0: admin queue only, as for discovery).
    pub io_queues: usize,
    /// Entries per I/O queue (Connect SQSIZE is one less).
    pub queue_size: u16,
    /// Entries of the admin queue.
    pub admin_queue_size: u16,
    /// Keep-alive timeout in milliseconds (0 disables).
    pub kato_ms: u32,
    /// Digests on every connection.
    pub digests: Digests,
    /// Socket timeout.
    pub timeout: Duration,
    /// DH-HMAC-CHAP secrets, used on every queue whose Connect asks for
    /// authentication (none: such a controller is an [`Error::AuthRequired`]).
    pub auth: Option<HostCredentials>,
}

impl ControllerOptions {
    /// Defaults for `subnqn` and `hostnqn`: one I/O queue of 32 entries,
    /// a host id derived from the host NQN, no digests.
    pub fn new(subnqn: &str, hostnqn: &str) -> Self {
        Self {
            subnqn: subnqn.to_string(),
            hostnqn: hostnqn.to_string(),
            hostid: hostid_for(hostnqn),
            io_queues: 1,
            queue_size: 32,
            admin_queue_size: 32,
            kato_ms: DEFAULT_KATO_MS,
            digests: Digests::default(),
            timeout: DEFAULT_TIMEOUT,
            auth: None,
        }
    }
}

/// A stable host identifier derived from a host NQN.
pub fn hostid_for(hostnqn: &str) -> [u8; 16] {
    let mut id = [0u8; 16];
    for (i, chunk) in id.chunks_mut(4).enumerate() {
        let mut seed = hostnqn.as_bytes().to_vec();
        seed.push(i as u8);
        chunk.copy_from_slice(&pdu::digest(&seed).to_le_bytes());
    }
    id
}

/// A host's association with one controller: the admin queue and its
/// I/O queues.
pub struct Controller {
    admin: Queue,
    io: Vec<Queue>,
    cntlid: u16,
    cap: u64,
    id: IdentifyController,
    granted_io_queues: u16,
    addr: SocketAddr,
    opts: ControllerOptions,
    auth: Option<AuthSummary>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("subnqn", &self.opts.subnqn)
            .field("cntlid", &self.cntlid)
            .field("io_queues", &self.io.len())
            .finish()
    }
}

impl Controller {
    /// Sets up a controller like a host does: admin queue, CAP, enable,
    /// Identify Controller, Number of Queues, then `io_queues` I/O queues
    /// of `qsize` entries each.
    pub fn connect(
        addr: impl ToSocketAddrs,
        subnqn: &str,
        hostnqn: &str,
        io_queues: usize,
        qsize: u16,
        digests: Digests,
    ) -> Result<Self> {
        let mut o = ControllerOptions::new(subnqn, hostnqn);
        o.io_queues = io_queues;
        o.queue_size = qsize;
        o.digests = digests;
        Self::connect_with(addr, o)
    }

    /// Like [`Controller::connect`], with every option.
    pub fn connect_with(addr: impl ToSocketAddrs, opts: ControllerOptions) -> Result<Self> {
        if opts.queue_size < 2 || opts.admin_queue_size < 2 {
            return Err(Error::Invalid("queues need at least 2 entries".into()));
        }
        let addr = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| Error::Invalid("address resolved to nothing".into()))?;
        let mut admin = Queue::handshake(addr, opts.digests, opts.timeout)?;
        let cntlid = admin.fabrics_connect(&ConnectParams {
            subnqn: opts.subnqn.clone(),
            hostnqn: opts.hostnqn.clone(),
            hostid: opts.hostid,
            qid: 0,
            sqsize: opts.admin_queue_size - 1,
            kato_ms: opts.kato_ms,
            cntlid: DYNAMIC_CNTLID,
            digests: opts.digests,
        })?;
        let auth = Self::authenticate_queue(&mut admin, &opts)?;
        let cap = admin.property_get(reg::CAP, true)?;
        // CAP.TO: worst-case time to become ready, in 500 ms units.
        let ready_within = Duration::from_millis(((cap >> 24) & 0xFF) * 500)
            .clamp(Duration::from_secs(1), Duration::from_secs(15));
        admin.property_set(
            reg::CC,
            u64::from(reg::CC_EN | reg::CC_IOSQES | reg::CC_IOCQES),
            false,
        )?;
        wait_csts(&mut admin, reg::CSTS_RDY, reg::CSTS_RDY, ready_within)?;
        let (_, raw) = admin.call_ok(identify_sqe(cns::CONTROLLER, 0), None, 4096)?;
        let id = IdentifyController::parse(&raw)?;
        let mut c = Self {
            admin,
            io: Vec::new(),
            cntlid,
            cap,
            id,
            granted_io_queues: 0,
            addr,
            opts,
            auth,
        };
        if c.opts.io_queues > 0 {
            let n = u16::try_from(c.opts.io_queues)
                .map_err(|_| Error::Invalid(format!("{} I/O queues", c.opts.io_queues)))?;
            let (nsq, ncq) = c.set_number_of_queues(n)?;
            c.granted_io_queues = nsq.min(ncq);
            let want = c.opts.io_queues.min(usize::from(c.granted_io_queues));
            for _ in 0..want {
                c.add_io_queue()?;
            }
        }
        Ok(c)
    }

    /// Connects one more I/O queue (qid = number of I/O queues + 1).
    pub fn add_io_queue(&mut self) -> Result<&mut Queue> {
        let qid = u16::try_from(self.io.len() + 1)
            .map_err(|_| Error::Invalid("too many queues".into()))?;
        let mut q = Queue::handshake(self.addr, self.opts.digests, self.opts.timeout)?;
        q.fabrics_connect(&ConnectParams {
            subnqn: self.opts.subnqn.clone(),
            hostnqn: self.opts.hostnqn.clone(),
            hostid: self.opts.hostid,
            qid,
            sqsize: self.opts.queue_size - 1,
            kato_ms: 0,
            cntlid: self.cntlid,
            digests: self.opts.digests,
        })?;
        Self::authenticate_queue(&mut q, &self.opts)?;
        q.set_in_capsule(self.id.in_capsule_bytes());
        self.io.push(q);
        let i = self.io.len() - 1;
        Ok(&mut self.io[i])
    }

    /// Authenticates `q` if its Connect asked for it.
    fn authenticate_queue(q: &mut Queue, opts: &ControllerOptions) -> Result<Option<AuthSummary>> {
        if !q.auth_required() {
            return Ok(None);
        }
        let creds = opts.auth.as_ref().ok_or(Error::AuthRequired)?;
        q.authenticate(creds, &opts.hostnqn, &opts.subnqn).map(Some)
    }

    /// How the admin queue authenticated (`None`: it was not asked to).
    pub fn auth(&self) -> Option<AuthSummary> {
        self.auth
    }

    /// The admin queue.
    pub fn admin(&mut self) -> &mut Queue {
        &mut self.admin
    }

    /// I/O queue `i` (0-based; qid `i + 1`). Panics if there is none.
    pub fn io(&mut self, i: usize) -> &mut Queue {
        &mut self.io[i]
    }

    /// Number of I/O queues connected.
    pub fn io_queue_count(&self) -> usize {
        self.io.len()
    }

    /// Takes the I/O queues out (e.g. one per thread).
    pub fn take_io_queues(&mut self) -> Vec<Queue> {
        std::mem::take(&mut self.io)
    }

    /// Controller id.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    /// The CAP property read at connect.
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Identify Controller as read at connect.
    pub fn identify(&self) -> &IdentifyController {
        &self.id
    }

    /// I/O queues granted by Set Features Number of Queues.
    pub fn granted_io_queues(&self) -> u16 {
        self.granted_io_queues
    }

    /// The largest data transfer MDTS allows, in bytes (None: no limit).
    pub fn max_transfer(&self) -> Option<usize> {
        let mpsmin = (self.cap >> 48) & 0xF;
        (self.id.mdts != 0).then(|| (1usize << self.id.mdts) << (12 + mpsmin))
    }

    /// Identify Controller (CNS 1), read again.
    pub fn identify_controller(&mut self) -> Result<IdentifyController> {
        let (_, raw) = self
            .admin
            .call_ok(identify_sqe(cns::CONTROLLER, 0), None, 4096)?;
        IdentifyController::parse(&raw)
    }

    /// Identify Namespace (CNS 0).
    pub fn identify_namespace(&mut self, nsid: u32) -> Result<IdentifyNamespace> {
        let (_, raw) = self
            .admin
            .call_ok(identify_sqe(cns::NAMESPACE, nsid), None, 4096)?;
        IdentifyNamespace::parse(&raw)
    }

    /// Active namespace ids (CNS 2, from nsid 0).
    pub fn active_namespaces(&mut self) -> Result<Vec<u32>> {
        let (_, raw) = self
            .admin
            .call_ok(identify_sqe(cns::ACTIVE_NS_LIST, 0), None, 4096)?;
        Ok(parse_ns_list(&raw))
    }

    /// Namespace Identification Descriptors (CNS 3).
    pub fn ns_descriptors(&mut self, nsid: u32) -> Result<Vec<NsDescriptor>> {
        let (_, raw) = self
            .admin
            .call_ok(identify_sqe(cns::NS_DESCRIPTORS, nsid), None, 4096)?;
        parse_ns_descriptors(&raw)
    }

    /// Get Log Page: `len` bytes (a multiple of 4) at `offset` of `lid`.
    pub fn get_log_page(&mut self, lid: u8, len: usize, offset: u64) -> Result<Vec<u8>> {
        let (_, data) = self
            .admin
            .call_ok(get_log_page_sqe(lid, len, offset)?, None, len)?;
        Ok(data)
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> Result<()> {
        self.admin.keep_alive()
    }

    /// Get Features `fid` (current value); returns completion dword 0.
    pub fn get_features(&mut self, fid: u8, cdw11: u32) -> Result<u32> {
        let mut sqe = Sqe::new(admin_op::GET_FEATURES, 0);
        sqe.set_dword(10, u32::from(fid)).set_dword(11, cdw11);
        Ok(self.admin.call_ok(sqe, None, 0)?.0.dw0)
    }

    /// Set Features `fid` to `cdw11`; returns completion dword 0.
    pub fn set_features(&mut self, fid: u8, cdw11: u32) -> Result<u32> {
        let mut sqe = Sqe::new(admin_op::SET_FEATURES, 0);
        sqe.set_dword(10, u32::from(fid)).set_dword(11, cdw11);
        Ok(self.admin.call_ok(sqe, None, 0)?.0.dw0)
    }

    /// Set Features Number of Queues asking for `n` submission and
    /// completion queues; returns how many of each were granted.
    pub fn set_number_of_queues(&mut self, n: u16) -> Result<(u16, u16)> {
        if n == 0 {
            return Err(Error::Invalid("0 queues".into()));
        }
        let m = u32::from(n - 1);
        let dw0 = self.set_features(feature::NUM_QUEUES, m | (m << 16))?;
        Ok((
            (dw0 & 0xFFFF) as u16 + 1,
            ((dw0 >> 16) as u16).wrapping_add(1),
        ))
    }

    /// Sends an Asynchronous Event Request and leaves it outstanding;
    /// returns its command id for [`Controller::wait_async_event`].
    pub fn submit_async_event(&mut self) -> Result<u16> {
        self.admin
            .submit(Sqe::new(admin_op::ASYNC_EVENT, 0), None, 0)
    }

    /// Waits up to `within` for the Asynchronous Event Request `cid` to
    /// complete; returns its completion (DW0 holds the event).
    pub fn wait_async_event(&mut self, cid: u16, within: Duration) -> Result<Cqe> {
        Ok(self.admin.wait_for_timeout(cid, within)?.cqe)
    }

    /// Property Get on the admin queue.
    pub fn property_get(&mut self, offset: u32, wide: bool) -> Result<u64> {
        self.admin.property_get(offset, wide)
    }

    /// Property Set on the admin queue.
    pub fn property_set(&mut self, offset: u32, value: u64, wide: bool) -> Result<()> {
        self.admin.property_set(offset, value, wide)
    }

    /// Normal shutdown: CC.SHN = 01b, then waits (bounded) for
    /// CSTS.SHST = 10b.
    pub fn shutdown(&mut self) -> Result<()> {
        let cc = self.admin.property_get(reg::CC, false)? as u32;
        let cc = (cc & !reg::CC_SHN_MASK) | reg::CC_SHN_NORMAL;
        self.admin.property_set(reg::CC, u64::from(cc), false)?;
        wait_csts(
            &mut self.admin,
            reg::CSTS_SHST_MASK,
            reg::CSTS_SHST_COMPLETE,
            Duration::from_secs(10),
        )
    }
}

/// Polls CSTS until `(csts & mask) == want`, at most `within`.
fn wait_csts(q: &mut Queue, mask: u32, want: u32, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let csts = q.property_get(reg::CSTS, false)? as u32;
        if csts & reg::CSTS_CFS != 0 {
            return Err(Error::Protocol(format!(
                "CSTS {csts:#x}: controller fatal status"
            )));
        }
        if csts & mask == want {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Protocol(format!(
                "CSTS {csts:#x} still not {want:#x} (mask {mask:#x}) after {within:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One discovery log page entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport type (3 = TCP).
    pub trtype: u8,
    /// Address family (1 = IPv4, 2 = IPv6).
    pub adrfam: u8,
    /// Subsystem type (2 = NVM subsystem, 3 = current discovery subsystem).
    pub subtype: u8,
    /// Transport requirements.
    pub treq: u8,
    /// Port id.
    pub portid: u16,
    /// Controller id (0xFFFF: dynamic).
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    /// Transport service id (the TCP port).
    pub trsvcid: String,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Transport address.
    pub traddr: String,
}

impl DiscoveryEntry {
    /// Decodes one 1024-byte entry.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(b, 1024, "discovery log entry")?;
        Ok(Self {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            trsvcid: ascii(&b[32..64]),
            subnqn: ascii(&b[256..512]),
            traddr: ascii(&b[512..768]),
        })
    }
}

/// Connects to the discovery subsystem at `addr` as `hostnqn` (admin
/// queue only, keep alive off, like the kernel's one-shot discovery) and
/// returns its log page's entries.
pub fn discover(addr: impl ToSocketAddrs, hostnqn: &str) -> Result<Vec<DiscoveryEntry>> {
    let mut o = ControllerOptions::new(DISCOVERY_NQN, hostnqn);
    o.io_queues = 0;
    o.kato_ms = 0;
    let mut c = Controller::connect_with(addr, o)?;
    discovery_log(&mut c)
}

/// Reads a discovery controller's whole log page: the header for NUMREC,
/// then header and entries, again if GENCTR moved meanwhile.
pub fn discovery_log(c: &mut Controller) -> Result<Vec<DiscoveryEntry>> {
    for _ in 0..4 {
        let head = c.get_log_page(log_page::DISCOVERY, 1024, 0)?;
        let (genctr, numrec) = (u64_at(&head, 0), u64_at(&head, 8));
        if numrec > 1024 {
            return Err(Error::Protocol(format!(
                "discovery log claims {numrec} records"
            )));
        }
        let page = c.get_log_page(log_page::DISCOVERY, 1024 * (numrec as usize + 1), 0)?;
        if u64_at(&page, 0) != genctr || u64_at(&page, 8) != numrec {
            continue;
        }
        if u16_at(&page, 16) != 0 {
            return Err(Error::Protocol(format!(
                "discovery log RECFMT {}",
                u16_at(&page, 16)
            )));
        }
        return page[1024..]
            .chunks_exact(1024)
            .map(DiscoveryEntry::parse)
            .collect();
    }
    Err(Error::Protocol(
        "discovery log generation kept changing".into(),
    ))
}
