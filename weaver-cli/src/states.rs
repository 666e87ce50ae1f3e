//! [`States`]: the state types an application's own binary gives the
//! command line, for `scan --rewrite`.

use std::future::Future;
use std::pin::Pin;

use weaver::evolution::{UpgradeOptions, UpgradeReport, upgrade_stored};
use weaver::{GraphState, Result, Saver};

/// [`upgrade_stored`] of one state type, boxed.
type Upgrade = for<'a> fn(
    &'a dyn Saver,
    &'a UpgradeOptions,
    &'a mut (dyn FnMut(&UpgradeReport) + Send),
) -> Pin<Box<dyn Future<Output = Result<UpgradeReport>> + Send + 'a>>;

fn upgrade<'a, S: GraphState>(
    saver: &'a dyn Saver,
    options: &'a UpgradeOptions,
    progress: &'a mut (dyn FnMut(&UpgradeReport) + Send),
) -> Pin<Box<dyn Future<Output = Result<UpgradeReport>> + Send + 'a>> {
    Box::pin(upgrade_stored::<S>(saver, options, progress))
}

/// One state type and the namespaces it wrote.
pub(crate) struct Entry {
    /// The subgraph path (`""`: the root graph).
    pub(crate) path: String,
    /// The type's name, for the report.
    pub(crate) name: &'static str,
    /// Its version.
    pub(crate) version: u32,
    pub(crate) upgrade: Upgrade,
}

/// The state types of an application's graphs, for
/// [`run_with`](crate::run_with): the root graph's, and a subgraph's
/// own where it has one (a subgraph sharing its parent's state is named
/// with the parent's type). `scan --rewrite` upgrades each one's
/// namespaces in the order given.
///
/// ```
/// use weaver::prelude::*;
/// use weaver_cli::States;
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Ticket { subject: String }
///
/// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
/// struct Review { notes: Vec<String> }
///
/// let states = States::new::<Ticket>().subgraph::<Review>("review");
/// assert_eq!(states.len(), 2);
/// ```
pub struct States {
    pub(crate) entries: Vec<Entry>,
}

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| (&e.path, e.name, e.version)))
            .finish()
    }
}

impl States {
    /// The root graph's state `S`.
    pub fn new<S: GraphState>() -> Self {
        States {
            entries: vec![Entry::of::<S>(String::new())],
        }
    }

    /// The state `S` of the subgraph at `path` (node names joined by `|`,
    /// as [`subgraph_path`](weaver::evolution::subgraph_path) gives them).
    pub fn subgraph<S: GraphState>(mut self, path: impl Into<String>) -> Self {
        self.entries.push(Entry::of::<S>(path.into()));
        self
    }

    /// How many state types it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none (never: [`States::new`] names the root's).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Entry {
    fn of<S: GraphState>(path: String) -> Self {
        Entry {
            path,
            name: std::any::type_name::<S>(),
            version: S::VERSION,
            upgrade: upgrade::<S>,
        }
    }
}
