//! The admin queue of a controller: Property Get/Set, Identify, Get Log
//! Page, Get/Set Features, Keep Alive, Asynchronous Event Requests, and
//! the watchdog that enforces the keep-alive timeout and turns namespace
//! changes into asynchronous events.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use pontoon_buf::AlignedBuf;
use pontoon_volume::{BlockVolume, VolumeCatalog};
use tracing::{debug, warn};

use crate::command::{Sqe, Status, admin_op, fctype};
use crate::config::{DISCOVERY_NQN, Snapshot};
use crate::controller::Controller;
use crate::identify::{self, AER_LIMIT, ControllerInfo, LBA_SHIFT};
use crate::log_page::{self, lid};
use crate::queue::{Completion, Conn};
use crate::server::Worker;

/// Feature identifiers.
mod fid {
    /// Number of Queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE: u8 = 0x0F;
}

/// Async event configuration bit: Namespace Attribute Notices.
const AEN_NS_ATTR: u32 = 1 << 8;
/// Completion DW0 of the namespace-changed event: notice, namespace
/// attribute changed, log page 04h.
const EVENT_NS_CHANGED: u32 = 0x02 | (0x04 << 16);
/// How often the watchdog looks at keep-alive and configuration changes.
const TICK: Duration = Duration::from_millis(250);

/// Admin-queue state that commands and the watchdog share.
struct State {
    last_keep_alive: Instant,
    kato: Duration,
    aen_config: u32,
    /// Outstanding Asynchronous Event Requests (their command ids).
    aers: Vec<u16>,
    /// A namespace change not yet reported (or reported and not yet read).
    changed: BTreeSet<u32>,
    /// An event was sent; no more until the host reads log page 04h.
    masked: bool,
    generation: u64,
    nsids: BTreeSet<u32>,
}

/// A controller's admin queue.
pub(crate) struct AdminQueue<C: VolumeCatalog> {
    w: Rc<Worker<C>>,
    conn: Rc<Conn>,
    /// The controller.
    pub ctrl: Arc<Controller>,
    local: SocketAddr,
    state: RefCell<State>,
}

/// A completion carrying the first `len` bytes of `data`, zero-padded.
fn to_host(data: &[u8], len: usize) -> Completion {
    let mut out = AlignedBuf::zeroed(len);
    let n = data.len().min(len);
    out[..n].copy_from_slice(&data[..n]);
    Completion::with_data(out)
}

fn namespace_ids(snap: &Snapshot, nqn: &str) -> BTreeSet<u32> {
    snap.subsystem(nqn)
        .map(|s| s.namespaces.iter().map(|n| n.nsid).collect())
        .unwrap_or_default()
}

impl<C: VolumeCatalog> AdminQueue<C> {
    /// The admin queue of `ctrl` on connection `conn`.
    pub fn new(
        w: Rc<Worker<C>>,
        conn: Rc<Conn>,
        ctrl: Arc<Controller>,
        local: SocketAddr,
        kato_ms: u32,
    ) -> Rc<Self> {
        let snap = w.subsystems.snapshot();
        let nsids = namespace_ids(&snap, &ctrl.assoc.subnqn);
        Rc::new(Self {
            w,
            conn,
            ctrl,
            local,
            state: RefCell::new(State {
                last_keep_alive: Instant::now(),
                kato: Duration::from_millis(u64::from(kato_ms)),
                aen_config: 0,
                aers: Vec::new(),
                changed: BTreeSet::new(),
                masked: false,
                generation: snap.generation,
                nsids,
            }),
        })
    }

    /// Property Get / Property Set.
    pub fn property(&self, sqe: &Sqe) -> Completion {
        let size8 = sqe.0[40] & 7 == 1;
        let offset = sqe.dword(11);
        if sqe.fctype() == fctype::PROPERTY_GET {
            match self.ctrl.property_get(offset, size8) {
                Ok(v) => Completion {
                    dw1: (v >> 32) as u32,
                    ..Completion::ok(v as u32)
                },
                Err(s) => Completion::status(s),
            }
        } else {
            let value = u64::from(sqe.dword(12)) | (u64::from(sqe.dword(13)) << 32);
            match self.ctrl.property_set(offset, value, size8) {
                Ok(reset) => {
                    if reset {
                        // A reset aborts outstanding event requests; the
                        // host submits new ones after enabling again.
                        let mut st = self.state.borrow_mut();
                        st.aers.clear();
                        st.masked = false;
                    }
                    Completion::ok(0)
                }
                Err(s) => Completion::status(s),
            }
        }
    }

    /// Handles an admin command; `None` for an event request that stays
    /// outstanding.
    pub async fn handle(&self, sqe: &Sqe, _data: Option<AlignedBuf>) -> Option<Completion> {
        self.state.borrow_mut().last_keep_alive = Instant::now();
        if !self.ctrl.ready() {
            return Some(Completion::status(Status::SEQUENCE_ERROR));
        }
        let c = match sqe.opcode() {
            admin_op::KEEP_ALIVE => Completion::ok(0),
            admin_op::IDENTIFY => self.identify(sqe).await,
            admin_op::GET_LOG_PAGE => self.get_log_page(sqe),
            admin_op::SET_FEATURES => self.set_features(sqe),
            admin_op::GET_FEATURES => self.get_features(sqe),
            admin_op::ABORT => Completion::ok(1),
            admin_op::ASYNC_EVENT => return self.async_event(sqe.cid()),
            _ => Completion::status(Status::INVALID_OPCODE),
        };
        Some(c)
    }

    /// Sends `data` cut or zero-padded to what the command's SGL asks for.
    fn data_out(&self, sqe: &Sqe, data: Vec<u8>) -> Completion {
        let len = sqe.sgl().len as usize;
        if len == 0 || len > self.w.config.max_data_transfer as usize {
            return Completion::status(Status::INVALID_FIELD);
        }
        to_host(&data, len)
    }

    async fn identify(&self, sqe: &Sqe) -> Completion {
        let cns = sqe.dword(10) as u8;
        let nsid = sqe.nsid();
        let snap = self.w.subsystems.snapshot();
        let sub = snap.subsystem(&self.ctrl.assoc.subnqn);
        if self.ctrl.discovery && cns != 1 {
            return Completion::status(Status::INVALID_FIELD);
        }
        let data = match cns {
            0x01 => {
                let serial = identify::serial_of(&self.ctrl.assoc.subnqn);
                let max_nsid = sub
                    .and_then(|s| s.namespaces.iter().map(|n| n.nsid).max())
                    .unwrap_or(0);
                identify::controller(
                    &self.ctrl,
                    &ControllerInfo {
                        max_nsid: max_nsid.max(if self.ctrl.discovery { 0 } else { 1024 }),
                        mdts: (self.w.config.max_data_transfer >> LBA_SHIFT).trailing_zeros() as u8,
                        in_capsule: self.w.config.in_capsule_data,
                        serial: &serial,
                    },
                )
            }
            0x00 => {
                if nsid == 0 || nsid == u32::MAX {
                    return Completion::status(Status::INVALID_NAMESPACE);
                }
                let Some(ns) = sub.and_then(|s| s.namespace(nsid)) else {
                    // An inactive namespace id: a zeroed structure.
                    return self.data_out(sqe, vec![0; identify::IDENTIFY_LEN]);
                };
                match self.w.catalog.open(&ns.volume).await {
                    Ok(Some(v)) => identify::namespace(ns, v.size() >> LBA_SHIFT, v.read_only()),
                    Ok(None) => {
                        warn!(volume = %ns.volume, "namespace's volume does not exist");
                        vec![0; identify::IDENTIFY_LEN]
                    }
                    Err(e) => {
                        debug!(volume = %ns.volume, "opening for identify: {e}");
                        return Completion::status(Status::NAMESPACE_NOT_READY);
                    }
                }
            }
            0x02 => {
                if nsid >= 0xFFFF_FFFE {
                    return Completion::status(Status::INVALID_NAMESPACE);
                }
                let ids = sub
                    .into_iter()
                    .flat_map(|s| s.namespaces.iter().map(|n| n.nsid));
                identify::active_list(ids, nsid)
            }
            0x03 => match sub.and_then(|s| s.namespace(nsid)) {
                Some(ns) => identify::descriptors(ns),
                None => return Completion::status(Status::INVALID_NAMESPACE),
            },
            _ => return Completion::status(Status::INVALID_FIELD),
        };
        self.data_out(sqe, data)
    }

    fn get_log_page(&self, sqe: &Sqe) -> Completion {
        let cdw10 = sqe.dword(10);
        let id = cdw10 as u8;
        let retain = cdw10 & (1 << 15) != 0;
        let numd = ((cdw10 >> 16) | ((sqe.dword(11) & 0xFFFF) << 16)) as u64 + 1;
        let offset = u64::from(sqe.dword(12)) | (u64::from(sqe.dword(13)) << 32);
        let len = numd * 4;
        if !offset.is_multiple_of(4)
            || len != u64::from(sqe.sgl().len)
            || len > u64::from(self.w.config.max_data_transfer)
        {
            return Completion::status(Status::INVALID_FIELD);
        }
        let page = match (self.ctrl.discovery, id) {
            (true, lid::DISCOVERY) => {
                let snap = self.w.subsystems.snapshot();
                let host = &self.ctrl.assoc.hostnqn;
                let any = self.w.config.allow_any_host;
                log_page::discovery(
                    snap.generation,
                    snap.subsystems.iter().filter(|s| s.allows(host, any)),
                    self.local,
                )
            }
            (false, lid::ERROR) => log_page::error_info(),
            (false, lid::SMART) => log_page::smart(&self.ctrl.counters),
            (false, lid::FIRMWARE) => log_page::firmware(),
            (false, lid::CHANGED_NS) => {
                let mut st = self.state.borrow_mut();
                let ids: Vec<u32> = st.changed.iter().copied().collect();
                if !retain {
                    st.changed.clear();
                    st.masked = false;
                }
                log_page::changed_namespaces(&ids)
            }
            _ => return Completion::status(Status::INVALID_LOG_PAGE),
        };
        if offset > page.len() as u64 {
            return Completion::status(Status::INVALID_FIELD);
        }
        to_host(&page[offset as usize..], len as usize)
    }

    fn set_features(&self, sqe: &Sqe) -> Completion {
        let cdw10 = sqe.dword(10);
        if cdw10 & (1 << 31) != 0 {
            return Completion::status(Status::FEATURE_NOT_SAVEABLE);
        }
        let cdw11 = sqe.dword(11);
        match cdw10 as u8 {
            fid::NUM_QUEUES if !self.ctrl.discovery => {
                let (nsqr, ncqr) = (cdw11 & 0xFFFF, cdw11 >> 16);
                if nsqr == 0xFFFF || ncqr == 0xFFFF {
                    return Completion::status(Status::INVALID_FIELD);
                }
                let granted = (nsqr.min(ncqr) + 1).min(u32::from(self.w.config.max_io_queues));
                self.ctrl.io_queues.store(granted as u16, Ordering::Release);
                let n = granted - 1;
                Completion::ok(n | (n << 16))
            }
            fid::ASYNC_EVENT => {
                self.state.borrow_mut().aen_config = cdw11;
                Completion::ok(0)
            }
            fid::KEEP_ALIVE => {
                self.state.borrow_mut().kato = Duration::from_millis(u64::from(cdw11));
                Completion::ok(0)
            }
            _ => Completion::status(Status::INVALID_FIELD),
        }
    }

    fn get_features(&self, sqe: &Sqe) -> Completion {
        let st = self.state.borrow();
        match sqe.dword(10) as u8 {
            fid::NUM_QUEUES if !self.ctrl.discovery => {
                let n = u32::from(self.ctrl.io_queues.load(Ordering::Acquire).max(1)) - 1;
                Completion::ok(n | (n << 16))
            }
            fid::ASYNC_EVENT => Completion::ok(st.aen_config),
            fid::KEEP_ALIVE => Completion::ok(st.kato.as_millis() as u32),
            _ => Completion::status(Status::INVALID_FIELD),
        }
    }

    fn async_event(&self, cid: u16) -> Option<Completion> {
        let mut st = self.state.borrow_mut();
        if st.aers.len() >= AER_LIMIT {
            return Some(Completion::status(Status::AER_LIMIT));
        }
        st.aers.push(cid);
        drop(st);
        self.deliver_events();
        None
    }

    /// Completes an outstanding event request if a change awaits one.
    fn deliver_events(&self) {
        let cid = {
            let mut st = self.state.borrow_mut();
            if st.changed.is_empty() || st.masked || st.aen_config & AEN_NS_ATTR == 0 {
                return;
            }
            let Some(cid) = st.aers.pop() else { return };
            st.masked = true;
            cid
        };
        debug!(
            cntlid = self.ctrl.cntlid,
            "namespace attribute changed event"
        );
        self.conn
            .complete(cid, Completion::ok(EVENT_NS_CHANGED), None);
    }

    /// Notices configuration changes of the controller's subsystem:
    /// namespaces added or removed become an event; a subsystem removed,
    /// or a host taken off its allow-list, ends the controller. Returns
    /// false once the controller must end.
    fn check_config(&self) -> bool {
        let generation = self.w.subsystems.generation();
        if generation == self.state.borrow().generation {
            return true;
        }
        let snap = self.w.subsystems.snapshot();
        let host = &self.ctrl.assoc.hostnqn;
        let allowed = snap
            .subsystem(&self.ctrl.assoc.subnqn)
            .is_some_and(|s| s.allows(host, self.w.config.allow_any_host));
        if !allowed {
            warn!(
                cntlid = self.ctrl.cntlid,
                %host,
                subnqn = %self.ctrl.assoc.subnqn,
                "subsystem removed or host no longer allowed; ending the controller"
            );
            return false;
        }
        let must_authenticate = snap
            .subsystem(&self.ctrl.assoc.subnqn)
            .is_some_and(|s| s.auth_for(host).is_some());
        if must_authenticate && !self.ctrl.assoc.authenticated {
            warn!(
                cntlid = self.ctrl.cntlid,
                %host,
                subnqn = %self.ctrl.assoc.subnqn,
                "the host must now authenticate (DH-HMAC-CHAP secret added); ending the controller"
            );
            return false;
        }
        let now = namespace_ids(&snap, &self.ctrl.assoc.subnqn);
        {
            let mut st = self.state.borrow_mut();
            st.generation = snap.generation;
            let diff: Vec<u32> = st.nsids.symmetric_difference(&now).copied().collect();
            st.changed.extend(diff);
            st.nsids = now;
        }
        self.deliver_events();
        true
    }

    /// Runs while the controller lives: tears it down when the keep-alive
    /// timeout passes without a command or its host loses access, and
    /// reports namespace changes.
    pub async fn watchdog(self: Rc<Self>) {
        while !self.ctrl.is_dead() && !self.w.stop.is_set() {
            compio::time::sleep(TICK).await;
            let expired = {
                let st = self.state.borrow();
                !st.kato.is_zero() && st.last_keep_alive.elapsed() > st.kato + st.kato / 10
            };
            if expired {
                warn!(
                    cntlid = self.ctrl.cntlid,
                    host = %self.ctrl.assoc.hostnqn,
                    "keep-alive timeout; tearing the controller down"
                );
                self.w.registry.remove(self.ctrl.cntlid);
                break;
            }
            if self.ctrl.assoc.subnqn != DISCOVERY_NQN && !self.check_config() {
                self.w.registry.remove(self.ctrl.cntlid);
                break;
            }
        }
    }
}
