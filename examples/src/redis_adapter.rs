//! [`RedisAdapter`]: weaver's small storage contract on Redis.
//!
//! Each flow is two keys under the adapter's prefix: a sorted set
//! `<prefix><flow>:v` of its versions (scored by version) and a hash
//! `<prefix><flow>:d` of their JSON. No two flows share a key: the suffixes
//! `:v` and `:d` end differently. Every operation that reads or writes both
//! keys is one Lua script, so Redis runs it atomically: a save of a version
//! already stored changes nothing and is a version conflict (the first
//! rule), and a read never sees a version without its data. What comes
//! back is decoded from Redis's reply: always a copy (the second rule).

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};
use serde_json::Value;
use weaver::checkpoint::{Snapshot, SnapshotAdapter, check_flow_id};
use weaver::{Error, Result};

/// Saves a version unless it is stored: 1 when saved, 0 when taken.
const SAVE: &str = r#"
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[1])
return 1
"#;

/// The newest `ARGV[1]` versions (all when negative) with their data,
/// newest first, as a flat list version, data, version, data, ...
const NEWEST: &str = r#"
local n = tonumber(ARGV[1])
local stop = -1
if n >= 0 then stop = n - 1 end
local versions = redis.call('ZREVRANGE', KEYS[1], 0, stop)
local out = {}
for _, v in ipairs(versions) do
  table.insert(out, v)
  table.insert(out, redis.call('HGET', KEYS[2], v) or false)
end
return out
"#;

/// Deletes all but the newest `ARGV[1]` versions; returns how many went.
const PRUNE: &str = r#"
local keep = tonumber(ARGV[1])
local old = redis.call('ZREVRANGE', KEYS[1], keep, -1)
for _, v in ipairs(old) do
  redis.call('ZREM', KEYS[1], v)
  redis.call('HDEL', KEYS[2], v)
end
return #old
"#;

/// A [`SnapshotAdapter`] on one Redis database.
///
/// Cloning is cheap and shares the connection. Wrap it in an
/// [`AdapterSaver`](weaver::checkpoint::AdapterSaver) for a full saver.
///
/// ```no_run
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use weaver::checkpoint::{AdapterSaver, CheckpointRef, Saver};
/// use weaver_examples::redis_adapter::RedisAdapter;
///
/// let adapter = RedisAdapter::connect("redis://127.0.0.1:6379", "myapp:").await.unwrap();
/// let saver = AdapterSaver::new(adapter);
/// assert!(saver.get_tuple(&CheckpointRef::latest("t")).await.unwrap().is_none());
/// # });
/// ```
#[derive(Clone)]
pub struct RedisAdapter {
    conn: MultiplexedConnection,
    prefix: String,
    save: Script,
    newest: Script,
    prune: Script,
}

impl std::fmt::Debug for RedisAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisAdapter")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

fn storage(op: &'static str) -> impl FnOnce(redis::RedisError) -> Error {
    move |e| Error::storage(op, e)
}

impl RedisAdapter {
    /// Connects to the Redis at `url` (`redis://host:port/db`), keeping its
    /// keys under `prefix`. A server that cannot be reached is
    /// [`Error::Storage`], saying so.
    ///
    /// ```no_run
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use weaver_examples::redis_adapter::RedisAdapter;
    /// let adapter = RedisAdapter::connect("redis://127.0.0.1:6379", "myapp:").await.unwrap();
    /// assert_eq!(adapter.prefix(), "myapp:");
    /// # });
    /// ```
    pub async fn connect(url: &str, prefix: &str) -> Result<Self> {
        let client = redis::Client::open(url).map_err(storage("redis connect"))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| {
                Error::storage(
                    "redis connect",
                    format!("Redis is not reachable at {url}: {e}"),
                )
            })?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(storage("redis ping"))?;
        Ok(RedisAdapter {
            conn,
            prefix: prefix.to_owned(),
            save: Script::new(SAVE),
            newest: Script::new(NEWEST),
            prune: Script::new(PRUNE),
        })
    }

    /// The prefix of its keys.
    ///
    /// ```no_run
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # use weaver_examples::redis_adapter::RedisAdapter;
    /// let adapter = RedisAdapter::connect("redis://127.0.0.1:6379", "p:").await.unwrap();
    /// assert_eq!(adapter.prefix(), "p:");
    /// # });
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Deletes every key under its prefix (all its flows); returns how
    /// many keys went.
    ///
    /// ```no_run
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// # use weaver_examples::redis_adapter::RedisAdapter;
    /// let adapter = RedisAdapter::connect("redis://127.0.0.1:6379", "scratch:").await.unwrap();
    /// adapter.clear().await.unwrap();
    /// # });
    /// ```
    pub async fn clear(&self) -> Result<u64> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", glob_escape(&self.prefix));
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await
                .map_err(storage("redis clear"))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for chunk in keys.chunks(500) {
            let _: u64 = conn.del(chunk).await.map_err(storage("redis clear"))?;
        }
        Ok(keys.len() as u64)
    }

    fn keys(&self, flow_id: &str) -> Result<[String; 2]> {
        check_flow_id(flow_id)?;
        Ok([
            format!("{}{flow_id}:v", self.prefix),
            format!("{}{flow_id}:d", self.prefix),
        ])
    }

    /// The newest `n` snapshots (all when `None`), newest first.
    async fn newest(&self, flow_id: &str, n: Option<usize>) -> Result<Vec<Snapshot>> {
        let [versions, data] = self.keys(flow_id)?;
        let n: i64 = n.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        if n == 0 {
            return Ok(Vec::new());
        }
        let flat: Vec<Option<String>> = self
            .newest
            .key(versions)
            .key(data)
            .arg(n)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(storage("redis load"))?;
        flat.chunks(2).map(|pair| decode(flow_id, pair)).collect()
    }
}

/// One version and its data from a reply; anything else is bad stored data.
fn decode(flow_id: &str, pair: &[Option<String>]) -> Result<Snapshot> {
    let bad = |why: String| Error::decode(format!("Redis snapshot of flow `{flow_id}`"), why);
    let [Some(version), data] = pair else {
        return Err(bad("a version without its pair".into()));
    };
    let version: u64 = version
        .parse()
        .map_err(|e| bad(format!("version `{version}`: {e}")))?;
    let Some(data) = data else {
        return Err(bad(format!("version {version} has no data")));
    };
    let data: Value = serde_json::from_str(data).map_err(|e| bad(e.to_string()))?;
    Ok(Snapshot::new(flow_id, version, data))
}

/// `s` with Redis glob characters escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[async_trait]
impl SnapshotAdapter for RedisAdapter {
    async fn save_snapshot(&self, snapshot: Snapshot) -> Result<()> {
        snapshot.check()?;
        let [versions, data] = self.keys(&snapshot.flow_id)?;
        let json = serde_json::to_string(&snapshot.data)
            .map_err(|e| Error::encode(format!("snapshot of `{}`", snapshot.flow_id), e))?;
        let saved: i64 = self
            .save
            .key(versions)
            .key(data)
            .arg(snapshot.version)
            .arg(json)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(storage("redis save"))?;
        if saved == 1 {
            Ok(())
        } else {
            Err(snapshot.conflict())
        }
    }

    async fn load_snapshot(&self, flow_id: &str, version: Option<u64>) -> Result<Option<Snapshot>> {
        let Some(version) = version else {
            return Ok(self.newest(flow_id, Some(1)).await?.pop());
        };
        let [_, data] = self.keys(flow_id)?;
        let found: Option<String> = self
            .conn
            .clone()
            .hget(data, version)
            .await
            .map_err(storage("redis load"))?;
        found
            .map(|d| decode(flow_id, &[Some(version.to_string()), Some(d)]))
            .transpose()
    }

    async fn load_history(&self, flow_id: &str, limit: Option<usize>) -> Result<Vec<Snapshot>> {
        self.newest(flow_id, limit).await
    }

    async fn delete_flow(&self, flow_id: &str) -> Result<()> {
        let keys = self.keys(flow_id)?;
        let _: u64 = self
            .conn
            .clone()
            .del(&keys)
            .await
            .map_err(storage("redis delete"))?;
        Ok(())
    }

    async fn prune_history(&self, flow_id: &str, keep_last: usize) -> Result<u64> {
        let [versions, data] = self.keys(flow_id)?;
        let keep = i64::try_from(keep_last).unwrap_or(i64::MAX);
        self.prune
            .key(versions)
            .key(data)
            .arg(keep)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(storage("redis prune"))
    }

    async fn snapshot_count(&self, flow_id: &str) -> Result<u64> {
        let [versions, _] = self.keys(flow_id)?;
        self.conn
            .clone()
            .zcard(versions)
            .await
            .map_err(storage("redis count"))
    }

    async fn flow_exists(&self, flow_id: &str) -> Result<bool> {
        let [versions, _] = self.keys(flow_id)?;
        self.conn
            .clone()
            .exists(versions)
            .await
            .map_err(storage("redis exists"))
    }
}
