//! Journaled side effects on a SQLite file and on PostgreSQL: a second
//! saver on its own pool stands for another process, and a worker killed
//! with SIGKILL after its effect was journaled is a real child process.

use std::sync::Arc;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use weaver::{Durability, Saver};
use weaver_tests::effects;

use crate::common::{PgDb, SqliteDb, pg_url};

async fn sqlite_pair(db: &SqliteDb) -> (Arc<dyn Saver>, Arc<dyn Saver>) {
    let a = db.saver().await;
    let b = db
        .saver_on(
            SqlitePoolOptions::new().max_connections(4),
            db.connect_options(),
        )
        .await;
    (Arc::new(a), Arc::new(b))
}

async fn pg_pair(db: &PgDb) -> (Arc<dyn Saver>, Arc<dyn Saver>) {
    let a = db.saver().await;
    let options = pg_url().parse().unwrap();
    let b = db
        .saver_on(PgPoolOptions::new().max_connections(4), options)
        .await;
    (Arc::new(a), Arc::new(b))
}

const DURABILITIES: [Durability; 3] = [Durability::Sync, Durability::Async, Durability::Exit];

#[tokio::test]
async fn an_effect_before_an_interrupt_runs_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::an_effect_before_an_interrupt_runs_once(a.clone(), b.clone(), &thread, durability)
            .await;
    }
}

#[tokio::test]
async fn an_effect_before_an_interrupt_runs_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::an_effect_before_an_interrupt_runs_once(a.clone(), b.clone(), &thread, durability)
            .await;
    }
    db.drop_schema().await;
}

#[tokio::test]
async fn a_retried_node_runs_its_effect_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    effects::a_retried_node_runs_its_effect_once(a, b, "t").await;
}

#[tokio::test]
async fn a_retried_node_runs_its_effect_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    effects::a_retried_node_runs_its_effect_once(a, b, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_run_cut_off_after_its_effect_is_finished_without_it_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    effects::a_run_cut_off_after_its_effect_is_finished_without_it(a, b, "t").await;
}

#[tokio::test]
async fn a_run_cut_off_after_its_effect_is_finished_without_it_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    effects::a_run_cut_off_after_its_effect_is_finished_without_it(a, b, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_killed_worker_is_finished_by_another_process_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let url = format!("sqlite://{}", db.path.display());
    let bin = env!("CARGO_BIN_EXE_weaver-effects");
    effects::a_killed_worker_is_finished_by_another_process(bin, &url, "-", saver).await;
}

#[tokio::test]
async fn a_killed_worker_is_finished_by_another_process_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let bin = env!("CARGO_BIN_EXE_weaver-effects");
    effects::a_killed_worker_is_finished_by_another_process(bin, &pg_url(), &db.schema, saver)
        .await;
    db.drop_schema().await;
}

#[tokio::test]
async fn forks_run_the_effect_again_unless_it_has_an_explicit_key_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::a_fork_from_before_the_node_runs_the_effect_again(a.clone(), "plain").await;
    effects::with_an_explicit_key_a_fork_does_not(a, "keyed").await;
}

#[tokio::test]
async fn forks_run_the_effect_again_unless_it_has_an_explicit_key_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::a_fork_from_before_the_node_runs_the_effect_again(a.clone(), "plain").await;
    effects::with_an_explicit_key_a_fork_does_not(a, "keyed").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn effect_errors_are_typed_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::effects_in_another_order_are_a_typed_error(a.clone(), "order").await;
    effects::unstorable_and_undecodable_results_are_typed_errors(a, "results").await;
}

#[tokio::test]
async fn effect_errors_are_typed_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::effects_in_another_order_are_a_typed_error(a.clone(), "order").await;
    effects::unstorable_and_undecodable_results_are_typed_errors(a, "results").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn the_journal_is_copied_and_deleted_with_its_thread_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::the_journal_is_copied_and_deleted_with_its_thread(a, "t").await;
}

#[tokio::test]
async fn the_journal_is_copied_and_deleted_with_its_thread_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::the_journal_is_copied_and_deleted_with_its_thread(a, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn an_effect_in_a_subgraph_runs_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::an_effect_in_a_subgraph_runs_once(a, "t").await;
}

#[tokio::test]
async fn an_effect_in_a_subgraph_runs_once_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::an_effect_in_a_subgraph_runs_once(a, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_damaged_journal_entry_is_a_decode_error_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, _) = sqlite_pair(&db).await;
    effects::a_damaged_journal_entry_is_a_decode_error(a, "t").await;
}

#[tokio::test]
async fn a_damaged_journal_entry_is_a_decode_error_on_postgres() {
    let db = PgDb::new().await;
    let (a, _) = pg_pair(&db).await;
    effects::a_damaged_journal_entry_is_a_decode_error(a, "t").await;
    db.drop_schema().await;
}

/// The `charge` node: an effect counted in the run's context, its key
/// kept in `foo`.
async fn charge(
    _: &weaver_tests::states::Steps,
    rt: &weaver::Runtime,
) -> Result<weaver_tests::states::StepsUpdate, weaver::NodeError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ran = rt
        .context::<Arc<AtomicUsize>>()
        .cloned()
        .ok_or_else(|| weaver::NodeError::msg("no counter"))?;
    let key: String = rt
        .effect("charge", |key| async move {
            ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(key)
        })
        .await?;
    Ok(weaver_tests::states::StepsUpdate::default().foo(key))
}

/// Under `Async` durability an effect's key comes from its task's
/// checkpoint, which may still be queued when the node runs: the effect
/// waits until that checkpoint is stored before it runs, so a process that
/// dies (or a write that fails) meanwhile cannot leave an effect done under
/// a key no stored checkpoint gives again. Checkpoint writes are held back
/// here: the effect has not run while they are.
async fn an_effect_waits_for_its_checkpoint(saver: Arc<dyn Saver>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weaver::prelude::*;
    use weaver_tests::forwarding::Forwarding;
    use weaver_tests::states::{Steps, StepsUpdate};
    let held = Arc::new(Forwarding::leasing(saver));
    let gate = held.gate_writes();
    let ran = Arc::new(AtomicUsize::new(0));
    let graph = Graph::<Steps>::new("charges")
        .add_node("prep", |_: &Steps| StepsUpdate::default().bar(["prep"]))
        .add_node("charge", charge)
        .add_sequence([START, "prep", "charge", END])
        .compile(Compile::new().checkpointer_arc(held.clone()))
        .unwrap();
    let config = RunConfig::thread("t")
        .durability(Durability::Async)
        .with_context(ran.clone());
    let run = tokio::spawn({
        let (graph, config) = (graph.clone(), config.clone());
        async move { graph.invoke(Steps::default(), &config).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the effect ran before its checkpoint was stored"
    );
    gate.open.add_permits(1_000);
    let done = run.await.unwrap().unwrap().complete().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(!done.foo.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_waits_for_its_checkpoint_on_sqlite() {
    let db = SqliteDb::new().await;
    an_effect_waits_for_its_checkpoint(Arc::new(db.saver().await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_waits_for_its_checkpoint_on_postgres() {
    let db = PgDb::new().await;
    an_effect_waits_for_its_checkpoint(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

/// A background write that fails before an effect's checkpoint is stored
/// refuses the effect, and the run reports the write's own error (the
/// cause), not the refused effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_effect_reports_the_failed_write() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use weaver::prelude::*;
    use weaver_tests::forwarding::Forwarding;
    use weaver_tests::states::{Steps, StepsUpdate};
    let db = SqliteDb::new().await;
    let failing = Arc::new(Forwarding::leasing(Arc::new(db.saver().await)));
    let ran = Arc::new(AtomicUsize::new(0));
    let graph = Graph::<Steps>::new("charges")
        .add_node("prep", {
            let failing = failing.clone();
            move |_: &Steps| {
                failing.fail_groups.store(true, Ordering::SeqCst);
                StepsUpdate::default().bar(["prep"])
            }
        })
        .add_node("charge", charge)
        .add_sequence([START, "prep", "charge", END])
        .compile(Compile::new().checkpointer_arc(failing.clone()))
        .unwrap();
    let config = RunConfig::thread("t")
        .durability(Durability::Async)
        .multitask(weaver::config::Multitask::Race)
        .with_context(ran.clone());
    let e = graph.invoke(Steps::default(), &config).await.unwrap_err();
    assert!(
        matches!(&e, weaver::Error::Storage { op, .. } if *op == "put_ops"),
        "{e:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the effect ran");
}

/// An effect in a subgraph's task waits until the checkpoint its parent's
/// task started from is stored (the subgraph's namespace, and so the
/// effect's key, comes from that task's id): when the parent's background
/// write fails, the effect does not run. (It ran under a key no stored
/// checkpoint gives again, so the next run did it a second time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_in_a_subgraph_waits_for_its_parents_checkpoint() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use weaver::prelude::*;
    use weaver_tests::forwarding::Forwarding;
    use weaver_tests::states::{Steps, StepsUpdate};
    let db = SqliteDb::new().await;
    let failing = Arc::new(Forwarding::leasing(Arc::new(db.saver().await)));
    let ran = Arc::new(AtomicUsize::new(0));
    let paying = Arc::new(AtomicBool::new(false));
    let inner = Graph::<Steps>::new("inner")
        .add_node("charge", charge)
        .add_sequence([START, "charge", END])
        .compile(Compile::new())
        .unwrap();
    // The parent's checkpoints are held until its `pay` task has begun,
    // then their write fails.
    let gate = failing.gate_root_groups();
    let outer = Graph::<Steps>::new("outer")
        .add_node("prep", |_: &Steps| StepsUpdate::default().bar(["prep"]))
        .add_node("pay", {
            let paying = paying.clone();
            move |_: &Steps, rt: &Runtime| {
                paying.store(true, Ordering::SeqCst);
                let call = rt.subgraph(&inner);
                async move {
                    let done = call.invoke(Steps::default()).await?;
                    Ok::<_, NodeError>(StepsUpdate::default().foo(done.foo))
                }
            }
        })
        .add_sequence([START, "prep", "pay", END])
        .compile(Compile::new().checkpointer_arc(failing.clone()))
        .unwrap();
    let config = RunConfig::thread("t")
        .durability(Durability::Async)
        .multitask(weaver::config::Multitask::Race)
        .with_context(ran.clone());
    let run = tokio::spawn({
        let (outer, config) = (outer.clone(), config.clone());
        async move { outer.invoke(Steps::default(), &config).await }
    });
    gate.entered.notified().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !paying.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < deadline, "`pay` never began");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    failing.fail_root_groups.store(true, Ordering::SeqCst);
    gate.open.add_permits(1_000);
    let e = run.await.unwrap().unwrap_err();
    assert!(matches!(&e, weaver::Error::Storage { .. }), "{e:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the effect ran");
    // Nor does the subgraph store its run under a task of a checkpoint
    // that was never stored (out of every later run's reach). (It did.)
    let stored = failing
        .inner
        .list_stored(&weaver::checkpoint::ListFilter::thread("t"))
        .await
        .unwrap();
    assert!(
        stored.iter().all(|t| t.config.checkpoint_ns.is_empty()),
        "{:?}",
        stored
            .iter()
            .map(|t| &t.config.checkpoint_ns)
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_on_resume_on_sqlite() {
    let db = SqliteDb::new().await;
    let (a, b) = sqlite_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::a_finished_subgraph_is_not_run_again_on_resume(
            a.clone(),
            b.clone(),
            &thread,
            durability,
        )
        .await;
    }
}

#[tokio::test]
async fn a_finished_subgraph_is_not_run_again_on_resume_on_postgres() {
    let db = PgDb::new().await;
    let (a, b) = pg_pair(&db).await;
    for (i, durability) in DURABILITIES.into_iter().enumerate() {
        let thread = format!("t{i}");
        effects::a_finished_subgraph_is_not_run_again_on_resume(
            a.clone(),
            b.clone(),
            &thread,
            durability,
        )
        .await;
    }
    db.drop_schema().await;
}
