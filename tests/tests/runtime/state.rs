//! State, reducers, schemas and graph building: what a user expects of typed
//! errors, reducer order, JSON round trips and schemas.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};
use weaver::prelude::*;
use weaver::state::SharedVec;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::Runs;

/// Every expectation that failed, reported together.
#[derive(Default)]
struct Bad(Vec<String>);
impl Bad {
    fn check(&mut self, ok: bool, msg: impl Into<String>) {
        if !ok {
            self.0.push(msg.into());
        }
    }
    fn verdict(self) {
        assert!(self.0.is_empty(), "\n- {}", self.0.join("\n- "));
    }
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Log {
    /// Stored as deltas.
    #[reducer(delta)]
    pub items: SharedVec<String>,
    /// The same items in a plain appended `Vec`.
    #[reducer(append)]
    pub seen: Vec<String>,
    #[reducer(add)]
    pub round: u32,
    #[reducer(self::touchy)]
    pub checked: Vec<String>,
    #[reducer(add)]
    pub small: u8,
    pub last: Option<String>,
}

/// A user reducer that panics on a bad item.
fn touchy(current: &mut Vec<String>, update: Vec<String>) {
    assert!(!update.iter().any(|u| u == "bad"), "reducer rejects `bad`");
    current.extend(update);
}

fn nop(_: &Steps) -> StepsUpdate {
    StepsUpdate::default()
}

/// The final state of a run that must complete.
fn done<S: GraphState>(r: weaver::Result<Outcome<S>>) -> S {
    r.unwrap().complete().unwrap()
}

async fn all<S: GraphState>(g: &CompiledGraph<S>, c: &RunConfig) -> Vec<StateSnapshot<S>> {
    g.get_state_history(c, History::default()).await.unwrap()
}

/// Fails (returns `true`) the first time only.
fn once() -> impl Fn() -> bool + Clone {
    let broken = Arc::new(AtomicBool::new(true));
    move || broken.swap(false, Ordering::SeqCst)
}

#[test]
#[rustfmt::skip]
fn graph_shape_mistakes_are_typed_compile_errors() {
    let g = || Graph::<Steps>::new("g");
    let a = || g().add_node("a", nop).add_edge(START, "a");
    let to_end = |_: &Steps| END;
    let ghost = Some(r#"node: "ghost""#);
    let cases: Vec<(&str, Graph<Steps>, Option<&str>)> = vec![
        ("empty graph", g(), Some("NoEntryPoint")),
        ("START -> END, no nodes", g().add_edge(START, END), None),
        ("self-loop without a way out", a().add_edge("a", "a"), Some(r#"NoPathToEnd { node: "a" }"#)),
        ("self-loop with a way out", a().add_edge("a", "a").add_conditional_edges("a", to_end, [END]), None),
        ("node with no outgoing edge", a().add_node("b", nop).add_edge("a", "b").add_edge("a", END), Some(r#"NoPathToEnd { node: "b" }"#)),
        ("empty name", g().add_node("", nop).add_sequence([START, "", END]), Some("InvalidNodeName")),
        ("START as a node name", g().add_node(START, nop).add_edge(START, END), Some("InvalidNodeName")),
        ("a namespace separator in a name", g().add_node("review|v2", nop).add_sequence([START, "review|v2", END]), Some("InvalidNodeName")),
        ("a task separator in a name", g().add_node("review:v2", nop).add_sequence([START, "review:v2", END]), Some("InvalidNodeName")),
        ("conditional to an unknown node", a().add_conditional_edges("a", to_end, ["ghost", END]), ghost),
        ("conditional from an unknown node", a().add_edge("a", END).add_conditional_edges("ghost", to_end, [END]), ghost),
        ("conditional from END", a().add_edge("a", END).add_conditional_edges(END, to_end, ["a"]), Some("InvalidEdge")),
        ("conditional to START", a().add_conditional_edges("a", to_end, [START, END]), Some("InvalidEdge")),
        ("goto to an unknown node", a().add_edge("a", END).add_destinations("a", ["ghost"]), ghost),
        ("goto to START", a().add_edge("a", END).add_destinations("a", [START]), Some("InvalidEdge")),
        ("reached only by an undeclared goto", a().add_edge("a", END).add_node("b", nop).add_edge("b", END), Some(r#"Unreachable { node: "b" }"#)),
        ("reached by a declared goto", a().add_edge("a", END).add_node("b", nop).add_edge("b", END).add_destinations("a", ["b"]), None),
        ("duplicate name", a().add_node("a", nop).add_edge("a", END), Some(r#"DuplicateNode { node: "a" }"#)),
    ];
    let mut bad = Bad::default();
    for (label, graph, want) in cases {
        let got = match graph.compile(Compile::new()) {
            Ok(_) => None,
            Err(Error::InvalidGraph(e)) => Some(format!("{e:?}")),
            Err(other) => Some(format!("not InvalidGraph: {other:?}")),
        };
        let ok = match (&got, want) {
            (None, None) => true,
            (Some(g), Some(w)) => g.contains(w) && !g.starts_with("not InvalidGraph"),
            _ => false,
        };
        bad.check(ok, format!("{label}: want {want:?}, got {got:?}"));
    }
    bad.verdict();
}

#[tokio::test]
async fn odd_node_names_route_fail_and_replay() {
    // Names with spaces, dots, dashes, non-ASCII (a colon, which the
    // trigger channels and subgraph namespaces use, is refused).
    let (runs, fail) = (Runs::default(), once());
    let node = |name: &'static str| {
        let (runs, fail) = (runs.clone(), fail.clone());
        move |_: &Steps| -> Result<StepsUpdate, NodeError> {
            runs.hit(name);
            if name == "branch.to.x" && fail() {
                return Err(NodeError::msg("down once"));
            }
            Ok(StepsUpdate::default().bar([name]))
        }
    };
    let graph = Graph::<Steps>::new("odd")
        .add_node("a b", node("a b"))
        .add_node("a-b", node("a-b"))
        .add_node("branch.to.x", node("branch.to.x"))
        .add_node("ü", node("ü"))
        .add_edge(START, "a b")
        .add_conditional_edges(
            "a b",
            |_: &Steps| vec!["branch.to.x", "a-b", "a-b"],
            ["a-b", "branch.to.x"],
        )
        .add_edge("a-b", "ü")
        .add_edge("branch.to.x", "ü")
        .add_edge("ü", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("odd");
    let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(
        matches!(err, Error::NodeFailed { ref node, .. } if node == "branch.to.x"),
        "{err}"
    );
    let s = done(graph.continue_run(&config).await);
    assert_eq!(s.bar, ["a b", "a-b", "branch.to.x", "ü"]);
    assert_eq!(
        (runs.get("a-b"), runs.get("ü")),
        (1, 1),
        "replayed, joined once"
    );
}

#[test]
fn mermaid_ids_are_unique_and_every_line_is_well_formed() {
    let graph = Graph::<Steps>::new("Review: v2")
        .add_node("a b", nop)
        .add_node("node_0", nop)
        .add_node("end", nop)
        .add_node("two\nlines", nop)
        .add_sequence([START, "a b", "node_0", "end", "two\nlines", END])
        .compile(Compile::new())
        .unwrap();
    let drawn = graph.draw_mermaid();
    let body: Vec<&str> = drawn
        .lines()
        .skip_while(|l| *l != "graph TD;")
        .skip(1)
        .collect();
    let ids: Vec<&str> = body
        .iter()
        .filter(|l| !l.contains("->") && l.contains("(\""))
        .filter_map(|l| l.trim_start().split('(').next())
        .filter(|id| !["__start__", "__end__"].contains(id))
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    let title = drawn
        .lines()
        .find_map(|l| l.strip_prefix("title: "))
        .unwrap_or("");
    let mut bad = Bad::default();
    bad.check(unique.len() == 4, format!("node ids collide: {ids:?}"));
    bad.check(
        !ids.contains(&"end"),
        "`end` is a Mermaid keyword, not a usable node id",
    );
    let broken: Vec<&&str> = body.iter().filter(|l| !l.starts_with('\t')).collect();
    bad.check(
        broken.is_empty(),
        format!("a node name breaks its line: {broken:?}"),
    );
    let quoted = title.starts_with('"') || title.starts_with('\'');
    bad.check(
        quoted || !title.contains(": "),
        format!("front matter `title: {title}` is not valid YAML"),
    );
    bad.check(drawn.contains("__start__ --> node_0;"), "START edge");
    bad.verdict();
}

#[test]
fn shared_vec_reads_compares_and_serializes_like_a_vec_after_sharing() {
    let want = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
    for n in [0, 1, 63, 64, 65, 130] {
        let base: SharedVec<String> = want(n).into();
        let (mut x, mut y) = (base.clone(), base.clone());
        // Both clones extend the shared prefix, one after the other.
        x.extend(["x1".to_owned(), "x2".to_owned()]);
        y.push("y1".to_owned());
        let mut z = x.clone();
        z.push("z".to_owned());
        x.push("x3".to_owned());
        assert_eq!(base, want(n), "n={n}");
        let with =
            |extra: &[&str]| [want(n), extra.iter().map(|s| s.to_string()).collect()].concat();
        assert_eq!(x, with(&["x1", "x2", "x3"]), "n={n}");
        assert_eq!(y, with(&["y1"]), "n={n}");
        assert_eq!(z, with(&["x1", "x2", "z"]), "n={n}");
        assert_ne!(x, z);
        let json = serde_json::to_value(&z).unwrap();
        assert_eq!(json, json!(with(&["x1", "x2", "z"])));
        let back: SharedVec<String> = serde_json::from_value(json).unwrap();
        assert_eq!(back, z);
        assert_eq!(Vec::from(z.clone()), z.to_vec());
        assert_eq!(z.iter().next_back(), z.last());
    }
}

fn without_title(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    o.remove("title");
    o.remove("description");
    v
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct PlainLog {
    #[reducer(delta)]
    pub items: Vec<String>,
    pub last: Option<String>,
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct SharedLog {
    #[reducer(delta)]
    pub items: SharedVec<String>,
    pub last: Option<String>,
}

#[test]
fn schemas_of_shared_vec_and_option_channels_match_what_is_serialized() {
    assert_eq!(
        without_title(SharedLog::state_schema()),
        without_title(PlainLog::state_schema())
    );
    assert_eq!(
        without_title(SharedLog::update_schema()),
        without_title(PlainLog::update_schema())
    );
    let update = SharedLog::update_schema();
    let last = update["properties"]["last"].to_string();
    assert!(last.contains("null"), "a written None is `null`: {last}");
    let json = serde_json::to_value(SharedLogUpdate::default().last(None::<String>)).unwrap();
    assert_eq!(json, json!({"last": null}));
}

/// tick → fan_a, fan_b, fan_c (in parallel, finishing in reverse) → tick ...
/// for `rounds` rounds; each fan appends `<name><round>` to both lists.
fn looping(rounds: u32) -> CompiledGraph<Log> {
    let mut graph = Graph::<Log>::new("Loop")
        .add_node("tick", |_: &Log| LogUpdate::default().round(1u32))
        .add_edge(START, "tick")
        .add_conditional_edges(
            "tick",
            move |s: &Log| {
                if s.round <= rounds {
                    vec!["fan_c", "fan_a", "fan_b"]
                } else {
                    vec![END]
                }
            },
            ["fan_a", "fan_b", "fan_c", END],
        );
    for (i, name) in ["fan_a", "fan_b", "fan_c"].into_iter().enumerate() {
        graph = graph
            .add_node(name, move |s: &Log| {
                let item = format!("{name}{}", s.round);
                async move {
                    tokio::time::sleep(Duration::from_millis(6 - 2 * i as u64)).await;
                    LogUpdate::default()
                        .items(vec![item.clone()])
                        .seen(vec![item])
                }
            })
            .add_edge(name, "tick");
    }
    graph
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

fn expected(rounds: u32) -> Vec<String> {
    (1..=rounds)
        .flat_map(|r| ["fan_a", "fan_b", "fan_c"].map(|n| format!("{n}{r}")))
        .collect()
}

#[tokio::test]
async fn parallel_writers_merge_in_name_order_and_history_rebuilds_delta_channels() {
    const R: u32 = 18; // 37 steps: past the delta snapshot interval (32)
    let graph = looping(R);
    let config = RunConfig::thread("loop").recursion_limit(100);
    let fin = done(graph.invoke(Log::default(), &config).await);
    assert_eq!(fin.seen, expected(R), "task order is node-name order");
    assert_eq!(fin.items, expected(R));
    let check = |snaps: &[StateSnapshot<Log>], label: &str| {
        for s in snaps {
            let v = &s.values;
            assert_eq!(v.items, v.seen, "{label}: step {:?}", s.step());
            let want = expected(R + 1);
            if !v.seen.iter().any(|i| i == "manual") {
                assert_eq!(
                    v.seen[..],
                    want[..v.seen.len()],
                    "{label}: step {:?}",
                    s.step()
                );
            }
        }
    };
    let history = all(&graph, &config).await;
    assert!(history.len() > 36, "{}", history.len());
    check(&history, "history");
    // Replay from an old checkpoint, and fork another with an update: both
    // branches extend values shared with the original line.
    let old = history
        .iter()
        .find(|s| s.values.round == 6 && s.next.len() == 3)
        .unwrap();
    let replayed = done(
        graph
            .continue_run(&old.config.clone().recursion_limit(100))
            .await,
    );
    assert_eq!(replayed.items, expected(R));
    let older = history
        .iter()
        .find(|s| s.values.round == 3 && s.next == ["tick"])
        .unwrap();
    let manual = LogUpdate::default()
        .items(vec!["manual".to_owned()])
        .seen(vec!["manual".to_owned()]);
    let fork = graph
        .update_state(&older.config, manual, Some("fan_c"))
        .await
        .unwrap();
    let forked = done(graph.continue_run(&fork.recursion_limit(100)).await);
    assert_eq!(forked.items, forked.seen);
    assert_eq!(forked.items.len(), expected(R).len() + 1);
    check(&all(&graph, &config).await, "after forks");
    assert_eq!(graph.get_state(&config).await.unwrap().values, forked);
}

#[tokio::test]
async fn reading_a_failed_step_with_pending_writes_never_panics() {
    let graph = Graph::<Log>::new("Pending")
        .add_node("a", |_: &Log| {
            LogUpdate::default().checked(vec!["bad".to_owned()])
        })
        .add_node("b", |_: &Log| -> Result<LogUpdate, NodeError> {
            Err(NodeError::msg("down"))
        })
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge("a", END)
        .add_edge("b", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("p");
    let err = graph.invoke(Log::default(), &config).await.unwrap_err();
    assert!(
        matches!(err, Error::NodeFailed { ref node, .. } if node == "b"),
        "{err}"
    );
    let mut bad = Bad::default();
    let read = AssertUnwindSafe(graph.get_state(&config))
        .catch_unwind()
        .await;
    bad.check(
        read.is_ok(),
        "get_state panicked (a succeeded task's write went through a panicking reducer)",
    );
    let list =
        AssertUnwindSafe(graph.get_state_history(&config, History::default())).catch_unwind();
    bad.check(list.await.is_ok(), "get_state_history panicked");
    bad.verdict();
}

#[tokio::test]
async fn an_overflowing_add_is_a_typed_error() {
    let mut bad = Bad::default();
    let mut s = Log::default();
    let two = vec![
        LogUpdate::default().small(200u8),
        LogUpdate::default().small(100u8),
    ];
    match std::panic::catch_unwind(AssertUnwindSafe(|| s.apply(two))) {
        Err(_) => bad.check(false, "GraphState::apply panicked on u8 overflow"),
        Ok(r) => bad.check(
            matches!(r, Err(Error::InvalidUpdate { ref channel, .. }) if channel == "small"),
            format!("apply: {r:?} {s:?}"),
        ),
    }
    bad.verdict();
}

#[tokio::test]
async fn a_written_none_survives_pending_write_replay() {
    let fail = once();
    let b = {
        move |_: &Log| -> Result<LogUpdate, NodeError> {
            if fail() {
                return Err(NodeError::msg("down once"));
            }
            Ok(LogUpdate::default().round(1u32))
        }
    };
    let graph = Graph::<Log>::new("Clear")
        .add_node("a", |_: &Log| LogUpdate::default().last(None::<String>))
        .add_node("b", b)
        .add_sequence([START, "a", END])
        .add_sequence([START, "b", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("n");
    let input = Log {
        last: Some("x".into()),
        ..Log::default()
    };
    assert!(graph.invoke(input, &config).await.is_err());
    let pending = graph.get_state(&config).await.unwrap();
    assert_eq!(pending.values.last, None, "a's pending None is applied");
    let s = done(graph.continue_run(&config).await);
    assert_eq!((s.last, s.round), (None, 1));
}

#[tokio::test]
async fn commands_and_routers_edge_cases() {
    let runs = Runs::default();
    let hit = |name: &'static str| {
        let runs = runs.clone();
        move |_: &Steps| {
            runs.hit(name);
            StepsUpdate::default().bar([name])
        }
    };
    let graph = Graph::<Steps>::new("Goto")
        .add_node("a", |_: &Steps| {
            Command::update(StepsUpdate::default().foo("a").bar(["a"]))
                .goto("c")
                .goto("c")
                .goto(END)
        })
        .add_node("b", hit("b"))
        .add_node("c", hit("c"))
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_destinations("a", ["c", END])
        .add_edge("b", END)
        .add_conditional_edges("c", |_: &Steps| None::<&str>, [END])
        .compile(Compile::new())
        .unwrap();
    let s = graph
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(
        (s.foo.as_str(), s.bar),
        ("a", vec!["a".to_owned(), "b".into(), "c".into()])
    );
    assert_eq!(runs.get("c"), 1, "goto twice runs once");
}

#[tokio::test]
async fn stored_counters_at_their_maximum_are_errors_in_memory() {
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(InMemorySaver::new());
    weaver_tests::counters::stored_counters_at_their_maximum_are_errors(saver).await;
}

/// A type with no serde of its own, stored through a module's functions.
#[derive(Clone, Debug, Default, PartialEq)]
struct Opaque(u64);

mod opaque_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &super::Opaque, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("#{}", v.0))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Opaque, D::Error> {
        let text = String::deserialize(d)?;
        let n = text.strip_prefix('#').and_then(|n| n.parse().ok());
        n.map(super::Opaque)
            .ok_or_else(|| serde::de::Error::custom("not #<number>"))
    }
}

fn hex_text<S: serde::Serializer>(v: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:x}"))
}

fn hex_parse<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    u32::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Coded {
    #[serde(with = "opaque_text")]
    #[schemars(with = "String")]
    id: Opaque,
    #[serde(serialize_with = "hex_text", deserialize_with = "hex_parse")]
    #[schemars(with = "String")]
    shown: u32,
    plain: u32,
}

/// A field stored through `#[serde(with)]` or `serialize_with` is written in
/// that form by the update too, so a pending write has the checkpoint
/// value's form, and a type with no serde of its own compiles. (The update
/// used the type's own serde: `Opaque` did not compile, and `shown` was
/// written as a number where the checkpoint held text.) The update's
/// schema is the one `#[schemars(with)]` gives the state's field.
#[tokio::test]
async fn updates_store_a_field_as_its_serde_attributes_say() {
    let update = CodedUpdate::default()
        .id(Opaque(7))
        .shown(255u32)
        .plain(1u32);
    let form = serde_json::to_value(&update).unwrap();
    assert_eq!(form, json!({"id": "#7", "shown": "ff", "plain": 1}));
    let state = serde_json::to_value(Coded {
        id: Opaque(7),
        shown: 255,
        plain: 1,
    })
    .unwrap();
    assert_eq!(form["id"], state["id"]);
    assert_eq!(form["shown"], state["shown"]);
    let back: CodedUpdate = serde_json::from_value(json!({"id": "#9", "shown": "a"})).unwrap();
    assert_eq!(
        (back.id, back.shown, back.plain),
        (Some(Opaque(9)), Some(10), None)
    );
    // A node's write is stored in that form, and read back.
    let saver = Arc::new(InMemorySaver::new());
    let graph = Graph::<Coded>::new("coded")
        .add_node("set", |_: &Coded| CodedUpdate::default().id(Opaque(5)))
        .add_sequence([START, "set", END])
        .compile(
            Compile::new()
                .checkpointer_arc(saver.clone())
                .interrupt_after(["set"]),
        )
        .unwrap();
    let config = RunConfig::thread("t");
    graph.invoke(Coded::default(), &config).await.unwrap();
    let snapshot = graph.get_state(&config).await.unwrap();
    assert_eq!(snapshot.values.id, Opaque(5));
    let done = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.id, Opaque(5));
    let schema = serde_json::to_value(schemars::schema_for!(CodedUpdate)).unwrap();
    assert_eq!(schema["properties"]["id"]["type"], "string", "{schema}");
}
