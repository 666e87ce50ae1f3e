//! W9, a fleet of cold workers: W2's conversation where every turn runs on
//! a freshly compiled graph over a fresh saver handle (nothing a handle or a
//! graph caches carries over from the turn before: what stateless workers
//! see), then `get_state` at the end the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use serde_json::{Value, json};
use weaver::prelude::*;

use crate::backend::Backend;
use crate::graphs::{
    Chat, ChatAppend, ChatChunked, ChatShared, ChatState, chat_graph, message_for_turn,
};
use crate::{Args, W2Channel, WARMUP, config, lat_stats, median, round, row, stats, timed_raw};

/// A cold worker's graph: compiled now, on a fresh handle of `be`'s store.
fn cold<C: ChatState>(be: &Backend, turn: &Arc<AtomicI64>) -> weaver::Result<CompiledGraph<C>> {
    let options = match be.fresh_saver()? {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    };
    chat_graph::<C>(turn.clone()).compile(options)
}

/// W9 on `backend` (`--n` turns, 500 by default; the message channel as
/// W2's, `--w2-channel`): turns/s with the compile and the fresh handle
/// inside each timed turn, and `get_state` at the end on a cold worker.
pub(crate) async fn w9(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    match args.w2_channel {
        W2Channel::Delta => w9_on::<Chat>(backend, args).await,
        W2Channel::Append => w9_on::<ChatAppend>(backend, args).await,
        W2Channel::DeltaArc => w9_on::<ChatShared>(backend, args).await,
        W2Channel::SharedVec => w9_on::<ChatChunked>(backend, args).await,
    }
}

async fn w9_on<C: ChatState>(backend: &str, args: &Args) -> weaver::Result<Vec<Value>> {
    let turn = Arc::new(AtomicI64::new(0));
    let be = Backend::open(backend).await?;
    for i in 0..WARMUP {
        turn.store(-1 - i as i64, Ordering::SeqCst);
        cold::<C>(&be, &turn)?
            .invoke(C::default(), &config(args, format!("warm-{i}")))
            .await?;
    }
    let be = be.reset().await?;
    let n = args.n.unwrap_or(500);
    let c = config(args, "w9".into());
    let (lat, wall) = timed_raw(n, |i| {
        turn.store(i as i64 + 1, Ordering::SeqCst);
        let graph = cold::<C>(&be, &turn);
        let c = c.clone();
        async move { graph?.invoke(C::default(), &c).await.map(drop) }
    })
    .await?;
    let mut gs = Vec::new();
    let mut end = None;
    for _ in 0..50 {
        let t = Instant::now();
        end = Some(cold::<C>(&be, &turn)?.get_state(&c).await?);
        gs.push(t.elapsed().as_secs_f64());
    }
    let msgs = end.map(|s| s.values.messages()).unwrap_or_default();
    let ok = msgs.len() == n
        && msgs.iter().all(|m| m.len() == 256)
        && msgs.last() == Some(&message_for_turn(n as i64));
    let mut w9 = stats(&lat, wall);
    let first = &lat[..lat.len().min(50)];
    let last = &lat[lat.len().saturating_sub(50)..];
    w9["first50_median_ms"] = json!(round(median(first) * 1e3, 4));
    w9["last50_median_ms"] = json!(round(median(last) * 1e3, 4));
    w9["get_state_end"] = lat_stats(&gs);
    w9["message_count"] = json!(msgs.len());
    w9["output_ok"] = json!(ok);
    w9["channel"] = json!(C::CHANNEL);
    w9["cold"] = json!(
        "each turn and each get_state on a graph compiled for it over a new saver handle (same pool), inside the timed region"
    );
    let w9 = row("W9", backend, args, w9);
    be.close().await?;
    Ok(vec![w9])
}
