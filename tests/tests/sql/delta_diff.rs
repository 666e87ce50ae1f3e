//! Differential: the same operations on a saver that stores deltas and one
//! that does not read the same values.

use std::sync::Arc;

use weaver::checkpoint::{ForkOptions, PruneStrategy};
use weaver::prelude::*;

use crate::common::{Chat, ChatUpdate, Forwarding, chat, user};

type Seen = Vec<(u64, Chat, Vec<String>)>;

async fn seen(graph: &CompiledGraph<Chat>, thread: &str) -> Seen {
    let config = RunConfig::thread(thread);
    let mut out: Seen = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.commit_order, s.values, s.next))
        .collect();
    // Pages of every size read the same.
    for limit in [1, 3, 7, 31, 33] {
        let mut paged = Vec::new();
        let mut before: Option<String> = None;
        loop {
            let mut options = History::default().limit(limit);
            if let Some(b) = &before {
                options = options.before(b.clone());
            }
            let page = graph.get_state_history(&config, options).await.unwrap();
            let Some(last) = page.last() else { break };
            before = Some(last.config.get_checkpoint_id().unwrap().to_owned());
            paged.extend(page.into_iter().map(|s| (s.commit_order, s.values, s.next)));
        }
        assert_eq!(paged, out, "pages of {limit}");
    }
    let updates: Vec<_> = graph
        .get_state_history(&config, History::default().filter("source", "update"))
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.commit_order, s.values, s.next))
        .collect();
    let want: Vec<_> = out
        .iter()
        .filter(|(o, ..)| updates.iter().any(|u| u.0 == *o))
        .cloned()
        .collect();
    assert_eq!(updates, want);
    // Each checkpoint read alone, by a fresh reader too.
    for (order, values, _) in &out {
        let at = graph.at_version(&config, *order).await.unwrap().unwrap();
        assert_eq!(
            &graph.get_state(&at).await.unwrap().values,
            values,
            "order {order}"
        );
    }
    let head = graph.get_state(&config).await.unwrap();
    out.push((u64::MAX, head.values, head.next));
    out
}

async fn scenario(saver: Arc<dyn Saver>) -> Vec<Seen> {
    let graph = chat(saver.clone());
    let mut views = Vec::new();
    let config = RunConfig::thread("d");
    for i in 0..40 {
        graph.invoke(user(i), &config).await.unwrap();
    }
    views.push(seen(&graph, "d").await);
    // Forks from old checkpoints, time travel.
    for (k, order) in [(0, 5u64), (1, 33), (2, 34), (3, 70), (4, 100)] {
        let at = graph.at_version(&config, order).await.unwrap().unwrap();
        if k % 2 == 0 {
            graph
                .update_state(
                    &at,
                    ChatUpdate::default().messages(vec![format!("edit {k}")]),
                    Some("chat"),
                )
                .await
                .unwrap();
        } else {
            graph.invoke(user(100 + k), &at).await.unwrap();
        }
        views.push(seen(&graph, "d").await);
    }
    let head = graph.get_state(&config).await.unwrap().config;
    graph
        .bulk_update_state(
            &head,
            (0..40)
                .map(|j| {
                    vec![(
                        ChatUpdate::default().messages(vec![format!("b{j}")]),
                        Some("chat".to_owned()),
                    )]
                })
                .collect(),
        )
        .await
        .unwrap();
    views.push(seen(&graph, "d").await);
    // Copies.
    graph
        .checkpointer()
        .unwrap()
        .copy_thread("d", "d-copy")
        .await
        .unwrap();
    views.push(seen(&graph, "d-copy").await);
    let at = graph.at_version(&config, 90).await.unwrap().unwrap();
    graph
        .checkpointer()
        .unwrap()
        .fork_at(
            &at.checkpoint_ref().unwrap(),
            "d-fork",
            ForkOptions::default(),
        )
        .await
        .unwrap();
    views.push(seen(&graph, "d-fork").await);
    // Prunes, reading through this graph and a fresh one.
    for keep in [60, 33, 32, 31, 7, 1] {
        graph
            .checkpointer()
            .unwrap()
            .prune(
                &["d".to_owned(), "d-copy".to_owned()],
                PruneStrategy::KeepLast(keep),
            )
            .await
            .unwrap();
        views.push(seen(&graph, "d").await);
        views.push(seen(&chat(saver.clone()), "d-copy").await);
        graph.invoke(user(200 + keep), &config).await.unwrap();
        views.push(seen(&graph, "d").await);
    }
    // Two processes take turns on one thread, in every durability mode.
    let other = chat(saver.clone());
    for i in 0..40 {
        let mode = [Durability::Sync, Durability::Async, Durability::Exit][i % 3];
        let config = config.clone().durability(mode);
        let g = if i % 2 == 0 { &graph } else { &other };
        g.invoke(user(400 + i), &config).await.unwrap();
        if i % 5 == 0 {
            views.push(seen(if i % 2 == 0 { &other } else { &graph }, "d").await);
        }
    }
    views.push(seen(&graph, "d").await);
    views.push(seen(&other, "d").await);
    // Deleted, then the same thread id again.
    graph
        .checkpointer()
        .unwrap()
        .delete_thread("d")
        .await
        .unwrap();
    for i in 0..5 {
        graph.invoke(user(300 + i), &config).await.unwrap();
    }
    views.push(seen(&graph, "d").await);
    views
}

async fn differential(inner: Arc<dyn Saver>, plain: Arc<dyn Saver>) {
    assert!(inner.supports_deltas());
    let with = scenario(inner).await;
    let without = scenario(plain).await;
    assert_eq!(with.len(), without.len());
    for (i, (a, b)) in with.iter().zip(&without).enumerate() {
        assert_eq!(a.len(), b.len(), "view {i}");
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x, y, "view {i}");
        }
    }
}

#[tokio::test]
async fn differential_in_memory() {
    differential(
        Arc::new(InMemorySaver::new()),
        Arc::new(Forwarding::default()),
    )
    .await;
}

#[tokio::test]
async fn differential_on_sqlite() {
    let db = crate::common::SqliteDb::new().await;
    let db2 = crate::common::SqliteDb::new().await;
    differential(
        Arc::new(db.saver().await),
        Arc::new(Forwarding::on(Arc::new(db2.saver().await))),
    )
    .await;
}

#[tokio::test]
async fn differential_on_postgres() {
    let db = crate::common::PgDb::new().await;
    let db2 = crate::common::PgDb::new().await;
    differential(
        Arc::new(db.saver().await),
        Arc::new(Forwarding::on(Arc::new(db2.saver().await))),
    )
    .await;
    db.drop_schema().await;
    db2.drop_schema().await;
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Sparse {
    #[reducer(delta)]
    #[serde(default, skip_serializing_if = "weaver::state::SharedVec::is_empty")]
    a: weaver::state::SharedVec<u32>,
    #[reducer(delta)]
    b: std::collections::VecDeque<u32>,
    n: u32,
}

fn sparse(saver: Arc<dyn Saver>) -> CompiledGraph<Sparse> {
    Graph::<Sparse>::new("sparse")
        .add_node("x", |s: &Sparse| {
            let mut u = SparseUpdate::default().n(s.n + 1);
            if s.n % 3 == 2 {
                u = u.a(vec![s.n]);
            }
            if !s.n.is_multiple_of(5) {
                u = u.b(std::collections::VecDeque::from(vec![s.n]));
            }
            u
        })
        .add_sequence([START, "x", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn sparse_views(saver: Arc<dyn Saver>) -> Vec<Vec<(u64, Sparse)>> {
    let g = sparse(saver.clone());
    let config = RunConfig::thread("s");
    let mut views = Vec::new();
    for i in 0..80 {
        g.invoke(Input::update(SparseUpdate::default()), &config)
            .await
            .unwrap();
        if i % 20 == 19 {
            for r in [g.clone(), sparse(saver.clone())] {
                let h = r
                    .get_state_history(&config, History::default())
                    .await
                    .unwrap();
                views.push(h.into_iter().map(|s| (s.commit_order, s.values)).collect());
            }
        }
    }
    g.checkpointer()
        .unwrap()
        .prune(&["s".to_owned()], PruneStrategy::KeepLast(40))
        .await
        .unwrap();
    let h = sparse(saver)
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    views.push(h.into_iter().map(|s| (s.commit_order, s.values)).collect());
    views
}

#[tokio::test]
async fn differential_sparse() {
    let a = sparse_views(Arc::new(InMemorySaver::new())).await;
    let b = sparse_views(Arc::new(Forwarding::default())).await;
    assert_eq!(a, b);
}
