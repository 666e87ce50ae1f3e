//! What the benchmark binaries share.

use std::future::Future;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weaver::prelude::*;
use weaver::state::SharedVec;

/// W2's state as `w4_parts` and `w4_fresh` read it: the messages in a
/// delta channel whose snapshots share their chunks.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct SharedChat {
    /// The conversation, one entry per turn.
    #[reducer(delta)]
    pub messages: SharedVec<String>,
}

/// Runs `fut` to completion on a current-thread tokio runtime and returns
/// its value; if the runtime cannot start or `fut` fails, prints the error
/// after `program` on standard error and exits with status 1.
pub fn block_on_or_exit<T>(program: &str, fut: impl Future<Output = weaver::Result<T>>) -> T {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{program}: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(fut) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::exit(1);
        }
    }
}

/// Median milliseconds of `rounds` calls of `f`, timed one by one.
pub fn median_ms(rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[rounds / 2]
}
