//! Steadier large reads under glibc's `malloc`.
//!
//! glibc gives the free memory at the top of a heap back to the kernel once
//! it exceeds a trim threshold (128 KiB at start), and the next allocation
//! there faults the pages in again, zeroed. It raises that threshold (to
//! twice the block's size) only when a block it served by `mmap` (128 KiB or more)
//! is freed. A saver reading records a little under 128 KiB (a conversation
//! of 500 short messages stored in full) allocates and frees them on every
//! read, on sqlx's worker thread and on the caller's, without ever freeing
//! an `mmap` block: each read then pays a page fault per 4 KiB, or not,
//! depending on what the process freed before. In a process that only
//! reads W2's thread (`cargo run --release -p weaver-bench --bin
//! w4_fresh`), a cold `history(limit 20)` faulted 72–74 pages in and took
//! 0.76–0.80 ms with glibc's start thresholds pinned (`GLIBC_TUNABLES`, see
//! that binary); after [`settle`], 0.8–0.9 pages and 0.48–0.52 ms. A build
//! without it (not kept) was caught in one process of three.
//!
//! [`settle`] frees such a block once per process (through the global
//! allocator, so it acts only when that is the system's `malloc`): glibc
//! then serves blocks under 1 MiB from its heaps and keeps up to 2 MiB free
//! at their tops, as it would after any program freed a 1 MiB buffer. A
//! threshold the application set (`mallopt`, `GLIBC_TUNABLES`) turns that
//! adjustment off, and is kept.

use std::sync::Once;

/// The block freed once: the `mmap` threshold it sets (glibc keeps twice
/// that at the top of a heap).
const SETTLE_BYTES: usize = 1 << 20;

/// Frees one [`SETTLE_BYTES`] block, once per process (see the module docs).
pub(crate) fn settle() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Zeroed: glibc maps it without touching its pages. `black_box`:
        // the allocation must happen, not be optimized away.
        let block = std::hint::black_box(vec![0u8; SETTLE_BYTES]);
        drop(block);
    });
}
