//! One run per thread at a time on a SQLite file and on PostgreSQL: the
//! shared lease suite, and lease rows damaged in the database.

use std::sync::Arc;
use std::time::Duration;

use weaver::checkpoint::Leases;
use weaver::{Error, Saver};
use weaver_tests::{cut_off, leases};

use crate::common::{Forwarding, PgDb, SqliteDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_a_second_run_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::reject_refuses_a_second_run(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_a_second_run_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::reject_refuses_a_second_run(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_serves_runs_in_arrival_order_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::enqueue_serves_runs_in_arrival_order(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_serves_runs_in_arrival_order_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::enqueue_serves_runs_in_arrival_order(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_with_no_wait_fails_at_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::enqueue_with_no_wait_fails_at_once(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_with_no_wait_fails_at_once_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::enqueue_with_no_wait_fails_at_once(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_keeps_the_stopped_turn_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::interrupt_keeps_the_stopped_turn(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_keeps_the_stopped_turn_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::interrupt_keeps_the_stopped_turn(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_removes_the_stopped_turn_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::rollback_removes_the_stopped_turn(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_removes_the_stopped_turn_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::rollback_removes_the_stopped_turn(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_is_taken_over_and_finished_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_holder_is_taken_over_and_finished(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_is_taken_over_and_finished_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_holder_is_taken_over_and_finished(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_lease_stops_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_that_lost_its_lease_stops(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_lease_stops_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_that_lost_its_lease_stops(saver, "t").await;
    db.drop_schema().await;
}

/// Runs `case` on a SQLite file, then on a PostgreSQL schema.
async fn on_both_databases<F, Fut>(case: F)
where
    F: Fn(Arc<dyn Saver>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let db = SqliteDb::new().await;
    case(Arc::new(db.saver().await)).await;
    let db = PgDb::new().await;
    case(Arc::new(db.saver().await)).await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished_on_both_databases() {
    on_both_databases(|s| leases::a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished(s, "t"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_and_dead_holders_are_told_apart_on_both_databases() {
    on_both_databases(|s| leases::stopped_and_dead_holders_are_told_apart(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_expired_leases_are_refused_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::foreign_and_expired_leases_are_refused(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_expired_leases_are_refused_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::foreign_and_expired_leases_are_refused(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_gives_up_takes_its_stop_request_back_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_that_gives_up_takes_its_stop_request_back(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_gives_up_takes_its_stop_request_back_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_that_gives_up_takes_its_stop_request_back(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_holders_resume_stops_when_asked_to_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_named_holders_resume_stops_when_asked_to(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_holders_resume_stops_when_asked_to_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_named_holders_resume_stops_when_asked_to(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_lasts_its_own_lease_time_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_ticket_lasts_its_own_lease_time(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_lasts_its_own_lease_time_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_ticket_lasts_its_own_lease_time(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_as_asked_is_not_taken_for_dead_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_holder_stopped_as_asked_is_not_taken_for_dead(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_as_asked_is_not_taken_for_dead_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_holder_stopped_as_asked_is_not_taken_for_dead(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_stop_that_pauses_stops_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_asked_to_stop_that_pauses_stops(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_stop_that_pauses_stops_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_asked_to_stop_that_pauses_stops(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_while_it_takes_its_request_back_still_does_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_dropped_while_it_takes_its_request_back_still_does(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_while_it_takes_its_request_back_still_does_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_dropped_while_it_takes_its_request_back_still_does(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stop_request_leaves_the_queue_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_failed_stop_request_leaves_the_queue(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stop_request_leaves_the_queue_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_failed_stop_request_leaves_the_queue(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_named_holder_keeps_the_thread_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_paused_named_holder_keeps_the_thread(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_named_holder_keeps_the_thread_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_paused_named_holder_keeps_the_thread(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_named_holders_static_stop_is_removed_not_run_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_named_holders_static_stop_is_removed_not_run(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_named_holders_static_stop_is_removed_not_run_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_named_holders_static_stop_is_removed_not_run(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_pause_stays_unless_it_owned_it_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_holders_pause_stays_unless_it_owned_it(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_pause_stays_unless_it_owned_it_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dead_holders_pause_stays_unless_it_owned_it(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_resume_keeps_its_turns_base_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_holders_resume_keeps_its_turns_base(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_resume_keeps_its_turns_base_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_holders_resume_keeps_its_turns_base(saver, "t").await;
    db.drop_schema().await;
}

/// A lease row whose stop request is not one weaver writes is a typed
/// decode error naming the thread, on every call that reads it; a negative
/// base order of a row taken over is one too. Nothing is changed.
async fn damaged_rows(saver: &dyn Leases, corrupt: impl AsyncFn(&str)) {
    saver.acquire(&leases::ask("a")).await.unwrap();
    corrupt("UPDATE {p}weaver_thread_leases SET stop = 'sideways', expires_at = 0").await;
    let e = saver.acquire(&leases::ask("b")).await.unwrap_err();
    assert!(
        matches!(&e, Error::Decode { what, .. } if what.contains("`t`")),
        "{e:?}"
    );
    let e = saver.lease_info("t").await.unwrap_err();
    assert!(matches!(e, Error::Decode { .. }), "{e:?}");
    corrupt("UPDATE {p}weaver_thread_leases SET stop = 'rollback', base_order = -5").await;
    let e = saver.acquire(&leases::ask("b")).await.unwrap_err();
    assert!(matches!(e, Error::Decode { .. }), "{e:?}");
    let info = saver.lease_info("t").await.unwrap().unwrap();
    assert_eq!(info.holder, "a", "unchanged");
}

#[tokio::test]
async fn damaged_lease_rows_are_decode_errors_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver = db.saver().await;
    let pool = db.pool.clone();
    damaged_rows(&saver, async |sql: &str| {
        sqlx::query(sqlx::AssertSqlSafe(sql.replace("{p}", "")))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn damaged_lease_rows_are_decode_errors_on_postgres() {
    let db = PgDb::new().await;
    let saver = db.saver().await;
    let prefix = format!("\"{}\".", db.schema);
    damaged_rows(&saver, async |sql: &str| {
        sqlx::query(sqlx::AssertSqlSafe(sql.replace("{p}", &prefix)))
            .execute(&db.pool)
            .await
            .unwrap();
    })
    .await;
    db.drop_schema().await;
}

/// Lease calls relax the disk sync of their own commits on the pooled
/// connection; a call cut off at any point (here every 10 µs up to 3 ms
/// into it) leaves no connection of the pool with the relaxed level: each
/// is closed or restored, and the pool's writes keep waiting for the disk.
// Two workers: a connection given back to the pool is returned by a task
// of its own, which must run while the cut-off call is being polled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_calls_leave_the_pools_connections_synced_on_sqlite() {
    let db = SqliteDb::new().await;
    let one = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1);
    let saver = db.saver_on(one, db.connect_options()).await;
    let synchronous = async || -> i64 {
        sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(saver.pool())
            .await
            .unwrap()
    };
    assert_eq!(synchronous().await, 2, "FULL to begin with");
    let mut finished = 0;
    for step in 0..300u64 {
        let after = Duration::from_micros(step * 10);
        cut_off(saver.acquire(&leases::ask("a")), after).await;
        assert_eq!(synchronous().await, 2, "acquire cut off after {after:?}");
        cut_off(saver.renew("t", "a", Duration::from_secs(30)), after).await;
        assert_eq!(synchronous().await, 2, "renew cut off after {after:?}");
        cut_off(saver.release("t", "a", None), after).await;
        assert_eq!(synchronous().await, 2, "release cut off after {after:?}");
        if saver.lease_info("t").await.unwrap().is_none() {
            finished += 1;
        }
    }
    // Whole calls too: taken and given back, the level restored.
    saver.acquire(&leases::ask("a")).await.unwrap();
    saver.release("t", "a", None).await.unwrap();
    assert_eq!(synchronous().await, 2);
    assert!(finished > 0, "no release ran to its end");
}

/// A run cut off while it gives its lease back (its stream dropped as the
/// release call is under way) still gives it back: the release runs to its
/// end in the background and the next call on the thread, under `Reject`,
/// is not refused as busy until the lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_while_giving_its_lease_back_still_gives_it_back_on_sqlite() {
    use futures_util::StreamExt;
    use weaver_tests::states::Steps;
    let db = SqliteDb::new().await;
    let mut forwarding = Forwarding::on(Arc::new(db.saver().await));
    forwarding.forward_leases = true;
    let gate = forwarding.gate_release();
    let saver: Arc<dyn Saver> = Arc::new(forwarding);
    let g = crate::common::two_step(saver.clone());
    let config = weaver::RunConfig::thread("t");
    let mut stream = g.stream(Steps::default(), &config);
    loop {
        tokio::select! {
            _ = gate.entered.notified() => break,
            item = stream.next() => {
                assert!(item.is_some(), "the run ended before giving its lease back");
            }
        }
    }
    drop(stream);
    gate.open.add_permits(1_000);
    let next = g.invoke(Steps::default(), &config).await;
    assert!(next.is_ok(), "{next:?}");
    let leases = saver.leases().expect("forwarded");
    assert!(
        leases.lease_info("t").await.unwrap().is_none(),
        "given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_numbers_are_never_handed_out_twice_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::ticket_numbers_are_never_handed_out_twice(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_numbers_are_never_handed_out_twice_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::ticket_numbers_are_never_handed_out_twice(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_never_rolled_back_as_stopped_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_finished_run_is_never_rolled_back_as_stopped(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_at_the_end_of_a_slow_call_is_renewed_at_once_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_lease_taken_at_the_end_of_a_slow_call_is_renewed_at_once(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_thread_forgets_its_holder_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_deleted_thread_forgets_its_holder(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_thread_forgets_its_holder_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_deleted_thread_forgets_its_holder(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_resume_leaves_the_pause_to_the_next_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rolled_back_resume_leaves_the_pause_to_the_next(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_resume_leaves_the_pause_to_the_next_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rolled_back_resume_leaves_the_pause_to_the_next(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_below_the_base_lowers_it_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_truncate_below_the_base_lowers_it(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_below_the_base_lowers_it_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_truncate_below_the_base_lowers_it(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_base_is_not_put_back_as_it_was_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rewritten_base_is_not_put_back_as_it_was(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_base_is_not_put_back_as_it_was_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rewritten_base_is_not_put_back_as_it_was(saver, "t").await;
    db.drop_schema().await;
}

/// A delete racing an acquire on a thread no lease row names: the delete
/// holds the thread's lease key until it commits, so the acquire waits for
/// it and takes the emptied thread, not the deleted head as its base (with
/// a copy of that head's writes to put back on a rollback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_racing_an_acquire_on_a_free_thread_leaves_no_old_base_on_postgres() {
    use sqlx::{Connection, Executor};
    use weaver::RunConfig;
    use weaver::checkpoint::Acquired;
    use weaver_tests::leases::{TalkUpdate, plain, turns};
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    let g = turns(saver.clone(), Duration::ZERO, Arc::default());
    for u in ["a", "b"] {
        g.invoke(
            TalkUpdate::default().messages(vec![u.to_owned()]),
            &RunConfig::thread("t"),
        )
        .await
        .unwrap();
    }
    let s = &db.schema;
    // Another session holds the thread's checkpoints: the delete stops
    // there, part way through its transaction.
    let mut blocker = sqlx::PgConnection::connect(&crate::common::pg_url())
        .await
        .unwrap();
    blocker.execute("BEGIN").await.unwrap();
    blocker
        .execute(sqlx::AssertSqlSafe(format!(
            "SELECT 1 FROM \"{s}\".weaver_checkpoints WHERE thread_id = 't' FOR UPDATE"
        )))
        .await
        .unwrap();
    let delete = tokio::spawn({
        let saver = saver.clone();
        async move { saver.delete_thread("t").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let acquire = tokio::spawn({
        let saver = saver.clone();
        async move {
            let leases = saver.leases().unwrap();
            leases
                .acquire(&plain("t", "h", Duration::from_secs(30)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.execute("COMMIT").await.unwrap();
    delete.await.unwrap().unwrap();
    let got = acquire.await.unwrap().unwrap();
    assert!(matches!(got, Acquired::Held { .. }), "{got:?}");
    let (base,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT base_order FROM \"{s}\".weaver_thread_leases WHERE thread_id = 't'"
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (copies,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{s}\".weaver_lease_bases WHERE thread_id = 't'"
    )))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (base, copies),
        (0, 0),
        "the holder of the emptied thread keeps no base of the deleted one"
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_dropped_as_it_gives_back_is_not_rolled_back_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_finished_run_dropped_as_it_gives_back_is_not_rolled_back(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_dropped_as_it_gives_back_is_not_rolled_back_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_finished_run_dropped_as_it_gives_back_is_not_rolled_back(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_gives_its_lease_back_once_its_writes_land_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_cancelled_run_gives_its_lease_back_once_its_writes_land(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_gives_its_lease_back_once_its_writes_land_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_cancelled_run_gives_its_lease_back_once_its_writes_land(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test]
async fn a_rollback_to_a_pruned_base_keeps_the_turn_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rollback_to_a_pruned_base_keeps_the_turn(saver, "t").await;
}

#[tokio::test]
async fn a_rollback_to_a_pruned_base_keeps_the_turn_on_postgres() {
    let db = PgDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_rollback_to_a_pruned_base_keeps_the_turn(saver, "t").await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_stop_stops_inside_its_subgraph_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_run_asked_to_stop_stops_inside_its_subgraph(saver, "t").await;
}

#[tokio::test]
async fn a_thread_truncated_to_nothing_is_gone_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_thread_truncated_to_nothing_is_gone(saver, "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiting_run_leaves_no_ticket_on_sqlite() {
    let db = SqliteDb::new().await;
    let saver: Arc<dyn Saver> = Arc::new(db.saver().await);
    leases::a_dropped_waiting_run_leaves_no_ticket(saver, "t").await;
}
