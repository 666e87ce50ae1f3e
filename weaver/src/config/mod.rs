//! Run configuration: thread ids, checkpoint addressing, limits and the per-run context.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::checkpoint::CheckpointRef;
use crate::error::{Error, Result};

mod lease;
pub use lease::{LeaseTimes, Multitask};

/// Default number of super-steps one run may take before
/// [`Error::RecursionLimit`].
pub const DEFAULT_RECURSION_LIMIT: usize = 25;

/// When checkpoints are written relative to the run.
///
/// # Several workers on one thread
///
/// With the default [`Multitask::Reject`] (or any strategy but
/// [`Multitask::Race`]) a run holds the thread's lease from before it
/// reads the thread until it has stored everything, so in every mode a
/// turn starts from the previous turn's end: no worker's turn is built on
/// another's unfinished one, and a turn that does not run (refused, timed
/// out waiting, rolled back) leaves no checkpoint on the thread. The modes
/// then differ only in what a *crash* leaves: `Sync` every step stored, so
/// the next holder finishes the dead turn from its pending writes; `Async`
/// the steps whose background writes landed; `Exit` nothing of the dead
/// turn. Without a lease (`Race`) two workers race on commit orders: under
/// `Sync` and `Async` the loser keeps the commits it made before its
/// [`Error::VersionConflict`] and the other worker's next turn may build
/// on them; under `Exit` a turn is one commit, whole or nothing, but a
/// worker may lose any number of races.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Durability {
    /// Each checkpoint is stored before the next step starts, and each
    /// task's writes as the task finishes; the writes of a step's last task
    /// are stored in one commit with the checkpoint that step ends with
    /// (nothing runs in between).
    Sync,
    /// Checkpoints are stored in the background while the next step runs;
    /// `invoke` waits for them before it returns, and a read of the thread
    /// through the same saver (the next run, `get_state`, from any graph
    /// compiled with that saver or a clone of it: they share its
    /// [`SaverState`](crate::checkpoint::SaverState)) waits for any still
    /// queued. The default. A background write that fails gives up what
    /// was queued after it, and the run stops at its next step boundary
    /// with that write's error.
    /// On an in-process saver (nothing to overlap) or outside a tokio
    /// runtime (no task to write in), the run writes as `Sync` does.
    #[default]
    Async,
    /// Only the checkpoint where the run ends (or stops: an interrupt, a
    /// failed node) is stored, when the run returns. A run cancelled before
    /// that (its `invoke` future or its stream dropped) stores nothing: the
    /// thread stays where it was. A stream's `Interrupted` event comes once
    /// the pause is stored.
    Exit,
}

/// Which run a call addresses, and how it runs.
///
/// Built with [`RunConfig::thread`] or from LangGraph-shaped JSON with
/// [`RunConfig::from_json`]. The per-run [`context`](RunConfig::with_context)
/// is handed to nodes and never persisted.
///
/// ```
/// use weaver::RunConfig;
/// let config = RunConfig::thread("support-thread-1").recursion_limit(50);
/// assert_eq!(config.thread_id(), Some("support-thread-1"));
/// let same = RunConfig::from_json(&serde_json::json!({
///     "configurable": {"thread_id": "support-thread-1"},
///     "recursion_limit": 50
/// })).unwrap();
/// assert_eq!(same.thread_id(), config.thread_id());
/// ```
#[derive(Clone, Default)]
pub struct RunConfig {
    thread_id: Option<String>,
    checkpoint_ns: String,
    checkpoint_id: Option<String>,
    recursion_limit: Option<usize>,
    durability: Option<Durability>,
    metadata: Map<String, Value>,
    configurable: Map<String, Value>,
    max_concurrency: Option<usize>,
    context: Option<Arc<dyn Any + Send + Sync>>,
    multitask: Option<Multitask>,
    lease_times: Option<LeaseTimes>,
    lease_holder: Option<String>,
    expected_head: Option<u64>,
}

impl fmt::Debug for RunConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunConfig")
            .field("thread_id", &self.thread_id)
            .field("checkpoint_ns", &self.checkpoint_ns)
            .field("checkpoint_id", &self.checkpoint_id)
            .field("recursion_limit", &self.recursion_limit)
            .field("durability", &self.durability)
            .field("metadata", &self.metadata)
            .field("configurable", &self.configurable)
            .field("max_concurrency", &self.max_concurrency)
            .field("context", &self.context.as_ref().map(|_| ".."))
            .field("multitask", &self.multitask)
            .field("lease_times", &self.lease_times)
            .field("lease_holder", &self.lease_holder)
            .field("expected_head", &self.expected_head)
            .finish()
    }
}

impl RunConfig {
    /// A config addressing the latest checkpoint of `thread_id`.
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("user-42");
    /// assert_eq!(config.thread_id(), Some("user-42"));
    /// assert_eq!(config.get_checkpoint_id(), None); // the latest
    /// ```
    pub fn thread(thread_id: impl Into<String>) -> Self {
        RunConfig {
            thread_id: Some(thread_id.into()),
            ..RunConfig::default()
        }
    }

    /// Parses the LangGraph shape: `{"configurable": {"thread_id",
    /// "checkpoint_ns", "checkpoint_id", ...}, "recursion_limit",
    /// "max_concurrency", "durability", "metadata"}`. As in LangGraph, a
    /// `null` value means unset, other `configurable` keys are kept as
    /// application keys (see
    /// [`get_configurable`](RunConfig::get_configurable)), unknown top-level
    /// keys move into `configurable` and override its entries (a top-level
    /// `thread_id` addresses the thread), and `tags`,
    /// `run_name`, `callbacks` and `run_id` (tracing only) are accepted and
    /// ignored. An empty `checkpoint_id` is the latest, as LangGraph's
    /// savers read it. A known key with a value of the wrong type is
    /// [`Error::InvalidConfig`].
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::from_json(&serde_json::json!({
    ///     "configurable": { "thread_id": "t", "user": "ada" },
    ///     "recursion_limit": 10,
    /// }))?;
    /// assert_eq!(config.thread_id(), Some("t"));
    /// assert_eq!(config.get_recursion_limit(), 10);
    /// assert_eq!(config.get_configurable()["user"], "ada");
    /// assert!(RunConfig::from_json(&serde_json::json!({ "recursion_limit": "ten" })).is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn from_json(value: &Value) -> Result<Self> {
        let bad = |reason: String| Error::InvalidConfig { reason };
        let obj = value
            .as_object()
            .ok_or_else(|| bad("expected a JSON object".into()))?;
        let mut config = RunConfig::default();
        // A `configurable` key: the addressing fields must be strings, any
        // other key belongs to the application.
        let set = |config: &mut RunConfig, ck: &str, cv: &Value| -> Result<()> {
            let as_str = || {
                cv.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| not_a_string(ck, cv))
            };
            match ck {
                "thread_id" => config.thread_id = Some(as_str()?),
                "checkpoint_ns" => config.checkpoint_ns = as_str()?,
                // As LangGraph's savers read it: an empty id is the latest.
                "checkpoint_id" => {
                    config.checkpoint_id = Some(as_str()?).filter(|id| !id.is_empty())
                }
                _ => {
                    config.configurable.insert(ck.to_owned(), cv.clone());
                }
            }
            Ok(())
        };
        // `configurable` first: other top-level keys override its entries,
        // as in LangGraph's `ensure_config`.
        if let Some(v) = obj.get("configurable").filter(|v| !v.is_null()) {
            let conf = v
                .as_object()
                .ok_or_else(|| bad("`configurable` must be an object".into()))?;
            for (ck, cv) in conf.iter().filter(|(_, v)| !v.is_null()) {
                set(&mut config, ck, cv)?;
            }
        }
        for (key, v) in obj.iter().filter(|(_, v)| !v.is_null()) {
            match key.as_str() {
                "configurable" => {}
                "recursion_limit" => {
                    let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                        bad("`recursion_limit` must be a positive integer".into())
                    })?;
                    config.recursion_limit = Some(usize::try_from(n).unwrap_or(usize::MAX));
                }
                "max_concurrency" => {
                    let n = v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                        bad("`max_concurrency` must be a positive integer".into())
                    })?;
                    config.max_concurrency = Some(usize::try_from(n).unwrap_or(usize::MAX));
                }
                "durability" => {
                    config.durability = Some(
                        serde_json::from_value(v.clone())
                            .map_err(|e| bad(format!("`durability`: {e}")))?,
                    );
                }
                "metadata" => {
                    config.metadata = v
                        .as_object()
                        .cloned()
                        .ok_or_else(|| bad("`metadata` must be an object".into()))?;
                }
                // Tracing only in LangGraph.
                "tags" | "run_name" | "callbacks" | "run_id" => {}
                // As LangGraph's `ensure_config`: other top-level keys move
                // into `configurable` (a top-level `thread_id` addresses the
                // thread).
                other => set(&mut config, other, v)?,
            }
        }
        Ok(config)
    }

    /// The LangGraph-shaped JSON form. Left out, as LangGraph's config has
    /// no place for them: the context, the lease options
    /// ([`multitask`](RunConfig::multitask), lease times, the holder's
    /// name) and an expected head.
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("t").recursion_limit(5);
    /// let json = config.to_json();
    /// assert_eq!(json["configurable"]["thread_id"], "t");
    /// assert_eq!(json["recursion_limit"], 5);
    /// // The JSON form reads back as the same config.
    /// assert_eq!(RunConfig::from_json(&json)?.get_recursion_limit(), 5);
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn to_json(&self) -> Value {
        let mut conf = Map::new();
        if let Some(t) = &self.thread_id {
            conf.insert("thread_id".into(), json!(t));
        }
        conf.insert("checkpoint_ns".into(), json!(self.checkpoint_ns));
        if let Some(id) = &self.checkpoint_id {
            conf.insert("checkpoint_id".into(), json!(id));
        }
        for (k, v) in &self.configurable {
            conf.insert(k.clone(), v.clone());
        }
        let mut out = Map::new();
        out.insert("configurable".into(), Value::Object(conf));
        if let Some(n) = self.recursion_limit {
            out.insert("recursion_limit".into(), json!(n));
        }
        if let Some(n) = self.max_concurrency {
            out.insert("max_concurrency".into(), json!(n));
        }
        if let Some(d) = self.durability {
            out.insert("durability".into(), json!(d));
        }
        if !self.metadata.is_empty() {
            out.insert("metadata".into(), Value::Object(self.metadata.clone()));
        }
        Value::Object(out)
    }

    /// Addresses a specific checkpoint instead of the latest (an empty id
    /// is the latest).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("t").checkpoint_id("1ef4f797-8335-6428-8001-8a1503f9b875");
    /// assert_eq!(config.get_checkpoint_id(), Some("1ef4f797-8335-6428-8001-8a1503f9b875"));
    /// ```
    pub fn checkpoint_id(mut self, id: impl Into<String>) -> Self {
        // The last call for an addressing key decides it (see
        // `configurable`).
        self.configurable.remove("checkpoint_id");
        self.checkpoint_id = Some(id.into()).filter(|id| !id.is_empty());
        self
    }

    /// Sets the checkpoint namespace (default `""`).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// // A subgraph's checkpoints live in a namespace of the parent's thread.
    /// let config = RunConfig::thread("t").checkpoint_ns("agent:1");
    /// assert_eq!(config.ns(), "agent:1");
    /// assert_eq!(RunConfig::thread("t").ns(), "");
    /// ```
    pub fn checkpoint_ns(mut self, ns: impl Into<String>) -> Self {
        self.configurable.remove("checkpoint_ns");
        self.checkpoint_ns = ns.into();
        self
    }

    /// Sets how many super-steps a run may take (at least 1), counted as
    /// LangGraph counts them: the step that takes in a new input (START's)
    /// is one, and the limit is checked at each step boundary before the
    /// next step is looked for, so a run that needs more fails there, one
    /// step past the limit. A chain of three nodes needs 4 from a new input.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// // A loop that never ends on its own.
    /// let graph = Graph::<S>::new("loop")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_edge(START, "inc")
    ///     .add_conditional_edges("inc", |s: &S| if s.n < 1000 { "inc" } else { END }, ["inc", END])
    ///     .compile(Compile::new())?;
    /// let err = graph.invoke(S::default(), &RunConfig::default().recursion_limit(3)).await.unwrap_err();
    /// assert!(matches!(err, Error::RecursionLimit { .. }));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// Sets when checkpoints are written (default [`Durability::Async`]).
    ///
    /// ```
    /// use weaver::{Durability, RunConfig};
    ///
    /// // Every checkpoint is stored before the next step starts.
    /// let config = RunConfig::thread("t").durability(Durability::Sync);
    /// assert_eq!(config.get_durability(), Durability::Sync);
    /// ```
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Sets a key of `configurable` (LangGraph's
    /// `config["configurable"][key]`). `thread_id`, `checkpoint_ns` and
    /// `checkpoint_id` set those fields: a string sets one (an empty
    /// checkpoint id is the latest), `null` clears it (as an absent key in
    /// [`from_json`](RunConfig::from_json)), and any other value makes every
    /// call given this config fail with [`Error::InvalidConfig`] before it
    /// reads or writes anything (a thread id is never guessed from a
    /// number), unless a later call sets that key again (this method, or
    /// [`checkpoint_id`](RunConfig::checkpoint_id),
    /// [`checkpoint_ns`](RunConfig::checkpoint_ns),
    /// [`latest`](RunConfig::latest)). Any other key
    /// belongs to the application: nodes read it with
    /// [`get_configurable`](RunConfig::get_configurable) through their
    /// `Runtime`'s config, and a string, number or boolean is also stored
    /// in each checkpoint's metadata, so history can be filtered by it,
    /// unless [`metadata`](RunConfig::metadata) sets that key, the key
    /// starts with `__`, or it looks like a credential (it contains `key`,
    /// `token`, `secret`, `password` or `auth`, as LangGraph leaves out).
    /// Under an encrypting codec such a value is sealed in the metadata
    /// unless the codec lists its key as plaintext
    /// (`EncryptedCodec::with_plaintext_metadata`).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("t").configurable("user_id", "ada");
    /// assert_eq!(config.get_configurable()["user_id"], "ada");
    /// // The addressing keys set their fields.
    /// let config = config.configurable("thread_id", "other");
    /// assert_eq!(config.thread_id(), Some("other"));
    /// ```
    pub fn configurable(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        let (key, value) = (key.into(), value.into());
        if ADDRESSING.contains(&key.as_str()) {
            // The last call for an addressing key decides it, whatever an
            // earlier one left.
            self.configurable.remove(&key);
        }
        match (key.as_str(), value.as_str()) {
            ("thread_id", Some(v)) => self.thread_id = Some(v.to_owned()),
            ("checkpoint_ns", Some(v)) => self.checkpoint_ns = v.to_owned(),
            ("checkpoint_id", Some(v)) => {
                self.checkpoint_id = Some(v.to_owned()).filter(|v| !v.is_empty())
            }
            ("thread_id", None) if value.is_null() => self.thread_id = None,
            ("checkpoint_ns", None) if value.is_null() => self.checkpoint_ns = String::new(),
            ("checkpoint_id", None) if value.is_null() => self.checkpoint_id = None,
            // A non-string addressing value stays here, where `check`
            // finds it (and `to_json` shows it, which `from_json` refuses).
            _ => {
                self.configurable.insert(key, value);
            }
        }
        self
    }

    /// [`Error::InvalidConfig`] if [`configurable`](RunConfig::configurable)
    /// was given an addressing key (`thread_id`, `checkpoint_ns`,
    /// `checkpoint_id`) with a value that is neither a string nor `null`;
    /// [`Error::InvalidArgument`] if the thread id, namespace or checkpoint
    /// id holds a NUL character, which no saver stores;
    /// [`Error::InvalidConfig`] for an empty
    /// [`lease_holder`](RunConfig::lease_holder). Every graph call checks
    /// this before it reads or writes anything.
    pub(crate) fn check(&self) -> Result<()> {
        if self.lease_holder.as_deref() == Some("") {
            return Err(Error::InvalidConfig {
                reason: "the lease holder name is empty; name it, or leave it unset".into(),
            });
        }
        let ids = [
            self.thread_id.as_deref(),
            Some(self.checkpoint_ns.as_str()),
            self.checkpoint_id.as_deref(),
        ];
        if let Some(id) = ids.into_iter().flatten().find(|id| id.contains('\0')) {
            return Err(Error::InvalidArgument {
                reason: format!("{id:?} contains a NUL character, which no saver stores"),
            });
        }
        // Refused before a lease or a checkpoint is written, as every
        // saver refuses them (`checkpoint::limits::MAX_ID_BYTES`).
        let long = [
            (
                "thread id bytes",
                self.thread_id.as_deref().unwrap_or_default(),
            ),
            ("checkpoint namespace bytes", self.checkpoint_ns.as_str()),
        ];
        if let Some((limit, id)) = long
            .into_iter()
            .find(|(_, id)| id.len() > crate::checkpoint::limits::MAX_ID_BYTES)
        {
            return Err(Error::LimitExceeded {
                limit,
                value: id.len() as u64,
                ceiling: crate::checkpoint::limits::MAX_ID_BYTES as u64,
            });
        }
        match ADDRESSING
            .iter()
            .find_map(|k| self.configurable.get(*k).map(|v| (*k, v)))
        {
            Some((key, value)) => Err(not_a_string(key, value)),
            None => Ok(()),
        }
    }

    /// The application keys of `configurable`.
    pub fn get_configurable(&self) -> &Map<String, Value> {
        &self.configurable
    }

    /// Runs at most `n` of a step's tasks at once (default: all of them).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("t").max_concurrency(4);
    /// assert_eq!(config.get_max_concurrency(), 4);
    /// assert_eq!(RunConfig::default().get_max_concurrency(), usize::MAX);
    /// ```
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = Some(n.max(1));
        self
    }

    /// How many of a step's tasks may run at once.
    pub fn get_max_concurrency(&self) -> usize {
        self.max_concurrency.unwrap_or(usize::MAX)
    }

    /// The metadata a checkpoint of this run stores besides the engine's own
    /// keys: [`metadata`](RunConfig::metadata), then the scalar
    /// [`configurable`](RunConfig::configurable) keys it does not set.
    pub(crate) fn checkpoint_extra(&self) -> Map<String, Value> {
        let mut extra = self.metadata.clone();
        for (k, v) in &self.configurable {
            let scalar = v.is_string() || v.is_number() || v.is_boolean();
            if scalar && !k.starts_with("__") && !secret_like(k) && !extra.contains_key(k) {
                extra.insert(k.clone(), v.clone());
            }
        }
        extra
    }

    /// Adds a key to the metadata stored with every checkpoint of the run.
    /// The engine's own keys (`source`, `step`, `parents`,
    /// [`CheckpointMetadata::RESERVED`](crate::checkpoint::CheckpointMetadata::RESERVED))
    /// keep their values: a key of the same name is not stored.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("a", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "a", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let config = RunConfig::thread("t").metadata("user", "ada");
    /// graph.invoke(S::default(), &config).await?;
    /// let head = graph.get_state(&config).await?;
    /// assert_eq!(head.metadata.unwrap().extra["user"], "ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Attaches a per-run context value that nodes read with
    /// `Runtime::context::<T>()`. It is never persisted.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Greeting {
    ///     text: String,
    /// }
    ///
    /// /// What the host hands every node of a run: a user, a client, a key.
    /// struct User(String);
    ///
    /// fn greet(_: &Greeting, rt: &Runtime) -> GreetingUpdate {
    ///     let name = rt.context::<User>().map_or("stranger", |u| u.0.as_str());
    ///     GreetingUpdate::default().text(format!("hello, {name}"))
    /// }
    ///
    /// let graph = Graph::<Greeting>::new("greet")
    ///     .add_node("greet", greet)
    ///     .add_sequence([START, "greet", END])
    ///     .compile(Compile::new())?;
    /// let config = RunConfig::default().with_context(User("ada".into()));
    /// let out = graph.invoke(Greeting::default(), &config).await?.complete()?;
    /// assert_eq!(out.text, "hello, ada");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn with_context<T: Any + Send + Sync>(mut self, context: T) -> Self {
        self.context = Some(Arc::new(context));
        self
    }

    /// Runs only on top of the thread's checkpoint numbered `commit_order`
    /// (0: a thread with no checkpoint yet): if the thread's head is another
    /// one when the run starts, the run fails with
    /// [`Error::VersionConflict`] (`attempted` = `commit_order + 1`) before
    /// it reads or writes anything else. Optimistic concurrency for a host
    /// that loaded version N and must not act on a thread someone else has
    /// moved on since; a writer that passes the check and then loses the
    /// race for N + 1 fails the same way, and stores nothing of the step
    /// it lost: such a run writes in line (`Durability::Async` is taken as
    /// `Sync`) and stores each step's last writes with the checkpoint they
    /// end in, so a racing run never takes them in as its own. An
    /// `update_state` checks it too. A run that first finishes a dead
    /// holder's turn ([`Multitask`]) checks it
    /// before that, against the head the caller saw. Never stored.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Count {
    ///     #[reducer(add)]
    ///     n: u64,
    /// }
    ///
    /// let graph = Graph::<Count>::new("count")
    ///     .add_node("inc", |_: &Count| CountUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// let fresh = RunConfig::thread("t").expect_head(0);
    /// graph.invoke(Count::default(), &fresh).await?;
    /// // The thread is at version 3 now: a run expecting it empty is refused.
    /// let stale = graph.invoke(Count::default(), &fresh).await;
    /// assert!(matches!(stale, Err(Error::VersionConflict { attempted: 1, .. })));
    /// graph.invoke(Count::default(), &RunConfig::thread("t").expect_head(3)).await?;
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn expect_head(mut self, commit_order: u64) -> Self {
        self.expected_head = Some(commit_order);
        self
    }

    /// The head [`expect_head`](RunConfig::expect_head) requires, if any.
    pub fn get_expected_head(&self) -> Option<u64> {
        self.expected_head
    }

    /// The same config without an expected head (a subgraph's run, in a
    /// namespace of its own, is not held to the parent's).
    pub(crate) fn without_expected_head(mut self) -> Self {
        self.expected_head = None;
        self
    }

    /// The thread id, if any.
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// assert_eq!(RunConfig::thread("t").thread_id(), Some("t"));
    /// assert_eq!(RunConfig::default().thread_id(), None);
    /// ```
    pub fn thread_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    /// The checkpoint namespace.
    pub fn ns(&self) -> &str {
        &self.checkpoint_ns
    }

    /// The checkpoint id addressed, if any (else the latest).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let config = RunConfig::thread("t").checkpoint_id("c1");
    /// assert_eq!(config.get_checkpoint_id(), Some("c1"));
    /// assert_eq!(config.latest().get_checkpoint_id(), None);
    /// ```
    pub fn get_checkpoint_id(&self) -> Option<&str> {
        self.checkpoint_id.as_deref()
    }

    /// The recursion limit in force.
    pub fn get_recursion_limit(&self) -> usize {
        self.recursion_limit.unwrap_or(DEFAULT_RECURSION_LIMIT)
    }

    /// The durability mode in force.
    pub fn get_durability(&self) -> Durability {
        self.durability.unwrap_or_default()
    }

    /// Sets what the run does when another run holds its thread (default
    /// [`Multitask::Reject`]).
    ///
    /// ```
    /// use weaver::RunConfig;
    /// use std::time::Duration;
    /// use weaver::config::Multitask;
    ///
    /// // Wait (up to 5 s) for the run holding the thread to finish, then run.
    /// let enqueue = Multitask::Enqueue { wait: Duration::from_secs(5) };
    /// let config = RunConfig::thread("t").multitask(enqueue);
    /// assert_eq!(config.get_multitask(), enqueue);
    /// ```
    pub fn multitask(mut self, strategy: Multitask) -> Self {
        self.multitask = Some(strategy);
        self
    }

    /// What the run does when another run holds its thread.
    pub fn get_multitask(&self) -> Multitask {
        self.multitask.unwrap_or_default()
    }

    /// Sets how long the run's hold of its thread lasts and how often it is
    /// renewed (default [`LeaseTimes::default`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::RunConfig;
    /// use weaver::config::LeaseTimes;
    ///
    /// let config = RunConfig::thread("t").lease_times(LeaseTimes::new(Duration::from_secs(3)));
    /// assert_eq!(config.get_lease_times().renew, Duration::from_secs(1));
    /// ```
    pub fn lease_times(mut self, times: LeaseTimes) -> Self {
        self.lease_times = Some(times);
        self
    }

    /// How long the run's hold of its thread lasts and how often it is renewed.
    pub fn get_lease_times(&self) -> LeaseTimes {
        self.lease_times.unwrap_or_default()
    }

    /// Names the run's holder of the thread's lease (by default each run
    /// is its own holder, with a fresh id). Runs with the same holder name
    /// are one holder: a run of it that pauses at an interrupt keeps the
    /// thread, for one lease time, so that its resume goes on before any
    /// other holder's run: a turn with a pause stays whole. Use a name
    /// unique to the turn (a worker's name and turn number). Such a holder
    /// answers its own pauses: if it dies, or does not resume within a
    /// lease time, the run that takes the thread over removes its whole
    /// turn (effects journaled in it included) rather than leave the pause
    /// for another holder; an unnamed run's pause stays for anyone. An
    /// empty name is [`Error::InvalidConfig`] when the run starts.
    ///
    /// ```
    /// use weaver::RunConfig;
    /// let config = RunConfig::thread("t").lease_holder("worker-a:7");
    /// assert_eq!(config.get_lease_holder(), Some("worker-a:7"));
    /// ```
    pub fn lease_holder(mut self, holder: impl Into<String>) -> Self {
        self.lease_holder = Some(holder.into());
        self
    }

    /// The run's holder name, when one was set.
    pub fn get_lease_holder(&self) -> Option<&str> {
        self.lease_holder.as_deref()
    }

    /// The user metadata attached to checkpoints of this run.
    pub fn get_metadata(&self) -> &Map<String, Value> {
        &self.metadata
    }

    /// The per-run context, if one of type `T` was attached.
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// struct Tenant(&'static str);
    /// let config = RunConfig::default().with_context(Tenant("acme"));
    /// assert_eq!(config.context::<Tenant>().map(|t| t.0), Some("acme"));
    /// assert!(config.context::<String>().is_none());
    /// ```
    pub fn context<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.context.as_deref()?.downcast_ref()
    }

    /// The checkpoint this config addresses, if it names a thread.
    pub fn checkpoint_ref(&self) -> Option<CheckpointRef> {
        Some(CheckpointRef {
            thread_id: self.thread_id.clone()?,
            checkpoint_ns: self.checkpoint_ns.clone(),
            checkpoint_id: self.checkpoint_id.clone(),
        })
    }

    /// The same config with the checkpoint id dropped (so it addresses the latest).
    ///
    /// ```
    /// use weaver::RunConfig;
    ///
    /// let past = RunConfig::thread("t").checkpoint_id("c1");
    /// let head = past.latest();
    /// assert_eq!((head.thread_id(), head.get_checkpoint_id()), (Some("t"), None));
    /// ```
    pub fn latest(&self) -> Self {
        let mut config = RunConfig {
            checkpoint_id: None,
            ..self.clone()
        };
        config.configurable.remove("checkpoint_id");
        config
    }
}

impl From<CheckpointRef> for RunConfig {
    fn from(r: CheckpointRef) -> Self {
        RunConfig {
            thread_id: Some(r.thread_id),
            checkpoint_ns: r.checkpoint_ns,
            checkpoint_id: r.checkpoint_id,
            ..RunConfig::default()
        }
    }
}

/// The `configurable` keys that address a checkpoint and must be strings.
const ADDRESSING: [&str; 3] = ["thread_id", "checkpoint_ns", "checkpoint_id"];

/// The error for an addressing key given `value`, which is not a string.
fn not_a_string(key: &str, value: &Value) -> Error {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Error::InvalidConfig {
        reason: format!("`configurable.{key}` must be a string, not {kind}"),
    }
}

/// Whether a `configurable` key looks like a credential, which is never
/// copied into checkpoint metadata (LangGraph leaves out the same words).
fn secret_like(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["key", "token", "secret", "password", "auth"]
        .iter()
        .any(|w| key.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_addressing() {
        let c = RunConfig::thread("t1")
            .checkpoint_id("c9")
            .checkpoint_ns("sub")
            .recursion_limit(7);
        let back = RunConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(back.thread_id(), Some("t1"));
        assert_eq!(back.get_checkpoint_id(), Some("c9"));
        assert_eq!(back.ns(), "sub");
        assert_eq!(back.get_recursion_limit(), 7);
    }

    #[test]
    fn malformed_json_is_a_typed_error() {
        for bad in [
            json!([]),
            json!({"configurable": 3}),
            json!({"configurable": {"thread_id": 3}}),
            json!({"recursion_limit": 0}),
            json!({"recursion_limit": "x"}),
            json!({"durability": "sometimes"}),
        ] {
            assert!(
                matches!(RunConfig::from_json(&bad), Err(Error::InvalidConfig { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_empty_checkpoint_id_is_the_latest_as_in_langgraph() {
        let c =
            RunConfig::from_json(&json!({"configurable": {"thread_id": "t", "checkpoint_id": ""}}))
                .unwrap();
        assert_eq!(c.get_checkpoint_id(), None);
        let set = RunConfig::thread("t").configurable("checkpoint_id", "");
        assert_eq!(set.get_checkpoint_id(), None);
        assert_eq!(
            RunConfig::thread("t").checkpoint_id("").get_checkpoint_id(),
            None
        );
    }

    #[test]
    fn a_typed_setter_decides_over_a_bad_configurable_entry() {
        // The bad entry stayed, and every graph call refused the config.
        let c = RunConfig::thread("t")
            .configurable("checkpoint_id", 5)
            .configurable("checkpoint_ns", 6)
            .checkpoint_id("c1")
            .checkpoint_ns("sub");
        assert!(c.check().is_ok(), "{:?}", c.check());
        assert_eq!((c.get_checkpoint_id(), c.ns()), (Some("c1"), "sub"));
        let head = RunConfig::thread("t")
            .configurable("checkpoint_id", 5)
            .latest();
        assert!(head.check().is_ok(), "{:?}", head.check());
    }

    #[test]
    fn context_is_typed() {
        let c = RunConfig::thread("t").with_context(42u32);
        assert_eq!(c.context::<u32>(), Some(&42));
        assert_eq!(c.context::<String>(), None);
    }
}
