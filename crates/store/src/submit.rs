//! When the device's operations reach the kernel.
//!
//! compio puts an operation in the io_uring submission queue when its
//! future is first polled, and submits the queue at the end of the
//! event-loop turn, in the same `io_uring_enter` that waits for
//! completions. An OSD's turn is short (a few requests decoded, their store
//! operations and replies queued), so leaving operations for that one call
//! costs little latency and saves a system call, and a virtio kick, per
//! operation. A turn that runs many tasks (the store benchmark's 32
//! workers) would instead hold a burst back and hand it to the device at
//! once, so operations queued close together are held [`MAX_HELD`] at most:
//! the one that reaches the limit submits them all at once. "Close
//! together" is within [`BATCH_WINDOW`] of the first: the runtime gives no
//! sign when it submits, so an operation queued later than that starts a
//! new count (in a turn that long, a few more wait for its end).
//!
//! Measured on the reference VM (docs/benchmarks.md): against one
//! `io_uring_enter` per operation, a 3-OSD cluster's size-1 4 KiB random
//! reads at QD32 cost the OSDs about 15% less CPU per I/O, and size-3 QD1
//! writes are about 10% faster.

use std::cell::Cell;
use std::future::poll_fn;
use std::pin::pin;
use std::time::{Duration, Instant};

use compio::BufResult;
use compio::driver::OpCode;

/// Most operations left for the end of the event-loop turn.
const MAX_HELD: u32 = 4;
/// Operations queued this long after the first of a batch start a new
/// batch: a turn rarely lasts that long, so the runtime has most likely
/// submitted the old one.
const BATCH_WINDOW: Duration = Duration::from_micros(50);

/// Operations queued since the last submission we know of.
#[derive(Clone, Copy)]
struct Held {
    count: u32,
    since: Option<Instant>,
}

thread_local! {
    static HELD: Cell<Held> = const { Cell::new(Held { count: 0, since: None }) };
}

/// Runs `op` on the current compio runtime, submitting it with the rest of
/// this turn's operations (or at once, with them, if [`MAX_HELD`] are
/// waiting).
pub(crate) async fn submit<T: OpCode + 'static>(op: T) -> BufResult<usize, T> {
    let mut fut = pin!(compio::runtime::submit(op));
    let mut queued = false;
    poll_fn(move |cx| {
        let r = fut.as_mut().poll(cx);
        if r.is_pending() && !queued {
            queued = true;
            hold_or_submit(Instant::now());
        }
        r
    })
    .await
}

/// Counts one more queued operation; submits the queue at the limit.
fn hold_or_submit(now: Instant) {
    let (held, submit_now) = count(HELD.get(), now);
    HELD.set(held);
    if submit_now {
        compio::runtime::Runtime::with_current(|rt| rt.flush());
    }
}

/// The count after one more operation queued at `now`, and whether the
/// queue is to be submitted now.
fn count(held: Held, now: Instant) -> (Held, bool) {
    let fresh = held
        .since
        .is_none_or(|t| now.saturating_duration_since(t) >= BATCH_WINDOW);
    let next = if fresh {
        Held {
            count: 1,
            since: Some(now),
        }
    } else {
        Held {
            count: held.count + 1,
            since: held.since,
        }
    };
    if next.count >= MAX_HELD {
        (
            Held {
                count: 0,
                since: None,
            },
            true,
        )
    } else {
        (next, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: Held = Held {
        count: 0,
        since: None,
    };

    #[test]
    fn operations_queued_together_are_submitted_every_max_held() {
        let t0 = Instant::now();
        let mut held = EMPTY;
        let mut submits = Vec::new();
        for i in 0..3 * MAX_HELD {
            let (next, submit) = count(held, t0 + Duration::from_micros(i as u64));
            held = next;
            submits.push(submit);
        }
        let expected: Vec<bool> = (1..=3 * MAX_HELD).map(|n| n % MAX_HELD == 0).collect();
        assert_eq!(submits, expected);
    }

    #[test]
    fn an_operation_after_the_window_starts_a_new_count() {
        let t0 = Instant::now();
        let (held, submit) = count(EMPTY, t0);
        assert!(!submit);
        let (held, submit) = count(held, t0 + BATCH_WINDOW / 2);
        assert!(!submit);
        assert_eq!(held.count, 2);
        let later = t0 + BATCH_WINDOW;
        let (held, submit) = count(held, later);
        assert!(!submit, "the earlier two were submitted by the runtime");
        assert_eq!(held.count, 1);
        assert_eq!(held.since, Some(later));
    }
}
