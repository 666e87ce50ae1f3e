//! [`CompiledGraph::draw_mermaid`]: a Mermaid flowchart of a compiled graph.

use std::fmt::Write;

use crate::engine::outline::GraphOutline;
use crate::engine::spec::Target;
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
    /// a Mermaid keyword such as `end`, nor starting with `node_` and a
    /// digit), and `node_<i>` otherwise (the label always shows the real
    /// name). A subgraph node is drawn as one node; see
    /// [`draw_mermaid_xray`](Self::draw_mermaid_xray) to draw it nested.
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
        self.draw_mermaid_xray(0)
    }

    /// [`draw_mermaid`](Self::draw_mermaid) with each subgraph node drawn
    /// as a Mermaid `subgraph` block holding its own graph, `depth` levels
    /// deep (LangGraph's `get_graph(xray=depth)`): the parent's edges lead
    /// to and from the block, and the nodes inside have the ids
    /// `node_<i>_<j>` (`node_<i>_start` and `node_<i>_end` for the
    /// subgraph's START and END), labelled with their names. Depth 0 is
    /// [`draw_mermaid`](Self::draw_mermaid).
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct State { n: i64 }
    ///
    /// let inner = Graph::<State>::new("inner")
    ///     .add_node("think", |_: &State| StateUpdate::default())
    ///     .add_sequence([START, "think", END])
    ///     .compile(Compile::new())?;
    /// let outer = Graph::<State>::new("outer")
    ///     .add_subgraph("agent", inner)
    ///     .add_sequence([START, "agent", END])
    ///     .compile(Compile::new())?;
    /// let drawn = outer.draw_mermaid_xray(1);
    /// assert!(drawn.contains("\tsubgraph agent[\"agent\"]\n"));
    /// assert!(drawn.contains("\t\tnode_0_start --> node_0_0;\n"));
    /// assert!(drawn.contains("\t__start__ --> agent;\n"));
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn draw_mermaid_xray(&self, depth: usize) -> String {
        let outline = self.outline(depth);
        let mut out = String::new();
        out.push_str("---\ntitle: ");
        out.push_str(&yaml_scalar(&outline.name));
        out.push_str("\n---\ngraph TD;\n");
        let _ = writeln!(out, "\t{START}([\"{START}\"]):::first");
        let ids = top_ids(&outline);
        draw_body(&mut out, &outline, &ids, 1);
        let _ = writeln!(out, "\t{END}([\"{END}\"]):::last");
        draw_edges(&mut out, &outline, &ids, START, END, 1);
        out.push_str("\tclassDef default fill:#f2f0ff,line-height:1.2\n");
        out.push_str("\tclassDef first fill-opacity:0\n");
        out.push_str("\tclassDef last fill:#bfb6fc\n");
        out
    }
}

/// The ids of the top-level graph's nodes: the name, or `node_<i>`.
fn top_ids(outline: &GraphOutline) -> Vec<String> {
    outline
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
        .collect()
}

/// The ids of the nodes inside the subgraph block of the node `prefix`
/// names (`node_<i>`, or a deeper one's).
fn inner_ids(outline: &GraphOutline, prefix: &str) -> Vec<String> {
    (0..outline.nodes.len())
        .map(|j| format!("{prefix}_{j}"))
        .collect()
}

/// The nodes of `outline` (ids `ids`), a subgraph node as a block with its
/// own graph inside, indented by `level` tabs.
fn draw_body(out: &mut String, outline: &GraphOutline, ids: &[String], level: usize) {
    let tabs = "\t".repeat(level);
    for (i, (node, id)) in outline.nodes.iter().zip(ids).enumerate() {
        let label = escape(&node.name);
        let Some(inner) = &node.subgraph else {
            let _ = writeln!(out, "{tabs}{id}(\"{label}\")");
            continue;
        };
        // Inside, ids are numbered by the path of indices from the top.
        let prefix = if level == 1 {
            format!("node_{i}")
        } else {
            id.clone()
        };
        let inner_ids = inner_ids(inner, &prefix);
        let (start, end) = (format!("{prefix}_start"), format!("{prefix}_end"));
        let _ = writeln!(out, "{tabs}subgraph {id}[\"{label}\"]");
        let _ = writeln!(out, "{tabs}\t{start}([\"{START}\"]):::first");
        draw_body(out, inner, &inner_ids, level + 1);
        let _ = writeln!(out, "{tabs}\t{end}([\"{END}\"]):::last");
        draw_edges(out, inner, &inner_ids, &start, &end, level + 1);
        let _ = writeln!(out, "{tabs}end");
    }
}

/// The edges of `outline`, its START and END drawn as `start` and `end`.
fn draw_edges(
    out: &mut String,
    outline: &GraphOutline,
    ids: &[String],
    start: &str,
    end: &str,
    level: usize,
) {
    let tabs = "\t".repeat(level);
    let id = |t: &Target| match t {
        Target::Node(i) => ids[*i].as_str(),
        Target::End => end,
    };
    let mut edges = |from: &str, e: &[(Target, bool)]| {
        for (t, conditional) in e {
            let arrow = if *conditional { "-.->" } else { "-->" };
            let _ = writeln!(out, "{tabs}{from} {arrow} {};", id(t));
        }
    };
    edges(start, &outline.start);
    for (node, id) in outline.nodes.iter().zip(ids) {
        edges(id, &node.out);
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
    "interpolate",
    "_self",
    "_blank",
    "_parent",
    "_top",
];

/// Whether `name` can be its own node id: a plain word that is neither
/// START, END, a Mermaid keyword, nor `node_` and a digit (the start of
/// the ids other nodes get, which it could collide with).
fn plain_id(name: &str) -> bool {
    // `node_<i>` and the ids inside subgraph blocks, `node_<i>_<j>`.
    let generated = name
        .strip_prefix("node_")
        .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()));
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name != START
        && name != END
        && !generated
        && !KEYWORDS.contains(&name.to_ascii_lowercase().as_str())
}

/// Makes a name safe inside a quoted Mermaid label: entity codes for the
/// characters the syntax uses, a line break for a newline, and the `d` of
/// `direction` as an entity code (a backquote too: a label starting with
/// one is read as a markdown string). Mermaid's flowchart lexer tries
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
        .replace('`', "#96;")
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

    /// A backquote starting a label made it a markdown string (an
    /// unclosed one broke the drawing); words the lexer takes for syntax
    /// get generated ids. (Both were written as they are.)
    #[test]
    fn backquotes_and_link_target_words_are_never_syntax() {
        assert!(!escape("`run`").contains('`'));
        for word in ["interpolate", "_self", "_blank", "_parent", "_top"] {
            assert!(!super::plain_id(word), "{word}");
        }
        assert!(super::plain_id("classify"));
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
