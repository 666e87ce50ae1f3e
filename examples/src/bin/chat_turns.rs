//! Any process can pick up a conversation: runs `turns` turns on one thread
//! of a PostgreSQL database. Each turn loads the latest checkpoint, builds
//! the next state from it and commits it as `commit_order = head + 1`; if
//! another process got there first the turn fails with `VersionConflict`
//! (printed, not retried: the host decides).
//!
//! Usage: `chat_turns <database-url> <schema> <thread> <worker> <turns>`.
//! Prints one line per turn: `commit <n> <id>` or `conflict <n>`.

use serde_json::json;
use weaver::checkpoint::{
    Checkpoint, CheckpointMetadata, CheckpointRef, CheckpointSource, NewCheckpoint, PendingWrite,
    PostgresSaver, Saver,
};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::{Error, Result};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat_turns: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, schema, thread, worker, turns] = args.as_slice() else {
        return Err(Error::invalid_argument(
            "usage: chat_turns <database-url> <schema> <thread> <worker> <turns>",
        ));
    };
    let turns: usize = turns
        .parse()
        .map_err(|_| Error::invalid_argument("turns must be a number"))?;
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| Error::storage("connect", e))?;
    migrate::up(&PgSchema::new(&pool, schema)?, &[Adapter::Checkpoint], None).await?;
    let saver = PostgresSaver::new(pool).with_prefix(schema)?;
    for turn in 0..turns {
        let head = saver
            .get_tuple(&CheckpointRef::latest(thread.clone()))
            .await?;
        let (mut next, parent, order) = match &head {
            Some(h) => (
                h.checkpoint.successor(),
                Some(h.checkpoint.id.clone()),
                h.commit_order + 1,
            ),
            None => (Checkpoint::empty(), None, 1),
        };
        // The conversation: append this turn's message to the transcript.
        let mut messages = next
            .channel_values
            .get("messages")
            .cloned()
            .unwrap_or_else(|| json!([]));
        if let Some(list) = messages.as_array_mut() {
            list.push(json!(format!("{worker}: turn {turn}")));
        }
        next.channel_values.insert("messages".into(), messages);
        let id = next.id.clone();
        let mut metadata = CheckpointMetadata::new(CheckpointSource::Loop, order as i64);
        metadata.extra.insert("writer".into(), json!(worker));
        let new = NewCheckpoint {
            thread_id: thread.clone(),
            checkpoint_ns: String::new(),
            parent_id: parent,
            checkpoint: next,
            metadata,
            commit_order: Some(order),
        };
        let writes = PendingWrite::for_task(&id, worker, [("messages".to_owned(), json!(turn))]);
        match saver.put_checkpoint_with_writes(new, writes).await {
            Ok(_) => println!("commit {order} {id}"),
            Err(Error::VersionConflict { attempted, .. }) => println!("conflict {attempted}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
