//! SQL persistence against real databases: SQLite files and the PostgreSQL at
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), each
//! test in its own file or schema so tests run in parallel. One binary with
//! modules, to cut link time.

mod chat_flows;
mod cli;
mod cli_fleet;
mod cli_rewrite;
mod clones;
mod codec;
mod common;
mod concurrency;
mod conformance;
mod contract;
mod corrupt_rows;
mod delta;
mod delta_diff;
mod ecto;
mod effects;
mod encryption;
mod engine;
mod evolution;
mod failures;
mod fleet;
mod group;
mod hot;
mod inputs;
mod leases;
mod lifecycle;
mod listing;
mod maintenance;
mod migrations;
mod mongo;
mod mongo_leases;
mod nul_text;
mod orphans;
mod policies;
mod pooler;
mod sealed_metadata;
mod sends;
mod stored_json;
mod streamed;
mod subgraphs;
mod typed_history;
mod undecodable_interrupts;
mod upgrades;
