//! A compiled graph as a node of a parent graph: over the parent's state
//! it is an [`IntoNode`] itself, over another state through its maps
//! ([`CompiledGraph::mapped`]); and the update a subgraph sharing its
//! parent's state type makes: its net change.

use std::fmt;
use std::marker::PhantomData;

use serde_json::{Map, Value};

use super::Input;
use super::compiled::CompiledGraph;
use super::node::{Command, IntoNode, Node, NodeError, NodeFuture, markers};
use super::runtime::Runtime;
use super::values::encode_object;
use crate::channel::ChannelKind;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// A node that runs `graph` as its task's subgraph: `input` makes its input
/// from the parent's state, `output` the parent's update from the parent's
/// state and the subgraph's final state.
struct SubgraphNode<P, T: GraphState, I, O> {
    graph: CompiledGraph<T>,
    input: I,
    output: O,
    parent: PhantomData<fn(&P)>,
}

impl<P, T: GraphState, I, O> SubgraphNode<P, T, I, O> {
    fn new(graph: CompiledGraph<T>, input: I, output: O) -> Self {
        SubgraphNode {
            graph,
            input,
            output,
            parent: PhantomData,
        }
    }
}

impl<P, T, I, O> Node<P> for SubgraphNode<P, T, I, O>
where
    P: GraphState,
    T: GraphState,
    I: Fn(&P) -> Input<T> + Send + Sync + 'static,
    O: Fn(&P, T, &Runtime) -> Result<P::Update> + Send + Sync + 'static,
{
    fn run<'a>(&'a self, state: &'a P, runtime: &'a Runtime) -> NodeFuture<'a, P::Update> {
        Box::pin(async move {
            let done = runtime
                .invoke_subgraph(&self.graph, (self.input)(state))
                .await?;
            let update = (self.output)(state, done, runtime).map_err(NodeError::from)?;
            Ok(Command::update(update))
        })
    }

    fn outline(&self, depth: usize) -> Option<super::GraphOutline> {
        Some(self.graph.outline(depth))
    }
}

// Not offered as a fix for a node function that does not fit.
#[diagnostic::do_not_recommend]
impl<S: GraphState> IntoNode<S, markers::Subgraph> for CompiledGraph<S> {
    fn into_node(self) -> Box<dyn Node<S>> {
        Box::new(SubgraphNode::new(
            self,
            |s: &S| Input::state(s.clone()),
            |before: &S, after: S, rt: &Runtime| net_update(rt.node(), before, &after),
        ))
    }
}

/// A compiled graph over a state `T` made a node of a graph over `P` by
/// its two maps ([`CompiledGraph::mapped`]).
pub struct MappedSubgraph<P, T: GraphState, I, O> {
    graph: CompiledGraph<T>,
    input: I,
    output: O,
    parent: PhantomData<fn(&P)>,
}

impl<P, T: GraphState, I, O> fmt::Debug for MappedSubgraph<P, T, I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MappedSubgraph")
            .field("graph", &self.graph.name())
            .finish_non_exhaustive()
    }
}

impl<T: GraphState> CompiledGraph<T> {
    /// This graph as a node of a graph over another state `P`: `input`
    /// makes its input (a `T` or a `T::Update`) from the parent's state,
    /// `output` the node's update from its final state. Pass it to
    /// [`Graph::add_node`](crate::Graph::add_node), or name it in
    /// `graph!`'s nodes (`search = search_graph.mapped(..)`). See
    /// [`Graph::add_subgraph_with`](crate::Graph::add_subgraph_with).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Inner {
    ///     query: String,
    /// }
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct Outer {
    ///     topic: String,
    /// }
    ///
    /// let inner = Graph::<Inner>::new("inner")
    ///     .add_node("echo", |s: &Inner| InnerUpdate::default().query(s.query.clone()))
    ///     .add_sequence([START, "echo", END])
    ///     .compile(Compile::new())?;
    /// let node = inner.mapped(
    ///     |s: &Outer| Inner { query: s.topic.clone() },
    ///     |done: Inner| OuterUpdate::default().topic(done.query),
    /// );
    /// let outer = Graph::<Outer>::new("outer")
    ///     .add_node("inner", node)
    ///     .add_sequence([START, "inner", END])
    ///     .compile(Compile::new())?;
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn mapped<P, I, O, In>(self, input: I, output: O) -> MappedSubgraph<P, T, I, O>
    where
        P: GraphState,
        I: Fn(&P) -> In + Send + Sync + 'static,
        In: Into<Input<T>>,
        O: Fn(T) -> P::Update + Send + Sync + 'static,
    {
        MappedSubgraph {
            graph: self,
            input,
            output,
            parent: PhantomData,
        }
    }
}

#[diagnostic::do_not_recommend]
impl<P, T, I, O, In> IntoNode<P, (markers::MappedSubgraph, In)> for MappedSubgraph<P, T, I, O>
where
    P: GraphState,
    T: GraphState,
    I: Fn(&P) -> In + Send + Sync + 'static,
    In: Into<Input<T>>,
    O: Fn(T) -> P::Update + Send + Sync + 'static,
{
    fn into_node(self) -> Box<dyn Node<P>> {
        let (input, output) = (self.input, self.output);
        Box::new(SubgraphNode::new(
            self.graph,
            move |s: &P| input(s).into(),
            move |_: &P, done: T, _: &Runtime| Ok(output(done)),
        ))
    }
}

/// The update a subgraph over the parent's own state type makes: what it
/// changed between `before` (the state it started from) and `after` (its
/// final state), channel by channel, as the update a node would return.
/// A last-value or replace channel that changed is written with its final
/// value; a merge channel with the entries the subgraph added or changed
/// (a sibling's write to another entry stands); an append or delta channel
/// with the items the subgraph
/// appended (so they are not appended twice; for a set or a map, whose
/// serde form is not in insertion order, the items or entries it did not
/// hold before); an add channel with the difference. A custom reducer's
/// channel that changed, or an append channel that lost items (its
/// reducer only adds, so an input that was not the parent's state), cannot
/// be told apart from a node's write:
/// [`Error::InvalidUpdate`] (map the state yourself with
/// `add_subgraph_with`). A channel whose serde form is left out (a field
/// with `skip_serializing_if`) reads as `null` on the side that left it
/// out, an empty collection or zero for an append or add channel.
fn net_update<S: GraphState>(node: &str, before: &S, after: &S) -> Result<S::Update> {
    // Compared in the update's serde form, the one the result is read
    // back from (a field stored through `#[serde(with = ..)]` has its
    // stored form there too).
    let was = encode_object("subgraph input", &S::Update::from(before.clone()))?;
    let now = encode_object("subgraph state", &S::Update::from(after.clone()))?;
    let mut update = Map::new();
    for channel in S::CHANNELS {
        let (old, new) = match (was.get(channel.name), now.get(channel.name)) {
            (None, None) => continue,
            (old, new) => (
                old.cloned().unwrap_or(Value::Null),
                new.cloned().unwrap_or(Value::Null),
            ),
        };
        if old == new {
            continue;
        }
        let unfit = |why: &str| Error::InvalidUpdate {
            channel: channel.name.to_owned(),
            reason: format!(
                "subgraph node `{node}` shares its parent's state, but the channel {why}; map the states with `add_subgraph_with`"
            ),
        };
        let write = match channel.kind {
            ChannelKind::Append | ChannelKind::Delta => {
                appended(&old, &new).ok_or_else(|| unfit("was not only appended to"))?
            }
            ChannelKind::Add => {
                let zero = |v: Value| if v.is_null() { Value::from(0) } else { v };
                difference(&zero(old), &zero(new))
                    .ok_or_else(|| unfit("is neither a number nor a `Duration` that grew"))?
            }
            // The entries it added or changed: a merge cannot remove one.
            ChannelKind::Merge => appended(&old, &new)
                .ok_or_else(|| unfit("lost entries, which a merge cannot remove"))?,
            ChannelKind::Custom => return Err(unfit("has a custom reducer")),
            _ => new,
        };
        update.insert(channel.name.to_owned(), write);
    }
    serde_path_to_error::deserialize(Value::Object(update)).map_err(|e| {
        Error::decode(
            format!("the update of subgraph node `{node}` at `{}`", e.path()),
            e.inner(),
        )
    })
}

/// What extending `old` by the result gives `new`, in serde form: the
/// items after `old`'s when `new` starts with them (a list); else, for a
/// collection whose serde order is not its insertion order (a set), the
/// items of `new` that `old` did not hold, counted as a multiset; for a
/// map, the entries `old` did not hold or held with another value. `None`
/// when `new` lost something of `old` (it was not only appended to).
/// `null` (a form left out) reads as empty.
fn appended(old: &Value, new: &Value) -> Option<Value> {
    let empty_list = || Value::Array(Vec::new());
    let (old, new) = match (old, new) {
        (Value::Null, Value::Object(_)) => (Value::Object(Map::new()), new.clone()),
        (Value::Null, _) => (empty_list(), new.clone()),
        (Value::Object(_), Value::Null) => (old.clone(), Value::Object(Map::new())),
        (_, Value::Null) => (old.clone(), empty_list()),
        _ => (old.clone(), new.clone()),
    };
    match (old, new) {
        (Value::Array(old), Value::Array(new)) => {
            if new.starts_with(&old) {
                return Some(Value::Array(new[old.len()..].to_vec()));
            }
            let mut held: std::collections::HashMap<String, usize> = Default::default();
            for item in &old {
                *held.entry(item.to_string()).or_default() += 1;
            }
            let mut added = Vec::new();
            for item in new {
                match held.get_mut(&item.to_string()) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => added.push(item),
                }
            }
            held.values()
                .all(|n| *n == 0)
                .then_some(Value::Array(added))
        }
        (Value::Object(old), Value::Object(new)) => {
            if old.keys().any(|k| !new.contains_key(k)) {
                return None;
            }
            let added: Map<String, Value> = new
                .into_iter()
                .filter(|(k, v)| old.get(k) != Some(v))
                .collect();
            Some(Value::Object(added))
        }
        _ => None,
    }
}

/// `new - old` of two JSON numbers (integers kept integers), or of two
/// `Duration`s in their serde form (`{"secs", "nanos"}`).
fn difference(old: &Value, new: &Value) -> Option<Value> {
    let duration = |v: &Value| -> Option<std::time::Duration> {
        let m = v.as_object().filter(|m| m.len() == 2)?;
        let nanos = u32::try_from(m.get("nanos")?.as_u64()?).ok()?;
        Some(std::time::Duration::new(m.get("secs")?.as_u64()?, nanos))
    };
    if let (Some(a), Some(b)) = (duration(old), duration(new)) {
        return serde_json::to_value(b.checked_sub(a)?).ok();
    }
    if let (Some(a), Some(b)) = (old.as_i64(), new.as_i64()) {
        return Some(Value::from(b.checked_sub(a)?));
    }
    if let (Some(a), Some(b)) = (old.as_u64(), new.as_u64()) {
        return b.checked_sub(a).map(Value::from);
    }
    let (a, b) = (old.as_f64()?, new.as_f64()?);
    serde_json::Number::from_f64(b - a).map(Value::Number)
}
