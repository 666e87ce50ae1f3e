//! The MongoDB backend (feature `mongodb`): [`MongoSaver`], a checkpointer
//! on MongoDB 7 or later through the official `mongodb` driver.
//!
//! Collections are named after a prefix: `<prefix>checkpoints` (one
//! document per checkpoint; a unique index on thread, namespace and commit
//! order makes a second writer of the same version fail with
//! [`Error::VersionConflict`], another on
//! thread, namespace and id), `<prefix>writes` (pending writes, unique per
//! checkpoint, task and index), `<prefix>leases` and `<prefix>lease_tickets`
//! (the per-thread lease that keeps one run per thread at a time, and the
//! runs waiting for it: [`Leases`](crate::checkpoint::Leases)),
//! `<prefix>lease_bases` and `<prefix>lease_base_writes` (copies of the
//! pending writes of each holder's base checkpoint, which a rollback of its
//! turn puts back) and `<prefix>setup` (the setup version).
//! They are created by [`MongoSaver::setup`], an explicit, versioned and
//! idempotent call; a saver on a database where it has not run fails with
//! [`Error::MigrationRequired`] naming it.
//!
//! Every multi-document write runs in one multi-document transaction, run
//! again after a transient write conflict (for up to 75 s: longer than the
//! server takes to abort a dead client's open transaction by default).
//! Transactions conflict only on documents both write, so a put of a new
//! checkpoint also writes its parent's document (a `children` count): a
//! delete or prune removing the parent meanwhile meets it, and the put
//! then fails with [`Error::CheckpointNotFound`] instead of leaving a
//! checkpoint under a deleted parent. Pending writes of a task do not
//! write their checkpoint (tasks of one step would meet each other): a
//! task's writes stored while its thread is deleted can outlive the
//! delete, under a checkpoint id no read reaches.
//! Payloads go through the saver's [`Codec`] and are stored as binary.
//!
//! The memory store on MongoDB, `weaver::store::MongoStore`, shares this
//! module's transaction, retry and setup-version helpers; its collection is
//! `<prefix>store_items` and its setup a call of its own.

/// Runs `$body` (which uses the session `$s`) in one transaction: committed
/// when it returns `Ok`, aborted otherwise.
macro_rules! in_txn {
    ($self:ident, $op:literal, |$s:ident| $body:expr) => {{
        let mut $s = $crate::mongo::begin(&$self.client, $op).await?;
        let out: Result<_> = async { $body }.await;
        $crate::mongo::end($s, out, $op).await
    }};
}

/// Runs `$body` (which uses the session `$s`) in one transaction, again
/// after a transient error ([`retry_after`]); `$body` must be safe to run
/// again (it owns nothing it gives away).
macro_rules! in_txn_retrying {
    ($self:ident, $op:literal, |$s:ident| $body:expr) => {{
        let mut retries = $crate::mongo::Retries::default();
        loop {
            match in_txn!($self, $op, |$s| $body) {
                Err(e) if $crate::mongo::retry_after(&e, &mut retries).await => {}
                out => break out,
            }
        }
    }};
}

mod lease;
mod prune;
pub(crate) mod records;
pub use records::MAX_METADATA_DEPTH;
mod rewrite;
mod saver;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mongodb::bson::{Document, doc};
use mongodb::options::IndexOptions;
use mongodb::{Client, ClientSession, Collection, Database, IndexModel};

use crate::checkpoint::SaverState;
use crate::codec::{Codec, JsonCodec, MAX_RECORD_BYTES};
use crate::error::{Error, Result};

/// How many checkpoint ids one query names at most (a query is one document
/// of at most 16 MB): the lookups of their pending writes, prune's deletes.
pub(crate) const WRITES_PER_QUERY: usize = 1_000;

/// The setup version this build needs: 2 adds the collections of lease
/// holders' base writes (`<prefix>lease_bases`, `<prefix>lease_base_writes`)
/// and their indexes.
pub const SETUP_VERSION: u32 = 2;

/// A checkpointer on MongoDB (7 or later), one document per checkpoint.
///
/// Built from a [`mongodb::Client`], a database name and a collection
/// prefix ([`MongoSaver::new`]), or from a URI ([`MongoSaver::connect`]).
/// Run [`MongoSaver::setup`] once per database and prefix before use.
///
/// ```no_run
/// # async fn run() -> weaver::Result<()> {
/// use weaver::mongo::MongoSaver;
/// let saver = MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "weaver_").await?;
/// saver.setup().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MongoSaver {
    pub(crate) client: Client,
    pub(crate) db: Database,
    pub(crate) prefix: String,
    pub(crate) codec: Arc<dyn Codec>,
    pub(crate) max_record_bytes: usize,
    pub(crate) state: Arc<SaverState>,
    pub(crate) verified: Arc<tokio::sync::OnceCell<()>>,
}

impl std::fmt::Debug for MongoSaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoSaver")
            .field("database", &self.db.name())
            .field("prefix", &self.prefix)
            .field("codec", &self.codec)
            .finish_non_exhaustive()
    }
}

/// Maps a driver error of operation `op` to [`Error::Storage`].
pub(crate) fn storage(op: &'static str) -> impl FnOnce(mongodb::error::Error) -> Error {
    move |e| Error::storage(op, e)
}

/// Whether `e` is a duplicate key (code 11000): the key is taken by a
/// committed document.
pub(crate) fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    code_of(e) == Some(11000)
}

fn code_of(e: &mongodb::error::Error) -> Option<i32> {
    use mongodb::error::{ErrorKind, WriteFailure};
    match &*e.kind {
        ErrorKind::Write(WriteFailure::WriteError(w)) => Some(w.code),
        ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

/// Whether `e` is a storage error the server labelled
/// `TransientTransactionError`: the transaction may succeed if run again.
pub(crate) fn is_transient(e: &Error) -> bool {
    match e {
        Error::Storage { source, .. } => source
            .downcast_ref::<mongodb::error::Error>()
            .is_some_and(|e| e.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR)),
        _ => false,
    }
}

/// How long a transaction is run again after transient errors: longer
/// than MongoDB's default `transactionLifetimeLimitSeconds` (60 s), after
/// which the server aborts the open transaction of a client that died (a
/// killed process's transaction holds what it wrote until then, and a
/// writer of the same keys meets a write conflict each time it tries).
const TRANSIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(75);

/// The transient failures of one call so far ([`retry_after`]).
#[derive(Debug, Default)]
pub(crate) struct Retries {
    tries: u32,
    since: Option<std::time::Instant>,
}

/// Whether a transaction that failed with `e` runs again: only after a
/// transient error (a write conflict with a concurrent transaction), for
/// at most [`TRANSIENT_PATIENCE`] since the call's first one, each time
/// after a random pause of up to 2^tries ms (at most 128 ms), so that
/// racing writers stop meeting each other. Never once the caller of the
/// detached call running it stopped waiting ([`MongoSaver::detached`]).
pub(crate) async fn retry_after(e: &Error, retries: &mut Retries) -> bool {
    if !is_transient(e) || caller_gone() {
        return false;
    }
    let since = *retries.since.get_or_insert_with(std::time::Instant::now);
    if since.elapsed() >= TRANSIENT_PATIENCE {
        return false;
    }
    retries.tries = retries.tries.saturating_add(1);
    let cap_micros = 1000u64 << retries.tries.min(7);
    let noise = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 11;
    tokio::time::sleep(std::time::Duration::from_micros(noise % cap_micros)).await;
    true
}

tokio::task_local! {
    /// Set once the caller of a [`MongoSaver::detached`] call stopped
    /// waiting for it.
    static CALLER_GONE: Arc<AtomicBool>;
}

/// Whether the caller of the detached call this task runs stopped waiting
/// (never, outside one).
fn caller_gone() -> bool {
    CALLER_GONE
        .try_with(|gone| gone.load(Ordering::SeqCst))
        .unwrap_or(false)
}

/// Sets its flag when dropped before [`Waiting::done`]: the caller's future
/// was dropped while it waited.
struct Waiting(Option<Arc<AtomicBool>>);

impl Waiting {
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(gone) = self.0.take() {
            gone.store(true, Ordering::SeqCst);
        }
    }
}

impl MongoSaver {
    /// Runs `call` on a handle of this saver in a task of its own and waits
    /// for it: every call that runs a transaction, since such a call is
    /// often cut off midway (a lease renewal cancelled when its run ends;
    /// an `invoke` dropped by a web server whose client went away, in the
    /// middle of a checkpoint's write). Dropped with its first operation in
    /// flight, the driver's session would not know that a transaction was
    /// started and would not abort it, leaving the documents it wrote
    /// locked on the server until the server gives up on the transaction
    /// (`transactionLifetimeLimitSeconds`, 60 s by default): another
    /// process's next write to them would wait that long.
    ///
    /// In its own task the call goes on to a clean end when its caller is
    /// dropped: its transaction is aborted rather than committed (as a SQL
    /// transaction is rolled back when its future is dropped), once the
    /// body's operations have answered (the body is not cut short between
    /// them), and not run again.
    pub(crate) async fn detached<T, F>(
        &self,
        op: &'static str,
        call: impl FnOnce(MongoSaver) -> F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        detached(op, call(self.clone())).await
    }
}

/// Runs `call` in a task of its own and waits for it, as
/// [`MongoSaver::detached`] does; for the memory store's transactions too.
pub(crate) async fn detached<T, F>(op: &'static str, call: F) -> Result<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    let gone = Arc::new(AtomicBool::new(false));
    let call = CALLER_GONE.scope(gone.clone(), call);
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            let task = rt.spawn(call);
            let waiting = Waiting(Some(gone));
            let out = task.await;
            waiting.done();
            out.map_err(|e| Error::storage(op, e))?
        }
        Err(_) => call.await,
    }
}

/// Every document `cursor` (opened in `s`) yields.
pub(crate) async fn drain(
    s: &mut ClientSession,
    mut cursor: mongodb::SessionCursor<Document>,
    op: &'static str,
) -> Result<Vec<Document>> {
    use futures_util::TryStreamExt;
    cursor.stream(s).try_collect().await.map_err(storage(op))
}

/// A session of `client` with a transaction started.
pub(crate) async fn begin(client: &Client, op: &'static str) -> Result<ClientSession> {
    let mut s = client.start_session().await.map_err(storage(op))?;
    s.start_transaction().await.map_err(storage(op))?;
    Ok(s)
}

/// How many times a commit whose result is unknown is sent again.
const COMMIT_RETRIES: u32 = 3;

/// Ends the transaction of `s`: committed when `out` is `Ok`, aborted
/// otherwise or when the caller of the detached call running it stopped
/// waiting ([`MongoSaver::detached`]); returns `out` (or the commit's
/// failure).
pub(crate) async fn end<T>(mut s: ClientSession, out: Result<T>, op: &'static str) -> Result<T> {
    match out {
        // Nobody waits for what the transaction did any more.
        Ok(_) if caller_gone() => {
            let _ = s.abort_transaction().await;
            Err(Error::storage(
                op,
                "the caller stopped waiting: the transaction was aborted",
            ))
        }
        Ok(v) => {
            // A commit whose result is unknown (the connection or the
            // primary lost in the middle) is sent again, as MongoDB allows:
            // it may have applied, and an error would have its caller store
            // again what is stored.
            let mut tries = 0;
            loop {
                match s.commit_transaction().await {
                    Ok(()) => return Ok(v),
                    Err(e)
                        if tries < COMMIT_RETRIES
                            && e.contains_label(
                                mongodb::error::UNKNOWN_TRANSACTION_COMMIT_RESULT,
                            ) =>
                    {
                        tries += 1;
                    }
                    Err(e) => return Err(Error::storage(op, e)),
                }
            }
        }
        Err(e) => {
            let _ = s.abort_transaction().await;
            Err(e)
        }
    }
}

/// The setup version recorded as `_id` in the setup collection `coll`
/// (0 when none).
pub(crate) async fn setup_version(coll: &Collection<Document>, id: &str) -> Result<u32> {
    let found = coll
        .find_one(doc! { "_id": id })
        .await
        .map_err(storage("check setup"))?;
    let Some(found) = found else { return Ok(0) };
    let v = records::int(&found, "version")
        .map_err(|e| Error::decode(format!("the `{id}` setup record of `{}`", coll.name()), e))?;
    u32::try_from(v).map_err(|e| Error::decode("the setup version", e))
}

/// Records setup version `version` as `_id` in the setup collection `coll`.
pub(crate) async fn record_setup_version(
    coll: &Collection<Document>,
    id: &str,
    version: u32,
) -> Result<()> {
    coll.update_one(
        doc! { "_id": id },
        doc! { "$set": { "version": i64::from(version) } },
    )
    .upsert(true)
    .await
    .map_err(storage("setup"))?;
    Ok(())
}

impl MongoSaver {
    /// A saver on database `database` of `client`, its collections named
    /// `<prefix>checkpoints`, `<prefix>writes` and `<prefix>setup`.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let client = mongodb::Client::with_uri_str("mongodb://127.0.0.1:27017").await.unwrap();
    /// let saver = weaver::mongo::MongoSaver::new(client, "app", "weaver_");
    /// saver.setup().await?;
    /// # Ok(()) }
    /// ```
    pub fn new(client: Client, database: &str, prefix: &str) -> Self {
        MongoSaver {
            db: client.database(database),
            client,
            prefix: prefix.to_owned(),
            codec: Arc::new(JsonCodec),
            max_record_bytes: MAX_RECORD_BYTES,
            state: Arc::default(),
            verified: Arc::default(),
        }
    }

    /// A saver connecting to `uri` (see [`MongoSaver::new`]).
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let saver = weaver::mongo::MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(uri: &str, database: &str, prefix: &str) -> Result<Self> {
        let client = Client::with_uri_str(uri)
            .await
            .map_err(storage("connect"))?;
        Ok(MongoSaver::new(client, database, prefix))
    }

    /// This saver with payloads encoded by `codec` (e.g. an
    /// `EncryptedCodec`), as on the SQL savers.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let saver = weaver::mongo::MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "w_")
    ///     .await?
    ///     .with_codec(weaver::codec::JsonCodec);
    /// # Ok(()) }
    /// ```
    pub fn with_codec(mut self, codec: impl Codec + 'static) -> Self {
        self.codec = Arc::new(codec);
        self
    }

    /// This saver refusing records above `bytes` (at most the default,
    /// [`MAX_RECORD_BYTES`]) with [`Error::LimitExceeded`].
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let saver = weaver::mongo::MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "w_")
    ///     .await?
    ///     .with_max_record_bytes(1 << 20);
    /// # Ok(()) }
    /// ```
    pub fn with_max_record_bytes(mut self, bytes: usize) -> Self {
        self.max_record_bytes = bytes.min(MAX_RECORD_BYTES);
        self
    }

    /// The database this saver writes to.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let saver = weaver::mongo::MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// assert_eq!(saver.database().name(), "app");
    /// # Ok(()) }
    /// ```
    pub fn database(&self) -> &Database {
        &self.db
    }

    pub(crate) fn checkpoints(&self) -> Collection<Document> {
        self.db.collection(&format!("{}checkpoints", self.prefix))
    }

    pub(crate) fn writes(&self) -> Collection<Document> {
        self.db.collection(&format!("{}writes", self.prefix))
    }

    fn setup_collection(&self) -> Collection<Document> {
        self.db.collection(&format!("{}setup", self.prefix))
    }

    /// Creates the collections' indexes and records [`SETUP_VERSION`] in
    /// `<prefix>setup`. Idempotent: running it again changes nothing.
    ///
    /// ```no_run
    /// # async fn run() -> weaver::Result<()> {
    /// let saver = weaver::mongo::MongoSaver::connect("mongodb://127.0.0.1:27017", "app", "w_").await?;
    /// saver.setup().await?;
    /// saver.setup().await?; // again: nothing to do
    /// # Ok(()) }
    /// ```
    pub async fn setup(&self) -> Result<()> {
        let found = self.setup_version().await?;
        if found > SETUP_VERSION {
            return Err(Error::MigrationRefused {
                adapter: "mongo checkpoint".into(),
                version: SETUP_VERSION,
                reason: format!("the database is at setup version {found}, newer than this build"),
            });
        }
        let unique = |keys: Document| {
            IndexModel::builder()
                .keys(keys)
                .options(IndexOptions::builder().unique(true).build())
                .build()
        };
        self.checkpoints()
            .create_indexes([
                unique(doc! { "thread_id": 1, "ns": 1, "commit_order": 1 }),
                unique(doc! { "thread_id": 1, "ns": 1, "checkpoint_id": 1 }),
            ])
            .await
            .map_err(storage("setup"))?;
        self.writes()
            .create_indexes([unique(
                doc! { "thread_id": 1, "ns": 1, "checkpoint_id": 1, "task_id": 1, "idx": 1 },
            )])
            .await
            .map_err(storage("setup"))?;
        self.tickets_collection()
            .create_indexes([unique(doc! { "thread_id": 1, "seq": 1 })])
            .await
            .map_err(storage("setup"))?;
        self.bases_collection()
            .create_indexes([unique(doc! { "thread_id": 1, "checkpoint_id": 1 })])
            .await
            .map_err(storage("setup"))?;
        self.base_writes_collection()
            .create_indexes([unique(
                doc! { "thread_id": 1, "checkpoint_id": 1, "task_id": 1, "idx": 1 },
            )])
            .await
            .map_err(storage("setup"))?;
        record_setup_version(&self.setup_collection(), "checkpoint", SETUP_VERSION).await
    }

    async fn setup_version(&self) -> Result<u32> {
        setup_version(&self.setup_collection(), "checkpoint").await
    }

    /// Fails with [`Error::MigrationRequired`] unless [`MongoSaver::setup`]
    /// ran on this database and prefix (checked once per saver).
    pub(crate) async fn verify(&self) -> Result<()> {
        self.verified
            .get_or_try_init(|| async {
                let found = self.setup_version().await?;
                if found == SETUP_VERSION {
                    Ok(())
                } else {
                    Err(Error::MigrationRequired {
                        adapter: "mongo checkpoint".into(),
                        found,
                        required: SETUP_VERSION,
                        hint: format!(
                            "run MongoSaver::setup() on database `{}` with prefix `{}`",
                            self.db.name(),
                            self.prefix
                        ),
                    })
                }
            })
            .await
            .map(|_| ())
    }
}
