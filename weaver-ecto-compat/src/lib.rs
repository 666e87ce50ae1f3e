//! Interop with databases whose schema an Elixir/Ecto application owns.
//!
//! **This crate is a placeholder and holds no functionality yet.** It is
//! reserved for the planned `weaver-ecto-compat` work described in the
//! project's design: exporting weaver's versioned SQL migrations as Ecto
//! migration modules, and reading and writing the schema version marker that
//! BeamWeaver's `BeamWeaver.Migrations` keeps, so an Elixir application and a
//! Rust service can share one checkpoint database. Until that lands, use
//! `weaver::migrate` directly.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
