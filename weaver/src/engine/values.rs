//! The typed state as channel values and back: what a checkpoint stores.

use serde_json::{Map, Value};

use super::finite::encode_value;
use super::send::SENDS_CHANNEL;
use super::spec::INPUT_CHANNEL;
use crate::error::{Error, Result};
use crate::state::GraphState;

/// Decodes the typed state from a checkpoint's channel values.
pub(crate) fn decode_state<S: GraphState>(values: &Map<String, Value>) -> Result<S> {
    // Decode from borrowed values (no copy of a possibly large state), leaving
    // out a pending input and pending sends, which are not channels of the
    // state.
    let fields = values
        .iter()
        .filter(|(k, _)| k.as_str() != INPUT_CHANNEL && k.as_str() != SENDS_CHANNEL)
        .map(|(k, v)| (k.as_str(), v));
    let map = |fields| serde::de::value::MapDeserializer::<_, serde_json::Error>::new(fields);
    // Path tracking wraps every field and element; only a failed decode is
    // repeated with it, for the error's field path.
    if let Ok(state) = S::deserialize(map(fields.clone())) {
        return Ok(state);
    }
    serde_path_to_error::deserialize(map(fields))
        .map_err(|e| Error::decode(format!("state at `{}`", e.path()), e.inner()))
}

/// Decodes the typed state from channel values it may consume: the
/// strings and arrays move into the state instead of being copied. An error
/// names the channel (field) whose value did not decode; full path tracking
/// (every element wrapped) tripled the cost of a large state.
pub(crate) fn decode_state_owned<S: GraphState>(mut values: Map<String, Value>) -> Result<S> {
    values.remove(INPUT_CHANNEL);
    values.remove(SENDS_CHANNEL);
    let mut field = String::new();
    let fields = OwnedFields {
        iter: values.into_iter(),
        pending: None,
        field: &mut field,
    };
    S::deserialize(serde::de::value::MapAccessDeserializer::new(fields)).map_err(|e| {
        let what = if field.is_empty() {
            "state".to_owned()
        } else {
            format!("state at `{field}`")
        };
        Error::decode(what, e)
    })
}

/// The fields of an owned JSON object, handed out one by one; `field` holds
/// the name of the one being decoded (empty between fields).
struct OwnedFields<'a> {
    iter: serde_json::map::IntoIter,
    pending: Option<Value>,
    field: &'a mut String,
}

impl<'de> serde::de::MapAccess<'de> for OwnedFields<'_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> std::result::Result<Option<K::Value>, serde_json::Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.pending = Some(value);
        self.field.clone_from(&key);
        seed.deserialize(serde::de::value::StringDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> std::result::Result<V::Value, serde_json::Error> {
        let value = self
            .pending
            .take()
            .ok_or_else(|| serde::de::Error::custom("a value was asked for before its key"))?;
        let decoded = seed.deserialize(value)?;
        self.field.clear();
        Ok(decoded)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// `value` as a JSON object; a NaN or infinite float in it is an error
/// (JSON would store it as `null`, which its type cannot read back).
pub(crate) fn encode_object<T: serde::Serialize>(
    what: &str,
    value: &T,
) -> Result<Map<String, Value>> {
    match encode_value(what, value)? {
        Value::Object(m) => Ok(m),
        other => Err(Error::encode(
            what,
            format!("expected a JSON object, got {other}"),
        )),
    }
}
