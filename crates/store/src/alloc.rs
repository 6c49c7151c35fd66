//! Data-area block allocation: a bitmap with a next-fit cursor (so
//! consecutive allocations are contiguous and large writes stay sequential),
//! and deferred reuse so that a block freed while a read of it is in flight
//! is not handed out until that read has finished.

/// Bitmap allocator over the data area of one slice.
pub(crate) struct Allocator {
    bits: Vec<u64>,
    blocks: u64,
    used: u64,
    cursor: u64,
}

impl Allocator {
    pub(crate) fn new(blocks: u64) -> Self {
        let words = blocks.div_ceil(64) as usize;
        let mut bits = vec![0u64; words];
        let tail = blocks % 64;
        if tail != 0 {
            bits[words - 1] = !0u64 << tail;
        }
        Self {
            bits,
            blocks,
            used: 0,
            cursor: 0,
        }
    }

    /// Blocks allocated (including those waiting for readers to finish).
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    pub(crate) fn is_used(&self, b: u64) -> bool {
        self.bits[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    /// Marks a block used while rebuilding from metadata; false if it
    /// already was (two owners: corruption) or is out of range.
    pub(crate) fn mark_used(&mut self, b: u64) -> bool {
        if b >= self.blocks || self.is_used(b) {
            return false;
        }
        self.bits[(b / 64) as usize] |= 1 << (b % 64);
        self.used += 1;
        true
    }

    /// Frees a block now. Only for blocks no reader can be reading.
    pub(crate) fn free(&mut self, b: u64) {
        debug_assert!(self.is_used(b), "double free of data block {b}");
        self.bits[(b / 64) as usize] &= !(1 << (b % 64));
        self.used -= 1;
    }

    /// Allocates up to `max` contiguous blocks at or after the cursor
    /// (wrapping once). Returns (first block, count).
    pub(crate) fn alloc_run(&mut self, max: u32) -> Option<(u64, u32)> {
        if self.used >= self.blocks || max == 0 {
            return None;
        }
        let start = self.find_free(self.cursor).or_else(|| self.find_free(0))?;
        let mut n = 0u32;
        while n < max && start + (n as u64) < self.blocks && !self.is_used(start + n as u64) {
            let b = start + n as u64;
            self.bits[(b / 64) as usize] |= 1 << (b % 64);
            n += 1;
        }
        self.used += n as u64;
        self.cursor = start + n as u64;
        if self.cursor >= self.blocks {
            self.cursor = 0;
        }
        Some((start, n))
    }

    /// Allocates exactly `n` blocks as few runs as possible, appending them
    /// to `out`; all or nothing.
    pub(crate) fn alloc(&mut self, n: u32, out: &mut Vec<(u64, u32)>) -> bool {
        if self.blocks - self.used < n as u64 {
            return false;
        }
        let first = out.len();
        let mut left = n;
        while left > 0 {
            match self.alloc_run(left) {
                Some((s, k)) => {
                    out.push((s, k));
                    left -= k;
                }
                None => {
                    for (s, k) in out.drain(first..) {
                        (s..s + k as u64).for_each(|b| self.free(b));
                    }
                    return false;
                }
            }
        }
        true
    }

    fn find_free(&self, from: u64) -> Option<u64> {
        let mut w = (from / 64) as usize;
        if w >= self.bits.len() {
            return None;
        }
        let first = self.bits[w] | ((1u64 << (from % 64)) - 1);
        if first != !0 {
            return Some(w as u64 * 64 + (!first).trailing_zeros() as u64);
        }
        w += 1;
        while w < self.bits.len() {
            if self.bits[w] != !0 {
                return Some(w as u64 * 64 + (!self.bits[w]).trailing_zeros() as u64);
            }
            w += 1;
        }
        None
    }
}

/// Two-epoch deferred reclamation for blocks freed while reads may be in
/// flight. A read enters the current epoch; a freed block is parked in the
/// current epoch's list and returned to the allocator once every read that
/// started no later than that epoch has finished.
#[derive(Default)]
pub(crate) struct Reclaim {
    epoch: u64,
    active: [u32; 2],
    limbo: [Vec<u64>; 2],
}

impl Reclaim {
    /// Registers a read; returns its ticket for [`Reclaim::exit`].
    pub(crate) fn enter(&mut self) -> u64 {
        self.active[(self.epoch & 1) as usize] += 1;
        self.epoch
    }

    /// A read finished.
    pub(crate) fn exit(&mut self, ticket: u64, alloc: &mut Allocator) {
        let slot = &mut self.active[(ticket & 1) as usize];
        debug_assert!(*slot > 0);
        *slot -= 1;
        self.advance(alloc);
    }

    /// Frees `b` once no read that may hold it is left.
    pub(crate) fn defer_free(&mut self, b: u64, alloc: &mut Allocator) {
        if self.active == [0, 0] {
            alloc.free(b);
            return;
        }
        self.limbo[(self.epoch & 1) as usize].push(b);
        self.advance(alloc);
    }

    fn advance(&mut self, alloc: &mut Allocator) {
        // Readers of the previous epoch are done: its frees are safe.
        let prev = ((self.epoch + 1) & 1) as usize;
        if self.active[prev] == 0 {
            for b in self.limbo[prev].drain(..) {
                alloc.free(b);
            }
            if !self.limbo[(self.epoch & 1) as usize].is_empty() {
                self.epoch += 1;
            }
        }
    }

    /// Blocks parked, waiting for readers.
    #[cfg(test)]
    pub(crate) fn parked(&self) -> usize {
        self.limbo[0].len() + self.limbo[1].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_contiguous_and_wrap() {
        let mut a = Allocator::new(100);
        assert_eq!(a.alloc_run(10), Some((0, 10)));
        assert_eq!(a.alloc_run(95), Some((10, 90)));
        assert_eq!(a.alloc_run(1), None);
        (20..30).for_each(|b| a.free(b));
        let mut out = vec![];
        assert!(a.alloc(10, &mut out));
        assert_eq!(out, vec![(20, 10)]);
        assert!(!a.alloc(1, &mut out));
        assert_eq!(a.used(), 100);
    }

    #[test]
    fn failed_multi_run_allocation_is_rolled_back() {
        let mut a = Allocator::new(70);
        let mut out = vec![];
        assert!(a.alloc(70, &mut out));
        for b in [3, 40, 41] {
            a.free(b);
        }
        out.clear();
        assert!(!a.alloc(4, &mut out));
        assert_eq!(a.used(), 67);
        assert!(a.alloc(3, &mut out));
        assert_eq!(out, vec![(3, 1), (40, 2)]);
    }

    #[test]
    fn blocks_freed_during_a_read_wait_for_it() {
        let mut a = Allocator::new(64);
        let mut r = Reclaim::default();
        for b in 0..4 {
            assert!(a.mark_used(b));
        }
        assert!(!a.mark_used(0), "double owner detected");
        let t = r.enter();
        r.defer_free(1, &mut a);
        assert!(a.is_used(1), "a read that may hold block 1 is in flight");
        let t2 = r.enter();
        r.defer_free(2, &mut a);
        r.exit(t, &mut a);
        assert!(!a.is_used(1));
        assert!(a.is_used(2), "second read still in flight");
        r.exit(t2, &mut a);
        r.defer_free(3, &mut a);
        assert!(!a.is_used(2) && !a.is_used(3));
        assert_eq!(r.parked(), 0);
    }
}
