//! One connection, which is one NVMe queue: the ICReq/ICResp exchange, the
//! PDU loop (command capsules, H2CData answering our R2Ts, termination
//! requests), the Connect that binds the connection to a controller as its
//! admin queue or one of its I/O queues, and the way completions leave:
//! C2HData for read data, then a response capsule.
//!
//! The reader takes a [`Budget`] permit for every command (and its data
//! bytes) before reading more, so a host can never make the target hold
//! more than the configured commands and bytes. A PDU that breaks the
//! transport's rules gets a C2HTermReq and the connection is closed; a
//! command that is merely wrong gets its NVMe status.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use compio::io::AsyncWrite;
use compio::net::TcpStream;
use futures::FutureExt;
use futures::future::{Either, Shared, select};
use pontoon_buf::AlignedBuf;
use pontoon_net::budget::{Budget, Permit};
use pontoon_net::stream::{Inbound, OutBuf, Reply, ReplyQueue, write_replies};
use pontoon_volume::VolumeCatalog;
use tracing::{debug, info, warn};

use crate::admin::AdminQueue;
use crate::auth::message::{CONNECT_ATR, MAX_MESSAGE, SECP_DHCHAP, SPSP};
use crate::auth::target::{Event, TargetAuth};
use crate::command::{Cqe, FABRICS_OPCODE, SGL_IN_CAPSULE, SGL_TRANSPORT, Sqe, Status, fctype};
use crate::config::DISCOVERY_NQN;
use crate::controller::{Association, Controller};
use crate::fabrics::{self, DYNAMIC_CNTLID, Refusal};
use crate::io::IoQueue;
use crate::pdu::{
    self, CH_LEN, CMD_HLEN, CommonHeader, DATA_HLEN, DIGEST_LEN, DataHeader, Digests,
    FLAG_LAST_PDU, Fes, IC_LEN, IcReq, IcResp, Layout, PduError, PduType, TERM_HLEN,
};
use crate::server::Worker;

/// In-capsule data the admin queue accepts (NVMe/TCP fixes it at 8 KiB).
const ADMIN_IN_CAPSULE: usize = 8192;
/// Largest C2HData PDU sent; longer reads go in several.
const MAX_C2H_DATA: usize = 256 << 10;

/// A command's outcome, ready to be sent.
pub(crate) struct Completion {
    /// The status.
    pub status: Status,
    /// Command-specific dword 0.
    pub dw0: u32,
    /// Command-specific dword 1.
    pub dw1: u32,
    /// Data for the host (read data, identify structures, log pages),
    /// sent as C2HData before the response.
    pub data: Option<AlignedBuf>,
}

impl Completion {
    /// A completion with only a status.
    pub fn status(status: Status) -> Self {
        Self {
            status,
            dw0: 0,
            dw1: 0,
            data: None,
        }
    }

    /// A successful completion with DW0.
    pub fn ok(dw0: u32) -> Self {
        Self {
            dw0,
            ..Self::status(Status::SUCCESS)
        }
    }

    /// A successful completion carrying data.
    pub fn with_data(data: AlignedBuf) -> Self {
        Self {
            data: Some(data),
            ..Self::status(Status::SUCCESS)
        }
    }
}

/// What every task of one connection shares: the way out, and the queue's
/// identity.
pub(crate) struct Conn {
    queue: Rc<ReplyQueue>,
    digests: Digests,
    qid: Cell<u16>,
    /// Submission queue head: commands fetched, modulo the queue size.
    sqhd: Cell<u16>,
    /// Queue entries (SQSIZE + 1); 0 before Connect.
    entries: Cell<u32>,
}

impl Conn {
    fn fetched(&self) {
        let n = self.entries.get().max(1);
        self.sqhd.set(((u32::from(self.sqhd.get()) + 1) % n) as u16);
    }

    /// Sends `c` for command `cid`: its data (if any) in C2HData PDUs, then
    /// the response capsule. `permit` is released once it is on the wire.
    pub fn complete(&self, cid: u16, c: Completion, permit: Option<Permit>) {
        let mut parts = Vec::with_capacity(4);
        if let Some(data) = c.data.filter(|_| c.status.is_success()) {
            let (len, buf) = (data.len(), Rc::new(data));
            let mut at = 0;
            while at < len {
                let n = (len - at).min(MAX_C2H_DATA);
                let last = if at + n == len { FLAG_LAST_PDU } else { 0 };
                let hdr = DataHeader {
                    cccid: cid,
                    ttag: 0,
                    offset: at as u32,
                    len: n as u32,
                };
                parts.push(OutBuf::Bytes(hdr.encode(
                    PduType::C2HData,
                    last,
                    self.digests,
                )));
                let ddgst = self.digests.data.then(|| pdu::digest(&buf[at..at + n]));
                parts.push(OutBuf::Data {
                    buf: buf.clone(),
                    start: at,
                    end: at + n,
                });
                if let Some(d) = ddgst {
                    parts.push(OutBuf::Bytes(d.to_le_bytes().to_vec()));
                }
                at += n;
            }
        }
        let cqe = Cqe {
            dw0: c.dw0,
            dw1: c.dw1,
            sqhd: self.sqhd.get(),
            sqid: self.qid.get(),
            cid,
            status: c.status,
        };
        parts.push(OutBuf::Bytes(pdu::header(
            PduType::CapsuleResp,
            0,
            &cqe.encode(),
            0,
            self.digests,
        )));
        self.queue.push(Reply { parts, permit });
    }

    fn send(&self, bytes: Vec<u8>) {
        self.queue.push(Reply {
            parts: vec![OutBuf::Bytes(bytes)],
            permit: None,
        });
    }
}

/// What the connection is, once Connect bound it.
enum Session<C: VolumeCatalog> {
    Unbound,
    Admin(Rc<AdminQueue<C>>),
    Io(Rc<IoQueue<C>>),
}

/// A write whose data is still arriving in H2CData PDUs.
struct Transfer {
    sqe: Sqe,
    buf: Option<AlignedBuf>,
    received: usize,
    digest_failed: bool,
    permit: Permit,
}

/// Why the PDU loop stopped.
#[derive(Debug)]
enum End {
    Eof,
    Stopping,
    TornDown,
    HostTerminated,
    Violation(PduError),
    Io(io::Error),
}

/// Serves one connection to its end.
/// How long a Connect that names a subsystem the gateway does not hold, or
/// a host it does not allow, waits for the configuration to change before
/// it is refused: `pontoon nvmf subsystem add` / `host allow` return once
/// etcd holds the change, and the gateway applies it a few tens of
/// milliseconds later (its map watch), so a host connecting right after
/// the command must not be turned away. Only the connecting host waits.
const CONFIG_GRACE: Duration = Duration::from_millis(500);
/// How often that wait looks at the configuration's generation.
const CONFIG_POLL: Duration = Duration::from_millis(10);

pub(crate) async fn serve<C: VolumeCatalog>(w: Rc<Worker<C>>, stream: TcpStream, peer: SocketAddr) {
    let local = stream.local_addr().unwrap_or(w.config.listen);
    let queue = Rc::new(ReplyQueue::new(stream.clone()));
    let writer = compio::runtime::spawn(write_replies(stream.clone(), queue.clone()));
    let mut inbound = Inbound::new(stream.clone());
    let budget = Budget::new(
        usize::from(w.config.max_queue_entries) + 1,
        w.config.max_buffered_bytes,
    );
    let mut conn_state = ConnLoop {
        w: w.clone(),
        local,
        budget: budget.clone(),
        conn: None,
        session: Session::Unbound,
        transfers: HashMap::new(),
        next_ttag: 0,
        teardown: None,
        auth: None,
        auth_by: None,
    };
    let end = conn_state.run(&mut inbound, &queue).await;
    match &end {
        End::Violation(e) => warn!(%peer, "NVMe/TCP protocol violation: {e}; terminating"),
        End::Io(e) => debug!(%peer, "connection error: {e}"),
        other => debug!(%peer, ?other, "connection ending"),
    }
    conn_state.transfers.clear();
    let session = std::mem::replace(&mut conn_state.session, Session::Unbound);
    // Commands in flight finish and their completions are written.
    budget.idle().await;
    match session {
        Session::Admin(a) => {
            info!(%peer, cntlid = a.ctrl.cntlid, "controller ends with its admin queue");
            w.registry.remove(a.ctrl.cntlid);
        }
        Session::Io(q) => q.ctrl.detach_io_queue(q.qid),
        Session::Unbound => {}
    }
    queue.close();
    let _ = writer.await;
    let mut s = stream;
    let _ = s.shutdown().await;
}

/// The per-connection state of the PDU loop.
struct ConnLoop<C: VolumeCatalog> {
    w: Rc<Worker<C>>,
    local: SocketAddr,
    budget: Rc<Budget>,
    conn: Option<Rc<Conn>>,
    session: Session<C>,
    transfers: HashMap<u16, Transfer>,
    next_ttag: u16,
    teardown: Option<Shared<futures::channel::oneshot::Receiver<()>>>,
    /// DH-HMAC-CHAP state, when the host must authenticate this queue.
    auth: Option<TargetAuth>,
    /// When the transaction negotiated last must be done by (a handshake
    /// timeout after its Negotiate), if later than the connection's own
    /// deadline: a re-authentication, or a retry after a failure.
    auth_by: Option<Instant>,
}

impl<C: VolumeCatalog> ConnLoop<C> {
    /// Races `f` with the target's stop signal and the controller's
    /// teardown.
    async fn guarded<F: std::future::Future>(&self, f: F) -> Result<F::Output, End> {
        let stop = self.w.stop.wait();
        let teardown = self.teardown.clone();
        let interrupt = async move {
            let stop = std::pin::pin!(stop);
            match teardown {
                Some(t) => match select(stop, t).await {
                    Either::Left(_) => End::Stopping,
                    Either::Right(_) => End::TornDown,
                },
                None => {
                    stop.await;
                    End::Stopping
                }
            }
        };
        match select(std::pin::pin!(f), std::pin::pin!(interrupt)).await {
            Either::Left((out, _)) => Ok(out),
            Either::Right((end, _)) => Err(end),
        }
    }

    async fn run(&mut self, inbound: &mut Inbound, queue: &Rc<ReplyQueue>) -> End {
        let digests = match self.initialize(inbound, queue).await {
            Ok(d) => d,
            Err(end) => return end,
        };
        let conn = Rc::new(Conn {
            queue: queue.clone(),
            digests,
            qid: Cell::new(0),
            sqhd: Cell::new(0),
            entries: Cell::new(0),
        });
        self.conn = Some(conn.clone());
        // A connection must Connect, and authenticate if it has to, within
        // the handshake timeout; once bound (and authenticated) it may stay
        // idle (the admin queue's keep-alive bounds it).
        let connect_by = Instant::now() + self.w.config.handshake_timeout;
        loop {
            if queue.is_dead() {
                return End::Eof;
            }
            let read = if matches!(self.session, Session::Unbound) || !self.authenticated() {
                let by = self.auth_by.map_or(connect_by, |a| a.max(connect_by));
                let left = by.saturating_duration_since(Instant::now());
                match self
                    .guarded(compio::time::timeout(left, inbound.read_array::<CH_LEN>()))
                    .await
                {
                    Ok(Err(_)) => return End::Io(io::ErrorKind::TimedOut.into()),
                    Ok(Ok(r)) => Ok(r),
                    Err(end) => Err(end),
                }
            } else {
                self.guarded(inbound.read_array::<CH_LEN>()).await
            };
            let ch = match read {
                Err(end) => return end,
                Ok(Ok(Some(ch))) => ch,
                Ok(Ok(None)) => return End::Eof,
                Ok(Err(e)) => return End::Io(e),
            };
            let end = match self.pdu(inbound, &conn, ch).await {
                Ok(()) => continue,
                Err(end) => end,
            };
            if let End::Violation(e) = &end {
                conn.send(pdu::term_req(PduType::C2HTermReq, e.fes, e.fei, &ch));
            }
            return end;
        }
    }

    /// ICReq → ICResp. Returns the digests in force.
    async fn initialize(
        &self,
        inbound: &mut Inbound,
        queue: &Rc<ReplyQueue>,
    ) -> Result<Digests, End> {
        let timeout = self.w.config.handshake_timeout;
        let terminate = |e: PduError, head: &[u8]| {
            queue.push(Reply {
                parts: vec![OutBuf::Bytes(pdu::term_req(
                    PduType::C2HTermReq,
                    e.fes,
                    e.fei,
                    head,
                ))],
                permit: None,
            });
            End::Violation(e)
        };
        let read = self.guarded(compio::time::timeout(
            timeout,
            inbound.read_array::<CH_LEN>(),
        ));
        let ch = match read.await? {
            Err(_) => return Err(End::Io(io::ErrorKind::TimedOut.into())),
            Ok(Ok(Some(ch))) => ch,
            Ok(Ok(None)) => return Err(End::Eof),
            Ok(Err(e)) => return Err(End::Io(e)),
        };
        let header = CommonHeader::decode(&ch);
        if PduType::from_u8(header.pdu_type).is_some_and(|t| t != PduType::IcReq && t.from_host()) {
            return Err(terminate(PduError::sequence("a PDU before ICReq"), &ch));
        }
        if let Err(e) = pdu::validate(&header, Digests::default(), 0, &[PduType::IcReq]) {
            return Err(terminate(e, &ch));
        }
        let rest = match self
            .guarded(inbound.read_array::<{ IC_LEN - CH_LEN }>())
            .await?
        {
            Ok(Some(r)) => r,
            Ok(None) => return Err(End::Io(io::ErrorKind::UnexpectedEof.into())),
            Err(e) => return Err(End::Io(e)),
        };
        let req = IcReq::decode(&rest);
        if req.pfv != 0 {
            return Err(terminate(
                PduError {
                    fes: Fes::UnsupportedParameter,
                    fei: 8,
                    reason: format!("PDU format version {}", req.pfv),
                },
                &ch,
            ));
        }
        if req.hpda != 0 {
            // Padding C2HData for the host's alignment is not implemented;
            // Linux and SPDK ask for none.
            return Err(terminate(
                PduError {
                    fes: Fes::UnsupportedParameter,
                    fei: 10,
                    reason: format!("host PDU data alignment {}", req.hpda),
                },
                &ch,
            ));
        }
        queue.push(Reply {
            parts: vec![OutBuf::Bytes(
                IcResp {
                    pfv: 0,
                    cpda: 0,
                    digests: req.digests,
                    maxh2cdata: self.w.config.max_h2c_data,
                }
                .encode(),
            )],
            permit: None,
        });
        Ok(req.digests)
    }

    fn in_capsule_limit(&self) -> usize {
        match self.session {
            Session::Io(_) => self.w.config.in_capsule_data as usize,
            _ => ADMIN_IN_CAPSULE,
        }
    }

    /// Reads and handles one PDU whose common header is `ch`.
    async fn pdu(
        &mut self,
        inbound: &mut Inbound,
        conn: &Rc<Conn>,
        ch: [u8; CH_LEN],
    ) -> Result<(), End> {
        let header = CommonHeader::decode(&ch);
        if header.pdu_type == PduType::IcReq as u8 {
            return Err(End::Violation(PduError::sequence("a second ICReq")));
        }
        let max_data = self
            .in_capsule_limit()
            .max(self.w.config.max_h2c_data as usize);
        let layout = pdu::validate(
            &header,
            conn.digests,
            max_data,
            &[PduType::CapsuleCmd, PduType::H2CData, PduType::H2CTermReq],
        )
        .map_err(End::Violation)?;
        match layout.pdu_type {
            PduType::CapsuleCmd => {
                let rest = self
                    .read_header::<{ CMD_HLEN - CH_LEN }>(inbound, &ch, &layout)
                    .await?;
                let mut sqe = Sqe([0; 64]);
                sqe.0.copy_from_slice(&rest);
                self.capsule(inbound, conn, sqe, &layout).await
            }
            PduType::H2CData => {
                let rest = self
                    .read_header::<{ DATA_HLEN - CH_LEN }>(inbound, &ch, &layout)
                    .await?;
                self.h2c_data(inbound, conn, DataHeader::decode(&rest), &layout)
                    .await
            }
            _ => {
                let rest = self
                    .read_header::<{ TERM_HLEN - CH_LEN }>(inbound, &ch, &layout)
                    .await?;
                let (fes, fei) = pdu::decode_term(&rest);
                warn!(fes, fei, "host terminated the connection (H2CTermReq)");
                Err(End::HostTerminated)
            }
        }
    }

    /// Reads the rest of a header (and checks its digest), then skips the
    /// padding before the data.
    async fn read_header<const N: usize>(
        &self,
        inbound: &mut Inbound,
        ch: &[u8; CH_LEN],
        layout: &Layout,
    ) -> Result<[u8; N], End> {
        let rest: [u8; N] = self.read_exact(inbound).await?;
        if layout.header_digest {
            let dgst: [u8; DIGEST_LEN] = self.read_exact(inbound).await?;
            let mut whole = [0u8; CMD_HLEN];
            whole[..CH_LEN].copy_from_slice(ch);
            whole[CH_LEN..CH_LEN + N].copy_from_slice(&rest);
            pdu::check_header_digest(&whole[..CH_LEN + N], &dgst).map_err(End::Violation)?;
        }
        if layout.pad > 0 {
            self.guarded(inbound.discard(layout.pad as u64))
                .await?
                .map_err(End::Io)?;
        }
        Ok(rest)
    }

    async fn read_exact<const N: usize>(&self, inbound: &mut Inbound) -> Result<[u8; N], End> {
        match self.guarded(inbound.read_array::<N>()).await? {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(End::Io(io::ErrorKind::UnexpectedEof.into())),
            Err(e) => Err(End::Io(e)),
        }
    }

    /// Reads `len` data bytes into `buf` at `at`, then the data digest if
    /// enabled; returns the buffer and whether the digest matched.
    async fn read_data(
        &self,
        inbound: &mut Inbound,
        conn: &Conn,
        buf: AlignedBuf,
        at: usize,
        len: usize,
    ) -> Result<(AlignedBuf, bool), End> {
        let buf = self
            .guarded(inbound.read_into(buf, at, len))
            .await?
            .map_err(End::Io)?;
        if !conn.digests.data {
            return Ok((buf, true));
        }
        let dgst: [u8; DIGEST_LEN] = self.read_exact(inbound).await?;
        let ok = pdu::digest(&buf[at..at + len]).to_le_bytes() == dgst;
        Ok((buf, ok))
    }

    async fn acquire(&self, bytes: usize) -> Result<Permit, End> {
        self.guarded(self.budget.acquire(bytes)).await
    }

    /// A command capsule: in-capsule data is read now; data the command
    /// needs from the host otherwise is asked for with an R2T.
    async fn capsule(
        &mut self,
        inbound: &mut Inbound,
        conn: &Rc<Conn>,
        sqe: Sqe,
        layout: &Layout,
    ) -> Result<(), End> {
        conn.fetched();
        let sgl = sqe.sgl();
        let cid = sqe.cid();
        if layout.data_len > 0 {
            if layout.data_len > self.in_capsule_limit() {
                return Err(End::Violation(PduError {
                    fes: Fes::DataLimitExceeded,
                    fei: 4,
                    reason: format!("{} bytes of in-capsule data", layout.data_len),
                }));
            }
            let permit = self.acquire(layout.data_len).await?;
            let buf = AlignedBuf::for_read(layout.data_len);
            let (buf, digest_ok) = self
                .read_data(inbound, conn, buf, 0, layout.data_len)
                .await?;
            let status = if !digest_ok {
                Some(Status::TRANSIENT_TRANSPORT)
            } else if sgl.id != SGL_IN_CAPSULE {
                Some(Status::SGL_TYPE_INVALID)
            } else if sgl.addr != 0 {
                Some(Status::SGL_OFFSET_INVALID)
            } else if sgl.len as usize != layout.data_len {
                Some(Status::SGL_LENGTH_INVALID)
            } else {
                None
            };
            match status {
                Some(s) => conn.complete(cid, Completion::status(s), Some(permit)),
                None => self.execute(conn, sqe, Some(buf), permit).await?,
            }
            return Ok(());
        }
        if !data_from_host(&sqe) || sgl.len == 0 {
            let permit = self.acquire(0).await?;
            return self.execute(conn, sqe, None, permit).await;
        }
        let status = if let Some(s) = self.auth_refusal(&sqe) {
            // Solicit no data for a command that will be refused.
            Some(s)
        } else if sgl.id == SGL_IN_CAPSULE {
            Some(Status::SGL_LENGTH_INVALID)
        } else if sgl.id != SGL_TRANSPORT {
            Some(Status::SGL_TYPE_INVALID)
        } else if sgl.len > self.w.config.max_data_transfer {
            Some(Status::INVALID_FIELD)
        } else if self.transfers.values().any(|t| t.sqe.cid() == cid) {
            Some(Status::CID_CONFLICT)
        } else {
            None
        };
        if let Some(s) = status {
            let permit = self.acquire(0).await?;
            conn.complete(cid, Completion::status(s), Some(permit));
            return Ok(());
        }
        if let Session::Io(q) = &self.session
            && sqe.opcode() != FABRICS_OPCODE
            && let Err(s) = q.precheck_write(&sqe)
        {
            let permit = self.acquire(0).await?;
            conn.complete(cid, Completion::status(s), Some(permit));
            return Ok(());
        }
        let len = sgl.len as usize;
        let permit = self.acquire(len).await?;
        let ttag = self.free_ttag();
        self.transfers.insert(
            ttag,
            Transfer {
                sqe,
                buf: Some(AlignedBuf::for_read(len)),
                received: 0,
                digest_failed: false,
                permit,
            },
        );
        let r2t = DataHeader {
            cccid: cid,
            ttag,
            offset: 0,
            len: len as u32,
        };
        conn.send(r2t.encode(PduType::R2T, 0, conn.digests));
        Ok(())
    }

    fn free_ttag(&mut self) -> u16 {
        loop {
            let t = self.next_ttag;
            self.next_ttag = self.next_ttag.wrapping_add(1);
            if !self.transfers.contains_key(&t) {
                return t;
            }
        }
    }

    /// Write data answering an R2T.
    async fn h2c_data(
        &mut self,
        inbound: &mut Inbound,
        conn: &Rc<Conn>,
        dh: DataHeader,
        layout: &Layout,
    ) -> Result<(), End> {
        let len = layout.data_len;
        if len == 0 || dh.len as usize != len {
            return Err(End::Violation(PduError::field(
                16,
                format!("DATAL {} but {len} data bytes", dh.len),
            )));
        }
        if len > self.w.config.max_h2c_data as usize {
            return Err(End::Violation(PduError {
                fes: Fes::DataLimitExceeded,
                fei: 16,
                reason: format!("{len} bytes in one H2CData (MAXH2CDATA exceeded)"),
            }));
        }
        let Some(mut t) = self.transfers.remove(&dh.ttag) else {
            return Err(End::Violation(PduError::field(
                10,
                format!("H2CData for unknown transfer tag {}", dh.ttag),
            )));
        };
        if dh.cccid != t.sqe.cid() {
            return Err(End::Violation(PduError::field(
                8,
                format!(
                    "H2CData CCCID {} for transfer of command {}",
                    dh.cccid,
                    t.sqe.cid()
                ),
            )));
        }
        let total = t.buf.as_ref().map_or(0, |b| b.len());
        if dh.offset as usize != t.received || t.received + len > total {
            return Err(End::Violation(PduError {
                fes: Fes::DataOutOfRange,
                fei: 12,
                reason: format!(
                    "H2CData {}+{len} but {} of {total} bytes received",
                    dh.offset, t.received
                ),
            }));
        }
        let Some(buf) = t.buf.take() else {
            return Err(End::Violation(PduError::sequence(
                "transfer without buffer",
            )));
        };
        let (buf, digest_ok) = self.read_data(inbound, conn, buf, t.received, len).await?;
        t.received += len;
        t.digest_failed |= !digest_ok;
        if t.received < total {
            t.buf = Some(buf);
            self.transfers.insert(dh.ttag, t);
            return Ok(());
        }
        if t.digest_failed {
            conn.complete(
                t.sqe.cid(),
                Completion::status(Status::TRANSIENT_TRANSPORT),
                Some(t.permit),
            );
            return Ok(());
        }
        self.execute(conn, t.sqe, Some(buf), t.permit).await
    }

    /// Runs a command with its data from the host (if any).
    async fn execute(
        &mut self,
        conn: &Rc<Conn>,
        sqe: Sqe,
        data: Option<AlignedBuf>,
        permit: Permit,
    ) -> Result<(), End> {
        let cid = sqe.cid();
        if let Some(s) = self.auth_refusal(&sqe) {
            conn.complete(cid, Completion::status(s), Some(permit));
            return Ok(());
        }
        if sqe.opcode() == FABRICS_OPCODE {
            let c = match sqe.fctype() {
                fctype::CONNECT => {
                    self.connect(conn, &sqe, data.as_deref().unwrap_or(&[]))
                        .await
                }
                fctype::PROPERTY_GET | fctype::PROPERTY_SET => match &self.session {
                    Session::Admin(a) => a.property(&sqe),
                    _ => Completion::status(Status::INVALID_FIELD),
                },
                fctype::AUTH_SEND => self.auth_send(&sqe, data.as_deref().unwrap_or(&[])),
                fctype::AUTH_RECEIVE => self.auth_receive(&sqe),
                _ => Completion::status(Status::INVALID_FIELD),
            };
            conn.complete(cid, c, Some(permit));
            return Ok(());
        }
        match &self.session {
            Session::Unbound => conn.complete(
                cid,
                Completion::status(Status::SEQUENCE_ERROR),
                Some(permit),
            ),
            Session::Admin(a) => {
                let a = a.clone();
                if let Some(c) = self.guarded(a.handle(&sqe, data)).await? {
                    conn.complete(cid, c, Some(permit));
                }
            }
            Session::Io(q) => q.clone().submit(sqe, data, permit),
        }
        Ok(())
    }

    /// Fabrics Connect: binds this connection to a new controller (admin
    /// queue) or to an existing one (I/O queue). A refusal that rests on
    /// the configuration waits up to [`CONFIG_GRACE`] for it to change.
    async fn connect(&mut self, conn: &Rc<Conn>, sqe: &Sqe, data: &[u8]) -> Completion {
        if !matches!(self.session, Session::Unbound) {
            return Completion::status(Status::SEQUENCE_ERROR);
        }
        let give_up = Instant::now() + CONFIG_GRACE;
        loop {
            let generation = self.w.subsystems.generation();
            match self.bind(conn, sqe, data) {
                Ok(cntlid) => {
                    let atr = if self.auth.is_some() { CONNECT_ATR } else { 0 };
                    return Completion::ok(u32::from(cntlid) | atr);
                }
                Err(r) if r.config && Instant::now() < give_up => {
                    while self.w.subsystems.generation() == generation && Instant::now() < give_up {
                        compio::time::sleep(CONFIG_POLL).await;
                    }
                }
                Err(r) => {
                    return Completion {
                        dw0: r.dw0,
                        ..Completion::status(r.status)
                    };
                }
            }
        }
    }

    fn bind(&mut self, conn: &Rc<Conn>, sqe: &Sqe, data: &[u8]) -> Result<u16, Refusal> {
        let c = fabrics::parse(sqe, data)?;
        let cfg = &self.w.config;
        let discovery = c.subnqn == DISCOVERY_NQN;
        let mut must_authenticate = false;
        if !discovery {
            let snap = self.w.subsystems.snapshot();
            let Some(sub) = snap.subsystem(&c.subnqn) else {
                info!(subnqn = %c.subnqn, host = %c.hostnqn, "connect to an unknown subsystem refused");
                return Err(Refusal::invalid(fabrics::SUBNQN_OFFSET, true).on_config());
            };
            if !sub.allows(&c.hostnqn, cfg.allow_any_host) {
                warn!(subnqn = %c.subnqn, host = %c.hostnqn, "host not allowed; connect refused");
                return Err(Refusal::status(Status::CONNECT_INVALID_HOST).on_config());
            }
            must_authenticate = sub.auth_for(&c.hostnqn).is_some();
        }
        if c.sqsize == 0 || c.sqsize >= cfg.max_queue_entries {
            return Err(Refusal::invalid(fabrics::SQSIZE_OFFSET, false));
        }
        let ctrl: Arc<Controller>;
        if c.qid == 0 {
            if c.cntlid != DYNAMIC_CNTLID {
                return Err(Refusal::invalid(fabrics::CNTLID_OFFSET, true));
            }
            let io_queues = if discovery { 0 } else { cfg.max_io_queues };
            ctrl = self
                .w
                .registry
                .create(
                    Association {
                        subnqn: c.subnqn.clone(),
                        hostnqn: c.hostnqn.clone(),
                        hostid: c.hostid,
                        authenticated: must_authenticate,
                    },
                    discovery,
                    cfg.max_queue_entries,
                    io_queues,
                )
                .map_err(Refusal::status)?;
            info!(cntlid = ctrl.cntlid, subnqn = %c.subnqn, host = %c.hostnqn, "controller created");
            let admin = AdminQueue::new(
                self.w.clone(),
                conn.clone(),
                ctrl.clone(),
                self.local,
                c.kato_ms,
            );
            compio::runtime::spawn(admin.clone().watchdog()).detach();
            self.session = Session::Admin(admin);
        } else {
            let found = self.w.registry.get(c.cntlid).filter(|k| {
                k.assoc.hostnqn == c.hostnqn
                    && k.assoc.subnqn == c.subnqn
                    && k.assoc.hostid == c.hostid
                    && !k.discovery
            });
            let Some(k) = found else {
                return Err(Refusal::invalid(fabrics::CNTLID_OFFSET, true));
            };
            if !k.ready() {
                return Err(Refusal::status(Status::SEQUENCE_ERROR));
            }
            k.attach_io_queue(c.qid)
                .map_err(|_| Refusal::invalid(fabrics::QID_OFFSET, false))?;
            ctrl = k;
            self.session = Session::Io(IoQueue::new(
                self.w.clone(),
                conn.clone(),
                ctrl.clone(),
                c.qid,
            ));
        }
        self.teardown = Some(ctrl.on_teardown(c.qid != 0).shared());
        if must_authenticate {
            self.auth = Some(TargetAuth::new(&c.hostnqn, &c.subnqn));
        }
        conn.qid.set(c.qid);
        conn.entries.set(u32::from(c.sqsize) + 1);
        Ok(ctrl.cntlid)
    }
}

impl<C: VolumeCatalog> ConnLoop<C> {
    /// Whether the queue may carry commands other than AUTH_Send /
    /// AUTH_Receive (true when its host need not authenticate).
    fn authenticated(&self) -> bool {
        self.auth.as_ref().is_none_or(TargetAuth::authenticated)
    }

    /// The status a command gets before anything else: AUTH_Send /
    /// AUTH_Receive need a bound queue; every other command but Connect
    /// needs the queue authenticated.
    fn auth_refusal(&self, sqe: &Sqe) -> Option<Status> {
        let fabrics = sqe.opcode() == FABRICS_OPCODE;
        match sqe.fctype() {
            fctype::AUTH_SEND | fctype::AUTH_RECEIVE if fabrics => {
                matches!(self.session, Session::Unbound).then_some(Status::SEQUENCE_ERROR)
            }
            fctype::CONNECT if fabrics => None,
            _ if matches!(self.session, Session::Unbound) => None,
            _ => (!self.authenticated()).then_some(Status::AUTH_REQUIRED),
        }
    }

    /// The checks AUTH_Send and AUTH_Receive share: DH-HMAC-CHAP's
    /// protocol ids, and a length (TL or AL, CDW11) that matches the SGL
    /// and is at most [`MAX_MESSAGE`].
    fn auth_command_len(sqe: &Sqe) -> Result<usize, Status> {
        if sqe.0[43] != SECP_DHCHAP || sqe.0[41] != SPSP || sqe.0[42] != SPSP {
            return Err(Status::INVALID_FIELD);
        }
        let len = sqe.dword(11) as usize;
        if len == 0 || len > MAX_MESSAGE || sqe.sgl().len as usize != len {
            return Err(Status::INVALID_FIELD);
        }
        Ok(len)
    }

    /// The current DH-HMAC-CHAP secrets of this queue's host.
    fn current_host_auth(&self) -> Option<crate::auth::HostAuth> {
        let (subnqn, hostnqn) = match &self.session {
            Session::Admin(a) => (&a.ctrl.assoc.subnqn, &a.ctrl.assoc.hostnqn),
            Session::Io(q) => (&q.ctrl.assoc.subnqn, &q.ctrl.assoc.hostnqn),
            Session::Unbound => return None,
        };
        let snap = self.w.subsystems.snapshot();
        let sub = snap.subsystem(subnqn)?;
        if !sub.allows(hostnqn, self.w.config.allow_any_host) {
            return None;
        }
        sub.auth_for(hostnqn).cloned()
    }

    /// AUTH_Send: a DH-HMAC-CHAP message from the host.
    fn auth_send(&mut self, sqe: &Sqe, data: &[u8]) -> Completion {
        let len = match Self::auth_command_len(sqe) {
            Ok(l) => l,
            Err(s) => return Completion::status(s),
        };
        if data.len() != len {
            return Completion::status(Status::SGL_LENGTH_INVALID);
        }
        let creds = self.current_host_auth();
        let Some(auth) = self.auth.as_mut() else {
            // The host need not authenticate: there is nothing to run.
            return Completion::status(Status::INVALID_FIELD);
        };
        let event = auth.send(data, creds.as_ref());
        if auth.negotiated() {
            // Failed transactions are bounded (MAX_FAILURES), so this
            // cannot keep an unauthenticated queue open for long.
            self.auth_by = Some(Instant::now() + self.w.config.handshake_timeout);
        }
        self.log_auth(event);
        Completion::ok(0)
    }

    /// AUTH_Receive: the next DH-HMAC-CHAP message for the host.
    fn auth_receive(&mut self, sqe: &Sqe) -> Completion {
        let al = match Self::auth_command_len(sqe) {
            Ok(l) => l,
            Err(s) => return Completion::status(s),
        };
        let Some(auth) = self.auth.as_mut() else {
            return Completion::status(Status::INVALID_FIELD);
        };
        let Some((msg, event)) = auth.receive(al) else {
            return Completion::status(Status::INVALID_FIELD);
        };
        self.log_auth(event);
        let mut out = AlignedBuf::zeroed(msg.len());
        out.copy_from_slice(&msg);
        Completion::with_data(out)
    }

    /// Logs a transaction's outcome (never a secret).
    fn log_auth(&self, event: Event) {
        let (cntlid, subnqn, host) = match &self.session {
            Session::Admin(a) => (a.ctrl.cntlid, &a.ctrl.assoc.subnqn, &a.ctrl.assoc.hostnqn),
            Session::Io(q) => (q.ctrl.cntlid, &q.ctrl.assoc.subnqn, &q.ctrl.assoc.hostnqn),
            Session::Unbound => return,
        };
        let qid = self.conn.as_ref().map_or(0, |c| c.qid.get());
        match event {
            Event::None => {}
            Event::Authenticated {
                hash,
                dhgroup,
                bidirectional,
            } if qid == 0 => {
                info!(cntlid, qid, %subnqn, %host, %hash, %dhgroup, bidirectional, "host authenticated (DH-HMAC-CHAP)");
            }
            Event::Authenticated {
                hash,
                dhgroup,
                bidirectional,
            } => {
                debug!(cntlid, qid, %subnqn, %host, %hash, %dhgroup, bidirectional, "host authenticated (DH-HMAC-CHAP)");
            }
            Event::Failed(why) => {
                warn!(cntlid, qid, %subnqn, %host, reason = %why, "DH-HMAC-CHAP authentication failed");
            }
        }
    }
}

/// Whether a command moves data from the host (bits 1:0 of the opcode, or
/// of the Fabrics command type, are 01b).
fn data_from_host(sqe: &Sqe) -> bool {
    let code = if sqe.opcode() == FABRICS_OPCODE {
        sqe.fctype()
    } else {
        sqe.opcode()
    };
    code & 3 == 1
}
