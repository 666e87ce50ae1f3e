//! The engine state of a chat flow: the user's state and the tracker, two
//! channels of one checkpoint, so that both are stored (and restored)
//! together.

use serde::{Deserialize, Serialize};

use super::types::Tracker;
use crate::channel::{ChannelKind, ChannelSpec};
use crate::error::Result;
use crate::state::{GraphState, Update};

/// A conversation as the engine checkpoints it: the flow's state and its
/// tracker. Serialized as `{"state": .., "tracker": ..}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct Conversation<S: GraphState> {
    /// The flow's state.
    pub state: S,
    /// How far the conversation is.
    #[serde(default)]
    pub tracker: Tracker,
}

/// A write of the flow's state: an update through its reducers, or a
/// whole state (an input made of a full conversation).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "", rename_all = "snake_case")]
pub(crate) enum StateWrite<S: GraphState> {
    /// An update, applied through the state's reducers.
    Update(S::Update),
    /// A whole state, replacing the one before.
    Replace(S),
}

/// A partial update of a [`Conversation`]: the channels it writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) struct ConversationUpdate<S: GraphState> {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::state::present"
    )]
    pub state: Option<StateWrite<S>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::state::present"
    )]
    pub tracker: Option<Tracker>,
}

impl<S: GraphState> Default for ConversationUpdate<S> {
    fn default() -> Self {
        ConversationUpdate {
            state: None,
            tracker: None,
        }
    }
}

impl<S: GraphState> Update for ConversationUpdate<S> {}

impl<S: GraphState> From<Conversation<S>> for ConversationUpdate<S> {
    fn from(c: Conversation<S>) -> Self {
        ConversationUpdate {
            state: Some(StateWrite::Replace(c.state)),
            tracker: Some(c.tracker),
        }
    }
}

impl<S: GraphState> GraphState for Conversation<S> {
    type Update = ConversationUpdate<S>;

    const CHANNELS: &'static [ChannelSpec] = &[
        ChannelSpec::new("state", ChannelKind::Custom),
        ChannelSpec::new("tracker", ChannelKind::Replace),
    ];

    fn apply(&mut self, updates: Vec<Self::Update>) -> Result<()> {
        for u in updates {
            match u.state {
                Some(StateWrite::Update(update)) => self.state.apply(vec![update])?,
                Some(StateWrite::Replace(state)) => self.state = state,
                None => {}
            }
            if let Some(tracker) = u.tracker {
                self.tracker = tracker;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    struct Total {
        n: i64,
    }

    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    struct TotalUpdate {
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "crate::state::present"
        )]
        n: Option<i64>,
    }
    impl Update for TotalUpdate {}
    impl From<Total> for TotalUpdate {
        fn from(t: Total) -> Self {
            TotalUpdate { n: Some(t.n) }
        }
    }
    impl GraphState for Total {
        type Update = TotalUpdate;
        const CHANNELS: &'static [ChannelSpec] = &[ChannelSpec::new("n", ChannelKind::Add)];
        fn apply(&mut self, updates: Vec<TotalUpdate>) -> Result<()> {
            for u in updates {
                if let Some(n) = u.n {
                    crate::channel::reduce::add(&mut self.n, n, "n")?;
                }
            }
            Ok(())
        }
    }

    #[test]
    fn updates_go_through_the_state_reducers_and_replace_the_tracker() {
        let mut c = Conversation::<Total>::default();
        let tracker = Tracker {
            node: Some("a".into()),
            action_taken: true,
            ..Tracker::default()
        };
        let add = |n| ConversationUpdate::<Total> {
            state: Some(StateWrite::Update(TotalUpdate { n: Some(n) })),
            tracker: None,
        };
        c.apply(vec![add(2), add(3)]).unwrap();
        c.apply(vec![ConversationUpdate {
            state: None,
            tracker: Some(tracker.clone()),
        }])
        .unwrap();
        assert_eq!(c.state.n, 5);
        assert_eq!(c.tracker, tracker);
        c.apply(vec![ConversationUpdate {
            state: Some(StateWrite::Replace(Total { n: 1 })),
            tracker: None,
        }])
        .unwrap();
        assert_eq!(c.state.n, 1);
    }

    #[test]
    fn a_conversation_is_stored_as_two_channels() {
        let c = Conversation::<Total> {
            state: Total { n: 4 },
            tracker: Tracker::default(),
        };
        let values = serde_json::to_value(&c).unwrap();
        let keys: Vec<&String> = values.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["state", "tracker"]);
        assert_eq!(values["state"], serde_json::json!({ "n": 4 }));
        let update = serde_json::to_value(ConversationUpdate::<Total>::default()).unwrap();
        assert_eq!(
            update,
            serde_json::json!({}),
            "an empty update writes no channel"
        );
    }
}
