//! A chat whose lines count how often they are decoded: for tests that a
//! run through the same graph does not decode the conversation again.

use std::cell::Cell;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use weaver::checkpoint::{CheckpointRef, Saver};
use weaver::prelude::*;

thread_local! {
    /// How many [`Line`]s this thread decoded. A `#[tokio::test]` runs on a
    /// thread of its own (a current-thread runtime), so tests running at
    /// once do not mix their counts.
    static DECODED: Cell<usize> = const { Cell::new(0) };
}

/// How many [`Line`]s this thread has decoded so far.
pub fn decoded() -> usize {
    DECODED.get()
}

/// A chat line that counts its decodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Line(pub String);

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        DECODED.set(DECODED.get() + 1);
        String::deserialize(d).map(Line)
    }
}

/// The chat's state: its lines in a delta channel.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Lines {
    /// One line per turn.
    #[reducer(delta)]
    pub lines: Vec<Line>,
}

/// `line <n>`, the line turn `n` says.
pub fn line(n: usize) -> Line {
    Line(format!("line {n}"))
}

/// A graph whose one node `say` appends the next line, on `saver`.
pub fn lines_graph(saver: Arc<dyn Saver>) -> CompiledGraph<Lines> {
    Graph::<Lines>::new("lines")
        .add_node("say", |s: &Lines| {
            LinesUpdate::default().lines(vec![line(s.lines.len() + 1)])
        })
        .add_sequence([START, "say", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("a valid graph")
}

/// Runs `turns` turns of `graph` on `thread`, the first being turn `first`,
/// and checks each turn's transcript. A turn that starts at a head stored
/// as deltas must decode no line; returns how many turns did.
pub async fn turns_decoding_nothing(
    graph: &CompiledGraph<Lines>,
    saver: &dyn Saver,
    thread: &str,
    first: usize,
    turns: usize,
) -> usize {
    let config = RunConfig::thread(thread);
    let mut from_cache = 0;
    for turn in first..first + turns {
        let head = saver
            .get_stored(&CheckpointRef::latest(thread))
            .await
            .expect("the head");
        let delta_head = head.is_some_and(|h| !h.checkpoint.channel_values.contains_key("lines"));
        let before = decoded();
        let out = graph
            .invoke(Lines::default(), &config)
            .await
            .expect("a turn");
        let decoded = decoded() - before;
        let lines = out.complete().expect("a complete run").lines;
        assert_eq!(lines.len(), turn);
        assert_eq!(lines[turn - 1], line(turn));
        if delta_head {
            // Before runs kept their stored state, every turn decoded the
            // whole conversation.
            assert_eq!(decoded, 0, "turn {turn} decoded {decoded} lines");
            from_cache += 1;
        }
    }
    from_cache
}
