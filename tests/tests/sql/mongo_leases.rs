//! One run per thread at a time on MongoDB: the shared lease suite, lease
//! documents damaged in the database, and racing acquirers. The suite runs
//! under [`leases::patient`] lease times here: the test server (Python,
//! sharing two cores with the whole test run) can take longer than a short
//! lease's renewal period to answer one call. None of these tests runs
//! beside the saver conformance suite, whose largest records stall that
//! server for seconds (`weaver_tests::mongo::lease_timed`).

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{Document, doc};
use weaver::checkpoint::{Acquired, LeaseRequest, Leases};
use weaver::mongo::MongoSaver;
use weaver::{Error, Saver};
use weaver_tests::leases;
use weaver_tests::mongo::MongoDb;

/// Runs `case` on a saver of a fresh database, set up, then drops it.
async fn on_mongo<F: Future<Output = ()>>(case: impl FnOnce(Arc<dyn Saver>) -> F) {
    let _timed = weaver_tests::mongo::lease_timed().await;
    let db = MongoDb::new().await;
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    saver.setup().await.unwrap();
    case(Arc::new(saver)).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_refuses_a_second_run_on_mongo() {
    on_mongo(|s| leases::reject_refuses_a_second_run(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_serves_runs_in_arrival_order_on_mongo() {
    on_mongo(|s| leases::enqueue_serves_runs_in_arrival_order_with(s, "t", leases::patient()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_keeps_the_stopped_turn_on_mongo() {
    on_mongo(|s| leases::interrupt_keeps_the_stopped_turn_with(s, "t", leases::patient())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_removes_the_stopped_turn_on_mongo() {
    on_mongo(|s| leases::rollback_removes_the_stopped_turn_with(s, "t", leases::patient())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_with_no_wait_fails_at_once_on_mongo() {
    on_mongo(|s| leases::enqueue_with_no_wait_fails_at_once(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_is_taken_over_and_finished_on_mongo() {
    on_mongo(|s| leases::a_dead_holder_is_taken_over_and_finished(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_lease_stops_on_mongo() {
    on_mongo(|s| leases::a_run_that_lost_its_lease_stops(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_lost_and_stopped_holder_paths_on_mongo() {
    on_mongo(|s| leases::stopped_and_dead_holders_are_told_apart(s, "t")).await;
    on_mongo(|s| leases::a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_expired_leases_are_refused_on_mongo() {
    on_mongo(|s| leases::foreign_and_expired_leases_are_refused(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_gives_up_takes_its_stop_request_back_on_mongo() {
    on_mongo(|s| leases::a_run_that_gives_up_takes_its_stop_request_back(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_holders_resume_stops_when_asked_to_on_mongo() {
    on_mongo(|s| leases::a_named_holders_resume_stops_when_asked_to(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_lasts_its_own_lease_time_on_mongo() {
    on_mongo(|s| leases::a_ticket_lasts_its_own_lease_time(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_as_asked_is_not_taken_for_dead_on_mongo() {
    on_mongo(|s| leases::a_holder_stopped_as_asked_is_not_taken_for_dead(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_stop_that_pauses_stops_on_mongo() {
    on_mongo(|s| leases::a_run_asked_to_stop_that_pauses_stops(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_while_it_takes_its_request_back_still_does_on_mongo() {
    on_mongo(|s| leases::a_run_dropped_while_it_takes_its_request_back_still_does(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stop_request_leaves_the_queue_on_mongo() {
    on_mongo(|s| leases::a_failed_stop_request_leaves_the_queue(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_named_holders_static_stop_is_removed_not_run_on_mongo() {
    on_mongo(|s| leases::a_dead_named_holders_static_stop_is_removed_not_run(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_named_holder_keeps_the_thread_on_mongo() {
    on_mongo(|s| leases::a_paused_named_holder_keeps_the_thread(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_pause_stays_unless_it_owned_it_on_mongo() {
    on_mongo(|s| leases::a_dead_holders_pause_stays_unless_it_owned_it(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_resume_keeps_its_turns_base_on_mongo() {
    on_mongo(|s| leases::a_holders_resume_keeps_its_turns_base_with(s, "t", leases::patient()))
        .await;
}

/// A lease document whose fields are not what weaver writes is a typed
/// decode error naming the thread, on every call that reads it; nothing is
/// changed by the refused call.
#[tokio::test]
async fn damaged_lease_documents_are_decode_errors_on_mongo() {
    let db = MongoDb::new().await;
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    saver.setup().await.unwrap();
    let coll = db
        .client
        .database(&db.name)
        .collection::<Document>("w_leases");
    saver.acquire(&leases::ask("a")).await.unwrap();
    let named = |e: &Error| matches!(e, Error::Decode { what, .. } if what.contains("`t`"));
    for damage in [
        doc! { "$set": { "stop": "sideways", "expires_at": 0_i64 } },
        doc! { "$set": { "expires_at": "soon" } },
        doc! { "$set": { "holder": 7_i64 } },
        doc! { "$set": { "owns_pause": "yes" } },
        doc! { "$set": { "stop": "rollback", "expires_at": 0_i64, "base_order": -5_i64 } },
    ] {
        let saved = coll.find_one(doc! {}).await.unwrap().unwrap();
        coll.update_one(doc! { "_id": "t" }, damage.clone())
            .await
            .unwrap();
        let e = saver.acquire(&leases::ask("b")).await.unwrap_err();
        assert!(named(&e), "{damage}: {e:?}");
        coll.replace_one(doc! { "_id": "t" }, saved).await.unwrap();
    }
    coll.update_one(
        doc! { "_id": "t" },
        doc! { "$set": { "base_order": "low" } },
    )
    .await
    .unwrap();
    let e = saver.lease_info("t").await.unwrap_err();
    assert!(named(&e), "{e:?}");
    let e = saver
        .renew("t", "a", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(named(&e), "{e:?}");
    coll.update_one(
        doc! { "_id": "t" },
        doc! { "$set": { "base_order": 0_i64 } },
    )
    .await
    .unwrap();
    let info = saver.lease_info("t").await.unwrap().unwrap();
    assert_eq!(info.holder, "a", "unchanged");
    db.drop_db().await;
}

/// Eight runs asking for one free thread at once, from eight handles (each
/// its own connection pool, as eight processes would): exactly one holds
/// it; those that queued hold tickets served in order, each taking the
/// thread in turn once the holder before it gave it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_acquirers_one_holds_the_rest_queue_on_mongo() {
    let _timed = weaver_tests::mongo::lease_timed().await;
    let db = MongoDb::new().await;
    MongoSaver::new(db.client.clone(), &db.name, "w_")
        .setup()
        .await
        .unwrap();
    let url = weaver_tests::mongo::mongo_url();
    let mut savers = Vec::new();
    for _ in 0..8 {
        savers.push(MongoSaver::connect(&url, &db.name, "w_").await.unwrap());
    }
    let names: Vec<String> = (0..8).map(|i| format!("run-{i}")).collect();
    let answers = futures_util::future::join_all(savers.iter().zip(&names).map(|(s, n)| async {
        s.acquire(&LeaseRequest {
            queue: true,
            ..leases::ask(n)
        })
        .await
    }))
    .await;
    let mut held = Vec::new();
    let mut queued = Vec::new();
    for (answer, name) in answers.into_iter().zip(&names) {
        match answer.unwrap() {
            Acquired::Held { .. } => held.push(name.clone()),
            Acquired::Busy {
                ticket: Some(k), ..
            } => queued.push((k, name.clone())),
            other => panic!("{name}: {other:?}"),
        }
    }
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(queued.len(), 7);
    queued.sort();
    let tickets: Vec<i64> = queued.iter().map(|(k, _)| *k).collect();
    let mut unique = tickets.clone();
    unique.dedup();
    assert_eq!(unique, tickets, "tickets are distinct");
    let saver = &savers[0];
    let mut holder = held[0].clone();
    for (k, name) in &queued {
        // Not the first in line: busy, even with the thread given back.
        saver.release("t", &holder, None).await.unwrap();
        if let Some((_, later)) = queued.iter().find(|(j, _)| j > k) {
            let early = saver
                .acquire(&LeaseRequest {
                    queue: true,
                    ticket: queued.iter().find(|(_, n)| n == later).map(|(j, _)| *j),
                    ..leases::ask(later)
                })
                .await
                .unwrap();
            assert!(
                matches!(early, Acquired::Busy { .. }),
                "{later} jumped the queue"
            );
        }
        let mine = saver
            .acquire(&LeaseRequest {
                queue: true,
                ticket: Some(*k),
                ..leases::ask(name)
            })
            .await
            .unwrap();
        assert!(matches!(mine, Acquired::Held { .. }), "{name}: {mine:?}");
        holder = name.clone();
    }
    assert_eq!(saver.lease_info("t").await.unwrap().unwrap().queued, 0);
    db.drop_db().await;
}

/// Lease calls cut off at any point (here every 100 µs up to 15 ms into
/// them, as a run's renewal is when the run ends) leave no transaction
/// open on the server: another process's calls on the thread, made right
/// after each, answer at once and never fail (a transaction left open
/// would hold the lease document, and their calls would meet write
/// conflicts until the server ended it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_calls_cut_off_leave_no_transaction_open_on_mongo() {
    use weaver_tests::cut_off;
    let _timed = weaver_tests::mongo::lease_timed().await;
    let db = MongoDb::new().await;
    let saver = MongoSaver::new(db.client.clone(), &db.name, "w_");
    saver.setup().await.unwrap();
    let url = weaver_tests::mongo::mongo_url();
    let other = MongoSaver::connect(&url, &db.name, "w_").await.unwrap();
    // A call meeting a transaction left open would run again until the
    // server's transaction time limit (60 s) ended it.
    let soon = Duration::from_secs(10);
    for step in 0..150u64 {
        let after = Duration::from_micros(step * 100);
        cut_off(saver.acquire(&leases::ask("a")), after).await;
        tokio::time::timeout(soon, other.release("t", "a", None))
            .await
            .unwrap_or_else(|_| panic!("an acquire cut off at {after:?} left the thread locked"))
            .unwrap_or_else(|e| panic!("after an acquire cut off at {after:?}: {e}"));
        cut_off(saver.renew("t", "b", Duration::from_secs(30)), after).await;
        tokio::time::timeout(soon, other.acquire(&leases::ask("b")))
            .await
            .unwrap_or_else(|_| panic!("a renewal cut off at {after:?} left the thread locked"))
            .unwrap_or_else(|e| panic!("after a renewal cut off at {after:?}: {e}"));
        other.release("t", "b", None).await.unwrap();
    }
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_numbers_are_never_handed_out_twice_on_mongo() {
    on_mongo(|s| leases::ticket_numbers_are_never_handed_out_twice(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_thread_forgets_its_holder_on_mongo() {
    on_mongo(|s| leases::a_deleted_thread_forgets_its_holder(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_resume_leaves_the_pause_to_the_next_on_mongo() {
    on_mongo(|s| leases::a_rolled_back_resume_leaves_the_pause_to_the_next(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_below_the_base_lowers_it_on_mongo() {
    on_mongo(|s| leases::a_truncate_below_the_base_lowers_it(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_base_is_not_put_back_as_it_was_on_mongo() {
    on_mongo(|s| leases::a_rewritten_base_is_not_put_back_as_it_was(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_gives_its_lease_back_once_its_writes_land_on_mongo() {
    on_mongo(|s| leases::a_cancelled_run_gives_its_lease_back_once_its_writes_land(s, "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_to_a_pruned_base_keeps_the_turn_on_mongo() {
    on_mongo(|s| leases::a_rollback_to_a_pruned_base_keeps_the_turn(s, "t")).await;
}
