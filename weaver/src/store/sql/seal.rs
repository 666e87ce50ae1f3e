//! How a SQL store writes an item's payloads: plain (the value's JSON text,
//! the indexed text as is, the embedding's little-endian `f32`s), or, with
//! [`with_encryption`](super::SqliteStore::with_encryption), each sealed by
//! an `EncryptedCodec` and bound to the
//! item's namespace, key and part (the text columns hold the envelope in
//! base64). Namespaces, keys and times stay plain: they are what the
//! database indexes, orders and expires by.

use serde_json::Value;

#[cfg(feature = "encryption")]
use crate::codec::{EncryptedCodec, ItemContext, ItemPart};
use crate::error::{Error, Result};
use crate::store::embed::{from_bytes, to_bytes};

/// How a SQL store encodes and decodes an item's payloads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sealing {
    /// Seals every payload when set.
    #[cfg(feature = "encryption")]
    codec: Option<EncryptedCodec>,
}

/// The base64 of a sealed envelope starts so (`WVS` in base64): a plain
/// store that meets one says the item is encrypted.
const SEALED_TEXT_START: &str = "V1ZT";

impl Sealing {
    /// Seals with `codec`.
    #[cfg(feature = "encryption")]
    pub(crate) fn encrypted(codec: EncryptedCodec) -> Self {
        Sealing { codec: Some(codec) }
    }

    /// The value's stored text.
    pub(crate) fn value_text(&self, namespace: &str, key: &str, value: &Value) -> Result<String> {
        let json = serde_json::to_string(value).map_err(|e| Error::encode("store value", e))?;
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::Value,
            };
            return Ok(text_of(codec.seal_item(json.into_bytes(), &ctx)?));
        }
        let _ = (namespace, key);
        Ok(json)
    }

    /// The value stored as `text`.
    pub(crate) fn value_of(&self, namespace: &str, key: &str, text: String) -> Result<Value> {
        let what = || format!("stored value of `{namespace}`/`{key}`");
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::Value,
            };
            let json = codec.open_item(&bytes_of(&text, &ctx)?, &ctx)?;
            return serde_json::from_slice(&json).map_err(|e| Error::decode(what(), e));
        }
        serde_json::from_str(&text).map_err(|e| {
            if text.starts_with(SEALED_TEXT_START) {
                sealed_in_plain_store(what())
            } else {
                Error::decode(what(), e)
            }
        })
    }

    /// The indexed text's stored form.
    pub(crate) fn index_text(
        &self,
        namespace: &str,
        key: &str,
        text: Option<&str>,
    ) -> Result<Option<String>> {
        let Some(text) = text else {
            return Ok(None);
        };
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::IndexText,
            };
            return Ok(Some(text_of(
                codec.seal_item(text.as_bytes().to_vec(), &ctx)?,
            )));
        }
        let _ = (namespace, key);
        Ok(Some(text.to_owned()))
    }

    /// The indexed text stored as `stored`.
    pub(crate) fn index_text_of(
        &self,
        namespace: &str,
        key: &str,
        stored: Option<String>,
    ) -> Result<Option<String>> {
        let Some(stored) = stored else {
            return Ok(None);
        };
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::IndexText,
            };
            let plain = codec.open_item(&bytes_of(&stored, &ctx)?, &ctx)?;
            return String::from_utf8(plain)
                .map(Some)
                .map_err(|e| Error::decode(format!("indexed text of `{namespace}`/`{key}`"), e));
        }
        let _ = (namespace, key);
        Ok(Some(stored))
    }

    /// The embedding's stored bytes.
    pub(crate) fn embedding(
        &self,
        namespace: &str,
        key: &str,
        embedding: Option<&[f32]>,
    ) -> Result<Option<Vec<u8>>> {
        let Some(embedding) = embedding else {
            return Ok(None);
        };
        let bytes = to_bytes(embedding);
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::Embedding,
            };
            return codec.seal_item(bytes, &ctx).map(Some);
        }
        let _ = (namespace, key);
        Ok(Some(bytes))
    }

    /// The embedding stored as `stored`.
    pub(crate) fn embedding_of(
        &self,
        namespace: &str,
        key: &str,
        stored: Option<Vec<u8>>,
    ) -> Result<Option<Vec<f32>>> {
        let Some(stored) = stored else {
            return Ok(None);
        };
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = ItemContext {
                namespace,
                key,
                part: ItemPart::Embedding,
            };
            return from_bytes(&codec.open_item(&stored, &ctx)?).map(Some);
        }
        let _ = (namespace, key);
        from_bytes(&stored).map(Some)
    }
}

/// The text column's form of a sealed envelope.
#[cfg(feature = "encryption")]
fn text_of(sealed: Vec<u8>) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(sealed)
}

/// The envelope a text column holds; text that is not base64 was never
/// sealed.
#[cfg(feature = "encryption")]
fn bytes_of(text: &str, ctx: &ItemContext<'_>) -> Result<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| Error::Decrypt {
            what: ctx.describe(),
            reason: "the stored payload is not encrypted, but encryption is required".into(),
        })
}

/// A plain store met a sealed item.
fn sealed_in_plain_store(what: String) -> Error {
    Error::Decrypt {
        what,
        reason: "it is encrypted: read it through a store built `with_encryption` and a key that sealed it".into(),
    }
}
