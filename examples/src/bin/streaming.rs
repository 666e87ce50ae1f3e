//! Streaming from inside a node: a fake model streams its answer token by
//! token (`Runtime::stream().message_chunk`), a node reports progress
//! (`custom`), and the application prints each event as it arrives, long
//! before the run ends. What is streamed is never stored: the thread keeps
//! only the state.
//!
//! ```text
//! cargo run -p weaver-examples --bin streaming
//! ```

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;
use weaver::prelude::*;
use weaver::{MessageChunk, StreamEvent, StreamItem, StreamMode};

/// A question and its answer.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Chat {
    /// What the user asked.
    question: String,
    /// The model's whole answer, once it finished.
    answer: String,
}

/// The tokens the fake model answers with.
const TOKENS: [&str; 8] = [
    "Streams ", "show ", "each ", "token ", "as ", "it ", "comes", ".",
];

fn prepare(state: &Chat, rt: &Runtime) -> Result<ChatUpdate, NodeError> {
    // A progress report for whoever watches: not part of the state.
    rt.stream()
        .custom(json!({ "status": "prompt ready", "question": state.question }))?;
    Ok(ChatUpdate::default())
}

/// A fake model: each token takes a few milliseconds to "generate", and is
/// streamed as soon as it exists; the whole text is the node's update.
async fn model(_: &Chat, rt: &Runtime) -> ChatUpdate {
    let mut answer = String::new();
    for token in TOKENS {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let chunk = MessageChunk::new(token)
            .id("reply-1")
            .metadata("model", "fake-llm");
        rt.stream().message_chunk(chunk);
        answer.push_str(token);
    }
    ChatUpdate::default().answer(answer)
}

#[tokio::main]
async fn main() -> weaver::Result<()> {
    let graph = Graph::<Chat>::new("streaming")
        .add_node("prepare", prepare)
        .add_node("model", model)
        .add_sequence([START, "prepare", "model", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    let config = RunConfig::thread("chat-1");
    let input = Chat {
        question: "What does streaming show?".into(),
        ..Chat::default()
    };
    let modes = [
        StreamMode::Updates,
        StreamMode::Custom,
        StreamMode::Messages,
    ];
    let started = Instant::now();
    let mut stream = graph.stream_with_modes(input, &config, modes);
    let (mut tokens, mut streamed) = (0, String::new());
    while let Some(item) = stream.next().await {
        let at = started.elapsed().as_millis();
        match item {
            StreamItem::Event(StreamEvent::Custom { task, value }) => {
                println!("custom from {} (step {}): {value}", task.node, task.step);
            }
            StreamItem::Event(StreamEvent::Message { task, chunk }) => {
                tokens += 1;
                streamed.push_str(&chunk.content);
                let message = chunk.id.as_deref().unwrap_or("?");
                println!(
                    "token {tokens} from {} (message {message}): {:?} at +{at} ms",
                    task.node, chunk.content
                );
            }
            StreamItem::Event(StreamEvent::Update { node, .. }) => {
                println!("update from {node}");
            }
            StreamItem::Event(_) => {}
            StreamItem::Done(result) => {
                let end = result?.complete()?;
                println!("streamed text: {streamed:?}");
                println!("final answer: {:?}", end.answer);
            }
        }
    }
    // The thread stored the answer, not the tokens.
    let state = graph.get_state(&config).await?;
    println!("stored answer: {:?}", state.values.answer);
    Ok(())
}
