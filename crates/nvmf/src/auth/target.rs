//! The controller's side of one queue's DH-HMAC-CHAP transactions, as a
//! state machine without I/O: the connection feeds it each AUTH_Send's data
//! ([`TargetAuth::send`]) and asks it for each AUTH_Receive's
//! ([`TargetAuth::receive`]). Every queue (admin and I/O) authenticates on
//! its own, as Linux's host and nvmet do.
//!
//! A transaction runs Negotiate → Challenge → Reply → Success1 (→
//! Success2 when the host asked the controller to authenticate itself).
//! Any mistake — a wrong response, a message out of turn, a wrong
//! transaction id — moves it to [`Step::Failure1`]: the host's next
//! AUTH_Receive gets an AUTH_Failure1 with the reason, and the queue is
//! not (or no longer) authenticated. A new Negotiate starts a new
//! transaction at any time (re-authentication), with the secrets in force
//! then. At most [`MAX_FAILURES`] transactions may fail on one queue.

use std::sync::atomic::{AtomicU32, Ordering};

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::HostAuth;
use super::dhchap::{DhGroup, DhKeyPair, HashId, ResponseInput, Role, response};
use super::message::{Challenge, Explanation, Message, Negotiate, REASON_FAILED, Reply, Success1};

/// Failed transactions one queue may have; a Negotiate after that fails
/// at once.
pub(crate) const MAX_FAILURES: u32 = 3;
/// Transactions a queue may start while it is not authenticated (a host
/// that negotiates and never replies must not hold a queue open forever).
pub(crate) const MAX_UNAUTHENTICATED_STARTS: u32 = 8;

/// The DH groups tried, in order, when the configuration names none: the
/// cheapest group that adds a key exchange first, the null group last.
const GROUP_PREFERENCE: [DhGroup; 6] = [
    DhGroup::Ffdhe2048,
    DhGroup::Ffdhe3072,
    DhGroup::Ffdhe4096,
    DhGroup::Ffdhe6144,
    DhGroup::Ffdhe8192,
    DhGroup::Null,
];

/// The next sequence number: a process-wide counter starting at random,
/// never 0 (0 means "no bidirectional authentication").
fn next_seqnum() -> u32 {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    loop {
        let cur = SEQ.load(Ordering::Relaxed);
        let next = if cur == 0 {
            rand::random::<u32>()
        } else {
            cur.wrapping_add(1)
        };
        if next != 0
            && SEQ
                .compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return next;
        }
    }
}

/// What was negotiated, and the secrets of the transaction.
struct Negotiated {
    tid: u16,
    hash: HashId,
    dhgroup: DhGroup,
    creds: HostAuth,
}

/// A challenge sent, awaiting the reply.
struct Challenged {
    n: Negotiated,
    c1: Zeroizing<Vec<u8>>,
    s1: u32,
    dh: Option<DhKeyPair>,
}

/// A reply verified, awaiting the host's AUTH_Receive of Success1.
struct Verified {
    n: Negotiated,
    shared: Zeroizing<Vec<u8>>,
    /// The host's challenge C2 and sequence number S2, if it asked the
    /// controller to authenticate itself.
    c2: Option<(Vec<u8>, u32)>,
}

/// Where a queue's transaction is.
enum Step {
    /// No transaction: waiting for AUTH_Negotiate.
    Idle,
    /// Negotiated: the host reads the challenge next.
    Challenge(Negotiated),
    /// Challenge sent: waiting for the host's Reply.
    Reply(Challenged),
    /// Reply verified: the host reads Success1 next.
    Success1(Verified),
    /// Success1 carried the controller's response: waiting for Success2
    /// (or Failure2 if the host did not accept it).
    Success2 {
        tid: u16,
        hash: HashId,
        dhgroup: DhGroup,
    },
    /// The transaction failed: the host reads Failure1 next.
    Failure1 { tid: u16, why: Explanation },
}

/// What a step did, for the connection to log (never a secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// Nothing to report.
    None,
    /// The host authenticated itself (and the controller itself too, if
    /// `bidirectional`).
    Authenticated {
        /// The hash used.
        hash: HashId,
        /// The DH group used.
        dhgroup: DhGroup,
        /// The host also checked the controller's response.
        bidirectional: bool,
    },
    /// The transaction failed.
    Failed(Explanation),
}

/// One queue's authentication state.
pub(crate) struct TargetAuth {
    hostnqn: String,
    subnqn: String,
    step: Step,
    authenticated: bool,
    failures: u32,
    /// Transactions started while not authenticated.
    starts: u32,
}

impl TargetAuth {
    /// A queue of `hostnqn` on `subnqn`, not authenticated yet.
    pub fn new(hostnqn: &str, subnqn: &str) -> Self {
        Self {
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            step: Step::Idle,
            authenticated: false,
            failures: 0,
            starts: 0,
        }
    }

    /// Whether the queue may carry commands other than authentication.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether a transaction was just negotiated (its challenge is due).
    pub fn negotiated(&self) -> bool {
        matches!(self.step, Step::Challenge(_))
    }

    fn fail(&mut self, tid: u16, why: Explanation) -> Event {
        self.authenticated = false;
        self.failures = self.failures.saturating_add(1);
        self.step = Step::Failure1 { tid, why };
        Event::Failed(why)
    }

    /// Handles an AUTH_Send's data. `creds` are the host's secrets in force
    /// now (used when the data is a Negotiate; `None` if none are
    /// configured). The command itself always succeeds: a failure is
    /// reported by the Failure1 the host reads next.
    pub fn send(&mut self, data: &[u8], creds: Option<&HostAuth>) -> Event {
        let tid_now = match &self.step {
            Step::Challenge(n) => n.tid,
            Step::Reply(c) => c.n.tid,
            Step::Success1(v) => v.n.tid,
            Step::Success2 { tid, .. } | Step::Failure1 { tid, .. } => *tid,
            Step::Idle => 0,
        };
        let msg = match Message::decode(data) {
            Ok(m) => m,
            Err(why) => return self.fail(tid_now, why),
        };
        if let Message::Negotiate(n) = msg {
            return self.negotiate(&n, creds);
        }
        if msg.tid() != tid_now {
            return self.fail(tid_now, Explanation::IncorrectPayload);
        }
        match (std::mem::replace(&mut self.step, Step::Idle), msg) {
            (Step::Reply(c), Message::Reply(r)) => self.reply(c, &r),
            (Step::Success2 { hash, dhgroup, .. }, Message::Success2 { .. }) => {
                self.authenticated = true;
                Event::Authenticated {
                    hash,
                    dhgroup,
                    bidirectional: true,
                }
            }
            (
                Step::Success2 { tid, .. },
                Message::Failure {
                    from_host: true, ..
                },
            ) => {
                // The host did not accept the controller's response. It
                // ends the transaction; nothing more is sent.
                let e = self.fail(tid, Explanation::Failed);
                self.step = Step::Idle;
                e
            }
            (_, _) => self.fail(tid_now, Explanation::IncorrectMessage),
        }
    }

    fn negotiate(&mut self, n: &Negotiate, creds: Option<&HostAuth>) -> Event {
        if self.failures >= MAX_FAILURES
            || (!self.authenticated && self.starts >= MAX_UNAUTHENTICATED_STARTS)
        {
            return self.fail(n.tid, Explanation::Failed);
        }
        let Some(creds) = creds else {
            return self.fail(n.tid, Explanation::NotUsable);
        };
        if n.sc_c != 0 {
            return self.fail(n.tid, Explanation::ConcatMismatch);
        }
        let offered_hash = |h: HashId| n.hashes.contains(&h.id());
        let hash = match creds.hash {
            Some(h) => offered_hash(h).then_some(h),
            None => n.hashes.iter().find_map(|&id| HashId::from_id(id)),
        };
        let Some(hash) = hash else {
            return self.fail(n.tid, Explanation::HashUnusable);
        };
        let offered_group = |g: DhGroup| n.dhgroups.contains(&g.id());
        let dhgroup = match creds.dhgroup {
            Some(g) => offered_group(g).then_some(g),
            None => GROUP_PREFERENCE.into_iter().find(|&g| offered_group(g)),
        };
        let Some(dhgroup) = dhgroup else {
            return self.fail(n.tid, Explanation::DhGroupUnusable);
        };
        if !self.authenticated {
            self.starts += 1;
        }
        self.step = Step::Challenge(Negotiated {
            tid: n.tid,
            hash,
            dhgroup,
            creds: creds.clone(),
        });
        Event::None
    }

    fn reply(&mut self, c: Challenged, r: &Reply) -> Event {
        let tid = c.n.tid;
        let hash = c.n.hash;
        if r.response.len() != hash.digest_len()
            || r.challenge
                .as_ref()
                .is_some_and(|c2| c2.len() != hash.digest_len())
        {
            return self.fail(tid, Explanation::IncorrectPayload);
        }
        let shared = match &c.dh {
            None if r.dh_value.is_empty() => Zeroizing::new(Vec::new()),
            None => return self.fail(tid, Explanation::IncorrectPayload),
            Some(kp) => match kp.shared_secret(&r.dh_value) {
                Ok(s) => s,
                Err(_) => return self.fail(tid, Explanation::DhGroupUnusable),
            },
        };
        let key = c.n.creds.secret.transformed(&self.hostnqn);
        let want = response(
            Role::Host,
            &key,
            &ResponseInput {
                hash,
                challenge: &c.c1,
                shared: &shared,
                seqnum: c.s1,
                tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        if !bool::from(want.ct_eq(&r.response)) {
            return self.fail(tid, Explanation::Failed);
        }
        // S2 = 0 with a C2 would ask for a secure channel key, not for the
        // controller's response: not bidirectional.
        let c2 = r
            .challenge
            .clone()
            .filter(|_| r.seqnum != 0)
            .map(|c2| (c2, r.seqnum));
        self.step = Step::Success1(Verified { n: c.n, shared, c2 });
        Event::None
    }

    /// Produces an AUTH_Receive's data, `al` bytes (zero-padded). `None`
    /// if `al` cannot hold the message due now (the transaction stays
    /// where it is).
    pub fn receive(&mut self, al: usize) -> Option<(Vec<u8>, Event)> {
        let step = std::mem::replace(&mut self.step, Step::Idle);
        let (msg, event) = match step {
            Step::Challenge(n) => {
                let hl = n.hash.digest_len();
                if al < 16 + hl + n.dhgroup.value_len() {
                    self.step = Step::Challenge(n);
                    return None;
                }
                let mut c1 = Zeroizing::new(vec![0u8; hl]);
                rand::fill(&mut c1[..]);
                let s1 = next_seqnum();
                let dh = DhKeyPair::generate(n.dhgroup);
                let msg = Message::Challenge(Challenge {
                    tid: n.tid,
                    hash: n.hash,
                    dhgroup: n.dhgroup,
                    seqnum: s1,
                    challenge: c1.to_vec(),
                    dh_value: dh.as_ref().map(|d| d.public.clone()).unwrap_or_default(),
                });
                self.step = Step::Reply(Challenged { n, c1, s1, dh });
                (msg, Event::None)
            }
            Step::Success1(v) => {
                let hl = v.n.hash.digest_len();
                if al < 16 + hl {
                    self.step = Step::Success1(v);
                    return None;
                }
                let (tid, hash, dhgroup) = (v.n.tid, v.n.hash, v.n.dhgroup);
                match &v.c2 {
                    None => {
                        self.authenticated = true;
                        let msg = Message::Success1(Success1 {
                            tid,
                            hl: hl as u8,
                            response: None,
                        });
                        let e = Event::Authenticated {
                            hash,
                            dhgroup,
                            bidirectional: false,
                        };
                        (msg, e)
                    }
                    Some((c2, s2)) => {
                        let Some(ctrl) = &v.n.creds.ctrl_secret else {
                            // The host wants the controller to prove a
                            // secret it was not given.
                            let e = self.fail(tid, Explanation::Failed);
                            self.step = Step::Idle;
                            return Some((failure1(tid, Explanation::Failed, al), e));
                        };
                        let key = ctrl.transformed(&self.subnqn);
                        let r2 = response(
                            Role::Controller,
                            &key,
                            &ResponseInput {
                                hash,
                                challenge: c2,
                                shared: &v.shared,
                                seqnum: *s2,
                                tid,
                                hostnqn: &self.hostnqn,
                                subnqn: &self.subnqn,
                            },
                        );
                        self.step = Step::Success2 { tid, hash, dhgroup };
                        let msg = Message::Success1(Success1 {
                            tid,
                            hl: hl as u8,
                            response: Some(r2.to_vec()),
                        });
                        (msg, Event::None)
                    }
                }
            }
            Step::Failure1 { tid, why } => {
                return Some((failure1(tid, why, al), Event::None));
            }
            other => {
                // Nothing is due: the host reads out of turn.
                let tid = match &other {
                    Step::Reply(c) => c.n.tid,
                    Step::Success2 { tid, .. } => *tid,
                    _ => 0,
                };
                let e = self.fail(tid, Explanation::IncorrectMessage);
                self.step = Step::Idle;
                return Some((failure1(tid, Explanation::IncorrectMessage, al), e));
            }
        };
        let mut b = msg.encode();
        debug_assert!(b.len() <= al);
        b.resize(al, 0);
        Some((b, event))
    }
}

/// An AUTH_Failure1 padded to `al` bytes (at least its own 8).
fn failure1(tid: u16, why: Explanation, al: usize) -> Vec<u8> {
    let mut b = Message::Failure {
        from_host: false,
        tid,
        reason: REASON_FAILED,
        explanation: why,
    }
    .encode();
    b.resize(al.max(b.len()), 0);
    b
}
