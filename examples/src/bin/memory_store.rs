//! Cross-thread memory on SQLite, end to end.
//!
//! A chat graph with a checkpointer *and* a memory store, both in one SQLite
//! file. The node `remember` stores facts the user states under
//! `["users", user_id, "memories"]` (the user id comes from the per-run
//! context, never from the thread); the node `recall` searches them. Facts
//! told in one conversation (thread) are found in another, and stay out of
//! other users' reach.
//!
//! Run: `cargo run -p weaver-examples --bin memory_store`

use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::channel::{ChannelKind, ChannelSpec, reduce};
use weaver::checkpoint::SqliteSaver;
use weaver::migrate::{self, Adapter};
use weaver::prelude::*;
use weaver::store::{ListNamespaces, Search, SqliteStore, Store};

/// One chat turn: the user's message in, the assistant's replies out.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Chat {
    /// The latest user message (last value wins).
    message: String,
    /// Replies of the turn (appended).
    replies: Vec<String>,
}

/// Partial update of [`Chat`] (what `#[derive(GraphState)]` generates).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ChatUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replies: Option<Vec<String>>,
}

impl Update for ChatUpdate {}

impl From<Chat> for ChatUpdate {
    fn from(c: Chat) -> Self {
        ChatUpdate {
            message: Some(c.message),
            replies: Some(c.replies),
        }
    }
}

impl GraphState for Chat {
    type Update = ChatUpdate;
    const CHANNELS: &'static [ChannelSpec] = &[
        ChannelSpec::new("message", ChannelKind::LastValue),
        ChannelSpec::new("replies", ChannelKind::Append),
    ];
    fn apply(&mut self, updates: Vec<ChatUpdate>) -> weaver::Result<()> {
        let mut written = false;
        for u in updates {
            if let Some(m) = u.message {
                reduce::last_value(&mut self.message, m, &mut written, "message")?;
            }
            if let Some(r) = u.replies {
                reduce::append(&mut self.replies, r);
            }
        }
        Ok(())
    }
}

/// Who the run is for: per-run context, not persisted.
#[derive(Debug)]
struct User(String);

fn store_and_user(rt: &Runtime) -> Result<(&std::sync::Arc<dyn Store>, &str), NodeError> {
    let store = rt
        .store()
        .ok_or_else(|| NodeError::msg("compile the graph with a store"))?;
    let user = rt
        .context::<User>()
        .ok_or_else(|| NodeError::msg("run with a User context"))?;
    Ok((store, &user.0))
}

/// Stores `"remember: <fact>"` messages as memories of the user.
async fn remember(chat: &Chat, rt: &Runtime) -> Result<ChatUpdate, NodeError> {
    let Some(fact) = chat.message.strip_prefix("remember:") else {
        return Ok(ChatUpdate::default());
    };
    let (store, user) = store_and_user(rt)?;
    store
        .put(
            &["users", user, "memories"],
            rt.task_id(),
            json!({ "memory": fact.trim() }),
        )
        .await?;
    Ok(ChatUpdate {
        replies: Some(vec![format!("noted: {}", fact.trim())]),
        ..Default::default()
    })
}

/// Answers questions from the user's memories (BM25-ranked search).
async fn recall(chat: &Chat, rt: &Runtime) -> Result<ChatUpdate, NodeError> {
    if chat.message.starts_with("remember:") {
        return Ok(ChatUpdate::default());
    }
    let (store, user) = store_and_user(rt)?;
    let hits = store
        .search(
            &["users", user],
            Search::query(chat.message.clone()).limit(2),
        )
        .await?;
    let reply = match hits.iter().find(|h| h.score.is_some_and(|s| s > 0.0)) {
        Some(best) => format!(
            "I remember: {}",
            best.value["memory"].as_str().unwrap_or("?")
        ),
        None => "I don't know anything about that yet.".to_owned(),
    };
    Ok(ChatUpdate {
        replies: Some(vec![reply]),
        ..Default::default()
    })
}

/// One chat turn of `user` on `thread`; returns the reply.
async fn turn(
    graph: &CompiledGraph<Chat>,
    thread: &str,
    user: &str,
    message: &str,
) -> weaver::Result<String> {
    let config = RunConfig::thread(thread).with_context(User(user.to_owned()));
    let input = ChatUpdate {
        message: Some(message.to_owned()),
        ..Default::default()
    };
    let out = graph
        .invoke(Input::update(input), &config)
        .await?
        .complete()?;
    let reply = out.replies.last().cloned().unwrap_or_default();
    println!("[{thread}] {user}: {message}\n        -> {reply}");
    Ok(reply)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join("weaver-memory-store-example.db");
    let _ = std::fs::remove_file(&path);
    // The recommended options (WAL, full sync, a 30 s busy timeout), on a
    // pool of our own shared by the saver and the store.
    let options = SqliteSaver::connect_options(&format!("sqlite://{}", path.display()))?;
    let pool = SqlitePoolOptions::new().connect_with(options).await?;
    migrate::up(&pool, &[Adapter::Checkpoint, Adapter::Store], None).await?;

    let graph = Graph::<Chat>::new("memory-chat")
        .add_node("remember", remember)
        .add_node("recall", recall)
        .add_sequence([START, "remember", "recall", END])
        .compile(
            Compile::new()
                .checkpointer(SqliteSaver::new(pool.clone()))
                .store(SqliteStore::new(pool.clone())),
        )?;

    // Conversation 1: alice tells two facts.
    turn(
        &graph,
        "alice-chat-1",
        "alice",
        "remember: I like pizza with extra basil",
    )
    .await?;
    turn(
        &graph,
        "alice-chat-1",
        "alice",
        "remember: I play jazz piano on weekends",
    )
    .await?;

    // Conversation 2, another thread: the facts are there.
    let food = turn(
        &graph,
        "alice-chat-2",
        "alice",
        "which pizza should I order?",
    )
    .await?;
    assert_eq!(food, "I remember: I like pizza with extra basil");
    let music = turn(
        &graph,
        "alice-chat-2",
        "alice",
        "any jazz concerts this weekend?",
    )
    .await?;
    assert_eq!(music, "I remember: I play jazz piano on weekends");

    // Bob's memories are a different namespace.
    let bob = turn(&graph, "bob-chat-1", "bob", "which pizza should I order?").await?;
    assert_eq!(bob, "I don't know anything about that yet.");

    // The store outside a graph: what is stored, and for whom.
    let store = SqliteStore::new(pool.clone());
    let users = store
        .list_namespaces(ListNamespaces::new().prefix(&["users"]).max_depth(2))
        .await?;
    println!("namespaces with memories: {users:?}");
    for item in store.search(&["users", "alice"], Search::new()).await? {
        println!(
            "  {}/{} = {}",
            item.namespace.join("."),
            item.key,
            item.value
        );
    }
    println!("database: {}", path.display());
    Ok(())
}
