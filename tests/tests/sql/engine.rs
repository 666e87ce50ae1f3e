//! The engine on the SQL savers, in every durability mode: what the runtime
//! tests show on the in-memory saver holds on a real database too (under
//! `async`, checkpoints and writes reach the database in group commits).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use weaver::checkpoint::ListFilter;
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::{PgDb, SqliteDb};

fn two_step(saver: Arc<dyn Saver>) -> CompiledGraph<Steps> {
    Graph::<Steps>::new("CheckpointExample")
        .add_node("node_a", |_: &Steps| {
            StepsUpdate::default().foo("a").bar(["a"])
        })
        .add_node("node_b", |_: &Steps| {
            StepsUpdate::default().foo("b").bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

/// W7's shape: 8 branches, `w3` fails once; counts every good run.
fn fan_out(saver: Arc<dyn Saver>, good_runs: Arc<AtomicUsize>) -> CompiledGraph<Steps> {
    let failed_once = Arc::new(AtomicBool::new(false));
    let mut g = Graph::<Steps>::new("W7");
    for i in 0..8 {
        let (good_runs, failed_once) = (good_runs.clone(), failed_once.clone());
        let name = format!("w{i}");
        g = g
            .add_node(
                name.clone(),
                move |_: &Steps| -> Result<StepsUpdate, NodeError> {
                    if i == 3 && !failed_once.swap(true, Ordering::SeqCst) {
                        return Err(NodeError::msg("transient"));
                    }
                    if i != 3 {
                        good_runs.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(StepsUpdate::default().bar([format!("w{i}")]))
                },
            )
            .add_edge(START, name.clone())
            .add_edge(name, "join");
    }
    g.add_node("join", |_: &Steps| StepsUpdate::default().foo("joined"))
        .add_edge("join", END)
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn engine_on(saver: Arc<dyn Saver>) {
    for (i, (mode, stored)) in [
        (Durability::Sync, 4),
        (Durability::Async, 4),
        (Durability::Exit, 1),
    ]
    .into_iter()
    .enumerate()
    {
        let graph = two_step(saver.clone());
        let thread = format!("two-step-{i}");
        let config = RunConfig::thread(thread.clone()).durability(mode);
        let state = graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(state.bar, ["a", "b"]);
        let history = saver
            .list(&ListFilter::thread(thread.clone()))
            .await
            .unwrap();
        assert_eq!(history.len(), stored, "{mode:?}");
        // A second invoke continues the same thread from the database.
        let again = graph
            .invoke(Steps::default(), &config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(again.bar, ["a", "b", "a", "b"], "{mode:?}");

        let good = Arc::new(AtomicUsize::new(0));
        let graph = fan_out(saver.clone(), good.clone());
        let config = RunConfig::thread(format!("w7-{i}")).durability(mode);
        let err = graph.invoke(Steps::default(), &config).await.unwrap_err();
        assert!(
            matches!(err, Error::NodeFailed { ref node, .. } if node == "w3"),
            "{err}"
        );
        assert_eq!(
            graph.get_state(&config).await.unwrap().next,
            ["w3"],
            "{mode:?}"
        );
        let done = graph
            .continue_run(&config)
            .await
            .unwrap()
            .complete()
            .unwrap();
        assert_eq!(done.bar.len(), 8);
        assert_eq!(
            good.load(Ordering::SeqCst),
            7,
            "{mode:?}: each good node ran once"
        );
    }
}

#[tokio::test]
async fn engine_on_sqlite() {
    let db = SqliteDb::new().await;
    engine_on(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn engine_on_postgres() {
    let db = PgDb::new().await;
    engine_on(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}
