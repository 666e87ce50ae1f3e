//! The one error type every fallible weaver call returns.

use std::error::Error as StdError;
use std::fmt;

/// A boxed error from outside weaver (a database driver, a user's node).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Shorthand for `Result<T, weaver::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in weaver, as data a caller can match on.
///
/// Messages read as lower-case context and carry the values a caller needs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another writer already committed `attempted` on this thread: the
    /// caller loaded an older head. The conflicting commit wrote nothing;
    /// the engine never retries, the host decides. Under `Durability::Exit`
    /// a run is one commit, so the whole turn left nothing behind; under
    /// `Sync` or `Async` the run's earlier commits (its input, earlier
    /// steps) may be stored, and another turn may already have built on
    /// them: read the thread before sending the input again.
    #[error(
        "version conflict on thread `{thread_id}` (namespace `{checkpoint_ns}`): commit {attempted} is taken by another writer"
    )]
    VersionConflict {
        /// The thread written to.
        thread_id: String,
        /// The checkpoint namespace written to.
        checkpoint_ns: String,
        /// The `commit_order` this writer tried to take.
        attempted: u64,
    },

    /// The thread has no checkpoint (in the namespace asked for).
    #[error("thread `{thread_id}` has no checkpoints")]
    ThreadNotFound {
        /// The thread asked for.
        thread_id: String,
    },

    /// A checkpoint named by id does not exist on that thread.
    #[error(
        "checkpoint `{checkpoint_id}` not found on thread `{thread_id}` (namespace `{checkpoint_ns}`)"
    )]
    CheckpointNotFound {
        /// The thread searched.
        thread_id: String,
        /// The namespace searched.
        checkpoint_ns: String,
        /// The id asked for.
        checkpoint_id: String,
    },

    /// A checkpoint's recorded parent is missing from storage, so its lineage
    /// cannot be followed (e.g. by `fork_at`).
    #[error(
        "checkpoint `{checkpoint_id}` on thread `{thread_id}` names parent `{parent_id}`, which is missing"
    )]
    MissingParent {
        /// The thread.
        thread_id: String,
        /// The checkpoint whose parent is missing.
        checkpoint_id: String,
        /// The missing parent's id.
        parent_id: String,
    },

    /// The graph is malformed; found when it is compiled.
    #[error("invalid graph: {0}")]
    InvalidGraph(#[from] GraphError),

    /// A node returned an error (or panicked). Siblings' writes of the same
    /// step are kept as pending writes.
    #[error("node `{node}` failed: {source}")]
    NodeFailed {
        /// The node's name.
        node: String,
        /// What the node reported.
        #[source]
        source: BoxError,
    },

    /// A node sent a command to its parent graph
    /// ([`Command::parent`](crate::Command::parent)), but its graph ran at
    /// the top level, with no parent to take it. (Inside a subgraph the
    /// command never surfaces as an error: the parent node returns it.)
    #[error(
        "node `{node}` sent a command to its parent graph, but its graph has no parent (goto {goto:?})"
    )]
    ParentCommand {
        /// The node that sent it.
        node: String,
        /// The update for the parent, as JSON.
        update: serde_json::Value,
        /// The parent's nodes to run next.
        goto: Vec<String>,
    },

    /// A router chose a target it may not lead to: one outside the targets
    /// declared with its conditional edge, a node run by sends without a
    /// [`Send`](crate::Send), or a send to a node that takes the state.
    #[error("router `{router}` (after `{from}`) chose `{target}`: {reason}")]
    InvalidRoute {
        /// The router (its function's path).
        router: String,
        /// The node whose conditional edge it is (`__start__` for START).
        from: String,
        /// What it chose.
        target: String,
        /// Why that is refused (with the declared targets).
        reason: String,
    },

    /// A node's [`Command`](crate::Command) went to a node outside the
    /// destinations declared for it (`graph!`'s `goto:`,
    /// [`Graph::add_destinations`](crate::Graph::add_destinations)).
    #[error(
        "node `{node}` returned a Command going to `{target}`, which is not among its declared destinations {declared:?}"
    )]
    InvalidGoto {
        /// The node.
        node: String,
        /// Where its command went.
        target: String,
        /// Where it may go.
        declared: Vec<String>,
    },

    /// One attempt of a node ran longer than its timeout
    /// ([`NodePolicy::timeout`](crate::NodePolicy::timeout)) and was
    /// cancelled. Counts as a failed attempt for the node's retry policy.
    #[error("node `{node}` timed out after {timeout:?}")]
    NodeTimeout {
        /// The node's name.
        node: String,
        /// The timeout in force.
        timeout: std::time::Duration,
    },

    /// A node failed on every attempt its retry policy allowed
    /// ([`RetryPolicy`](crate::RetryPolicy)); `last` is how the last attempt
    /// failed ([`Error::NodeFailed`] or [`Error::NodeTimeout`]).
    #[error("node `{node}` failed after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// The node's name.
        node: String,
        /// The attempts made.
        attempts: u32,
        /// The last attempt's failure.
        #[source]
        last: Box<Error>,
    },

    /// One step wrote a channel in a way its reducer does not accept (two
    /// writes to a last-value channel, a bad custom reducer input).
    #[error("invalid update to channel `{channel}`: {reason}")]
    InvalidUpdate {
        /// The channel (state field) written.
        channel: String,
        /// Why it was rejected.
        reason: String,
    },

    /// The run did not reach END within the recursion limit.
    #[error(
        "recursion limit of {limit} steps reached without hitting END; raise `RunConfig::recursion_limit` if the graph is meant to loop longer"
    )]
    RecursionLimit {
        /// The limit in force.
        limit: usize,
    },

    /// The graph has a checkpointer but the run config names no thread.
    #[error(
        "this graph has a checkpointer, so the run config needs a `thread_id` (RunConfig::thread(\"...\"))"
    )]
    MissingThreadId,

    /// A feature needs a checkpointer the graph was compiled without.
    #[error(
        "{feature} needs a checkpointer: compile the graph with `Compile::new().checkpointer(...)`"
    )]
    CheckpointerRequired {
        /// What needed it.
        feature: &'static str,
    },

    /// A run config (or its JSON form) is malformed.
    #[error("invalid run config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },

    /// An argument to a weaver call is out of its domain.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },

    /// `update_state` could not tell which node the update comes from.
    #[error(
        "ambiguous update on thread `{thread_id}`: nodes {candidates:?} all wrote the last step; pass `as_node`"
    )]
    AmbiguousUpdate {
        /// The thread.
        thread_id: String,
        /// The nodes it could be attributed to.
        candidates: Vec<String>,
    },

    /// A node name that the graph does not have.
    #[error("unknown node `{node}`")]
    UnknownNode {
        /// The name given.
        node: String,
    },

    /// `resume` was called but nothing on the thread is waiting for input.
    #[error("thread `{thread_id}` has no pending interrupt to resume")]
    NoPendingInterrupt {
        /// The thread.
        thread_id: String,
    },

    /// A single resume value was given but several interrupts are pending.
    #[error(
        "{pending} interrupts are pending on thread `{thread_id}`; resume with a map keyed by interrupt id"
    )]
    AmbiguousResume {
        /// The thread.
        thread_id: String,
        /// How many interrupts are pending.
        pending: usize,
    },

    /// A resume map names an interrupt id that is not pending.
    #[error("interrupt `{interrupt_id}` is not pending on thread `{thread_id}`")]
    UnknownInterrupt {
        /// The thread.
        thread_id: String,
        /// The id given.
        interrupt_id: String,
    },

    /// The run stopped at an interrupt where a completed state was expected
    /// (see `Outcome::complete`).
    #[error("the run was interrupted ({count} interrupt(s) pending); resume it with `resume`")]
    Interrupted {
        /// How many interrupts are pending.
        count: usize,
    },

    /// The storage backend failed. Never turned into "not found".
    #[error("storage failure during `{op}`: {source}")]
    Storage {
        /// The saver or store operation.
        op: &'static str,
        /// The backend's error.
        #[source]
        source: BoxError,
    },

    /// Stored or supplied data did not decode into the declared types.
    #[error("cannot decode {what}: {reason}")]
    Decode {
        /// What was being decoded (a path where known).
        what: String,
        /// Why it failed.
        reason: String,
    },

    /// Data could not be encoded.
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// Why it failed.
        reason: String,
    },

    /// Encrypted data could not be decrypted (wrong key, tampered bytes,
    /// moved row, or plaintext where encryption is required).
    #[error("cannot decrypt {what}: {reason}")]
    Decrypt {
        /// What was being decrypted.
        what: String,
        /// Why it failed.
        reason: String,
    },

    /// The database schema is not at the version this build needs.
    #[error(
        "database schema for `{adapter}` is at version {found}, this build needs {required}: {hint}"
    )]
    MigrationRequired {
        /// The adapter (`checkpoint`, `store`).
        adapter: String,
        /// The version found (0 = not installed).
        found: u32,
        /// The version required.
        required: u32,
        /// What to run.
        hint: String,
    },

    /// A migration found stored data it cannot carry to the new version
    /// (rows it names); nothing was changed.
    #[error("cannot migrate `{adapter}` to version {version}: {reason}")]
    MigrationRefused {
        /// The adapter (`checkpoint`, `store`).
        adapter: String,
        /// The version that was not applied.
        version: u32,
        /// What stands in the way, and what to do about it.
        reason: String,
    },

    /// A size or count limit was exceeded; nothing was written.
    #[error("limit exceeded: {limit} is {value}, the ceiling is {ceiling}")]
    LimitExceeded {
        /// Which limit.
        limit: &'static str,
        /// The value found.
        value: u64,
        /// The ceiling in force.
        ceiling: u64,
    },

    /// The saver keeps only the latest checkpoint per thread, and an older one
    /// was asked for.
    #[error("saver is shallow (keeps only the latest checkpoint): {operation} is not available")]
    ShallowSaver {
        /// What was attempted.
        operation: String,
    },

    /// The target of a copy or fork already has checkpoints.
    #[error("thread `{thread_id}` already has checkpoints")]
    ThreadExists {
        /// The thread.
        thread_id: String,
    },

    /// A task ran again and called its side effects
    /// ([`Runtime::effect`](crate::Runtime::effect)) in another order than
    /// the run that journaled them: the effect at `position` is `found`
    /// where the journal holds `expected`. The journaled result is not
    /// returned for another effect, and nothing is run or stored.
    #[error(
        "task `{task_id}` called effect `{found}` at position {position}, where its journal holds `{expected}`: effects must run in the same order on every run of a task"
    )]
    EffectOrder {
        /// The task.
        task_id: String,
        /// The effect's position among the task's effects (0 for the first).
        position: usize,
        /// The name journaled at that position.
        expected: String,
        /// The name called there now.
        found: String,
    },

    /// A checkpoint was written by a version of the state that this one
    /// cannot read: a newer version, or an older one with no upcaster path
    /// to the current version (see [`crate::evolution`]).
    #[error(
        "checkpoint `{checkpoint_id}` was written by version {found} of state `{state}`, which version {current} cannot read: {reason}"
    )]
    StateVersion {
        /// The checkpoint.
        checkpoint_id: String,
        /// The state type.
        state: String,
        /// The version the checkpoint records.
        found: u32,
        /// The version of the state reading it.
        current: u32,
        /// Why, and what to do.
        reason: String,
    },

    /// An upcaster declared on the state returned an error.
    #[error(
        "cannot upcast checkpoint `{checkpoint_id}` of state `{state}` from version {from} to {to}: {reason}"
    )]
    Upcast {
        /// The checkpoint.
        checkpoint_id: String,
        /// The state type.
        state: String,
        /// The version upcast from.
        from: u32,
        /// The version upcast to.
        to: u32,
        /// The upcaster's error.
        reason: String,
    },

    /// A stored checkpoint has work pending for a node this graph does not
    /// have (it was removed or renamed since the checkpoint was written):
    /// from a run, a resume, an update or `get_state` of the thread's head.
    /// A history lists such past checkpoints without that work.
    #[error(
        "checkpoint `{checkpoint_id}` of thread `{thread_id}` has work pending for node `{node}`, which this graph does not have: add the node back, or map the old name to its new one with `Compile::rename_node(\"{node}\", \"<new name>\")`"
    )]
    RemovedNode {
        /// The thread.
        thread_id: String,
        /// The checkpoint.
        checkpoint_id: String,
        /// The node's name in the checkpoint.
        node: String,
    },

    /// A stored checkpoint changed between the read of a record and its
    /// replacement ([`Rewrites::replace`](crate::checkpoint::Rewrites::replace)):
    /// a run stored a pending write with it since. Nothing of the call was
    /// replaced; read the record again and redo the change.
    #[error(
        "checkpoint `{checkpoint_id}` of thread `{thread_id}` (namespace `{checkpoint_ns}`) has other pending writes than when it was read: read it again before replacing it"
    )]
    RewriteConflict {
        /// The thread.
        thread_id: String,
        /// The namespace.
        checkpoint_ns: String,
        /// The checkpoint.
        checkpoint_id: String,
    },

    /// Another run holds the thread's lease
    /// ([`Multitask::Reject`](crate::config::Multitask::Reject), or a
    /// waiting strategy whose wait ran out). Nothing of the thread was read
    /// or written: unlike [`VersionConflict`](Error::VersionConflict), the
    /// run never started.
    #[error("thread `{thread_id}` is busy: run `{holder}` holds it (waited {waited:?})")]
    ThreadBusy {
        /// The thread.
        thread_id: String,
        /// The run holding it when this one gave up (empty when runs queued
        /// ahead held it up).
        holder: String,
        /// How long this run waited.
        waited: std::time::Duration,
    },

    /// A newer run asked this one to stop
    /// ([`Multitask::Interrupt`](crate::config::Multitask::Interrupt) or
    /// [`Multitask::Rollback`](crate::config::Multitask::Rollback)): it
    /// stopped at a step boundary. Under `Interrupt` what it committed
    /// stays, under `Rollback` the newer run removes it.
    #[error("run on thread `{thread_id}` was stopped by a newer run ({strategy})")]
    RunStopped {
        /// The thread.
        thread_id: String,
        /// `interrupt` or `rollback`.
        strategy: &'static str,
    },

    /// The run's lease of its thread ran out, or another holder has it: the
    /// run could not renew it in time, and stopped at a step boundary
    /// instead of writing over a run that took the thread over. It leaves
    /// the lease to run out: the next run finishes its turn first (a named
    /// holder coming back under its own name goes on from where it
    /// stopped).
    #[error("run on thread `{thread_id}` lost its lease: {reason}")]
    LeaseLost {
        /// The thread.
        thread_id: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Wraps a backend error as a storage failure of operation `op`.
    ///
    /// ```
    /// use weaver::Error;
    ///
    /// // In a backend of your own (a `Saver` or a `Store`):
    /// let io = std::io::Error::other("disk full");
    /// let err = Error::storage("put", io);
    /// assert!(matches!(err, Error::Storage { op: "put", .. }));
    /// assert!(err.to_string().contains("disk full"));
    /// ```
    pub fn storage(op: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Storage {
            op,
            source: source.into(),
        }
    }

    /// A decode failure of `what`.
    pub fn decode(what: impl Into<String>, reason: impl fmt::Display) -> Self {
        Error::Decode {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// An encode failure of `what`.
    pub fn encode(what: impl Into<String>, reason: impl fmt::Display) -> Self {
        Error::Encode {
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// Whether the error stops the run holding its thread: its hold was
    /// lost, or a newer run asked it to stop. A task ending so (inside its
    /// subgraph) is no failure: no retry, no error write; the run stops as
    /// at a step boundary.
    pub(crate) fn stops_run(&self) -> bool {
        matches!(self, Error::LeaseLost { .. } | Error::RunStopped { .. })
    }

    /// An invalid argument.
    pub fn invalid_argument(reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            reason: reason.into(),
        }
    }
}

/// A structural problem in a graph, found by `compile`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// An edge or option names a node that was never added.
    #[error("edge {from} -> {to} names unknown node `{node}`")]
    UnknownNode {
        /// Source of the edge.
        from: String,
        /// Target of the edge.
        to: String,
        /// The unknown name.
        node: String,
    },
    /// Two nodes share a name.
    #[error("node `{node}` is added twice")]
    DuplicateNode {
        /// The name.
        node: String,
    },
    /// A node name is reserved or malformed.
    #[error("node name `{node}` is not allowed: {reason}")]
    InvalidNodeName {
        /// The name.
        node: String,
        /// Why.
        reason: &'static str,
    },
    /// No path from START reaches this node.
    #[error("node `{node}` is unreachable from START")]
    Unreachable {
        /// The node.
        node: String,
    },
    /// No path from this node reaches END.
    #[error("node `{node}` has no path to END")]
    NoPathToEnd {
        /// The node.
        node: String,
    },
    /// The graph has no edge out of START.
    #[error("graph has no entry point: add an edge from START")]
    NoEntryPoint,
    /// START used as a target, or END as a source.
    #[error("edge {from} -> {to} is not allowed: {reason}")]
    InvalidEdge {
        /// Source.
        from: String,
        /// Target.
        to: String,
        /// Why.
        reason: &'static str,
    },
    /// A conditional edge lists no possible target.
    #[error("conditional edge from `{from}` lists no targets")]
    EmptyConditionalTargets {
        /// The source node.
        from: String,
    },
    /// One router is added twice from one node (by its function's name, or
    /// the name given with `router_named`): each branch would run, and its
    /// sends twice. LangGraph refuses it too.
    #[error("router `{router}` is added twice from `{from}`: each would run, its sends twice")]
    DuplicateRouter {
        /// The source node.
        from: String,
        /// The router's name.
        router: String,
    },
    /// A node's goto destinations are declared as an empty list, which
    /// would leave it free to go anywhere.
    #[error("node `{node}` declares no goto destinations: list at least one, or declare none")]
    EmptyDestinations {
        /// The node.
        node: String,
    },
    /// An interrupt option names an unknown node.
    #[error("{option} names unknown node `{node}`")]
    UnknownInterruptNode {
        /// `interrupt_before` or `interrupt_after`.
        option: &'static str,
        /// The name.
        node: String,
    },
    /// A node's policy cannot be used (no attempts, a zero timeout, a
    /// backoff factor that is not a finite number of at least 0).
    #[error("node `{node}` has an unusable policy: {reason}")]
    InvalidPolicy {
        /// The node.
        node: String,
        /// Why.
        reason: &'static str,
    },
    /// A [`Compile::rename_node`](crate::Compile::rename_node) mapping that
    /// cannot be used.
    #[error("cannot read node `{old}` as `{new}`: {reason}")]
    InvalidRename {
        /// The old name.
        old: String,
        /// The new name.
        new: String,
        /// Why.
        reason: &'static str,
    },
    /// Static interrupts need a checkpointer to pause and resume. A graph
    /// used only as a subgraph runs on its parent's checkpointer, not its
    /// own: any saver satisfies this check (an `InMemorySaver`).
    #[error(
        "{option} needs a checkpointer: compile with `Compile::new().checkpointer(...)` (a graph used as a subgraph runs on its parent's; any saver will do)"
    )]
    InterruptWithoutCheckpointer {
        /// `interrupt_before` or `interrupt_after`.
        option: &'static str,
    },
}
