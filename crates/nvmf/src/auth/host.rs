//! The host's side of one DH-HMAC-CHAP transaction, without I/O: the
//! initiator sends what [`HostExchange`] produces in AUTH_Send commands and
//! feeds it what AUTH_Receive returns. With a controller secret the host
//! also challenges the controller and refuses (AUTH_Failure2) a controller
//! whose response does not match.

use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::DhchapSecret;
use super::dhchap::{DhGroup, DhKeyPair, HashId, ResponseInput, Role, response};
use super::message::{Explanation, Message, Negotiate, REASON_FAILED, Reply};

/// A host's secrets and what it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCredentials {
    /// The host's secret.
    pub secret: DhchapSecret,
    /// The controller's secret: with it, the host also makes the
    /// controller authenticate itself (bidirectional).
    pub ctrl_secret: Option<DhchapSecret>,
    /// Hashes offered, in order of preference.
    pub hashes: Vec<HashId>,
    /// DH groups offered, in order of preference.
    pub dhgroups: Vec<DhGroup>,
}

impl HostCredentials {
    /// `secret`, no controller secret, every hash and group offered (as
    /// Linux does).
    pub fn new(secret: DhchapSecret) -> Self {
        Self {
            secret,
            ctrl_secret: None,
            hashes: HashId::ALL.to_vec(),
            dhgroups: DhGroup::ALL.to_vec(),
        }
    }
}

/// How a transaction went, when it succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthSummary {
    /// The hash the controller chose.
    pub hash: HashId,
    /// The DH group the controller chose.
    pub dhgroup: DhGroup,
    /// The controller authenticated itself too.
    pub bidirectional: bool,
}

/// Why a transaction failed on the host's side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostAuthError {
    /// The controller refused the host (AUTH_Failure1).
    #[error("the controller refused authentication: {explanation} (reason code {reason:#04x})")]
    Refused {
        /// Reason code.
        reason: u8,
        /// Explanation.
        explanation: Explanation,
    },
    /// The controller's response to the host's challenge did not match
    /// the controller secret: the host sent AUTH_Failure2.
    #[error("the controller did not prove the controller secret (wrong controller secret)")]
    ControllerMismatch,
    /// The controller sent something the protocol does not allow.
    #[error("the controller broke the authentication protocol: {0}")]
    Protocol(String),
}

/// What to do after Success1.
#[derive(Debug)]
pub struct Finish {
    /// An AUTH_Send to make (Success2 or Failure2), if any.
    pub send: Option<Vec<u8>>,
    /// The transaction's outcome once that is sent.
    pub result: Result<AuthSummary, HostAuthError>,
}

/// One transaction in progress.
pub struct HostExchange {
    creds: HostCredentials,
    hostnqn: String,
    subnqn: String,
    tid: u16,
    /// After the Reply: what Success1 is checked against.
    sent: Option<Sent>,
}

struct Sent {
    hash: HashId,
    dhgroup: DhGroup,
    shared: Zeroizing<Vec<u8>>,
    /// C2 and S2, when the controller must answer.
    c2: Option<(Zeroizing<Vec<u8>>, u32)>,
}

fn refused_or(msg: &Message, what: &str) -> HostAuthError {
    match msg {
        Message::Failure {
            from_host: false,
            reason,
            explanation,
            ..
        } => HostAuthError::Refused {
            reason: *reason,
            explanation: *explanation,
        },
        m => HostAuthError::Protocol(format!("{} where {what} was due", m.name())),
    }
}

impl HostExchange {
    /// A transaction `tid` of `hostnqn` with subsystem `subnqn`.
    pub fn new(creds: HostCredentials, hostnqn: &str, subnqn: &str, tid: u16) -> Self {
        Self {
            creds,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            tid,
            sent: None,
        }
    }

    /// The AUTH_Negotiate to send first.
    pub fn negotiate(&self) -> Vec<u8> {
        Message::Negotiate(Negotiate {
            tid: self.tid,
            sc_c: 0,
            hashes: self.creds.hashes.iter().map(|h| h.id()).collect(),
            dhgroups: self.creds.dhgroups.iter().map(|g| g.id()).collect(),
        })
        .encode()
    }

    /// Answers the controller's Challenge (an AUTH_Receive's data) with the
    /// Reply to send.
    pub fn reply(&mut self, data: &[u8]) -> Result<Vec<u8>, HostAuthError> {
        let msg = Message::decode(data)
            .map_err(|e| HostAuthError::Protocol(format!("undecodable challenge: {e}")))?;
        let Message::Challenge(c) = &msg else {
            return Err(refused_or(&msg, "Challenge"));
        };
        if c.tid != self.tid {
            return Err(HostAuthError::Protocol(format!(
                "challenge for transaction {} in transaction {}",
                c.tid, self.tid
            )));
        }
        if !self.creds.hashes.contains(&c.hash) || !self.creds.dhgroups.contains(&c.dhgroup) {
            return Err(HostAuthError::Protocol(format!(
                "the controller chose {} / {}, which were not offered",
                c.hash, c.dhgroup
            )));
        }
        let (shared, dh_value) = match DhKeyPair::generate(c.dhgroup) {
            None => (Zeroizing::new(Vec::new()), Vec::new()),
            Some(kp) => {
                let s = kp.shared_secret(&c.dh_value).map_err(|e| {
                    HostAuthError::Protocol(format!("the controller's DH value: {e}"))
                })?;
                (s, kp.public.clone())
            }
        };
        let key = self.creds.secret.transformed(&self.hostnqn);
        let r1 = response(
            Role::Host,
            &key,
            &ResponseInput {
                hash: c.hash,
                challenge: &c.challenge,
                shared: &shared,
                seqnum: c.seqnum,
                tid: self.tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        let c2 = self.creds.ctrl_secret.as_ref().map(|_| {
            let mut c2 = Zeroizing::new(vec![0u8; c.hash.digest_len()]);
            rand::fill(&mut c2[..]);
            let s2 = rand::random::<u32>().max(1);
            (c2, s2)
        });
        let reply = Message::Reply(Reply {
            tid: self.tid,
            response: r1.to_vec(),
            challenge: c2.as_ref().map(|(c, _)| c.to_vec()),
            seqnum: c2.as_ref().map_or(0, |(_, s)| *s),
            dh_value,
        })
        .encode();
        self.sent = Some(Sent {
            hash: c.hash,
            dhgroup: c.dhgroup,
            shared,
            c2,
        });
        Ok(reply)
    }

    /// Checks Success1 (an AUTH_Receive's data): with a controller secret,
    /// the controller's response must match, else the host answers with
    /// AUTH_Failure2.
    pub fn success1(&mut self, data: &[u8]) -> Finish {
        let done = |result| Finish { send: None, result };
        let Some(sent) = self.sent.take() else {
            return done(Err(HostAuthError::Protocol(
                "Success1 before the Reply".into(),
            )));
        };
        let msg = match Message::decode(data) {
            Ok(m) => m,
            Err(e) => {
                return done(Err(HostAuthError::Protocol(format!(
                    "undecodable Success1: {e}"
                ))));
            }
        };
        let Message::Success1(s) = &msg else {
            return done(Err(refused_or(&msg, "Success1")));
        };
        if s.tid != self.tid || usize::from(s.hl) != sent.hash.digest_len() {
            return done(Err(HostAuthError::Protocol(format!(
                "Success1 for transaction {} with HL {}",
                s.tid, s.hl
            ))));
        }
        let summary = AuthSummary {
            hash: sent.hash,
            dhgroup: sent.dhgroup,
            bidirectional: sent.c2.is_some(),
        };
        let (Some((c2, s2)), Some(ctrl)) = (&sent.c2, &self.creds.ctrl_secret) else {
            return done(Ok(summary));
        };
        let key = ctrl.transformed(&self.subnqn);
        let want = response(
            Role::Controller,
            &key,
            &ResponseInput {
                hash: sent.hash,
                challenge: c2,
                shared: &sent.shared,
                seqnum: *s2,
                tid: self.tid,
                hostnqn: &self.hostnqn,
                subnqn: &self.subnqn,
            },
        );
        let matches = s
            .response
            .as_ref()
            .is_some_and(|r| bool::from(want.ct_eq(r)));
        if matches {
            Finish {
                send: Some(Message::Success2 { tid: self.tid }.encode()),
                result: Ok(summary),
            }
        } else {
            Finish {
                send: Some(
                    Message::Failure {
                        from_host: true,
                        tid: self.tid,
                        reason: REASON_FAILED,
                        explanation: Explanation::Failed,
                    }
                    .encode(),
                ),
                result: Err(HostAuthError::ControllerMismatch),
            }
        }
    }
}
