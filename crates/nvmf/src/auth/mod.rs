//! NVMe in-band authentication with DH-HMAC-CHAP (NVMe Base Specification
//! 2.x, 8.3.4 "Authentication", from TP 8006), on both sides: the target
//! ([`target`], driven by the connection's AUTH_Send / AUTH_Receive
//! commands) and the host ([`host`], used by [`crate::initiator`]).
//!
//! A subsystem names, per allowed host, a [`HostAuth`]: the host's secret
//! and optionally the controller's (bidirectional authentication), in the
//! `DHHC-1:` form ([`DhchapSecret`]). Such a host's every queue answers
//! Connect with the ATR bit and carries nothing but AUTH_Send /
//! AUTH_Receive until it has authenticated; a wrong response ends the
//! transaction with AUTH_Failure1 (reason 01h, explanation 01h).
//!
//! Hashes SHA-256/384/512 and DH groups null and ffdhe2048 ... ffdhe8192
//! (RFC 7919) are supported. Secure channel concatenation (a TLS PSK
//! derived from the exchange) is not: a host asking for it gets
//! "concatenation mismatch".
//!
//! Secrets never reach a log: [`DhchapSecret`] prints redacted, and what
//! is logged about a transaction is its outcome (hash, group, reason).

mod dhchap;
mod ffdhe;
pub mod host;
mod key;
pub mod message;
pub(crate) mod target;

pub use dhchap::{DhGroup, HashId};
pub use host::{AuthSummary, HostAuthError, HostCredentials, HostExchange};
pub use key::{DhchapSecret, KEY_LENGTHS, KeyError};
pub use message::Explanation;

/// What a subsystem requires of one host: DH-HMAC-CHAP with these secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAuth {
    /// The host's secret: the host proves it holds it.
    pub secret: DhchapSecret,
    /// The controller's secret: with it, the target answers a host that
    /// challenges it (bidirectional authentication); without it, such a
    /// host is refused.
    pub ctrl_secret: Option<DhchapSecret>,
    /// The hash to use (`None`: the first the host offers).
    pub hash: Option<HashId>,
    /// The DH group to use (`None`: ffdhe2048 if offered, then larger
    /// groups, the null group last).
    pub dhgroup: Option<DhGroup>,
}

impl HostAuth {
    /// `secret` with no controller secret and the default choices.
    pub fn new(secret: DhchapSecret) -> Self {
        Self {
            secret,
            ctrl_secret: None,
            hash: None,
            dhgroup: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::message::{Message, Negotiate};
    use super::target::{Event, MAX_FAILURES, MAX_UNAUTHENTICATED_STARTS, TargetAuth};
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
    const SUB: &str = "nqn.2024-01.io.pontoon:auth";
    const AL: usize = 4096;

    fn secret(b: u8, t: Option<HashId>) -> DhchapSecret {
        DhchapSecret::from_key(&[b; 32], t).unwrap()
    }

    /// One whole transaction between the two state machines. Returns the
    /// host's result and the target's last event.
    fn run(
        target: &mut TargetAuth,
        config: &HostAuth,
        creds: &HostCredentials,
        tid: u16,
    ) -> (Result<AuthSummary, HostAuthError>, Event) {
        let mut host = HostExchange::new(creds.clone(), HOST, SUB, tid);
        let e0 = target.send(&host.negotiate(), Some(config));
        let (challenge, e1) = target.receive(AL).unwrap();
        assert_eq!(challenge.len(), AL);
        let reply = match host.reply(&challenge) {
            Ok(r) => r,
            Err(err) => return (Err(err), if e0 != Event::None { e0 } else { e1 }),
        };
        let e = target.send(&reply, Some(config));
        let (s1, e1) = target.receive(AL).unwrap();
        let fin = host.success1(&s1);
        let mut last = if e != Event::None { e } else { e1 };
        if let Some(m) = fin.send {
            last = target.send(&m, Some(config));
        }
        (fin.result, last)
    }

    #[test]
    fn the_right_secret_authenticates_with_every_hash_and_group() {
        for (hash, group) in [
            (HashId::Sha256, DhGroup::Null),
            (HashId::Sha256, DhGroup::Ffdhe2048),
            (HashId::Sha384, DhGroup::Ffdhe3072),
            (HashId::Sha512, DhGroup::Ffdhe4096),
            (HashId::Sha512, DhGroup::Null),
        ] {
            let config = HostAuth {
                hash: Some(hash),
                dhgroup: Some(group),
                ..HostAuth::new(secret(1, Some(HashId::Sha256)))
            };
            let mut t = TargetAuth::new(HOST, SUB);
            assert!(!t.authenticated());
            let creds = HostCredentials::new(secret(1, Some(HashId::Sha256)));
            let (r, e) = run(&mut t, &config, &creds, 7);
            let want = AuthSummary {
                hash,
                dhgroup: group,
                bidirectional: false,
            };
            assert_eq!(r, Ok(want));
            assert_eq!(
                e,
                Event::Authenticated {
                    hash,
                    dhgroup: group,
                    bidirectional: false
                }
            );
            assert!(t.authenticated(), "{hash} {group}");
        }
    }

    #[test]
    fn defaults_pick_sha256_and_ffdhe2048_from_linuxs_offer() {
        let mut t = TargetAuth::new(HOST, SUB);
        let config = HostAuth::new(secret(1, None));
        let (r, _) = run(&mut t, &config, &HostCredentials::new(secret(1, None)), 1);
        let s = r.unwrap();
        assert_eq!((s.hash, s.dhgroup), (HashId::Sha256, DhGroup::Ffdhe2048));
    }

    #[test]
    fn a_wrong_host_secret_gets_failure1_failed() {
        let mut t = TargetAuth::new(HOST, SUB);
        let config = HostAuth::new(secret(1, Some(HashId::Sha256)));
        let creds = HostCredentials::new(secret(2, Some(HashId::Sha256)));
        let (r, e) = run(&mut t, &config, &creds, 3);
        assert_eq!(
            r,
            Err(HostAuthError::Refused {
                reason: 0x01,
                explanation: Explanation::Failed
            })
        );
        assert_eq!(e, Event::Failed(Explanation::Failed));
        assert!(!t.authenticated());
        // The same key with another transformation hash is another key.
        let creds = HostCredentials::new(secret(1, Some(HashId::Sha384)));
        assert!(run(&mut t, &config, &creds, 4).0.is_err());
    }

    #[test]
    fn bidirectional_authentication_and_a_lying_controller() {
        let config = HostAuth {
            ctrl_secret: Some(secret(9, Some(HashId::Sha512))),
            ..HostAuth::new(secret(1, Some(HashId::Sha256)))
        };
        let mut creds = HostCredentials::new(secret(1, Some(HashId::Sha256)));
        creds.ctrl_secret = Some(secret(9, Some(HashId::Sha512)));
        let mut t = TargetAuth::new(HOST, SUB);
        let (r, e) = run(&mut t, &config, &creds, 5);
        assert!(r.unwrap().bidirectional);
        assert!(matches!(
            e,
            Event::Authenticated {
                bidirectional: true,
                ..
            }
        ));
        assert!(t.authenticated());

        // The host expects another controller secret: it refuses the
        // controller with Failure2, and the queue is no longer
        // authenticated.
        creds.ctrl_secret = Some(secret(8, Some(HashId::Sha512)));
        let (r, e) = run(&mut t, &config, &creds, 6);
        assert_eq!(r, Err(HostAuthError::ControllerMismatch));
        assert_eq!(e, Event::Failed(Explanation::Failed));
        assert!(!t.authenticated());

        // A target without a controller secret refuses a host that asks
        // for one.
        let uni = HostAuth::new(secret(1, Some(HashId::Sha256)));
        let mut t = TargetAuth::new(HOST, SUB);
        let (r, _) = run(&mut t, &uni, &creds, 7);
        assert!(matches!(r, Err(HostAuthError::Refused { .. })), "{r:?}");
        assert!(!t.authenticated());
    }

    #[test]
    fn unusable_offers_and_messages_out_of_turn_are_refused_with_their_reason() {
        let config = HostAuth {
            hash: Some(HashId::Sha512),
            ..HostAuth::new(secret(1, None))
        };
        let mut creds = HostCredentials::new(secret(1, None));
        creds.hashes = vec![HashId::Sha256];
        let mut t = TargetAuth::new(HOST, SUB);
        let (r, e) = run(&mut t, &config, &creds, 1);
        assert_eq!(e, Event::Failed(Explanation::HashUnusable));
        assert!(matches!(
            r,
            Err(HostAuthError::Refused {
                explanation: Explanation::HashUnusable,
                ..
            })
        ));
        let config = HostAuth {
            dhgroup: Some(DhGroup::Ffdhe8192),
            ..HostAuth::new(secret(1, None))
        };
        let mut creds = HostCredentials::new(secret(1, None));
        creds.dhgroups = vec![DhGroup::Null];
        let mut t = TargetAuth::new(HOST, SUB);
        assert_eq!(
            run(&mut t, &config, &creds, 1).1,
            Event::Failed(Explanation::DhGroupUnusable)
        );

        // No secret configured for the host.
        let mut t = TargetAuth::new(HOST, SUB);
        let host = HostExchange::new(HostCredentials::new(secret(1, None)), HOST, SUB, 1);
        assert_eq!(
            t.send(&host.negotiate(), None),
            Event::Failed(Explanation::NotUsable)
        );
        // Secure channel concatenation is not offered.
        let n = Message::Negotiate(Negotiate {
            tid: 2,
            sc_c: 1,
            hashes: vec![1],
            dhgroups: vec![0],
        });
        let config = HostAuth::new(secret(1, None));
        assert_eq!(
            TargetAuth::new(HOST, SUB).send(&n.encode(), Some(&config)),
            Event::Failed(Explanation::ConcatMismatch)
        );
        // A Reply before any challenge; a reply with the wrong transaction id.
        let mut t = TargetAuth::new(HOST, SUB);
        let mut host = HostExchange::new(HostCredentials::new(secret(1, None)), HOST, SUB, 9);
        t.send(&host.negotiate(), Some(&config));
        let (c, _) = t.receive(AL).unwrap();
        let mut reply = host.reply(&c).unwrap();
        reply[4] ^= 1;
        assert_eq!(
            t.send(&reply, Some(&config)),
            Event::Failed(Explanation::IncorrectPayload)
        );
        let (f, _) = t.receive(AL).unwrap();
        assert_eq!(
            Message::decode(&f).unwrap(),
            Message::Failure {
                from_host: false,
                tid: 9,
                reason: 1,
                explanation: Explanation::IncorrectPayload
            }
        );
        // Reading when nothing is due.
        let (f, e) = t.receive(AL).unwrap();
        assert_eq!(e, Event::Failed(Explanation::IncorrectMessage));
        assert!(matches!(Message::decode(&f), Ok(Message::Failure { .. })));
        // Too small an allocation length leaves the transaction as it is.
        let mut t = TargetAuth::new(HOST, SUB);
        t.send(&host.negotiate(), Some(&config));
        assert!(t.receive(16).is_none());
        assert!(t.receive(AL).is_some());
    }

    #[test]
    fn failed_transactions_are_bounded_and_reauthentication_works() {
        let config = HostAuth::new(secret(1, None));
        let good = HostCredentials::new(secret(1, None));
        let bad = HostCredentials::new(secret(2, None));
        let mut t = TargetAuth::new(HOST, SUB);
        assert!(run(&mut t, &config, &good, 1).0.is_ok());
        // Re-authentication with a rotated secret: the new one counts.
        let rotated = HostAuth::new(secret(3, None));
        assert!(run(&mut t, &rotated, &good, 2).0.is_err());
        assert!(!t.authenticated(), "a failed re-authentication revokes");
        assert!(
            run(&mut t, &rotated, &HostCredentials::new(secret(3, None)), 3)
                .0
                .is_ok()
        );
        for tid in 0..MAX_FAILURES as u16 {
            assert!(run(&mut t, &config, &bad, 10 + tid).0.is_err());
        }
        let (r, e) = run(&mut t, &config, &good, 20);
        assert!(
            r.is_err() && e == Event::Failed(Explanation::Failed),
            "{r:?}"
        );
        assert!(!t.authenticated());
    }

    #[test]
    fn a_host_that_only_negotiates_runs_out_of_transactions() {
        let config = HostAuth::new(secret(1, None));
        let host = HostExchange::new(HostCredentials::new(secret(1, None)), HOST, SUB, 1);
        let mut t = TargetAuth::new(HOST, SUB);
        for _ in 0..MAX_UNAUTHENTICATED_STARTS {
            assert_eq!(t.send(&host.negotiate(), Some(&config)), Event::None);
            assert!(t.negotiated());
        }
        assert_eq!(
            t.send(&host.negotiate(), Some(&config)),
            Event::Failed(Explanation::Failed)
        );
        assert!(!t.negotiated());
    }
}
