//! `#[derive(GraphState)]` and `graph!` at run time: reducers, the update
//! type, schemas, Mermaid, and macro graphs against builder graphs.

use std::collections::BTreeMap;

use weaver::checkpoint::ListFilter;
use weaver::prelude::*;

/// BeamWeaver's two-step example state.
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct State {
    /// Last value wins.
    foo: String,
    /// Accumulates across nodes.
    #[reducer(append)]
    bar: Vec<String>,
}

async fn node_a(_: &State) -> StateUpdate {
    StateUpdate::default().foo("a").bar(vec!["a".into()])
}

fn node_b(_: &State) -> StateUpdate {
    StateUpdate::default().foo("b").bar(vec!["b".into()])
}

mod derive {
    use super::*;

    /// A state declared by a `macro_rules!` macro, its field types passed
    /// in as `$t:ty` (so their tokens come from the caller's context).
    macro_rules! state_of {
        ($name:ident, $list:ty, $count:ty, $map:ty) => {
            #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
            pub(crate) struct $name {
                #[reducer(append)]
                pub log: $list,
                #[reducer(add)]
                pub n: $count,
                #[reducer(merge)]
                pub seen: $map,
            }
        };
    }

    // The derive's channel enum goes unused here.
    #[allow(dead_code)]
    mod declared {
        use super::*;
        state_of!(
            Declared,
            Vec<String>,
            u64,
            std::collections::BTreeMap<String, u32>
        );
    }
    use declared::{Declared, DeclaredUpdate};

    #[tokio::test]
    async fn a_state_declared_by_a_declarative_macro_derives() {
        let graph = Graph::<Declared>::new("declared")
            .add_node("a", |_: &Declared| {
                DeclaredUpdate::default()
                    .log(vec!["a".to_owned()])
                    .n(2u64)
                    .seen([("a".to_owned(), 1)])
            })
            .add_sequence([START, "a", END])
            .compile(Compile::new())
            .unwrap();
        let done = graph
            .invoke(Declared::default(), &RunConfig::default())
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(done.log, ["a"]);
        assert_eq!(done.n, 2);
        assert_eq!(done.seen.get("a"), Some(&1));
    }

    /// A state declared by a macro whose field types name `$crate` paths,
    /// as a library's exported macro does. (The update's schema named the
    /// type by its text, `$crate :: …`, which no path parses as.)
    #[allow(dead_code)]
    pub(crate) mod crate_paths {
        use super::*;

        pub type Count = u64;

        macro_rules! counted {
            () => {
                #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
                pub(crate) struct Counted {
                    #[reducer(add)]
                    pub n: $crate::derive::crate_paths::Count,
                }
            };
        }
        counted!();
    }

    #[test]
    fn a_state_whose_field_types_name_crate_paths_derives() {
        use weaver::state::StateSchema;
        let update = crate_paths::Counted::update_schema();
        assert_eq!(update["properties"]["n"]["type"], "integer", "{update}");
        let mut c = crate_paths::Counted::default();
        c.apply(vec![crate_paths::CountedUpdate::default().n(3u64)])
            .unwrap();
        assert_eq!(c.n, 3);
    }

    /// The same state without a reducer on `bar`.
    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    struct Plain {
        foo: String,
        bar: Vec<String>,
    }

    #[tokio::test]
    async fn checkpoint_example_runs_through_the_derive() {
        let saver = InMemorySaver::new();
        let graph = graph! {
            name: "CheckpointExample",
            state: State,
            nodes: [node_a, node_b],
            edges: [START -> node_a -> node_b -> END],
        }
        .compile(Compile::new().checkpointer(saver.clone()))
        .unwrap();
        let config = RunConfig::thread("thread-1");
        let state = graph
            .invoke(State::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.foo, "b");
        assert_eq!(state.bar, ["a", "b"]);
        let history = saver.list(&ListFilter::thread("thread-1")).await.unwrap();
        assert_eq!(history.len(), 4);
    }

    /// Every reducer, on one state.
    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub(crate) struct Everything {
        /// Last value: one write per step.
        pub topic: String,
        /// Optional last value; a written `None` clears it.
        pub note: Option<String>,
        /// Explicit last value: several writes per step, the last wins.
        #[reducer(replace)]
        pub status: String,
        /// Appended.
        #[reducer(append)]
        pub log: Vec<String>,
        /// Summed.
        #[reducer(add)]
        pub count: i64,
        /// Merged by key.
        #[reducer(merge)]
        pub scores: BTreeMap<String, i64>,
        /// Keeps the larger value.
        #[reducer(self::max)]
        pub peak: u64,
    }

    fn max(current: &mut u64, update: u64) {
        *current = (*current).max(update);
    }

    #[test]
    fn every_reducer_folds_a_step_in_order() {
        let mut s = Everything::default();
        s.apply(vec![
            EverythingUpdate::default()
                .topic("t")
                .status("first")
                .log(vec!["a".to_owned()])
                .count(2)
                .scores(BTreeMap::from([("x".to_owned(), 1), ("y".to_owned(), 2)]))
                .peak(7u64),
            EverythingUpdate::default()
                .note(Some("n".to_owned()))
                .status("second")
                .log(vec!["b".to_owned(), "c".to_owned()])
                .count(3)
                .scores(BTreeMap::from([("y".to_owned(), 5)]))
                .peak(3u64),
        ])
        .unwrap();
        assert_eq!(
            s,
            Everything {
                topic: "t".into(),
                note: Some("n".into()),
                status: "second".into(),
                log: vec!["a".into(), "b".into(), "c".into()],
                count: 5,
                scores: BTreeMap::from([("x".to_owned(), 1), ("y".to_owned(), 5)]),
                peak: 7,
            }
        );
        // A later step may clear the optional last value.
        s.apply(vec![EverythingUpdate::default().note(None)])
            .unwrap();
        assert_eq!(s.note, None);
    }

    #[test]
    fn two_writes_to_a_last_value_channel_in_one_step_are_an_error() {
        let mut s = Everything::default();
        let err = s
            .apply(vec![
                EverythingUpdate::default().topic("a"),
                EverythingUpdate::default().topic("b"),
            ])
            .unwrap_err();
        assert!(matches!(err, Error::InvalidUpdate { ref channel, .. } if channel == "topic"));
    }

    #[test]
    fn channels_are_declared_in_order_with_their_kinds() {
        use weaver::channel::ChannelKind::*;
        let kinds: Vec<_> = Everything::CHANNELS
            .iter()
            .map(|c| (c.name, c.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("topic", LastValue),
                ("note", LastValue),
                ("status", Replace),
                ("log", Append),
                ("count", Add),
                ("scores", Merge),
                ("peak", Custom),
            ]
        );
        let names: Vec<_> = EverythingChannel::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(
            names,
            ["topic", "note", "status", "log", "count", "scores", "peak"]
        );
        assert_eq!(EverythingChannel::Scores.to_string(), "scores");
        assert_eq!(EverythingChannel::Log.kind(), Append);
    }

    #[test]
    fn the_update_serializes_only_what_it_writes() {
        let u = EverythingUpdate::default().count(1).note(None);
        let json = serde_json::to_value(&u).unwrap();
        assert_eq!(json, serde_json::json!({"note": null, "count": 1}));
        let back: EverythingUpdate = serde_json::from_value(json).unwrap();
        assert_eq!(back.note, Some(None));
        assert_eq!(back.count, Some(1));
        assert_eq!(back.topic, None);
        let full = EverythingUpdate::from(Everything::default());
        assert_eq!(full.log, Some(vec![]));
    }

    #[tokio::test]
    async fn without_append_the_last_value_wins() {
        let graph = graph! {
            state: Plain,
            nodes: [
                a = |_: &Plain| PlainUpdate::default().foo("a").bar(vec!["a".to_owned()]),
                b = |_: &Plain| PlainUpdate::default().foo("b").bar(vec!["b".to_owned()]),
            ],
            edges: [START -> a -> b -> END],
        }
        .compile(Compile::new())
        .unwrap();
        let state = graph
            .invoke(Plain::default(), &RunConfig::default())
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.foo, "b");
        assert_eq!(state.bar, ["b"]);
    }

    /// Field names that go on, after a leading `_`, with a character that
    /// cannot start an identifier (an Arabic-Indic digit), beside non-ASCII
    /// letters. The derive panicked on `_٣` ("`٣_` is not a valid Ident").
    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    struct Digits {
        _٣: u8,
        über_größe: String,
    }

    #[test]
    fn a_field_going_on_with_a_non_ascii_digit_derives() {
        assert_eq!(DigitsChannel::C٣.name(), "_٣");
        assert_eq!(DigitsChannel::ÜberGröße.name(), "über_größe");
        let mut state = Digits::default();
        state
            .apply(vec![DigitsUpdate::default()._٣(3u8).über_größe("xl")])
            .unwrap();
        assert_eq!(state._٣, 3);
        assert_eq!(state.über_größe, "xl");
    }

    /// Fields whose UpperCamelCase name would be the keyword `Self`, beside
    /// `crate_` and `super_`, whose `Crate` and `Super` are no keywords.
    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    struct Keywords {
        self_: String,
        #[reducer(append)]
        crate_: Vec<String>,
        #[reducer(add)]
        super_: u64,
    }

    #[tokio::test]
    async fn a_field_named_self_derives_runs_and_round_trips() {
        assert_eq!(KeywordsChannel::Self_.name(), "self_");
        assert_eq!(KeywordsChannel::Crate.name(), "crate_");
        assert_eq!(KeywordsChannel::Super.name(), "super_");
        assert_eq!(
            KeywordsChannel::ALL,
            [
                KeywordsChannel::Self_,
                KeywordsChannel::Crate,
                KeywordsChannel::Super
            ]
        );
        assert_eq!(
            KeywordsChannel::Self_.kind(),
            weaver::channel::ChannelKind::LastValue
        );

        let saver = InMemorySaver::new();
        let graph = Graph::<Keywords>::new("Keywords")
            .add_node("me", |s: &Keywords| {
                KeywordsUpdate::default()
                    .self_(format!("{}!", s.self_))
                    .crate_(vec!["me".to_owned()])
                    .super_(1u64)
            })
            .add_sequence([START, "me", END])
            .compile(Compile::new().checkpointer(saver))
            .unwrap();
        let config = RunConfig::thread("k");
        let input = Keywords {
            self_: "hi".into(),
            ..Keywords::default()
        };
        let end = graph
            .invoke(input, &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        let want = Keywords {
            self_: "hi!".into(),
            crate_: vec!["me".into()],
            super_: 1,
        };
        assert_eq!(end, want);
        // Stored and read back through the checkpoint.
        assert_eq!(graph.get_state(&config).await.unwrap().values, want);
        // The state and its update round-trip through JSON under the field names.
        let json = serde_json::to_value(&want).unwrap();
        assert_eq!(json["self_"], "hi!");
        assert_eq!(serde_json::from_value::<Keywords>(json).unwrap(), want);
        let update = KeywordsUpdate::default().self_("x");
        let json = serde_json::to_value(&update).unwrap();
        assert_eq!(json, serde_json::json!({ "self_": "x" }));
        let back = serde_json::from_value::<KeywordsUpdate>(json).unwrap();
        assert_eq!(back.self_.as_deref(), Some("x"));
    }

    /// Fields named after the methods an update is used through.
    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    struct Methods {
        default: String,
        from: String,
        #[reducer(add)]
        clone: u64,
        #[reducer(append)]
        into: Vec<String>,
        try_from: u8,
        try_into: u8,
        to_owned: bool,
    }

    #[test]
    fn fields_named_default_from_clone_into_keep_the_updates_own_methods() {
        // `default()`, `from(state)`, `clone()` and `into()` are still the
        // traits' methods; the setters of these fields end in `_`.
        let update = MethodsUpdate::default()
            .default_("d")
            .from_("f")
            .clone_(2u64)
            .into_(vec!["i".to_owned()]);
        let copy = update.clone();
        let input: weaver::Input<Methods> = copy.into();
        assert!(matches!(input, weaver::Input::Update(_)));
        let owned = update
            .to_owned()
            .try_from_(1u8)
            .try_into_(2u8)
            .to_owned_(true);
        // The trait's `try_into`, which the setter no longer hides.
        #[allow(clippy::unnecessary_fallible_conversions)]
        let again: weaver::Input<Methods> = owned.clone().try_into().unwrap();
        assert!(matches!(again, weaver::Input::Update(_)));
        assert_eq!(
            (owned.try_from, owned.try_into, owned.to_owned),
            (Some(1), Some(2), Some(true))
        );
        let whole = MethodsUpdate::from(Methods {
            clone: 5,
            ..Methods::default()
        });
        assert_eq!(whole.clone, Some(5));
        let mut state = Methods::default();
        state.apply(vec![update.clone()]).unwrap();
        state.apply(vec![update]).unwrap();
        assert_eq!(
            state,
            Methods {
                default: "d".into(),
                from: "f".into(),
                clone: 4,
                into: vec!["i".into(), "i".into()],
                ..Methods::default()
            }
        );
        // Stored under the field names.
        let json = serde_json::to_value(MethodsUpdate::default().default_("x")).unwrap();
        assert_eq!(json, serde_json::json!({ "default": "x" }));
    }

    /// A recursive state whose field types name it as `Self`. The update
    /// copied the types as written, where `Self` is the update: its field
    /// was `Option<Vec<TreeUpdate>>`, and the derive did not compile.
    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    struct Tree {
        label: String,
        #[reducer(append)]
        kids: Vec<Self>,
        parent: Option<Box<Self>>,
    }

    #[test]
    fn a_field_type_naming_self_is_the_state() {
        let leaf = Tree {
            label: "leaf".into(),
            ..Tree::default()
        };
        let update = TreeUpdate::default()
            .kids(vec![leaf.clone()])
            .parent(Some(Box::new(leaf.clone())));
        let mut tree = Tree::default();
        tree.apply(vec![update.clone()]).unwrap();
        tree.apply(vec![TreeUpdate::default().kids(vec![leaf.clone()])])
            .unwrap();
        assert_eq!(tree.kids, [leaf.clone(), leaf.clone()]);
        assert_eq!(tree.parent.as_deref(), Some(&leaf));
        let json = serde_json::to_value(&update).unwrap();
        let back: TreeUpdate = serde_json::from_value(json).unwrap();
        assert_eq!(back.kids, Some(vec![leaf]));
        let schema = Tree::update_schema();
        assert_eq!(
            schema["properties"]["kids"]["items"]["$ref"],
            "#/$defs/Tree"
        );
    }
}

/// A field named as its channel must be stored (`userID`: the derive refuses
/// `#[serde(rename)]`), with the lint allowed on the state. The update's
/// field and setter repeated the name without the `allow`: `non_snake_case`
/// warnings the user could not silence on the state, here denied.
#[deny(non_snake_case)]
mod stored_names {
    use super::*;

    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    #[allow(non_snake_case)]
    pub struct Account {
        pub userID: String,
    }

    #[test]
    fn a_field_allowed_a_non_snake_case_name_derives_without_warnings() {
        let update = AccountUpdate::default().userID("u1");
        let json = serde_json::to_value(&update).unwrap();
        assert_eq!(json, serde_json::json!({ "userID": "u1" }));
        let mut account = Account::default();
        account.apply(vec![update]).unwrap();
        assert_eq!(account.userID, "u1");
        assert_eq!(AccountChannel::UserID.name(), "userID");
    }
}

/// A `graph!` graph and the equivalent builder graph behave identically.
mod equivalence {
    use super::*;
    use serde_json::{Map, Value};

    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub(crate) struct Flow {
        /// Which branch the router takes.
        pub route: String,
        /// Every node that ran, in step order.
        #[reducer(append)]
        pub log: Vec<String>,
        /// Node runs.
        #[reducer(add)]
        pub hops: i64,
    }

    fn visit(name: &str) -> FlowUpdate {
        FlowUpdate::default().log(vec![name.to_owned()]).hops(1)
    }
    fn a(_: &Flow) -> FlowUpdate {
        visit("a")
    }
    async fn b(_: &Flow) -> FlowUpdate {
        visit("b")
    }
    fn c(_: &Flow, _: &Runtime) -> FlowUpdate {
        visit("c")
    }
    fn d(_: &Flow) -> FlowUpdate {
        visit("d")
    }
    pub(crate) fn route(s: &Flow) -> String {
        s.route.clone()
    }

    type Row = (
        u64,
        String,
        i64,
        Map<String, Value>,
        BTreeMap<String, u64>,
        BTreeMap<String, BTreeMap<String, u64>>,
    );

    /// Runs `graph` on a fresh saver; the final state and the thread's
    /// history without ids and timestamps.
    async fn run(graph: Graph<Flow>, input: Flow) -> (Flow, Vec<Row>, String) {
        let saver = InMemorySaver::new();
        let graph = graph
            .compile(Compile::new().checkpointer(saver.clone()))
            .unwrap();
        let config = RunConfig::thread("t");
        let state = graph
            .invoke(input, &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        let history = saver
            .list(&ListFilter::thread("t"))
            .await
            .unwrap()
            .into_iter()
            .map(|t| {
                (
                    t.commit_order,
                    format!("{:?}", t.metadata.source),
                    t.metadata.step,
                    t.checkpoint.channel_values,
                    t.checkpoint.channel_versions,
                    t.checkpoint.versions_seen,
                )
            })
            .collect();
        (state, history, graph.draw_mermaid())
    }

    async fn same(macro_graph: Graph<Flow>, builder_graph: Graph<Flow>, input: Flow) -> Flow {
        let (s1, h1, m1) = run(macro_graph, input.clone()).await;
        let (s2, h2, m2) = run(builder_graph, input).await;
        assert_eq!(s1, s2);
        assert_eq!(h1, h2);
        assert_eq!(m1, m2);
        assert!(h1.len() >= 3, "the run was checkpointed");
        s1
    }

    #[tokio::test]
    async fn linear() {
        let state = same(
            graph! { state: Flow, nodes: [a, b, c], edges: [START -> a -> b -> c -> END] },
            Graph::new("Flow")
                .add_node("a", a)
                .add_node("b", b)
                .add_node("c", c)
                .add_sequence([START, "a", "b", "c", END]),
            Flow::default(),
        )
        .await;
        assert_eq!(state.log, ["a", "b", "c"]);
    }

    pub(crate) fn fan_graph() -> Graph<Flow> {
        graph! {
            name: "Fan",
            state: Flow,
            nodes: [a, b, c, d],
            edges: [START -> a -> [b, c], [b, c] -> d -> END],
        }
    }

    #[tokio::test]
    async fn fan_out_fan_in() {
        let state = same(
            fan_graph(),
            Graph::new("Fan")
                .add_node("a", a)
                .add_node("b", b)
                .add_node("c", c)
                .add_node("d", d)
                .add_edge(START, "a")
                .add_edge("a", "b")
                .add_edge("a", "c")
                .add_edge("b", "d")
                .add_edge("c", "d")
                .add_edge("d", END),
            Flow::default(),
        )
        .await;
        assert_eq!(state.log, ["a", "b", "c", "d"]);
        assert_eq!(state.hops, 4);
    }

    pub(crate) fn conditional_graph() -> Graph<Flow> {
        graph! {
            name: "Router",
            state: Flow,
            nodes: [a, b, c, finish = d],
            edges: [START -> a, [b, c] -> finish -> END],
            conditional: [a => route ? [b, c, END]],
        }
    }

    #[tokio::test]
    async fn conditional() {
        for (choice, log) in [
            ("b", vec!["a", "b", "d"]),
            ("c", vec!["a", "c", "d"]),
            (END, vec!["a"]),
        ] {
            let input = Flow {
                route: choice.to_owned(),
                ..Flow::default()
            };
            let state = same(
                conditional_graph(),
                Graph::new("Router")
                    .add_node("a", a)
                    .add_node("b", b)
                    .add_node("c", c)
                    .add_node("finish", d)
                    .add_edge(START, "a")
                    .add_conditional_edges("a", route, ["b", "c", END])
                    .add_edge("b", "finish")
                    .add_edge("c", "finish")
                    .add_edge("finish", END),
                input,
            )
            .await;
            assert_eq!(state.log, log);
        }
    }

    /// Goes to `c` through its `Command`; no edge leads there.
    fn jump(_: &Flow) -> Command<FlowUpdate> {
        Command::update(visit("jump")).goto("c")
    }

    #[tokio::test]
    async fn goto_declares_command_destinations() {
        // `c` is reachable only through the `goto:` declaration: without it
        // the macro would reject `c` as unreachable from START.
        let state = same(
            graph! {
                name: "Goto",
                state: Flow,
                nodes: [jump, c],
                edges: [START -> jump, c -> END],
                goto: [jump -> [c]],
            },
            Graph::new("Goto")
                .add_node("jump", jump)
                .add_node("c", c)
                .add_edge(START, "jump")
                .add_edge("c", END)
                .add_destinations("jump", ["c"]),
            Flow::default(),
        )
        .await;
        assert_eq!(state.log, ["jump", "c"]);
        assert_eq!(state.hops, 2);
    }

    #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub(crate) struct Docs {
        pub docs: Vec<String>,
        #[reducer(append)]
        pub summaries: Vec<String>,
    }

    #[tokio::test]
    async fn send_nodes_and_routers_may_be_move_closures_over_values_used_after() {
        // Each expression is evaluated once: a `move` closure's captures are
        // not moved into the payload check and then used again.
        let prefix = std::sync::Arc::new(String::from("summary of "));
        let to = String::from("summarize");
        let graph = graph! {
            state: Docs,
            nodes: [summarize = {
                let prefix = prefix.clone();
                move |d: &String| DocsUpdate::default().summaries(vec![format!("{prefix}{d}")])
            }],
            edges: [summarize -> END],
            send: [START => move |s: &Docs| {
                s.docs.iter().map(|d| weaver::Send::new(to.as_str(), d.clone())).collect::<Vec<_>>()
            } ? [summarize]],
        }
        .compile(Compile::new())
        .unwrap();
        let input = Docs {
            docs: vec!["a".into(), "b".into()],
            ..Docs::default()
        };
        let done = graph
            .invoke(input, &RunConfig::default())
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(done.summaries, ["summary of a", "summary of b"]);
        // Still ours after the graph took its copy.
        assert_eq!(prefix.len(), 11);
    }

    #[tokio::test]
    async fn interrupts_declared_in_the_macro_pause_the_run() {
        let graph = graph! {
            state: Flow,
            nodes: [a, b],
            edges: [START -> a -> b -> END],
            interrupt_before: [b],
        }
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
        let config = RunConfig::thread("t");
        let outcome = graph.invoke(Flow::default(), &config).await.unwrap();
        assert!(
            matches!(outcome, Outcome::Interrupted(_)),
            "expected an interrupt before `b`, got {outcome:?}"
        );
    }
}

/// JSON Schemas of the example states, as snapshots, with samples that must
/// validate and bad samples that must not.
mod schema {
    use super::derive::Everything;
    use super::equivalence::Flow;
    use super::*;
    use serde_json::{Value, json};
    use weaver::state::StateSchema;

    #[test]
    fn checkpoint_example_schema() {
        weaver::assert_schema_snapshot!(State);
    }

    #[test]
    fn every_reducer_schema() {
        weaver::assert_schema_snapshot!(Everything);
    }

    #[test]
    fn flow_schema() {
        weaver::assert_schema_snapshot!("flow_schema", Flow);
    }

    #[test]
    fn docs_become_descriptions() {
        let s = State::state_schema();
        assert_eq!(
            s["properties"]["bar"]["description"],
            "Accumulates across nodes."
        );
        let u = State::update_schema();
        assert_eq!(
            u["properties"]["bar"]["description"],
            "Accumulates across nodes."
        );
    }

    /// A minimal JSON Schema check covering what these schemas use: `type`
    /// (one or a list), `properties`, `required`, `items`,
    /// `additionalProperties` and local `$ref`s. (The `jsonschema` crate
    /// would pull a large dependency tree into CI for this.)
    fn valid(schema: &Value, root: &Value, v: &Value) -> bool {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let target = r
                .trim_start_matches("#/")
                .split('/')
                .fold(root, |node, key| &node[key]);
            return valid(target, root, v);
        }
        if let Some(t) = schema.get("type") {
            let types: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            let fits = types.iter().any(|t| match *t {
                "null" => v.is_null(),
                "boolean" => v.is_boolean(),
                "string" => v.is_string(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "array" => v.is_array(),
                "object" => v.is_object(),
                _ => false,
            });
            if !fits {
                return false;
            }
        }
        if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64())
            && n < min
        {
            return false;
        }
        if let Some(obj) = v.as_object() {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array)
                && required
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|k| !obj.contains_key(k))
            {
                return false;
            }
            for (k, val) in obj {
                let fits = match props.and_then(|p| p.get(k)) {
                    Some(p) => valid(p, root, val),
                    None => match schema.get("additionalProperties") {
                        Some(Value::Bool(false)) => false,
                        Some(extra @ Value::Object(_)) => valid(extra, root, val),
                        _ => true,
                    },
                };
                if !fits {
                    return false;
                }
            }
        }
        if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array())
            && !arr.iter().all(|x| valid(items, root, x))
        {
            return false;
        }
        true
    }

    fn check<S: StateSchema>(
        good: &[Value],
        bad: &[Value],
        update_good: &[Value],
        update_bad: &[Value],
    ) {
        let state = S::state_schema();
        let update = S::update_schema();
        for v in good {
            assert!(
                valid(&state, &state, v),
                "state sample should validate: {v}"
            );
            serde_json::from_value::<S>(v.clone()).expect("and deserialize");
        }
        for v in bad {
            assert!(
                !valid(&state, &state, v),
                "bad state sample should not validate: {v}"
            );
            assert!(
                serde_json::from_value::<S>(v.clone()).is_err(),
                "nor deserialize: {v}"
            );
        }
        for v in update_good {
            assert!(
                valid(&update, &update, v),
                "update sample should validate: {v}"
            );
            serde_json::from_value::<S::Update>(v.clone()).expect("and deserialize");
        }
        for v in update_bad {
            assert!(
                !valid(&update, &update, v),
                "bad update sample should not validate: {v}"
            );
            assert!(
                serde_json::from_value::<S::Update>(v.clone()).is_err(),
                "nor deserialize: {v}"
            );
        }
    }

    #[test]
    fn samples_validate_and_bad_samples_do_not() {
        check::<State>(
            &[
                json!({"foo": "b", "bar": ["a", "b"]}),
                json!({"foo": "", "bar": []}),
            ],
            &[
                json!({"foo": 1, "bar": []}),
                json!({"foo": "x"}),
                json!({"foo": "x", "bar": [1]}),
            ],
            &[
                json!({}),
                json!({"bar": ["x"]}),
                json!({"foo": "a", "bar": []}),
            ],
            &[json!({"foo": null}), json!({"bar": "x"})],
        );
        check::<Everything>(
            &[json!({
                "topic": "t", "note": null, "status": "s", "log": ["a"], "count": -3,
                "scores": {"x": 1}, "peak": 9
            })],
            &[
                json!({
                    "topic": "t", "note": null, "status": "s", "log": ["a"], "count": 1.5,
                    "scores": {}, "peak": 1
                }),
                json!({
                    "topic": "t", "note": null, "status": "s", "log": ["a"], "count": 1,
                    "scores": {"x": "high"}, "peak": 1
                }),
            ],
            &[
                json!({"note": null}),
                json!({"scores": {"a": 2}, "peak": 3}),
            ],
            &[
                json!({"peak": -1}),
                json!({"log": [1]}),
                json!({"count": "1"}),
            ],
        );
    }
}

/// Mermaid renderings of compiled graphs.
mod mermaid {
    use super::equivalence::{Flow, FlowUpdate, conditional_graph, fan_graph};
    use super::*;

    #[test]
    fn fan_out_fan_in() {
        let graph = fan_graph().compile(Compile::new()).unwrap();
        insta::assert_snapshot!(graph.draw_mermaid());
    }

    #[test]
    fn conditional() {
        let graph = conditional_graph().compile(Compile::new()).unwrap();
        let drawn = graph.draw_mermaid();
        assert_eq!(drawn, graph.draw_mermaid(), "deterministic");
        insta::assert_snapshot!(drawn);
    }

    /// A supervisor whose `team` node is a subgraph whose `research` node
    /// is a subgraph in turn (the conditional graph, inside a fan).
    fn nested() -> CompiledGraph<Flow> {
        let research = conditional_graph().compile(Compile::new()).unwrap();
        let team = fan_graph()
            .add_subgraph("research", research)
            .add_edge("research", END)
            .add_edge(START, "research")
            .compile(Compile::new())
            .unwrap();
        Graph::<Flow>::new("supervisor")
            .add_node("plan", |_: &Flow| FlowUpdate::default())
            .add_subgraph("team", team)
            .add_sequence([START, "plan", "team", END])
            .compile(Compile::new())
            .unwrap()
    }

    #[test]
    fn subgraphs_nested_two_levels_deep() {
        let graph = nested();
        let drawn = graph.draw_mermaid_xray(2);
        insta::assert_snapshot!(drawn);
        // One level: the team's own subgraph stays one node.
        let one = graph.draw_mermaid_xray(1);
        assert_eq!(one.matches("subgraph ").count(), 1, "{one}");
        assert_eq!(drawn.matches("subgraph ").count(), 2, "{drawn}");
        assert_eq!(graph.draw_mermaid_xray(0), graph.draw_mermaid());
        assert!(!graph.draw_mermaid().contains("subgraph "));
        // Every id is declared once (a node, a block, or START/END inside).
        let mut declared = std::collections::BTreeSet::new();
        for line in drawn.lines().map(str::trim) {
            let decl = line
                .strip_prefix("subgraph ")
                .map(|r| r.split('[').next().unwrap())
                .or_else(|| {
                    (!line.contains("--") && line.contains('('))
                        .then(|| line.split('(').next().unwrap())
                });
            if let Some(id) = decl {
                assert!(
                    declared.insert(id.to_owned()),
                    "{id} declared twice:\n{drawn}"
                );
            }
        }
        // Every edge joins declared ids.
        for line in drawn
            .lines()
            .map(str::trim)
            .filter(|l| l.contains("-->") || l.contains("-.->"))
        {
            let line = line.trim_end_matches(';');
            let (from, to) = line
                .split_once(' ')
                .map(|(f, r)| (f, r.rsplit(' ').next().unwrap()))
                .unwrap();
            assert!(
                declared.contains(from) && declared.contains(to),
                "{line}\n{drawn}"
            );
        }
    }
}
