//! Recovery after a crash: a worker process dies in the middle of a
//! super-step, and another process picks the thread up. Eight reviewers run
//! in one step; seven finish and their writes are stored as each finishes
//! (`Durability::Sync`), the eighth is still working when its process is
//! killed. The next process continues the thread: only the unfinished
//! reviewer runs again, and the seven stored results are used as they are.
//!
//! ```text
//! recover_after_crash review.db hang     # the eighth reviewer never finishes: kill it
//! recover_after_crash review.db finish   # another process completes the step
//! ```
//!
//! Each process prints `ran <reviewer>` when a reviewer runs to its end, and
//! `finish` then prints the reviews the step gathered.

use std::time::Duration;

use weaver::checkpoint::SqliteSaver;
use weaver::config::{LeaseTimes, Multitask};
use weaver::prelude::*;

/// What the reviewers gathered.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
struct Reviews {
    /// One line per reviewer, in the order the step merged them.
    #[reducer(append)]
    reviews: Vec<String>,
    /// Set by `summary` once every review is in.
    summary: String,
}

/// The seven reviewers that answer at once.
const QUICK: [&str; 7] = [
    "legal", "security", "style", "facts", "tone", "links", "spelling",
];

/// The reviewer that takes its time: forever when `hang`.
const SLOW: &str = "budget";

fn graph(saver: SqliteSaver, hang: bool) -> weaver::Result<CompiledGraph<Reviews>> {
    let mut g = Graph::<Reviews>::new("reviews");
    for name in QUICK.into_iter().chain([SLOW]) {
        let slow = name == SLOW;
        g = g
            .add_node(name, move |_: &Reviews| async move {
                if slow && hang {
                    // Stands in for a call that never returns: the process
                    // is killed while this reviewer waits.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                println!("ran {name}");
                ReviewsUpdate::default().reviews(vec![format!("{name}: ok")])
            })
            .add_edge(START, name)
            .add_edge(name, "summary");
    }
    g.add_node("summary", |s: &Reviews| {
        ReviewsUpdate::default().summary(format!("{} reviews", s.reviews.len()))
    })
    .add_edge("summary", END)
    .compile(Compile::new().checkpointer(saver))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> weaver::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, step] = args.as_slice() else {
        return Err(usage());
    };
    let saver = SqliteSaver::connect(&format!("sqlite://{file}")).await?;
    // A one-second lease: `finish` waits (at most that long) for the killed
    // holder's lease to run out, then takes the thread over.
    let config = RunConfig::thread("review-1")
        .durability(Durability::Sync)
        .lease_times(LeaseTimes::new(Duration::from_secs(1)))
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(30),
        });
    match step.as_str() {
        "hang" => {
            graph(saver, true)?
                .invoke(Reviews::default(), &config)
                .await?;
            Err(Error::invalid_argument("the slow reviewer was to hang"))
        }
        "finish" => {
            let done = graph(saver, false)?
                .continue_run(&config)
                .await?
                .complete()?;
            let mut reviews = done.reviews;
            reviews.sort();
            println!("summary: {}; reviews: {reviews:?}", done.summary);
            Ok(())
        }
        _ => Err(usage()),
    }
}

fn usage() -> Error {
    Error::invalid_argument("usage: recover_after_crash <sqlite-file> <hang|finish>")
}
