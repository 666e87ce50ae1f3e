//! Runtime tests on the in-memory saver: one binary, one module per area.

mod adversarial;
mod api_review;
mod clones;
mod common;
mod conformance;
mod engine;
mod graph_review;
mod history;
mod interrupts;
mod pending;
mod run_cache;
mod seed_review;
mod state_review;
mod stream_modes;
