//! Checkpoint records through any [`Codec`]: serde's JSON of the record,
//! then the codec's bytes.

use std::borrow::Cow;

use super::Checkpoint;
use crate::codec::{Codec, RecordContext, from_json, to_json};
use crate::error::Result;

/// Encodes and decodes checkpoint records with a [`Codec`]; implemented for
/// every codec.
///
/// ```
/// use weaver::checkpoint::{Checkpoint, CheckpointCodec};
/// use weaver::codec::{JsonCodec, RecordContext};
///
/// let cp = Checkpoint::empty();
/// let ctx = RecordContext::checkpoint("t1", "", &cp.id);
/// let bytes = JsonCodec.encode_checkpoint(&cp, &ctx).unwrap();
/// assert_eq!(JsonCodec.decode_checkpoint(&bytes, &ctx).unwrap(), cp);
/// ```
pub trait CheckpointCodec: Codec {
    /// Encodes a checkpoint record.
    fn encode_checkpoint(
        &self,
        checkpoint: &Checkpoint,
        ctx: &RecordContext<'_>,
    ) -> Result<Vec<u8>> {
        self.encode(to_json(checkpoint, ctx)?, ctx)
    }

    /// Decodes a checkpoint record.
    fn decode_checkpoint(&self, bytes: &[u8], ctx: &RecordContext<'_>) -> Result<Checkpoint> {
        from_json(&self.decode(Cow::Borrowed(bytes), ctx)?, ctx)
    }
}

impl<C: Codec + ?Sized> CheckpointCodec for C {}

#[cfg(all(test, feature = "encryption"))]
mod tests {
    use aes_gcm::Aes256Gcm;
    use aes_gcm::Nonce;
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    use serde_json::json;

    use super::*;
    use crate::codec::{EncryptedCodec, EncryptionKey};
    use crate::error::Error;

    /// The nonce length of an envelope.
    const NONCE_LEN: usize = 12;

    fn codec() -> EncryptedCodec {
        EncryptedCodec::json([EncryptionKey::new("k1", [7; 32]).unwrap()]).unwrap()
    }

    /// An envelope of the first format, built by hand as weaver wrote them
    /// before parents and channels were bound: `WVE1 | 2 | "k1" | nonce |
    /// ciphertext+tag`, the associated data being the row's identity and the
    /// key id.
    fn first_format(plain: &[u8], ctx: &RecordContext<'_>) -> Vec<u8> {
        let cipher = Aes256Gcm::new_from_slice(&[7; 32]).unwrap();
        let nonce = Nonce::try_from(&[9u8; NONCE_LEN][..]).unwrap();
        let mut aad = ctx.identity_data();
        aad.extend_from_slice(b"k1");
        let msg = Payload {
            msg: plain,
            aad: &aad,
        };
        let sealed = cipher.encrypt(&nonce, msg).unwrap();
        [b"WVE1\x02k1".as_slice(), nonce.as_slice(), &sealed].concat()
    }

    #[test]
    fn the_parent_channel_and_task_path_are_bound() {
        let c = codec();
        let cp = Checkpoint::empty();
        let row = RecordContext::checkpoint("t", "", &cp.id);
        let sealed = c.encode_checkpoint(&cp, &row.parent(Some("p"))).unwrap();
        assert!(sealed.starts_with(b"WVE2"));
        assert_eq!(
            c.decode_checkpoint(&sealed, &row.parent(Some("p")))
                .unwrap(),
            cp
        );
        for other in [None, Some("q"), Some("")] {
            let r = c.decode_checkpoint(&sealed, &row.parent(other));
            assert!(matches!(r, Err(Error::Decrypt { .. })), "{other:?}");
        }
        let write = row.write("task", 0);
        let v = json!(["x"]);
        let sealed = c.encode_value(&v, &write.channel("a", "p0")).unwrap();
        assert_eq!(
            c.decode_value(&sealed, &write.channel("a", "p0")).unwrap(),
            v
        );
        // A write's context ignores the checkpoint's parent.
        let with_parent = row.parent(Some("p")).write("task", 0).channel("a", "p0");
        assert_eq!(c.decode_value(&sealed, &with_parent).unwrap(), v);
        for other in [
            write.channel("b", "p0"),
            write.channel("a", "p1"),
            write.channel("ap", "0"),
            write,
        ] {
            let r = c.decode_value(&sealed, &other);
            assert!(matches!(r, Err(Error::Decrypt { .. })), "{other:?}");
        }
    }

    #[test]
    fn first_format_envelopes_still_decrypt_bound_to_the_row() {
        let c = codec();
        let cp = Checkpoint::empty();
        let row = RecordContext::checkpoint("t", "", &cp.id);
        let plain = serde_json::to_vec(&cp).unwrap();
        let old = first_format(&plain, &row);
        // Read wherever its parent now points: the first format did not bind it.
        for parent in [None, Some("p")] {
            assert_eq!(c.decode_checkpoint(&old, &row.parent(parent)).unwrap(), cp);
        }
        let elsewhere = RecordContext::checkpoint("u", "", &cp.id);
        let r = c.decode_checkpoint(&old, &elsewhere);
        assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
        // The same bytes under the current magic are refused: the formats
        // do not stand in for each other.
        let relabelled = [b"WVE2".as_slice(), &old[4..]].concat();
        let r = c.decode_checkpoint(&relabelled, &row);
        assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
        let write = row.write("task", 3);
        let old = first_format(b"[1]", &write);
        let any_channel = write.channel("whatever", "p");
        assert_eq!(c.decode_value(&old, &any_channel).unwrap(), json!([1]));
    }

    #[test]
    fn a_record_beside_metadata_is_bound_to_it() {
        use crate::codec::canonical_json;
        let c = codec();
        let cp = Checkpoint::empty();
        let row = RecordContext::checkpoint("t", "", &cp.id).parent(Some("p"));
        let stored = canonical_json(&json!({"source": "loop", "step": 2, "parents": {}}));
        let sealed = c.encode_checkpoint(&cp, &row.metadata(&stored)).unwrap();
        assert!(sealed.starts_with(b"WVE3"));
        assert_eq!(
            c.decode_checkpoint(&sealed, &row.metadata(&stored))
                .unwrap(),
            cp
        );
        let changed = canonical_json(&json!({"source": "loop", "step": 3, "parents": {}}));
        for other in [
            row.metadata(&changed),
            row,
            row.parent(None).metadata(&stored),
        ] {
            let r = c.decode_checkpoint(&sealed, &other);
            assert!(matches!(r, Err(Error::Decrypt { .. })), "{other:?}");
        }
        // Relabelled as the format before, the envelope is refused.
        let relabelled = [b"WVE2".as_slice(), &sealed[4..]].concat();
        let r = c.decode_checkpoint(&relabelled, &row.metadata(&stored));
        assert!(matches!(r, Err(Error::Decrypt { .. })), "{r:?}");
        // A pending write never binds metadata.
        let write = row.metadata(&stored).write("task", 0).channel("a", "p0");
        assert_eq!(write.metadata, None);
        assert!(
            c.encode_value(&json!(1), &write)
                .unwrap()
                .starts_with(b"WVE2")
        );
    }

    #[test]
    fn unlisted_metadata_keys_are_sealed_to_their_checkpoint() {
        use crate::codec::SEALED_METADATA_KEY;
        let c = codec().with_plaintext_metadata(["tenant"]).unwrap();
        let row = RecordContext::checkpoint("t", "ns", "c1");
        let meta = json!({"source": "input", "step": -1, "parents": {"": "p"},
                          "tenant": "acme", "user_email": "a@b.c", "n": [1, 2]});
        let serde_json::Value::Object(meta) = meta else {
            unreachable!()
        };
        let stored = c.seal_metadata(meta.clone(), &row).unwrap();
        let clear: Vec<&str> = stored.keys().map(String::as_str).collect();
        assert_eq!(
            clear,
            ["__weaver_sealed__", "parents", "source", "step", "tenant"]
        );
        assert!(!serde_json::to_string(&stored).unwrap().contains("a@b.c"));
        let mut read = stored.clone();
        c.open_metadata(&mut read, &row).unwrap();
        assert_eq!(read, meta);
        // Sealed for another checkpoint, or damaged: a decrypt error.
        for (ctx, value) in [
            (
                RecordContext::checkpoint("t", "ns", "c2"),
                stored[SEALED_METADATA_KEY].clone(),
            ),
            (
                RecordContext::checkpoint("u", "ns", "c1"),
                stored[SEALED_METADATA_KEY].clone(),
            ),
            (row, json!("not base64!")),
            (row, json!("V1ZNMQ==")),
            (row, json!(7)),
        ] {
            let mut read = stored.clone();
            read.insert(SEALED_METADATA_KEY.into(), value.clone());
            let r = c.open_metadata(&mut read, &ctx);
            assert!(matches!(r, Err(Error::Decrypt { .. })), "{value} {r:?}");
        }
        // Nothing to seal: nothing added.
        let serde_json::Value::Object(engine) =
            json!({"source": "loop", "step": 1, "parents": {}, "tenant": "x"})
        else {
            unreachable!()
        };
        assert_eq!(c.seal_metadata(engine.clone(), &row).unwrap(), engine);
        for bad in ["a b", "", SEALED_METADATA_KEY] {
            assert!(matches!(
                codec().with_plaintext_metadata([bad]),
                Err(Error::InvalidArgument { .. })
            ));
        }
        let filter = |k: &str| {
            let mut m = serde_json::Map::new();
            m.insert(k.into(), json!(1));
            c.check_metadata_filter(&m)
        };
        for ok in ["source", "step", "parents", "tenant"] {
            filter(ok).unwrap();
        }
        match filter("user_email") {
            Err(Error::InvalidArgument { reason }) => {
                assert!(reason.contains("`user_email`"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
