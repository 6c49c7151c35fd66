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

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use pontoon_proto::Session;
use rustc_hash::FxHashMap;

/// The live connections of every session one listener serves. Entries
/// exist only while their connections do, so it is bounded by them.
#[derive(Default)]
pub(crate) struct Sessions {
    live: RefCell<FxHashMap<u64, Vec<Live>>>,
}

/// One live connection of a session.
struct Live {
    seq: u64,
    superseded: Rc<Cell<bool>>,
}

/// A connection's membership of its session, until dropped.
pub(crate) struct Member {
    sessions: Rc<Sessions>,
    session: Session,
    superseded: Rc<Cell<bool>>,
}

impl Sessions {
    /// Registers a connection that said hello with `session`: every live
    /// connection of the session with a lower `seq` is superseded, and so
    /// is this one if the session already has a higher one.
    pub(crate) fn join(self: &Rc<Self>, session: Session) -> Member {
        let superseded = Rc::new(Cell::new(false));
        let mut live = self.live.borrow_mut();
        let conns = live.entry(session.id).or_default();
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
        if let Some(conns) = live.get_mut(&self.session.id) {
            conns.retain(|c| !Rc::ptr_eq(&c.superseded, &self.superseded));
            if conns.is_empty() {
                live.remove(&self.session.id);
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
