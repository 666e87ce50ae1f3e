//! The user guide: one chapter per thing a user sets out to do.
//!
//! Each chapter is a page of this module; its examples are doctests, so
//! they stay true to the API: each is compiled, and run unless it needs a
//! PostgreSQL or MongoDB server (those four are `no_run`), and the one that
//! shows a compile-time check must fail to compile. The chapters' sources
//! are the markdown files under `docs/guide/` in the repository.
//!
//! 1. [Quick start](quick_start): install, a first graph, a checkpointed
//!    run on SQLite, its history, a resume.
//! 2. [State, channels and reducers](state): the derive, every reducer,
//!    delta channels, `SharedVec`, the schema snapshot test.
//! 3. [Building graphs](graphs): the builder and `graph!`, edges,
//!    `Command`, `Send`, subgraphs, compile-time checks, drawings.
//! 4. [Running graphs](running): `invoke`, `continue_run`, `resume`,
//!    `RunConfig`, context, node policies, streaming.
//! 5. [Persistence](persistence): what a checkpoint holds, threads and
//!    namespaces, durability modes, backends, migrations.
//! 6. [Human in the loop](human_in_the_loop): `interrupt`, static
//!    interrupts, resuming by id and from another process, subgraphs.
//! 7. [Time travel](time_travel): `get_state`, history, replay, forks with
//!    `update_state`, copying threads.
//! 8. [The memory store](memory_store): namespaces, put/get/search,
//!    filters, TTL, SQL stores.
//! 9. [Limits and errors](limits_and_errors): the `Error` enum by family,
//!    what is refused and why, what never panics.
//! 10. [Coming from LangGraph](coming_from_langgraph): each LangGraph API
//!     and its weaver counterpart.
//! 11. [Side effects](side_effects): effects that run once per task.
//! 12. [Releasing a new version](releasing): state versions, upcasters,
//!     renamed nodes, the pre-deploy checks.
//! 13. [Encryption](encryption): what is sealed, authenticated and left in
//!     the clear.
//! 14. [Deploying](deploying): PostgreSQL, poolers, fleet retention.
//! 15. [Several workers on one conversation](workers): one run per thread
//!     at a time, the multitask strategies, whole turns.
//! 16. [Chat flows](chat_flows): turn-based flows that ask, validate and run
//!     on, stored on any saver (one way to bring storage of your own is an
//!     [`AdapterSaver`](crate::checkpoint::AdapterSaver) over a
//!     [`SnapshotAdapter`](crate::checkpoint::SnapshotAdapter)).

/// Quick start: install, a first graph, a checkpointed run, history, resume.
pub mod quick_start {
    #![doc = include_str!("../../docs/guide/quick-start.md")]
}

/// State, channels and reducers: the derive, reducers, delta channels, schemas.
pub mod state {
    #![doc = include_str!("../../docs/guide/state.md")]
}

/// Building graphs: nodes, edges, `Command`, `Send`, subgraphs, checks, drawings.
pub mod graphs {
    #![doc = include_str!("../../docs/guide/graphs.md")]
}

/// Running graphs: the entry points, `RunConfig`, node policies, streaming.
pub mod running {
    #![doc = include_str!("../../docs/guide/running.md")]
}

/// Persistence: what a checkpoint holds, durability, backends, migrations.
pub mod persistence {
    #![doc = include_str!("../../docs/guide/persistence.md")]
}

/// Human in the loop: `interrupt`, static interrupts, resuming, subgraph pauses.
pub mod human_in_the_loop {
    #![doc = include_str!("../../docs/guide/human-in-the-loop.md")]
}

/// Time travel: reading history, replaying, forking, copying threads.
pub mod time_travel {
    #![doc = include_str!("../../docs/guide/time-travel.md")]
}

/// The memory store: namespaces, put/get/search, filters, TTL, SQL stores.
pub mod memory_store {
    #![doc = include_str!("../../docs/guide/memory-store.md")]
}

/// Limits and errors: the `Error` enum by family, what is refused and why.
pub mod limits_and_errors {
    #![doc = include_str!("../../docs/guide/limits-and-errors.md")]
}

/// Coming from LangGraph: each LangGraph API and its weaver counterpart.
pub mod coming_from_langgraph {
    #![doc = include_str!("../../docs/guide/coming-from-langgraph.md")]
}

/// Side effects and human review: effects that run once per task.
pub mod side_effects {
    #![doc = include_str!("../../docs/guide/side-effects.md")]
}

/// Releasing a new version of a graph: state evolution, upcasters, renames.
pub mod releasing {
    #![doc = include_str!("../../docs/guide/releasing.md")]
}

/// Encryption: what an `EncryptedCodec` seals, authenticates and leaves in the clear.
pub mod encryption {
    #![doc = include_str!("../../docs/guide/encryption.md")]
}

/// Deploying: PostgreSQL, poolers in transaction mode, fleet retention.
pub mod deploying {
    #![doc = include_str!("../../docs/guide/deploying.md")]
}

/// Several workers on one conversation: leases and multitask strategies.
pub mod workers {
    #![doc = include_str!("../../docs/guide/workers.md")]
}

/// Chat flows: turn-based conversations that ask, validate and run on,
/// stored snapshot by snapshot.
pub mod chat_flows {
    #![doc = include_str!("../../docs/guide/chat-flows.md")]
}
