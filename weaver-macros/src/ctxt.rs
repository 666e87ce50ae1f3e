//! The error collector: every problem found in one input, reported together.

use proc_macro2::TokenStream;
use quote::ToTokens;
use std::fmt::Display;

/// Collects `syn::Error`s spanned on the user's tokens, so one expansion can
/// report every problem at once.
#[derive(Default)]
pub(crate) struct Errors {
    list: Vec<syn::Error>,
}

impl Errors {
    /// An empty collector.
    pub(crate) fn new() -> Self {
        Errors::default()
    }

    /// Records an error spanned on `tokens`.
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.list.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub(crate) fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.list.push(syn::Error::new(span, message));
    }

    /// Records an existing error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.list.push(error);
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// All errors combined into one, if any.
    pub(crate) fn combined(self) -> Option<syn::Error> {
        let mut iter = self.list.into_iter();
        let mut first = iter.next()?;
        for e in iter {
            first.combine(e);
        }
        Some(first)
    }

    /// The `compile_error!` invocations for everything recorded (empty if none).
    pub(crate) fn into_compile_errors(self) -> TokenStream {
        self.combined()
            .map(|e| e.to_compile_error())
            .unwrap_or_default()
    }
}

/// The closest of `candidates` to `word` (edit distance at most 2), for
/// "did you mean" hints.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (distance(word, c), c))
        .filter(|(d, c)| *d <= 2 && *d < c.len().max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance counting a swap of two neighbours as one edit
/// (`egdes` is one edit from `edges`).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(closest("apend", ["append", "add", "merge"]), Some("append"));
        assert_eq!(closest("zzzzzz", ["append", "add", "merge"]), None);
        assert_eq!(closest("egdes", ["nodes", "edges"]), Some("edges"));
    }

    #[test]
    fn combines_all_errors() {
        let mut errors = Errors::new();
        assert!(errors.is_empty());
        errors.at(proc_macro2::Span::call_site(), "first");
        errors.at(proc_macro2::Span::call_site(), "second");
        let text = errors.into_compile_errors().to_string();
        assert!(text.contains("first") && text.contains("second"));
    }
}
