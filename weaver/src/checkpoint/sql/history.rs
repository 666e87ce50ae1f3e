//! What a SQL saver keeps of a thread: every checkpoint, or only the latest
//! (`shallow`). The generic saver asks [`History`] at its few decision
//! points instead of testing a flag at each.

/// What a SQL saver keeps of each thread and namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum History {
    /// Every checkpoint, with its pending writes.
    Full,
    /// The latest checkpoint only: each commit deletes the ones it
    /// supersedes.
    Latest,
}

impl History {
    /// Whether older checkpoints stay stored (so records may store delta
    /// channels, and a missing one was never there).
    pub(crate) fn keeps_all(self) -> bool {
        self == History::Full
    }

    /// Whether a commit deletes the checkpoints it supersedes. Their commit
    /// orders may then be free again, so the unique constraint alone cannot
    /// refuse a stale writer: each insert reads the head under the thread's
    /// lock, inside a transaction (never as one statement or a group query).
    pub(crate) fn supersedes(self) -> bool {
        self == History::Latest
    }

    /// How many ancestors a fork of a checkpoint copies, at most `max`.
    pub(crate) fn fork_depth(self, max: usize) -> usize {
        match self {
            History::Full => max,
            History::Latest => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::History;

    #[test]
    fn a_shallow_saver_supersedes_and_forks_one_record() {
        let cases = [
            (History::Full, true, false, 1_000),
            (History::Latest, false, true, 0),
        ];
        for (history, keeps_all, supersedes, fork_depth) in cases {
            assert_eq!(history.keeps_all(), keeps_all, "{history:?}");
            assert_eq!(history.supersedes(), supersedes, "{history:?}");
            assert_eq!(history.fork_depth(1_000), fork_depth, "{history:?}");
        }
    }
}
