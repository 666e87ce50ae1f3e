//! SQLite listings and lineages packed into one row.
//!
//! sqlx runs SQLite on a worker thread and hands each result row to the
//! caller separately: one channel send, one copy of every column value and,
//! whenever the caller is waiting, one wake-up of its thread. That costs a
//! few microseconds a row, more than SQLite takes to find the row. A history
//! page of 20 checkpoints and their pending writes is about 40 rows, so the
//! SQLite saver has SQLite concatenate them into one blob of frames instead,
//! which [`unpack`] reads back. A lineage read by commit-order range (a cold
//! read of a delta channel fetches up to 32 records) comes back the same way,
//! checkpoint frames only, read by [`checkpoints`] without decoding them.
//!
//! A frame is a kind byte, `0` for a checkpoint and `1` for a pending write,
//! then its fields in a fixed order. Text and bytes are `<byte length>:`
//! followed by the bytes, an integer is `<decimal>:`, a NULL is `-`.
//!
//! - checkpoint: thread id, namespace, checkpoint id, parent id (or NULL),
//!   metadata, commit order, payload;
//! - write: thread id, namespace, checkpoint id, task id, index, channel,
//!   task path, value.
//!
//! The frames arrive in no particular order; [`TupleAssembler`] orders them
//! (a lineage is put in order by following parent links).
//! A listing or lineage longer than SQLite's string limit (`SQLITE_MAX_LENGTH`, 1e9
//! bytes by default) fails with `SQLITE_TOOBIG` before any row is returned;
//! the saver then reads it row by row ([`Queries::tuples`](super::Queries::tuples),
//! [`Queries::lineage_ranges`](super::Queries::lineage_ranges)),
//! as it reads every listing of a database whose text is UTF-16
//! ([`Verified::packed_listing`](super::Verified::packed_listing)).

use super::{Settings, TupleAssembler};
use crate::error::{Error, Result};

/// Whether SQLite listings and lineages come back packed: `false` reads
/// them row by row, as PostgreSQL does (for measuring what packing wins).
#[cfg(feature = "sqlite")]
pub(crate) const ENABLED: bool = true;

/// The SQLite listing of the checkpoints selected by `keys` (common table
/// expressions starting with `WITH` that define `c` with the key columns,
/// [`Queries::keys_ctes`](super::Queries::keys_ctes)) and of their writes,
/// as one row with one column, `packed`: their frames. `packed` is NULL when
/// nothing matches.
pub(crate) fn sqlite_listing(cps: &str, writes: &str, keys: &str) -> String {
    let checkpoint = checkpoint_frame("x");
    let write = [
        "'1'".to_owned(),
        field("w.thread_id"),
        field("w.checkpoint_ns"),
        field("w.checkpoint_id"),
        field("w.task_id"),
        "w.idx, ':'".to_owned(),
        field("w.channel"),
        field("w.task_path"),
        field("w.value"),
    ]
    .join(", ");
    format!(
        "{keys},
         f (frame) AS (
            SELECT {checkpoint}
              FROM c JOIN {cps} AS x
                ON x.thread_id = c.thread_id AND x.checkpoint_ns = c.checkpoint_ns
               AND x.checkpoint_id = c.checkpoint_id
            UNION ALL
            SELECT concat({write})
              FROM c CROSS JOIN {writes} AS w
                ON w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
               AND w.checkpoint_id = c.checkpoint_id)
         SELECT CAST(group_concat(frame, '') AS BLOB) AS packed FROM f"
    )
}

/// The SQL of one text or bytes field of a frame: its byte length, `:`, its
/// bytes.
fn field(col: &str) -> String {
    format!("length(CAST({col} AS BLOB)), ':', {col}")
}

/// The SQL of one checkpoint frame (`concat(...)`) of the checkpoint row
/// `x` (a table alias).
fn checkpoint_frame(x: &str) -> String {
    let field = |col: &str| field(&format!("{x}.{col}"));
    let fields = [
        "'0'".to_owned(),
        field("thread_id"),
        field("checkpoint_ns"),
        field("checkpoint_id"),
        format!(
            "COALESCE(length(CAST({x}.parent_checkpoint_id AS BLOB)) || ':' || {x}.parent_checkpoint_id, '-')"
        ),
        field("metadata"),
        format!("{x}.commit_order, ':'"),
        field("checkpoint"),
    ];
    format!("concat({})", fields.join(", "))
}

/// The SQLite lineage listing of [`Queries::lineage_ranges`](super::Queries::lineage_ranges)
/// (`ranges` commit-order ranges, parameters `$4k+1..=$4k+4` each: thread,
/// namespace, end, start) as one row with one column, `packed`: the
/// checkpoint frames of the records in the ranges, without pending writes.
/// `packed` is NULL when nothing matches.
pub(crate) fn sqlite_lineage(cps: &str, ranges: usize) -> String {
    let frame = checkpoint_frame("x");
    let members: Vec<String> = (0..ranges)
        .map(|k| {
            let p = 4 * k;
            format!(
                "SELECT {frame} FROM {cps} AS x WHERE x.thread_id = ${} AND x.checkpoint_ns = ${} AND x.commit_order < ${} AND x.commit_order >= ${}",
                p + 1,
                p + 2,
                p + 3,
                p + 4
            )
        })
        .collect();
    format!(
        "WITH f (frame) AS ({}) SELECT CAST(group_concat(frame, '') AS BLOB) AS packed FROM f",
        members.join(" UNION ALL ")
    )
}

/// A checkpoint row read from a listing, its payload not yet decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawCheckpoint<'a> {
    pub(crate) thread_id: &'a str,
    pub(crate) checkpoint_ns: &'a str,
    pub(crate) checkpoint_id: &'a str,
    pub(crate) parent_id: Option<&'a str>,
    pub(crate) metadata: &'a str,
    pub(crate) commit_order: i64,
    pub(crate) payload: &'a [u8],
}

/// The checkpoint frames of one packed lineage ([`sqlite_lineage`]), in the
/// order they came; a write frame there is a decode error.
pub(crate) fn checkpoints(packed: &[u8]) -> Result<Vec<RawCheckpoint<'_>>> {
    let mut r = Frames {
        buf: packed,
        pos: 0,
    };
    let mut out = Vec::new();
    while let Some(kind) = r.kind()? {
        if kind != b'0' {
            return Err(r.corrupt("a pending write in a lineage"));
        }
        out.push(r.checkpoint()?);
    }
    Ok(out)
}

/// Decodes the frames of one `packed` value into `out`.
pub(crate) fn unpack(settings: &Settings, packed: &[u8], out: &mut TupleAssembler) -> Result<()> {
    let mut r = Frames {
        buf: packed,
        pos: 0,
    };
    while let Some(kind) = r.kind()? {
        if kind == b'0' {
            out.push_tuple(settings.decode_raw(&r.checkpoint()?)?);
        } else {
            let thread = r.text()?;
            let ns = r.text()?;
            let id = r.text()?;
            let task_id = r.text()?;
            let idx = r.number()?;
            let channel = r.text()?;
            let task_path = r.text()?;
            let value = r.bytes()?;
            let w = settings.decode_write(
                thread,
                ns,
                id,
                task_id.to_owned(),
                idx,
                channel.to_owned(),
                task_path.to_owned(),
                value,
            )?;
            out.push_write((thread.to_owned(), ns.to_owned(), id.to_owned()), w);
        }
    }
    Ok(())
}

/// A reader over the frames of one packed listing.
struct Frames<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Frames<'a> {
    fn corrupt(&self, reason: &str) -> Error {
        Error::decode(
            "SQLite listing",
            format!("{reason} at byte {} of {}", self.pos, self.buf.len()),
        )
    }

    /// The next frame's kind, `None` at the end.
    fn kind(&mut self) -> Result<Option<u8>> {
        match self.buf.get(self.pos) {
            None => Ok(None),
            Some(&k @ (b'0' | b'1')) => {
                self.pos += 1;
                Ok(Some(k))
            }
            Some(_) => Err(self.corrupt("unknown frame kind")),
        }
    }

    /// The decimal number before the next `:`, and the `:`.
    fn number(&mut self) -> Result<i64> {
        let rest = &self.buf[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| self.corrupt("missing `:`"))?;
        let n = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| self.corrupt("bad number"))?;
        self.pos += end + 1;
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let len = usize::try_from(self.number()?).map_err(|_| self.corrupt("negative length"))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.corrupt("field runs past the end"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn text(&mut self) -> Result<&'a str> {
        let start = self.pos;
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes).map_err(|_| {
            self.pos = start;
            self.corrupt("text that is not UTF-8")
        })
    }

    /// The fields of a checkpoint frame, after its kind.
    fn checkpoint(&mut self) -> Result<RawCheckpoint<'a>> {
        Ok(RawCheckpoint {
            thread_id: self.text()?,
            checkpoint_ns: self.text()?,
            checkpoint_id: self.text()?,
            parent_id: self.nullable_text()?,
            metadata: self.text()?,
            commit_order: self.number()?,
            payload: self.bytes()?,
        })
    }

    fn nullable_text(&mut self) -> Result<Option<&'a str>> {
        if self.buf.get(self.pos) == Some(&b'-') {
            self.pos += 1;
            return Ok(None);
        }
        self.text().map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::{Frames, checkpoints, unpack};
    use crate::checkpoint::sql::{Settings, TupleAssembler};
    use crate::error::Error;
    use crate::migrate::Dialect;

    fn field(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(format!("{}:", bytes.len()).as_bytes());
        out.extend_from_slice(bytes);
    }

    fn checkpoint_frame(thread: &str, id: &str, parent: Option<&str>, order: i64) -> Vec<u8> {
        let mut f = b"0".to_vec();
        field(&mut f, thread.as_bytes());
        field(&mut f, b"");
        field(&mut f, id.as_bytes());
        match parent {
            Some(p) => field(&mut f, p.as_bytes()),
            None => f.push(b'-'),
        }
        field(&mut f, br#"{"source":"loop","step":1,"parents":{}}"#);
        f.extend_from_slice(format!("{order}:").as_bytes());
        let payload = format!(
            r#"{{"v":2,"id":"{id}","ts":"2026-11-30T00:00:00+00:00","channel_values":{{}},"channel_versions":{{}},"versions_seen":{{}}}}"#
        );
        field(&mut f, payload.as_bytes());
        f
    }

    fn write_frame(thread: &str, id: &str, task: &str, idx: i64, value: &[u8]) -> Vec<u8> {
        let mut f = b"1".to_vec();
        field(&mut f, thread.as_bytes());
        field(&mut f, b"");
        field(&mut f, id.as_bytes());
        field(&mut f, task.as_bytes());
        f.extend_from_slice(format!("{idx}:").as_bytes());
        field(&mut f, b"messages");
        field(&mut f, b"");
        field(&mut f, value);
        f
    }

    fn unpacked(packed: &[u8]) -> crate::Result<Vec<crate::checkpoint::CheckpointTuple>> {
        let settings = Settings::new(Dialect::Sqlite, "");
        let mut out = TupleAssembler::default();
        unpack(&settings, packed, &mut out)?;
        Ok(out.finish())
    }

    #[test]
    fn frames_in_any_order_become_ordered_tuples_with_their_writes() {
        // A thread id with a NUL, a colon and a multi-byte character: fields
        // are read by byte length, never by a separator.
        let thread = "t\0:é";
        let mut packed = write_frame(thread, "c2", "task", 1, b"[\"b\"]");
        packed.extend(checkpoint_frame(thread, "c1", None, 1));
        packed.extend(write_frame(thread, "c2", "task", 0, b"[\"a\"]"));
        packed.extend(checkpoint_frame(thread, "c2", Some("c1"), 2));
        let tuples = unpacked(&packed).unwrap();
        assert_eq!(tuples.len(), 2);
        assert_eq!(tuples[0].config.thread_id, thread);
        assert_eq!(tuples[0].config.checkpoint_id.as_deref(), Some("c2"));
        assert_eq!(tuples[0].commit_order, 2);
        assert_eq!(
            tuples[0]
                .parent_config
                .as_ref()
                .and_then(|p| p.checkpoint_id.as_deref()),
            Some("c1")
        );
        let writes: Vec<_> = tuples[0]
            .pending_writes
            .iter()
            .map(|w| (w.idx, w.value.clone()))
            .collect();
        assert_eq!(
            writes,
            vec![(0, serde_json::json!(["a"])), (1, serde_json::json!(["b"]))]
        );
        assert!(tuples[1].parent_config.is_none());
        assert!(tuples[1].pending_writes.is_empty());
        assert!(unpacked(b"").unwrap().is_empty());
    }

    #[test]
    fn a_damaged_listing_is_a_decode_error_never_a_panic() {
        let good = checkpoint_frame("t", "c1", None, 1);
        let mut cases: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        cases.retain(|c| !c.is_empty());
        let mut kind = good.clone();
        kind[0] = b'7';
        let mut long = good.clone();
        long[1] = b'9';
        let mut not_utf8 = checkpoint_frame("t", "c1", None, 1);
        not_utf8[3] = 0xff;
        cases.extend([
            kind,
            long,
            not_utf8,
            b"0-1:t".to_vec(),
            b"099999999999999999999:".to_vec(),
        ]);
        for case in cases {
            match unpacked(&case) {
                Err(Error::Decode { .. }) => {}
                other => panic!(
                    "{:?}: expected a decode error, got {other:?}",
                    String::from_utf8_lossy(&case)
                ),
            }
        }
    }

    #[test]
    fn a_packed_lineage_reads_checkpoint_frames_and_refuses_writes() {
        let mut packed = checkpoint_frame("t", "c2", Some("c1"), 2);
        packed.extend(checkpoint_frame("t", "c1", None, 1));
        let raws = checkpoints(&packed).unwrap();
        let got: Vec<_> = raws
            .iter()
            .map(|r| (r.checkpoint_id, r.parent_id, r.commit_order))
            .collect();
        assert_eq!(got, [("c2", Some("c1"), 2), ("c1", None, 1)]);
        assert!(raws[1].payload.starts_with(br#"{"v":2,"id":"c1""#));
        assert!(checkpoints(b"").unwrap().is_empty());
        packed.extend(write_frame("t", "c1", "task", 0, b"1"));
        assert!(matches!(checkpoints(&packed), Err(Error::Decode { .. })));
        let cut = &packed[..packed.len() / 2];
        assert!(matches!(checkpoints(cut), Err(Error::Decode { .. })));
    }

    #[test]
    fn a_null_is_only_read_where_a_field_may_be_null() {
        let mut r = Frames { buf: b"-", pos: 0 };
        assert_eq!(r.nullable_text().unwrap(), None);
        let mut r = Frames { buf: b"-", pos: 0 };
        assert!(matches!(r.text(), Err(Error::Decode { .. })));
    }
}
