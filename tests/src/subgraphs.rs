//! Subgraph scenarios, run against any saver: the in-memory saver in the
//! runtime tests, SQLite and PostgreSQL in the SQL tests.
//!
//! A desk (`prepare` → `write` → `publish`) whose `write` runs the draft
//! subgraph (`outline` → `review`); one level deep, `review` asks for
//! approval itself; two levels deep, it runs the check subgraph (`inspect`
//! → `approve`), whose `approve` asks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::json;
use weaver::checkpoint::ListFilter;
use weaver::prelude::*;

/// The parent's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Desk {
    /// What to write about.
    pub topic: String,
    /// One line per parent node that ran to its end.
    #[reducer(append)]
    pub log: Vec<String>,
    /// The approval the draft got.
    pub verdict: String,
}

/// The draft subgraph's state.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Draft {
    /// The topic, from the desk.
    pub topic: String,
    /// Set by `outline`.
    pub text: String,
    /// Set by `review`.
    pub verdict: String,
}

/// The check subgraph's state (two levels deep).
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Check {
    /// The text to check.
    pub text: String,
    /// Set by `inspect`.
    pub words: u64,
    /// Set by `approve`.
    pub verdict: String,
}

/// How often each node ran, and which fail while `failing` holds them.
#[derive(Debug, Default)]
pub struct Counts {
    ran: Mutex<BTreeMap<String, usize>>,
    failing: Mutex<Vec<String>>,
}

impl Counts {
    /// Counts a run of `node`; fails it while it is failing.
    fn hit(&self, node: &str) -> Result<(), NodeError> {
        *self.ran.lock().unwrap().entry(node.to_owned()).or_default() += 1;
        if self.failing.lock().unwrap().iter().any(|n| n == node) {
            return Err(NodeError::msg(format!("{node} is down")));
        }
        Ok(())
    }

    /// How many times `node` ran.
    pub fn of(&self, node: &str) -> usize {
        self.ran.lock().unwrap().get(node).copied().unwrap_or(0)
    }

    /// Makes `node` fail until [`heal`](Self::heal).
    pub fn fail(&self, node: &str) {
        self.failing.lock().unwrap().push(node.to_owned());
    }

    /// Lets every node succeed.
    pub fn heal(&self) {
        self.failing.lock().unwrap().clear();
    }
}

/// Where the approval is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// By the draft subgraph's `review`.
    One,
    /// By the check subgraph's `approve`, which `review` runs.
    Two,
}

/// The desk and, to read their namespaces, its subgraphs compiled with the
/// same saver (the desk runs copies compiled without one).
#[derive(Debug, Clone)]
pub struct Desks {
    /// The parent.
    pub desk: CompiledGraph<Desk>,
    /// The draft subgraph, compiled with the saver.
    pub draft: CompiledGraph<Draft>,
    /// The check subgraph, compiled with the saver.
    pub check: CompiledGraph<Check>,
}

fn compile(saver: Option<Arc<dyn Saver>>) -> Compile {
    match saver {
        Some(s) => Compile::new().checkpointer_arc(s),
        None => Compile::new(),
    }
}

/// The check subgraph.
pub fn check_graph(saver: Option<Arc<dyn Saver>>, counts: Arc<Counts>) -> CompiledGraph<Check> {
    let c = counts.clone();
    let inspect = move |s: &Check| {
        c.hit("inspect")?;
        let words = s.text.split_whitespace().count() as u64;
        Ok::<_, NodeError>(CheckUpdate::default().words(words))
    };
    let approve = move |s: &Check, rt: &Runtime| {
        counts.hit("approve")?;
        let answer = rt.interrupt(json!({ "approve": s.text, "words": s.words }))?;
        let verdict = answer.as_str().unwrap_or_default().to_owned();
        Ok::<_, NodeError>(CheckUpdate::default().verdict(verdict))
    };
    Graph::<Check>::new("check")
        .add_node("inspect", inspect)
        .add_node("approve", approve)
        .add_sequence([START, "inspect", "approve", END])
        .compile(compile(saver))
        .unwrap()
}

/// The draft subgraph.
pub fn draft_graph(
    saver: Option<Arc<dyn Saver>>,
    counts: Arc<Counts>,
    depth: Depth,
) -> CompiledGraph<Draft> {
    let c = counts.clone();
    let outline = move |s: &Draft| {
        c.hit("outline")?;
        Ok::<_, NodeError>(DraftUpdate::default().text(format!("all about {}", s.topic)))
    };
    let graph = Graph::<Draft>::new("draft").add_node("outline", outline);
    let graph = match depth {
        Depth::One => graph.add_node("review", move |s: &Draft, rt: &Runtime| {
            counts.hit("review")?;
            let answer = rt.interrupt(json!({ "approve": s.text }))?;
            let verdict = answer.as_str().unwrap_or_default().to_owned();
            Ok::<_, NodeError>(DraftUpdate::default().verdict(verdict))
        }),
        Depth::Two => {
            let check = check_graph(None, counts.clone());
            graph.add_node("review", move |s: &Draft, rt: &Runtime| {
                let hit = counts.hit("review");
                let call = rt.subgraph(&check);
                let text = s.text.clone();
                async move {
                    hit?;
                    let input = Check {
                        text,
                        ..Check::default()
                    };
                    let done = call.invoke(input).await?;
                    Ok::<_, NodeError>(DraftUpdate::default().verdict(done.verdict))
                }
            })
        }
    };
    graph
        .add_sequence([START, "outline", "review", END])
        .compile(compile(saver))
        .unwrap()
}

/// The desk on `saver`, and its subgraphs for reading.
pub fn desks(saver: Arc<dyn Saver>, counts: Arc<Counts>, depth: Depth) -> Desks {
    let draft = draft_graph(None, counts.clone(), depth);
    let (c1, c2, c3) = (counts.clone(), counts.clone(), counts.clone());
    let desk = Graph::<Desk>::new("desk")
        .add_node("prepare", move |_: &Desk| {
            c1.hit("prepare")?;
            Ok::<_, NodeError>(DeskUpdate::default().log(vec!["prepared".into()]))
        })
        .add_node("write", move |s: &Desk, rt: &Runtime| {
            let hit = c2.hit("write");
            let call = rt.subgraph(&draft);
            let topic = s.topic.clone();
            let counts = c2.clone();
            async move {
                hit?;
                let input = Draft {
                    topic,
                    ..Draft::default()
                };
                let done = call.invoke(input).await?;
                // A failure here stands for a crash after the subgraph
                // finished and before the task's writes were stored.
                counts.hit("write_after")?;
                Ok::<_, NodeError>(
                    DeskUpdate::default()
                        .verdict(done.verdict)
                        .log(vec!["written".into()]),
                )
            }
        })
        .add_node("publish", move |_: &Desk| {
            c3.hit("publish")?;
            Ok::<_, NodeError>(DeskUpdate::default().log(vec!["published".into()]))
        })
        .add_sequence([START, "prepare", "write", "publish", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    Desks {
        desk,
        draft: draft_graph(Some(saver.clone()), counts.clone(), depth),
        check: check_graph(Some(saver), counts),
    }
}

fn topic() -> Desk {
    Desk {
        topic: "rust".into(),
        ..Desk::default()
    }
}

/// The namespaces the thread's checkpoints are stored under.
pub async fn namespaces(saver: &Arc<dyn Saver>, thread: &str) -> BTreeSet<String> {
    saver
        .list(&ListFilter::thread(thread))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.config.checkpoint_ns)
        .collect()
}

/// The draft's checkpoints are stored under `write:<task id>` and listed by
/// history in that namespace; the parent's stay in the root namespace, and
/// the parent's update is its node's (the append field is not doubled).
pub async fn subgraph_checkpoints_live_under_the_task_namespace(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver.clone(), counts.clone(), Depth::One);
    let config = RunConfig::thread("ns");
    let out = d.desk.invoke(topic(), &config).await.unwrap();
    let asked = out.interrupts().to_vec();
    assert_eq!(asked.len(), 1, "{out:?}");
    assert_eq!(asked[0].node, "review");
    assert_eq!(asked[0].value, json!({ "approve": "all about rust" }));
    let parent = d.desk.get_state(&config).await.unwrap();
    assert_eq!(parent.next, ["write"]);
    assert_eq!(parent.interrupts, asked);
    let write = crate::task_id_of(&d.desk, &config, "write").await;
    let ns = format!("write:{write}");
    assert_eq!(
        namespaces(&saver, "ns").await,
        BTreeSet::from([String::new(), ns.clone()])
    );
    let inner = RunConfig::thread("ns").checkpoint_ns(ns.clone());
    let history = d
        .draft
        .get_state_history(&inner, History::default())
        .await
        .unwrap();
    assert!(history.len() >= 3, "input, start, outline: {history:?}");
    assert!(history.iter().all(|s| s.config.ns() == ns));
    assert_eq!(history[0].next, ["review"]);
    assert_eq!(history[0].values.text, "all about rust");
    assert_eq!(history[0].interrupts, asked);

    let done = d.desk.resume(json!("yes"), &config).await.unwrap();
    let done = done.complete().unwrap();
    assert_eq!(done.verdict, "yes");
    assert_eq!(done.log, ["prepared", "written", "published"]);
    let after = d.draft.get_state(&inner).await.unwrap();
    assert!(after.next.is_empty());
    assert_eq!(after.values.verdict, "yes");
    let parent_history = d
        .desk
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert!(parent_history.iter().all(|s| s.config.ns().is_empty()));
}

/// An interrupt one or two levels deep pauses the parent; a fresh desk on
/// `second` (another handle on the same database, as another process has)
/// answers it by id, and the subgraphs' finished nodes do not run again.
pub async fn a_deep_interrupt_is_answered_from_a_fresh_graph(
    first: Arc<dyn Saver>,
    second: Arc<dyn Saver>,
    depth: Depth,
) {
    let counts = Arc::new(Counts::default());
    let d = desks(first.clone(), counts.clone(), depth);
    let config = RunConfig::thread("deep");
    let out = d.desk.invoke(topic(), &config).await.unwrap();
    let asked = out.interrupts().to_vec();
    assert_eq!(asked.len(), 1, "{out:?}");
    let write = crate::task_id_of(&d.desk, &config, "write").await;
    let draft_ns = format!("write:{write}");
    let mut expected = BTreeSet::from([String::new(), draft_ns.clone()]);
    match depth {
        Depth::One => assert_eq!(asked[0].node, "review"),
        Depth::Two => {
            assert_eq!(asked[0].node, "approve");
            assert_eq!(
                asked[0].value,
                json!({ "approve": "all about rust", "words": 3 })
            );
            let draft = RunConfig::thread("deep").checkpoint_ns(draft_ns.clone());
            let review = crate::task_id_of(&d.draft, &draft, "review").await;
            let check_ns = format!("{draft_ns}|review:{review}");
            let check = RunConfig::thread("deep").checkpoint_ns(check_ns.clone());
            let paused = d.check.get_state(&check).await.unwrap();
            assert_eq!(paused.next, ["approve"]);
            assert_eq!(paused.interrupts, asked);
            expected.insert(check_ns);
        }
    }
    assert_eq!(namespaces(&first, "deep").await, expected);
    assert_eq!(d.desk.get_state(&config).await.unwrap().interrupts, asked);

    // Another process: a new graph, a new saver handle.
    let fresh = desks(second.clone(), counts.clone(), depth);
    let answer = Resume::Map([(asked[0].id.clone(), json!("ship it"))].into());
    let done = fresh.desk.resume(answer, &config).await.unwrap();
    let done = done.complete().unwrap();
    assert_eq!(done.verdict, "ship it");
    assert_eq!(done.log, ["prepared", "written", "published"]);
    assert_eq!(counts.of("prepare"), 1);
    assert_eq!(
        counts.of("outline"),
        1,
        "finished inner nodes do not run again"
    );
    assert_eq!(counts.of("write"), 2);
    assert_eq!(counts.of("review"), 2);
    assert_eq!(counts.of("publish"), 1);
    if depth == Depth::Two {
        assert_eq!(counts.of("inspect"), 1);
        assert_eq!(counts.of("approve"), 2);
    }
    // Answered once: resuming again is refused.
    let again = fresh
        .desk
        .resume(json!("twice"), &config)
        .await
        .unwrap_err();
    assert!(
        matches!(again, Error::NoPendingInterrupt { .. }),
        "{again:?}"
    );
}

/// A failing inner node fails the parent with its error inside the
/// parent node's; continuing the thread continues the subgraph where it
/// failed.
pub async fn a_failing_inner_node_fails_the_parent_until_continued(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    counts.fail("review");
    let d = desks(saver, counts.clone(), Depth::One);
    let config = RunConfig::thread("fails");
    let err = d.desk.invoke(topic(), &config).await.unwrap_err();
    let Error::NodeFailed { node, source } = &err else {
        panic!("not a node failure: {err:?}");
    };
    assert_eq!(node, "write");
    match source.downcast_ref::<Error>() {
        Some(Error::NodeFailed { node, source }) => {
            assert_eq!(node, "review");
            assert_eq!(source.to_string(), "review is down");
        }
        other => panic!("not the inner failure: {other:?}"),
    }
    counts.heal();
    let out = d.desk.continue_run(&config).await.unwrap();
    assert_eq!(out.interrupts().len(), 1, "{out:?}");
    let done = d.desk.resume(json!("fine"), &config).await.unwrap();
    assert_eq!(done.complete().unwrap().verdict, "fine");
    assert_eq!(counts.of("prepare"), 1);
    assert_eq!(counts.of("outline"), 1);
    assert_eq!(counts.of("review"), 3);
}

/// The subgraph finished but its parent task did not store its result: the
/// task runs again and takes the subgraph's final state without running it.
pub async fn a_finished_subgraph_is_not_run_again(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver, counts.clone(), Depth::One);
    let config = RunConfig::thread("finished");
    d.desk.invoke(topic(), &config).await.unwrap();
    counts.fail("write_after");
    let err = d.desk.resume(json!("yes"), &config).await.unwrap_err();
    assert!(
        matches!(&err, Error::NodeFailed { node, .. } if node == "write"),
        "{err:?}"
    );
    assert_eq!(counts.of("review"), 2);
    counts.heal();
    let done = d.desk.continue_run(&config).await.unwrap();
    assert_eq!(done.complete().unwrap().verdict, "yes");
    assert_eq!(
        counts.of("review"),
        2,
        "the finished subgraph did not run again"
    );
    assert_eq!(counts.of("outline"), 1);
    assert_eq!(counts.of("write"), 3);
}

/// `delete_thread` removes the subgraphs' namespaces with the thread.
pub async fn deleting_a_thread_deletes_its_subgraphs(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver.clone(), counts, Depth::Two);
    let config = RunConfig::thread("gone");
    d.desk.invoke(topic(), &config).await.unwrap();
    d.desk.resume(json!("yes"), &config).await.unwrap();
    let other = RunConfig::thread("kept");
    d.desk.invoke(topic(), &other).await.unwrap();
    assert_eq!(namespaces(&saver, "gone").await.len(), 3);
    saver.delete_thread("gone").await.unwrap();
    assert!(namespaces(&saver, "gone").await.is_empty());
    assert_eq!(namespaces(&saver, "kept").await.len(), 3);
}

/// `get_state_subgraphs` shows the paused subgraphs, two levels deep,
/// under their namespaces, with the interrupt they wait at.
pub async fn get_state_shows_the_paused_subgraphs(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver, counts, Depth::Two);
    let config = RunConfig::thread("nested");
    let out = d.desk.invoke(topic(), &config).await.unwrap();
    let asked = out.interrupts().to_vec();
    let plain = d.desk.get_state(&config).await.unwrap();
    assert!(plain.tasks.iter().all(|t| t.subgraph.is_none()));
    let snapshot = d.desk.get_state_subgraphs(&config).await.unwrap();
    assert_eq!(snapshot.tasks.len(), 1);
    let write = &snapshot.tasks[0];
    let draft = write.subgraph.as_ref().expect("the draft's state");
    assert_eq!(draft.config.checkpoint_ns, format!("write:{}", write.id));
    assert_eq!(draft.values["text"], json!("all about rust"));
    assert_eq!(draft.interrupts, asked);
    assert_eq!(draft.subgraphs.len(), 1);
    let (node, review, check) = &draft.subgraphs[0];
    assert_eq!(node, "review");
    assert_eq!(
        check.config.checkpoint_ns,
        format!("write:{}|review:{review}", write.id)
    );
    assert_eq!(check.values["words"], json!(3));
    assert_eq!(check.interrupts, asked);
    assert!(check.subgraphs.is_empty());
    // Typed, through the subgraph's own graph.
    let typed = d
        .check
        .get_state(&check.config.clone().into())
        .await
        .unwrap();
    assert_eq!(typed.values.words, 3);
    assert_eq!(typed.next, ["approve"]);
}

/// Replaying the parent checkpoint taken while the subgraph was paused
/// (after the thread went on past it) resumes the subgraph at its pause,
/// one or two levels deep: the interrupt is asked again, the subgraphs'
/// nodes that finished before it do not run again, and answering it ends
/// the replay's branch with the new answer.
pub async fn replaying_a_paused_parent_checkpoint_resumes_the_subgraph_at_its_pause(
    saver: Arc<dyn Saver>,
    depth: Depth,
) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver.clone(), counts.clone(), depth);
    let config = RunConfig::thread("replay");
    let asked = d.desk.invoke(topic(), &config).await.unwrap();
    let asked = asked.interrupts().to_vec();
    assert_eq!(asked.len(), 1);
    let done = d.desk.resume(json!("yes"), &config).await.unwrap();
    assert_eq!(done.complete().unwrap().verdict, "yes");
    let before = (counts.of("outline"), counts.of("inspect"));
    assert_eq!(before, (1, usize::from(depth == Depth::Two)));

    let history = d
        .desk
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let paused = history
        .iter()
        .find(|s| s.next == ["write"])
        .expect("the checkpoint the write task paused at");
    assert_eq!(paused.interrupts, asked, "the pause is in the history");
    let replay = d.desk.continue_run(&paused.config).await.unwrap();
    let again = replay.interrupts().to_vec();
    assert_eq!(again.len(), 1, "the subgraph paused again: {replay:?}");
    let asker = match depth {
        Depth::One => "review",
        Depth::Two => "approve",
    };
    assert_eq!(again[0].node, asker);
    assert_eq!(again[0].value, asked[0].value);
    assert_eq!(
        (counts.of("outline"), counts.of("inspect")),
        before,
        "the subgraphs' finished nodes did not run again"
    );
    assert_eq!(counts.of("prepare"), 1);

    // The replay is the thread's head now; answering it finishes the branch.
    let branch = d.desk.resume(json!("no"), &config).await.unwrap();
    let branch = branch.complete().unwrap();
    assert_eq!(branch.verdict, "no");
    assert_eq!(branch.log, ["prepared", "written", "published"]);
    assert_eq!((counts.of("outline"), counts.of("inspect")), before);
    // The original branch is intact.
    let original = d.desk.get_state(&history[0].config).await.unwrap();
    assert_eq!(original.values.verdict, "yes");
    // Every namespace the replay wrote belongs to the thread: deleting it
    // leaves none.
    saver.delete_thread("replay").await.unwrap();
    assert!(namespaces(&saver, "replay").await.is_empty());
}

/// A fork (`fork_at`) of a thread paused inside a subgraph, one or two
/// levels deep, copies the subgraphs' namespaces: resumed on the fork, the
/// subgraph goes on from its pause (its finished nodes do not run again)
/// with the fork's answer, and the original stays paused for its own.
/// (Only the root namespace was copied: the subgraph ran from its start.)
pub async fn a_fork_resumes_a_paused_subgraph_where_it_paused(saver: Arc<dyn Saver>, depth: Depth) {
    use weaver::checkpoint::{CheckpointRef, ForkOptions};
    let counts = Arc::new(Counts::default());
    let d = desks(saver.clone(), counts.clone(), depth);
    let config = RunConfig::thread("forked");
    let asked = d.desk.invoke(topic(), &config).await.unwrap();
    assert_eq!(asked.interrupts().len(), 1, "{asked:?}");
    let head = d.desk.get_state(&config).await.unwrap();
    let id = head.config.get_checkpoint_id().unwrap().to_owned();
    saver
        .fork_at(
            &CheckpointRef::latest("forked").at(id),
            "branch",
            ForkOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        namespaces(&saver, "branch").await,
        namespaces(&saver, "forked").await
    );
    let before = (counts.of("outline"), counts.of("inspect"));
    let branch = RunConfig::thread("branch");
    let done = d.desk.resume(json!("no"), &branch).await.unwrap();
    let done = done.complete().unwrap();
    assert_eq!(done.verdict, "no");
    assert_eq!(done.log, ["prepared", "written", "published"]);
    assert_eq!(
        (counts.of("outline"), counts.of("inspect")),
        before,
        "the subgraphs' finished nodes did not run again"
    );
    let original = d.desk.resume(json!("yes"), &config).await.unwrap();
    assert_eq!(original.complete().unwrap().verdict, "yes");
}

/// A replay of a checkpoint whose task was not paused runs the subgraph
/// from its start, as the original run did.
pub async fn replaying_before_the_subgraph_ran_starts_it_over(saver: Arc<dyn Saver>) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver, counts.clone(), Depth::One);
    let config = RunConfig::thread("replay-early");
    d.desk.invoke(topic(), &config).await.unwrap();
    d.desk.resume(json!("yes"), &config).await.unwrap();
    let history = d
        .desk
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let early = history
        .iter()
        .find(|s| s.next == ["prepare"])
        .expect("the checkpoint before prepare");
    let replay = d.desk.continue_run(&early.config).await.unwrap();
    assert_eq!(replay.interrupts().len(), 1, "{replay:?}");
    assert_eq!(counts.of("outline"), 2, "a new subgraph run");
    assert_eq!(counts.of("prepare"), 2);
}

/// A replay of a parent checkpoint taken while a subgraph was paused, whose
/// first step failed before the subgraph ran: the run that goes on from the
/// replay's fork (now the thread's head) still finds the subgraph at its
/// pause, and its finished nodes do not run again. (Where the subgraph
/// paused was known to the replaying run only: the next run started it
/// over.)
pub async fn a_replay_that_failed_first_still_resumes_the_subgraph_at_its_pause(
    saver: Arc<dyn Saver>,
    depth: Depth,
) {
    let counts = Arc::new(Counts::default());
    let d = desks(saver.clone(), counts.clone(), depth);
    let config = RunConfig::thread(format!("replay-failed-{depth:?}"));
    let asked = d.desk.invoke(topic(), &config).await.unwrap();
    let asked = asked.interrupts().to_vec();
    assert_eq!(asked.len(), 1);
    d.desk.resume(json!("yes"), &config).await.unwrap();
    let before = (counts.of("outline"), counts.of("inspect"));

    let history = d
        .desk
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let paused = history
        .iter()
        .find(|s| s.next == ["write"])
        .expect("the checkpoint the write task paused at");
    counts.fail("write");
    let failed = d.desk.continue_run(&paused.config).await;
    assert!(failed.is_err(), "{failed:?}");
    counts.heal();
    let again = d.desk.continue_run(&config).await.unwrap();
    assert_eq!(again.interrupts().len(), 1, "paused again: {again:?}");
    assert_eq!(again.interrupts()[0].value, asked[0].value);
    assert_eq!(
        (counts.of("outline"), counts.of("inspect")),
        before,
        "the subgraphs' finished nodes did not run again"
    );
}
