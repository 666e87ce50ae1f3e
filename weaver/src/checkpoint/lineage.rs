//! The lineage an [`AdapterSaver`](super::AdapterSaver) keeps in each
//! snapshot it saves, to tell a save that joined its flow's line from one
//! that landed in a version pruned away beneath newer ones.
//!
//! The adapter's first rule refuses a version that is stored. The saver
//! keeps only a flow's latest version, so an older one is no longer stored
//! and a writer that read the flow long ago can save the version after what
//! it read, below the latest: the save succeeds, yet nobody will read it,
//! and the writer's operation would be lost while reported done. Each save
//! therefore names itself with a random token and carries the tokens of
//! the saves it descends from, newest first; after its save a writer reads
//! the latest version and looks for its token at its own version's place in
//! that line ([`in_line`]).

use serde_json::{Map, Value};

use super::adapter::Snapshot;
use crate::error::{Error, Result};

/// How many tokens a snapshot carries: its own and its ancestors'.
pub(super) const DEPTH: usize = 32;
/// The envelope's keys: the tokens, and the payload they describe.
const TOKENS: &str = "__weaver_lineage__";
const DATA: &str = "__weaver_data__";

/// Splits stored data into its payload and its lineage, newest first (none
/// for data saved without the envelope).
pub(super) fn open(data: Value) -> (Value, Vec<u64>) {
    let tokens = match &data {
        Value::Object(map) if map.len() == 2 && map.contains_key(DATA) => map
            .get(TOKENS)
            .and_then(|t| serde_json::from_value::<Vec<u64>>(t.clone()).ok()),
        _ => None,
    };
    match (tokens, data) {
        (Some(tokens), Value::Object(mut map)) => {
            let payload = map.remove(DATA).unwrap_or(Value::Null);
            (payload, tokens)
        }
        (_, other) => (other, Vec::new()),
    }
}

/// Wraps `payload` for a save descending from the save whose lineage is
/// `parent`: the stored data, and the lineage it carries (its new token first).
pub(super) fn seal(payload: Value, parent: &[u64]) -> (Value, Vec<u64>) {
    let token = uuid::Uuid::now_v7().as_u128() as u64;
    let mut tokens = Vec::with_capacity(DEPTH);
    tokens.push(token);
    tokens.extend(parent.iter().take(DEPTH - 1));
    let mut map = Map::new();
    map.insert(TOKENS.into(), Value::from(tokens.clone()));
    map.insert(DATA.into(), payload);
    (Value::Object(map), tokens)
}

/// Whether the save of `version` whose token is `token` is in the line of
/// `latest`, the flow's latest snapshot read after it: `Ok(false)` when it
/// landed beside the line (a version pruned away), so the operation it
/// carried must be applied again. A flow deleted or started anew since
/// (`latest` missing or older) took the save's line with it: `Ok(true)`.
/// More saves than a lineage holds since is [`Error::Storage`]: whether the
/// operation is in cannot be told.
pub(super) fn in_line(latest: Option<Snapshot>, version: u64, token: u64) -> Result<bool> {
    let Some(latest) = latest else {
        return Ok(true);
    };
    if latest.version < version {
        return Ok(true);
    }
    let (_, tokens) = open(latest.data);
    let back = (latest.version - version) as usize;
    match tokens.get(back) {
        Some(found) => Ok(*found == token),
        None => Err(Error::storage(
            "save",
            format!(
                "cannot tell whether version {version} of flow `{}` was superseded or \
                 landed beside its line: {back} saves came after it",
                latest.flow_id
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_envelope_opens_to_what_was_sealed() {
        let (data, tokens) = seal(json!({"a": 1}), &[7, 8]);
        assert_eq!(tokens.len(), 3);
        assert_eq!(&tokens[1..], [7, 8]);
        assert_eq!(open(data), (json!({"a": 1}), tokens));
        assert_eq!(open(json!(["u"])), (json!(["u"]), vec![]));
        assert_eq!(open(Value::Null), (Value::Null, vec![]));
        let lookalike = json!({TOKENS: "x", "other": 1});
        assert_eq!(open(lookalike.clone()), (lookalike, vec![]));
    }

    #[test]
    fn a_lineage_keeps_its_depth() {
        let parent: Vec<u64> = (0..DEPTH as u64).collect();
        let (_, tokens) = seal(Value::Null, &parent);
        assert_eq!(tokens.len(), DEPTH);
        assert_eq!(tokens[DEPTH - 1], DEPTH as u64 - 2);
    }

    #[test]
    fn a_save_is_found_in_the_line_or_not() {
        let (first, line) = seal(json!(1), &[]);
        let (second, _) = seal(json!(2), &line);
        let ours = line[0];
        let latest = |v: u64, data: &Value| Some(Snapshot::new("f", v, data.clone()));
        assert!(in_line(latest(3, &first), 3, ours).unwrap(), "still latest");
        assert!(in_line(latest(4, &second), 3, ours).unwrap(), "built upon");
        assert!(
            !in_line(latest(4, &second), 3, 99).unwrap(),
            "beside the line"
        );
        assert!(in_line(None, 3, ours).unwrap(), "flow deleted since");
        assert!(matches!(
            in_line(latest(40, &second), 3, ours),
            Err(Error::Storage { .. })
        ));
    }
}
