//! The workloads' graphs and states.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use weaver::prelude::*;
use weaver::state::SharedVec;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::backend::{Backend, compile};

pub(crate) fn two_step(be: &Backend) -> CompiledGraph<Steps> {
    compile(
        Graph::<Steps>::new("two-step")
            .add_node("node_a", |_: &Steps| {
                StepsUpdate::default().foo("a").bar(["a"])
            })
            .add_node("node_b", |_: &Steps| {
                StepsUpdate::default().foo("b").bar(["b"])
            })
            .add_sequence([START, "node_a", "node_b", END]),
        be,
    )
}

pub(crate) type Counts = Arc<Mutex<BTreeMap<String, usize>>>;

/// W3's fan-out; with `fail`, `w3` fails on its first attempt (W7).
pub(crate) fn fan_out(be: &Backend, counts: Option<Counts>, fail: bool) -> CompiledGraph<Steps> {
    let armed = Arc::new(AtomicBool::new(fail));
    let mut g = Graph::<Steps>::new("fan-out");
    for i in 0..8 {
        let name = format!("w{i}");
        let (counts, armed, label) = (counts.clone(), armed.clone(), name.clone());
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if let Some(c) = &counts {
                        *c.lock().expect("counts").entry(label.clone()).or_default() += 1;
                    }
                    if i == 3 && armed.swap(false, Ordering::SeqCst) {
                        return Err(NodeError::msg("first attempt fails"));
                    }
                    Ok(StepsUpdate::default().bar([label.clone()]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, "join");
    }
    compile(
        g.add_node("join", |_: &Steps| StepsUpdate::default().foo("joined"))
            .add_edge("join", END),
        be,
    )
}

/// W2's state: the messages in a delta channel, as chat-graph's conversations
/// declare them (each checkpoint stores what it appended).
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Chat {
    #[reducer(delta)]
    messages: Vec<String>,
}

/// W2's state with a plain append channel (`--w2-channel append`): every
/// checkpoint stores all messages, as the peer's `operator.add` list does.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ChatAppend {
    #[reducer(append)]
    messages: Vec<String>,
}

/// W2's state with the messages as shared strings (`--w2-channel
/// delta-arc`): a delta channel whose history snapshots share the items
/// they have in common instead of each owning a copy.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ChatShared {
    #[reducer(delta)]
    messages: Vec<Arc<str>>,
}

/// W2's state with the messages in a [`SharedVec`] (`--w2-channel
/// shared-vec`): history snapshots share chunks of 64 messages, so each costs
/// a few pointers rather than one per message.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub(crate) struct ChatChunked {
    #[reducer(delta)]
    messages: SharedVec<String>,
}

/// What W2 and W4 need of a chat state.
pub(crate) trait ChatState: GraphState {
    /// The name the rows record.
    const CHANNEL: &'static str;
    fn messages(self) -> Vec<String>;
    fn say(message: String) -> Self::Update;
}

impl ChatState for Chat {
    const CHANNEL: &'static str = "delta";
    fn messages(self) -> Vec<String> {
        self.messages
    }
    fn say(message: String) -> ChatUpdate {
        ChatUpdate::default().messages(vec![message])
    }
}

impl ChatState for ChatShared {
    const CHANNEL: &'static str = "delta-arc";
    fn messages(self) -> Vec<String> {
        self.messages.iter().map(|m| m.to_string()).collect()
    }
    fn say(message: String) -> ChatSharedUpdate {
        ChatSharedUpdate::default().messages(vec![Arc::from(message)])
    }
}

impl ChatState for ChatChunked {
    const CHANNEL: &'static str = "shared-vec";
    fn messages(self) -> Vec<String> {
        self.messages.into()
    }
    fn say(message: String) -> ChatChunkedUpdate {
        ChatChunkedUpdate::default().messages(vec![message])
    }
}

impl ChatState for ChatAppend {
    const CHANNEL: &'static str = "append";
    fn messages(self) -> Vec<String> {
        self.messages
    }
    fn say(message: String) -> ChatAppendUpdate {
        ChatAppendUpdate::default().messages(vec![message])
    }
}

/// 256 ASCII bytes unique per turn, as the peer builds them:
/// hex(sha256("weaver-w2-{i}-{k}")) for k = 0..3.
pub(crate) fn message_for_turn(i: i64) -> String {
    let mut out = String::with_capacity(256);
    for k in 0..4 {
        for b in Sha256::digest(format!("weaver-w2-{i}-{k}").as_bytes()) {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

pub(crate) fn chat<C: ChatState>(be: &Backend, turn: Arc<AtomicI64>) -> CompiledGraph<C> {
    compile(chat_graph(turn), be)
}

/// W2's graph, uncompiled.
pub(crate) fn chat_graph<C: ChatState>(turn: Arc<AtomicI64>) -> Graph<C> {
    Graph::<C>::new("chat")
        .add_node("chat", move |_: &C| {
            C::say(message_for_turn(turn.load(Ordering::SeqCst)))
        })
        .add_sequence([START, "chat", END])
}

pub(crate) fn input() -> Steps {
    Steps::default()
}
