//! Store tests: the conformance suite on every backend, and the store in graphs.

mod memory {
    use std::sync::Arc;

    use weaver::store::{InMemoryStore, Store};
    use weaver_tests::store_conformance::{run_store_config_conformance, run_store_conformance};

    #[tokio::test]
    async fn conformance() {
        run_store_conformance(|| async { Arc::new(InMemoryStore::new()) as Arc<dyn Store> }).await;
    }

    #[tokio::test]
    async fn config_conformance() {
        run_store_config_conformance(|c| async move {
            Arc::new(InMemoryStore::with_config(c)) as Arc<dyn Store>
        })
        .await;
    }

    #[tokio::test]
    async fn cross_thread() {
        super::graph::cross_thread_memory(Arc::new(InMemoryStore::new())).await;
    }
}

mod graph {
    use std::sync::Arc;

    use serde_json::json;
    use weaver::prelude::*;
    use weaver::store::{Search, Store};
    use weaver_tests::states::{Steps, StepsUpdate};

    /// The per-run context: who the run is for.
    #[derive(Debug)]
    pub struct User {
        pub id: String,
    }

    fn user_namespace(rt: &Runtime) -> Result<(Arc<dyn Store>, String), NodeError> {
        let store = rt
            .store()
            .cloned()
            .ok_or_else(|| NodeError::msg("graph compiled without a store"))?;
        let user = rt
            .context::<User>()
            .ok_or_else(|| NodeError::msg("run without a user context"))?;
        Ok((store, user.id.clone()))
    }

    async fn remember(s: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        let (store, user) = user_namespace(rt)?;
        store
            .put(
                &["users", &user, "memories"],
                "food",
                json!({ "memory": s.foo.clone() }),
            )
            .await?;
        Ok(StepsUpdate::default().bar(["stored"]))
    }

    async fn recall(s: &Steps, rt: &Runtime) -> Result<StepsUpdate, NodeError> {
        let (store, user) = user_namespace(rt)?;
        let items = store
            .search(&["users", &user], Search::query(s.foo.clone()).limit(3))
            .await?;
        Ok(StepsUpdate::default().bar(
            items
                .iter()
                .map(|i| i.value["memory"].as_str().unwrap_or_default().to_owned()),
        ))
    }

    /// One thread's node stores a fact under `["users", user_id,
    /// "memories"]`; a node in another thread (same user) finds it with
    /// `search`; another user's thread does not.
    pub async fn cross_thread_memory(store: Arc<dyn Store>) {
        let saver = InMemorySaver::new();
        let writer = Graph::<Steps>::new("remember")
            .add_node("remember", remember)
            .add_edge(START, "remember")
            .add_edge("remember", END)
            .compile(
                Compile::new()
                    .checkpointer(saver.clone())
                    .store_arc(store.clone()),
            )
            .unwrap();
        let reader = Graph::<Steps>::new("recall")
            .add_node("recall", recall)
            .add_edge(START, "recall")
            .add_edge("recall", END)
            .compile(Compile::new().checkpointer(saver).store_arc(store.clone()))
            .unwrap();
        assert!(reader.store().is_some());

        let ann = |thread: &str| {
            RunConfig::thread(thread).with_context(User {
                id: "user-123".into(),
            })
        };
        let input = Steps {
            foo: "User likes pizza".into(),
            bar: vec![],
        };
        let out = writer
            .invoke(input, &ann("thread-1"))
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(out.bar, ["stored"]);

        let query = Steps {
            foo: "pizza".into(),
            bar: vec![],
        };
        let found = reader
            .invoke(query.clone(), &ann("thread-2"))
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(found.bar, ["User likes pizza"]);

        let bob = RunConfig::thread("thread-3").with_context(User { id: "bob".into() });
        let other = reader
            .invoke(query, &bob)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert!(other.bar.is_empty(), "another user's namespace is separate");

        // Without a store the node reports it, as a node failure.
        let bare = Graph::<Steps>::new("bare")
            .add_node("recall", recall)
            .add_edge(START, "recall")
            .add_edge("recall", END)
            .compile(Compile::new())
            .unwrap();
        assert!(bare.store().is_none());
        let err = bare
            .invoke(
                Steps::default(),
                &RunConfig::default().with_context(User { id: "x".into() }),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, weaver::Error::NodeFailed { .. }), "{err}");
    }
}
