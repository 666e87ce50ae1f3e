//! Side effects and human review: a refund is sent to a payment service,
//! then a reviewer signs it off. The run pauses for the reviewer, and the
//! node runs again from its start when resumed; the refund is a journaled
//! effect (`Runtime::effect`), so the resumed node gets the refund the
//! service made instead of asking for a second one. The service is also
//! sent the effect's idempotency key, so even a call cut off before its
//! result was journaled is carried out once.
//!
//! ```text
//! cargo run -p weaver-examples --bin effects
//! ```
//!
//! runs it all in one process (an in-memory saver, the payment service on
//! a thread). Each step can be a process of its own:
//!
//! ```text
//! effects payments                               # the fake payment service: prints `listening <addr>`
//! effects <database-url> <schema> <addr> request # refunds order-1, pauses for the reviewer
//! effects <database-url> <schema> <addr> approve # another process signs it off
//! effects <database-url> <schema> <addr> hang    # refunds, then hangs before the step commits
//! effects <database-url> <schema> <addr> finish  # another process picks the refund up
//! ```
//!
//! `<database-url>` is a PostgreSQL URL (the tables go in `<schema>`) or a
//! SQLite one, `sqlite://<file>` (`<schema>` is then ignored). The payment
//! service answers `POST /refunds` (one refund per `Idempotency-Key`) and
//! `GET /refunds` (how many calls each key got, as JSON).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use weaver::checkpoint::{PostgresSaver, SqliteSaver};
use weaver::config::{LeaseTimes, Multitask};
use weaver::migrate::{self, Adapter, PgSchema};
use weaver::prelude::*;

/// A refund and its review.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Refund {
    /// The order refunded.
    order: String,
    /// The payment service's refund id.
    refund_id: String,
    /// What the reviewer decided.
    decision: String,
}

/// Where the payment service listens, and whether the node hangs after
/// its refund (a worker about to be killed).
#[derive(Clone)]
struct Payments {
    addr: String,
    hang: bool,
}

async fn refund(state: &Refund, rt: &Runtime) -> Result<RefundUpdate, NodeError> {
    let payments = rt
        .context::<Payments>()
        .cloned()
        .ok_or_else(|| NodeError::msg("no payment service configured"))?;
    let order = state.order.clone();
    // Runs once per task: a resume (or another process finishing the step)
    // gets the journaled refund id back.
    let addr = payments.addr.clone();
    let refund_id: String = rt
        .effect("refund", |key| async move {
            tokio::task::spawn_blocking(move || post_refund(&addr, &key, &order))
                .await
                .map_err(|e| format!("the refund call stopped: {e}"))?
        })
        .await?;
    println!("refund {refund_id}");
    if payments.hang {
        println!("hanging before the step commits");
        std::future::pending::<()>().await;
    }
    let decision = rt.interrupt(json!({ "refund_id": refund_id, "order": state.order }))?;
    Ok(RefundUpdate::default()
        .refund_id(refund_id)
        .decision(decision.as_str().unwrap_or("rejected").to_owned()))
}

fn graph(saver: Arc<dyn Saver>) -> weaver::Result<CompiledGraph<Refund>> {
    Graph::<Refund>::new("refunds")
        .add_node("refund", refund)
        .add_sequence([START, "refund", END])
        .compile(Compile::new().checkpointer_arc(saver))
}

// The fake payment service.

/// Calls per idempotency key, and the keys in the order they first came
/// (a key's first call makes the refund, numbered in that order).
type Calls = Arc<Mutex<(BTreeMap<String, u64>, Vec<String>)>>;

/// Serves the payment API on `listener` until the process ends.
fn serve(listener: TcpListener, calls: Calls) {
    for stream in listener.incoming().flatten() {
        let calls = calls.clone();
        std::thread::spawn(move || {
            if let Err(e) = answer(stream, &calls) {
                eprintln!("payments: {e}");
            }
        });
    }
}

/// Answers one request.
fn answer(mut stream: TcpStream, calls: &Calls) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let (mut key, mut length) = (None, 0usize);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "idempotency-key" => key = Some(value.trim().to_owned()),
                "content-length" => length = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut calls = calls.lock().unwrap_or_else(|e| e.into_inner());
    let route: Vec<&str> = request.split_whitespace().take(2).collect();
    let (status, reply) = match (route.as_slice(), key) {
        (["POST", "/refunds"], Some(key)) => {
            let (counts, order) = &mut *calls;
            *counts.entry(key.clone()).or_default() += 1;
            let number = match order.iter().position(|k| *k == key) {
                Some(i) => i + 1,
                None => {
                    order.push(key.clone());
                    order.len()
                }
            };
            ("200 OK", json!({ "refund_id": format!("re_{number}") }))
        }
        (["POST", "/refunds"], None) => {
            ("400 Bad Request", json!({ "error": "no Idempotency-Key" }))
        }
        (["GET", "/refunds"], _) => ("200 OK", json!(calls.0)),
        _ => ("404 Not Found", json!({ "error": "no such route" })),
    };
    let reply = reply.to_string();
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    )
}

/// Sends `POST /refunds` for `order` under `key`; the refund id.
fn post_refund(addr: &str, key: &str, order: &str) -> Result<String, String> {
    let body = json!({ "order": order }).to_string();
    let reply = request(
        addr,
        &format!(
            "POST /refunds HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )?;
    reply["refund_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("the payment service answered {reply}"))
}

/// Sends `raw` to `addr`; the JSON body of a 200 answer.
fn request(addr: &str, raw: &str) -> Result<serde_json::Value, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("cannot reach {addr}: {e}"))?;
    stream
        .write_all(raw.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .map_err(|e| e.to_string())?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("the payment service answered {head}"));
    }
    serde_json::from_str(body).map_err(|e| e.to_string())
}

// The steps.

async fn saver(url: &str, schema: &str) -> weaver::Result<Arc<dyn Saver>> {
    if url.starts_with("sqlite:") {
        return Ok(Arc::new(SqliteSaver::connect(url).await?));
    }
    let pool = sqlx::PgPool::connect(url)
        .await
        .map_err(|e| Error::storage("connect", e))?;
    migrate::up(&PgSchema::new(&pool, schema)?, &[Adapter::Checkpoint], None).await?;
    Ok(Arc::new(PostgresSaver::new(pool).with_prefix(schema)?))
}

/// Runs step `step` of the refund of `order-1` on `saver`.
async fn step(saver: Arc<dyn Saver>, addr: &str, step: &str) -> weaver::Result<()> {
    let graph = graph(saver)?;
    let payments = Payments {
        addr: addr.to_owned(),
        hang: step == "hang",
    };
    // The steps of one refund run one after another, each in its own
    // process, under the thread's lease: a process killed mid-step holds it
    // until it runs out (one second here), then the next step's process
    // takes the thread over and finishes the killed step, the refund coming
    // back from the journal.
    let config = RunConfig::thread("refund-1")
        .lease_times(LeaseTimes::new(Duration::from_secs(1)))
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(30),
        })
        .with_context(payments);
    let outcome = match step {
        "request" | "hang" => {
            let input = RefundUpdate::default().order("order-1".to_owned());
            graph.invoke(input, &config).await?
        }
        "finish" => graph.continue_run(&config).await?,
        "approve" => graph.resume(json!("approved"), &config).await?,
        _ => return Err(usage()),
    };
    match outcome {
        Outcome::Interrupted(interrupts) => {
            println!("waiting for review: {}", interrupts[0].value);
            let snapshot = graph.get_state(&config).await?;
            for e in snapshot.tasks.iter().flat_map(|t| &t.effects) {
                println!("journaled effect `{}` (key {})", e.name, e.key);
            }
        }
        Outcome::Complete(done) => {
            println!(
                "refund {} of {}: {}",
                done.refund_id, done.order, done.decision
            );
        }
    }
    Ok(())
}

/// Everything in one process: the service on a thread, an in-memory saver,
/// two graphs on it standing for the two processes.
async fn demo() -> weaver::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::storage("bind", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::storage("bind", e))?
        .to_string();
    let calls = Calls::default();
    let served = calls.clone();
    std::thread::spawn(move || serve(listener, served));
    let saver: Arc<dyn Saver> = Arc::new(InMemorySaver::new());
    step(saver.clone(), &addr, "request").await?;
    step(saver, &addr, "approve").await?;
    let calls = calls.lock().unwrap_or_else(|e| e.into_inner()).0.clone();
    println!("payment service calls per key: {}", json!(calls));
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => demo().await,
        [payments] if payments == "payments" => {
            let listener =
                TcpListener::bind("127.0.0.1:0").map_err(|e| Error::storage("bind", e))?;
            let addr = listener
                .local_addr()
                .map_err(|e| Error::storage("bind", e))?;
            println!("listening {addr}");
            std::io::stdout().flush().ok();
            serve(listener, Calls::default());
            Ok(())
        }
        [url, schema, addr, which] => step(saver(url, schema).await?, addr, which).await,
        _ => Err(usage()),
    }
}

fn usage() -> Error {
    Error::invalid_argument(
        "usage: effects [payments | <database-url> <schema> <payments-addr> <request|approve|hang|finish>]",
    )
}
