//! The user guide: one chapter per thing a user sets out to do.
//!
//! Each chapter is a page of this module; its examples are compiled and run
//! as doctests, so they stay true to the API. The chapters' sources are the
//! markdown files under `docs/guide/` in the repository.
//!
//! 1. [Quick start](quick_start): install, a first graph, a checkpointed
//!    run on SQLite, its history, a resume.
//! 2. [State, channels and reducers](state): the derive, every reducer,
//!    delta channels, `SharedVec`, the schema snapshot test.
//! 3. [Building graphs](graphs): the builder and `graph!`, edges,
//!    `Command`, `Send`, subgraphs, compile-time checks, drawings.
//! 4. [Running graphs](running): `invoke`, `continue_run`, `resume`,
//!    `RunConfig`, context, node policies, streaming.
//! 5. [Side effects](side_effects): effects that run once per task.

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

/// Side effects and human review: effects that run once per task.
pub mod side_effects {
    #![doc = include_str!("../../docs/guide/side-effects.md")]
}
