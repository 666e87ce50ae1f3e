//! Every example runs and prints what its story promises.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weaver::Saver;
use weaver::checkpoint::{CheckpointRef, SqliteSaver};

fn run(bin: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("example starts");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{bin} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A child process, killed when dropped (a failed test leaves none behind).
struct Killed(Option<std::process::Child>);

impl Killed {
    fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not killed yet")
    }

    /// Kills it (SIGKILL on Unix) and returns what it printed.
    fn kill(&mut self) -> std::process::Output {
        let mut child = self.0.take().expect("not killed yet");
        child.kill().unwrap();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn temp_db(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("weaver-example-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("quickstart.db");
    (dir, file.display().to_string())
}

#[test]
fn quickstart_runs_twice_on_one_sqlite_file() {
    let (dir, db) = temp_db("quickstart");
    let first = run(env!("CARGO_BIN_EXE_quickstart"), &[&db]);
    assert!(first.contains("thread-1 had 0 checkpoints"), "{first}");
    assert!(
        first.contains(r#"final state: foo="b" bar=["a", "b"]"#),
        "{first}"
    );
    assert!(
        first.contains(r#"step -1  input  next=["__start__"]"#),
        "{first}"
    );
    assert!(first.contains(r#"foo="forked" next=["node_b"]"#), "{first}");
    assert!(first.contains("thread-1 now has 6 checkpoints"), "{first}");
    assert!(
        first.contains(&format!("--db sqlite://{db} history thread-1")),
        "{first}"
    );
    // A second process extends the same thread from the file.
    let second = run(env!("CARGO_BIN_EXE_quickstart"), &[&db]);
    assert!(second.contains("thread-1 had 6 checkpoints"), "{second}");
    assert!(second.contains(r#"bar=["a", "b", "a", "b"]"#), "{second}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn human_in_the_loop_pauses_and_resumes() {
    let out = run(env!("CARGO_BIN_EXE_human_in_the_loop"), &[]);
    assert!(out.contains(r#"paused in `review`"#), "{out}");
    assert!(out.contains(r#"asks {"draft":"Approve this?"}"#), "{out}");
    assert!(out.contains(r#"waiting on ["review"]"#), "{out}");
    assert!(
        out.contains(r#"decision: approved; log: ["drafted", "reviewed: approved"]"#),
        "{out}"
    );
}

#[test]
fn a_review_paused_in_one_process_is_answered_in_another() {
    let (dir, db) = temp_db("hitl");
    let bin = env!("CARGO_BIN_EXE_human_in_the_loop");
    let asked = run(bin, &[&db, "ask"]);
    assert!(asked.contains("paused in `review`"), "{asked}");
    // A new process finds the pause in the file and answers it.
    let answered = run(bin, &[&db, "answer", "approved later"]);
    assert!(
        answered.contains(r#"waiting on ["review"]; state so far: ["drafted"]"#),
        "{answered}"
    );
    assert!(
        answered
            .contains(r#"decision: approved later; log: ["drafted", "reviewed: approved later"]"#),
        "{answered}"
    );
    // A third finds nothing left to answer: a typed error, nothing run.
    let again = Command::new(bin)
        .args([db.as_str(), "answer", "twice"])
        .output()
        .expect("example starts");
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("NoPendingInterrupt"), "{stderr}");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains("waiting on []"), "{stdout}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_step_cut_off_by_a_killed_process_is_finished_by_another() {
    let (dir, db) = temp_db("crash");
    let bin = env!("CARGO_BIN_EXE_recover_after_crash");
    let mut hung = Killed(Some(
        Command::new(bin)
            .args([db.as_str(), "hang"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("example starts"),
    ));
    // Killed (SIGKILL: no cleanup) once the seven quick reviewers' writes
    // are stored; the eighth is still waiting.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stored = rt.block_on(async {
        let saver = SqliteSaver::connect(&format!("sqlite://{db}"))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tuple = saver
                .get_tuple(&CheckpointRef::latest("review-1"))
                .await
                .unwrap();
            let done: BTreeSet<String> = tuple
                .iter()
                .flat_map(|t| &t.pending_writes)
                .map(|w| w.task_path.clone())
                .filter(|node| node != "__start__")
                .collect();
            if done.len() == 7 || Instant::now() > deadline {
                saver.pool().close().await;
                return done;
            }
            if let Some(status) = hung.child().try_wait().unwrap() {
                let out = hung.kill();
                panic!(
                    "the hanging run ended by itself: {status}\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let killed = hung.kill();
    assert!(!stored.contains("budget"), "{stored:?}");
    assert_eq!(stored.len(), 7, "{stored:?}");
    let ran = String::from_utf8_lossy(&killed.stdout).into_owned();
    assert_eq!(ran.lines().count(), 7, "{ran}");
    assert!(!ran.contains("ran budget"), "{ran}");

    // Another process finishes the step: only the unfinished reviewer runs.
    let out = run(bin, &[&db, "finish"]);
    let ran: Vec<&str> = out.lines().filter(|l| l.starts_with("ran ")).collect();
    assert_eq!(ran, ["ran budget"], "{out}");
    assert!(
        out.contains(
            r#"summary: 8 reviews; reviews: ["budget: ok", "facts: ok", "legal: ok", "links: ok", "security: ok", "spelling: ok", "style: ok", "tone: ok"]"#
        ),
        "{out}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn time_travel_replays_forks_restores_and_prunes() {
    let out = run(env!("CARGO_BIN_EXE_time_travel"), &[]);
    assert!(
        out.contains(
            r#"replayed from before `write`: ["researched otters", "wrote about otters"]"#
        ),
        "{out}"
    );
    assert!(
        out.contains(r#"forked with a new topic: ["researched otters", "wrote about beavers"]"#),
        "{out}"
    );
    assert!(
        out.contains(r#"original branch unchanged: ["researched otters", "wrote about otters"]"#),
        "{out}"
    );
    assert!(out.contains(r#"version 3: ["researched otters"]"#), "{out}");
    assert!(
        out.contains("8 checkpoints on the thread; kept the newest 4 of them, deleted 4"),
        "{out}"
    );
    assert!(
        out.contains(r#"latest after pruning: ["researched otters", "wrote about beavers"]"#),
        "{out}"
    );
}

#[test]
fn memory_store_is_shared_across_threads() {
    let out = run(env!("CARGO_BIN_EXE_memory_store"), &[]);
    assert!(
        out.contains("-> I remember: I like pizza with extra basil"),
        "{out}"
    );
    assert!(
        out.contains("-> I remember: I play jazz piano on weekends"),
        "{out}"
    );
    assert!(
        out.contains(
            "bob: which pizza should I order?\n        -> I don't know anything about that yet."
        ),
        "{out}"
    );
    assert!(
        out.contains(r#"namespaces with memories: [["users", "alice"]]"#),
        "{out}"
    );
}

#[test]
fn encrypted_keeps_secrets_out_of_the_file_and_rotates_keys() {
    let (dir, db) = temp_db("encrypted");
    let out = run(env!("CARGO_BIN_EXE_encrypted"), &[&db]);
    for line in [
        "stored payloads holding the secret in the clear: 0 of 7",
        r#"read back: "the vault code is 8-4-1-9""#,
        "checkpoint records sealed with 2026-11: 3",
        "checkpoint records sealed with 2026-12: 3",
        r#"memory search for "vault code": Some("the vault code is 8-4-1-9")"#,
        "unknown key id `2026-11`",
        "it is encrypted",
    ] {
        assert!(out.contains(line), "missing `{line}` in:\n{out}");
    }
    // The file holds the secret nowhere, WAL included.
    let secret = b"8-4-1-9";
    let main = std::fs::read(&db).expect("the example's file");
    let wal = std::fs::read(format!("{db}-wal")).unwrap_or_default();
    for (name, bytes) in [("file", main), ("WAL", wal)] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret),
            "the secret is in the {name}"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}

/// The PostgreSQL the examples use.
fn pg_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

#[test]
fn map_reduce_summarises_sixteen_documents_in_the_order_sent() {
    let (dir, db) = temp_db("map-reduce");
    let out = run(
        env!("CARGO_BIN_EXE_map_reduce"),
        &[&format!("sqlite://{db}"), "-", "run"],
    );
    // The tasks finish later documents first; the summaries merge in the
    // order the documents were sent.
    let ran: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("summarized "))
        .collect();
    assert_eq!(ran.len(), 16, "{out}");
    assert_eq!(ran[0], "summarized doc-16", "{out}");
    let expected: Vec<String> = (1..=16).map(|i| format!("doc-{i:02}: TOPIC{i}")).collect();
    assert!(
        out.contains(&format!("report: 16 summaries: {}", expected.join(", "))),
        "{out}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The documents whose `summarize` task has stored its result at the
/// thread's latest checkpoint.
async fn summarized(saver: &dyn Saver) -> BTreeSet<String> {
    let tuple = saver
        .get_tuple(&CheckpointRef::latest("corpus-1"))
        .await
        .unwrap();
    tuple
        .iter()
        .flat_map(|t| &t.pending_writes)
        .filter(|w| w.channel == "summaries")
        .filter_map(|w| w.value[0].as_str().map(|s| s[..6].to_owned()))
        .collect()
}

/// Runs `map_reduce <url> <schema> hang`, kills it (SIGKILL) once fifteen
/// of the sixteen sends stored their results, then finishes the thread in
/// another process: only the sixteenth task runs.
fn killed_mid_fan_out(url: &str, schema: &str, saver: impl AsyncFn() -> Box<dyn Saver>) {
    let bin = env!("CARGO_BIN_EXE_map_reduce");
    let mut hung = Killed(Some(
        Command::new(bin)
            .args([url, schema, "hang"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("example starts"),
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stored = rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // The schema exists once the child migrated it.
            if let Some(saver) = saver_when_ready(&saver).await {
                let done = summarized(&*saver).await;
                if done.len() == 15 || Instant::now() > deadline {
                    return done;
                }
            }
            if let Some(status) = hung.child().try_wait().unwrap() {
                let out = hung.kill();
                panic!(
                    "the hanging run ended by itself: {status}\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let killed = hung.kill();
    assert_eq!(stored.len(), 15, "{stored:?}");
    assert!(!stored.contains("doc-16"), "{stored:?}");
    let ran = String::from_utf8_lossy(&killed.stdout).into_owned();
    assert_eq!(ran.lines().count(), 15, "{ran}");

    let out = run(bin, &[url, schema, "finish"]);
    let ran: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("summarized "))
        .collect();
    assert_eq!(ran, ["summarized doc-16"], "{out}");
    let expected: Vec<String> = (1..=16).map(|i| format!("doc-{i:02}: TOPIC{i}")).collect();
    assert!(
        out.contains(&format!("report: 16 summaries: {}", expected.join(", "))),
        "{out}"
    );
}

/// `saver()`, or `None` while what it reads is not there yet (the child
/// has not created the database or its tables).
async fn saver_when_ready(saver: &impl AsyncFn() -> Box<dyn Saver>) -> Option<Box<dyn Saver>> {
    let s = saver().await;
    match s.get_tuple(&CheckpointRef::latest("corpus-1")).await {
        Ok(_) => Some(s),
        Err(_) => None,
    }
}

#[test]
fn a_fan_out_cut_off_by_a_killed_process_is_finished_by_another_on_sqlite() {
    let (dir, db) = temp_db("map-reduce-kill");
    let url = format!("sqlite://{db}");
    killed_mid_fan_out(&url, "-", async || {
        Box::new(SqliteSaver::connect(&url).await.unwrap()) as Box<dyn Saver>
    });
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_fan_out_cut_off_by_a_killed_process_is_finished_by_another_on_postgres() {
    let url = pg_url();
    let schema = format!("weaver_mr_{}", std::process::id());
    killed_mid_fan_out(&url, &schema, async || {
        let pool = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| {
            panic!("PostgreSQL is unreachable at {url} ({e}): start it or set DATABASE_URL")
        });
        Box::new(
            weaver::checkpoint::PostgresSaver::new(pool)
                .with_prefix(&schema)
                .unwrap(),
        ) as Box<dyn Saver>
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await
        .unwrap();
    });
}

#[test]
fn streaming_prints_tokens_as_they_arrive_then_the_update_and_the_whole_text() {
    let out = run(env!("CARGO_BIN_EXE_streaming"), &[]);
    let lines: Vec<&str> = out.lines().collect();
    let find = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix));
    let custom = find("custom from prepare (step 1): ").expect(&out);
    assert!(
        lines[custom].contains(r#""status":"prompt ready""#),
        "{out}"
    );
    // The tokens, numbered in the order they came, each from the model.
    let tokens: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("token "))
        .map(|(i, l)| (i, *l))
        .collect();
    assert_eq!(tokens.len(), 8, "{out}");
    let mut text = String::new();
    for (n, (_, line)) in tokens.iter().enumerate() {
        let prefix = format!("token {} from model (message reply-1): \"", n + 1);
        let rest = line.strip_prefix(&prefix).expect(line);
        let (token, _) = rest.split_once("\" at +").expect(line);
        text.push_str(token);
    }
    assert_eq!(text, "Streams show each token as it comes.", "{out}");
    // All of them before the model's update, after prepare's.
    let update = find("update from model").expect(&out);
    let prepared = find("update from prepare").expect(&out);
    assert!(prepared < tokens[0].0 && tokens[7].0 < update, "{out}");
    assert!(custom < prepared, "{out}");
    let whole = format!("{text:?}");
    assert!(out.contains(&format!("streamed text: {whole}")), "{out}");
    assert!(out.contains(&format!("final answer: {whole}")), "{out}");
    assert!(out.contains(&format!("stored answer: {whole}")), "{out}");
}

#[test]
fn a_supervisor_agent_paused_in_one_process_is_approved_in_another() {
    let (dir, db) = temp_db("supervisor");
    let bin = env!("CARGO_BIN_EXE_supervisor");
    let asked = run(bin, &[&db, "ask"]);
    assert!(asked.contains("ran researcher/search"), "{asked}");
    assert!(asked.contains("ran writer/draft"), "{asked}");
    assert!(
        asked.contains(
            r#"paused in `approve`, asking {"approve":"Draft: weaver is fast; 1 notes"}"#
        ),
        "{asked}"
    );
    // Another process: the writer continues from its own checkpoint.
    let approved = run(bin, &[&db, "approve", "ship it"]);
    assert!(
        approved.contains("waiting in `writer` under namespace writer:"),
        "{approved}"
    );
    // Two levels down: the review's namespace sits under the writer's.
    assert!(
        approved.contains("  waiting in `review` under namespace writer:"),
        "{approved}"
    );
    assert!(approved.contains("|review:"), "{approved}");
    assert!(approved.contains("ran writer/review/approve"), "{approved}");
    for done_before in ["researcher/", "writer/draft"] {
        assert!(!approved.contains(done_before), "{approved}");
    }
    assert!(
        approved.contains(
            r#"answer: Draft: weaver is fast; 1 notes (ship it); agents: ["researcher", "writer"]"#
        ),
        "{approved}"
    );
    // Nothing is left to approve: a typed error.
    let again = Command::new(bin)
        .args([db.as_str(), "approve", "twice"])
        .output()
        .expect("example starts");
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("NoPendingInterrupt"), "{stderr}");
    std::fs::remove_dir_all(dir).ok();
}

/// The `effects` example's payment service, run as a process of its own;
/// killed when dropped.
struct PaymentService {
    process: Killed,
    addr: String,
}

impl PaymentService {
    fn start() -> Self {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("payments")
            .stdout(Stdio::piped())
            .spawn()
            .expect("example starts");
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("the payment service printed {line:?}"))
            .to_owned();
        PaymentService {
            process: Killed(Some(child)),
            addr,
        }
    }

    /// `GET /refunds`: how many calls each idempotency key got.
    fn calls(&mut self) -> serde_json::Map<String, serde_json::Value> {
        use std::io::{Read, Write};
        assert!(
            self.process.child().try_wait().unwrap().is_none(),
            "the service is up"
        );
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        write!(
            stream,
            "GET /refunds HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str(body).unwrap()
    }
}

#[test]
fn effects_in_one_process_refund_once() {
    let out = run(env!("CARGO_BIN_EXE_effects"), &[]);
    assert_eq!(
        out.lines().filter(|l| *l == "refund re_1").count(),
        2,
        "{out}"
    );
    assert!(out.contains("refund re_1 of order-1: approved"), "{out}");
    assert!(out.contains(":1}"), "{out}");
}

#[test]
fn a_refund_paused_in_one_process_and_approved_in_another_is_made_once() {
    let (dir, db) = temp_db("effects");
    let url = format!("sqlite://{db}");
    let mut payments = PaymentService::start();
    let bin = env!("CARGO_BIN_EXE_effects");
    let first = run(bin, &[&url, "-", &payments.addr, "request"]);
    assert!(first.contains("waiting for review"), "{first}");
    assert!(first.contains("journaled effect `refund`"), "{first}");
    let calls = payments.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let key = calls.keys().next().unwrap().clone();
    assert!(first.contains(&format!("(key {key})")), "{first}");

    let second = run(bin, &[&url, "-", &payments.addr, "approve"]);
    assert!(
        second.contains("refund re_1 of order-1: approved"),
        "{second}"
    );
    let calls = payments.calls();
    assert_eq!(calls.get(&key), Some(&serde_json::json!(1)), "{calls:?}");
    assert_eq!(calls.len(), 1, "{calls:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// The workers' lease time: 300 ms, or 10 s on MongoDB. The test server,
/// written in Python and sharing two cores with the whole test suite, can
/// take longer than a 100 ms renewal period to answer; and a worker that
/// took a killed one's thread over may wait a minute for the dead one's
/// open transaction, renewing meanwhile, where one renewal late by a
/// whole 3 s lease was seen on a loaded machine.
fn lease_ms(url: &str) -> &'static str {
    if url.starts_with("mongodb:") {
        "10000"
    } else {
        "300"
    }
}

/// Starts `chat_workers` once per worker, all at once, on thread `conv`
/// of the database at `url` (`schema`: the PostgreSQL schema, `-` for
/// SQLite, the database for MongoDB) under `strategy` with a short lease
/// ([`lease_ms`]); returns what each printed.
fn workers(
    url: &str,
    schema: &str,
    names: &[&str],
    turns: usize,
    strategy: &str,
) -> Vec<Vec<String>> {
    let bin = env!("CARGO_BIN_EXE_chat_workers");
    let turns = turns.to_string();
    std::thread::scope(|s| {
        let running: Vec<_> = names
            .iter()
            .map(|w| {
                let turns = turns.as_str();
                s.spawn(move || {
                    Command::new(bin)
                        .args([url, schema, "conv", w, turns, strategy, lease_ms(url)])
                        .output()
                        .expect("example starts")
                })
            })
            .collect();
        running
            .into_iter()
            .map(|h| {
                let out = h.join().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .collect()
    })
}

/// The thread `conv` as `saver` holds it: checks the history is one chain
/// (commit orders 1, 2, …, each checkpoint's parent the one before) and
/// cuts the head's transcript into turns, each checked whole (the user's
/// message, then the model's, the tool's and the approval, in that order);
/// returns the turns' labels in order.
fn stored_turns(url: &str, schema: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let saver = open_saver(url, schema).await;
        let mut hist = saver
            .list(&weaver::checkpoint::ListFilter::thread("conv"))
            .await
            .unwrap();
        hist.reverse();
        for (i, t) in hist.iter().enumerate() {
            assert_eq!(t.commit_order, i as u64 + 1, "commit orders");
            let parent = t
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.clone());
            let before = i
                .checked_sub(1)
                .map(|j| hist[j].config.checkpoint_id.clone().unwrap());
            assert_eq!(parent, before, "checkpoint {} off the chain", i + 1);
        }
        let head = hist.last().expect("the thread has checkpoints");
        let messages: Vec<String> = head.checkpoint.channel_values["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(messages.len() % 4, 0, "not whole turns: {messages:?}");
        messages
            .chunks(4)
            .map(|c| {
                let u = &c[0];
                let whole = [
                    u.clone(),
                    format!("assistant {u}"),
                    format!("tool {u}"),
                    format!("approved {u}"),
                ];
                assert_eq!(c, whole, "a turn built on another: {messages:?}");
                u.clone()
            })
            .collect()
    })
}

/// The labels a worker printed with `word`.
fn printed(lines: &[String], word: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{word} ")).map(str::to_owned))
        .collect()
}

/// Two workers, twenty turns each, `Enqueue`: every turn runs, whole, in
/// the order each worker sent it; then `Reject`: every turn either runs
/// whole or is refused with `ThreadBusy`, and a refused turn left nothing.
fn workers_take_turns(url: &str, schema: &str) {
    let out = workers(url, schema, &["alice", "bob"], 20, "enqueue");
    for lines in &out {
        assert_eq!(printed(lines, "done").len(), 20, "{lines:?}");
    }
    let turns = stored_turns(url, schema);
    assert_eq!(turns.len(), 40, "{turns:?}");
    for w in ["alice", "bob"] {
        let mine: Vec<String> = turns.iter().filter(|t| t.starts_with(w)).cloned().collect();
        let sent: Vec<String> = (0..20).map(|i| format!("{w}:{i}")).collect();
        assert_eq!(mine, sent, "{w}'s turns in the order sent");
    }
    let out = workers(url, schema, &["carol", "dave", "erin"], 10, "reject");
    let turns = stored_turns(url, schema);
    let mut done = Vec::new();
    for lines in &out {
        assert_eq!(lines.len(), 10, "every turn reports: {lines:?}");
        done.extend(printed(lines, "done"));
        for busy in printed(lines, "busy") {
            assert!(!turns.contains(&busy), "refused turn {busy} was stored");
        }
    }
    assert!(!done.is_empty());
    assert_eq!(turns.len(), 40 + done.len(), "{turns:?}");
    for d in &done {
        assert!(turns.contains(d), "turn {d} lost");
    }
}

/// Under `Rollback`, three workers at once: a stopped turn is reported,
/// the stored turns are whole, and no stopped turn is stored at all (a
/// rolled-back one left nothing).
fn workers_stop_each_other(url: &str, schema: &str) {
    let out = workers(url, schema, &["f", "g", "h"], 8, "rollback");
    let turns = stored_turns(url, schema);
    for lines in &out {
        assert_eq!(lines.len(), 8, "{lines:?}");
        for d in printed(lines, "done") {
            assert!(turns.contains(&d), "turn {d} lost");
        }
        for s in printed(lines, "stopped") {
            assert!(!turns.contains(&s), "rolled-back turn {s} stored");
        }
    }
}

/// Under `Interrupt` three workers at once: a stopped turn keeps what it
/// committed (a prefix of a whole turn) and was reported `stopped`; every
/// turn reported `done` is whole; the history is one chain.
fn workers_interrupt_each_other(url: &str, schema: &str) {
    let out = workers(url, schema, &["p", "q", "r"], 8, "interrupt");
    let (mut done, mut stopped) = (Vec::new(), Vec::new());
    for lines in &out {
        assert_eq!(lines.len(), 8, "{lines:?}");
        done.extend(printed(lines, "done"));
        stopped.extend(printed(lines, "stopped"));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let messages: Vec<String> = rt.block_on(async {
        let saver = open_saver(url, schema).await;
        let head = saver
            .get_tuple(&CheckpointRef::latest("conv"))
            .await
            .unwrap()
            .expect("the thread has checkpoints");
        head.checkpoint.channel_values["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_owned())
            .collect()
    });
    let mut i = 0;
    while i < messages.len() {
        let u = messages[i].clone();
        let whole = [
            format!("assistant {u}"),
            format!("tool {u}"),
            format!("approved {u}"),
        ];
        let mut n = 0;
        while n < 3 && messages.get(i + 1 + n) == Some(&whole[n]) {
            n += 1;
        }
        if n < 3 {
            assert!(
                stopped.contains(&u),
                "turn {u} cut short but not stopped: {messages:?}"
            );
        } else {
            assert!(
                done.contains(&u) || stopped.contains(&u),
                "{u}: {messages:?}"
            );
        }
        i += 1 + n;
    }
    for d in &done {
        assert!(messages.contains(d), "turn {d} lost");
    }
}

/// A worker killed (SIGKILL) mid-turn holds the lease until it runs out;
/// another worker then takes the thread over, finishes the dead turn and
/// runs its own: every stored turn whole. (On MongoDB a transaction the
/// victim left open holds what it wrote until the server aborts it, after
/// `transactionLifetimeLimitSeconds`, 60 s by default: the heir's writes
/// meet write conflicts until then and are run again, so this can take a
/// minute there.)
fn a_killed_worker_is_taken_over(url: &str, schema: &str) {
    let bin = env!("CARGO_BIN_EXE_chat_workers");
    let mut victim = Killed(Some(
        Command::new(bin)
            .args([
                url,
                schema,
                "conv",
                "victim",
                "100000",
                "enqueue",
                lease_ms(url),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("example starts"),
    ));
    // Killed once it has finished a turn (watched for, not waited a fixed
    // time: a loaded machine may take a while to start it), partway into
    // another.
    let stdout = victim.child().stdout.take().expect("piped");
    let (turn_done, first_turn) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("done ") {
                let _ = turn_done.send(());
            }
            lines.push(line);
        }
        lines
    });
    if first_turn.recv_timeout(Duration::from_secs(60)).is_err() {
        let killed = victim.kill();
        panic!(
            "the victim finished no turn: {}",
            String::from_utf8_lossy(&killed.stderr)
        );
    }
    std::thread::sleep(Duration::from_millis(50));
    let killed = victim.kill();
    let printed_done = printed(&reader.join().unwrap(), "done");
    assert!(
        !printed_done.is_empty(),
        "{}",
        String::from_utf8_lossy(&killed.stderr)
    );
    let out = workers(url, schema, &["heir"], 3, "enqueue");
    assert_eq!(printed(&out[0], "done").len(), 3, "{:?}", out[0]);
    let turns = stored_turns(url, schema);
    for d in printed_done {
        assert!(turns.contains(&d), "acknowledged turn {d} lost");
    }
    assert_eq!(&turns[turns.len() - 3..], ["heir:0", "heir:1", "heir:2"]);
}

/// A saver on the database at `url` (`schema` for PostgreSQL, the
/// database for MongoDB).
async fn open_saver(url: &str, schema: &str) -> Box<dyn Saver> {
    if url.starts_with("mongodb:") {
        let saver = weaver::mongo::MongoSaver::connect(url, schema, "weaver_")
            .await
            .unwrap();
        return Box::new(saver);
    }
    if url.starts_with("sqlite:") {
        return Box::new(SqliteSaver::connect(url).await.unwrap());
    }
    let pool = sqlx::PgPool::connect(url).await.unwrap_or_else(|e| {
        panic!("PostgreSQL is unreachable at {url} ({e}): start it or set DATABASE_URL")
    });
    Box::new(
        weaver::checkpoint::PostgresSaver::new(pool)
            .with_prefix(schema)
            .unwrap(),
    )
}

fn drop_pg_schema(url: &str, schema: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await
        .unwrap();
    });
}

#[test]
fn workers_take_turns_on_one_sqlite_file() {
    let (dir, db) = temp_db("workers");
    let url = format!("sqlite://{db}");
    workers_take_turns(&url, "-");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn workers_take_turns_on_postgres() {
    let url = pg_url();
    let schema = format!("weaver_workers_{}", std::process::id());
    workers_take_turns(&url, &schema);
    drop_pg_schema(&url, &schema);
}

#[test]
fn workers_stop_each_other_on_one_sqlite_file() {
    let (dir, db) = temp_db("workers-stop");
    let url = format!("sqlite://{db}");
    workers_stop_each_other(&url, "-");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn workers_stop_each_other_on_postgres() {
    let url = pg_url();
    let schema = format!("weaver_workers_stop_{}", std::process::id());
    workers_stop_each_other(&url, &schema);
    drop_pg_schema(&url, &schema);
}

#[test]
fn a_killed_worker_is_taken_over_on_one_sqlite_file() {
    let (dir, db) = temp_db("workers-kill");
    let url = format!("sqlite://{db}");
    a_killed_worker_is_taken_over(&url, "-");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_killed_worker_is_taken_over_on_postgres() {
    let url = pg_url();
    let schema = format!("weaver_workers_kill_{}", std::process::id());
    a_killed_worker_is_taken_over(&url, &schema);
    drop_pg_schema(&url, &schema);
}

#[test]
fn workers_interrupt_each_other_on_one_sqlite_file() {
    let (dir, db) = temp_db("workers-interrupt");
    let url = format!("sqlite://{db}");
    workers_interrupt_each_other(&url, "-");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn workers_interrupt_each_other_on_postgres() {
    let url = pg_url();
    let schema = format!("weaver_workers_interrupt_{}", std::process::id());
    workers_interrupt_each_other(&url, &schema);
    drop_pg_schema(&url, &schema);
}

/// The MongoDB server at `MONGODB_URL` (default
/// `mongodb://127.0.0.1:27017`), checked to answer, and a fresh database
/// name on it; panics, saying how to start one, when none answers.
fn mongo_db(name: &str) -> (String, String) {
    let url =
        std::env::var("MONGODB_URL").unwrap_or_else(|_| "mongodb://127.0.0.1:27017".to_owned());
    let db = format!("weaver_{name}_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let saver = weaver::mongo::MongoSaver::connect(&url, &db, "weaver_")
            .await
            .unwrap();
        let ping = tokio::time::timeout(
            Duration::from_secs(10),
            saver.database().list_collection_names(),
        )
        .await;
        if !matches!(ping, Ok(Ok(_))) {
            panic!("no MongoDB server answers at {url}: start one with `.ci/mongo.sh` (or set MONGODB_URL)");
        }
    });
    (url, db)
}

fn drop_mongo_db(url: &str, db: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let saver = weaver::mongo::MongoSaver::connect(url, db, "weaver_")
            .await
            .unwrap();
        saver.database().drop().await.unwrap();
    });
}

#[test]
fn workers_take_turns_on_mongo() {
    let (url, db) = mongo_db("workers");
    workers_take_turns(&url, &db);
    drop_mongo_db(&url, &db);
}

#[test]
fn a_killed_worker_is_taken_over_on_mongo() {
    let (url, db) = mongo_db("workers_kill");
    a_killed_worker_is_taken_over(&url, &db);
    drop_mongo_db(&url, &db);
}

#[test]
fn workers_stop_each_other_on_mongo() {
    let (url, db) = mongo_db("workers_stop");
    workers_stop_each_other(&url, &db);
    drop_mongo_db(&url, &db);
}

/// The bytes of a SQLite database and its write-ahead log, if any.
fn sqlite_bytes(db: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(db).unwrap();
    if let Ok(wal) = std::fs::read(format!("{db}-wal")) {
        bytes.extend(wal);
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn a_chat_flow_questionnaire_runs_one_turn_per_process_and_stores_no_message() {
    let (dir, db) = temp_db("chat-flow");
    let bin = env!("CARGO_BIN_EXE_chat_flow");
    let marker = r#"{"marker":"PAYLOAD-c0ffee"}"#;
    let turn = |message: &str| run(bin, &[&db, "signup-1", message, "--payload", marker]);
    let bot = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix("bot: "))
            .map(str::to_owned)
            .collect()
    };

    let out = turn("");
    assert_eq!(bot(&out), ["What is your name?"], "{out}");
    assert!(out.contains("version 3\nwaiting at ask_name"), "{out}");
    let out = turn("   ");
    assert_eq!(bot(&out), ["Please tell me your name."], "{out}");
    assert!(out.contains("version 4\nwaiting at ask_name"), "{out}");
    let out = turn("Ada Lovelace");
    assert_eq!(
        bot(&out),
        ["Nice to meet you, Ada Lovelace. What is your email?"],
        "{out}"
    );
    assert!(out.contains("version 6\nwaiting at ask_email"), "{out}");
    let out = turn("ada-at-example");
    assert_eq!(
        bot(&out),
        ["That does not look like an email address. Please try again."],
        "{out}"
    );
    assert!(out.contains("version 7\nwaiting at ask_email"), "{out}");

    // Two processes answer version 7 at once: one turn wins, the other is
    // refused with the version it attempted, and nothing retries it.
    let racers: Vec<_> = ["ada@example.com", "lovelace@example.org"]
        .into_iter()
        .map(|email| {
            let child = Command::new(bin)
                .args([db.as_str(), "signup-1", email, "--at", "7"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (email, Killed(Some(child)))
        })
        .collect();
    let mut winners = Vec::new();
    let mut conflicts = 0;
    for (email, mut child) in racers {
        let out = child.0.take().unwrap().wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if stdout.contains(
            "conflict: conversation signup-1 is not at version 7; version 8 was not stored",
        ) {
            assert!(bot(&stdout).is_empty(), "{stdout}");
            conflicts += 1;
        } else {
            let thanks = format!("Thanks, Ada Lovelace! We will write to {email}.");
            assert_eq!(bot(&stdout), [thanks], "{stdout}");
            assert!(stdout.contains("version 9\ndone"), "{stdout}");
            winners.push(email);
        }
    }
    assert_eq!((winners.len(), conflicts), (1, 1));

    // A finished conversation runs nothing and re-sends nothing.
    let out = turn("hello?");
    assert!(bot(&out).is_empty(), "{out}");
    assert!(out.contains("version 9\ndone"), "{out}");

    // The file holds the answers and the tracker, never a message, a
    // payload or a refused reply.
    let bytes = sqlite_bytes(&db);
    assert!(
        contains(&bytes, "Ada Lovelace"),
        "the scan sees stored values"
    );
    assert!(contains(&bytes, winners[0]));
    for never in [
        "What is your name?",
        "Please tell me your name.",
        "Nice to meet you",
        "does not look like an email",
        "Thanks, Ada",
        "PAYLOAD-c0ffee",
        "ada-at-example",
    ] {
        assert!(!contains(&bytes, never), "`{never}` is in the file");
    }
    // The same through the saver's records, as stored JSON.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stored = rt.block_on(async {
        let saver = SqliteSaver::connect(&format!("sqlite://{db}"))
            .await
            .unwrap();
        let cp = weaver::checkpoint::Checkpointer::new(saver);
        cp.list_records(&weaver::checkpoint::ListFilter::thread("signup-1"))
            .await
            .unwrap()
    });
    assert_eq!(stored.len(), 9);
    let latest = &stored[0].checkpoint.channel_values;
    assert_eq!(latest["state"]["name"], "Ada Lovelace");
    assert_eq!(latest["tracker"]["done"], true);
    let text = serde_json::to_string(
        &stored
            .iter()
            .map(|t| (&t.checkpoint, &t.metadata, &t.pending_writes))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for never in [
        "What is your name?",
        "PAYLOAD-c0ffee",
        "ada-at-example",
        "Thanks",
    ] {
        assert!(!text.contains(never), "`{never}` is stored: {text}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// The Redis the adapter tests use (`REDIS_URL`, or the local default).
fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A Redis adapter whose keys no other test shares; fails, saying so,
/// when Redis is not reachable.
async fn fresh_redis_adapter() -> weaver_examples::redis_adapter::RedisAdapter {
    let prefix = format!("weaver-test:{}:", weaver::checkpoint::new_checkpoint_id());
    weaver_examples::redis_adapter::RedisAdapter::connect(&redis_url(), &prefix)
        .await
        .unwrap_or_else(|e| panic!("these tests need Redis at {}: {e}", redis_url()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_adapter_passes_the_adapter_and_saver_suites() {
    let made = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = made.clone();
    weaver_conformance::adapter::run_adapter_conformance(move || {
        let log = log.clone();
        async move {
            let a = fresh_redis_adapter().await;
            log.lock().unwrap().push(a.clone());
            a
        }
    })
    .await;
    let made = made.lock().unwrap().clone();
    for a in made {
        a.clear().await.unwrap();
    }
}

#[tokio::test]
async fn redis_adapter_reports_bad_stored_data_and_an_unreachable_server() {
    use redis::AsyncCommands;
    use weaver::checkpoint::SnapshotAdapter;
    let a = fresh_redis_adapter().await;
    let client = redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (versions, data) = (format!("{}f:v", a.prefix()), format!("{}f:d", a.prefix()));
    let _: () = conn.zadd(&versions, "1", 1).await.unwrap();
    let _: () = conn.hset(&data, "1", "{not json").await.unwrap();
    let got = a.load_snapshot("f", None).await;
    assert!(matches!(got, Err(weaver::Error::Decode { .. })), "{got:?}");
    let _: () = conn.zadd(&versions, "2", 2).await.unwrap();
    let got = a.load_history("f", None).await;
    assert!(
        matches!(got, Err(weaver::Error::Decode { .. })),
        "a version without data: {got:?}"
    );
    a.clear().await.unwrap();
    let down =
        weaver_examples::redis_adapter::RedisAdapter::connect("redis://127.0.0.1:1", "x:").await;
    let err = down.unwrap_err();
    assert!(matches!(err, weaver::Error::Storage { .. }), "{err:?}");
    assert!(err.to_string().contains("not reachable"), "{err}");
}

#[test]
fn redis_adapter_example_runs_two_turns() {
    let out = run(env!("CARGO_BIN_EXE_redis_adapter"), &[&redis_url()]);
    assert!(
        out.contains(r#"n=2 said=["user 1", "reply 1", "user 2", "reply 2"]"#),
        "{out}"
    );
    assert!(
        out.contains("thread conversation-1: 6 checkpoints"),
        "{out}"
    );
    assert!(out.contains("1 snapshot(s) kept"), "{out}");
}
