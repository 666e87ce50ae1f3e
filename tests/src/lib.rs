//! Cross-crate test suites: the saver and store conformance suites and shared fixtures.

pub mod chat_flows;
/// The adapter conformance suite, from `weaver-conformance`.
pub use weaver_conformance::adapter as adapter_conformance;
/// The saver conformance suite, from `weaver-conformance`.
pub use weaver_conformance::saver as conformance;
pub mod counters;
pub mod decodes;
pub mod dropped;
pub mod effects;
pub mod evolution;
pub mod fleet;
pub mod forwarding;
pub mod leases;
pub mod mongo;
pub mod policies;
pub mod sends;
pub mod shapes;
pub mod states;
pub mod store_conformance;
pub mod streamed;
pub mod subgraphs;
pub mod upgrades;

/// Polls `call` until it is done or `after` has passed, then drops it (a
/// caller's timeout cutting it off at that point); the runtime's thread
/// waits between polls, so `after` is kept to the microsecond.
pub async fn cut_off<F: std::future::Future>(call: F, after: std::time::Duration) {
    let mut call = std::pin::pin!(call);
    let deadline = std::time::Instant::now() + after;
    loop {
        let polled =
            std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
        if polled.is_ready() || std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(5));
    }
}

/// The id of the pending task `node` at the thread's latest checkpoint.
pub async fn task_id_of<S: weaver::GraphState>(
    graph: &weaver::CompiledGraph<S>,
    config: &weaver::RunConfig,
    node: &str,
) -> String {
    let snapshot = graph.get_state(config).await.expect("snapshot");
    snapshot
        .tasks
        .iter()
        .find(|t| t.name == node)
        .map(|t| t.id.clone())
        .unwrap_or_else(|| panic!("no pending task `{node}`"))
}

/// Reads `stream` until it streams a state `answered` accepts, then drops it,
/// as a host does that hangs up once it has its answer (whatever the run
/// still had queued is left to its background writer). `Err` names the
/// run's failure, or says that no such state came.
pub async fn stream_until_answered<S: weaver::GraphState>(
    mut stream: weaver::RunStream<S>,
    answered: impl Fn(&S) -> bool,
) -> Result<(), String> {
    use futures_util::StreamExt;
    while let Some(item) = stream.next().await {
        match item {
            weaver::StreamItem::Event(weaver::StreamEvent::Values { values, .. })
                if answered(&values) =>
            {
                return Ok(());
            }
            weaver::StreamItem::Done(Err(e)) => return Err(e.to_string()),
            _ => {}
        }
    }
    Err("no answer streamed".to_owned())
}

/// A path for a SQLite database in the temp directory, unique to the call;
/// the file and its `-wal`, `-shm` and `-journal` files are removed on drop.
#[derive(Debug)]
pub struct TempSqlite {
    /// The database file.
    pub path: std::path::PathBuf,
}

impl TempSqlite {
    /// A fresh path whose file name starts with `tag`.
    pub fn new(tag: &str) -> Self {
        let name = format!("{tag}-{}.db", uuid::Uuid::now_v7());
        TempSqlite {
            path: std::env::temp_dir().join(name),
        }
    }

    /// `sqlite://<path>`.
    pub fn url(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}

impl Drop for TempSqlite {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}
