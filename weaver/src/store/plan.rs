//! What every backend shares: validating a batch into plans (so a bad op
//! writes nothing), the stored record, and the search and listing rules
//! (filter, ranking, order, page), so backends agree by construction.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::bm25;
use super::embed::{cosine, embed_checked};
use super::filter::{Filter, field};
use super::limits::{MAX_INDEX_TEXT_BYTES, MAX_TTL};
use super::namespace::{in_prefix, join, split, validate_key, validate_namespace, validate_prefix};
use super::types::{Item, ListNamespaces, Op, OpResult, Search, StoreConfig};
use crate::error::{Error, Result};

/// One item as backends hold it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    /// Dotted namespace.
    pub namespace: String,
    pub key: String,
    pub value: Value,
    /// The indexed text; `None`: not searchable by query.
    pub index_text: Option<String>,
    pub embedding: Option<Vec<f32>>,
    /// Microseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: Option<i64>,
    /// The TTL in microseconds, kept for refresh-on-read.
    pub ttl: Option<i64>,
    /// In a record an encrypting in-memory store keeps: the value, indexed
    /// text and embedding, sealed (the plain fields are then empty).
    pub sealed: Option<Box<SealedParts>>,
}

/// An item's payloads as an encrypting in-memory store keeps them: each
/// sealed, bound to the item and the part.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SealedParts {
    /// The value's JSON, sealed.
    pub value: Vec<u8>,
    pub index_text: Option<Vec<u8>>,
    /// The embedding's little-endian `f32`s, sealed.
    pub embedding: Option<Vec<u8>>,
}

impl Record {
    pub fn is_live(&self, now: i64) -> bool {
        self.expires_at.is_none_or(|e| e > now)
    }

    /// Restarts the TTL; whether anything changed.
    pub fn refresh(&mut self, now: i64) -> bool {
        match self.ttl {
            Some(ttl) => {
                self.expires_at = Some(now.saturating_add(ttl));
                true
            }
            None => false,
        }
    }

    pub fn to_item(&self, score: Option<f64>) -> Item {
        Item {
            namespace: split(&self.namespace),
            key: self.key.clone(),
            value: self.value.clone(),
            created_at: time_of(self.created_at),
            updated_at: time_of(self.updated_at),
            score,
        }
    }
}

/// Now, in microseconds since the Unix epoch (negative before it).
pub(crate) fn now_micros() -> i64 {
    micros_since_epoch(SystemTime::now())
}

/// `t` in microseconds since the Unix epoch, negative before it (saturating
/// at the ends of an `i64`, some 292,000 years either way).
fn micros_since_epoch(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |m| -m),
    }
}

/// The time `micros` microseconds from the Unix epoch, before it when
/// negative: the inverse of [`micros_since_epoch`], so a stored time reads
/// back as it was (a platform whose `SystemTime` cannot reach it gets the
/// nearest it can).
fn time_of(micros: i64) -> SystemTime {
    let d = Duration::from_micros(micros.unsigned_abs());
    let t = if micros < 0 {
        UNIX_EPOCH.checked_sub(d)
    } else {
        UNIX_EPOCH.checked_add(d)
    };
    t.unwrap_or(UNIX_EPOCH)
}

/// A time to live in microseconds, capped at [`MAX_TTL`] (a longer one,
/// such as "200 years" for "forever", means the same): expiry times (now
/// plus the TTL, again on every refresh) then stay far inside an `i64` on
/// every backend.
fn micros_of(d: Duration) -> i64 {
    d.min(MAX_TTL).as_micros() as i64
}

/// A validated put; the record's times are set when it is applied.
#[derive(Debug, Clone)]
pub(crate) struct PutPlan {
    pub namespace: String,
    pub key: String,
    pub value: Value,
    pub index_text: Option<String>,
    pub embedding: Option<Vec<f32>>,
    pub ttl: Option<i64>,
}

impl PutPlan {
    /// The record written at `now`, keeping `created_at` of what it replaces
    /// (never later than `now`: a wall clock set back does not leave an item
    /// created after its last update).
    pub fn record(&self, now: i64, previous_created: Option<i64>) -> Record {
        Record {
            namespace: self.namespace.clone(),
            key: self.key.clone(),
            value: self.value.clone(),
            index_text: self.index_text.clone(),
            embedding: self.embedding.clone(),
            created_at: previous_created.map_or(now, |c| c.min(now)),
            updated_at: now,
            expires_at: self.ttl.map(|t| now.saturating_add(t)),
            ttl: self.ttl,
            sealed: None,
        }
    }
}

/// A validated search.
#[derive(Debug, Clone)]
pub(crate) struct SearchPlan {
    /// Dotted prefix ("" = everything).
    pub prefix: String,
    pub query: Option<String>,
    pub query_vector: Option<Vec<f32>>,
    pub filter: Filter,
    pub limit: usize,
    pub offset: usize,
    pub refresh: bool,
}

impl SearchPlan {
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
        allow(dead_code)
    )]
    /// Whether the page can be cut by the backend in namespace/key order
    /// (no query, no filter).
    pub fn is_plain(&self) -> bool {
        self.query.is_none() && self.filter.is_empty()
    }
}

/// A validated namespace listing.
#[derive(Debug, Clone)]
pub(crate) struct ListPlan {
    /// The dotted labels of the prefix up to its first wildcard: what a
    /// backend reads under.
    pub prefix: String,
    /// The whole prefix, wildcards (`*`: any one label) included.
    pub pattern: Vec<String>,
    pub suffix: Vec<String>,
    pub max_depth: Option<usize>,
    pub limit: usize,
    pub offset: usize,
}

/// A validated operation.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    Get {
        namespace: String,
        key: String,
        refresh: bool,
    },
    Put(PutPlan),
    Delete {
        namespace: String,
        key: String,
    },
    Search(SearchPlan),
    List(ListPlan),
}

impl Plan {
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    /// Whether the op writes whatever it meets: a put, a delete, a read that
    /// restarts TTLs. A get that meets an expired item also deletes it; the
    /// backend finds that out only when it meets one.
    pub fn writes(&self) -> bool {
        match self {
            Plan::Put(_) | Plan::Delete { .. } => true,
            Plan::Get { refresh, .. } => *refresh,
            Plan::Search(search) => search.refresh,
            Plan::List(_) => false,
        }
    }
}

/// The text indexed for `value` under `fields` (`None`: whole value):
/// string leaves as they are (blank ones left out), numbers and booleans
/// printed, in document order, one per line (NUL characters become spaces). `None` when
/// `fields` is empty or the value has no text there. Text past [`MAX_INDEX_TEXT_BYTES`] is
/// [`Error::LimitExceeded`], found before the text is built (paths that
/// reach the same part again count it again, so only building measures
/// it).
fn index_text(value: &Value, fields: Option<&[String]>) -> Result<Option<String>> {
    fn leaves(v: &Value, out: &mut Vec<String>, bytes: &mut usize) -> Result<()> {
        let leaf = match v {
            // NUL cannot be stored in PostgreSQL text; it never forms a token.
            Value::String(s) => s.replace('\0', " "),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Array(a) => return a.iter().try_for_each(|x| leaves(x, out, bytes)),
            Value::Object(m) => return m.values().try_for_each(|x| leaves(x, out, bytes)),
            Value::Null => return Ok(()),
        };
        // Blank text forms no token: an embedder is never asked for it.
        if leaf.trim().is_empty() {
            return Ok(());
        }
        *bytes += leaf.len() + 1;
        if *bytes > MAX_INDEX_TEXT_BYTES + 1 {
            return Err(Error::LimitExceeded {
                limit: "store index text bytes",
                value: *bytes as u64 - 1,
                ceiling: MAX_INDEX_TEXT_BYTES as u64,
            });
        }
        out.push(leaf);
        Ok(())
    }
    let mut out = Vec::new();
    let mut bytes = 0;
    match fields {
        None => leaves(value, &mut out, &mut bytes)?,
        Some([]) => return Ok(None),
        Some(fields) => {
            for f in fields {
                if let Some(v) = field(value, f) {
                    leaves(v, &mut out, &mut bytes)?;
                }
            }
        }
    }
    // No text: not indexed (an embedder is never asked for an empty text).
    Ok((!out.is_empty()).then(|| out.join("\n")))
}

/// Validates a batch and computes what it needs (index text, embeddings of
/// puts and queries, in one embedder call) before anything is written. The
/// batch's limits were checked before, by [`Limited`](super::limits::Limited).
pub(crate) async fn prepare(ops: Vec<Op>, config: &StoreConfig) -> Result<Vec<Plan>> {
    let mut plans = Vec::with_capacity(ops.len());
    for op in ops {
        plans.push(match op {
            Op::Get {
                namespace,
                key,
                refresh_ttl,
            } => {
                validate_namespace(&namespace)?;
                validate_key(&key)?;
                Plan::Get {
                    namespace: join(&namespace),
                    key,
                    refresh: refresh_ttl.unwrap_or(config.refresh_on_read),
                }
            }
            Op::Put {
                namespace,
                key,
                value,
                options,
            } => {
                validate_namespace(&namespace)?;
                validate_key(&key)?;
                // The store's default applies only to puts, so only they
                // check it.
                let ttl = options.ttl.or(config.default_ttl).map(micros_of);
                Plan::Put(PutPlan {
                    index_text: index_text(&value, options.index.as_deref())?,
                    namespace: join(&namespace),
                    key,
                    value,
                    embedding: None,
                    ttl,
                })
            }
            Op::Delete { namespace, key } => {
                validate_namespace(&namespace)?;
                validate_key(&key)?;
                Plan::Delete {
                    namespace: join(&namespace),
                    key,
                }
            }
            Op::Search {
                namespace_prefix,
                options,
            } => Plan::Search(prepare_search(&namespace_prefix, options, config)?),
            Op::ListNamespaces(options) => Plan::List(prepare_list(options)?),
        });
    }
    if let Some(embedder) = &config.embedder {
        let mut texts = Vec::new();
        for p in &plans {
            match p {
                Plan::Put(PutPlan {
                    index_text: Some(t),
                    ..
                }) => texts.push(t.clone()),
                Plan::Search(SearchPlan { query: Some(q), .. }) => texts.push(q.clone()),
                _ => {}
            }
        }
        let mut vectors = embed_checked(embedder.as_ref(), &texts).await?.into_iter();
        for p in &mut plans {
            match p {
                Plan::Put(PutPlan {
                    index_text: Some(_),
                    embedding,
                    ..
                }) => *embedding = vectors.next(),
                Plan::Search(SearchPlan {
                    query: Some(_),
                    query_vector,
                    ..
                }) => *query_vector = vectors.next(),
                _ => {}
            }
        }
    }
    Ok(plans)
}

fn prepare_search(prefix: &[String], options: Search, config: &StoreConfig) -> Result<SearchPlan> {
    validate_prefix(prefix)?;
    let filter = match &options.filter {
        Some(f) => Filter::parse(f)?,
        None => Filter::new(),
    };
    Ok(SearchPlan {
        prefix: join(prefix),
        // As in LangGraph, an empty query is none.
        query: options.query.filter(|q| !q.trim().is_empty()),
        query_vector: None,
        filter,
        limit: options.limit,
        offset: options.offset,
        refresh: options.refresh_ttl.unwrap_or(config.refresh_on_read),
    })
}

fn prepare_list(options: ListNamespaces) -> Result<ListPlan> {
    validate_prefix(&options.prefix)?;
    validate_prefix(&options.suffix)?;
    if options.max_depth == Some(0) {
        return Err(Error::invalid_argument(
            "list_namespaces max_depth must be at least 1",
        ));
    }
    let literal: Vec<String> = options
        .prefix
        .iter()
        .take_while(|l| *l != WILDCARD)
        .cloned()
        .collect();
    Ok(ListPlan {
        prefix: join(&literal),
        pattern: options.prefix,
        suffix: options.suffix,
        max_depth: options.max_depth,
        limit: options.limit,
        offset: options.offset,
    })
}

/// Orders by score (highest first, unscored last), then namespace, key.
fn by_rank(a: &(Record, Option<f64>), b: &(Record, Option<f64>)) -> Ordering {
    let score = match (a.1, b.1) {
        (Some(x), Some(y)) => y.total_cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    score
        .then_with(|| a.0.namespace.as_bytes().cmp(b.0.namespace.as_bytes()))
        .then_with(|| a.0.key.as_bytes().cmp(b.0.key.as_bytes()))
}

/// [`finish_search`] on a backend's candidates: when the query already cut
/// the page (`cut_by_query`: offset and limit applied by the database),
/// the offset is not applied again.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mongodb"))]
pub(crate) fn finish_read_page(
    candidates: Vec<Record>,
    plan: &SearchPlan,
    cut_by_query: bool,
) -> Vec<(Record, Option<f64>)> {
    if cut_by_query {
        let mut whole = plan.clone();
        whole.offset = 0;
        finish_search(candidates, &whole)
    } else {
        finish_search(candidates, plan)
    }
}

/// Applies a search to the live records under its prefix (any order): the
/// filter, the ranking, the order and the page. Records outside the prefix
/// are dropped, whatever the backend handed in.
pub(crate) fn finish_search(
    candidates: Vec<Record>,
    plan: &SearchPlan,
) -> Vec<(Record, Option<f64>)> {
    let kept: Vec<Record> = candidates
        .into_iter()
        .filter(|r| in_prefix(&r.namespace, &plan.prefix) && plan.filter.matches(&r.value))
        .collect();
    let scores: Vec<Option<f64>> = match (&plan.query, &plan.query_vector) {
        (None, _) => vec![None; kept.len()],
        (Some(_), Some(q)) => kept
            .iter()
            .map(|r| r.embedding.as_deref().map(|v| cosine(q, v)))
            .collect(),
        (Some(q), None) => {
            let docs: Vec<Option<&str>> = kept.iter().map(|r| r.index_text.as_deref()).collect();
            bm25::score_all(q, &docs)
        }
    };
    let mut ranked: Vec<(Record, Option<f64>)> = kept.into_iter().zip(scores).collect();
    ranked.sort_by(by_rank);
    ranked
        .into_iter()
        .skip(plan.offset)
        .take(plan.limit)
        .collect()
}

/// The label that matches any one label in a listing's prefix or suffix
/// (LangGraph's `*`).
const WILDCARD: &str = "*";

/// Applies a listing to the dotted namespaces of live records under its
/// prefix: the prefix's and suffix's labels (wildcards matching any),
/// depth, dedup, order, page.
pub(crate) fn finish_list<'a>(
    namespaces: impl IntoIterator<Item = &'a str>,
    plan: &ListPlan,
) -> Vec<Vec<String>> {
    let mut out = BTreeSet::new();
    for ns in namespaces {
        if !in_prefix(ns, &plan.prefix) {
            continue;
        }
        let labels = split(ns);
        let fits = |want: &[String], got: &[String]| {
            want.iter().zip(got).all(|(w, g)| w == WILDCARD || w == g)
        };
        let (n, (p, s)) = (labels.len(), (plan.pattern.len(), plan.suffix.len()));
        if n < p || n < s || !fits(&plan.pattern, &labels) || !fits(&plan.suffix, &labels[n - s..])
        {
            continue;
        }
        let depth = plan.max_depth.unwrap_or(labels.len()).min(labels.len());
        out.insert(join(&labels[..depth]));
    }
    out.into_iter()
        .skip(plan.offset)
        .take(plan.limit)
        .map(|ns| split(&ns))
        .collect()
}

/// The result of a search.
pub(crate) fn found(page: &[(Record, Option<f64>)]) -> OpResult {
    OpResult::Found(page.iter().map(|(r, s)| r.to_item(*s)).collect())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::{micros_since_epoch, time_of};

    #[test]
    fn times_before_the_epoch_round_trip_exactly() {
        for micros in [
            -1,
            -5,
            -86_400_000_000,
            -62_135_596_800_000_000,
            0,
            1,
            1_700_000_000_123_456,
        ] {
            assert_eq!(micros_since_epoch(time_of(micros)), micros, "{micros}");
        }
        assert_eq!(time_of(-1), UNIX_EPOCH - Duration::from_micros(1));
    }
}
