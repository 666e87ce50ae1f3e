//! The layers every store backend is wrapped in, the same for each:
//! tracing outermost (so a refused batch is traced too), then the limits.
//! A backend implements only what it stores; the public store types hold
//! their backend inside these layers.

use super::contract::Store;
use super::limits::Limited;
use super::trace::Traced;

/// A backend inside every layer.
pub(crate) type Layered<S> = Traced<Limited<S>>;

/// Wraps `backend` in every layer.
pub(crate) fn layered<S: Store>(backend: S) -> Layered<S> {
    Traced::new(Limited::new(backend))
}

/// The backend inside the layers, to configure it.
pub(crate) fn backend_mut<S>(layers: &mut Layered<S>) -> &mut S {
    layers.inner_mut().inner_mut()
}

/// The backend inside the layers.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]
pub(crate) fn backend<S>(layers: &Layered<S>) -> &S {
    layers.inner().inner()
}
