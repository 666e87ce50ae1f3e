//! Cross-crate test suites: the saver conformance suite and shared fixtures.

pub mod conformance;
pub mod states;
