//! Runtime tests on the in-memory saver: one binary, one module per area.

mod adversarial;
mod chat_flows;
mod clones;
mod common;
mod config;
mod conformance;
mod effects;
mod engine;
mod evolution;
mod history;
mod interrupts;
mod leases;
mod pending;
mod persistence;
mod policies;
mod run_cache;
mod sends;
mod state;
mod stream_modes;
mod stream_writer;
mod streaming;
mod subgraphs;
mod upgrades;
