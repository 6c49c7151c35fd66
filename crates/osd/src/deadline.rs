//! The instant until which a shard may serve: the end of its OSD's lease
//! validity, set by the control loop and checked by the shard on every
//! request. One per shard, written a few times a second and read per
//! request, so fencing never waits for the control loop, etcd or a
//! report.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A serving deadline shared between a shard and its control loop.
#[derive(Debug)]
pub struct LeaseDeadline {
    base: Instant,
    /// Nanoseconds after `base`; 0: refuse everything; `u64::MAX`: no
    /// deadline (tests without a lease).
    until: AtomicU64,
}

impl LeaseDeadline {
    /// A deadline that refuses everything until set; `now` is the clock
    /// the shard reads (virtual under the simulator).
    pub fn fenced(now: Instant) -> Arc<Self> {
        Arc::new(Self {
            base: now,
            until: AtomicU64::new(0),
        })
    }

    /// A deadline that never passes: for shards driven by hand in tests,
    /// with no lease to follow.
    pub fn unbounded() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        })
    }

    /// Serve until `until`; `None`: refuse everything from now on.
    pub fn set(&self, until: Option<Instant>) {
        let nanos = match until {
            None => 0,
            Some(t) => t
                .saturating_duration_since(self.base)
                .as_nanos()
                .clamp(1, u128::from(u64::MAX - 1)) as u64,
        };
        self.until.store(nanos, Ordering::Release);
    }

    /// Whether a request arriving at `now` may be served.
    pub fn allows(&self, now: Instant) -> bool {
        match self.until.load(Ordering::Acquire) {
            0 => false,
            u64::MAX => true,
            n => now < self.base + Duration::from_nanos(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_until_the_deadline_and_never_after_a_fence() {
        let now = Instant::now();
        let d = LeaseDeadline::fenced(now);
        assert!(!d.allows(now));
        d.set(Some(now + Duration::from_secs(2)));
        assert!(d.allows(now + Duration::from_secs(1)));
        assert!(!d.allows(now + Duration::from_secs(2)));
        d.set(None);
        assert!(!d.allows(now));
        assert!(LeaseDeadline::unbounded().allows(now + Duration::from_secs(1 << 30)));
    }
}
