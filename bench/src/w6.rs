//! W6: W1 from several processes at once on one PostgreSQL schema, each
//! on threads of its own, or (`--w6-shared`) all on one thread, taking
//! turns under `Multitask::Enqueue`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use weaver::checkpoint::PostgresSaver;
use weaver::config::Multitask;
use weaver::prelude::*;

use crate::backend::{Backend, Store, pg_pool};
use crate::graphs::{input, two_step};
use crate::{Args, WARMUP, config, durability_name, peak_rss_kib, row, stats, timed_raw};

/// The thread every worker invokes on under `--w6-shared`.
const SHARED_THREAD: &str = "w6-shared";

/// W6: `procs` worker processes, each W1 on `n` distinct threads of one
/// fresh schema (or `n` invokes on one shared thread), started together;
/// throughput over first start to last end.
pub(crate) async fn w6(args: &Args) -> weaver::Result<Vec<Value>> {
    let be = Backend::open("postgres").await?;
    let schema = match &be.store {
        Store::Postgres { schema, .. } => schema.clone(),
        _ => unreachable!("postgres backend"),
    };
    let exe = std::env::current_exe().expect("own path");
    let m = args.n.unwrap_or(500);
    let mut children = Vec::new();
    for k in 0..args.procs {
        let mut cmd = Process::new(&exe);
        cmd.args([
            "--w6-worker",
            &format!("{k}:{schema}"),
            "--n",
            &m.to_string(),
        ]);
        if let Some(d) = args.durability {
            cmd.args(["--durability", durability_name(d)]);
        }
        if args.multi_thread {
            cmd.args(["--runtime", "multi"]);
        }
        if args.w6_shared {
            cmd.arg("--w6-shared");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::invalid_argument(format!("spawn worker: {e}")))?;
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        children.push((child, out));
    }
    // Barrier: every worker has connected and warmed up before any starts.
    for (_, out) in &mut children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| Error::invalid_argument(format!("worker: {e}")))?;
        if line.trim() != "ready" {
            return Err(Error::invalid_argument(format!("worker not ready: {line}")));
        }
    }
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().expect("stdin");
        let _ = stdin.write_all(b"go\n");
        let _ = stdin.flush();
    }
    let mut outs = Vec::new();
    for (mut child, mut out) in children {
        let mut line = String::new();
        out.read_line(&mut line)
            .map_err(|e| Error::invalid_argument(format!("worker: {e}")))?;
        let _ = child.wait();
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| Error::invalid_argument(format!("worker output {line:?}: {e}")))?;
        if let Some(e) = v.get("error") {
            return Err(Error::invalid_argument(format!("worker failed: {e}")));
        }
        outs.push(v);
    }
    let lat: Vec<f64> = outs
        .iter()
        .flat_map(|o| o["lat"].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x.as_f64())
        .collect();
    let t0 = outs
        .iter()
        .filter_map(|o| o["t_start_ns"].as_u64())
        .min()
        .unwrap_or(0);
    let t1 = outs
        .iter()
        .filter_map(|o| o["t_end_ns"].as_u64())
        .max()
        .unwrap_or(0);
    let wall = (t1.saturating_sub(t0)) as f64 / 1e9;
    let threads: i64 = match &be.store {
        Store::Postgres { saver, schema } => sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(DISTINCT thread_id) FROM \"{schema}\".weaver_checkpoints WHERE thread_id LIKE 'w6-%'"
        )))
        .fetch_one(saver.pool())
        .await
        .map_err(|e| Error::storage("count", e))?,
        _ => 0,
    };
    let mut fields = stats(&lat, wall);
    fields["processes"] = json!(args.procs);
    fields["per_process_n"] = json!(outs.iter().map(|o| o["n"].clone()).collect::<Vec<_>>());
    if args.w6_shared {
        // Each invoke appends "a" then "b": a turn built on another's
        // unfinished one shows as a pair that is not ["a", "b"].
        let graph = two_step(&be);
        let state = graph.get_state(&config(args, SHARED_THREAD.into())).await?;
        let bar = state.values.bar;
        let half_turns = bar.chunks(2).filter(|c| *c != ["a", "b"]).count();
        fields["shared_thread"] = json!(true);
        fields["turns_stored"] = json!(bar.len() / 2);
        fields["half_turns"] = json!(half_turns);
        fields["output_ok"] = json!(half_turns == 0 && bar.len() == 2 * m * args.procs);
    } else {
        fields["threads_stored"] = json!(threads);
        fields["output_ok"] = json!(threads as usize == m * args.procs);
    }
    fields["peak_rss_kib"] = json!(outs.iter().filter_map(|o| o["rss"].as_u64()).max());
    fields["peak_rss_note"] = json!("max over worker processes");
    be.close().await?;
    Ok(vec![row("W6", "postgres", args, fields)])
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) async fn w6_worker(k: usize, schema: &str, args: &Args) -> weaver::Result<()> {
    let saver = PostgresSaver::new(pg_pool().await?).with_prefix(schema)?;
    let be = Backend {
        name: "postgres".into(),
        store: Store::Postgres {
            saver,
            schema: schema.to_owned(),
        },
    };
    let graph = two_step(&be);
    for i in 0..WARMUP {
        graph
            .invoke(input(), &config(args, format!("warm-p{k}-{i}")))
            .await?;
    }
    println!("ready");
    let mut go = String::new();
    std::io::stdin()
        .read_line(&mut go)
        .map_err(|e| Error::invalid_argument(format!("stdin: {e}")))?;
    let m = args.n.unwrap_or(500);
    let t_start = unix_nanos();
    let (lat, _) = timed_raw(m, |i| {
        let graph = graph.clone();
        let c = if args.w6_shared {
            config(args, SHARED_THREAD.into()).multitask(Multitask::Enqueue {
                wait: std::time::Duration::from_secs(600),
            })
        } else {
            config(args, format!("w6-p{k}-{i}"))
        };
        async move { graph.invoke(input(), &c).await.map(drop) }
    })
    .await?;
    let t_end = unix_nanos();
    println!(
        "{}",
        json!({"k": k, "n": lat.len(), "lat": lat, "t_start_ns": t_start, "t_end_ns": t_end, "rss": peak_rss_kib()})
    );
    Ok(())
}
