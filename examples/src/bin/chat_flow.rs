//! A sign-up questionnaire as a chat flow, one turn per process: ask a
//! name, validate it, ask an email (re-asking on an invalid one), thank
//! and finish. Each run of the program is one turn of the conversation: it
//! builds the flow, loads the conversation's latest snapshot from the
//! SQLite file, handles the message and exits, keeping nothing of its own.
//!
//! ```text
//! chat_flow <sqlite-file> <conversation> <message> [--at <version>] [--payload <json>]
//! ```
//!
//! `--at <version>` takes the turn only if the conversation is still at
//! that version (as a host does that showed the user version N): two
//! processes started with the same version race, and the loser prints
//! `conflict` (the engine never retries). A `{"skip": true}` payload skips
//! the email question.
//!
//! Prints `bot: <message>` for each message the turn emitted, then
//! `version <n>` and `done` or `waiting at <node>`. The messages are
//! printed, never stored: the file holds the answers and how far the
//! conversation is.

use weaver::chat::{
    Action, ChatFlow, ChatFlowBuilder, ChatNode, ChatOptions, TurnInput, Validation,
};
use weaver::checkpoint::SqliteSaver;
use weaver::prelude::*;

/// The answers.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Signup {
    name: String,
    email: String,
}

fn questionnaire(saver: SqliteSaver, conversation: &str) -> weaver::Result<ChatFlow<Signup>> {
    let ask_name = ChatNode::new("ask_name")
        .action(|_, _| Action::say("What is your name?"))
        .validate("Please tell me your name.", |_, reply| {
            match reply.user_message.trim() {
                "" => Validation::Invalid,
                name => Validation::valid_with(SignupUpdate::default().name(name)),
            }
        });
    let ask_email = ChatNode::new("ask_email")
        .action(|s: &Signup, _| {
            Action::say(format!("Nice to meet you, {}. What is your email?", s.name))
        })
        .validate(
            "That does not look like an email address. Please try again.",
            |_, reply| {
                if reply.payload.as_ref().and_then(|p| p.get("skip")) == Some(&true.into()) {
                    return Validation::valid();
                }
                let email = reply.user_message.trim();
                match email.split_once('@') {
                    Some((user, domain)) if !user.is_empty() && domain.contains('.') => {
                        Validation::valid_with(SignupUpdate::default().email(email))
                    }
                    _ => Validation::Invalid,
                }
            },
        );
    let done = ChatNode::new("done")
        .action(|s: &Signup, _| {
            let to = if s.email.is_empty() {
                "nowhere"
            } else {
                &s.email
            };
            Action::say(format!("Thanks, {}! We will write to {to}.", s.name))
        })
        .auto_advance();
    ChatFlowBuilder::new("signup")
        .add_node(ask_name)
        .add_node(ask_email)
        .add_node(done)
        .add_edge(START, "ask_name")
        .add_edge("ask_name", "ask_email")
        .add_edge("ask_email", "done")
        .add_edge("done", END)
        .compile(ChatOptions::new(conversation, saver))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat_flow: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> weaver::Result<()> {
    let usage = || {
        Error::invalid_argument(
            "usage: chat_flow <sqlite-file> <conversation> <message> [--at <version>] [--payload <json>]",
        )
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, conversation, message, options @ ..] = args.as_slice() else {
        return Err(usage());
    };
    let mut at = None;
    let mut input = TurnInput::new(message.clone());
    let mut rest = options.iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().ok_or_else(usage)?;
        match flag.as_str() {
            "--at" => {
                let v: u64 = value
                    .parse()
                    .map_err(|_| Error::invalid_argument("--at takes a version number"))?;
                at = Some(v);
            }
            "--payload" => {
                let payload = serde_json::from_str(value)
                    .map_err(|e| Error::invalid_argument(format!("--payload is not JSON: {e}")))?;
                input = input.payload(payload);
            }
            _ => return Err(usage()),
        }
    }
    let saver = SqliteSaver::connect(&format!("sqlite://{file}")).await?;
    let flow = questionnaire(saver, conversation)?;
    let turn = match at {
        Some(version) => flow.turn_at(version, input).await,
        None => flow.turn(input).await,
    };
    let turn = match turn {
        Ok(turn) => turn,
        Err(Error::VersionConflict {
            thread_id,
            attempted,
            ..
        }) => {
            // `attempted` is the version the turn would have stored: the
            // conversation was not (or no longer) at the one before it.
            println!(
                "conflict: conversation {thread_id} is not at version {}; version {attempted} was not stored",
                attempted.saturating_sub(1)
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    for message in &turn.messages {
        println!("bot: {message}");
    }
    println!("version {}", turn.version);
    match (turn.done, flow.tracker().node) {
        (true, _) => println!("done"),
        (false, Some(node)) => println!("waiting at {node}"),
        (false, None) => println!("waiting"),
    }
    Ok(())
}
