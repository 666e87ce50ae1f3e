//! Encryption at rest on one SQLite file: checkpoints, pending writes and
//! memory-store items sealed with AES-256-GCM, a key rotation, and what a
//! reader without the right key gets.
//!
//! A chat node stores what the user asks it to remember in the memory store
//! and in the thread's state. The file then holds none of it in the clear.
//! A second key is added (rotation): old records still read, new ones are
//! sealed with the new key. A reader with only the new key, or with no key,
//! gets a typed error, never the data.
//!
//! ```text
//! cargo run -p weaver-examples --bin encrypted [-- path/to/new-file.db]
//! ```
//!
//! The two keys are fixed demo bytes so that the printed `weaver-cli`
//! command can read the file; load real keys from a secret store.

use serde_json::json;
use sqlx::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::checkpoint::SqliteSaver;
use weaver::codec::{EncryptedCodec, EncryptionKey};
use weaver::migrate::{self, Adapter};
use weaver::prelude::*;
use weaver::store::{Search, SqliteStore, Store};

/// The thread's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Chat {
    /// The user's latest message.
    message: String,
    /// What the assistant answered, oldest first.
    #[reducer(append)]
    replies: Vec<String>,
}

/// The secret the user tells; the file must never show it.
const SECRET: &str = "the vault code is 8-4-1-9";

/// The demo keys: id and bytes (`weaver-cli --keys-env` takes them as
/// `id=<64 hex digits>`).
const OLD_KEY: (&str, u8) = ("2026-11", 0x11);
const NEW_KEY: (&str, u8) = ("2026-12", 0x22);

fn key((id, byte): (&str, u8)) -> weaver::Result<EncryptionKey> {
    EncryptionKey::new(id, [byte; 32])
}

/// Stores the message as a memory of the user, and answers.
async fn remember(chat: &Chat, rt: &Runtime) -> Result<ChatUpdate, NodeError> {
    let store = rt
        .store()
        .ok_or_else(|| NodeError::msg("compile the graph with a store"))?;
    store
        .put(
            &["users", "ada", "memories"],
            rt.task_id(),
            json!({ "memory": chat.message }),
        )
        .await?;
    Ok(ChatUpdate::default().replies(vec![format!("noted: {}", chat.message)]))
}

/// The chat graph on `pool`, sealing checkpoints and memories with `codec`.
fn chat_graph(pool: &SqlitePool, codec: &EncryptedCodec) -> weaver::Result<CompiledGraph<Chat>> {
    Graph::<Chat>::new("encrypted-chat")
        .add_node("remember", remember)
        .add_sequence([START, "remember", END])
        .compile(
            Compile::new()
                .checkpointer(SqliteSaver::new(pool.clone()).with_codec(codec.clone()))
                .store(SqliteStore::new(pool.clone()).with_encryption(codec.clone())),
        )
}

/// How many stored payloads (checkpoint records, pending writes, store
/// values) hold `needle` in the clear, out of how many.
async fn in_the_clear(pool: &SqlitePool, needle: &str) -> weaver::Result<(i64, i64)> {
    let storage = |e| Error::storage("example query", e);
    let mut clear = 0;
    let mut total = 0;
    for sql in [
        "SELECT checkpoint FROM weaver_checkpoints",
        "SELECT value FROM weaver_checkpoint_writes",
        "SELECT CAST(value AS BLOB) FROM weaver_store_items",
    ] {
        let rows: Vec<Vec<u8>> = sqlx::query_scalar(sql)
            .fetch_all(pool)
            .await
            .map_err(storage)?;
        total += rows.len() as i64;
        clear += rows
            .iter()
            .filter(|r| r.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .count() as i64;
    }
    Ok((clear, total))
}

/// How many checkpoint records each key id sealed (the id is stored in each
/// envelope: `WVE3`, its length, the id).
async fn records_by_key(pool: &SqlitePool) -> weaver::Result<Vec<(String, usize)>> {
    let rows: Vec<Vec<u8>> = sqlx::query_scalar("SELECT checkpoint FROM weaver_checkpoints")
        .fetch_all(pool)
        .await
        .map_err(|e| Error::storage("example query", e))?;
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for r in rows {
        let id = r
            .get(4)
            .and_then(|&len| r.get(5..5 + usize::from(len)))
            .map_or("?".into(), |id| String::from_utf8_lossy(id).into_owned());
        *counts.entry(id).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    // A fresh file: the one given (which must not exist yet), or this
    // example's own in the temp directory.
    let path = match std::env::args().nth(1) {
        Some(path) if std::path::Path::new(&path).exists() => {
            return Err(Error::invalid_argument(format!(
                "{path} exists: give the path of a new file"
            )));
        }
        Some(path) => path,
        None => {
            let path = std::env::temp_dir().join("weaver-encrypted-example.db");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            path.display().to_string()
        }
    };
    // The recommended options (WAL, full sync, a 30 s busy timeout), on a
    // pool of our own shared by the saver and the store.
    let options = SqliteSaver::connect_options(&format!("sqlite://{path}"))?;
    let pool = SqlitePoolOptions::new()
        .connect_with(options)
        .await
        .map_err(|e| Error::storage("open the example file", e))?;
    migrate::up(&pool, &[Adapter::Checkpoint, Adapter::Store], None).await?;
    let config = RunConfig::thread("ada-1");

    println!("== a turn, sealed with key {}", OLD_KEY.0);
    let old = EncryptedCodec::json([key(OLD_KEY)?])?;
    let graph = chat_graph(&pool, &old)?;
    let input = ChatUpdate::default().message(SECRET);
    let out = graph
        .invoke(Input::update(input), &config)
        .await?
        .complete()?;
    println!("  reply: {}", out.replies.join(" | "));
    let (clear, total) = in_the_clear(&pool, "8-4-1-9").await?;
    println!("  stored payloads holding the secret in the clear: {clear} of {total}");

    println!(
        "\n== rotation: {} added, {} kept for old records",
        NEW_KEY.0, OLD_KEY.0
    );
    let rotated = EncryptedCodec::json([key(OLD_KEY)?, key(NEW_KEY)?])?;
    let graph = chat_graph(&pool, &rotated)?;
    let before = graph.get_state(&config).await?;
    println!("  read back: {:?}", before.values.message);
    let input = ChatUpdate::default().message("and the spare key is under the mat");
    graph
        .invoke(Input::update(input), &config)
        .await?
        .complete()?;
    for (id, n) in records_by_key(&pool).await? {
        println!("  checkpoint records sealed with {id}: {n}");
    }
    let store = SqliteStore::new(pool.clone()).with_encryption(rotated.clone());
    let found = store
        .search(&["users", "ada"], Search::query("vault code").limit(1))
        .await?;
    let memory = found.first().and_then(|i| i.value["memory"].as_str());
    println!("  memory search for \"vault code\": {memory:?}");

    println!("\n== readers without the right key");
    let new_only = EncryptedCodec::json([key(NEW_KEY)?])?;
    let graph = chat_graph(&pool, &new_only)?;
    match graph.get_state_history(&config, History::default()).await {
        Err(e @ Error::Decrypt { .. }) => println!("  only {}: {e}", NEW_KEY.0),
        other => {
            return Err(Error::invalid_argument(format!(
                "expected Decrypt, got {other:?}"
            )));
        }
    }
    let plain = SqliteStore::new(pool.clone());
    match plain.search(&["users", "ada"], Search::new()).await {
        Err(e @ Error::Decrypt { .. }) => println!("  no key (store): {e}"),
        other => {
            return Err(Error::invalid_argument(format!(
                "expected Decrypt, got {other:?}"
            )));
        }
    }

    let hex = |byte: u8| format!("{byte:02x}").repeat(32);
    println!(
        "\ninspect the file: WEAVER_KEYS={}={},{}={} cargo run -p weaver-cli -- --db sqlite://{path} --keys-env WEAVER_KEYS history ada-1",
        OLD_KEY.0,
        hex(OLD_KEY.1),
        NEW_KEY.0,
        hex(NEW_KEY.1)
    );
    Ok(())
}
