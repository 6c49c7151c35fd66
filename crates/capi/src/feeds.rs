//! The process's cluster-map feeds, shared by its contexts, and the
//! owner checks that keep a context on its thread (and out of a forked
//! child).
//!
//! One [`MapFeed`] (an etcd watch on a thread of its own) per cluster
//! (endpoints and name) per process: the first context on a cluster starts
//! it, the last one to disconnect stops it. A child made by `fork()` has
//! none of the parent's threads, so the parent's feeds are dead there: a
//! fork handler bumps a generation, and feeds (and contexts) of an older
//! generation are never used again (nor freed: their threads and locks
//! did not survive the fork).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

use pontoon_client::MapFeed;
use pontoon_cluster::EtcdAuth;

use crate::error::Fail;

/// Bumped in the child after every `fork()`.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the fork handler (once per process).
fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
}

thread_local! {
    static THREAD_MARK: u8 = const { 0 };
}

/// Who may use a context: one thread of one process image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    thread: usize,
    generation: u64,
}

impl Owner {
    /// The calling thread, now.
    pub fn current() -> Self {
        Self {
            thread: THREAD_MARK.with(|m| m as *const u8 as usize),
            generation: FORK_GENERATION.load(Ordering::Relaxed),
        }
    }

    /// `Ok` if the calling thread is this owner.
    pub fn check(&self) -> Result<(), Fail> {
        let now = Self::current();
        if now == *self {
            Ok(())
        } else if now.generation != self.generation {
            Err(Fail::new(
                libc::EPERM,
                "this context was created before fork(): connect again in the child",
            ))
        } else {
            Err(Fail::new(
                libc::EPERM,
                "a context and its volumes may only be used by the thread that created the context",
            ))
        }
    }
}

struct Entry {
    endpoints: Vec<String>,
    name: String,
    auth: EtcdAuth,
    /// The entity its clients prove to the OSDs (one feed per identity).
    entity: Option<String>,
    generation: u64,
    feed: Arc<MapFeed>,
    users: usize,
}

static FEEDS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn feeds() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    FEEDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes entries of an older process image, without dropping them.
fn forget_stale(list: &mut Vec<Entry>, generation: u64) {
    let mut i = 0;
    while i < list.len() {
        if list[i].generation != generation {
            std::mem::forget(list.swap_remove(i));
        } else {
            i += 1;
        }
    }
}

/// A context's use of a shared feed; dropping it stops the feed when it
/// was the last user.
pub(crate) struct FeedRef {
    feed: Arc<MapFeed>,
    generation: u64,
}

impl FeedRef {
    /// The feed.
    pub fn feed(&self) -> &Arc<MapFeed> {
        &self.feed
    }
}

/// The process's feed for cluster `name` at `endpoints` (reached with
/// `auth`) whose clients are `me` to the OSDs (an identity, following its
/// keyring file), connecting it (and waiting for the first map) if there
/// is none yet.
pub(crate) fn acquire(
    endpoints: &[String],
    name: &str,
    auth: &EtcdAuth,
    me: Option<(
        pontoon_client::ClientIdentity,
        pontoon_cluster::auth::EntityName,
        std::path::PathBuf,
    )>,
) -> Result<FeedRef, Fail> {
    let entity = me.as_ref().map(|m| m.0.entity.clone());
    watch_forks();
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    let find = |list: &mut Vec<Entry>| -> Option<FeedRef> {
        forget_stale(list, generation);
        let e = list.iter_mut().find(|e| {
            e.endpoints == endpoints && e.name == name && e.auth == *auth && e.entity == entity
        })?;
        e.users += 1;
        Some(FeedRef {
            feed: e.feed.clone(),
            generation,
        })
    };
    if let Some(r) = find(&mut feeds()) {
        return Ok(r);
    }
    // Connect without the lock: it may take seconds.
    let feed = MapFeed::connect_with(endpoints, name, auth)?;
    if let Some((me, entity, path)) = me {
        feed.set_identity(me);
        // A rotation (`pontoon auth rotate ENTITY -o FILE`) reaches this
        // process's new connections without a restart.
        pontoon_client::follow_keyring(&feed, entity, path)
            .map_err(|e| Fail::new(libc::EAGAIN, format!("starting the keyring watcher: {e}")))?;
    }
    let mut list = feeds();
    if let Some(r) = find(&mut list) {
        drop(list);
        feed.shutdown();
        return Ok(r);
    }
    list.push(Entry {
        endpoints: endpoints.to_vec(),
        name: name.to_string(),
        auth: auth.clone(),
        entity,
        generation,
        feed: feed.clone(),
        users: 1,
    });
    Ok(FeedRef { feed, generation })
}

impl Drop for FeedRef {
    fn drop(&mut self) {
        if self.generation != FORK_GENERATION.load(Ordering::Relaxed) {
            return;
        }
        let mut list = feeds();
        let Some(i) = list.iter().position(|e| Arc::ptr_eq(&e.feed, &self.feed)) else {
            return;
        };
        list[i].users -= 1;
        if list[i].users == 0 {
            let e = list.swap_remove(i);
            drop(list);
            e.feed.shutdown();
        }
    }
}

/// How many feeds this process runs (tests).
#[cfg(test)]
pub(crate) fn running() -> usize {
    feeds().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_thread_is_not_the_owner() {
        let me = Owner::current();
        assert!(me.check().is_ok());
        let err = std::thread::spawn(move || me.check())
            .join()
            .unwrap()
            .unwrap_err();
        assert_eq!(err.errno, libc::EPERM);
    }
}
