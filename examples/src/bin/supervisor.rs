//! A supervisor routing between two agents, each a subgraph with a state
//! of its own: a researcher (search, then summarize) and a writer (draft,
//! then a review, itself a subgraph, that asks for approval). The approval,
//! two levels below the supervisor, pauses the whole run; a second process
//! answers it, the writer and its review continue from their checkpoints in
//! their own namespaces (the draft is not written again), and the
//! supervisor finishes.
//!
//! ```text
//! supervisor desk.db ask               # runs until the writer asks for approval
//! supervisor desk.db approve "ship it" # another process answers and finishes
//! ```
//!
//! Each process prints `ran <agent>/<node>` for every node that runs in it.

use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;

/// The supervisor's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Desk {
    /// What the user asked for.
    request: String,
    /// The researcher's findings.
    research: Vec<String>,
    /// The writer's approved text.
    answer: String,
    /// Which agents ran, in order.
    #[reducer(append)]
    log: Vec<String>,
}

/// The researcher's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Research {
    topic: String,
    #[reducer(append)]
    notes: Vec<String>,
}

/// The writer's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Writing {
    notes: Vec<String>,
    draft: String,
    approved: String,
}

fn ran(node: &str) {
    println!("ran {node}");
}

fn researcher() -> weaver::Result<CompiledGraph<Research>> {
    Graph::<Research>::new("researcher")
        .add_node("search", |s: &Research| {
            ran("researcher/search");
            ResearchUpdate::default().notes(vec![format!("{} is fast", s.topic)])
        })
        .add_node("summarize", |s: &Research| {
            ran("researcher/summarize");
            ResearchUpdate::default().notes(vec![format!("{} notes", s.notes.len())])
        })
        .add_sequence([START, "search", "summarize", END])
        .compile(Compile::new())
}

/// The writer's review, a subgraph of the writer sharing its state: the
/// approval pauses two levels below the supervisor.
fn review() -> weaver::Result<CompiledGraph<Writing>> {
    Graph::<Writing>::new("review")
        .add_node("approve", |s: &Writing, rt: &Runtime| {
            ran("writer/review/approve");
            let answer = rt.interrupt(serde_json::json!({ "approve": s.draft }))?;
            let verdict = answer.as_str().unwrap_or_default();
            Ok::<_, NodeError>(
                WritingUpdate::default().approved(format!("{} ({verdict})", s.draft)),
            )
        })
        .add_sequence([START, "approve", END])
        .compile(Compile::new())
}

fn writer() -> weaver::Result<CompiledGraph<Writing>> {
    Graph::<Writing>::new("writer")
        .add_node("draft", |s: &Writing| {
            ran("writer/draft");
            WritingUpdate::default().draft(format!("Draft: {}", s.notes.join("; ")))
        })
        .add_subgraph("review", review()?)
        .add_sequence([START, "draft", "review", END])
        .compile(Compile::new())
}

/// Where the supervisor sends the request next.
fn route(s: &Desk) -> &'static str {
    if s.research.is_empty() {
        "researcher"
    } else if s.answer.is_empty() {
        "writer"
    } else {
        END
    }
}

/// The supervisor graph on `saver`; the agents run on it too, each under
/// its own namespace.
fn supervisor(saver: SqliteSaver) -> weaver::Result<CompiledGraph<Desk>> {
    Graph::<Desk>::new("supervisor")
        .add_node("supervisor", |_: &Desk| {
            ran("supervisor");
            DeskUpdate::default()
        })
        .add_subgraph_with(
            "researcher",
            researcher()?,
            |s: &Desk| Research {
                topic: s.request.clone(),
                ..Research::default()
            },
            |done: Research| {
                DeskUpdate::default()
                    .research(done.notes)
                    .log(vec!["researcher".into()])
            },
        )
        .add_subgraph_with(
            "writer",
            writer()?,
            |s: &Desk| Writing {
                notes: s.research.clone(),
                ..Writing::default()
            },
            |done: Writing| {
                DeskUpdate::default()
                    .answer(done.approved)
                    .log(vec!["writer".into()])
            },
        )
        .add_edge(START, "supervisor")
        .add_conditional_edges("supervisor", route, ["researcher", "writer", END])
        .add_edge("researcher", "supervisor")
        .add_edge("writer", "supervisor")
        .compile(Compile::new().checkpointer(saver))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (file, step) = match args.as_slice() {
        [file, step, ..] => (file, step.as_str()),
        _ => return Err(usage()),
    };
    let saver = SqliteSaver::connect(&format!("sqlite://{file}")).await?;
    let graph = supervisor(saver)?;
    let config = RunConfig::thread("desk-1").durability(Durability::Sync);
    let outcome = match (step, args.get(2)) {
        ("ask", None) => {
            let request = Desk {
                request: "weaver".into(),
                ..Desk::default()
            };
            graph.invoke(request, &config).await?
        }
        ("approve", Some(verdict)) => {
            // What the paused agent waits for, read from the file.
            let snapshot = graph.get_state_subgraphs(&config).await?;
            for task in &snapshot.tasks {
                if let Some(agent) = &task.subgraph {
                    println!(
                        "waiting in `{}` under namespace {}",
                        task.name, agent.config.checkpoint_ns
                    );
                    for (node, _, inner) in &agent.subgraphs {
                        println!(
                            "  waiting in `{node}` under namespace {}",
                            inner.config.checkpoint_ns
                        );
                    }
                }
            }
            graph.resume(serde_json::json!(verdict), &config).await?
        }
        _ => return Err(usage()),
    };
    match outcome {
        Outcome::Interrupted(interrupts) => {
            for i in &interrupts {
                println!("paused in `{}`, asking {}", i.node, i.value);
            }
        }
        Outcome::Complete(done) => {
            println!("answer: {}; agents: {:?}", done.answer, done.log);
        }
    }
    Ok(())
}

fn usage() -> Error {
    Error::invalid_argument("usage: supervisor <sqlite-file> <ask | approve VERDICT>")
}
