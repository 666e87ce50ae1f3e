//! History built snapshot by snapshot: a record whose parent is listed too
//! takes its delta channels from the parent's typed state, so consecutive
//! snapshots share what their items share (`Arc` items are not copied).

use std::sync::Arc;

use sqlx::AssertSqlSafe;
use weaver::checkpoint::{DELTA_SNAPSHOT_EVERY, ListFilter, Saver};
use weaver::prelude::*;

use crate::common::SqliteDb;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Shared {
    #[reducer(delta)]
    messages: Vec<Arc<str>>,
}

/// The same channel as a [`SharedVec`](weaver::state::SharedVec).
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Chunked {
    #[reducer(delta)]
    messages: weaver::state::SharedVec<String>,
}

/// The same channel, no longer stored as deltas (a later version of the state).
#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Plain {
    #[reducer(append)]
    messages: Vec<String>,
}

fn shared(saver: Arc<dyn Saver>) -> CompiledGraph<Shared> {
    Graph::<Shared>::new("shared")
        .add_node("reply", |s: &Shared| {
            SharedUpdate::default().messages(vec![Arc::from(format!("re {}", s.messages.len()))])
        })
        .add_sequence([START, "reply", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

fn chunked(saver: Arc<dyn Saver>) -> CompiledGraph<Chunked> {
    Graph::<Chunked>::new("chunked")
        .add_node("reply", |_: &Chunked| ChunkedUpdate::default())
        .add_sequence([START, "reply", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

fn plain(saver: Arc<dyn Saver>) -> CompiledGraph<Plain> {
    Graph::<Plain>::new("plain")
        .add_node("reply", |_: &Plain| PlainUpdate::default())
        .add_sequence([START, "reply", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .unwrap()
}

async fn turns(saver: &Arc<dyn Saver>, thread: &str, n: usize) -> RunConfig {
    let graph = shared(saver.clone());
    let config = RunConfig::thread(thread);
    for i in 0..n {
        let input = SharedUpdate::default().messages(vec![Arc::from(format!("user {i}"))]);
        graph.invoke(input, &config).await.unwrap();
    }
    config
}

/// The ids of `thread`'s records that hold the messages in full (one in
/// `DELTA_SNAPSHOT_EVERY`); the others store what they appended.
async fn full_records(saver: &Arc<dyn Saver>, thread: &str) -> Vec<String> {
    saver
        .list_stored(&ListFilter::thread(thread))
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.checkpoint.channel_values.contains_key("messages"))
        .map(|t| t.checkpoint.id)
        .collect()
}

/// The whole history of `config`'s thread as `graph` reads it.
async fn history<S: GraphState>(
    graph: &CompiledGraph<S>,
    config: &RunConfig,
) -> Vec<StateSnapshot<S>> {
    graph
        .get_state_history(config, History::default())
        .await
        .unwrap()
}

/// Shared messages as owned strings, to compare with another state's.
fn owned(messages: &[Arc<str>]) -> Vec<String> {
    messages.iter().map(|m| m.to_string()).collect()
}

async fn snapshots_share_their_items(saver: Arc<dyn Saver>) {
    let config = turns(&saver, "s", 40).await;
    // A reader of its own, with nothing kept from the writes.
    let history = history(&shared(saver.clone()), &config).await;
    assert_eq!(history.len(), 120);
    let full = full_records(&saver, "s").await;
    assert_eq!(full.len(), 120usize.div_ceil(DELTA_SNAPSHOT_EVERY as usize));
    let mut shared_pairs = 0;
    for pair in history.windows(2) {
        let (newer, older) = (&pair[0].values.messages, &pair[1].values.messages);
        assert!(newer.len() >= older.len());
        assert_eq!(newer[..older.len()], older[..]);
        // A record stored as deltas takes the items of the snapshot before
        // it: the same allocations, not copies.
        let id = pair[0].config.get_checkpoint_id().unwrap();
        let same = newer.iter().zip(older).all(|(a, b)| Arc::ptr_eq(a, b));
        assert_eq!(same, !full.iter().any(|f| f.as_str() == id), "at {id}");
        shared_pairs += usize::from(same);
    }
    assert_eq!(shared_pairs, 119 - (full.len() - 1));
    for s in history.iter().step_by(7) {
        let alone = shared(saver.clone()).get_state(&s.config).await.unwrap();
        assert_eq!(alone.values, s.values);
    }
}

#[tokio::test]
async fn history_snapshots_share_delta_items_in_memory() {
    snapshots_share_their_items(Arc::new(InMemorySaver::new())).await;
}

#[tokio::test]
async fn history_snapshots_share_delta_items_on_sqlite() {
    let db = SqliteDb::new().await;
    snapshots_share_their_items(Arc::new(db.saver().await)).await;
}

#[tokio::test]
async fn shared_vec_snapshots_share_their_full_chunks_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = turns(&saver, "c", 60).await;
    let arcs = history(&shared(saver.clone()), &config).await;
    let history = history(&chunked(saver.clone()), &config).await;
    assert_eq!(history.len(), arcs.len());
    for (c, a) in history.iter().zip(&arcs) {
        assert_eq!(c.config.get_checkpoint_id(), a.config.get_checkpoint_id());
        assert_eq!(c.values.messages, owned(&a.values.messages));
    }
    let full = full_records(&saver, "c").await;
    let mut shared_pairs = 0;
    for pair in history.windows(2) {
        let (newer, older) = (&pair[0].values.messages, &pair[1].values.messages);
        if older.len() < 64 {
            continue;
        }
        // Built from the snapshot before it: the first chunk is the same
        // memory. Decoded in full: a copy.
        let id = pair[0].config.get_checkpoint_id().unwrap();
        let same = std::ptr::eq(&newer[0], &older[0]);
        assert_eq!(same, !full.iter().any(|f| f.as_str() == id), "at {id}");
        shared_pairs += usize::from(same);
    }
    assert!(shared_pairs > 40, "{shared_pairs}");
}

#[tokio::test]
async fn a_second_history_starts_from_the_snapshot_the_first_decoded() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = turns(&saver, "again", 30).await;
    let page = || History::default().limit(20);
    let reader = chunked(saver.clone());
    let first = reader.get_state_history(&config, page()).await.unwrap();
    let second = reader.get_state_history(&config, page()).await.unwrap();
    let fresh = chunked(saver.clone())
        .get_state_history(&config, page())
        .await
        .unwrap();
    assert_eq!(first.len(), 20);
    for ((a, b), c) in first.iter().zip(&second).zip(&fresh) {
        assert_eq!(a.values, b.values);
        assert_eq!(a.values, c.values);
        assert_eq!(a.next, b.next);
        assert_eq!(a.metadata, b.metadata);
    }
    // The oldest snapshot of the second history is the first's, not decoded
    // again; another graph (its own cache) decodes its own.
    let (a, b, c) = (
        &first[19].values.messages,
        &second[19].values.messages,
        &fresh[19].values.messages,
    );
    assert!(std::ptr::eq(&a[0], &b[0]));
    assert!(!std::ptr::eq(&a[0], &c[0]));
    // After more turns the page moves on; every snapshot still reads as the
    // checkpoint does alone.
    turns(&saver, "again", 3).await;
    let later = reader.get_state_history(&config, page()).await.unwrap();
    assert_ne!(
        later[19].config.get_checkpoint_id(),
        first[19].config.get_checkpoint_id()
    );
    for s in later.iter().chain(&second) {
        let alone = chunked(saver.clone()).get_state(&s.config).await.unwrap();
        assert_eq!(alone.values, s.values);
    }
}

#[tokio::test]
async fn get_state_reuses_the_values_it_decoded() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = turns(&saver, "g", 30).await;
    let stored_as_deltas = |t: Option<weaver::checkpoint::CheckpointTuple>| {
        !t.unwrap()
            .checkpoint
            .channel_values
            .contains_key("messages")
    };
    let latest = weaver::checkpoint::CheckpointRef::latest("g");
    assert!(stored_as_deltas(saver.get_stored(&latest).await.unwrap()));
    let reader = chunked(saver.clone());
    let a = reader.get_state(&config).await.unwrap();
    let b = reader.get_state(&config).await.unwrap();
    assert_eq!(a.values.messages.len(), 60);
    assert_eq!(a.values, b.values);
    assert_eq!((&a.next, &a.metadata), (&b.next, &b.metadata));
    assert!(std::ptr::eq(&a.values.messages[0], &b.values.messages[0]));
    // An older checkpoint by id: the same, and equal to a fresh graph's read.
    let old = history(&reader, &config).await.remove(40);
    let c = reader.get_state(&old.config).await.unwrap();
    let d = reader.get_state(&old.config).await.unwrap();
    let fresh = chunked(saver.clone()).get_state(&old.config).await.unwrap();
    assert_eq!(c.values, old.values);
    assert_eq!(c.values, fresh.values);
    assert_eq!(c.values, d.values);
    // A new turn moves the latest checkpoint on: the read follows it.
    turns(&saver, "g", 1).await;
    let e = reader.get_state(&config).await.unwrap();
    let fresh = chunked(saver.clone()).get_state(&config).await.unwrap();
    assert_eq!(e.values.messages.len(), 62);
    assert_eq!(e.values, fresh.values);
}

#[tokio::test]
async fn a_state_that_no_longer_declares_deltas_still_reads_its_history() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let config = turns(&saver, "v1", 10).await;
    let old = history(&shared(saver.clone()), &config).await;
    let new = history(&plain(saver.clone()), &config).await;
    assert_eq!(new.len(), old.len());
    for (n, o) in new.iter().zip(&old) {
        assert_eq!(n.values.messages, owned(&o.values.messages));
    }
}

#[tokio::test]
async fn appended_items_of_the_wrong_type_are_a_decode_error() {
    let db = SqliteDb::new().await;
    let sqlite = db.saver().await;
    let saver: Arc<dyn Saver> = Arc::new(sqlite.clone());
    let config = turns(&saver, "bad", 3).await;
    let head = saver
        .get_stored(&config.checkpoint_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(head.checkpoint.deltas.contains_key("messages"));
    sqlx::query(AssertSqlSafe(
        "UPDATE weaver_checkpoints SET checkpoint = CAST(json_replace(CAST(checkpoint AS TEXT), '$.deltas.messages.items', json('[5]')) AS BLOB) WHERE checkpoint_id = $1",
    ))
    .bind(&head.checkpoint.id)
    .execute(sqlite.pool())
    .await
    .unwrap();
    let reader = shared(saver.clone());
    match reader.get_state_history(&config, History::default()).await {
        Err(Error::Decode { what, reason }) => {
            assert!(what.contains("messages"), "{what}");
            assert!(reason.contains("integer `5`"), "{reason}");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[tokio::test]
async fn forks_and_first_updates_are_numbered_as_in_langgraph_on_sqlite() {
    let db = crate::common::SqliteDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::shapes::forks_and_first_updates_are_numbered_as_in_langgraph(saver).await;
}

#[tokio::test]
async fn forks_and_first_updates_are_numbered_as_in_langgraph_on_postgres() {
    let db = crate::common::PgDb::new().await;
    let saver: std::sync::Arc<dyn weaver::Saver> = std::sync::Arc::new(db.saver().await);
    weaver_tests::shapes::forks_and_first_updates_are_numbered_as_in_langgraph(saver).await;
    db.drop_schema().await;
}
