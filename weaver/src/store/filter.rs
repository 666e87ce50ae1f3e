//! [`Filter`]: conditions on value fields that a searched item must meet.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::limits::{MAX_FILTER_NESTING, nesting};
use crate::error::{Error, Result};

/// A comparison of a value field with an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterOp {
    /// Equal (numbers compare by value: `1 == 1.0`).
    Eq,
    /// Not equal; a missing field is not equal to anything.
    Ne,
    /// Greater than (numbers with numbers, strings with strings byte-wise).
    Gt,
    /// Greater than or equal.
    Gte,
    /// Less than.
    Lt,
    /// Less than or equal.
    Lte,
}

impl FilterOp {
    const ALL: [FilterOp; 6] = [
        FilterOp::Eq,
        FilterOp::Ne,
        FilterOp::Gt,
        FilterOp::Gte,
        FilterOp::Lt,
        FilterOp::Lte,
    ];

    /// The operator's JSON spelling (`$eq`, `$ne`, …).
    ///
    /// ```
    /// use weaver::store::FilterOp;
    ///
    /// assert_eq!(FilterOp::Gte.as_str(), "$gte");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            FilterOp::Eq => "$eq",
            FilterOp::Ne => "$ne",
            FilterOp::Gt => "$gt",
            FilterOp::Gte => "$gte",
            FilterOp::Lt => "$lt",
            FilterOp::Lte => "$lte",
        }
    }

    /// Parses `$eq`…`$lte`; anything else is [`Error::InvalidArgument`].
    ///
    /// ```
    /// use weaver::store::FilterOp;
    ///
    /// assert_eq!(FilterOp::parse("$lt")?, FilterOp::Lt);
    /// assert!(FilterOp::parse("$in").is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<Self> {
        FilterOp::ALL
            .into_iter()
            .find(|op| op.as_str() == s)
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "unknown filter operator `{s}`; expected one of $eq, $ne, $gt, $gte, $lt, $lte"
                ))
            })
    }

    fn is_ordering(self) -> bool {
        !matches!(self, FilterOp::Eq | FilterOp::Ne)
    }
}

impl fmt::Display for FilterOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Logical operators of other filter languages (MongoDB's) that a filter
/// refuses instead of reading them as field paths.
const UNSUPPORTED_LOGICAL: [&str; 3] = ["$or", "$nor", "$not"];

/// One condition: `field op value`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    /// A dotted path into the item's value (`"age"`, `"profile.city"`,
    /// `"tags.0"`).
    pub field: String,
    /// The comparison.
    pub op: FilterOp,
    /// The operand.
    pub value: Value,
}

/// Conditions an item's value must all meet.
///
/// Its JSON form (what [`Search::filter`](super::Search::filter) takes) maps
/// a field path to an operand (equality) or to an object of operators:
/// `{"city": "Paris", "age": {"$gte": 30, "$lt": 40}}`. The key `$and` takes
/// a list of such objects, all of which must hold: the form of a filter
/// with one operator twice on one field (`Filter::new().gt("n", 20).gt("n",
/// 30)` is `{"$and": [{"n": {"$gt": 20}}, {"n": {"$gt": 30}}]}`). Serde
/// writes and reads a filter in that form too: read back, it holds the same
/// conditions (maybe in another order, as JSON objects keep none), and a
/// form [`parse`](Self::parse) refuses (an operator its operand does not
/// fit) is a deserialization error.
///
/// ```
/// use serde_json::json;
/// use weaver::store::Filter;
///
/// let f = Filter::new().eq("city", "Paris").gte("age", 30);
/// let form = serde_json::to_value(&f).unwrap();
/// assert_eq!(form, json!({"city": {"$eq": "Paris"}, "age": {"$gte": 30}}));
/// assert_eq!(serde_json::from_value::<Filter>(json!({"city": "Paris"})).unwrap(),
///            Filter::new().eq("city", "Paris"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(into = "Value", try_from = "Value")]
pub struct Filter {
    conditions: Vec<Condition>,
}

impl Filter {
    /// No condition: every item matches.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::Filter;
    ///
    /// assert!(Filter::new().is_empty());
    /// assert!(Filter::new().matches(&json!({"anything": 1})));
    /// ```
    pub fn new() -> Self {
        Filter::default()
    }

    /// Adds `field op value`.
    pub fn condition(
        mut self,
        field: impl Into<String>,
        op: FilterOp,
        value: impl Into<Value>,
    ) -> Self {
        self.conditions.push(Condition {
            field: field.into(),
            op,
            value: value.into(),
        });
        self
    }

    /// Adds `field == value`.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::Filter;
    ///
    /// let paris = Filter::new().eq("city", "Paris");
    /// assert!(paris.matches(&json!({"city": "Paris"})));
    /// assert!(!paris.matches(&json!({"city": "Lyon"})));
    /// ```
    pub fn eq(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Eq, value)
    }
    /// Adds `field != value`.
    pub fn ne(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Ne, value)
    }
    /// Adds `field > value`.
    pub fn gt(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Gt, value)
    }
    /// Adds `field >= value`.
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::Filter;
    ///
    /// // Dotted paths reach nested fields.
    /// let adults = Filter::new().gte("person.age", 18);
    /// assert!(adults.matches(&json!({"person": {"age": 18}})));
    /// assert!(!adults.matches(&json!({"person": {"age": 17}})));
    /// ```
    pub fn gte(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Gte, value)
    }
    /// Adds `field < value`.
    pub fn lt(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Lt, value)
    }
    /// Adds `field <= value`.
    pub fn lte(self, field: impl Into<String>, value: impl Into<Value>) -> Self {
        self.condition(field, FilterOp::Lte, value)
    }

    /// The conditions, in order.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// Whether there is no condition.
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Parses the JSON form. A non-object filter, an unknown operator, an
    /// object mixing operators and plain keys, a key `$or`, `$nor` or `$not`
    /// (only `$and` combines conditions), any other key starting with `$`
    /// but `$` itself (`$where`, `$in`, `$expr`: never read as a field
    /// name), or an ordering operator
    /// (`$gt`…) whose operand is neither a number nor a string is
    /// [`Error::InvalidArgument`]; a form nested deeper than
    /// [`MAX_FILTER_NESTING`] is
    /// [`Error::LimitExceeded`].
    ///
    /// ```
    /// use serde_json::json;
    /// use weaver::store::Filter;
    ///
    /// let filter = Filter::parse(&json!({"age": {"$gte": 30, "$lt": 40}, "city": "Paris"}))?;
    /// assert_eq!(filter, Filter::new().gte("age", 30).lt("age", 40).eq("city", "Paris"));
    /// assert!(Filter::parse(&json!({"age": {"$in": [1, 2]}})).is_err());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn parse(json: &Value) -> Result<Filter> {
        // Counted without recursion, before anything recurses into the form
        // (the `$and` parts, copying operands, quoting them in errors).
        let depth = nesting(json, MAX_FILTER_NESTING);
        if depth > MAX_FILTER_NESTING {
            return Err(Error::LimitExceeded {
                limit: "store filter nesting",
                value: depth as u64,
                ceiling: MAX_FILTER_NESTING as u64,
            });
        }
        Filter::parse_bounded(json)
    }

    fn parse_bounded(json: &Value) -> Result<Filter> {
        let Value::Object(fields) = json else {
            return Err(Error::invalid_argument(format!(
                "a filter is a JSON object of field conditions, not `{json}`"
            )));
        };
        let mut filter = Filter::new();
        for (field, cond) in fields {
            if field == "$and" {
                let Value::Array(all) = cond else {
                    return Err(Error::invalid_argument(format!(
                        "`$and` takes a list of filters, not `{cond}`"
                    )));
                };
                for part in all {
                    filter
                        .conditions
                        .extend(Filter::parse_bounded(part)?.conditions);
                }
                continue;
            }
            if field.is_empty() {
                return Err(Error::invalid_argument("filter field path cannot be empty"));
            }
            if UNSUPPORTED_LOGICAL.contains(&field.as_str()) {
                return Err(Error::invalid_argument(format!(
                    "`{field}` is not supported: conditions combine only with `$and` \
                     (run one search per alternative for `$or`)"
                )));
            }
            // Any other `$` key is an operator of another filter language
            // (`$where`, `$in`, `$expr`), never a field; `$` alone is the
            // whole value.
            if field.starts_with('$') && field != "$" {
                return Err(Error::invalid_argument(format!(
                    "unknown filter key `{field}`: the only top-level operator is `$and`, \
                     and field paths do not start with `$`"
                )));
            }
            match cond {
                Value::Object(ops) if ops.keys().any(|k| k.starts_with('$')) => {
                    if let Some(plain) = ops.keys().find(|k| !k.starts_with('$')) {
                        return Err(Error::invalid_argument(format!(
                            "filter on `{field}` mixes operators with the plain key `{plain}`"
                        )));
                    }
                    for (op, operand) in ops {
                        let op = FilterOp::parse(op)?;
                        if op.is_ordering() && !(operand.is_number() || operand.is_string()) {
                            return Err(Error::invalid_argument(format!(
                                "filter `{field}` {op} needs a number or a string, not `{operand}`"
                            )));
                        }
                        filter = filter.condition(field.clone(), op, operand.clone());
                    }
                }
                operand => filter = filter.eq(field.clone(), operand.clone()),
            }
        }
        Ok(filter)
    }

    /// Whether `value` meets every condition.
    pub fn matches(&self, value: &Value) -> bool {
        self.conditions.iter().all(|c| {
            let found = field(value, &c.field);
            match c.op {
                FilterOp::Eq => found.is_some_and(|f| equal(f, &c.value)),
                FilterOp::Ne => !found.is_some_and(|f| equal(f, &c.value)),
                op => found
                    .and_then(|f| compare(f, &c.value))
                    .is_some_and(|ord| match op {
                        FilterOp::Gt => ord == Ordering::Greater,
                        FilterOp::Gte => ord != Ordering::Less,
                        FilterOp::Lt => ord == Ordering::Less,
                        _ => ord != Ordering::Greater,
                    }),
            }
        })
    }
}

impl TryFrom<Value> for Filter {
    type Error = Error;

    /// [`Filter::parse`].
    fn try_from(json: Value) -> Result<Filter> {
        Filter::parse(&json)
    }
}

impl From<Filter> for Value {
    /// The JSON form; conditions that one object cannot hold together (one
    /// operator twice on a field) go into further objects under `$and`, so
    /// no condition is lost.
    fn from(filter: Filter) -> Value {
        let mut parts: Vec<Map<String, Value>> = Vec::new();
        for c in filter.conditions {
            let op = c.op.as_str();
            let free = parts.iter().position(
                |p| !matches!(p.get(&c.field), Some(Value::Object(ops)) if ops.contains_key(op)),
            );
            let i = free.unwrap_or_else(|| {
                parts.push(Map::new());
                parts.len() - 1
            });
            let entry = parts[i]
                .entry(c.field)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(ops) = entry {
                ops.insert(op.to_owned(), c.value);
            }
        }
        match parts.len() {
            0 => Value::Object(Map::new()),
            1 => Value::Object(parts.pop().unwrap_or_default()),
            _ => Value::Object(Map::from_iter([(
                "$and".to_owned(),
                Value::Array(parts.into_iter().map(Value::Object).collect()),
            )])),
        }
    }
}

/// The value at dotted `path` (`"$"` is the whole value); array elements by
/// index.
pub(crate) fn field<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    if path == "$" {
        return Some(value);
    }
    path.split('.').try_fold(value, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// JSON equality where numbers, at any depth, compare by exact value
/// (`1 == 1.0`, and `9007199254740993 != 9007199254740992`).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| equal(a, b)))
        }
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_cmp(x, y),
        (Value::String(x), Value::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

/// The order of two JSON numbers by exact value: integers as integers, a
/// float against an integer without rounding the integer.
fn number_cmp(x: &serde_json::Number, y: &serde_json::Number) -> Option<Ordering> {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(x), int(y)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        (Some(a), None) => float_vs_int(y.as_f64()?, a).map(Ordering::reverse),
        (None, Some(b)) => float_vs_int(x.as_f64()?, b),
        (None, None) => x.as_f64()?.partial_cmp(&y.as_f64()?),
    }
}

/// The order of float `f` against integer `i`, exactly.
fn float_vs_int(f: f64, i: i128) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // Every i64/u64 lies within ±2^64, where a float beyond is decided by
    // its sign; within, the float's integer part converts to i128 exactly.
    if f >= 1.8446744073709552e19 {
        return Some(Ordering::Greater);
    }
    if f <= -1.8446744073709552e19 {
        return Some(Ordering::Less);
    }
    let whole = f.trunc();
    match (whole as i128).cmp(&i) {
        Ordering::Equal if f > whole => Some(Ordering::Greater),
        Ordering::Equal if f < whole => Some(Ordering::Less),
        other => Some(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_form_round_trips_and_matches() {
        let f = Filter::parse(&json!({"age": {"$gte": 30, "$lt": 40}, "city": "Paris"})).unwrap();
        assert!(f.matches(&json!({"age": 35.0, "city": "Paris"})));
        assert!(!f.matches(&json!({"age": 41, "city": "Paris"})));
        assert!(!f.matches(&json!({"city": "Paris"})));
        assert_eq!(Filter::parse(&Value::from(f.clone())).unwrap(), f);
        assert!(Filter::parse(&json!({"age": {"$like": 3}})).is_err());
        assert!(Filter::parse(&json!({"age": {"$gt": [1]}})).is_err());
        assert!(Filter::new().ne("x", 1).matches(&json!({})));
    }

    #[test]
    fn a_repeated_operator_keeps_both_conditions_in_json() {
        let f = Filter::new().gt("n", 20).gt("n", 30).eq("c", "x");
        let json = Value::from(f.clone());
        assert_eq!(
            json,
            json!({"$and": [{"n": {"$gt": 20}, "c": {"$eq": "x"}}, {"n": {"$gt": 30}}]})
        );
        let back = Filter::parse(&json).unwrap();
        assert!(!back.matches(&json!({"n": 25, "c": "x"})));
        assert!(back.matches(&json!({"n": 35, "c": "x"})));
        assert!(Filter::parse(&json!({"$and": {"n": 1}})).is_err());
    }

    #[test]
    fn numbers_compare_by_exact_value_at_any_depth() {
        let big = 9_007_199_254_740_993u64;
        assert!(Filter::new().eq("id", big).matches(&json!({"id": big})));
        assert!(!Filter::new().eq("id", big - 1).matches(&json!({"id": big})));
        assert!(Filter::new().gt("id", big - 1).matches(&json!({"id": big})));
        assert!(
            Filter::new()
                .lt("v", u64::MAX)
                .matches(&json!({"v": u64::MAX - 1}))
        );
        assert!(
            Filter::new()
                .eq("v", json!([1]))
                .matches(&json!({"v": [1.0]}))
        );
        assert!(
            Filter::new()
                .eq("w", json!({"x": 1}))
                .matches(&json!({"w": {"x": 1.0}}))
        );
        assert!(Filter::new().gt("f", 2).matches(&json!({"f": 2.5})));
        assert!(Filter::new().lt("f", 3).matches(&json!({"f": 2.5})));
        assert!(!Filter::new().gt("f", 3).matches(&json!({"f": 2.5})));
        assert!(Filter::new().eq("z", 0).matches(&json!({"z": -0.0})));
    }
}
