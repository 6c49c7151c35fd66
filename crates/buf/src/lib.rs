//! Aligned I/O buffers for O_DIRECT and io_uring, recycled through a
//! per-thread pool so the data path does not go to the allocator per I/O.
//!
//! An [`AlignedBuf`] owns memory aligned to [`ALIGN`] bytes whose capacity is a
//! multiple of [`ALIGN`]. It implements compio's buffer traits, so it can be
//! handed to the kernel directly. Dropping it returns the memory to the pool
//! of the thread that drops it (bounded per size class); memory is always
//! initialised (fresh allocations are zeroed), so exposing stale bytes of a
//! recycled buffer is never undefined behaviour — callers that need zeros ask
//! for them with [`AlignedBuf::zeroed`].
//!
//! This crate must never block or lock: it is used on every shard's hot path.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::cell::RefCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use compio_buf::{IoBuf, IoBufMut, SetLen};

/// Alignment and capacity granule of every buffer (the O_DIRECT block size).
pub const ALIGN: usize = 4096;

/// Largest capacity the pool recycles; larger buffers go straight to the allocator.
const MAX_POOLED: usize = 16 << 20;
/// Number of power-of-two size classes from [`ALIGN`] to [`MAX_POOLED`].
const CLASSES: usize = (MAX_POOLED / ALIGN).trailing_zeros() as usize + 1;
/// Bytes the pool may keep per size class and thread.
const POOL_BYTES_PER_CLASS: usize = 64 << 20;
/// Buffers the pool may keep per size class and thread, whatever their size.
const POOL_MAX_PER_CLASS: usize = 1024;

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::new());
}

struct Pool {
    classes: Vec<Vec<NonNull<u8>>>,
}

impl Pool {
    fn new() -> Self {
        Self {
            classes: (0..CLASSES).map(|_| Vec::new()).collect(),
        }
    }

    fn limit(class: usize) -> usize {
        (POOL_BYTES_PER_CLASS / (ALIGN << class)).clamp(1, POOL_MAX_PER_CLASS)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (class, list) in self.classes.iter_mut().enumerate() {
            for ptr in list.drain(..) {
                // SAFETY: every pooled pointer was allocated with this class's layout.
                unsafe { dealloc(ptr.as_ptr(), layout(ALIGN << class)) };
            }
        }
    }
}

fn layout(cap: usize) -> Layout {
    debug_assert!(cap > 0 && cap.is_multiple_of(ALIGN));
    // ALIGN is a power of two and cap is a non-zero multiple of it.
    Layout::from_size_align(cap, ALIGN).unwrap_or_else(|_| handle_alloc_error(Layout::new::<u8>()))
}

/// Size class for a capacity, if the pool recycles it.
fn class_of(cap: usize) -> Option<usize> {
    if cap > MAX_POOLED || !cap.is_power_of_two() {
        return None;
    }
    Some((cap / ALIGN).trailing_zeros() as usize)
}

/// Rounds a requested length up to the capacity actually allocated.
fn capacity_for(len: usize) -> usize {
    let len = len.max(1).div_ceil(ALIGN) * ALIGN;
    if len <= MAX_POOLED {
        len.next_power_of_two()
    } else {
        len
    }
}

/// An owned, [`ALIGN`]-aligned byte buffer with a length and a capacity.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: AlignedBuf uniquely owns its allocation, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of length 0 with room for at least `cap` bytes. Its spare
    /// capacity holds arbitrary (initialised) bytes.
    pub fn with_capacity(cap: usize) -> Self {
        let cap = capacity_for(cap);
        let pooled = class_of(cap).and_then(|c| POOL.with(|p| p.borrow_mut().classes[c].pop()));
        let ptr = pooled.unwrap_or_else(|| {
            let l = layout(cap);
            // SAFETY: layout has non-zero size.
            let raw = unsafe { alloc_zeroed(l) };
            NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(l))
        });
        Self { ptr, len: 0, cap }
    }

    /// A buffer of length `len` whose contents are unspecified (recycled bytes).
    /// Use it as the target of a read that fills all of it.
    pub fn for_read(len: usize) -> Self {
        let mut b = Self::with_capacity(len);
        b.len = len;
        b
    }

    /// A buffer of length `len` filled with zeros.
    pub fn zeroed(len: usize) -> Self {
        let mut b = Self::for_read(len);
        b.as_mut_slice().fill(0);
        b
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_from(data: &[u8]) -> Self {
        let mut b = Self::for_read(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    /// Number of valid bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer can hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Sets the length. Bytes between the old and new length keep whatever
    /// they held (always initialised memory).
    ///
    /// # Panics
    /// If `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.cap,
            "AlignedBuf::set_len {len} > capacity {}",
            self.cap
        );
        self.len = len;
    }

    /// Appends bytes; the buffer must have room for them.
    ///
    /// # Panics
    /// If the data does not fit in the capacity.
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        let start = self.len;
        self.set_len(start + data.len());
        self.as_mut_slice()[start..].copy_from_slice(data);
    }

    /// The valid bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The valid bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for cap >= len initialised bytes, uniquely owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let ptr = self.ptr;
        let cap = self.cap;
        let kept = class_of(cap).is_some_and(|c| {
            POOL.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.classes[c].len() < Pool::limit(c) {
                    p.classes[c].push(ptr);
                    true
                } else {
                    false
                }
            })
            .unwrap_or(false)
        });
        if !kept {
            // SAFETY: allocated with layout(cap) and not pooled.
            unsafe { dealloc(ptr.as_ptr(), layout(cap)) };
        }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        Self::copy_from(self.as_slice())
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl IoBuf for AlignedBuf {
    fn as_init(&self) -> &[u8] {
        self.as_slice()
    }
}

impl SetLen for AlignedBuf {
    unsafe fn set_len(&mut self, len: usize) {
        AlignedBuf::set_len(self, len);
    }
}

impl IoBufMut for AlignedBuf {
    fn as_uninit(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: the allocation holds cap initialised bytes; MaybeUninit<u8> has u8's layout.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.cap) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_sized() {
        for len in [1, 4096, 4097, 65536, 1 << 20, (16 << 20) + 1] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.capacity() >= len);
            assert_eq!(b.capacity() % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn dropped_buffers_are_reused_by_the_same_class() {
        let a = AlignedBuf::copy_from(&[7u8; 8192]);
        let p = a.as_ptr();
        drop(a);
        let b = AlignedBuf::for_read(8000);
        assert_eq!(b.as_ptr(), p, "same size class comes back from the pool");
        let c = AlignedBuf::zeroed(8192);
        assert!(c.iter().all(|&x| x == 0));
    }

    #[test]
    fn extend_and_set_len_respect_capacity() {
        let mut b = AlignedBuf::with_capacity(4096);
        b.extend_from_slice(b"abc");
        b.extend_from_slice(b"def");
        assert_eq!(&b[..], b"abcdef");
        let r = std::panic::catch_unwind(move || {
            let mut b = b;
            b.set_len(4097)
        });
        assert!(r.is_err());
    }
}
