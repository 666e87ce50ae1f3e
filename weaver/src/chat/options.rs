//! [`ChatOptions`]: where a conversation is stored and how its turns run.

use std::fmt;
use std::sync::Arc;

use crate::checkpoint::Saver;

/// The default bound on the node runs of one turn
/// ([`ChatOptions::max_nodes_per_turn`]).
pub const DEFAULT_MAX_NODES_PER_TURN: usize = 25;

/// Where a conversation is stored and how turns run: the conversation's
/// id (the engine's thread), the saver, auto-save, the bound on node runs
/// per turn.
#[derive(Clone)]
pub struct ChatOptions {
    pub(crate) id: String,
    pub(crate) saver: Arc<dyn Saver>,
    pub(crate) auto_save: bool,
    pub(crate) max_nodes_per_turn: usize,
}

impl fmt::Debug for ChatOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatOptions")
            .field("id", &self.id)
            .field("auto_save", &self.auto_save)
            .field("max_nodes_per_turn", &self.max_nodes_per_turn)
            .finish_non_exhaustive()
    }
}

impl ChatOptions {
    /// The conversation `id` stored in `saver`, with auto-save on and at
    /// most [`DEFAULT_MAX_NODES_PER_TURN`] node runs per turn.
    pub fn new(id: impl Into<String>, saver: impl Saver + 'static) -> Self {
        ChatOptions::shared(id, Arc::new(saver))
    }

    /// [`new`](Self::new) on a saver shared with other flows.
    pub fn shared(id: impl Into<String>, saver: Arc<dyn Saver>) -> Self {
        ChatOptions {
            id: id.into(),
            saver,
            auto_save: true,
            max_nodes_per_turn: DEFAULT_MAX_NODES_PER_TURN,
        }
    }

    /// Whether a snapshot is stored after each action and each successful
    /// validation (the default), or only by [`ChatFlow::save`](super::ChatFlow::save).
    pub fn auto_save(mut self, on: bool) -> Self {
        self.auto_save = on;
        self
    }

    /// The most node runs (actions and validations) one turn may make; the
    /// run past it fails the turn with [`Error::LimitExceeded`](crate::Error::LimitExceeded).
    pub fn max_nodes_per_turn(mut self, n: usize) -> Self {
        self.max_nodes_per_turn = n;
        self
    }
}
