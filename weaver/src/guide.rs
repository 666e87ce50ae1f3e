//! The user guide: one chapter per thing a user sets out to do.
//!
//! Each chapter is a page of this module; its examples are compiled and run
//! as doctests, so they stay true to the API. The chapters' sources are the
//! markdown files under `docs/guide/` in the repository.

/// Side effects and human review: effects that run once per task.
pub mod side_effects {
    #![doc = include_str!("../../docs/guide/side-effects.md")]
}

/// Chat flows: turn-based conversations that ask, validate and run on,
/// stored snapshot by snapshot.
pub mod chat_flows {
    #![doc = include_str!("../../docs/guide/chat-flows.md")]
}
