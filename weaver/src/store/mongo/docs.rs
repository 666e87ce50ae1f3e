//! Store items as MongoDB documents: what a put writes, how a stored
//! document is read back (bad stored data is [`Error::Decode`]), and the
//! query a search or listing pushes down.
//!
//! A document holds an item's payloads as the SQL stores hold them, through
//! the store's [`Sealing`]: `value` is the value's JSON text (exact: every
//! number, key order and key comes back as it went in), `index_text` text,
//! `embedding` binary. Times are integer microseconds (`created_at`,
//! `updated_at`, `expires_at`, `ttl`) and, for the TTL index, `expire_at`, a
//! date. An unsealed value BSON can hold faithfully is copied into `doc`,
//! only so that filters can be pushed into the query.

use mongodb::bson::spec::BinarySubtype;
use mongodb::bson::{Binary, Bson, DateTime, Document, doc};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::mongo::records::{bson_of, int};
use crate::store::filter::{Filter, FilterOp};
use crate::store::limits::nesting;
use crate::store::namespace::descendants;
use crate::store::plan::Record;
use crate::store::seal::Sealing;

/// How deep a value may nest to get a BSON copy in `doc` (MongoDB refuses
/// documents nested deeper than 100 levels, the item's own level included).
const MAX_COPY_NESTING: usize = 90;

/// The document a put writes for `record` (its payloads through `sealing`).
pub(super) fn item_doc(sealing: &Sealing, record: &Record) -> Result<Document> {
    let (ns, key) = (record.namespace.as_str(), record.key.as_str());
    let value = sealing.value_text(ns, key, &record.value)?;
    let index_text = sealing.index_text(ns, key, record.index_text.as_deref())?;
    let embedding = sealing
        .embedding(ns, key, record.embedding.as_deref())?
        .map(|bytes| {
            Bson::Binary(Binary {
                subtype: BinarySubtype::Generic,
                bytes,
            })
        });
    let mut d = doc! {
        "ns": ns,
        "key": key,
        "value": value,
        "index_text": index_text,
        "embedding": embedding.unwrap_or(Bson::Null),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "ttl": record.ttl,
    };
    if let Some(at) = record.expires_at {
        d.insert("expire_at", expire_date(at));
    }
    // A sealed item keeps nothing of its value in the clear.
    if !sealing.seals() && copyable(&record.value) {
        d.insert("doc", bson_of(&record.value));
    }
    Ok(d)
}

/// The date the TTL index expires an item by (`expires_at` microseconds,
/// to the millisecond below).
pub(super) fn expire_date(expires_at: i64) -> DateTime {
    DateTime::from_millis(expires_at.div_euclid(1000))
}

/// Whether BSON holds `value` so that a query on its fields finds what the
/// filter would: every object key non-empty, without `.`, NUL or a leading
/// `$` (which a query path cannot name), not nested too deep.
fn copyable(value: &Value) -> bool {
    fn keys_ok(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().all(|(k, v)| {
                !k.is_empty() && !k.starts_with('$') && !k.contains(['.', '\0']) && keys_ok(v)
            }),
            Value::Array(a) => a.iter().all(keys_ok),
            _ => true,
        }
    }
    nesting(value, MAX_COPY_NESTING) <= MAX_COPY_NESTING && keys_ok(value)
}

fn bad(ns: &str, key: &str, e: impl std::fmt::Display) -> Error {
    Error::decode(format!("stored MongoDB store item `{key}` in `{ns}`"), e)
}

/// An optional integer field: absent or null is `None`.
fn opt_int(d: &Document, field: &str) -> std::result::Result<Option<i64>, String> {
    match d.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(_) => int(d, field).map(Some),
    }
}

/// The `created_at` and `expires_at` of a stored document of
/// `namespace`/`key`.
pub(super) fn times_of(d: &Document, namespace: &str, key: &str) -> Result<(i64, Option<i64>)> {
    let fail = |e: String| bad(namespace, key, e);
    Ok((
        int(d, "created_at").map_err(fail)?,
        opt_int(d, "expires_at").map_err(fail)?,
    ))
}

/// The record a stored document holds, its payloads opened through
/// `sealing`; a document of the wrong shape is [`Error::Decode`].
pub(super) fn record_of(sealing: &Sealing, d: &Document) -> Result<Record> {
    let namespace = d
        .get_str("ns")
        .map_err(|e| bad("?", "?", format_args!("`ns`: {e}")))?
        .to_owned();
    let key = d
        .get_str("key")
        .map_err(|e| bad(&namespace, "?", format_args!("`key`: {e}")))?
        .to_owned();
    crate::store::namespace::check_stored(&namespace)?;
    let fail = |e: String| bad(&namespace, &key, e);
    let value = d
        .get_str("value")
        .map_err(|e| fail(format!("`value`: {e}")))?
        .to_owned();
    let index_text = match d.get("index_text") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(s)) => Some(s.clone()),
        Some(other) => return Err(fail(format!("`index_text` is not text: {other}"))),
    };
    let embedding = match d.get("embedding") {
        None | Some(Bson::Null) => None,
        Some(Bson::Binary(b)) => Some(b.bytes.clone()),
        Some(other) => return Err(fail(format!("`embedding` is not binary: {other}"))),
    };
    let created_at = int(d, "created_at").map_err(&fail)?;
    let updated_at = int(d, "updated_at").map_err(&fail)?;
    let expires_at = opt_int(d, "expires_at").map_err(&fail)?;
    let ttl = opt_int(d, "ttl").map_err(&fail)?;
    if created_at > updated_at {
        return Err(fail(format!(
            "created at {created_at} µs, after its last update at {updated_at} µs"
        )));
    }
    if ttl.is_some_and(|t| t < 0) {
        return Err(fail(format!("a negative TTL: {ttl:?}")));
    }
    Ok(Record {
        value: sealing.value_of(&namespace, &key, value)?,
        index_text: sealing.index_text_of(&namespace, &key, index_text)?,
        embedding: sealing.embedding_of(&namespace, &key, embedding)?,
        created_at,
        updated_at,
        expires_at,
        ttl,
        namespace,
        key,
        sealed: None,
    })
}

/// Items alive at `now`, and those whose expiry is not a number (so that
/// reading them reports the bad document instead of skipping it).
pub(super) fn live(now: i64) -> Document {
    doc! { "expires_at": { "$not": { "$lte": now } } }
}

/// Items at or under the dotted `prefix` ("" = all), alive at `now`.
pub(super) fn under(prefix: &str, now: i64) -> Document {
    if prefix.is_empty() {
        return live(now);
    }
    let (lo, hi) = descendants(prefix);
    doc! { "$and": [
        { "$or": [ { "ns": prefix }, { "ns": { "$gte": lo, "$lt": hi } } ] },
        live(now),
    ] }
}

/// A query condition that every item matching `filter` meets (and maybe
/// others: the filter is checked again on each item read), or `None` when
/// nothing of the filter can be pushed down.
///
/// Pushed: equality with a scalar and the ordering operators, on paths of
/// plain segments, ordering made inclusive (a number BSON rounds compares
/// equal to its neighbours). `$ne` and equality with an array or object are
/// not (MongoDB compares arrays element-wise and documents in key order).
/// An item without a BSON copy (sealed, or a value BSON cannot hold
/// faithfully) always passes.
pub(super) fn pushed_filter(filter: &Filter) -> Option<Document> {
    let mut all = Vec::new();
    for c in filter.conditions() {
        // A segment the filter reads as an array index (`+1`, `01` too)
        // is pushed only in the plain form MongoDB reads as one.
        // A NUL cannot be in a BSON key (an item holding one has no BSON
        // copy, so it passes anyway).
        let path_ok = c.field.split('.').all(|s| {
            !s.is_empty()
                && !s.starts_with('$')
                && !s.contains('\0')
                && s.parse::<usize>().map_or(true, |i| i.to_string() == s)
        });
        if !path_ok || c.field == "$" {
            continue;
        }
        let operand = bson_of(&c.value);
        let op = match c.op {
            FilterOp::Eq if !(c.value.is_array() || c.value.is_object()) => "$eq",
            FilterOp::Gt | FilterOp::Gte => "$gte",
            FilterOp::Lt | FilterOp::Lte => "$lte",
            _ => continue,
        };
        all.push(Bson::Document(
            doc! { format!("doc.{}", c.field): { op: operand } },
        ));
    }
    if all.is_empty() {
        return None;
    }
    Some(doc! { "$or": [ { "doc": { "$exists": false } }, { "$and": all } ] })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_values_bson_holds_faithfully_are_copied() {
        assert!(copyable(&json!({"a": {"b": [1, {"c": "x"}]}})));
        assert!(copyable(&json!(42)));
        for odd in [
            json!({"": 1}),
            json!({"a.b": 1}),
            json!({"$gt": 1}),
            json!({"x": [{"n\u{0}": 1}]}),
        ] {
            assert!(!copyable(&odd), "{odd}");
        }
    }

    #[test]
    fn only_conditions_whose_query_is_a_superset_are_pushed() {
        let f = Filter::new()
            .ne("a", 1)
            .eq("b", json!([1]))
            .eq("$", 3)
            .eq("c..d", 1);
        assert_eq!(pushed_filter(&f), None);
        let f = Filter::new().gt("n", 1).eq("s", "x").lt("m", 2.5);
        let pushed = pushed_filter(&f).unwrap();
        let text = pushed.to_string();
        assert!(text.contains("\"doc.n\": { \"$gte\": 1 }"), "{text}");
        assert!(text.contains("\"doc.m\": { \"$lte\": 2.5 }"), "{text}");
        assert!(text.contains("\"$exists\": false"), "{text}");
    }
}
