//! User code weaver calls outside a node body (routers, reducers,
//! `Serialize`, upcasters), with its panics turned into errors.

use std::panic::AssertUnwindSafe;

/// The text of a caught panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".into())
}

/// `f()`, or the message of its panic (`what` panicked: ...): user code the
/// engine calls outside a node body (routers, reducers) fails the run with
/// a typed error, as a node's panic does, instead of unwinding through it.
pub(crate) fn caught<T>(what: &str, f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
        .map_err(|panic| format!("{what} panicked: {}", panic_message(&*panic)))
}
