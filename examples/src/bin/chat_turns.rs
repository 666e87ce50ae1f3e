//! Any process can pick up a conversation (the chat-graph promise): each
//! turn rebuilds nothing but the graph, loads the thread's latest checkpoint,
//! runs the turn and commits it. With `Durability::Exit` a turn is one
//! checkpoint, so it commits whole or not at all: if another process got
//! there first the turn fails with `VersionConflict` (printed, not retried:
//! the host decides whether re-running the input is safe). It takes no
//! lease ([`Multitask::Race`]): `chat_workers` shows the same conversation
//! with one run at a time, where no turn is lost.
//!
//! ```text
//! chat_turns <database-url> <schema> <thread> <worker> <turns>
//! ```
//!
//! `<database-url>` is a PostgreSQL URL (the tables go in `<schema>`), a
//! SQLite one, `sqlite://<file>` (`<schema>` must then be `-`: a SQLite
//! file is its own namespace), or a MongoDB one, `mongodb://…` (`<schema>`
//! is then the database; the collections are prefixed `weaver_`). Each
//! process migrates (on MongoDB: sets up) the database first, so processes
//! started at once on a new SQLite file also race on creating it.
//!
//! Prints one line per turn: `commit <worker>:<turn>` or `conflict <worker>:<turn>`.

use std::time::Duration;

use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::config::Multitask;
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;
use weaver::state::SharedVec;

/// The conversation: every user message and every reply.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Chat {
    /// The transcript: a delta channel, so each checkpoint stores only the
    /// messages of its step (and the whole transcript once every 32), held
    /// in a `SharedVec` so that copies of the state (history snapshots)
    /// share the messages instead of copying them.
    #[reducer(delta)]
    messages: SharedVec<String>,
}

async fn reply(state: &Chat) -> ChatUpdate {
    // Stands in for a model call, so that two processes' turns overlap.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let last = state.messages.last().cloned().unwrap_or_default();
    ChatUpdate::default().messages(vec![format!("echo: {last}")])
}

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

async fn run() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, schema, thread, worker, turns] = args.as_slice() else {
        return Err(Error::invalid_argument(
            "usage: chat_turns <database-url> <schema> <thread> <worker> <turns>",
        ));
    };
    let turns: usize = turns
        .parse()
        .map_err(|_| Error::invalid_argument("turns must be a number"))?;
    let compile = Compile::new();
    let compile = if url.starts_with("mongodb:") {
        let saver = weaver::mongo::MongoSaver::connect(url, schema, "weaver_").await?;
        saver.setup().await?;
        compile.checkpointer(saver)
    } else if url.starts_with("sqlite:") {
        if schema != "-" {
            return Err(Error::invalid_argument(
                "a SQLite database takes `-` for <schema>",
            ));
        }
        compile.checkpointer(SqliteSaver::connect(url).await?)
    } else {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| Error::storage("connect", e))?;
        migrate::up(&PgSchema::new(&pool, schema)?, &[Adapter::Checkpoint], None).await?;
        compile.checkpointer(PostgresSaver::new(pool).with_prefix(schema)?)
    };
    let graph = graph! {
        name: "Chat",
        state: Chat,
        nodes: [reply],
        edges: [START -> reply -> END],
    }
    .compile(compile)?;
    // No lease: the processes race on the thread's commit orders, and a
    // turn that lost is reported (`chat_workers` takes turns instead).
    let config = RunConfig::thread(thread.clone())
        .durability(Durability::Exit)
        .multitask(Multitask::Race);
    for turn in 0..turns {
        let label = format!("{worker}:{turn}");
        let input = ChatUpdate::default().messages(vec![label.clone()]);
        match graph.invoke(input, &config).await {
            Ok(_) => println!("commit {label}"),
            Err(Error::VersionConflict { .. }) => println!("conflict {label}"),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
