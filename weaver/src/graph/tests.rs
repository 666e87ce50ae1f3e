//! Graphs built here, run: what a run leaves behind.

use serde::{Deserialize, Serialize};

use super::{Compile, END, Graph, START};
use crate::channel::{ChannelKind, ChannelSpec, reduce};
use crate::checkpoint::InMemorySaver;
use crate::config::RunConfig;
use crate::engine::History;
use crate::state::{GraphState, Update};

/// A conversation in a delta channel, written by hand (the derive's
/// paths name the `weaver` crate from outside).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Talk {
    lines: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct TalkUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lines: Option<Vec<String>>,
}

impl Update for TalkUpdate {}

impl From<Talk> for TalkUpdate {
    fn from(t: Talk) -> Self {
        TalkUpdate {
            lines: Some(t.lines),
        }
    }
}

impl GraphState for Talk {
    type Update = TalkUpdate;
    const CHANNELS: &'static [ChannelSpec] = &[ChannelSpec::new("lines", ChannelKind::Delta)];
    fn apply(&mut self, updates: Vec<TalkUpdate>) -> crate::Result<()> {
        for u in updates {
            if let Some(l) = u.lines {
                reduce::append(&mut self.lines, l);
            }
        }
        Ok(())
    }
}

/// Each checkpoint a run stores cuts its parent's values of the delta
/// channels off; those are dropped, not cached: the next run starts from
/// the typed state the graph keeps. Caching them held a whole copy of
/// the conversation per checkpoint (256 of them), and made each turn
/// cost twice as much in memory.
#[tokio::test]
async fn turns_leave_no_copies_of_the_conversation_in_the_checkpointers_cache() {
    let graph = Graph::<Talk>::new("talk")
        .add_node("say", |t: &Talk| TalkUpdate {
            lines: Some(vec![format!("line {}", t.lines.len())]),
        })
        .add_sequence([START, "say", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    for _ in 0..40 {
        graph.invoke(Talk::default(), &config).await.unwrap();
    }
    let state = graph.get_state(&config).await.unwrap();
    assert_eq!(state.values.lines.len(), 40);
    let cp = graph.checkpointer().unwrap();
    assert_eq!(cp.cached_delta_items(), 0);
    // Reads still cache what they rebuild, for the next read.
    let history = graph
        .get_state_history(&config, History::default().limit(3))
        .await
        .unwrap();
    assert_eq!(history[2].values.lines.len(), 39);
    assert!(cp.cached_delta_items() > 0);
}
