//! Running graphs: the compiled graph, its nodes and their runtime handle,
//! the step algebra, the runner, the loop (runs tasks, applies their
//! writes, checkpoints, stops at END, at an interrupt or at the recursion
//! limit), reads of a thread and `update_state`.

mod algebra;
mod cache;
mod compiled;
mod finite;
mod inspect;
pub mod node;
pub(crate) mod node_cache;
mod panics;
mod persist;
mod policy;
mod run;
mod runner;
mod runtime;
pub(crate) mod spec;
mod update;
mod values;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::state::GraphState;

pub use compiled::{CompiledGraph, RunStream};
pub use inspect::{History, StateSnapshot, TaskInfo};
pub use node::{Command, IntoNode, IntoNodeResult, Node, NodeError};
pub use policy::{CachePolicy, NodePolicy, RetryPolicy};
pub use runtime::{InterruptSignal, Runtime};
pub use spec::{END, START};
pub use update::StepUpdate;

/// How a run ended when it did not fail.
#[derive(Debug, Clone)]
pub enum Outcome<S> {
    /// The run reached END; the final state.
    Complete(S),
    /// The run paused for input; resume with
    /// [`CompiledGraph::resume`](crate::CompiledGraph::resume).
    Interrupted(Vec<Interrupt>),
}

impl<S> Outcome<S> {
    /// The final state, or [`Error::Interrupted`] if the run paused.
    pub fn complete(self) -> Result<S> {
        match self {
            Outcome::Complete(s) => Ok(s),
            Outcome::Interrupted(i) => Err(Error::Interrupted { count: i.len() }),
        }
    }

    /// The pending interrupts (empty when complete).
    pub fn interrupts(&self) -> &[Interrupt] {
        match self {
            Outcome::Complete(_) => &[],
            Outcome::Interrupted(i) => i,
        }
    }

    /// Whether the run paused.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Outcome::Interrupted(_))
    }
}

/// Where an interrupt came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptWhen {
    /// A node called `Runtime::interrupt`.
    Node,
    /// A static `interrupt_before` stop.
    Before,
    /// A static `interrupt_after` stop.
    After,
}

/// A pause waiting for human input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// Stable id: key of the resume map.
    pub id: String,
    /// The value the node passed to `interrupt` (null for static stops).
    pub value: Value,
    /// The node that paused.
    pub node: String,
    /// Where it came from.
    pub when: InterruptWhen,
}

/// What to resume an interrupted run with.
#[derive(Debug, Clone, PartialEq)]
pub enum Resume {
    /// One value, for a run with exactly one pending interrupt.
    Value(Value),
    /// Values keyed by interrupt id.
    Map(BTreeMap<String, Value>),
}

impl From<Value> for Resume {
    fn from(v: Value) -> Self {
        Resume::Value(v)
    }
}

impl From<BTreeMap<String, Value>> for Resume {
    fn from(m: BTreeMap<String, Value>) -> Self {
        Resume::Map(m)
    }
}

impl FromIterator<(String, Value)> for Resume {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Resume::Map(iter.into_iter().collect())
    }
}

/// What starts a run.
#[derive(Debug, Clone)]
pub enum Input<S: GraphState> {
    /// New input, merged into the state through the reducers (a step `-1`
    /// `input` checkpoint); unfinished tasks of the thread are discarded.
    Update(S::Update),
    /// No input: continue the thread's pending tasks (after a failure, or a
    /// static interrupt), or replay from an older `checkpoint_id`.
    Continue,
    /// Answers to pending interrupts.
    Resume(Resume),
}

impl<S: GraphState> Input<S> {
    /// New input from a full state (every channel written).
    pub fn state(state: S) -> Self {
        Input::Update(state.into())
    }

    /// New input from a partial update.
    pub fn update(update: S::Update) -> Self {
        Input::Update(update)
    }
}

/// Which events a streamed run yields: LangGraph's `stream_mode`.
///
/// Whatever the mode, a run that pauses yields
/// [`StreamEvent::Interrupted`], and the last item is always
/// [`StreamItem::Done`] (unless user code panics where no error can be
/// made of it; see [`RunStream`]). Pass it to
/// [`CompiledGraph::stream_with_mode`](crate::CompiledGraph::stream_with_mode);
/// [`CompiledGraph::stream`](crate::CompiledGraph::stream) uses the default,
/// [`ValuesAndUpdates`](StreamMode::ValuesAndUpdates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamMode {
    /// Only the full state after each step ([`StreamEvent::Values`]), as
    /// LangGraph's `stream_mode="values"`.
    Values,
    /// Only each node's update ([`StreamEvent::Update`]), as LangGraph's
    /// `stream_mode="updates"`.
    Updates,
    /// Both, in the order they happen: each node's update as it finishes,
    /// then the state once its step ends (LangGraph's
    /// `stream_mode=["updates", "values"]`).
    #[default]
    ValuesAndUpdates,
}

impl StreamMode {
    /// Whether the mode yields [`StreamEvent::Values`].
    pub(crate) fn has_values(self) -> bool {
        matches!(self, StreamMode::Values | StreamMode::ValuesAndUpdates)
    }

    /// Whether the mode yields [`StreamEvent::Update`].
    pub(crate) fn has_updates(self) -> bool {
        matches!(self, StreamMode::Updates | StreamMode::ValuesAndUpdates)
    }
}

/// One event of [`CompiledGraph::stream`](crate::CompiledGraph::stream);
/// which ones come depends on the [`StreamMode`].
#[derive(Debug, Clone)]
pub enum StreamEvent<S: GraphState> {
    /// The full state after a step (`step` as in checkpoint metadata). The
    /// first one is the state once the input is taken in (step 0 of a new
    /// thread); a run that continues or resumes from a checkpoint
    /// (`Input::Continue`, `Input::Resume`) first yields the state it starts
    /// from, as LangGraph does (a resume that is refused, running nothing,
    /// yields only its error).
    Values {
        /// The step.
        step: i64,
        /// The state.
        values: S,
    },
    /// One node's update in a step, sent as soon as the node finishes (so a
    /// node that finished is streamed even if a sibling then fails or
    /// interrupts the step; a node whose output came from stored pending
    /// writes on resume is streamed too). Taking in the input is not a node:
    /// as in LangGraph, it has no update event (it shows in the first
    /// `Values`).
    Update {
        /// The step the node ran in.
        step: i64,
        /// The node.
        node: String,
        /// What it wrote.
        update: S::Update,
    },
    /// The run paused. Sent once what the run wrote is stored (under any
    /// durability), so a consumer may stop reading here and resume later.
    Interrupted(Vec<Interrupt>),
}

/// An item of [`RunStream`].
#[derive(Debug)]
pub enum StreamItem<S: GraphState> {
    /// An event of the run.
    Event(StreamEvent<S>),
    /// The run's result (the last item).
    Done(Result<Outcome<S>>),
}
