//! How a store keeps an item's payloads: plain, or, built `with_encryption`,
//! each sealed by an `EncryptedCodec` and bound to the item's namespace, key
//! and part, the same for every backend. A SQL store writes the value's JSON
//! text, the indexed text as is and the embedding's little-endian `f32`s (a
//! sealed text column holds the envelope in base64); the in-memory store
//! keeps records, their payloads moved into `SealedParts` when sealed.
//! Namespaces, keys and times stay plain: they are what backends index,
//! order and expire by.

// The SQL stores' half is unused in a build without them.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mongodb")),
    allow(dead_code)
)]

use serde_json::Value;

use super::plan::Record;
#[cfg(feature = "encryption")]
use super::plan::SealedParts;
use super::types::Item;
#[cfg(feature = "encryption")]
use crate::codec::{EncryptedCodec, ItemContext, ItemPart};
use crate::error::{Error, Result};
use crate::store::embed::{from_bytes, to_bytes};

/// How a store encodes and decodes an item's payloads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sealing {
    /// Seals every payload when set.
    #[cfg(feature = "encryption")]
    codec: Option<EncryptedCodec>,
}

/// The part of an item a payload is.
#[derive(Debug, Clone, Copy)]
enum Part {
    Value,
    IndexText,
    Embedding,
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
        Ok(self
            .seal_text(namespace, key, Part::Value, json.as_bytes())?
            .unwrap_or(json))
    }

    /// The value stored as `text`.
    pub(crate) fn value_of(&self, namespace: &str, key: &str, text: String) -> Result<Value> {
        let what = || format!("stored value of `{namespace}`/`{key}`");
        if let Some(json) = self.open_text(namespace, key, Part::Value, &text)? {
            return serde_json::from_slice(&json).map_err(|e| Error::decode(what(), e));
        }
        serde_json::from_str(&text).map_err(|e| {
            if text.starts_with(SEALED_TEXT_START) {
                sealed_item(namespace, key)
            } else {
                Error::decode(what(), e)
            }
        })
    }

    /// `record` as the in-memory store keeps it: as it is, or with its
    /// payloads sealed into its `SealedParts`.
    pub(crate) fn keep(&self, record: Record) -> Result<Record> {
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            return seal_record(codec, record);
        }
        Ok(record)
    }

    /// The record the in-memory store kept as `kept`, its payloads opened.
    pub(crate) fn open_kept(&self, kept: &Record) -> Result<Record> {
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            return open_record(codec, kept);
        }
        match kept.sealed {
            Some(_) => Err(sealed_item(&kept.namespace, &kept.key)),
            None => Ok(kept.clone()),
        }
    }

    /// The item the in-memory store kept as `kept`, with `score`.
    pub(crate) fn item_of(&self, kept: &Record, score: Option<f64>) -> Result<Item> {
        if kept.sealed.is_none() && !self.seals() {
            // Plain: no copy of the indexed text and embedding.
            return Ok(kept.to_item(score));
        }
        Ok(self.open_kept(kept)?.to_item(score))
    }

    /// Whether this store seals payloads.
    pub(crate) fn seals(&self) -> bool {
        #[cfg(feature = "encryption")]
        if self.codec.is_some() {
            return true;
        }
        false
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
        let sealed = self.seal_text(namespace, key, Part::IndexText, text.as_bytes())?;
        Ok(Some(sealed.unwrap_or_else(|| text.to_owned())))
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
        match self.open_text(namespace, key, Part::IndexText, &stored)? {
            Some(plain) => String::from_utf8(plain)
                .map(Some)
                .map_err(|e| Error::decode(format!("indexed text of `{namespace}`/`{key}`"), e)),
            None => Ok(Some(stored)),
        }
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
        let sealed = self.seal(namespace, key, Part::Embedding, &bytes)?;
        Ok(Some(sealed.unwrap_or(bytes)))
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
        let plain = self.open(namespace, key, Part::Embedding, &stored)?;
        from_bytes(plain.as_deref().unwrap_or(&stored)).map(Some)
    }

    /// `plain` sealed as `part` of the item; `None` when this store does not
    /// encrypt.
    fn seal(
        &self,
        namespace: &str,
        key: &str,
        part: Part,
        plain: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = context(namespace, key, part);
            return codec.seal_item(plain.to_vec(), &ctx).map(Some);
        }
        let _ = (namespace, key, part, plain);
        Ok(None)
    }

    /// What [`seal`](Self::seal) sealed as `stored`; `None` when this store
    /// does not encrypt.
    fn open(
        &self,
        namespace: &str,
        key: &str,
        part: Part,
        stored: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "encryption")]
        if let Some(codec) = &self.codec {
            let ctx = context(namespace, key, part);
            return codec.open_item(stored, &ctx).map(Some);
        }
        let _ = (namespace, key, part, stored);
        Ok(None)
    }

    /// [`seal`](Self::seal) for a text column: the envelope in base64.
    fn seal_text(
        &self,
        namespace: &str,
        key: &str,
        part: Part,
        plain: &[u8],
    ) -> Result<Option<String>> {
        #[cfg(feature = "encryption")]
        if let Some(sealed) = self.seal(namespace, key, part, plain)? {
            use base64::Engine;
            return Ok(Some(
                base64::engine::general_purpose::STANDARD.encode(sealed),
            ));
        }
        let _ = (namespace, key, part, plain);
        Ok(None)
    }

    /// [`open`](Self::open) for a text column. Text that is not base64 was
    /// never sealed.
    fn open_text(
        &self,
        namespace: &str,
        key: &str,
        part: Part,
        text: &str,
    ) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "encryption")]
        if self.codec.is_some() {
            use base64::Engine;
            let Ok(sealed) = base64::engine::general_purpose::STANDARD.decode(text) else {
                return Err(Error::Decrypt {
                    what: context(namespace, key, part).describe(),
                    reason: "the stored payload is not encrypted, but encryption is required"
                        .into(),
                });
            };
            return self.open(namespace, key, part, &sealed);
        }
        let _ = (namespace, key, part, text);
        Ok(None)
    }
}

/// What a store without encryption says of a sealed item.
fn sealed_item(namespace: &str, key: &str) -> Error {
    Error::Decrypt {
        what: format!("stored value of `{namespace}`/`{key}`"),
        reason: "it is encrypted: read it through a store built `with_encryption` and a key that sealed it".into(),
    }
}

/// `record` with its payloads sealed with `codec`.
#[cfg(feature = "encryption")]
fn seal_record(codec: &EncryptedCodec, mut record: Record) -> Result<Record> {
    let value = std::mem::take(&mut record.value);
    let index_text = record.index_text.take();
    let embedding = record.embedding.take();
    let (ns, key) = (record.namespace.as_str(), record.key.as_str());
    let seal = |part, plain: Vec<u8>| codec.seal_item(plain, &context(ns, key, part));
    let json = serde_json::to_vec(&value).map_err(|e| Error::encode("store value", e))?;
    let parts = SealedParts {
        value: seal(Part::Value, json)?,
        index_text: index_text
            .map(|t| seal(Part::IndexText, t.into_bytes()))
            .transpose()?,
        embedding: embedding
            .map(|e| seal(Part::Embedding, to_bytes(&e)))
            .transpose()?,
    };
    record.sealed = Some(Box::new(parts));
    Ok(record)
}

/// The record `codec` sealed as `kept`, opened.
#[cfg(feature = "encryption")]
fn open_record(codec: &EncryptedCodec, kept: &Record) -> Result<Record> {
    let (ns, key) = (kept.namespace.as_str(), kept.key.as_str());
    let Some(parts) = &kept.sealed else {
        return Err(Error::Decrypt {
            what: context(ns, key, Part::Value).describe(),
            reason: "the stored payload is not encrypted, but encryption is required".into(),
        });
    };
    let open = |part, sealed: &[u8]| codec.open_item(sealed, &context(ns, key, part));
    let json = open(Part::Value, &parts.value)?;
    let value = serde_json::from_slice(&json)
        .map_err(|e| Error::decode(format!("stored value of `{ns}`/`{key}`"), e))?;
    let index_text = match &parts.index_text {
        Some(sealed) => Some(
            String::from_utf8(open(Part::IndexText, sealed)?)
                .map_err(|e| Error::decode(format!("indexed text of `{ns}`/`{key}`"), e))?,
        ),
        None => None,
    };
    let embedding = match &parts.embedding {
        Some(sealed) => Some(from_bytes(&open(Part::Embedding, sealed)?)?),
        None => None,
    };
    Ok(Record {
        namespace: kept.namespace.clone(),
        key: kept.key.clone(),
        value,
        index_text,
        embedding,
        created_at: kept.created_at,
        updated_at: kept.updated_at,
        expires_at: kept.expires_at,
        ttl: kept.ttl,
        sealed: None,
    })
}

/// The codec's context of `part` of the item `key` in `namespace`.
#[cfg(feature = "encryption")]
fn context<'a>(namespace: &'a str, key: &'a str, part: Part) -> ItemContext<'a> {
    let part = match part {
        Part::Value => ItemPart::Value,
        Part::IndexText => ItemPart::IndexText,
        Part::Embedding => ItemPart::Embedding,
    };
    ItemContext {
        namespace,
        key,
        part,
    }
}
