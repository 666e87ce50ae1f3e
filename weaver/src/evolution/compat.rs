//! Comparing the state's JSON Schema with the previous release's.

use std::collections::{BTreeSet, HashSet};
use std::fmt;

use serde_json::Value;

use super::schema::{
    SchemaSnapshot, has_type, integer_keys, merge_ref_siblings, resolve, schema_snapshot,
};
use crate::error::Result;
use crate::state::{GraphState, StateSchema};

/// How much a [`Change`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Read as it is: nothing to do.
    Info,
    /// Old checkpoints read, but a rollback to the previous release could
    /// not read what this one writes.
    Warning,
    /// Checkpoints the previous release wrote would not read.
    Failure,
}

/// One difference between the previous release's state schema and this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// How much it matters.
    pub severity: Severity,
    /// Where: a field path such as `profile.age` (`items[]` for an array's
    /// items, `scores{}` for a map's values); empty for the whole state.
    pub path: String,
    /// What changed, and what to do about it.
    pub message: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Failure => "failure",
        };
        match self.path.as_str() {
            "" => write!(f, "{level}: {}", self.message),
            path => write!(f, "{level}: `{path}`: {}", self.message),
        }
    }
}

/// The result of [`compare`]: every change found, most severe first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compatibility {
    /// The changes.
    pub changes: Vec<Change>,
}

impl Compatibility {
    /// The changes old checkpoints cannot be read with.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct Before { topic: String, turns: u64 }
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct After { topic: String, turns: u32 }
    ///
    /// let previous = weaver::evolution::schema_snapshot::<Before>().to_json();
    /// let report = weaver::evolution::check_compatible::<After>(&previous)?;
    /// // `u64` narrowed to `u32`: an old value may not fit.
    /// let failures: Vec<_> = report.failures().map(|c| c.path.as_str()).collect();
    /// assert_eq!(failures, ["turns"]);
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn failures(&self) -> impl Iterator<Item = &Change> {
        self.of(Severity::Failure)
    }

    /// The changes a rollback could not read.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct Before { turns: u32 }
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct After { turns: u64 }
    ///
    /// // Widened: old checkpoints read, but the previous release could not read new ones.
    /// let previous = weaver::evolution::schema_snapshot::<Before>().to_json();
    /// let report = weaver::evolution::check_compatible::<After>(&previous)?;
    /// assert!(report.is_compatible());
    /// assert_eq!(report.warnings().count(), 1);
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn warnings(&self) -> impl Iterator<Item = &Change> {
        self.of(Severity::Warning)
    }

    /// Whether every checkpoint of the previous release reads.
    ///
    /// ```
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct Before { topic: String, turns: u64 }
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// struct After { topic: String, turns: u32 }
    ///
    /// let previous = weaver::evolution::schema_snapshot::<Before>().to_json();
    /// assert!(!weaver::evolution::check_compatible::<After>(&previous)?.is_compatible());
    /// assert!(weaver::evolution::check_compatible::<Before>(&previous)?.is_compatible());
    /// # Ok::<(), weaver::Error>(())
    /// ```
    pub fn is_compatible(&self) -> bool {
        self.failures().next().is_none()
    }

    fn of(&self, severity: Severity) -> impl Iterator<Item = &Change> {
        self.changes.iter().filter(move |c| c.severity == severity)
    }
}

impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return f.write_str("no changes");
        }
        for c in &self.changes {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// Compares the previous release's snapshot with the current one.
/// `upcasts_from` lists the versions the current state has an upcaster from
/// ([`GraphState::UPCASTS`]): with a path of upcasters from the previous
/// version, the changes they cover are reported as info (the upcasters are
/// trusted to do them; test them on stored data).
///
/// The rules, for old checkpoints read by the new release (failures) and
/// new ones read by the previous release after a rollback (warnings):
/// a top-level field added reads as its default and a removed one is
/// ignored (info); a removed field and an added one with the same schema
/// look like a rename, which loses the values (failure); a type changed or
/// narrowed (`u64` to `u32`, `f64` to `i64`, an enum variant removed) is a
/// failure, a widened one (`u32` to `u64`, a variant added, `T` to
/// `Option<T>`) a warning, and so are a map's key types (text, signed or
/// unsigned integers, an enum's names; a struct read as an integer-keyed
/// map fails on its field names); inside a field, a new required property is a
/// failure (old values lack it) unless it has a default.
pub fn compare(
    previous: &SchemaSnapshot,
    current: &SchemaSnapshot,
    upcasts_from: &[u32],
) -> Compatibility {
    let (prev_root, cur_root) = (
        merge_ref_siblings(&previous.schema),
        merge_ref_siblings(&current.schema),
    );
    let mut cmp = Comparer {
        prev_root: &prev_root,
        cur_root: &cur_root,
        changes: Vec::new(),
        comparing: HashSet::new(),
    };
    let (from, to) = (previous.state_version, current.state_version);
    let path_ok = (from..to).all(|v| upcasts_from.contains(&v));
    if to < from {
        cmp.push(
            Severity::Failure,
            "",
            format!("the state version went down from {from} to {to}: checkpoints of version {from} would be refused"),
        );
    } else if to > from && !path_ok {
        let gap = (from..to)
            .find(|v| !upcasts_from.contains(v))
            .unwrap_or(from);
        cmp.push(
            Severity::Failure,
            "",
            format!("the state version went from {from} to {to}, but no upcaster goes from version {gap} to {}: checkpoints of version {from} would be refused", gap + 1),
        );
    } else if to > from {
        cmp.push(
            Severity::Warning,
            "",
            format!("checkpoints written at version {to} are refused by the previous release (version {from}): a rollback cannot resume them"),
        );
    }
    cmp.object("", &previous.schema, &current.schema, true);
    let mut changes = cmp.changes;
    if to > from && path_ok {
        // The upcasters are what makes these readable.
        for c in changes
            .iter_mut()
            .filter(|c| c.severity == Severity::Failure)
        {
            c.severity = Severity::Info;
            c.message = format!(
                "{} (covered by the upcasters from version {from})",
                c.message
            );
        }
    }
    changes.sort_by_key(|c| std::cmp::Reverse(c.severity));
    Compatibility { changes }
}

/// [`compare`] of the snapshot `previous` (JSON, as
/// [`SchemaSnapshot::parse`] reads it) with the current `S`.
///
/// ```
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct V1 { topic: String, turns: u64 }
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct V2 { topic: String, turns: u32, mood: String }
///
/// let previous = weaver::evolution::schema_snapshot::<V1>().to_json();
/// let report = weaver::evolution::check_compatible::<V2>(&previous).unwrap();
/// assert!(!report.is_compatible());
/// let failure = report.failures().next().unwrap();
/// assert_eq!(failure.path, "turns");
/// ```
pub fn check_compatible<S: StateSchema>(previous: &str) -> Result<Compatibility> {
    let previous = SchemaSnapshot::parse(previous)?;
    Ok(compare(
        &previous,
        &schema_snapshot::<S>(),
        <S as GraphState>::UPCASTS,
    ))
}

/// [`check_compatible`] for a test: panics, listing every failure, when old
/// checkpoints would not read (or when `previous` does not parse); prints
/// the warnings; returns the report.
///
/// ```
/// use weaver::prelude::*;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct V1 { topic: String }
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// struct V2 { topic: String, turns: u32 }
///
/// // In a test, `previous` is the snapshot committed with the last release,
/// // e.g. `include_str!("../state-schema.json")`.
/// let previous = weaver::evolution::schema_snapshot::<V1>().to_json();
/// let report = weaver::evolution::assert_compatible::<V2>(&previous);
/// assert_eq!(report.warnings().count(), 0);
/// ```
#[track_caller]
pub fn assert_compatible<S: StateSchema>(previous: &str) -> Compatibility {
    let report = match check_compatible::<S>(previous) {
        Ok(report) => report,
        Err(e) => panic!("the previous schema snapshot does not read: {e}"),
    };
    for w in report.warnings() {
        eprintln!("{w}");
    }
    if !report.is_compatible() {
        panic!(
            "checkpoints of the previous release would not read with `{}`:\n{report}",
            std::any::type_name::<S>()
        );
    }
    report
}

struct Comparer<'a> {
    prev_root: &'a Value,
    cur_root: &'a Value,
    changes: Vec<Change>,
    /// The pairs of schemas being compared further up the current path
    /// (by address): a recursive type meets its own definition again
    /// inside itself, and comparing that pair there would never end. A
    /// type met at two separate paths is still compared, and reported, at
    /// each.
    comparing: HashSet<(*const Value, *const Value)>,
}

impl<'a> Comparer<'a> {
    fn push(&mut self, severity: Severity, path: &str, message: String) {
        self.changes.push(Change {
            severity,
            path: path.to_owned(),
            message,
        });
    }

    /// Compares two schemas of the value at `path`.
    fn node(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        let prev = resolve(prev, self.prev_root);
        let cur = resolve(cur, self.cur_root);
        if prev == cur && !prev.to_string().contains("$ref") {
            return;
        }
        let pair = (prev as *const Value, cur as *const Value);
        if !self.comparing.insert(pair) {
            return;
        }
        self.node_resolved(path, prev, cur);
        self.comparing.remove(&pair);
    }

    fn node_resolved(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        // An `Option` on both sides: what it holds is compared (its limits,
        // items and fields, which the union's own keys do not show).
        if let (Some(p), Some(c)) = (
            option_of(prev, self.prev_root),
            option_of(cur, self.cur_root),
        ) {
            self.node(path, p, c);
            return;
        }
        let (pt, ct) = (kinds(prev, self.prev_root), kinds(cur, self.cur_root));
        let lost: Vec<&str> = pt
            .iter()
            .filter(|k| !covers(&ct, k))
            .map(String::as_str)
            .collect();
        let gained: Vec<&str> = ct
            .iter()
            .filter(|k| !covers(&pt, k))
            .map(String::as_str)
            .collect();
        if !lost.is_empty() {
            self.push(
                Severity::Failure,
                path,
                format!(
                    "type changed from {} to {}: stored values of {} do not decode; bump the state version with an upcaster",
                    show(&pt),
                    show(&ct),
                    lost.join(", ")
                ),
            );
            return;
        }
        // A variant of an externally tagged enum, stored as `{"Tag": …}`,
        // read by a plain struct: only one that needs no other field reads it.
        // (Only a struct alone: a value that may also be a map or any
        // value, as a migration's fallback branch, may read it.)
        if ct.contains("object") && !ct.contains("any") && cur.get("properties").is_some() {
            let required: Vec<&str> = cur
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let known = |k: &str| cur.get("properties").and_then(|p| p.get(k)).is_some();
            let closed = no_extra_keys(cur);
            for k in pt
                .iter()
                .filter(|k| k.starts_with("object {") && !ct.contains(*k))
            {
                let tag = k["object {".len()..].trim_end_matches('}');
                let missing: Vec<&str> = required.iter().copied().filter(|r| *r != tag).collect();
                let why = if !missing.is_empty() {
                    format!("a struct that requires {}", missing.join(", "))
                } else if closed && !known(tag) {
                    "a struct that refuses unknown fields".to_owned()
                } else {
                    continue;
                };
                self.push(
                    Severity::Failure,
                    path,
                    format!(
                        "variant {tag}, stored as {{\"{tag}\": ...}}, does not read as {why}; bump the state version with an upcaster"
                    ),
                );
                return;
            }
        }
        if !gained.is_empty() {
            self.push(
                Severity::Warning,
                path,
                format!(
                    "type widened from {} to {}: the previous release cannot read {}",
                    show(&pt),
                    show(&ct),
                    gained.join(", ")
                ),
            );
        }
        self.limits(path, prev, cur);
        match (
            object_of(prev, self.prev_root),
            object_of(cur, self.cur_root),
        ) {
            (Some(po), Some(co)) => self.object(path, po, co, false),
            (None, Some(co)) if map_values(prev).is_some() => self.map_to_struct(path, prev, co),
            (Some(po), None) if map_values(cur).is_some() => self.struct_to_map(path, po, cur),
            _ => {
                self.children(path, prev, cur);
                self.variants(path, prev, cur);
            }
        }
    }

    /// A map became a struct: each stored map's value under a field's name
    /// is read as that field, and a stored map without a required field
    /// does not decode.
    fn map_to_struct(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        let Some(values) = map_values(prev) else {
            return;
        };
        let required: BTreeSet<&str> = cur
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !required.is_empty() {
            self.push(
                Severity::Failure,
                path,
                format!(
                    "a map became a struct with required fields ({}): a stored map without them does not decode; bump the state version with an upcaster",
                    required.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            );
        }
        // An object that takes only its listed names (a map keyed by an
        // enum, a struct denying unknown fields) refuses the other keys.
        if no_extra_keys(cur) {
            let names = names_of(cur);
            self.push(
                Severity::Failure,
                path,
                format!(
                    "map keys narrowed from {} to {}: stored keys may not decode; bump the state version with an upcaster",
                    KEY_KINDS[map_key_kind(prev).unwrap_or(2)],
                    listed(&names)
                ),
            );
        }
        if let Some(props) = cur.get("properties").and_then(Value::as_object) {
            for (k, field) in props {
                self.node(&join(path, k), values, field);
            }
        }
    }

    /// A struct became a map: each stored field is read as a map value, its
    /// name as a key.
    fn struct_to_map(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        let Some(values) = map_values(cur) else {
            return;
        };
        let names = names_of(prev);
        let kind = map_key_kind(cur).unwrap_or(2);
        let fits = |n: &&str| match kind {
            0 => n.parse::<u64>().is_ok(),
            1 => n.parse::<i64>().is_ok(),
            _ => true,
        };
        let unread: Vec<&str> = names.iter().copied().filter(|n| !fits(n)).collect();
        if !unread.is_empty() {
            self.push(
                Severity::Failure,
                path,
                format!(
                    "keys changed from {} to {}: stored keys {} do not decode; bump the state version with an upcaster",
                    listed(&names),
                    KEY_KINDS[kind],
                    listed(&unread)
                ),
            );
        } else if no_extra_keys(prev) {
            self.push(
                Severity::Warning,
                path,
                format!(
                    "keys widened from {} to {}: the previous release may not read new keys",
                    listed(&names),
                    KEY_KINDS[kind]
                ),
            );
        }
        if let Some(props) = prev.get("properties").and_then(Value::as_object) {
            for (k, field) in props {
                self.node(&join(path, k), field, values);
            }
        }
    }

    /// Compares the limits a string or an array schema sets on its values
    /// (lengths, item counts, format, pattern): a narrower limit fails (a
    /// stored value may not fit), a wider one warns.
    fn limits(&mut self, path: &str, prev: &Value, cur: &Value) {
        for (min, max, what) in [
            ("minLength", "maxLength", "length"),
            ("minItems", "maxItems", "item count"),
        ] {
            let range = |s: &Value| {
                let bound = |k: &str| s.get(k).and_then(Value::as_u64);
                (bound(min).unwrap_or(0), bound(max).unwrap_or(u64::MAX))
            };
            let ((plo, phi), (clo, chi)) = (range(prev), range(cur));
            let show = |(lo, hi): (u64, u64)| match hi {
                u64::MAX => format!("{lo}.."),
                hi => format!("{lo}..={hi}"),
            };
            if clo > plo || chi < phi {
                self.push(
                    Severity::Failure,
                    path,
                    format!(
                        "{what} narrowed from {} to {}: stored values may not fit; bump the state version with an upcaster",
                        show((plo, phi)),
                        show((clo, chi))
                    ),
                );
            } else if clo < plo || chi > phi {
                self.push(
                    Severity::Warning,
                    path,
                    format!(
                        "{what} widened from {} to {}: the previous release cannot read every new value",
                        show((plo, phi)),
                        show((clo, chi))
                    ),
                );
            }
        }
        for key in ["format", "pattern"] {
            if !(has_type(prev, &["string"]) && has_type(cur, &["string"])) {
                break;
            }
            match (prev.get(key), cur.get(key)) {
                (p, c) if p == c => {}
                (Some(p), None) => self.push(
                    Severity::Warning,
                    path,
                    format!("{key} {p} dropped: the previous release may refuse new values"),
                ),
                (p, Some(c)) => self.push(
                    Severity::Failure,
                    path,
                    format!(
                        "{key} {c} is new{}: stored values may not match it; bump the state version with an upcaster",
                        p.map(|p| format!(" (was {p})")).unwrap_or_default()
                    ),
                ),
                (None, None) => {}
            }
        }
        self.number_limits(path, prev, cur);
    }

    /// Compares what a number schema takes beyond its kind: `f64` to `f32`
    /// (`format` `double` to `float`: a stored value beyond an `f32` reads
    /// as infinite, which no checkpoint can hold), integers that became
    /// floats that do not hold all of them exactly, and a value newly
    /// excluded (`not`, as `NonZero*` writes it) fail; the reverse warns.
    fn number_limits(&mut self, path: &str, prev: &Value, cur: &Value) {
        let numbers = ["number", "integer"];
        if !(has_type(prev, &numbers) && has_type(cur, &numbers)) {
            return;
        }
        let formats = (
            prev.get("format").and_then(Value::as_str),
            cur.get("format").and_then(Value::as_str),
        );
        if formats == (Some("double"), Some("float")) {
            self.push(
                Severity::Failure,
                path,
                "narrowed from f64 to f32: stored values beyond an f32 do not read; bump the state version with an upcaster".into(),
            );
        } else if formats == (Some("float"), Some("double")) {
            self.push(
                Severity::Warning,
                path,
                "widened from f32 to f64: the previous release cannot read every new value".into(),
            );
        }
        // Integers read as floating point from now on: beyond what the
        // float holds exactly (2^53 for `f64`, 2^24 for `f32`) a stored
        // value reads rounded, with no error.
        if has_type(prev, &["integer"])
            && !has_type(prev, &["number"])
            && has_type(cur, &["number"])
            && !has_type(cur, &["integer"])
        {
            let (exact, float) = match formats.1 {
                Some("float") => (1i128 << 24, "f32"),
                _ => (1i128 << 53, "f64"),
            };
            let (lo, hi) = int_range(prev);
            if lo < -exact || hi > exact {
                self.push(
                    Severity::Failure,
                    path,
                    format!(
                        "integers became {float}: stored values beyond ±{exact} read rounded; bump the state version with an upcaster"
                    ),
                );
            }
        }
        // A value the previous schema's range already left out (a
        // `NonZeroU32`'s 0, by its minimum) is no new refusal.
        let admitted = |excluded: &Value| match excluded.get("const").and_then(Value::as_i64) {
            Some(v) if has_type(prev, &["integer"]) => {
                let (lo, hi) = int_range(prev);
                lo <= i128::from(v) && i128::from(v) <= hi
            }
            _ => true,
        };
        match (prev.get("not"), cur.get("not")) {
            (p, c) if p == c => {}
            (_, Some(c)) if !admitted(c) => {}
            (_, Some(c)) => self.push(
                Severity::Failure,
                path,
                format!("values matching {c} are newly refused: stored ones do not read; bump the state version with an upcaster"),
            ),
            (Some(p), None) => self.push(
                Severity::Warning,
                path,
                format!("values matching {p} are newly allowed: the previous release cannot read them"),
            ),
            (None, None) => {}
        }
    }

    /// Compares the variants of two enum schemas that are in both, paired
    /// by their tag (the key of an externally tagged variant, the tag
    /// field's value of an internally or adjacently tagged one): a field
    /// changed inside a variant is a change of the state.
    fn variants(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        let (pv, cv) = (branches(prev, self.prev_root), branches(cur, self.cur_root));
        for (tag, p) in &pv {
            let Some((_, c)) = cv.iter().find(|(t, _)| t == tag) else {
                continue;
            };
            let at = match path {
                "" => tag.clone(),
                path => format!("{path}.{tag}"),
            };
            let pair = (*p as *const Value, *c as *const Value);
            // Equal text hides nothing only without a `$ref`: a referenced
            // type of the same name may have changed.
            let same = p == c && !p.to_string().contains("$ref");
            if same || !self.comparing.insert(pair) {
                continue;
            }
            if tag_of(p).is_some() {
                // `{"Ask": {...}}`: compare what the key holds.
                let held = |s: &'a Value| s.get("properties")?.get(tag.as_str());
                if let (Some(pi), Some(ci)) = (held(p), held(c)) {
                    self.node(&at, pi, ci);
                }
            } else {
                self.object(&at, p, c, false);
            }
            self.comparing.remove(&pair);
        }
    }

    /// Array items (each place of a tuple), and map values.
    fn children(&mut self, path: &str, prev: &'a Value, cur: &'a Value) {
        if let (Some(Value::Array(p)), Some(Value::Array(c))) =
            (prev.get("prefixItems"), cur.get("prefixItems"))
        {
            for (i, (p, c)) in p.iter().zip(c).enumerate() {
                self.node(&format!("{path}[{i}]"), p, c);
            }
        }
        if let (Some(p), Some(c)) = (prev.get("items"), cur.get("items"))
            && p.is_object()
            && c.is_object()
        {
            self.node(&format!("{path}[]"), p, c);
        }
        // A tuple that became a list (each place read as an item), or the
        // reverse (each item read as the place it lands in).
        match (prev.get("prefixItems"), cur.get("prefixItems")) {
            (Some(Value::Array(places)), None) => {
                if let Some(c) = cur.get("items").filter(|c| c.is_object()) {
                    for (i, p) in places.iter().enumerate() {
                        self.node(&format!("{path}[{i}]"), p, c);
                    }
                }
            }
            (None, Some(Value::Array(places))) => {
                if let Some(p) = prev.get("items").filter(|p| p.is_object()) {
                    for (i, c) in places.iter().enumerate() {
                        self.node(&format!("{path}[{i}]"), p, c);
                    }
                }
            }
            _ => {}
        }
        let values = |s: &'a Value| {
            s.get("additionalProperties")
                .filter(|v| v.is_object())
                .or_else(|| key_patterns(s).into_iter().next().map(|(_, v)| v))
        };
        if let (Some(p), Some(c)) = (values(prev), values(cur)) {
            self.node(&format!("{path}{{}}"), p, c);
        }
        self.map_keys(path, prev, cur);
    }

    /// Compares the keys two map schemas take: text, signed or unsigned
    /// integers (schemars writes integer keys as `patternProperties`). A
    /// narrower key fails (a stored key may not decode), a wider one warns.
    fn map_keys(&mut self, path: &str, prev: &Value, cur: &Value) {
        let (Some(p), Some(c)) = (map_key_kind(prev), map_key_kind(cur)) else {
            return;
        };
        let names = KEY_KINDS;
        if c < p {
            self.push(
                Severity::Failure,
                path,
                format!(
                    "map keys narrowed from {} to {}: stored keys may not decode; bump the state version with an upcaster",
                    names[p], names[c]
                ),
            );
        } else if c > p {
            self.push(
                Severity::Warning,
                path,
                format!(
                    "map keys widened from {} to {}: the previous release may not read new keys",
                    names[p], names[c]
                ),
            );
        }
    }

    /// Compares the properties of two object schemas; `top`: the state.
    fn object(&mut self, path: &str, prev: &'a Value, cur: &'a Value, top: bool) {
        static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> =
            std::sync::OnceLock::new();
        let empty = EMPTY.get_or_init(serde_json::Map::new);
        let props = |s: &'a Value| {
            s.get("properties")
                .and_then(Value::as_object)
                .unwrap_or(empty)
        };
        let required = |s: &Value| -> BTreeSet<String> {
            s.get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let (pp, cp) = (props(prev), props(cur));
        let (preq, creq) = (required(prev), required(cur));
        let at = |name: &str| match path {
            "" => name.to_owned(),
            p => format!("{p}.{name}"),
        };
        let removed: Vec<&String> = pp.keys().filter(|k| !cp.contains_key(*k)).collect();
        let added: Vec<&String> = cp.keys().filter(|k| !pp.contains_key(*k)).collect();
        // An added field with the schema of a removed one looks like a
        // rename: the old values would be lost.
        let mut renamed = BTreeSet::new();
        for a in &added {
            let new = strip_docs(resolve(&cp[*a], self.cur_root));
            let was: Vec<&&String> = removed
                .iter()
                .filter(|r| strip_docs(resolve(&pp[**r], self.prev_root)) == new)
                .collect();
            if was.is_empty() {
                continue;
            }
            let names: Vec<String> = was.iter().map(|r| format!("`{}`", at(r))).collect();
            renamed.insert((*a).clone());
            renamed.extend(was.iter().map(|r| (**r).clone()));
            self.push(
                Severity::Failure,
                &at(a),
                format!(
                    "added with the schema of removed {}: a rename reads old checkpoints without the old value; bump the state version with an upcaster that moves it",
                    names.join(", ")
                ),
            );
        }
        for r in removed.iter().filter(|r| !renamed.contains(**r)) {
            if top {
                self.push(
                    Severity::Info,
                    &at(r),
                    "removed: ignored when old checkpoints are read".into(),
                );
            } else if preq.contains(*r) && !has_default(&pp[*r]) {
                self.push(
                    Severity::Warning,
                    &at(r),
                    "removed, but the previous release requires it: a rollback cannot read values written without it".into(),
                );
            }
            if no_extra_keys(cur) {
                self.push(
                    Severity::Failure,
                    &at(r),
                    "removed, and the object denies unknown fields: stored values holding it do not decode".into(),
                );
            }
        }
        for a in added.iter().filter(|a| !renamed.contains(**a)) {
            if top {
                self.push(
                    Severity::Info,
                    &at(a),
                    "added: old checkpoints read it as its default".into(),
                );
            } else if creq.contains(*a) && !has_default(&cp[*a]) {
                self.push(
                    Severity::Failure,
                    &at(a),
                    "added as required: stored values lack it; give it `#[serde(default)]`".into(),
                );
            }
            if no_extra_keys(prev) {
                self.push(
                    Severity::Warning,
                    &at(a),
                    "added, and the previous release denies unknown fields there: a rollback cannot read it".into(),
                );
            }
        }
        for (name, p) in pp {
            let Some(c) = cp.get(name) else { continue };
            if !top && !preq.contains(name) && creq.contains(name) && !has_default(c) {
                self.push(
                    Severity::Failure,
                    &at(name),
                    "now required: stored values may lack it; give it `#[serde(default)]`".into(),
                );
            }
            self.node(&at(name), p, c);
        }
    }
}

/// Whether a schema declares a default (`#[serde(default)]`).
fn has_default(schema: &Value) -> bool {
    schema.get("default").is_some()
}

/// Whether an object schema refuses unknown keys (`deny_unknown_fields`).
fn no_extra_keys(schema: &Value) -> bool {
    schema.get("additionalProperties") == Some(&Value::Bool(false))
}

/// A schema without its descriptive keys.
fn strip_docs(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(m) = s.as_object_mut() {
        for k in ["description", "title", "default", "examples"] {
            m.remove(k);
        }
    }
    s
}

/// The schema of a map's values (`additionalProperties`, or the key
/// pattern's of an integer-keyed map), for a schema that names no fields.
fn map_values(schema: &Value) -> Option<&Value> {
    if schema.get("properties").is_some() {
        return None;
    }
    schema
        .get("additionalProperties")
        .filter(|v| v.is_object())
        .or_else(|| key_patterns(schema).into_iter().next().map(|(_, v)| v))
}

/// `path.key`, or `key` at the top.
fn join(path: &str, key: &str) -> String {
    match path {
        "" => key.to_owned(),
        path => format!("{path}.{key}"),
    }
}

/// The keys [`map_key_kind`] tells apart, by their number.
const KEY_KINDS: [&str; 3] = ["unsigned integers", "integers", "any text"];

/// The names of an object schema's properties.
fn names_of(schema: &Value) -> Vec<&str> {
    match schema.get("properties") {
        Some(Value::Object(p)) => p.keys().map(String::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The names for a message, each quoted: the first eight.
fn listed(names: &[&str]) -> String {
    let mut shown: Vec<String> = names.iter().take(8).map(|n| format!("`{n}`")).collect();
    if names.len() > 8 {
        shown.push("...".into());
    }
    match shown.is_empty() {
        true => "no names".into(),
        false => format!("the names {}", shown.join(", ")),
    }
}

/// The `patternProperties` of a schema (a map with integer keys).
fn key_patterns(schema: &Value) -> Vec<(&str, &Value)> {
    schema
        .get("patternProperties")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .unwrap_or_default()
}

/// The keys a map schema (no named fields) takes, narrowest first: 0 for
/// unsigned integers, 1 for integers, 2 for any text; `None` for a schema
/// that is not a map.
fn map_key_kind(schema: &Value) -> Option<usize> {
    if schema.get("properties").is_some() {
        return None;
    }
    // Any value (`serde_json::Value`) is `true`.
    if schema
        .get("additionalProperties")
        .is_some_and(|v| v.is_object() || *v == Value::Bool(true))
    {
        return Some(2);
    }
    let patterns = key_patterns(schema);
    if patterns.is_empty() {
        return None;
    }
    Some(
        patterns
            .iter()
            .map(|(p, _)| match integer_keys(p) {
                Some(false) => 0,
                Some(true) => 1,
                None => 2,
            })
            .max()
            .unwrap_or(2),
    )
}

/// What an `Option` schema holds: the one branch of an `anyOf`/`oneOf` of
/// two whose other branch is `null`.
fn option_of<'a>(schema: &'a Value, root: &'a Value) -> Option<&'a Value> {
    let branches = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))?
        .as_array()?;
    let is_null = |b: &Value| resolve(b, root).get("type").and_then(Value::as_str) == Some("null");
    match branches.as_slice() {
        [a, b] if is_null(b) && !is_null(a) => Some(a),
        [a, b] if is_null(a) && !is_null(b) => Some(b),
        _ => None,
    }
}

/// The object schema of a value whose only object kind is `schema` (an
/// `Option<Struct>` included).
fn object_of<'a>(schema: &'a Value, root: &'a Value) -> Option<&'a Value> {
    if schema.get("properties").is_some() {
        return Some(schema);
    }
    let branches = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))?
        .as_array()?;
    let objects: Vec<&Value> = branches
        .iter()
        .map(|b| resolve(b, root))
        .filter(|b| b.get("properties").is_some())
        .collect();
    match objects.as_slice() {
        [one] if branches.len() <= 2 => Some(one),
        _ => None,
    }
}

/// The object branches of an enum schema with a variant tag each (see
/// [`variant_tag`]), nested `anyOf`/`oneOf` (an `Option` of an enum)
/// flattened.
fn branches<'a>(schema: &'a Value, root: &'a Value) -> Vec<(String, &'a Value)> {
    fn walk<'a>(
        schema: &'a Value,
        root: &'a Value,
        depth: u32,
        out: &mut Vec<(String, &'a Value)>,
    ) {
        let schema = resolve(schema, root);
        let nested = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array);
        match nested {
            Some(bs) if depth < 8 => {
                for b in bs {
                    walk(b, root, depth + 1, out);
                }
            }
            Some(_) => {}
            None => {
                if let Some(tag) = variant_tag(schema) {
                    out.push((tag, schema));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(schema, root, 0, &mut out);
    out
}

/// The tag of an enum variant's object schema: the key of an externally
/// tagged variant (`{"Ask": {...}}`), or the constant of the required
/// field an internally or adjacently tagged one carries (`{"kind": "Ask",
/// ...}` gives `Ask`).
fn variant_tag(schema: &Value) -> Option<String> {
    if let Some(t) = tag_of(schema) {
        return Some(t.trim_start_matches('{').trim_end_matches('}').to_owned());
    }
    let props = schema.get("properties")?.as_object()?;
    let req = schema.get("required")?.as_array()?;
    req.iter().filter_map(Value::as_str).find_map(|k| {
        let c = props.get(k)?.get("const")?.as_str()?;
        Some(c.to_owned())
    })
}

/// The kinds of value a schema accepts, each as text: `string`, `null`,
/// `integer[lo,hi]`, `number`, `boolean`, `array`, `object`, `"a"` (an enum
/// value or constant), `any`. A variant of a tagged enum is an object
/// kind named by its tag.
fn kinds(schema: &Value, root: &Value) -> BTreeSet<String> {
    kinds_within(schema, root, &mut Vec::new())
}

/// [`kinds`], `refs` the `$ref`s it is inside: a branch that refers back to
/// one of them (a recursive enum, `A = A | null`) adds nothing more.
fn kinds_within<'a>(
    schema: &'a Value,
    root: &'a Value,
    refs: &mut Vec<&'a str>,
) -> BTreeSet<String> {
    let named = schema.get("$ref").and_then(Value::as_str);
    if let Some(r) = named {
        if refs.contains(&r) {
            return BTreeSet::new();
        }
        refs.push(r);
    }
    let out = kinds_resolved(resolve(schema, root), root, refs);
    if named.is_some() {
        refs.pop();
    }
    out
}

fn kinds_resolved<'a>(
    schema: &'a Value,
    root: &'a Value,
    refs: &mut Vec<&'a str>,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        out.extend(values.iter().map(|v| v.to_string()));
        return out;
    }
    if let Some(v) = schema.get("const") {
        out.insert(v.to_string());
        return out;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            for b in branches {
                out.extend(kinds_within(b, root, refs));
            }
            return out;
        }
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => {
            out.insert("any".into());
            return out;
        }
    };
    for t in types {
        match t {
            "integer" => {
                let (lo, hi) = int_range(schema);
                out.insert(format!("integer[{lo},{hi}]"))
            }
            "object" => match (tag_of(schema), variant_tag(schema)) {
                (Some(tag), _) => out.insert(format!("object {tag}")),
                (None, Some(tag)) => out.insert(format!("object ={tag}")),
                (None, None) => out.insert("object".into()),
            },
            other => out.insert(other.to_owned()),
        };
    }
    out
}

/// The key of an externally tagged enum variant (`{"Move": {...}}`).
fn tag_of(schema: &Value) -> Option<String> {
    let req = schema.get("required")?.as_array()?;
    let props = schema.get("properties")?.as_object()?;
    match (req.as_slice(), props.len()) {
        ([Value::String(k)], 1)
            if schema.get("additionalProperties") == Some(&Value::Bool(false)) =>
        {
            Some(format!("{{{k}}}"))
        }
        _ => None,
    }
}

/// The range of an integer schema, from its `format` and bounds.
pub(super) fn int_range(schema: &Value) -> (i128, i128) {
    let (mut lo, mut hi) = match schema.get("format").and_then(Value::as_str) {
        Some("int8") => (i8::MIN as i128, i8::MAX as i128),
        Some("uint8") => (0, u8::MAX as i128),
        Some("int16") => (i16::MIN as i128, i16::MAX as i128),
        Some("uint16") => (0, u16::MAX as i128),
        Some("int32") => (i32::MIN as i128, i32::MAX as i128),
        Some("uint32") => (0, u32::MAX as i128),
        Some("uint64") | Some("uint") => (0, u64::MAX as i128),
        Some("int128") => (i128::MIN, i128::MAX),
        Some("uint128") => (0, i128::MAX),
        _ => (i64::MIN as i128, i64::MAX as i128),
    };
    if let Some(m) = schema.get("minimum").and_then(Value::as_f64) {
        lo = lo.max(m.ceil() as i128);
    }
    if let Some(m) = schema.get("maximum").and_then(Value::as_f64) {
        hi = hi.min(m.floor() as i128);
    }
    (lo, hi)
}

/// Whether the kinds `set` accept every value of kind `kind`.
fn covers(set: &BTreeSet<String>, kind: &str) -> bool {
    if set.contains(kind) || set.contains("any") {
        return true;
    }
    if let Some((lo, hi)) = parse_int(kind) {
        return set.contains("number")
            || set
                .iter()
                .filter_map(|k| parse_int(k))
                .any(|(l, h)| l <= lo && hi <= h);
    }
    if kind.starts_with("object ") {
        return set.contains("object");
    }
    // An enum value or constant: whatever accepts its JSON type reads it
    // (a unit variant's name is a string).
    match serde_json::from_str::<Value>(kind) {
        Ok(Value::String(_)) => set.contains("string"),
        Ok(Value::Bool(_)) => set.contains("boolean"),
        Ok(Value::Null) => set.contains("null"),
        Ok(Value::Number(n)) => match n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)) {
            Some(i) => {
                set.contains("number")
                    || set
                        .iter()
                        .filter_map(|k| parse_int(k))
                        .any(|(lo, hi)| lo <= i && i <= hi)
            }
            None => set.contains("number"),
        },
        _ => false,
    }
}

fn parse_int(kind: &str) -> Option<(i128, i128)> {
    let range = kind.strip_prefix("integer[")?.strip_suffix(']')?;
    let (lo, hi) = range.split_once(',')?;
    Some((lo.parse().ok()?, hi.parse().ok()?))
}

/// Kinds for a message: `integer[0,4294967295]` as `integer (0..=4294967295)`.
fn show(kinds: &BTreeSet<String>) -> String {
    let shown: Vec<String> = kinds
        .iter()
        .map(|k| match parse_int(k) {
            Some((lo, hi)) => format!("integer ({lo}..={hi})"),
            None => k.clone(),
        })
        .collect();
    shown.join(" | ")
}
