//! Cross-crate test suites: the saver and store conformance suites and shared fixtures.

pub mod conformance;
pub mod states;
pub mod store_conformance;
