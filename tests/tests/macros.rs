//! `#[derive(GraphState)]` and `graph!` at run time: reducers, the update
//! type, schemas, Mermaid, and macro graphs against builder graphs.

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
