//! [`ListFilter`]: which checkpoints a [`Saver`](super::Saver)'s `list` returns.

use serde_json::{Map, Value};

use crate::sql::is_plain_identifier;

/// Which checkpoints [`list`](super::Saver::list) returns.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ListFilter {
    /// Only this thread; `None` lists across threads.
    pub thread_id: Option<String>,
    /// Only this namespace; `None` lists every namespace.
    pub checkpoint_ns: Option<String>,
    /// Only checkpoints committed before this one (needs `thread_id`).
    pub before: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Only checkpoints whose metadata has all these top-level key/values,
    /// compared as [`CheckpointMetadata::matches`](super::CheckpointMetadata::matches) does (numbers by value).
    pub metadata: Map<String, Value>,
}

impl ListFilter {
    /// Everything on one thread (every namespace).
    ///
    /// ```
    /// use weaver::checkpoint::ListFilter;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// graph.invoke(S::default(), &RunConfig::thread("other")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// assert_eq!(cp.list_records(&ListFilter::thread("t")).await?.len(), 3);
    /// assert_eq!(cp.list_records(&ListFilter::all()).await?.len(), 6);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn thread(thread_id: impl Into<String>) -> Self {
        ListFilter {
            thread_id: Some(thread_id.into()),
            ..ListFilter::default()
        }
    }

    /// Every thread.
    pub fn all() -> Self {
        ListFilter::default()
    }

    /// Restricts to one namespace.
    pub fn ns(mut self, ns: impl Into<String>) -> Self {
        self.checkpoint_ns = Some(ns.into());
        self
    }

    /// Keeps only checkpoints committed before checkpoint `id`.
    ///
    /// ```
    /// use weaver::checkpoint::ListFilter;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// let all = cp.list_records(&ListFilter::thread("t")).await?; // newest first
    /// let older = cp.list_records(&ListFilter::thread("t").before(&all[0].checkpoint.id)).await?;
    /// assert_eq!(older.len(), 2);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn before(mut self, id: impl Into<String>) -> Self {
        self.before = Some(id.into());
        self
    }

    /// Returns at most `n`.
    ///
    /// ```
    /// use weaver::checkpoint::ListFilter;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("t")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// assert_eq!(cp.list_records(&ListFilter::thread("t").limit(1)).await?.len(), 1);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    ///
    /// ```
    /// use weaver::checkpoint::ListFilter;
    /// use weaver::prelude::*;
    ///
    /// #[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
    /// struct S { #[reducer(add)] n: u64 }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let graph = Graph::<S>::new("g")
    ///     .add_node("inc", |_: &S| SUpdate::default().n(1u64))
    ///     .add_sequence([START, "inc", END])
    ///     .compile(Compile::new().checkpointer(InMemorySaver::new()))?;
    /// graph.invoke(S::default(), &RunConfig::thread("a").metadata("user", "ann")).await?;
    /// graph.invoke(S::default(), &RunConfig::thread("b").metadata("user", "bob")).await?;
    /// let cp = graph.checkpointer().unwrap();
    /// let anns = cp.list_records(&ListFilter::all().metadata("user", "ann")).await?;
    /// assert!(anns.iter().all(|r| r.config.thread_id == "a"));
    /// assert_eq!(anns.len(), 3);
    /// # Ok::<(), weaver::Error>(()) }).unwrap();
    /// ```
    /// Requires metadata key `key` to equal `value`.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Checks the filter before a saver runs it: metadata keys must be plain
    /// identifiers (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes), so no backend
    /// ever has to put a caller's key into a query; `before` needs a thread;
    /// no identifier or value holds a NUL character, which no saver stores
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument) otherwise).
    pub fn check(&self) -> crate::Result<()> {
        let ids = [
            ("thread id", &self.thread_id),
            ("checkpoint namespace", &self.checkpoint_ns),
            ("checkpoint id", &self.before),
        ];
        for (what, id) in ids {
            if let Some(id) = id {
                super::nul::check_id(what, id)?;
            }
        }
        if let Some((key, _)) = self.metadata.iter().find(|(_, v)| super::nul::has_nul(v)) {
            return Err(crate::Error::invalid_argument(format!(
                "metadata filter value of `{key}` contains a NUL character, which no saver stores"
            )));
        }
        if let Some(key) = self.metadata.keys().find(|k| !is_plain_identifier(k)) {
            return Err(crate::Error::invalid_argument(format!(
                "metadata filter key `{key}` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)"
            )));
        }
        if self.before.is_some() && self.thread_id.is_none() {
            return Err(crate::Error::invalid_argument(
                "`before` needs a `thread_id` to order against",
            ));
        }
        Ok(())
    }
}
