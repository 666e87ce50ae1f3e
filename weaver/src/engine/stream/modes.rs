//! Stream modes, one ([`StreamMode`]) or several at once ([`StreamModes`]).

use std::fmt;

/// Which events a streamed run yields: LangGraph's `stream_mode`.
///
/// Whatever the modes, a run that pauses yields
/// [`StreamEvent::Interrupted`](crate::StreamEvent::Interrupted), and the
/// last item is always [`StreamItem::Done`](crate::StreamItem::Done)
/// (unless user code panics where no error can be made of it; see
/// [`RunStream`](crate::RunStream)). Pass one to
/// [`CompiledGraph::stream_with_mode`](crate::CompiledGraph::stream_with_mode),
/// several to
/// [`CompiledGraph::stream_with_modes`](crate::CompiledGraph::stream_with_modes);
/// [`CompiledGraph::stream`](crate::CompiledGraph::stream) uses the default,
/// [`ValuesAndUpdates`](StreamMode::ValuesAndUpdates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamMode {
    /// The full state after each step
    /// ([`StreamEvent::Values`](crate::StreamEvent::Values)), as LangGraph's
    /// `stream_mode="values"`.
    Values,
    /// Each node's update
    /// ([`StreamEvent::Update`](crate::StreamEvent::Update)), as LangGraph's
    /// `stream_mode="updates"`.
    Updates,
    /// Both, in the order they happen: each node's update as it finishes,
    /// then the state once its step ends (LangGraph's
    /// `stream_mode=["updates", "values"]`).
    #[default]
    ValuesAndUpdates,
    /// What nodes send with
    /// [`StreamWriter::custom`](crate::StreamWriter::custom)
    /// ([`StreamEvent::Custom`](crate::StreamEvent::Custom)), as LangGraph's
    /// `stream_mode="custom"`.
    Custom,
    /// The message chunks nodes send with
    /// [`StreamWriter::message_chunk`](crate::StreamWriter::message_chunk)
    /// ([`StreamEvent::Message`](crate::StreamEvent::Message)), as
    /// LangGraph's `stream_mode="messages"`.
    Messages,
    /// Each task's start and result
    /// ([`StreamEvent::TaskStart`](crate::StreamEvent::TaskStart),
    /// [`StreamEvent::TaskResult`](crate::StreamEvent::TaskResult)), as
    /// LangGraph's `stream_mode="tasks"`.
    Tasks,
    /// Each checkpoint the run stores
    /// ([`StreamEvent::Checkpoint`](crate::StreamEvent::Checkpoint)), as
    /// LangGraph's `stream_mode="checkpoints"`.
    Checkpoints,
    /// [`Tasks`](StreamMode::Tasks) and
    /// [`Checkpoints`](StreamMode::Checkpoints) together, the events
    /// LangGraph's `stream_mode="debug"` carries.
    Debug,
}

impl StreamMode {
    /// The modes it stands for, one bit each.
    const fn bits(self) -> u8 {
        match self {
            StreamMode::Values => VALUES,
            StreamMode::Updates => UPDATES,
            StreamMode::ValuesAndUpdates => VALUES | UPDATES,
            StreamMode::Custom => CUSTOM,
            StreamMode::Messages => MESSAGES,
            StreamMode::Tasks => TASKS,
            StreamMode::Checkpoints => CHECKPOINTS,
            StreamMode::Debug => TASKS | CHECKPOINTS,
        }
    }
}

const VALUES: u8 = 1;
const UPDATES: u8 = 1 << 1;
const CUSTOM: u8 = 1 << 2;
const MESSAGES: u8 = 1 << 3;
const TASKS: u8 = 1 << 4;
const CHECKPOINTS: u8 = 1 << 5;
/// Not a mode: the subgraphs' events of the modes asked for are streamed too.
const SUBGRAPHS: u8 = 1 << 7;

/// The single modes, for [`StreamModes`]'s `Debug`.
const SINGLE: [(StreamMode, &str); 6] = [
    (StreamMode::Values, "values"),
    (StreamMode::Updates, "updates"),
    (StreamMode::Custom, "custom"),
    (StreamMode::Messages, "messages"),
    (StreamMode::Tasks, "tasks"),
    (StreamMode::Checkpoints, "checkpoints"),
];

/// Several stream modes at once (LangGraph's `stream_mode=[...]`): the
/// run yields the events of each, in the order they happen.
///
/// Built from one [`StreamMode`], an array or slice of them, or an
/// iterator; an empty set yields only interrupts and the result.
///
/// ```
/// use weaver::{StreamMode, StreamModes};
///
/// let modes = StreamModes::from([StreamMode::Custom, StreamMode::Messages]);
/// assert!(modes.contains(StreamMode::Custom));
/// assert!(!modes.contains(StreamMode::Values));
/// let debug = StreamModes::from(StreamMode::Debug);
/// assert!(debug.contains(StreamMode::Tasks) && debug.contains(StreamMode::Checkpoints));
/// assert_eq!(StreamModes::none().with(StreamMode::Values).with(StreamMode::Updates),
///            StreamModes::from(StreamMode::ValuesAndUpdates));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamModes(u8);

impl StreamModes {
    /// No mode: only interrupts and the result are yielded.
    ///
    /// ```
    /// use weaver::{StreamMode, StreamModes};
    ///
    /// assert!(StreamModes::none().is_empty());
    /// assert!(!StreamModes::none().contains(StreamMode::Values));
    /// ```
    pub const fn none() -> Self {
        StreamModes(0)
    }

    /// These modes and `mode`.
    ///
    /// ```
    /// use weaver::{StreamMode, StreamModes};
    ///
    /// let modes = StreamModes::none().with(StreamMode::Updates).with(StreamMode::Custom);
    /// assert!(modes.contains(StreamMode::Updates) && modes.contains(StreamMode::Custom));
    /// ```
    #[must_use]
    pub const fn with(self, mode: StreamMode) -> Self {
        StreamModes(self.0 | mode.bits())
    }

    /// Whether every mode `mode` stands for is in the set.
    ///
    /// ```
    /// use weaver::{StreamMode, StreamModes};
    ///
    /// let modes = StreamModes::from(StreamMode::ValuesAndUpdates);
    /// assert!(modes.contains(StreamMode::Values));
    /// // A combined mode is in the set only when all of it is.
    /// assert!(!StreamModes::from(StreamMode::Values).contains(StreamMode::ValuesAndUpdates));
    /// ```
    pub const fn contains(self, mode: StreamMode) -> bool {
        self.0 & mode.bits() == mode.bits()
    }

    /// Whether the set has no mode ([`with_subgraphs`](Self::with_subgraphs)
    /// alone streams nothing, though it makes a set unequal to
    /// [`none`](Self::none)).
    pub const fn is_empty(self) -> bool {
        self.0 & !SUBGRAPHS == 0
    }

    /// These modes, for the subgraphs too (LangGraph's `subgraphs=True`):
    /// the values, updates, task and checkpoint events of each subgraph a
    /// task runs, at any depth, come as
    /// [`StreamEvent::Subgraph`](crate::StreamEvent::Subgraph) with the
    /// subgraph's namespace, its state and updates as JSON (a subgraph's
    /// state type may not be the parent's). Custom values and message
    /// chunks of a subgraph's nodes come either way, tagged with their task.
    ///
    /// ```
    /// use weaver::{StreamMode, StreamModes};
    ///
    /// let modes = StreamModes::from(StreamMode::Updates).with_subgraphs();
    /// assert!(modes.subgraphs() && modes.contains(StreamMode::Updates));
    /// assert!(!StreamModes::from(StreamMode::Updates).subgraphs());
    /// ```
    #[must_use]
    pub const fn with_subgraphs(self) -> Self {
        StreamModes(self.0 | SUBGRAPHS)
    }

    /// Whether the subgraphs' events are streamed too
    /// ([`with_subgraphs`](Self::with_subgraphs)).
    pub const fn subgraphs(self) -> bool {
        self.0 & SUBGRAPHS != 0
    }
}

impl fmt::Debug for StreamModes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = SINGLE.iter().filter(|(m, _)| self.contains(*m));
        let subgraphs = self.subgraphs().then_some("subgraphs");
        f.debug_set()
            .entries(names.map(|(_, name)| *name).chain(subgraphs))
            .finish()
    }
}

impl From<StreamMode> for StreamModes {
    fn from(mode: StreamMode) -> Self {
        StreamModes(mode.bits())
    }
}

impl<const N: usize> From<[StreamMode; N]> for StreamModes {
    fn from(modes: [StreamMode; N]) -> Self {
        modes.into_iter().collect()
    }
}

impl From<&[StreamMode]> for StreamModes {
    fn from(modes: &[StreamMode]) -> Self {
        modes.iter().copied().collect()
    }
}

impl FromIterator<StreamMode> for StreamModes {
    fn from_iter<I: IntoIterator<Item = StreamMode>>(iter: I) -> Self {
        iter.into_iter()
            .fold(StreamModes::none(), StreamModes::with)
    }
}
