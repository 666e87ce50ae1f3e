//! The snapshot of a state's schema a release commits, for the next
//! release's checks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::state::StateSchema;

/// A state's version and JSON Schema, as committed with a release (e.g. as
/// `state-schema.json`) for [`check_compatible`](super::check_compatible)
/// and the `weaver scan` command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SchemaSnapshot {
    /// [`GraphState::VERSION`](crate::GraphState::VERSION) of the state.
    pub state_version: u32,
    /// [`fingerprint`](super::fingerprint) of `schema`.
    pub fingerprint: String,
    /// The state's JSON Schema ([`StateSchema::state_schema`]).
    pub schema: Value,
}

/// The snapshot of `S` to commit with a release.
///
/// ```
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// #[graph_state(version = 2)]
/// struct Chat { topic: String }
///
/// let snap = weaver::evolution::schema_snapshot::<Chat>();
/// assert_eq!(snap.state_version, 2);
/// assert_eq!(snap.schema["properties"]["topic"]["type"], "string");
/// // What a release commits, and what the checks read back:
/// let text = snap.to_json();
/// assert_eq!(weaver::evolution::SchemaSnapshot::parse(&text).unwrap(), snap);
/// ```
pub fn schema_snapshot<S: StateSchema>() -> SchemaSnapshot {
    let schema = S::state_schema();
    SchemaSnapshot {
        state_version: S::VERSION,
        fingerprint: super::fingerprint(&schema),
        schema,
    }
}

impl SchemaSnapshot {
    /// The snapshot as pretty JSON (keys sorted), the file to commit.
    ///
    /// ```
    /// use weaver::evolution::{SchemaSnapshot, schema_snapshot};
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct Chat { topic: String }
    ///
    /// // In a release script: write the file your compatibility test reads.
    /// let text = schema_snapshot::<Chat>().to_json();
    /// assert!(text.contains("\"state_version\": 1"));
    /// assert_eq!(SchemaSnapshot::parse(&text)?, schema_snapshot::<Chat>());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn to_json(&self) -> String {
        // A struct of a number, a string and a JSON value always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a committed snapshot: the form [`to_json`](Self::to_json)
    /// writes, or a bare JSON Schema of the state, or the
    /// `{"state": ..., "update": ...}` of
    /// [`StateSchema::schemas`] (both read as version 1). Anything else is
    /// an [`Error::InvalidArgument`].
    ///
    /// ```
    /// use weaver::evolution::SchemaSnapshot;
    /// let bare = SchemaSnapshot::parse(r#"{"type": "object", "properties": {}}"#).unwrap();
    /// assert_eq!(bare.state_version, 1);
    /// assert!(SchemaSnapshot::parse("[1, 2]").is_err());
    /// assert!(SchemaSnapshot::parse("not json").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<SchemaSnapshot> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid_argument(format!("schema snapshot is not JSON: {e}")))?;
        SchemaSnapshot::from_value(value)
    }

    /// [`parse`](Self::parse) of a JSON value.
    pub fn from_value(value: Value) -> Result<SchemaSnapshot> {
        let Value::Object(map) = value else {
            return Err(Error::invalid_argument(
                "schema snapshot must be a JSON object",
            ));
        };
        if map.contains_key("schema") {
            return serde_json::from_value(Value::Object(map)).map_err(|e| {
                Error::invalid_argument(format!("schema snapshot does not read: {e}"))
            });
        }
        let schema = match map.get("state") {
            Some(state @ Value::Object(_)) if map.contains_key("update") => state.clone(),
            _ => Value::Object(map),
        };
        if schema.get("type").and_then(Value::as_str) != Some("object")
            || !schema.get("properties").is_some_and(Value::is_object)
        {
            return Err(Error::invalid_argument(
                "schema snapshot must describe a state: an object schema with `properties`",
            ));
        }
        Ok(SchemaSnapshot {
            state_version: 1,
            fingerprint: super::fingerprint(&schema),
            schema,
        })
    }
}

/// `root` with every schema that holds a `$ref` beside fields of its own
/// (`properties`, `required`: schemars writes an internally tagged enum's
/// newtype variant as its payload's `$ref` plus the tag's property) made
/// one schema: the target's, with those fields merged in. [`resolve`]
/// follows a `$ref` alone, so the tag beside it would be lost.
pub(super) fn merge_ref_siblings(root: &Value) -> Value {
    /// `expanding`: the targets being merged in above `node` (a type that
    /// holds itself through such variants is merged in once per path).
    fn walk(node: &mut Value, root: &Value, expanding: &mut Vec<String>) {
        match node {
            Value::Object(map) => {
                let target_ref = match map.get("$ref") {
                    Some(Value::String(r))
                        if (map.contains_key("properties") || map.contains_key("required"))
                            && !expanding.contains(r) =>
                    {
                        Some(r.clone())
                    }
                    _ => None,
                };
                let merged = match &target_ref {
                    Some(_) => {
                        let target = resolve(&Value::Object(map.clone()), root).clone();
                        match target {
                            Value::Object(mut t) if !t.contains_key("$ref") => {
                                for (k, v) in map.iter().filter(|(k, _)| *k != "$ref") {
                                    merge_field(&mut t, k, v);
                                }
                                Some(t)
                            }
                            _ => None,
                        }
                    }
                    None => None,
                };
                let expanded = match (merged, target_ref) {
                    (Some(t), Some(r)) => {
                        *map = t;
                        expanding.push(r);
                        true
                    }
                    _ => false,
                };
                for v in map.values_mut() {
                    walk(v, root, expanding);
                }
                if expanded {
                    expanding.pop();
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, root, expanding)),
            _ => {}
        }
    }
    fn merge_field(target: &mut serde_json::Map<String, Value>, key: &str, value: &Value) {
        match (key, target.get_mut(key), value) {
            ("properties", Some(Value::Object(t)), Value::Object(v)) => {
                for (name, s) in v {
                    t.insert(name.clone(), s.clone());
                }
            }
            ("required", Some(Value::Array(t)), Value::Array(v)) => {
                for r in v {
                    if !t.contains(r) {
                        t.push(r.clone());
                    }
                }
            }
            _ => {
                target.insert(key.to_owned(), value.clone());
            }
        }
    }
    let mut out = root.clone();
    walk(&mut out, root, &mut Vec::new());
    out
}

/// The integer keys a `patternProperties` pattern stands for, as schemars
/// writes a map with integer keys: `Some(false)` for unsigned (`^\d+$`),
/// `Some(true)` for signed (`^-?\d+$`), `None` for any other pattern.
pub(super) fn integer_keys(pattern: &str) -> Option<bool> {
    match pattern {
        r"^\d+$" => Some(false),
        r"^-?\d+$" => Some(true),
        _ => None,
    }
}

/// Whether `schema`'s `type` (one name or a list) is one of `names`.
pub(super) fn has_type(schema: &Value, names: &[&str]) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => names.contains(&t.as_str()),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .any(|t| names.contains(&t)),
        _ => false,
    }
}

/// `schema` with a local `$ref` (`#/$defs/X`, `#/definitions/X`) followed
/// in `root`, a few levels deep; a reference that does not resolve stays.
pub(super) fn resolve<'a>(mut schema: &'a Value, root: &'a Value) -> &'a Value {
    for _ in 0..32 {
        let Some(target) = schema.get("$ref").and_then(Value::as_str) else {
            return schema;
        };
        let Some(found) = target
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
        else {
            return schema;
        };
        schema = found;
    }
    schema
}
