//! One run per thread at a time: what a run does when another holds the
//! thread ([`Multitask`]), and how long its hold lasts ([`LeaseTimes`]).

use std::time::Duration;

/// What a run does when another run holds its thread (LangGraph
/// Platform's multitask strategies).
///
/// A run that starts takes the thread's *lease*, a row in the saver's
/// database naming the run and when its hold ends, for the whole run; it
/// gives it back when it returns. Runs of any process sharing the database
/// see it, so at most one run per thread goes at a time, and each starts
/// from where the previous one ended: no run is built on another's
/// unfinished turn, and a run that does not go leaves no checkpoint.
///
/// The default is [`Reject`](Multitask::Reject), LangGraph's: a second run
/// fails at once with a typed error, the safe answer when the host did not
/// say otherwise. [`Race`](Multitask::Race) takes no lease.
///
/// A saver without leases ([`Saver::leases`](crate::Saver::leases) is
/// `None`: [`AdapterSaver`](crate::checkpoint::AdapterSaver), and a
/// third-party saver that does not implement it) runs every strategy as
/// `Race`: the version check alone decides between two runs of a thread.
///
/// ```
/// use std::time::Duration;
/// use weaver::RunConfig;
/// use weaver::config::Multitask;
///
/// let config = RunConfig::thread("chat-1").multitask(Multitask::Enqueue {
///     wait: Duration::from_secs(30),
/// });
/// assert_eq!(
///     config.get_multitask(),
///     Multitask::Enqueue { wait: Duration::from_secs(30) }
/// );
/// assert_eq!(RunConfig::thread("t").get_multitask(), Multitask::Reject);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Multitask {
    /// Fails with [`Error::ThreadBusy`](crate::Error::ThreadBusy) at once,
    /// reading and writing nothing of the thread. The default.
    #[default]
    Reject,
    /// Waits its turn: runs that arrive while the thread is held queue up
    /// (a ticket per run, in the database), first come first served across
    /// processes. A run that waited `wait` without its turn coming fails
    /// with [`Error::ThreadBusy`](crate::Error::ThreadBusy) and leaves the
    /// queue; `Duration::ZERO` tries once.
    Enqueue {
        /// How long the run waits for its turn at most.
        wait: Duration,
    },
    /// Asks the running run to stop, then goes on from where it stopped.
    /// The running run stops at its next step boundary (once it has seen
    /// the request, at its next renewal of the lease), keeping what it
    /// committed, and fails with
    /// [`Error::RunStopped`](crate::Error::RunStopped); this run then
    /// takes in its input on top of the stopped run's last checkpoint, as
    /// LangGraph's `interrupt` strategy does. A run that is still not
    /// stopped after `wait` fails this one with
    /// [`Error::ThreadBusy`](crate::Error::ThreadBusy), and the request is
    /// taken back (also when this run is dropped while it waits): the
    /// running run goes on, unless it has already seen the request at a
    /// renewal, in which case it stops all the same: a `wait` shorter than
    /// the holder's renewal period ([`LeaseTimes::renew`]) rarely stops
    /// it. A named holder paused at an interrupt that resumes while asked
    /// to stop stops at once.
    Interrupt {
        /// How long this run waits for the running one to stop.
        wait: Duration,
    },
    /// Like [`Interrupt`](Multitask::Interrupt), but the stopped run's
    /// checkpoints (those it committed on the thread's root namespace) are
    /// removed before this run starts: the thread is back where it was
    /// before the stopped run began. The same holds when the holder died:
    /// once its lease ran out, what it committed is removed. One exception:
    /// a stopped run that resumed a pause inside a subgraph keeps what it
    /// committed in the subgraph's namespace (only the root namespace is
    /// rolled back), so a newer resume of that pause finds the subgraph
    /// gone on with the stopped run's answer.
    Rollback {
        /// How long this run waits for the running one to stop.
        wait: Duration,
    },
    /// Takes no lease: concurrent runs race on the thread's commit orders
    /// and the loser fails with
    /// [`Error::VersionConflict`](crate::Error::VersionConflict), keeping
    /// what it committed before (see [`Durability`](super::Durability)).
    /// For a host that serializes its runs itself: the race is decided on
    /// the thread's root namespace only, so two runs that go on from the
    /// same checkpoint into a subgraph (two resumes of one pause inside it)
    /// share its namespace, and the winner may take in what the loser's
    /// subgraph stored there.
    Race,
}

impl Multitask {
    /// How long a run with this strategy waits for the thread at most.
    pub(crate) fn wait(self) -> Duration {
        match self {
            Multitask::Enqueue { wait }
            | Multitask::Interrupt { wait }
            | Multitask::Rollback { wait } => wait,
            Multitask::Reject | Multitask::Race => Duration::ZERO,
        }
    }
}

/// How long a run's hold of its thread lasts, and how often a live run
/// renews it.
///
/// A holder that dies (a killed process) stops renewing: its lease runs
/// out after `lease` and the next run takes the thread over, first
/// finishing the dead run from its last checkpoint and pending writes
/// ([`Multitask::Rollback`] removes it instead). If the finished run pauses
/// at an interrupt, the pause stays for anyone to resume, unless the dead
/// holder was named with [`RunConfig::lease_holder`](crate::RunConfig::lease_holder):
/// such a holder answers its own pauses, so its whole turn is removed.
/// A live run renews its lease
/// every `renew` in the background; a run that could not renew in time
/// (its lease ran out, or another run took it) stops at its next step
/// boundary with [`Error::LeaseLost`](crate::Error::LeaseLost). Renewing
/// and waiting use tokio's timer: on a runtime built without it (no
/// `enable_time`), a run is not renewed, so one longer than its lease
/// stops with `LeaseLost`.
///
/// ```
/// use std::time::Duration;
/// use weaver::config::LeaseTimes;
///
/// let times = LeaseTimes::new(Duration::from_secs(6));
/// assert_eq!(times.renew, Duration::from_secs(2));
/// assert_eq!(LeaseTimes::default().lease, Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimes {
    /// How long a hold lasts without renewal (default 30 s).
    pub lease: Duration,
    /// How often a live run renews it (default a third of `lease`).
    pub renew: Duration,
}

impl LeaseTimes {
    /// A lease of `lease`, renewed every third of it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::RunConfig;
    /// use weaver::config::LeaseTimes;
    ///
    /// let times = LeaseTimes::new(Duration::from_secs(3));
    /// assert_eq!(times.renew, Duration::from_secs(1));
    /// let config = RunConfig::thread("t").lease_times(times);
    /// assert_eq!(config.get_lease_times().lease, Duration::from_secs(3));
    /// ```
    pub fn new(lease: Duration) -> Self {
        LeaseTimes {
            lease,
            renew: lease / 3,
        }
    }

    /// Renewed every `renew` instead.
    pub fn renew_every(mut self, renew: Duration) -> Self {
        self.renew = renew;
        self
    }

    /// The longest lease a run may take: a day. A holder that dies keeps
    /// its thread for up to its lease time, and a deadline that far away
    /// is a mistake (`Duration::MAX`, say), not a choice.
    ///
    /// ```
    /// use std::time::Duration;
    /// use weaver::config::LeaseTimes;
    ///
    /// assert_eq!(LeaseTimes::MAX_LEASE, Duration::from_secs(24 * 60 * 60));
    /// ```
    pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

    /// Checks the times make sense: a lease of at least a millisecond and
    /// at most [`MAX_LEASE`](Self::MAX_LEASE), renewed more often than it
    /// lasts.
    pub(crate) fn check(&self) -> crate::Result<()> {
        let bad = |reason: String| Err(crate::Error::InvalidConfig { reason });
        if self.lease < Duration::from_millis(1) {
            return bad(format!("lease time {:?} is under 1 ms", self.lease));
        }
        if self.lease > Self::MAX_LEASE {
            return bad(format!(
                "lease time {:?} is over the longest, {:?}",
                self.lease,
                Self::MAX_LEASE
            ));
        }
        if self.renew.is_zero() || self.renew >= self.lease {
            return bad(format!(
                "lease renewal every {:?} must be above zero and below the lease time {:?}",
                self.renew, self.lease
            ));
        }
        Ok(())
    }
}

impl Default for LeaseTimes {
    fn default() -> Self {
        LeaseTimes::new(Duration::from_secs(30))
    }
}
