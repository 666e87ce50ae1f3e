//! Turn-based chat flows on the engine: nodes that say something (an
//! action), wait for the user's reply and validate it (re-asking on an
//! invalid one), or run on by themselves (auto-advance), joined by edges
//! from START to END.
//!
//! A flow is compiled into an engine graph over the flow's state and a
//! [`Tracker`]: one engine node per chat node, the wait for a reply an
//! interrupt, every snapshot a checkpoint of the conversation's thread.
//! [`ChatFlow::turn`] takes one turn (one user message, and an optional
//! event payload); the messages the nodes emit come back with it and are
//! never stored. See the guide chapter [`crate::guide::chat_flows`].

mod builder;
mod flow;
mod node;
mod options;
mod state;
mod store;
mod types;

pub use builder::{ChatFlowBuilder, ChatNode};
pub use flow::ChatFlow;
pub use options::{ChatOptions, DEFAULT_MAX_NODES_PER_TURN};
pub use store::ChatSnapshot;
pub use types::{Action, Tracker, Turn, TurnInput, Validation};
