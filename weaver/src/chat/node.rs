//! A chat node as an engine node: one engine step per phase of the node
//! (its action; the wait for a reply, an interrupt; the reply's
//! validation), and the turn-local context its runs share.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::state::{Conversation, ConversationUpdate, StateWrite};
use super::types::{Action, Tracker, TurnInput, Validation};
use crate::engine::{Command, END, NodeError, Runtime};
use crate::state::GraphState;

/// A node's action.
pub(crate) type ActionFn<S> =
    Arc<dyn Fn(&S, &TurnInput) -> Action<<S as GraphState>::Update> + Send + Sync>;
/// A node's validation of the user's reply.
pub(crate) type ValidateFn<S> =
    Arc<dyn Fn(&S, &TurnInput) -> Validation<<S as GraphState>::Update> + Send + Sync>;
/// A conditional edge's router.
pub(crate) type RouterFn<S> = Arc<dyn Fn(&S) -> String + Send + Sync>;

/// Where a node leads once it is finished.
pub(crate) enum Next<S> {
    /// Always to this node (or END).
    To(String),
    /// Where the router says, among `targets`.
    Choose {
        router: RouterFn<S>,
        targets: Vec<String>,
    },
}

impl<S> Clone for Next<S> {
    fn clone(&self) -> Self {
        match self {
            Next::To(t) => Next::To(t.clone()),
            Next::Choose { router, targets } => Next::Choose {
                router: router.clone(),
                targets: targets.clone(),
            },
        }
    }
}

impl<S> Next<S> {
    /// Every node (or END) it may lead to.
    pub fn targets(&self) -> Vec<String> {
        match self {
            Next::To(t) => vec![t.clone()],
            Next::Choose { targets, .. } => targets.clone(),
        }
    }
}

/// A chat node as declared.
pub(crate) struct NodeDef<S: GraphState> {
    pub id: String,
    pub action: Option<ActionFn<S>>,
    /// The validation and the message that re-asks after an invalid reply.
    pub validate: Option<(ValidateFn<S>, String)>,
    pub auto_advance: bool,
}

/// What the runs of one turn share: the user's input (taken by the first
/// node that waits for a reply), the messages emitted, and the count of
/// node runs against the turn's bound. Lives in the run's context: never
/// stored.
pub(crate) struct TurnCtx {
    input: TurnInput,
    reply_taken: AtomicBool,
    emitted: Mutex<Vec<String>>,
    runs: AtomicUsize,
    max_runs: usize,
    exceeded: AtomicBool,
}

impl TurnCtx {
    /// A turn with `input`, at most `max_runs` node runs; `awaited` says
    /// the conversation waited for a reply when the turn started (else the
    /// message is no reply: it only starts the turn).
    pub fn new(input: TurnInput, max_runs: usize, awaited: bool) -> Self {
        TurnCtx {
            input,
            reply_taken: AtomicBool::new(!awaited),
            emitted: Mutex::new(Vec::new()),
            runs: AtomicUsize::new(0),
            max_runs,
            exceeded: AtomicBool::new(false),
        }
    }

    /// The messages emitted so far.
    pub fn emitted(&self) -> Vec<String> {
        self.emitted.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Whether a node run was refused by the turn's bound.
    pub fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::SeqCst)
    }

    pub fn max_runs(&self) -> usize {
        self.max_runs
    }

    fn emit(&self, messages: Vec<String>) {
        if let Ok(mut m) = self.emitted.lock() {
            m.extend(messages);
        }
    }

    /// Takes the user's reply: `true` for the first node asking this turn.
    fn take_reply(&self) -> bool {
        !self.reply_taken.swap(true, Ordering::SeqCst)
    }

    /// Counts one node run; refuses the one past the bound.
    fn count(&self, node: &str) -> Result<(), NodeError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n > self.max_runs {
            self.exceeded.store(true, Ordering::SeqCst);
            return Err(NodeError::msg(format!(
                "chat node `{node}` would be run {n} of at most {} in one turn",
                self.max_runs
            )));
        }
        Ok(())
    }
}

/// The engine node of chat node `def`, leading to `next`.
pub(crate) struct FlowNode<S: GraphState> {
    pub def: Arc<NodeDef<S>>,
    pub next: Option<Next<S>>,
}

pub(crate) type Step<S> = Result<Command<ConversationUpdate<S>>, NodeError>;

impl<S: GraphState> FlowNode<S> {
    /// Runs the node's phase the tracker says it is in.
    pub fn step(&self, conv: &Conversation<S>, rt: &Runtime) -> Step<S> {
        let turn = rt.context::<Arc<TurnCtx>>().ok_or_else(|| {
            NodeError::msg("a chat node runs in a turn of its ChatFlow (`ChatFlow::turn`)")
        })?;
        let id = &self.def.id;
        // An auto-advancing node never waits for a reply: entered again
        // (a loop back to itself), it acts again.
        if self.def.auto_advance || !conv.tracker.awaits_reply_to(id) {
            return self.act(conv, turn);
        }
        if !turn.take_reply() {
            // The reply of this turn went to a node before: wait for the
            // next turn. The pause is what the turn's caller sees.
            rt.interrupt(json!({ "awaiting_reply": id }))?;
            return Err(NodeError::msg(format!(
                "chat node `{id}` was resumed without a reply"
            )));
        }
        turn.count(id)?;
        let verdict = match &self.def.validate {
            Some((validate, _)) => validate(&conv.state, &turn.input),
            None => Validation::valid(),
        };
        match verdict {
            Validation::Valid(update) => {
                let tracker = Tracker {
                    reply_valid: true,
                    ..conv.tracker.clone()
                };
                self.advance(conv, update, tracker)
            }
            Validation::Invalid => {
                if let Some((_, reask)) = &self.def.validate {
                    turn.emit(vec![reask.clone()]);
                }
                // Still waiting for a reply to this node: its next run
                // (this turn's next step) pauses.
                let update = ConversationUpdate {
                    state: None,
                    tracker: Some(conv.tracker.clone()),
                };
                Ok(Command::update(update).goto(id))
            }
        }
    }

    /// Enters the node: runs its action, then moves on (auto-advance) or
    /// waits for the user's reply.
    fn act(&self, conv: &Conversation<S>, turn: &TurnCtx) -> Step<S> {
        let id = &self.def.id;
        turn.count(id)?;
        let action = match &self.def.action {
            Some(action) => action(&conv.state, &turn.input),
            None => Action::none(),
        };
        turn.emit(action.messages);
        let tracker = Tracker {
            node: Some(id.clone()),
            action_taken: true,
            reply_valid: false,
            done: false,
        };
        if self.def.auto_advance {
            return self.advance(conv, action.update, tracker);
        }
        let update = ConversationUpdate {
            state: action.update.map(StateWrite::Update),
            tracker: Some(tracker),
        };
        Ok(Command::update(update).goto(id))
    }

    /// Leaves the node for its successor (given the state with `update`
    /// applied), with `tracker` as the node left it.
    fn advance(
        &self,
        conv: &Conversation<S>,
        update: Option<S::Update>,
        tracker: Tracker,
    ) -> Step<S> {
        let id = &self.def.id;
        let target = match &self.next {
            None => END.to_owned(),
            Some(Next::To(t)) => t.clone(),
            Some(Next::Choose { router, targets }) => {
                let mut view = conv.state.clone();
                if let Some(u) = &update {
                    view.apply(vec![u.clone()]).map_err(|e| {
                        NodeError::msg(format!("applying the update of `{id}`: {e}"))
                    })?;
                }
                let chosen = router(&view);
                if !targets.contains(&chosen) {
                    return Err(NodeError::msg(format!(
                        "the router after `{id}` chose `{chosen}`, not one of its targets {targets:?}"
                    )));
                }
                chosen
            }
        };
        let tracker = Tracker {
            done: target == END,
            ..tracker
        };
        let update = ConversationUpdate {
            state: update.map(StateWrite::Update),
            tracker: Some(tracker),
        };
        Ok(Command::update(update).goto(target))
    }
}
