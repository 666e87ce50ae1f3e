//! `#[derive(GraphState)]` and `graph!` at run time: reducers, the update
//! type, schemas, Mermaid, and macro graphs against builder graphs.

use std::collections::BTreeMap;

use weaver::checkpoint::ListFilter;
use weaver::prelude::*;

/// The seed's two-step state.
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
        s.apply(vec![EverythingUpdate::default().note(None)]).unwrap();
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
        let kinds: Vec<_> = Everything::CHANNELS.iter().map(|c| (c.name, c.kind)).collect();
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
        assert_eq!(names, ["topic", "note", "status", "log", "count", "scores", "peak"]);
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
}
