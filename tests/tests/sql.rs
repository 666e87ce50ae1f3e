//! SQL persistence against real databases: SQLite files and the PostgreSQL at
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), each
//! test in its own file or schema so tests run in parallel. One binary with
//! modules, to cut link time.

#[path = "sql/chat_flows.rs"]
mod chat_flows;
#[path = "sql/cli.rs"]
mod cli;
#[path = "sql/cli_fleet.rs"]
mod cli_fleet;
#[path = "sql/cli_rewrite.rs"]
mod cli_rewrite;
#[path = "sql/clones.rs"]
mod clones;
#[path = "sql/codec.rs"]
mod codec;
#[path = "sql/common.rs"]
mod common;
#[path = "sql/concurrency.rs"]
mod concurrency;
#[path = "sql/conformance.rs"]
mod conformance;
#[path = "sql/contract.rs"]
mod contract;
#[path = "sql/corrupt_rows.rs"]
mod corrupt_rows;
#[path = "sql/delta.rs"]
mod delta;
#[path = "sql/delta_diff.rs"]
mod delta_diff;
#[path = "sql/ecto.rs"]
mod ecto;
#[path = "sql/effects.rs"]
mod effects;
#[path = "sql/encryption.rs"]
mod encryption;
#[path = "sql/engine.rs"]
mod engine;
#[path = "sql/evolution.rs"]
mod evolution;
#[path = "sql/failures.rs"]
mod failures;
#[path = "sql/fleet.rs"]
mod fleet;
#[path = "sql/group.rs"]
mod group;
#[path = "sql/hot.rs"]
mod hot;
#[path = "sql/inputs.rs"]
mod inputs;
#[path = "sql/leases.rs"]
mod leases;
#[path = "sql/lifecycle.rs"]
mod lifecycle;
#[path = "sql/listing.rs"]
mod listing;
#[path = "sql/maintenance.rs"]
mod maintenance;
#[path = "sql/migrations.rs"]
mod migrations;
#[path = "sql/mongo.rs"]
mod mongo;
#[path = "sql/nul_text.rs"]
mod nul_text;
#[path = "sql/orphans.rs"]
mod orphans;
#[path = "sql/policies.rs"]
mod policies;
#[path = "sql/pooler.rs"]
mod pooler;
#[path = "sql/sealed_metadata.rs"]
mod sealed_metadata;
#[path = "sql/sends.rs"]
mod sends;
#[path = "sql/stored_json.rs"]
mod stored_json;
#[path = "sql/streamed.rs"]
mod streamed;
#[path = "sql/subgraphs.rs"]
mod subgraphs;
#[path = "sql/typed_history.rs"]
mod typed_history;
#[path = "sql/undecodable_interrupts.rs"]
mod undecodable_interrupts;
#[path = "sql/upgrades.rs"]
mod upgrades;
