//! A saver that forwards to another one, with hooks a test can set: read
//! and write counts, injected failures and intrusions, and gates that hold
//! lease calls back until the test lets them go.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use weaver::checkpoint::{
    Acquired, BatchEntry, CheckpointRef, CheckpointSource, CheckpointTuple, ForkOptions, LeaseInfo,
    LeaseRequest, Leases, LineageRequest, ListFilter, NewCheckpoint, PendingWrite, PruneStrategy,
    Renewed, Replacement, Rewrites, Stop, ThreadInfo, WriteOp,
};
use weaver::{InMemorySaver, Saver};

/// A saver as a third party would write one: the trait's default `lineage`
/// (one `get_tuple` per record), and deltas only when it opts in. Counts the
/// reads of stored records and the `lineages` calls, which go to the inner
/// saver's own when `inner_lineages` is set. Logs each write call (`put`,
/// `put_writes`, `put_ops` with its ops) in `writes`, and fails every
/// `put_ops` with a storage error while `fail_groups` is set (while
/// `fail_checkpoints` is set, every write of a checkpoint fails, and writes
/// alone go through; while `slow_writes` holds a time, a write of tasks'
/// writes alone first waits that long, as a busy database makes it). While
/// `intrude` is set, the next `put_many` is preceded by another writer's
/// commit at its first entry's commit order (as when another process's
/// turn lands between reading the head and writing), and `intrude` clears.
/// While `slow_final` is set, `put_checkpoint_with_writes` (the `exit`
/// durability's write when a run stops) first waits 50 ms, as a saver
/// waiting for a busy database does. After [`gate`](Forwarding::gate)`(n)`,
/// the next `n` reads of a thread's latest checkpoint wait until all `n`
/// have read it (runs racing on one thread, each having read the same
/// head before any of them writes). It takes no lease unless
/// `forward_leases` is set (then the inner saver's); after
/// [`gate_release`](Forwarding::gate_release) a lease's release first says
/// it was entered and waits until the gate is opened.
/// After [`gate_writes`](Forwarding::gate_writes) every checkpoint write
/// does the same, and after [`gate_renewals`](Forwarding::gate_renewals)
/// every lease renewal, and after
/// [`gate_withdrawals`](Forwarding::gate_withdrawals) every withdrawal of a
/// stop request; `renewed` counts the renewals that succeeded. While
/// `fail_request_stop` is set, stop requests fail with a storage error. [`stop_noticed`](Forwarding::stop_noticed) waits until a run has taken
/// in a stop request (see there), [`renewal_refused`](Forwarding::renewal_refused)
/// until a renewal was refused.
#[derive(Debug)]
pub struct Forwarding {
    pub inner: Arc<dyn Saver>,
    pub deltas: bool,
    pub inner_lineages: bool,
    pub reads: AtomicUsize,
    pub lineages_calls: AtomicUsize,
    pub writes: Mutex<Vec<String>>,
    pub fail_groups: AtomicBool,
    pub fail_checkpoints: AtomicBool,
    /// Once set, every checkpoint read (`get_stored`) fails.
    pub fail_reads: AtomicBool,
    /// How many checkpoint reads pass before one fails (then it resets to
    /// `usize::MAX`, off).
    pub fail_read_after: AtomicUsize,
    pub slow_writes: Mutex<Option<std::time::Duration>>,
    pub intrude: AtomicBool,
    pub slow_final: AtomicBool,
    pub latest_gate: Mutex<Option<(Arc<tokio::sync::Barrier>, usize)>>,
    pub forward_leases: bool,
    /// Says the saver is in-process when the inner one is (the engine then
    /// stores a task's writes ahead of their checkpoint); off by default.
    pub in_process: bool,
    pub release_gate: Mutex<Option<ReleaseGate>>,
    /// Holds checkpoint writes back ([`Forwarding::gate_writes`]).
    pub write_gate: Mutex<Option<ReleaseGate>>,
    /// How long each lease acquire waits before it is forwarded (as a saver
    /// running its transaction again after conflicts takes the lease only
    /// at the end of a long call).
    pub slow_acquire: Mutex<Option<std::time::Duration>>,
    /// Awaited once, before the next write that stores a checkpoint (`put`,
    /// or a `put_ops` group with one) goes on: another caller's work done
    /// at that point of this one's.
    pub before_checkpoint: Mutex<Option<BoxedWork>>,
    /// Awaited once, after the next write that stores a checkpoint (`put`,
    /// or a `put_ops` group with one) succeeded: another caller's work done
    /// between this one's write and what it does next.
    pub after_checkpoint: Mutex<Option<BoxedWork>>,
    /// Holds back the `put_ops` groups that store a root-namespace
    /// checkpoint ([`Forwarding::gate_root_groups`]).
    pub root_gate: Mutex<Option<ReleaseGate>>,
    /// Holds `put_ops` groups that store a subgraph's checkpoint back
    /// ([`Forwarding::gate_subgraph_groups`]).
    pub subgraph_gate: Mutex<Option<ReleaseGate>>,
    /// Once set, the next `put_writes` waits this long after the inner
    /// saver stored its writes, before it returns (a reply slow to come
    /// back from a database that committed).
    pub slow_reply_to_writes: Mutex<Option<std::time::Duration>>,
    /// Once set, the next `put_writes` waits this long before it goes on
    /// (a database slow to take the write).
    pub slow_next_writes: Mutex<Option<std::time::Duration>>,
    /// While set, every `put_ops` group that stores a root-namespace
    /// checkpoint fails with a storage error (subgraphs' groups go through).
    pub fail_root_groups: AtomicBool,
    /// Holds lease renewals back ([`Forwarding::gate_renewals`]).
    pub renew_gate: Mutex<Option<ReleaseGate>>,
    /// Lease renewals that succeeded.
    pub renewed: AtomicUsize,
    /// Holds withdrawals of stop requests back
    /// ([`Forwarding::gate_withdrawals`]).
    pub withdraw_gate: Mutex<Option<ReleaseGate>>,
    /// Stop requests fail while set.
    pub fail_request_stop: AtomicBool,
    /// Holders a renewal told of a stop request.
    pub told_to_stop: Mutex<HashSet<String>>,
    /// Raised once a holder told to stop renews again.
    pub stop_taken_in: Signal,
    /// Raised once a renewal was refused.
    pub refused: Signal,
    /// Awaited once, before the next `Rewrites::replace` goes on: another
    /// caller's work done between a rewrite's read and its replacement.
    pub before_replace: Mutex<Option<BoxedWork>>,
    /// Awaited once, before the next `delete_thread` or
    /// `Leases::delete_held` goes on: another caller's work done between a
    /// check and the deletion.
    pub before_delete: Mutex<Option<BoxedWork>>,
    /// Awaited once, before the next `lineages` call goes on: another
    /// caller's work done between a record's read and its lineage's.
    pub before_lineages: Mutex<Option<BoxedWork>>,
    /// Once set, the next `put_ops` group of several ops that stores a
    /// checkpoint is stored, then reported failed (a reply lost after the
    /// commit), and the flag clears.
    pub lose_reply_to_group: AtomicBool,
}

/// Work a test runs in the middle of a saver call
/// ([`Forwarding::before_checkpoint`]).
pub struct BoxedWork(pub std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>);

impl std::fmt::Debug for BoxedWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedWork")
    }
}

/// A flag a test waits for: raised once, then seen by every wait.
#[derive(Debug, Default)]
pub struct Signal {
    raised: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Signal {
    /// Raises the flag and wakes every wait.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Waits until the flag is raised (at once if it was already).
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.raised.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// Holds lease releases ([`Forwarding::gate_release`]) or checkpoint
/// writes ([`Forwarding::gate_writes`]) back.
#[derive(Debug, Clone)]
pub struct ReleaseGate {
    /// Notified when a release call is entered.
    pub entered: Arc<tokio::sync::Notify>,
    /// A release goes on once it takes a permit.
    pub open: Arc<tokio::sync::Semaphore>,
}

impl Default for Forwarding {
    fn default() -> Self {
        Forwarding::on(Arc::new(InMemorySaver::new()))
    }
}

impl Forwarding {
    /// Forwards to `inner`.
    pub fn on(inner: Arc<dyn Saver>) -> Self {
        Forwarding {
            inner,
            deltas: false,
            inner_lineages: false,
            reads: AtomicUsize::new(0),
            lineages_calls: AtomicUsize::new(0),
            writes: Mutex::new(Vec::new()),
            fail_groups: AtomicBool::new(false),
            fail_checkpoints: AtomicBool::new(false),
            fail_reads: AtomicBool::new(false),
            fail_read_after: AtomicUsize::new(usize::MAX),
            slow_writes: Mutex::new(None),
            intrude: AtomicBool::new(false),
            slow_final: AtomicBool::new(false),
            latest_gate: Mutex::new(None),
            forward_leases: false,
            in_process: false,
            release_gate: Mutex::new(None),
            write_gate: Mutex::new(None),
            slow_acquire: Mutex::new(None),
            before_checkpoint: Mutex::new(None),
            after_checkpoint: Mutex::new(None),
            root_gate: Mutex::new(None),
            subgraph_gate: Mutex::new(None),
            slow_reply_to_writes: Mutex::new(None),
            slow_next_writes: Mutex::new(None),
            fail_root_groups: AtomicBool::new(false),
            renew_gate: Mutex::new(None),
            renewed: AtomicUsize::new(0),
            withdraw_gate: Mutex::new(None),
            fail_request_stop: AtomicBool::new(false),
            told_to_stop: Mutex::new(HashSet::new()),
            stop_taken_in: Signal::default(),
            refused: Signal::default(),
            before_replace: Mutex::new(None),
            before_delete: Mutex::new(None),
            before_lineages: Mutex::new(None),
            lose_reply_to_group: AtomicBool::new(false),
        }
    }

    /// Makes every lease release wait for a permit of the gate returned
    /// (none yet), after notifying it was entered.
    pub fn gate_release(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.release_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Makes every checkpoint write (`put`, `put_writes`,
    /// `put_checkpoint_with_writes`, `put_many`, `put_ops`) wait for a
    /// permit of the gate returned (none yet), after notifying it was
    /// entered.
    pub fn gate_writes(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.write_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Makes every `put_ops` group that stores a root-namespace checkpoint
    /// wait for a permit of the gate returned (none yet), after notifying
    /// it was entered.
    pub fn gate_root_groups(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.root_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Makes every `put_ops` group that stores a subgraph's checkpoint (a
    /// namespace other than the root) wait for a permit of the gate
    /// returned (none yet), after notifying it was entered.
    pub fn gate_subgraph_groups(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.subgraph_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Makes every lease renewal wait for a permit of the gate returned
    /// (none yet), after notifying it was entered.
    pub fn gate_renewals(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.renew_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Makes every withdrawal of a stop request wait for a permit of the
    /// gate returned (none yet), after notifying it was entered.
    pub fn gate_withdrawals(&self) -> ReleaseGate {
        let gate = ReleaseGate {
            entered: Arc::new(tokio::sync::Notify::new()),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        *self.withdraw_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(gate.clone());
        gate
    }

    /// Waits `slow_writes`, if set.
    async fn slow_down(&self) {
        let slow = *self.slow_writes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wait) = slow {
            tokio::time::sleep(wait).await;
        }
    }

    /// Runs the work set to run before a checkpoint write, once.
    async fn run_before_checkpoint(&self) {
        Self::run_once(&self.before_checkpoint).await;
    }

    /// Runs the work set to run after a checkpoint write, once.
    async fn run_after_checkpoint(&self) {
        Self::run_once(&self.after_checkpoint).await;
    }

    async fn run_once(work: &Mutex<Option<BoxedWork>>) {
        let work = work.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(BoxedWork(work)) = work {
            work.await;
        }
    }

    /// Waits at the write gate, if one is set.
    async fn pass_write_gate(&self) {
        Self::pass(&self.write_gate).await;
    }

    /// Waits at `gate`, if one is set: says it was entered, then takes a
    /// permit and gives it back.
    async fn pass(gate: &Mutex<Option<ReleaseGate>>) {
        let gate = gate.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(gate) = gate {
            gate.entered.notify_one();
            let permit = gate.open.acquire().await;
            drop(permit);
        }
    }

    fn inner_leases(&self) -> weaver::Result<&dyn Leases> {
        self.inner
            .leases()
            .ok_or_else(|| weaver::Error::invalid_argument("the inner saver has no leases"))
    }

    /// Forwards everything to `inner`, leases included, as `inner` would
    /// answer (its deltas and its own `lineages`): for tests that only
    /// watch lease calls.
    pub fn leasing(inner: Arc<dyn Saver>) -> Self {
        Forwarding {
            deltas: inner.supports_deltas(),
            inner_lineages: true,
            forward_leases: true,
            ..Forwarding::on(inner)
        }
    }

    /// Waits until a run has taken in a stop request: a renewal told its
    /// holder of the stop and the holder has renewed again since. The
    /// engine's renewer passes a stop on to its run before it renews
    /// again, so from then on the run stops at its next step boundary.
    pub async fn stop_noticed(&self) {
        self.stop_taken_in.wait().await;
    }

    /// Waits until a renewal has been refused (`LeaseLost`): the holder's
    /// run has lost its thread.
    pub async fn renewal_refused(&self) {
        self.refused.wait().await;
    }

    /// Makes the next `n` reads of a latest checkpoint wait for each other.
    pub fn gate(&self, n: usize) {
        *self.latest_gate.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::new(tokio::sync::Barrier::new(n)), n));
    }

    fn log(&self, call: String) {
        self.writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }
}

#[async_trait]
impl Saver for Forwarding {
    async fn lineages(
        &self,
        requests: &[LineageRequest],
    ) -> weaver::Result<Vec<Vec<CheckpointTuple>>> {
        self.lineages_calls.fetch_add(1, Ordering::SeqCst);
        Self::run_once(&self.before_lineages).await;
        if self.inner_lineages {
            return self.inner.lineages(requests).await;
        }
        let mut out = Vec::new();
        for r in requests {
            out.push(self.lineage(&r.from, r.count, r.below).await?);
        }
        Ok(out)
    }
    async fn get_stored(&self, target: &CheckpointRef) -> weaver::Result<Option<CheckpointTuple>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let left =
            self.fail_read_after
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| match n {
                    usize::MAX => None,
                    0 => Some(usize::MAX),
                    n => Some(n - 1),
                });
        if self.fail_reads.load(Ordering::SeqCst) || left == Ok(0) {
            return Err(weaver::Error::storage("get", "the read failed (test)"));
        }
        let read = self.inner.get_stored(target).await;
        let barrier = match &mut *self.latest_gate.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((barrier, left)) if target.checkpoint_id.is_none() && *left > 0 => {
                *left -= 1;
                Some(barrier.clone())
            }
            _ => None,
        };
        if let Some(barrier) = barrier {
            barrier.wait().await;
        }
        read
    }
    async fn list_stored(&self, filter: &ListFilter) -> weaver::Result<Vec<CheckpointTuple>> {
        self.inner.list_stored(filter).await
    }
    async fn put(&self, checkpoint: NewCheckpoint) -> weaver::Result<CheckpointRef> {
        self.log("put".into());
        self.run_before_checkpoint().await;
        if self.fail_checkpoints.load(Ordering::SeqCst) {
            return Err(weaver::Error::storage(
                "put",
                "the checkpoint failed (test)",
            ));
        }
        self.pass_write_gate().await;
        let stored = self.inner.put(checkpoint).await?;
        self.run_after_checkpoint().await;
        Ok(stored)
    }
    async fn put_writes(
        &self,
        target: &CheckpointRef,
        writes: Vec<PendingWrite>,
    ) -> weaver::Result<()> {
        self.log("put_writes".into());
        self.slow_down().await;
        let slow = self
            .slow_next_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(wait) = slow {
            tokio::time::sleep(wait).await;
        }
        self.pass_write_gate().await;
        self.inner.put_writes(target, writes).await?;
        let slow = self
            .slow_reply_to_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(wait) = slow {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }
    async fn put_checkpoint_with_writes(
        &self,
        checkpoint: NewCheckpoint,
        writes: Vec<PendingWrite>,
    ) -> weaver::Result<CheckpointRef> {
        if self.slow_final.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.pass_write_gate().await;
        self.inner
            .put_checkpoint_with_writes(checkpoint, writes)
            .await
    }
    async fn put_many(&self, entries: Vec<BatchEntry>) -> weaver::Result<Vec<CheckpointRef>> {
        if let Some(first) = entries.first().map(|b| &b.checkpoint)
            && self.intrude.swap(false, Ordering::SeqCst)
        {
            let mut other = first.clone();
            other.checkpoint.id = format!("intruder-{}", first.checkpoint.id);
            other.metadata.extra.clear();
            other.metadata.source = CheckpointSource::Loop;
            self.inner.put(other).await?;
        }
        self.pass_write_gate().await;
        self.inner.put_many(entries).await
    }
    async fn put_batch(&self, entries: Vec<BatchEntry>) -> weaver::Result<Vec<CheckpointRef>> {
        self.inner.put_batch(entries).await
    }
    async fn fork_lineage(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> weaver::Result<CheckpointRef> {
        self.inner
            .fork_lineage(source, target_thread, options)
            .await
    }
    async fn fork_at(
        &self,
        source: &CheckpointRef,
        target_thread: &str,
        options: ForkOptions,
    ) -> weaver::Result<CheckpointRef> {
        self.inner.fork_at(source, target_thread, options).await
    }
    async fn copy_thread(&self, source_thread: &str, target_thread: &str) -> weaver::Result<()> {
        self.inner.copy_thread(source_thread, target_thread).await
    }
    async fn delete_thread(&self, thread_id: &str) -> weaver::Result<()> {
        Self::run_once(&self.before_delete).await;
        self.inner.delete_thread(thread_id).await
    }
    async fn prune(&self, thread_ids: &[String], strategy: PruneStrategy) -> weaver::Result<u64> {
        self.inner.prune(thread_ids, strategy).await
    }
    async fn list_threads(
        &self,
        limit: Option<usize>,
        offset: usize,
    ) -> weaver::Result<Vec<ThreadInfo>> {
        self.inner.list_threads(limit, offset).await
    }
    async fn put_ops(&self, ops: Vec<WriteOp>) -> weaver::Result<()> {
        let names: Vec<&str> = ops
            .iter()
            .map(|op| match op {
                WriteOp::Put(_) => "put",
                WriteOp::Writes(..) => "writes",
                WriteOp::Check(..) => "check",
            })
            .collect();
        self.log(format!("put_ops[{}]", names.join(", ")));
        let puts = ops.iter().any(|op| matches!(op, WriteOp::Put(_)));
        if !puts {
            self.slow_down().await;
        } else {
            self.run_before_checkpoint().await;
        }
        let root = ops
            .iter()
            .any(|op| matches!(op, WriteOp::Put(c) if c.checkpoint_ns.is_empty()));
        if root {
            Self::pass(&self.root_gate).await;
        }
        if ops
            .iter()
            .any(|op| matches!(op, WriteOp::Put(c) if !c.checkpoint_ns.is_empty()))
        {
            Self::pass(&self.subgraph_gate).await;
        }
        if self.fail_groups.load(Ordering::SeqCst)
            || (puts && self.fail_checkpoints.load(Ordering::SeqCst))
            || (root && self.fail_root_groups.load(Ordering::SeqCst))
        {
            return Err(weaver::Error::storage("put_ops", "the group failed (test)"));
        }
        self.pass_write_gate().await;
        let several = ops.len() > 1;
        self.inner.put_ops(ops).await?;
        if puts && several && self.lose_reply_to_group.swap(false, Ordering::SeqCst) {
            return Err(weaver::Error::storage(
                "put_ops",
                "the connection was lost after the commit (test)",
            ));
        }
        if puts {
            self.run_after_checkpoint().await;
        }
        Ok(())
    }
    fn supports_deltas(&self) -> bool {
        self.deltas
    }
    fn is_in_process(&self) -> bool {
        self.in_process && self.inner.is_in_process()
    }
    fn leases(&self) -> Option<&dyn Leases> {
        self.forward_leases.then_some(self as &dyn Leases)
    }
    fn rewrites(&self) -> Option<&dyn Rewrites> {
        self.inner.rewrites().map(|_| self as &dyn Rewrites)
    }
}

#[async_trait]
impl Rewrites for Forwarding {
    async fn replace(&self, records: Vec<Replacement>) -> weaver::Result<u64> {
        Self::run_once(&self.before_replace).await;
        let rewrites = self
            .inner
            .rewrites()
            .ok_or_else(|| weaver::Error::invalid_argument("the inner saver does not rewrite"))?;
        rewrites.replace(records).await
    }
}

#[async_trait]
impl Leases for Forwarding {
    async fn acquire(&self, request: &LeaseRequest<'_>) -> weaver::Result<Acquired> {
        let slow = *self.slow_acquire.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wait) = slow {
            tokio::time::sleep(wait).await;
        }
        self.inner_leases()?.acquire(request).await
    }
    async fn renew(
        &self,
        thread_id: &str,
        holder: &str,
        lease: std::time::Duration,
    ) -> weaver::Result<Renewed> {
        let told = self
            .told_to_stop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(holder);
        if told {
            self.stop_taken_in.raise();
        }
        Self::pass(&self.renew_gate).await;
        let renewed = match self.inner_leases()?.renew(thread_id, holder, lease).await {
            Err(e @ weaver::Error::LeaseLost { .. }) => {
                self.refused.raise();
                return Err(e);
            }
            other => other?,
        };
        self.renewed.fetch_add(1, Ordering::SeqCst);
        if renewed.stop.is_some() {
            self.told_to_stop
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(holder.to_owned());
        }
        Ok(renewed)
    }
    async fn release(
        &self,
        thread_id: &str,
        holder: &str,
        stopped: Option<Stop>,
    ) -> weaver::Result<()> {
        let gate = self
            .release_gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(gate) = gate {
            gate.entered.notify_one();
            let _permit = gate.open.acquire().await;
        }
        self.inner_leases()?
            .release(thread_id, holder, stopped)
            .await
    }
    async fn request_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> weaver::Result<()> {
        if self.fail_request_stop.load(Ordering::SeqCst) {
            return Err(weaver::Error::storage(
                "lease_request_stop",
                std::io::Error::other("the database went away"),
            ));
        }
        self.inner_leases()?
            .request_stop(thread_id, holder, stop)
            .await
    }
    async fn withdraw_stop(&self, thread_id: &str, holder: &str, stop: Stop) -> weaver::Result<()> {
        Self::pass(&self.withdraw_gate).await;
        self.inner_leases()?
            .withdraw_stop(thread_id, holder, stop)
            .await
    }
    async fn leave_queue(&self, thread_id: &str, ticket: i64) -> weaver::Result<()> {
        self.inner_leases()?.leave_queue(thread_id, ticket).await
    }
    async fn lease_info(&self, thread_id: &str) -> weaver::Result<Option<LeaseInfo>> {
        self.inner_leases()?.lease_info(thread_id).await
    }
    async fn truncate(&self, thread_id: &str, holder: &str, above: u64) -> weaver::Result<u64> {
        self.inner_leases()?
            .truncate(thread_id, holder, above)
            .await
    }
    async fn delete_held(&self, thread_id: &str, holder: &str) -> weaver::Result<()> {
        Self::run_once(&self.before_delete).await;
        self.inner_leases()?.delete_held(thread_id, holder).await
    }
}
