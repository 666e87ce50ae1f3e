//! The built-in lexical ranking: BM25 over an item's indexed text.
//!
//! **Tokenizer.** Text is split at every character that is not alphanumeric
//! (Unicode `char::is_alphanumeric`), empty pieces are dropped, and each
//! piece is lower-cased (Unicode `to_lowercase`, which may leave a
//! combining mark in it: `"İ"` gives `"i\u{307}"`). There is no stemming
//! and no stop-word list, so
//! `"Pizza!"` and `"pizza"` match but `"pizzas"` does not.
//!
//! **Scoring.** Okapi BM25 with `k1 = 1.2`, `b = 0.75` and the non-negative
//! idf `ln(1 + (N - df + 0.5) / (df + 0.5))`; each distinct query token
//! counts once. The corpus (`N`, document frequencies, average length) is the
//! set of indexed items the search considers: those under the prefix that
//! pass the filter. Scores are therefore relative to one search, and the same
//! on every backend.

/// BM25 term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25 length normalization.
pub const B: f64 = 0.75;

/// Splits text into the tokens BM25 counts (see the module docs).
///
/// ```
/// assert_eq!(weaver::store::bm25::tokenize("User likes Pizza, not sushi!"),
///            ["user", "likes", "pizza", "not", "sushi"]);
/// // Split first, then lower-cased: the dot `İ` leaves stays in the token.
/// assert_eq!(weaver::store::bm25::tokenize("İzmir"), ["i\u{307}zmir"]);
/// ```
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Scores each document against `query`; `None` documents (not indexed) get
/// `None`.
pub(crate) fn score_all(query: &str, docs: &[Option<&str>]) -> Vec<Option<f64>> {
    let mut terms = tokenize(query);
    terms.sort();
    terms.dedup();
    let tokenized: Vec<Option<Vec<String>>> = docs.iter().map(|d| d.map(tokenize)).collect();
    let n = tokenized.iter().flatten().count() as f64;
    if n == 0.0 {
        return vec![None; docs.len()];
    }
    let avgdl = tokenized.iter().flatten().map(Vec::len).sum::<usize>() as f64 / n;
    let idf: Vec<f64> = terms
        .iter()
        .map(|t| {
            let df = tokenized.iter().flatten().filter(|d| d.contains(t)).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    tokenized
        .iter()
        .map(|d| {
            d.as_ref().map(|d| {
                let len = d.len() as f64;
                let norm = if avgdl > 0.0 { len / avgdl } else { 0.0 };
                terms
                    .iter()
                    .zip(&idf)
                    .map(|(t, idf)| {
                        let tf = d.iter().filter(|x| *x == t).count() as f64;
                        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * norm))
                    })
                    .sum()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_document_ranks_first() {
        let s = score_all("pizza", &[Some("likes sushi"), Some("likes pizza"), None]);
        assert_eq!(s[0], Some(0.0));
        assert!(s[1].is_some_and(|x| x > 0.0));
        assert_eq!(s[2], None);
    }
}
