//! What a turn takes and gives back, what a node's action and validation
//! return, and the tracker stored with every snapshot.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the user sent in one turn: the message text and, optionally, an
/// event payload (a button press, a form field, an upload's metadata).
/// Neither is stored by the flow: both live for one turn only.
///
/// ```
/// use weaver::chat::TurnInput;
/// let input = TurnInput::new("ada@example.com").payload(serde_json::json!({ "button": "ok" }));
/// assert_eq!(input.user_message, "ada@example.com");
/// assert_eq!(TurnInput::from("hi").payload, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnInput {
    /// The user's message.
    pub user_message: String,
    /// An event payload sent with it, if any.
    pub payload: Option<Value>,
}

impl TurnInput {
    /// A turn carrying `user_message` and no payload.
    ///
    /// ```
    /// use weaver::chat::TurnInput;
    ///
    /// let input = TurnInput::new("hello");
    /// assert_eq!((input.user_message.as_str(), input.payload), ("hello", None));
    /// ```
    pub fn new(user_message: impl Into<String>) -> Self {
        TurnInput {
            user_message: user_message.into(),
            payload: None,
        }
    }

    /// The same input with an event payload.
    ///
    /// ```
    /// use weaver::chat::{Action, ChatFlowBuilder, ChatNode, ChatOptions, TurnInput};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S {}
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// // The action reads the payload of the turn (a button press); it is never stored.
    /// let flow = ChatFlowBuilder::<S>::new("f")
    ///     .add_node(ChatNode::new("ack").action(|_, input: &TurnInput| {
    ///         let button = input.payload.as_ref().and_then(|p| p["button"].as_str()).unwrap_or("none");
    ///         Action::say(format!("pressed {button}"))
    ///     }))
    ///     .add_edge(START, "ack")
    ///     .add_edge("ack", END)
    ///     .compile(ChatOptions::new("c", InMemorySaver::new()))?;
    /// let turn = flow.turn(TurnInput::new("").payload(serde_json::json!({ "button": "ok" }))).await?;
    /// assert_eq!(turn.messages, ["pressed ok"]);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }
}

impl From<&str> for TurnInput {
    fn from(message: &str) -> Self {
        TurnInput::new(message)
    }
}

impl From<String> for TurnInput {
    fn from(message: String) -> Self {
        TurnInput::new(message)
    }
}

/// What one turn did: the messages its nodes emitted, in order, and
/// whether the flow reached END.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Turn {
    /// The messages emitted in this turn (never stored).
    pub messages: Vec<String>,
    /// The flow reached END (this turn or before).
    pub done: bool,
    /// The stored version the turn left the conversation at (with auto-save
    /// off, the stored version its unsaved progress extends).
    pub version: u64,
}

/// How far the conversation is: stored with every snapshot, so that any
/// process resumes it in the middle of a node.
///
/// `node` is the node the conversation is at (the last one entered);
/// `action_taken` says its action ran, `reply_valid` that the user's reply
/// to it was accepted (the flow then moves on to the node's successor);
/// `done` that the flow reached END.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tracker {
    /// The current node, if the flow has entered one.
    pub node: Option<String>,
    /// The current node's action ran.
    pub action_taken: bool,
    /// The user's reply to the current node was valid.
    pub reply_valid: bool,
    /// The flow reached END.
    pub done: bool,
}

impl Tracker {
    /// Whether the conversation waits for the user's reply to `node`: its
    /// action ran and no reply has been accepted yet. An auto-advancing
    /// node never waits: the tracker a turn left right after one (it
    /// stopped before the next node ran) reads true here, and the flow
    /// takes no reply for it.
    pub fn awaits_reply_to(&self, node: &str) -> bool {
        !self.done && self.node.as_deref() == Some(node) && self.action_taken && !self.reply_valid
    }
}

/// What a node's action does: the messages to emit (streamed to the turn's
/// caller, never stored) and an optional update of the state.
///
/// ```
/// # #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)] struct U;
/// use weaver::chat::Action;
/// let act: Action<U> = Action::say("What is your name?").and_say("(first name is fine)").update(U);
/// assert_eq!(act.messages.len(), 2);
/// assert!(act.update.is_some());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Action<U> {
    /// The messages to emit, in order.
    pub messages: Vec<String>,
    /// The state update, if any.
    pub update: Option<U>,
}

impl<U> Default for Action<U> {
    fn default() -> Self {
        Action::none()
    }
}

impl<U> Action<U> {
    /// An action that says nothing and changes nothing.
    pub fn none() -> Self {
        Action {
            messages: Vec::new(),
            update: None,
        }
    }

    /// An action that emits `message`.
    ///
    /// ```
    /// use weaver::chat::Action;
    ///
    /// let act: Action<()> = Action::say("Hello!");
    /// assert_eq!(act.messages, ["Hello!"]);
    /// assert!(act.update.is_none());
    /// ```
    pub fn say(message: impl Into<String>) -> Self {
        Action::none().and_say(message)
    }

    /// Emits `message` too, after the ones before.
    pub fn and_say(mut self, message: impl Into<String>) -> Self {
        self.messages.push(message.into());
        self
    }

    /// Updates the state with `update` (through its reducers).
    ///
    /// ```
    /// use weaver::chat::Action;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] asked: u64 }
    ///
    /// let act = Action::say("Again?").update(SUpdate::default().asked(1u64));
    /// let mut state = S::default();
    /// state.apply(vec![act.update.unwrap()])?;
    /// assert_eq!(state.asked, 1);
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn update(mut self, update: U) -> Self {
        self.update = Some(update);
        self
    }
}

/// A validation's verdict on the user's reply.
///
/// ```
/// # #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)] struct U;
/// use weaver::chat::Validation;
/// assert!(Validation::<U>::valid().is_valid());
/// assert!(Validation::valid_with(U).is_valid());
/// assert!(!Validation::<U>::Invalid.is_valid());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum Validation<U> {
    /// The reply is accepted, with an optional state update (what the
    /// reply said); the flow moves on.
    Valid(Option<U>),
    /// The reply is refused: the node's re-ask message is emitted and the
    /// turn ends, still waiting for a reply to the same node.
    Invalid,
}

impl<U> Validation<U> {
    /// Accepted, changing nothing.
    pub fn valid() -> Self {
        Validation::Valid(None)
    }

    /// Accepted, updating the state with `update`.
    ///
    /// ```
    /// use weaver::chat::Validation;
    ///
    /// // A validation closure: trims the reply and keeps it, or refuses it.
    /// let check = |reply: &str| match reply.trim() {
    ///     "" => Validation::Invalid,
    ///     name => Validation::valid_with(name.to_owned()),
    /// };
    /// assert_eq!(check(" Ada "), Validation::Valid(Some("Ada".to_owned())));
    /// assert!(!check("  ").is_valid());
    /// ```
    pub fn valid_with(update: U) -> Self {
        Validation::Valid(Some(update))
    }

    /// Whether the reply was accepted.
    pub fn is_valid(&self) -> bool {
        matches!(self, Validation::Valid(_))
    }
}
