//! What the thread lease costs a single worker: `invoke` of START → a → b
//! on a fresh thread of one SQLite file, `n` times with the default
//! strategy (`Reject`: take the lease, give it back) and `n` times with
//! `Race` (no lease), three interleaved rounds.
//!
//! ```text
//! cargo run --release -p weaver-bench --bin lease_cost -- /tmp/lease.db 500
//! ```
use std::time::{Duration, Instant};
use weaver::checkpoint::SqliteSaver;
use weaver::config::Multitask;
use weaver::prelude::*;

/// The state: what each node appended.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct S {
    /// One entry per node run.
    #[reducer(append)]
    log: Vec<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, file, n] = args.as_slice() else {
        return Err(Error::invalid_argument(
            "usage: lease_cost <sqlite-file> <invokes>",
        ));
    };
    let n: usize = n
        .parse()
        .map_err(|_| Error::invalid_argument("invokes must be a number"))?;
    let saver = SqliteSaver::connect(&format!("sqlite://{file}")).await?;
    let g = Graph::<S>::new("g")
        .add_node("a", |_: &S| SUpdate::default().log(vec!["a".into()]))
        .add_node("b", |_: &S| SUpdate::default().log(vec!["b".into()]))
        .add_sequence([START, "a", "b", END])
        .compile(Compile::new().checkpointer(saver))?;
    for round in 0..3 {
        for (name, m) in [("lease", Multitask::Reject), ("race", Multitask::Race)] {
            let mut total = Duration::ZERO;
            for i in 0..n {
                let c = RunConfig::thread(format!("{name}-{round}-{i}")).multitask(m);
                let t = Instant::now();
                g.invoke(S::default(), &c).await?;
                total += t.elapsed();
            }
            println!(
                "round {round} {name}: {:.1} us per invoke",
                total.as_secs_f64() * 1e6 / n as f64
            );
        }
    }
    Ok(())
}
