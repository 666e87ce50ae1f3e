//! [`CompiledGraph::draw_mermaid`]: a Mermaid flowchart of a compiled graph.

use std::fmt::Write;

use super::CompiledGraph;
use super::spec::{Edges, Target};
use super::{END, START};
use crate::state::GraphState;

impl<S: GraphState> CompiledGraph<S> {
    /// Renders the graph as a Mermaid flowchart (`graph TD`), for docs,
    /// reviews and snapshot tests.
    ///
    /// Fixed edges are solid (`-->`), conditional edges and `Command`
    /// destinations dotted (`-.->`). Nodes appear sorted by name, then the
    /// edges of START and of each node in that order, so the output is
    /// deterministic. Node ids are the names when they are plain words, and
    /// `node_<i>` otherwise (the label always shows the real name).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct State { n: i64 }
    /// fn a(_: &State) -> StateUpdate { StateUpdate::default() }
    ///
    /// let graph = graph! { state: State, nodes: [a], edges: [START -> a -> END] }
    ///     .compile(Compile::new())?;
    /// assert!(graph.draw_mermaid().contains("\t__start__ --> a;\n"));
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn draw_mermaid(&self) -> String {
        let spec = &self.inner.spec;
        let ids: Vec<String> = spec
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let plain = !n.name.is_empty()
                    && n.name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && n.name != START
                    && n.name != END;
                if plain {
                    n.name.clone()
                } else {
                    format!("node_{i}")
                }
            })
            .collect();
        let id = |t: &Target| match t {
            Target::Node(i) => ids[*i].as_str(),
            Target::End => END,
        };
        let mut out = String::new();
        out.push_str("---\ntitle: ");
        out.push_str(&escape(&spec.name));
        out.push_str("\n---\ngraph TD;\n");
        let _ = writeln!(out, "\t{START}([\"{START}\"]):::first");
        for (node, id) in spec.nodes.iter().zip(&ids) {
            let _ = writeln!(out, "\t{id}(\"{}\")", escape(&node.name));
        }
        let _ = writeln!(out, "\t{END}([\"{END}\"]):::last");
        let mut edges = |from: &str, e: &Edges<S>| {
            for t in &e.fixed {
                let _ = writeln!(out, "\t{from} --> {};", id(t));
            }
            for b in &e.branches {
                for (_, t) in &b.targets {
                    let _ = writeln!(out, "\t{from} -.-> {};", id(t));
                }
            }
            for t in &e.destinations {
                let _ = writeln!(out, "\t{from} -.-> {};", id(t));
            }
        };
        edges(START, &spec.start);
        for (node, id) in spec.nodes.iter().zip(&ids) {
            edges(id, &node.out);
        }
        out.push_str("\tclassDef default fill:#f2f0ff,line-height:1.2\n");
        out.push_str("\tclassDef first fill-opacity:0\n");
        out.push_str("\tclassDef last fill:#bfb6fc\n");
        out
    }
}

/// Makes a name safe inside a quoted Mermaid label.
fn escape(name: &str) -> String {
    name.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}
