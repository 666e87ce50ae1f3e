//! The conformance suites of weaver's storage contracts: the checks every
//! [`Saver`](weaver::Saver) passes ([`saver`]) and those every
//! [`SnapshotAdapter`](weaver::checkpoint::SnapshotAdapter) passes, the saver
//! suite over an [`AdapterSaver`](weaver::checkpoint::AdapterSaver) included
//! ([`adapter`]).
//!
//! A backend runs a suite with one macro call in its tests, naming the test
//! and giving an `async` block that makes a fresh, empty backend (it runs
//! once per check):
//!
//! ```
//! use weaver::checkpoint::{InMemorySaver, MemoryAdapter};
//!
//! weaver_conformance::saver_suite!(in_memory_saver_conforms, async { InMemorySaver::new() });
//! weaver_conformance::adapter_suite!(memory_adapter_conforms, async { MemoryAdapter::new() });
//! # fn main() {}
//! ```
//!
//! Each call is a `#[test]` that runs the whole suite on a Tokio runtime
//! of its own; a check that fails panics with what it found. A backend
//! whose server is missing fails: make the backend with `.expect("...")`
//! saying what is missing, never skip.

pub mod adapter;
pub mod saver;

#[doc(hidden)]
pub use weaver as __weaver;

/// Runs `suite` to completion on a fresh multi-threaded Tokio runtime: what
/// the suite macros' tests call.
///
/// ```
/// let four = weaver_conformance::block_on(async { 2 + 2 });
/// assert_eq!(four, 4);
/// ```
pub fn block_on<F: std::future::Future>(suite: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a Tokio runtime for the conformance suite")
        .block_on(suite)
}

/// Defines test `$name` running the saver conformance suite
/// ([`saver::run_saver_conformance`]) on savers made by `$make`, an `async`
/// block evaluating to a [`Saver`](weaver::Saver) (a fresh, empty one each
/// time).
///
/// ```
/// weaver_conformance::saver_suite!(in_memory, async { weaver::InMemorySaver::new() });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! saver_suite {
    ($name:ident, $make:expr) => {
        #[test]
        fn $name() {
            $crate::block_on($crate::saver::run_saver_conformance(|| async {
                ::std::sync::Arc::new($make.await)
                    as ::std::sync::Arc<dyn $crate::__weaver::checkpoint::Saver>
            }));
        }
    };
}

/// Defines test `$name` running the adapter conformance suite
/// ([`adapter::run_adapter_conformance`]: the seven operations, both rules,
/// bad input, then the saver suite over an
/// [`AdapterSaver`](weaver::checkpoint::AdapterSaver)) on adapters made by
/// `$make`, an `async` block evaluating to a fresh, empty
/// [`SnapshotAdapter`](weaver::checkpoint::SnapshotAdapter) each time.
///
/// ```
/// weaver_conformance::adapter_suite!(memory, async { weaver::checkpoint::MemoryAdapter::new() });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! adapter_suite {
    ($name:ident, $make:expr) => {
        #[test]
        fn $name() {
            $crate::block_on($crate::adapter::run_adapter_conformance(|| async {
                $make.await
            }));
        }
    };
}
