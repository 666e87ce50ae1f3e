//! One run per thread at a time on the in-memory saver (in process).

use std::sync::Arc;

use weaver::{InMemorySaver, Saver};
use weaver_tests::leases;

fn memory() -> Arc<dyn Saver> {
    Arc::new(InMemorySaver::new())
}

#[tokio::test]
async fn reject_refuses_a_second_run_in_memory() {
    leases::reject_refuses_a_second_run(memory(), "t").await;
}

#[tokio::test]
async fn enqueue_serves_runs_in_arrival_order_in_memory() {
    leases::enqueue_serves_runs_in_arrival_order(memory(), "t").await;
}

#[tokio::test]
async fn enqueue_with_no_wait_fails_at_once_in_memory() {
    leases::enqueue_with_no_wait_fails_at_once(memory(), "t").await;
}

#[tokio::test]
async fn interrupt_keeps_the_stopped_turn_in_memory() {
    leases::interrupt_keeps_the_stopped_turn(memory(), "t").await;
}

#[tokio::test]
async fn rollback_removes_the_stopped_turn_in_memory() {
    leases::rollback_removes_the_stopped_turn(memory(), "t").await;
}

#[tokio::test]
async fn a_dead_holder_is_taken_over_and_finished_in_memory() {
    leases::a_dead_holder_is_taken_over_and_finished(memory(), "t").await;
}

#[tokio::test]
async fn a_run_that_lost_its_lease_stops_in_memory() {
    leases::a_run_that_lost_its_lease_stops(memory(), "t").await;
}

#[tokio::test]
async fn a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished_in_memory() {
    leases::a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished(memory(), "t").await;
}

#[tokio::test]
async fn stopped_and_dead_holders_are_told_apart_in_memory() {
    leases::stopped_and_dead_holders_are_told_apart(memory(), "t").await;
}

#[tokio::test]
async fn foreign_and_expired_leases_are_refused_in_memory() {
    leases::foreign_and_expired_leases_are_refused(memory(), "t").await;
}

#[tokio::test]
async fn a_dead_named_holders_static_stop_is_removed_not_run_in_memory() {
    leases::a_dead_named_holders_static_stop_is_removed_not_run(memory(), "t").await;
}

#[tokio::test]
async fn a_dead_named_holders_resumed_turn_is_finished_in_memory() {
    leases::a_dead_named_holders_resumed_turn_is_finished(memory(), "t").await;
}

#[tokio::test]
async fn an_expected_head_is_checked_before_a_dead_turn_is_finished_in_memory() {
    leases::an_expected_head_is_checked_before_a_dead_turn_is_finished(memory(), "t").await;
}

#[tokio::test]
async fn a_run_that_cannot_run_asks_nothing_of_the_holder_in_memory() {
    leases::a_run_that_cannot_run_asks_nothing_of_the_holder(memory(), "t").await;
}

#[tokio::test]
async fn a_paused_named_holder_keeps_the_thread_in_memory() {
    leases::a_paused_named_holder_keeps_the_thread(memory(), "t").await;
}

#[tokio::test]
async fn a_dead_holders_pause_stays_unless_it_owned_it_in_memory() {
    leases::a_dead_holders_pause_stays_unless_it_owned_it(memory(), "t").await;
}

#[tokio::test]
async fn a_holders_resume_keeps_its_turns_base_in_memory() {
    leases::a_holders_resume_keeps_its_turns_base(memory(), "t").await;
}

#[tokio::test]
async fn ticket_numbers_are_never_handed_out_twice_in_memory() {
    leases::ticket_numbers_are_never_handed_out_twice(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_never_rolled_back_as_stopped_in_memory() {
    leases::a_finished_run_is_never_rolled_back_as_stopped(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_at_the_end_of_a_slow_call_is_renewed_at_once_in_memory() {
    leases::a_lease_taken_at_the_end_of_a_slow_call_is_renewed_at_once(memory(), "t").await;
}

#[tokio::test]
async fn a_run_that_gives_up_takes_its_stop_request_back_in_memory() {
    leases::a_run_that_gives_up_takes_its_stop_request_back(memory(), "t").await;
}

#[tokio::test]
async fn a_named_holders_resume_stops_when_asked_to_in_memory() {
    leases::a_named_holders_resume_stops_when_asked_to(memory(), "t").await;
}

#[tokio::test]
async fn a_ticket_lasts_its_own_lease_time_in_memory() {
    leases::a_ticket_lasts_its_own_lease_time(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_stopped_as_asked_is_not_taken_for_dead_in_memory() {
    leases::a_holder_stopped_as_asked_is_not_taken_for_dead(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_asked_to_stop_that_pauses_stops_in_memory() {
    leases::a_run_asked_to_stop_that_pauses_stops(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dropped_while_it_takes_its_request_back_still_does_in_memory() {
    leases::a_run_dropped_while_it_takes_its_request_back_still_does(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stop_request_leaves_the_queue_in_memory() {
    leases::a_failed_stop_request_leaves_the_queue(memory(), "t").await;
}

#[tokio::test]
async fn a_deleted_thread_forgets_its_holder_in_memory() {
    leases::a_deleted_thread_forgets_its_holder(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_resume_leaves_the_pause_to_the_next_in_memory() {
    leases::a_rolled_back_resume_leaves_the_pause_to_the_next(memory(), "t").await;
}

#[tokio::test]
async fn a_truncate_below_the_base_lowers_it_in_memory() {
    leases::a_truncate_below_the_base_lowers_it(memory(), "t").await;
}

#[tokio::test]
async fn a_rewritten_base_is_not_put_back_as_it_was_in_memory() {
    leases::a_rewritten_base_is_not_put_back_as_it_was(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_dropped_as_it_gives_back_is_not_rolled_back_in_memory() {
    leases::a_finished_run_dropped_as_it_gives_back_is_not_rolled_back(memory(), "t").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_gives_its_lease_back_once_its_writes_land_in_memory() {
    leases::a_cancelled_run_gives_its_lease_back_once_its_writes_land(memory(), "t").await;
}

#[tokio::test]
async fn a_rollback_to_a_pruned_base_keeps_the_turn_in_memory() {
    leases::a_rollback_to_a_pruned_base_keeps_the_turn(memory(), "t").await;
}

#[tokio::test]
async fn a_run_asked_to_stop_stops_inside_its_subgraph_in_memory() {
    leases::a_run_asked_to_stop_stops_inside_its_subgraph(memory(), "t").await;
}

#[tokio::test]
async fn a_thread_truncated_to_nothing_is_gone_in_memory() {
    leases::a_thread_truncated_to_nothing_is_gone(memory(), "t").await;
}

#[tokio::test]
async fn a_dropped_waiting_run_leaves_no_ticket_in_memory() {
    leases::a_dropped_waiting_run_leaves_no_ticket(memory(), "t").await;
}

/// A run whose node timed out while the subgraph it ran still had writes
/// queued gives the thread's lease back only once they landed: a run
/// taking the thread then reads the head they leave, not one about to
/// move. (The lease was given back at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gives_its_lease_back_after_its_cut_off_subgraphs_writes() {
    use std::time::Duration;
    use weaver::prelude::*;
    use weaver_tests::forwarding::Forwarding;
    use weaver_tests::states::{Steps, StepsUpdate};
    let watched = Arc::new(Forwarding::leasing(memory()));
    let saver: Arc<dyn Saver> = watched.clone();
    let inner = Graph::<Steps>::new("inner")
        .add_node("x", |_: &Steps| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            StepsUpdate::default().bar(["x"])
        })
        .add_sequence([START, "x", END])
        .compile(Compile::new())
        .unwrap();
    let g = Graph::<Steps>::new("outer")
        .add_node_with(
            "call",
            move |s: &Steps, rt: &Runtime| {
                let call = rt.subgraph(&inner);
                let input = s.clone();
                async move {
                    Ok::<_, NodeError>(StepsUpdate::default().bar(call.invoke(input).await?.bar))
                }
            },
            NodePolicy::new().timeout(Duration::from_millis(100)),
        )
        .add_sequence([START, "call", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let gate = watched.gate_subgraph_groups();
    let config = RunConfig::thread("t").durability(Durability::Async);
    let run = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(Steps::default(), &config).await }
    });
    gate.entered.notified().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let leases = saver.leases().unwrap();
    let info = leases.lease_info("t").await.unwrap();
    assert!(
        info.as_ref()
            .is_some_and(|l| !l.holder.is_empty() && l.remaining_ms > 0),
        "the lease was given back with the subgraph's writes queued: {info:?}"
    );
    gate.open.add_permits(1_000);
    let out = run.await.unwrap();
    assert!(matches!(out, Err(Error::NodeTimeout { .. })), "{out:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while leases
        .lease_info("t")
        .await
        .unwrap()
        .is_some_and(|l| !l.holder.is_empty() && l.remaining_ms > 0)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease was never given back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
