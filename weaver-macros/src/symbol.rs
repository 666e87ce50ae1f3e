//! The macros' vocabulary: every keyword the user may write, named once.

use std::fmt::{self, Display};

use syn::{Ident, Path};

/// A keyword of the macros' input.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) struct Symbol(pub(crate) &'static str);

// `#[derive(GraphState)]`
pub(crate) const REDUCER: Symbol = Symbol("reducer");
pub(crate) const APPEND: Symbol = Symbol("append");
pub(crate) const ADD: Symbol = Symbol("add");
pub(crate) const MERGE: Symbol = Symbol("merge");
pub(crate) const REPLACE: Symbol = Symbol("replace");
pub(crate) const DELTA: Symbol = Symbol("delta");
/// `#[graph_state(version = N, upcast(1 => f, ...))]` on the state struct.
pub(crate) const GRAPH_STATE: Symbol = Symbol("graph_state");
pub(crate) const VERSION: Symbol = Symbol("version");
pub(crate) const UPCAST: Symbol = Symbol("upcast");
/// The keys of `#[graph_state(...)]`, in the order error messages list them.
pub(crate) const GRAPH_STATE_KEYS: [Symbol; 2] = [VERSION, UPCAST];
/// The built-in reducers, in the order error messages list them.
pub(crate) const REDUCERS: [Symbol; 5] = [APPEND, DELTA, ADD, MERGE, REPLACE];
/// The channels the runtime keeps beside the state's in a checkpoint and
/// its pending writes, with what each holds: `weaver::START` (the pending
/// input), `weaver::checkpoint::ERROR_CHANNEL`, `INTERRUPT_CHANNEL`,
/// `RESUME_CHANNEL`, `NO_WRITES_CHANNEL`, `SENDS_CHANNEL` and
/// `EFFECT_CHANNEL`, a finished subgraph's `__subgraph__`, and the
/// evolution's `__state_version__` write. A field of one of these names
/// would share its channel.
pub(crate) const RESERVED_CHANNELS: [(&str, &str); 9] = [
    ("__start__", "a run's pending input"),
    ("__sends__", "the sends the next step runs"),
    ("__error__", "a failed task's error"),
    ("__interrupt__", "a task's interrupts"),
    ("__resume__", "the values a task is resumed with"),
    ("__no_writes__", "the mark of a task that wrote nothing"),
    ("__effect__", "a task's journaled side effects"),
    ("__subgraph__", "the state a task's subgraph finished with"),
    ("__state_version__", "the state version of a task's writes"),
];

// `graph!`
pub(crate) const NAME: Symbol = Symbol("name");
pub(crate) const STATE: Symbol = Symbol("state");
pub(crate) const NODES: Symbol = Symbol("nodes");
pub(crate) const EDGES: Symbol = Symbol("edges");
pub(crate) const CONDITIONAL: Symbol = Symbol("conditional");
pub(crate) const GOTO: Symbol = Symbol("goto");
pub(crate) const SEND: Symbol = Symbol("send");
pub(crate) const INTERRUPT_BEFORE: Symbol = Symbol("interrupt_before");
pub(crate) const INTERRUPT_AFTER: Symbol = Symbol("interrupt_after");
pub(crate) const POLICIES: Symbol = Symbol("policies");
/// The option keys of `graph!`, in the order error messages list them.
pub(crate) const GRAPH_KEYS: [Symbol; 10] = [
    NAME,
    STATE,
    NODES,
    EDGES,
    CONDITIONAL,
    SEND,
    GOTO,
    INTERRUPT_BEFORE,
    INTERRUPT_AFTER,
    POLICIES,
];
// `graph!`'s `policies: [node => kind(value)]`: each kind is the
// `weaver::NodePolicy` method of that name.
pub(crate) const RETRY: Symbol = Symbol("retry");
pub(crate) const TIMEOUT: Symbol = Symbol("timeout");
pub(crate) const CACHE: Symbol = Symbol("cache");
/// The policy kinds, in the order error messages list them.
pub(crate) const POLICY_KINDS: [Symbol; 3] = [RETRY, TIMEOUT, CACHE];
pub(crate) const START: Symbol = Symbol("START");
pub(crate) const END: Symbol = Symbol("END");

/// "`a`, `b`, `c`".
pub(crate) fn list(symbols: &[Symbol]) -> String {
    let quoted: Vec<String> = symbols.iter().map(|s| format!("`{}`", s.0)).collect();
    quoted.join(", ")
}

impl PartialEq<Symbol> for Ident {
    fn eq(&self, word: &Symbol) -> bool {
        self == word.0
    }
}

impl PartialEq<Symbol> for &Ident {
    fn eq(&self, word: &Symbol) -> bool {
        *self == word.0
    }
}

impl PartialEq<Symbol> for Path {
    fn eq(&self, word: &Symbol) -> bool {
        self.is_ident(word.0)
    }
}

impl Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}
