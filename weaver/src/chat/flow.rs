//! [`ChatFlow`]: one conversation of a chat flow, turn by turn, and the
//! storage API over its numbered snapshots.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::node::TurnCtx;
use super::options::ChatOptions;
use super::state::{Conversation, ConversationUpdate};
use super::store::{self, ChatSnapshot};
use super::types::{Tracker, Turn, TurnInput};
use crate::checkpoint::{Checkpointer, PruneStrategy};
use crate::config::{Durability, RunConfig};
use crate::engine::{
    CheckpointEvent, CompiledGraph, History, Input, Outcome, Resume, StateSnapshot,
};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// What the flow holds in memory of its conversation: the snapshot last
/// loaded, restored or made by a turn.
#[derive(Debug, Clone)]
struct Local<S> {
    state: S,
    tracker: Tracker,
    /// The stored version `state` is (0: none).
    version: u64,
    /// The stored head the flow knows of: a save writes the version after it.
    head: u64,
    /// With auto-save off: progress of turns (or a restore) not saved yet.
    unsaved: bool,
}

impl<S: Default> Default for Local<S> {
    fn default() -> Self {
        Local {
            state: S::default(),
            tracker: Tracker::default(),
            version: 0,
            head: 0,
            unsaved: false,
        }
    }
}

/// One conversation of a compiled chat flow (see
/// [`ChatFlowBuilder::compile`](super::ChatFlowBuilder::compile)).
///
/// A turn ([`turn`](Self::turn)) loads the conversation's latest snapshot,
/// runs the flow from where it stands until it waits for the user (or
/// reaches END), and returns the messages its nodes emitted. The flow runs
/// on the engine: every chat node is an engine node, the wait for a reply
/// is an interrupt, and every snapshot is a checkpoint of the thread named
/// by the conversation's id, numbered by its commit order (versions 1, 2,
/// …). Any process that builds the same flow can take the next turn.
///
/// Emitted messages and a turn's payload are never stored: a restored
/// conversation starts its next turn with none, and no replay re-sends
/// old text.
///
/// Concurrency follows chat-graph's contract: two turns that loaded the same
/// version race for the next one, and the loser fails with
/// [`Error::VersionConflict`] (the conversation's id and the version it
/// attempted), storing nothing; the flow never retries. A turn stores a
/// snapshot after each action and valid reply, so a race can also fall
/// after a turn's first snapshot, which then stays (see
/// [`turn`](Self::turn)). Chat flows do not
/// take a per-thread lease or multitask strategy of the run config: the
/// version check is their only guard.
pub struct ChatFlow<S: GraphState> {
    id: String,
    stored: CompiledGraph<Conversation<S>>,
    /// With auto-save off: where turns run until [`save`](Self::save).
    scratch: Option<CompiledGraph<Conversation<S>>>,
    max_nodes: usize,
    /// The auto-advancing nodes: a tracker naming one never waits for a
    /// reply (it is where a turn stopped right after such a node).
    auto: BTreeSet<String>,
    local: Mutex<Local<S>>,
}

impl<S: GraphState> fmt::Debug for ChatFlow<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatFlow")
            .field("id", &self.id)
            .field("flow", &self.stored.name())
            .field("auto_save", &self.scratch.is_none())
            .field("max_nodes_per_turn", &self.max_nodes)
            .finish_non_exhaustive()
    }
}

impl<S: GraphState> ChatFlow<S> {
    pub(crate) fn new(
        options: ChatOptions,
        stored: CompiledGraph<Conversation<S>>,
        scratch: Option<CompiledGraph<Conversation<S>>>,
        auto: BTreeSet<String>,
    ) -> Self {
        ChatFlow {
            id: options.id,
            stored,
            scratch,
            max_nodes: options.max_nodes_per_turn,
            auto,
            local: Mutex::new(Local::default()),
        }
    }

    /// The conversation's id (the engine thread its snapshots are stored under).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_edge("inc", END)
    ///     .compile(ChatOptions::new("user-42", InMemorySaver::new()))?;
    /// assert_eq!(flow.id(), "user-42");
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The state the flow holds: the initial one until a turn or a
    /// [`restore`](Self::restore) loads one (nothing is loaded when the
    /// flow is built).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_edge("inc", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert_eq!(flow.state().n, 0); // nothing loaded yet
    /// flow.turn("").await?;
    /// assert_eq!(flow.state().n, 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn state(&self) -> S {
        self.with_local(|l| l.state.clone())
    }

    /// The tracker the flow holds (see [`state`](Self::state)).
    pub fn tracker(&self) -> Tracker {
        self.with_local(|l| l.tracker.clone())
    }

    /// The stored version the flow's state is (0 before any is loaded).
    pub fn version(&self) -> u64 {
        self.with_local(|l| l.version)
    }

    /// With auto-save off: whether turns (or a restore of an older version)
    /// made progress that [`save`](Self::save) has not stored yet.
    pub fn has_unsaved(&self) -> bool {
        self.with_local(|l| l.unsaved)
    }

    fn with_local<T>(&self, f: impl FnOnce(&mut Local<S>) -> T) -> T {
        let mut guard = self.local.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// A turn's config. Chat flows keep chat-graph's contract: two turns
    /// racing on one conversation give one `VersionConflict` (the version
    /// check of `expect_head`), so they take no per-thread lease
    /// ([`Multitask::Race`](crate::config::Multitask::Race)).
    fn config(&self) -> RunConfig {
        RunConfig::thread(self.id.clone()).multitask(crate::config::Multitask::Race)
    }

    fn checkpointer(&self) -> Result<&Checkpointer> {
        store::checkpointer(&self.stored)
    }

    /// The conversation's latest stored version (0: none).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::say("+1").update(SUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_edge("inc", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert_eq!(flow.latest_version().await?, 0);
    /// flow.turn("").await?;
    /// // The engine's input and start checkpoints, then the action's snapshot.
    /// assert_eq!(flow.latest_version().await?, 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn latest_version(&self) -> Result<u64> {
        store::head(self.checkpointer()?, &self.id).await
    }

    /// Takes one turn: loads the latest snapshot, runs the flow with the
    /// user's `input` until it waits for the next reply or reaches END, and
    /// returns the messages emitted. A turn on a finished flow runs nothing
    /// and says it is done.
    ///
    /// # Errors
    ///
    /// [`Error::VersionConflict`] when another turn stored the next version
    /// first: nothing of this turn is stored when that was its first
    /// snapshot; the snapshots it stored before (a reply it validated) stay
    /// when the race fell later in the turn (see the guide's concurrent
    /// turns); [`Error::LimitExceeded`]
    /// when the turn would run more nodes than
    /// [`ChatOptions::max_nodes_per_turn`] (what ran before is kept, as
    /// saved); a node's failure, a storage or decode error.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, Validation};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Form {
    ///     name: String,
    /// }
    ///
    /// let saver = std::sync::Arc::new(InMemorySaver::new());
    /// let build = || {
    ///     let ask = ChatNode::new("ask_name")
    ///         .action(|_, _| Action::say("Your name?"))
    ///         .validate("A name, please.", |_, reply| match reply.user_message.trim() {
    ///             "" => Validation::Invalid,
    ///             name => Validation::valid_with(FormUpdate::default().name(name)),
    ///         });
    ///     let thanks = ChatNode::new("thanks")
    ///         .action(|s: &Form, _| Action::say(format!("Thanks, {}!", s.name)))
    ///         .auto_advance();
    ///     ChatFlowBuilder::<Form>::new("form")
    ///         .add_node(ask)
    ///         .add_node(thanks)
    ///         .add_edge(START, "ask_name")
    ///         .add_edge("ask_name", "thanks")
    ///         .add_edge("thanks", END)
    ///         .compile(ChatOptions::shared("c1", saver.clone()))
    /// };
    /// let flow = build()?;
    /// assert_eq!(flow.turn("").await?.messages, ["Your name?"]);
    /// assert_eq!(flow.turn("  ").await?.messages, ["A name, please."]);
    /// // Any other flow object (or process) on the saver takes the next turn.
    /// let again = build()?;
    /// let turn = again.turn("Ada").await?;
    /// assert_eq!(turn.messages, ["Thanks, Ada!"]);
    /// assert!(turn.done);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn turn(&self, input: impl Into<TurnInput>) -> Result<Turn> {
        let head = self.latest_version().await?;
        self.turn_at(head, input).await
    }

    /// [`turn`](Self::turn), only if the conversation's latest stored
    /// version is `version` (the one the caller loaded, say, to show the
    /// user): otherwise [`Error::VersionConflict`] with `version + 1`, and
    /// nothing runs. With auto-save off, `version` must be the one the
    /// flow's unsaved progress extends, if it has some: otherwise the
    /// conflict names the version that progress would be saved as (the one
    /// after the version it extends), as [`save`](Self::save)'s would.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("echo")
    ///     .add_node(ChatNode::new("ask").action(|_, _| Action::say("Say something")))
    ///     .add_edge(START, "ask")
    ///     .add_edge("ask", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// flow.turn_at(0, "").await?;
    /// let seen = flow.latest_version().await?;
    /// assert!(matches!(flow.turn_at(seen - 1, "late").await, Err(Error::VersionConflict { .. })));
    /// assert!(flow.turn_at(seen, "hello").await?.done);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn turn_at(&self, version: u64, input: impl Into<TurnInput>) -> Result<Turn> {
        let input = input.into();
        let config = self.config();
        let Some(scratch) = &self.scratch else {
            let at = self.stored.get_state(&config).await?;
            if at.commit_order != version {
                return Err(self.conflict(version));
            }
            let (turn, last) = self.run(&self.stored, &at, Some(version), input).await;
            // What the turn went on from was pruned or deleted by another
            // writer (a turn that got there first and its host's `prune`,
            // or a `delete`): the conversation moved on.
            if matches!(turn, Err(Error::CheckpointNotFound { .. }))
                && !matches!(self.latest_version().await, Ok(h) if h == version)
            {
                return Err(self.conflict(version));
            }
            // The checkpoint this turn stored last (or the one it started
            // from, if it stored none), as the run had it: never one another
            // writer stored after it, and no read that could fail once the
            // turn is committed (a caller told it failed would take it again).
            // A turn that failed after storing versions leaves the flow at
            // the last one, as it stays stored.
            let (version, now) = match (last, &turn) {
                (Some(last), _) => (last.commit_order, last.values),
                (None, Ok(_)) => (at.commit_order, at.values),
                (None, Err(_)) => return turn,
            };
            // A turn that reached END is done, a START that chose END too
            // (no node ran to mark it).
            let mut tracker = now.tracker;
            tracker.done |= matches!(&turn, Ok(t) if t.done);
            self.with_local(|l| {
                *l = Local {
                    state: now.state,
                    tracker,
                    version,
                    head: version,
                    unsaved: false,
                }
            });
            return Ok(Turn { version, ..turn? });
        };
        let (unsaved, head) = self.with_local(|l| (l.unsaved, l.head));
        if unsaved && head != version {
            return Err(self.conflict(head));
        }
        if !unsaved {
            if self.latest_version().await? != version {
                return Err(self.conflict(version));
            }
            store::seed(
                self.checkpointer()?,
                store::checkpointer(scratch)?,
                &self.id,
                version,
            )
            .await?;
        }
        let at = scratch.get_state(&config).await?;
        let before = (at.commit_order, at.pending_writes.len());
        let (turn, _) = self.run(scratch, &at, None, input).await;
        // What the turn did before a failure stays in the flow (the scratch
        // holds it), as it stays stored under auto-save: the next turn goes
        // on from there, not from the saved version again. A failed turn
        // that did nothing leaves the flow as it was.
        let now = match scratch.get_state(&config).await {
            Ok(now) => now,
            Err(e) => return Err(turn.err().unwrap_or(e)),
        };
        let moved = (now.commit_order, now.pending_writes.len()) != before;
        // A turn that changed nothing (a finished conversation) leaves the
        // flow as it was: nothing new to save.
        if moved {
            self.with_local(|l| {
                if !l.unsaved {
                    l.version = version;
                }
                l.state = now.values.state;
                l.tracker = now.values.tracker;
                l.tracker.done |= matches!(&turn, Ok(t) if t.done);
                l.head = version;
                l.unsaved = true;
            });
        }
        Ok(Turn { version, ..turn? })
    }

    fn conflict(&self, version: u64) -> Error {
        Error::VersionConflict {
            thread_id: self.id.clone(),
            checkpoint_ns: String::new(),
            attempted: version.saturating_add(1),
        }
    }

    /// Runs one turn on `graph` from `at`, its latest checkpoint; with the
    /// turn, where it stored its last checkpoint (`None`: none).
    async fn run(
        &self,
        graph: &CompiledGraph<Conversation<S>>,
        at: &StateSnapshot<Conversation<S>>,
        expect: Option<u64>,
        input: TurnInput,
    ) -> (Result<Turn>, Option<Box<CheckpointEvent<Conversation<S>>>>) {
        // Writes of a node that finished, with no snapshot after them
        // (stored alone when the snapshot failed; a turn stores a step's
        // writes with its snapshot, so never a racing turn's): the turn goes
        // on from them (the engine takes them in).
        let unfinished = !at.pending_writes.is_empty();
        // START's router may go straight to END: no node ever ran.
        let skipped = super::store::ended_at_start(
            at.commit_order,
            &at.values.tracker,
            at.next.is_empty(),
            at.interrupts.is_empty(),
        );
        if (at.values.tracker.done || skipped) && !unfinished {
            let turn = Turn {
                messages: Vec::new(),
                done: true,
                version: at.commit_order,
            };
            return (Ok(turn), None);
        }
        let start: Input<Conversation<S>> = if at.commit_order == 0 {
            Input::Update(ConversationUpdate::default())
        } else if !at.interrupts.is_empty() {
            // The answer is no content: the reply lives in the turn's context.
            Input::Resume(Resume::Value(Value::Null))
        } else if !at.next.is_empty() || unfinished {
            Input::Continue
        } else {
            let bad = Error::decode(
                format!("conversation `{}` at version {}", self.id, at.commit_order),
                "the stored conversation is neither finished nor at a node",
            );
            return (Err(bad), None);
        };
        let tracker = &at.values.tracker;
        let awaited = tracker
            .node
            .as_deref()
            .is_some_and(|n| !self.auto.contains(n) && tracker.awaits_reply_to(n));
        let ctx = Arc::new(TurnCtx::new(input, self.max_nodes, awaited));
        let mut config = self
            .config()
            .durability(Durability::Sync)
            .recursion_limit(self.max_nodes.saturating_mul(2).saturating_add(4))
            .with_context(ctx.clone());
        if let Some(v) = expect {
            config = config.expect_head(v);
        }
        let (out, last) = graph.invoke_noting_last(start, &config).await;
        let messages = ctx.emitted();
        let turn = match out {
            Err(_) if ctx.exceeded() => Err(Error::LimitExceeded {
                limit: "chat node runs in one turn",
                value: ctx.max_runs() as u64 + 1,
                ceiling: ctx.max_runs() as u64,
            }),
            Err(e) => Err(e),
            Ok(Outcome::Interrupted(_)) => Ok(Turn {
                messages,
                done: false,
                version: 0,
            }),
            // A run that completes went through END: from a node (which
            // marks the tracker done) or straight from START's router.
            Ok(Outcome::Complete(_)) => Ok(Turn {
                messages,
                done: true,
                version: 0,
            }),
        };
        (turn, last)
    }
}

/// The storage API: chat-graph's seven storage-adapter operations, seen from one
/// conversation.
impl<S: GraphState> ChatFlow<S> {
    /// Stores the snapshot the flow holds as a new version, after the latest
    /// one the flow knows of, and returns its number: with auto-save off,
    /// the progress of the turns taken since the last save (or a restored
    /// version); otherwise the snapshot last loaded or restored (so
    /// `restore(Some(2))` then `save()` makes version 2's content the
    /// latest).
    ///
    /// # Errors
    ///
    /// [`Error::VersionConflict`] if another writer stored that version
    /// first, or moved the conversation past the version the flow knows of
    /// (pruned it, or deleted the conversation): [`restore`](Self::restore)
    /// reads where it stands; [`Error::ThreadNotFound`] when the flow holds
    /// no snapshot.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("manual")
    ///     .add_node(ChatNode::new("ask").action(|_, _| Action::say("Anything?")))
    ///     .add_edge(START, "ask")
    ///     .add_edge("ask", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()).auto_save(false))?;
    /// flow.turn("").await?;
    /// assert_eq!(flow.count().await?, 0, "nothing is stored before save()");
    /// assert_eq!(flow.save().await?, 1);
    /// assert_eq!(flow.restore(None).await?.tracker.node.as_deref(), Some("ask"));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn save(&self) -> Result<u64> {
        let (version, head, unsaved) = self.with_local(|l| (l.version, l.head, l.unsaved));
        let cp = self.checkpointer()?;
        let source = match &self.scratch {
            Some(scratch) if unsaved => {
                store::latest_tuple(store::checkpointer(scratch)?, &self.id)
                    .await?
                    .ok_or_else(|| Error::ThreadNotFound {
                        thread_id: self.id.clone(),
                    })?
            }
            _ if version == 0 => {
                return Err(Error::ThreadNotFound {
                    thread_id: self.id.clone(),
                });
            }
            _ => store::at(cp, &self.id, version).await?,
        };
        let saved = store::copy_as_next(cp, &self.id, source, head).await?;
        self.with_local(|l| {
            l.version = saved;
            l.head = saved;
            l.unsaved = false;
        });
        Ok(saved)
    }

    /// Loads a stored snapshot into the flow, the latest (`None`) or
    /// version `n`, and returns it. It only sets what the flow holds: a
    /// turn still starts from the latest stored version (with auto-save
    /// off, from the restored one, as unsaved progress); [`save`](Self::save)
    /// stores it as the latest.
    ///
    /// # Errors
    ///
    /// [`Error::ThreadNotFound`] for a conversation with no snapshot (the
    /// flow then lets go of what it held, unsaved progress included: after
    /// a delete by another writer, its next turn starts over),
    /// [`Error::CheckpointNotFound`] for a version that is not stored
    /// (never written, or pruned).
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Count {
    ///     #[reducer(add)]
    ///     n: u64,
    /// }
    ///
    /// let flow = ChatFlowBuilder::<Count>::new("count")
    ///     .add_node(ChatNode::new("inc").action(|_, _| Action::none().update(CountUpdate::default().n(1u64))))
    ///     .add_edge(START, "inc")
    ///     .add_conditional_edge("inc", |s: &Count| if s.n < 5 { "inc" } else { END }, ["inc", END])
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// flow.turn("").await?;
    /// flow.turn("").await?;
    /// assert_eq!(flow.restore(None).await?.state.n, 2);
    /// let first = flow.history(None).await?.into_iter().rev().find(|s| s.state.n == 1).unwrap();
    /// assert_eq!(flow.restore(Some(first.version)).await?.state.n, 1);
    /// assert_eq!(flow.state().n, 1);
    /// assert!(matches!(flow.restore(Some(99)).await, Err(Error::CheckpointNotFound { .. })));
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn restore(&self, version: Option<u64>) -> Result<ChatSnapshot<S>> {
        let cp = self.checkpointer()?;
        let head = store::head(cp, &self.id).await?;
        if head == 0 {
            // Nothing stored (the conversation was deleted, say): the flow
            // lets go of what it held, unsaved progress included, so that
            // its next turn starts the conversation over.
            if let Some(scratch) = &self.scratch {
                store::seed(cp, store::checkpointer(scratch)?, &self.id, 0).await?;
            }
            self.with_local(|l| *l = Local::default());
            return Err(Error::ThreadNotFound {
                thread_id: self.id.clone(),
            });
        }
        let target = version.unwrap_or(head);
        let tuple = store::at(cp, &self.id, target).await?;
        let snapshot = self.stored.get_state(&tuple.config.clone().into()).await?;
        let snapshot = ChatSnapshot::of(&self.id, snapshot);
        if let Some(scratch) = &self.scratch {
            store::seed(cp, store::checkpointer(scratch)?, &self.id, target).await?;
        }
        let unsaved = self.scratch.is_some() && target != head;
        self.with_local(|l| {
            *l = Local {
                state: snapshot.state.clone(),
                tracker: snapshot.tracker.clone(),
                version: target,
                head,
                unsaved,
            }
        });
        Ok(snapshot)
    }

    /// The stored snapshots, newest first, at most `limit` of them.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("hello")
    ///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("hi")).auto_advance())
    ///     .add_edge(START, "hello")
    ///     .add_edge("hello", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// flow.turn("").await?;
    /// let history = flow.history(None).await?;
    /// let versions: Vec<u64> = history.iter().map(|s| s.version).collect();
    /// assert_eq!(versions, [3, 2, 1]);
    /// assert!(history[0].tracker.done);
    /// assert_eq!(flow.history(Some(1)).await?.len(), 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn history(&self, limit: Option<usize>) -> Result<Vec<ChatSnapshot<S>>> {
        let options = History {
            limit,
            ..History::default()
        };
        let snapshots = self
            .stored
            .get_state_history(&self.config(), options)
            .await?;
        Ok(snapshots
            .into_iter()
            .map(|s| ChatSnapshot::of(&self.id, s))
            .collect())
    }

    /// How many snapshots the conversation has stored.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("hello")
    ///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("hi")).auto_advance())
    ///     .add_edge(START, "hello")
    ///     .add_edge("hello", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// assert!(!flow.exists().await?);
    /// flow.turn("").await?;
    /// assert!(flow.exists().await?);
    /// assert_eq!(flow.count().await?, 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn count(&self) -> Result<u64> {
        let info = self.checkpointer()?.thread_info(&self.id).await?;
        Ok(info.map_or(0, |i| i.checkpoints))
    }

    /// Whether the conversation has any stored snapshot (see [`count`](Self::count)).
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("hi").action(|_, _| Action::say("hi")))
    ///     .add_edge(START, "hi")
    ///     .add_edge("hi", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// assert!(!flow.exists().await?);
    /// flow.turn("").await?;
    /// assert!(flow.exists().await?);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn exists(&self) -> Result<bool> {
        Ok(self.checkpointer()?.thread_info(&self.id).await?.is_some())
    }

    /// Deletes the conversation: every snapshot, and what the flow holds.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("hello")
    ///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("hi")).auto_advance())
    ///     .add_edge(START, "hello")
    ///     .add_edge("hello", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// flow.turn("").await?;
    /// flow.delete().await?;
    /// assert!(!flow.exists().await?);
    /// // The conversation starts over.
    /// assert_eq!(flow.turn("").await?.messages, ["hi"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn delete(&self) -> Result<()> {
        self.checkpointer()?.delete_thread(&self.id).await?;
        if let Some(scratch) = &self.scratch {
            store::checkpointer(scratch)?
                .delete_thread(&self.id)
                .await?;
        }
        self.with_local(|l| *l = Local::default());
        Ok(())
    }

    /// Deletes all but the latest `keep_last` snapshots (0 deletes the
    /// conversation, as [`delete`](Self::delete) does) and returns how many
    /// were deleted. Nothing prunes by itself: expiry is the host's policy.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Empty {}
    ///
    /// let flow = ChatFlowBuilder::<Empty>::new("hello")
    ///     .add_node(ChatNode::new("hello").action(|_, _| Action::say("hi")).auto_advance())
    ///     .add_edge(START, "hello")
    ///     .add_edge("hello", END)
    ///     .compile(ChatOptions::new("c1", InMemorySaver::new()))?;
    /// flow.turn("").await?;
    /// assert_eq!(flow.prune(1).await?, 2);
    /// assert_eq!(flow.count().await?, 1);
    /// assert!(flow.restore(None).await?.tracker.done);
    /// flow.prune(0).await?;
    /// assert!(!flow.exists().await?);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub async fn prune(&self, keep_last: usize) -> Result<u64> {
        let cp = self.checkpointer()?;
        if keep_last == 0 {
            let n = self.count().await?;
            self.delete().await?;
            return Ok(n);
        }
        cp.prune(
            std::slice::from_ref(&self.id),
            PruneStrategy::KeepLast(keep_last),
        )
        .await
    }
}
