//! Racing writers.
