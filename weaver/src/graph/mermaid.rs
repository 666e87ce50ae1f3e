//! [`CompiledGraph::draw_mermaid`]: a Mermaid flowchart of a compiled graph.

use std::fmt::Write;

use crate::engine::spec::{Edges, Target};
use crate::engine::{CompiledGraph, END, START};
use crate::state::GraphState;

impl<S: GraphState> CompiledGraph<S> {
    /// Renders the graph as a Mermaid flowchart (`graph TD`), for docs,
    /// reviews and snapshot tests.
    ///
    /// Fixed edges are solid (`-->`), conditional edges and `Command`
    /// destinations dotted (`-.->`). Nodes appear sorted by name, then the
    /// edges of START and of each node in that order, so the output is
    /// deterministic. Node ids are the names when they are plain words (not
    /// a Mermaid keyword such as `end`, nor of the form `node_<digits>`),
    /// and `node_<i>` otherwise (the label always shows the real name).
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
                if plain_id(&n.name) {
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
        out.push_str(&yaml_scalar(&spec.name));
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

/// Words a Mermaid flowchart reads as syntax, never as a node id.
const KEYWORDS: &[&str] = &[
    "end",
    "graph",
    "flowchart",
    "subgraph",
    "direction",
    "style",
    "class",
    "classdef",
    "click",
    "linkstyle",
    "default",
    "call",
    "href",
];

/// Whether `name` can be its own node id: a plain word that is neither
/// START, END, a Mermaid keyword, nor of the form `node_<digits>` (the ids
/// other nodes get, which it could collide with).
fn plain_id(name: &str) -> bool {
    let generated = name
        .strip_prefix("node_")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != START
        && name != END
        && !generated
        && !KEYWORDS.contains(&name.to_ascii_lowercase().as_str())
}

/// Makes a name safe inside a quoted Mermaid label: entity codes for the
/// characters the syntax uses, a line break for a newline, and the `d` of
/// `direction` as an entity code. Mermaid's flowchart lexer tries
/// `.*direction\s+TB[^\n]*` (and `BT`, `RL`, `LR`) at the start of every
/// line, before the quotes are seen: a node named `turn direction LR` made
/// its whole line a `direction LR` statement, the node lost its label and
/// the layout changed. `%` is an entity code too: Mermaid reads a
/// `%%{init: ...}%%` directive anywhere in the text, labels included, and
/// applies its configuration.
fn escape(name: &str) -> String {
    name.replace('#', "#35;")
        .replace('%', "#37;")
        .replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
        .replace("\r\n", "<br>")
        .replace(['\n', '\r'], "<br>")
        .replace("direction", "#100;irection")
}

/// `text` as a YAML scalar for the front matter: as it is when it is plain
/// words, else double-quoted (a JSON string, with the characters YAML
/// refuses unescaped escaped too).
fn yaml_scalar(text: &str) -> String {
    // Words YAML reads as something other than a string stay quoted. So
    // does anything starting with a digit: besides what Rust reads as a
    // float, YAML reads `0x10`, `0o17` and `0b1` as integers and `1_000` as
    // a float (Mermaid's front matter then shows `16`, or no title for `0x0`).
    let typed = text.parse::<f64>().is_ok()
        || ["true", "false", "null", "yes", "no", "on", "off", "~"]
            .contains(&text.to_ascii_lowercase().as_str());
    let plain = !text.is_empty()
        && !typed
        && text.starts_with(|c: char| c.is_alphabetic())
        && text
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.'))
        && !text.ends_with(' ');
    if plain {
        return text.to_owned();
    }
    // JSON escapes the C0 controls only; YAML also refuses DEL, the C1
    // controls and U+FFFE/U+FFFF unescaped (Mermaid's parser then rejects
    // the whole front matter, and the drawing does not render).
    let json = serde_json::Value::String(text.to_owned()).to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if matches!(c, '\u{7f}'..='\u{9f}' | '\u{fffe}' | '\u{ffff}') {
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{escape, yaml_scalar};

    #[test]
    fn a_label_never_reads_as_a_direction_statement() {
        // Mermaid lexes a line matching `.*direction\s+(TB|BT|RL|LR)` as a
        // `direction` statement, whatever the quotes around it.
        for name in ["turn direction LR", "direction\tTB", "a#direction RL"] {
            let label = escape(name);
            assert!(!label.contains("direction"), "{name:?} gave {label:?}");
        }
        assert_eq!(escape("turn direction LR"), "turn #100;irection LR");
        assert_eq!(escape("a#direction RL"), "a#35;#100;irection RL");
        assert_eq!(escape("Direction TB"), "Direction TB");
    }

    #[test]
    fn a_label_never_holds_a_directive() {
        // Mermaid applies a `%%{init: ...}%%` directive found anywhere in the
        // text, and removes it from the label.
        let label = escape("x %%{init: {'theme': 'forest'}}%%");
        assert!(!label.contains('%'), "{label}");
        assert_eq!(escape("50% done"), "50#37; done");
    }

    #[test]
    fn titles_yaml_reads_as_numbers_are_quoted() {
        // `0x10` was written plain, and YAML (js-yaml, Mermaid's front
        // matter parser) reads it as the integer 16; `0x0` as 0, no title.
        for number in [
            "0x10",
            "0x0",
            "0o17",
            "0b1",
            "1_000",
            "1e3",
            "42",
            "2024-01-01",
        ] {
            assert_eq!(
                yaml_scalar(number),
                format!("\"{number}\""),
                "{number} must stay a string"
            );
        }
        for word in ["Flow", "Review v2", "my-graph.v1", "über_flow"] {
            assert_eq!(yaml_scalar(word), word);
        }
        // YAML refuses these characters unescaped, where JSON does not.
        assert_eq!(
            yaml_scalar("a\u{7f}b\u{85}c\u{9f}\u{ffff}"),
            r#""a\u007Fb\u0085c\u009F\uFFFF""#
        );
        assert_eq!(yaml_scalar("tab\there"), r#""tab\there""#);
        for typed in ["true", "NULL", "Off", "~", "", "a: b", " lead"] {
            assert!(yaml_scalar(typed).starts_with('"'), "{typed}");
        }
    }
}
