//! [`Embedder`]: the pluggable embedding function behind ranked search.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{BoxError, Error, Result};

/// Turns text into vectors; items are ranked by the cosine similarity of
/// their vector to the query's.
///
/// Implement it for a model client, or wrap a function with [`embed_fn`].
#[async_trait]
pub trait Embedder: fmt::Debug + Send + Sync {
    /// One vector per text, in order. Vectors of one embedder should have
    /// one length; non-finite components are rejected by the store.
    async fn embed(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, BoxError>;
}

/// An [`Embedder`] from a function of one text.
///
/// ```
/// use weaver::store::{StoreConfig, embed_fn};
/// // A toy embedding: counts of a few letters.
/// let embedder = embed_fn(|text| {
///     ['a', 'e', 'i', 'o', 'u'].iter().map(|c| text.matches(*c).count() as f32).collect()
/// });
/// let config = StoreConfig::new().embedder(embedder);
/// ```
pub fn embed_fn<F>(f: F) -> Arc<dyn Embedder>
where
    F: Fn(&str) -> Vec<f32> + Send + Sync + 'static,
{
    Arc::new(FnEmbedder(f))
}

struct FnEmbedder<F>(F);

impl<F> fmt::Debug for FnEmbedder<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnEmbedder")
    }
}

#[async_trait]
impl<F> Embedder for FnEmbedder<F>
where
    F: Fn(&str) -> Vec<f32> + Send + Sync + 'static,
{
    async fn embed(&self, texts: &[String]) -> std::result::Result<Vec<Vec<f32>>, BoxError> {
        Ok(texts.iter().map(|t| (self.0)(t)).collect())
    }
}

/// Embeds `texts` and checks the answer's shape.
pub(crate) async fn embed_checked(
    embedder: &dyn Embedder,
    texts: &[String],
) -> Result<Vec<Vec<f32>>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let vectors = embedder
        .embed(texts)
        .await
        .map_err(|e| Error::storage("store embed", e))?;
    if vectors.len() != texts.len() {
        return Err(Error::storage(
            "store embed",
            format!(
                "embedder returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            ),
        ));
    }
    if vectors.iter().flatten().any(|x| !x.is_finite()) {
        return Err(Error::storage(
            "store embed",
            "embedder returned a non-finite component",
        ));
    }
    Ok(vectors)
}

/// Cosine similarity; 0 when a vector is zero or the lengths differ.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Vector bytes for SQL storage: little-endian `f32`s.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]
pub(crate) fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The inverse of [`to_bytes`].
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]
pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::decode(
            "stored embedding",
            format!("{} bytes is not a whole number of f32s", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
