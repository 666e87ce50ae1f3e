//! Several worker processes take turns on one conversation, one run at a
//! time: each turn (a model step, a tool step, an approval pause answered
//! at once) holds the thread's lease from its input to its end, so no turn
//! is built on another's unfinished one, whatever the durability.
//!
//! ```text
//! chat_workers <database-url> <schema> <thread> <worker> <turns> <strategy> <lease-ms>
//! ```
//!
//! `<database-url>` and `<schema>` as for `chat_turns` (`-` for a
//! `sqlite://` URL, the database for a `mongodb://` one). `<strategy>` is `reject`, `enqueue`, `interrupt` or
//! `rollback` (the waiting ones wait up to 30 s); `<lease-ms>` is the lease
//! time, renewed every third of it.
//!
//! Prints one line per turn: `done <worker>:<turn>`, `busy <worker>:<turn>`
//! (`ThreadBusy`) or `stopped <worker>:<turn>` (a newer run stopped it).

use std::time::Duration;

use serde_json::json;
use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::config::{LeaseTimes, Multitask};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;

/// The conversation: every message of every turn.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Chat {
    #[reducer(append)]
    messages: Vec<String>,
}

fn user_of(c: &Chat) -> String {
    c.messages
        .iter()
        .rev()
        .find(|m| !m.contains(' '))
        .cloned()
        .unwrap_or_default()
}

async fn model(c: &Chat) -> ChatUpdate {
    // Stands in for a model call, so that turns of two processes overlap.
    tokio::time::sleep(Duration::from_millis(3)).await;
    ChatUpdate::default().messages(vec![format!("assistant {}", user_of(c))])
}

async fn tool(c: &Chat) -> ChatUpdate {
    tokio::time::sleep(Duration::from_millis(2)).await;
    ChatUpdate::default().messages(vec![format!("tool {}", user_of(c))])
}

fn approve(c: &Chat, rt: &Runtime) -> Result<ChatUpdate, NodeError> {
    let answer = rt.interrupt(json!("send the reply?"))?;
    let answer = answer.as_str().unwrap_or("no");
    Ok(ChatUpdate::default().messages(vec![format!("{answer} {}", user_of(c))]))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat_workers: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn strategy(name: &str) -> weaver::Result<Multitask> {
    let wait = Duration::from_secs(30);
    Ok(match name {
        "reject" => Multitask::Reject,
        "enqueue" => Multitask::Enqueue { wait },
        "interrupt" => Multitask::Interrupt { wait },
        "rollback" => Multitask::Rollback { wait },
        other => return Err(Error::invalid_argument(format!("unknown strategy {other}"))),
    })
}

async fn run() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [
        _,
        url,
        schema,
        thread,
        worker,
        turns,
        strategy_name,
        lease_ms,
    ] = args.as_slice()
    else {
        return Err(Error::invalid_argument(
            "usage: chat_workers <database-url> <schema> <thread> <worker> <turns> <strategy> <lease-ms>",
        ));
    };
    let number = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| Error::invalid_argument(format!("{what} must be a number")))
    };
    let turns = number(turns, "turns")?;
    let lease = Duration::from_millis(number(lease_ms, "lease-ms")?);
    let compile = Compile::new();
    let compile = if url.starts_with("mongodb:") {
        let saver = weaver::mongo::MongoSaver::connect(url, schema, "weaver_").await?;
        saver.setup().await?;
        compile.checkpointer(saver)
    } else if url.starts_with("sqlite:") {
        compile.checkpointer(SqliteSaver::connect(url).await?)
    } else {
        let pool = sqlx::PgPool::connect(url)
            .await
            .map_err(|e| Error::storage("connect", e))?;
        migrate::up(&PgSchema::new(&pool, schema)?, &[Adapter::Checkpoint], None).await?;
        compile.checkpointer(PostgresSaver::new(pool).with_prefix(schema)?)
    };
    let graph = graph! {
        name: "Workers",
        state: Chat,
        nodes: [model, tool, approve],
        edges: [START -> model -> tool -> approve -> END],
    }
    .compile(compile)?;
    for turn in 0..turns {
        let label = format!("{worker}:{turn}");
        // The turn's holder name keeps the thread through its pause.
        let config = RunConfig::thread(thread.clone())
            .multitask(strategy(strategy_name)?)
            .lease_times(LeaseTimes::new(lease))
            .lease_holder(label.clone());
        let input = ChatUpdate::default().messages(vec![label.clone()]);
        let outcome = match graph.invoke(input, &config).await {
            Ok(Outcome::Interrupted(_)) => graph.resume(json!("approved"), &config).await,
            other => other,
        };
        match outcome {
            Ok(_) => println!("done {label}"),
            Err(Error::ThreadBusy { .. }) => println!("busy {label}"),
            // Stopped while running, or while paused: a newer run took the
            // thread from the pause, which its input replaced.
            Err(Error::RunStopped { .. } | Error::NoPendingInterrupt { .. }) => {
                println!("stopped {label}")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
