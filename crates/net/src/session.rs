//! Which connections of a client session are still the client's: the
//! server side of [`pontoon_proto::Session`].
//!
//! A client opens a new connection to a server only after giving up the
//! old one (it broke, or answered something unreadable), and then resends
//! what it was still waiting for. A request the server had not yet read
//! from the old connection — stuck behind its backpressure, say — would
//! otherwise be dispatched after the resent copy and everything the client
//! sent after it: an old write landing over a newer one. So once connection
//! `seq` of a session has said hello, the session's connections with a
//! lower `seq` dispatch nothing more. Requests they dispatched before are
//! already queued ahead of anything the new connection brings (handlers
//! run in dispatch order up to their first wait, and the OSD orders writes
//! per object in that order), so nothing overtakes.
//!
//! On an authenticated connection the session belongs to the proven
//! entity: another entity naming the same session id (it may have seen it
//! on the wire in authenticated mode) starts a session of its own instead
//! of superseding the owner's connections.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pontoon_proto::Session;
use rustc_hash::FxHashMap;

/// The live connections of every session one listener serves. Entries
/// exist only while their connections do, so it is bounded by them.
#[derive(Default)]
pub(crate) struct Sessions {
    live: RefCell<FxHashMap<Key, Vec<Live>>>,
}

/// A session: its proven owner (none in mode none) and its id.
type Key = (Option<Rc<str>>, u64);

/// One live connection of a session.
struct Live {
    seq: u64,
    superseded: Rc<Cell<bool>>,
}

/// A connection's membership of its session, until dropped.
pub(crate) struct Member {
    sessions: Rc<Sessions>,
    key: Key,
    session: Session,
    superseded: Rc<Cell<bool>>,
}

impl Sessions {
    /// Registers a connection that said hello with `session`: every live
    /// connection of the session with a lower `seq` is superseded, and so
    /// is this one if the session already has a higher one.
    #[cfg(test)]
    pub(crate) fn join(self: &Rc<Self>, session: Session) -> Member {
        self.join_as(None, session)
    }

    /// [`Sessions::join`] for a connection whose peer proved it is `owner`.
    pub(crate) fn join_as(self: &Rc<Self>, owner: Option<&str>, session: Session) -> Member {
        let superseded = Rc::new(Cell::new(false));
        let key: Key = (owner.map(Rc::from), session.id);
        let mut live = self.live.borrow_mut();
        let conns = live.entry(key.clone()).or_default();
        for c in conns.iter() {
            if c.seq < session.seq {
                c.superseded.set(true);
            } else if c.seq > session.seq {
                superseded.set(true);
            }
        }
        conns.push(Live {
            seq: session.seq,
            superseded: superseded.clone(),
        });
        Member {
            sessions: self.clone(),
            key,
            session,
            superseded,
        }
    }

    /// Sessions with a live connection.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.borrow().len()
    }
}

impl Member {
    /// True once a newer connection of the session has said hello.
    pub(crate) fn is_superseded(&self) -> bool {
        self.superseded.get()
    }

    /// The session and this connection's place in it.
    pub(crate) fn session(&self) -> Session {
        self.session
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut live = self.sessions.live.borrow_mut();
        if let Some(conns) = live.get_mut(&self.key) {
            conns.retain(|c| !Rc::ptr_eq(&c.superseded, &self.superseded));
            if conns.is_empty() {
                live.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u64, seq: u64) -> Session {
        Session { id, seq }
    }

    #[test]
    fn a_newer_connection_supersedes_older_ones_of_its_session_only() {
        let sessions = Rc::new(Sessions::default());
        let a1 = sessions.join(s(1, 1));
        let b1 = sessions.join(s(2, 1));
        assert!(!a1.is_superseded() && !b1.is_superseded());
        let a2 = sessions.join(s(1, 2));
        assert!(a1.is_superseded() && !a2.is_superseded());
        let a5 = sessions.join(s(1, 5));
        assert!(a2.is_superseded() && !a5.is_superseded());
        assert!(!b1.is_superseded(), "another session is untouched");
    }

    #[test]
    fn another_entity_cannot_supersede_a_session_it_does_not_own() {
        let sessions = Rc::new(Sessions::default());
        let alice = sessions.join_as(Some("client.alice"), s(1, 1));
        let mallory = sessions.join_as(Some("client.mallory"), s(1, 9));
        let anonymous = sessions.join(s(1, 9));
        assert!(!alice.is_superseded());
        assert!(!mallory.is_superseded() && !anonymous.is_superseded());
        let alice2 = sessions.join_as(Some("client.alice"), s(1, 2));
        assert!(alice.is_superseded() && !alice2.is_superseded());
        assert_eq!(sessions.len(), 3);
    }

    #[test]
    fn a_connection_older_than_a_live_one_is_superseded_at_once() {
        let sessions = Rc::new(Sessions::default());
        let newer = sessions.join(s(7, 9));
        let late = sessions.join(s(7, 3));
        assert!(late.is_superseded());
        assert!(!newer.is_superseded());
    }

    #[test]
    fn entries_last_only_as_long_as_their_connections() {
        let sessions = Rc::new(Sessions::default());
        let a = sessions.join(s(1, 1));
        let b = sessions.join(s(2, 1));
        assert_eq!(sessions.len(), 2);
        drop(a);
        assert_eq!(sessions.len(), 1);
        drop(b);
        assert_eq!(sessions.len(), 0);
        // A session whose connections all closed starts afresh.
        let again = sessions.join(s(1, 1));
        assert!(!again.is_superseded());
    }
}
