//! W2 (a long conversation on one thread) and W4 (its history).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};
use weaver::prelude::*;

use crate::backend::Backend;
use crate::graphs::{Chat, ChatAppend, ChatChunked, ChatShared, ChatState, chat, message_for_turn};
use crate::{Args, W2Channel, WARMUP, config, lat_stats, median, round, row, stats, timed_raw};

/// W2 (500 turns on one thread) and then W4 (history) on the same thread.
pub(crate) async fn w2_w4(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    match args.w2_channel {
        W2Channel::Delta => w2_w4_on::<Chat>(backend, args).await,
        W2Channel::Append => w2_w4_on::<ChatAppend>(backend, args).await,
        W2Channel::DeltaArc => w2_w4_on::<ChatShared>(backend, args).await,
        W2Channel::SharedVec => w2_w4_on::<ChatChunked>(backend, args).await,
    }
}

async fn w2_w4_on<C: ChatState>(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let turn = Arc::new(AtomicI64::new(0));
    let be = Backend::open(backend).await?;
    let graph = chat(&be, turn.clone());
    for i in 0..WARMUP {
        turn.store(-1 - i as i64, Ordering::SeqCst);
        graph
            .invoke(C::default(), &config(args, format!("warm-{i}")))
            .await?;
    }
    let be = be.reset().await?;
    let graph = chat(&be, turn.clone());
    let n = args.n.unwrap_or(500);
    let c = config(args, "w2".into());
    let (lat, wall) = timed_raw(n, |i| {
        turn.store(i as i64 + 1, Ordering::SeqCst);
        let (graph, c) = (graph.clone(), c.clone());
        async move { graph.invoke(C::default(), &c).await.map(drop) }
    })
    .await?;
    let storage = be.storage("w2").await?;
    // The peer reads and decodes the checkpoint on every call. A compiled
    // graph keeps the values it decoded (and its checkpointer the delta
    // channels it wrote or rebuilt), so on one graph the 2nd..50th identical
    // read would be served from memory. Each timed read of W2/W4 therefore
    // runs on a freshly compiled graph (same saver and connection; the
    // compile is outside the timed region); the same reads on the graph that
    // ran the turns are reported as `*_cached`.
    let cold = || chat::<C>(&be, turn.clone());
    let mut gs = Vec::new();
    let mut end = None;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        end = Some(g.get_state(&c).await?);
        gs.push(t.elapsed().as_secs_f64());
    }
    let mut gs_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph.get_state(&c).await?;
        gs_cached.push(t.elapsed().as_secs_f64());
    }
    let msgs = end.map(|s| s.values.messages()).unwrap_or_default();
    let ok = msgs.len() == n
        && msgs.iter().all(|m| m.len() == 256)
        && msgs.last() == Some(&message_for_turn(n as i64));
    let mut w2 = stats(&lat, wall);
    let first = &lat[..lat.len().min(50)];
    let last = &lat[lat.len().saturating_sub(50)..];
    w2["first50_median_ms"] = json!(round(median(first) * 1e3, 4));
    w2["first50_p95_ms"] = lat_stats(first)["p95_ms"].clone();
    w2["last50_median_ms"] = json!(round(median(last) * 1e3, 4));
    w2["last50_p95_ms"] = lat_stats(last)["p95_ms"].clone();
    w2["window_last"] = json!(format!("{}-{}", n.saturating_sub(49), n));
    w2["storage"] = storage;
    w2["get_state_end"] = lat_stats(&gs);
    w2["get_state_end_cached"] = lat_stats(&gs_cached);
    w2["message_count"] = json!(msgs.len());
    w2["message"] = json!("hex(sha256(\"weaver-w2-{i}-{k}\")) for k=0..3 (sha2 crate)");
    w2["output_ok"] = json!(ok);
    w2["channel"] = json!(C::CHANNEL);
    let w2 = row("W2", backend, args, w2);

    // W4: history of the W2 thread.
    // Each timed read on a freshly compiled graph, as W2's get_state above.
    let mut h20 = Vec::new();
    let mut len20 = 0;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        len20 = g
            .get_state_history(&c, History::default().limit(20))
            .await?
            .len();
        h20.push(t.elapsed().as_secs_f64());
    }
    let mut h20_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph
            .get_state_history(&c, History::default().limit(20))
            .await?;
        h20_cached.push(t.elapsed().as_secs_f64());
    }
    let mut hfull = Vec::new();
    let mut full = Vec::new();
    for _ in 0..5 {
        let g = cold();
        let t = Instant::now();
        full = g.get_state_history(&c, History::default()).await?;
        hfull.push(t.elapsed().as_secs_f64());
    }
    let target = full
        .len()
        .checked_sub(10)
        .map(|i| full[i].config.clone())
        .ok_or_else(|| Error::invalid_argument("fewer than 10 checkpoints"))?;
    let full_len = full.len();
    let newest_first = full.first().map(|s| s.commit_order) > full.last().map(|s| s.commit_order);
    drop(full);
    let mut g10 = Vec::new();
    let mut old_msgs = 0;
    for _ in 0..50 {
        let g = cold();
        let t = Instant::now();
        let snap = g.get_state(&target).await?;
        g10.push(t.elapsed().as_secs_f64());
        old_msgs = snap.values.messages().len();
    }
    let mut g10_cached = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        graph.get_state(&target).await?;
        g10_cached.push(t.elapsed().as_secs_f64());
    }
    let l20 = lat_stats(&h20);
    let w4 = json!({
        "history_limit20": l20,
        "history_limit20_len": len20,
        "history_full": lat_stats(&hfull),
        "history_full_len": full_len,
        "history_newest_first": newest_first,
        "get_state_10th_oldest": lat_stats(&g10),
        "get_state_10th_oldest_msgs": old_msgs,
        "history_limit20_cached": lat_stats(&h20_cached),
        "get_state_10th_oldest_cached": lat_stats(&g10_cached),
        "reads": "each timed read on a freshly compiled graph (cold caches); *_cached: the same read repeated on the graph that ran W2",
        "median_ms": l20["median_ms"],
        "p95_ms": l20["p95_ms"],
        "channel": C::CHANNEL,
    });
    let w4 = row("W4", backend, args, w4);
    drop(graph);
    be.close().await?;
    Ok(vec![w2, w4])
}
