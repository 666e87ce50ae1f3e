//! Fleet listing and retention on any saver: threads searched by metadata,
//! ordered by last activity or creation and paged with cursors; idle
//! threads deleted; checkpoints pruned by age (a thread of delta channels
//! among them); bad input refused with typed errors. Times come from the
//! saver, so the cases wait out real (short) intervals.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weaver::Saver;
use weaver::checkpoint::{
    ChannelDelta, CheckpointRef, DELTA_CHECKPOINT_FORMAT, ListFilter, NewCheckpoint, PruneStrategy,
    ThreadOrder, ThreadQuery,
};

use crate::conformance::{chain, new_on};

/// Runs every case on a fresh saver from `make`.
pub async fn run_fleet_suite<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn Saver>>,
{
    threads_carry_times_and_list_by_activity_or_creation(make().await).await;
    search_filters_on_metadata_and_pages_with_cursors(make().await).await;
    idle_threads_are_listed_and_deleted(make().await).await;
    a_held_idle_thread_is_kept(make().await).await;
    a_thread_taken_while_found_idle_is_kept(make().await).await;
    a_deletion_that_lost_its_hold_keeps_the_thread(make().await).await;
    idle_threads_are_deleted_through_a_saver_without_thread_times(make().await).await;
    prune_by_age_keeps_the_newest_and_the_young(make().await).await;
    prune_by_age_keeps_delta_channels_whole(make().await).await;
    bad_fleet_input_is_a_typed_error(make().await).await;
}

/// Waits long enough for a saver's millisecond times to move on.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(15)).await;
}

fn ids(page: &[weaver::checkpoint::ThreadInfo]) -> Vec<&str> {
    page.iter().map(|t| t.thread_id.as_str()).collect()
}

/// A root checkpoint of `thread` after `parent`, with metadata `user`.
fn by(thread: &str, parent: Option<&str>, order: u64, user: &str) -> NewCheckpoint {
    let mut c = new_on(thread, parent, Some(order), order as i64, json!(order));
    c.metadata.extra.insert("user".into(), json!(user));
    c
}

async fn threads_carry_times_and_list_by_activity_or_creation(saver: Arc<dyn Saver>) {
    // Created a, b, c in that order; then a is active again.
    let a = by("a", None, 1, "ann");
    let a1 = a.checkpoint.id.clone();
    saver.put(a).await.unwrap();
    tick().await;
    saver.put(by("b", None, 1, "bob")).await.unwrap();
    tick().await;
    saver.put(by("c", None, 1, "ann")).await.unwrap();
    tick().await;
    saver.put(by("a", Some(&a1), 2, "ann")).await.unwrap();

    let info = saver.thread_info("a").await.unwrap().unwrap();
    let (created, updated) = (info.created_at.unwrap(), info.updated_at.unwrap());
    assert!(created < updated, "{info:?}");
    let listed = saver.list_threads(None, 0).await.unwrap();
    assert_eq!(listed[0], info, "list_threads and thread_info agree");

    let active = saver.search_threads(&ThreadQuery::new()).await.unwrap();
    assert_eq!(ids(&active.threads), ["a", "c", "b"], "by last activity");
    assert_eq!(active.next, None);
    let created = ThreadQuery::new().order(ThreadOrder::Created);
    let created = saver.search_threads(&created).await.unwrap();
    assert_eq!(ids(&created.threads), ["c", "b", "a"], "by creation");
}

async fn search_filters_on_metadata_and_pages_with_cursors(saver: Arc<dyn Saver>) {
    for (i, user) in ["ann", "bob", "ann", "ann", "bob", "ann"]
        .iter()
        .enumerate()
    {
        saver
            .put(by(&format!("t{i}"), None, 1, user))
            .await
            .unwrap();
        tick().await;
    }
    // t5 was ann's; its newest checkpoint is now bob's.
    let head = saver
        .get_tuple(&CheckpointRef::latest("t5"))
        .await
        .unwrap()
        .unwrap();
    saver
        .put(by("t5", Some(&head.checkpoint.id), 2, "bob"))
        .await
        .unwrap();

    let query = ThreadQuery::new().metadata("user", "ann").limit(2);
    let first = saver.search_threads(&query).await.unwrap();
    assert_eq!(ids(&first.threads), ["t3", "t2"]);
    let cursor = first.next.clone().expect("a second page");
    let second = saver
        .search_threads(&query.clone().after(cursor))
        .await
        .unwrap();
    assert_eq!(ids(&second.threads), ["t0"], "t5 is bob's now");
    assert_eq!(second.next, None);
    let all = saver
        .search_threads(&ThreadQuery::new().limit(4))
        .await
        .unwrap();
    assert_eq!(ids(&all.threads), ["t5", "t4", "t3", "t2"]);
    // A thread deleted between two pages does not upset the cursor.
    saver.delete_thread("t1").await.unwrap();
    let rest = saver
        .search_threads(&ThreadQuery::new().after(all.next.unwrap()))
        .await
        .unwrap();
    assert_eq!(ids(&rest.threads), ["t0"]);
    let none = ThreadQuery::new().metadata("user", "carl");
    assert!(
        saver
            .search_threads(&none)
            .await
            .unwrap()
            .threads
            .is_empty()
    );
}

async fn idle_threads_are_listed_and_deleted(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "old-1", 3).await;
    tick().await;
    chain(saver.as_ref(), "old-2", 1).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    chain(saver.as_ref(), "fresh", 2).await;
    let idle = ThreadQuery::new().idle_for(Duration::from_millis(400));
    let listed = saver.search_threads(&idle).await.unwrap();
    assert_eq!(ids(&listed.threads), ["old-2", "old-1"]);

    let mut seen = Vec::new();
    let gone = saver
        .delete_idle_threads(Duration::from_millis(400), &mut |d, f| seen.push((d, f)))
        .await
        .unwrap();
    assert_eq!(gone, 2);
    assert_eq!(seen, [(1, 1), (2, 2)], "progress after each thread");
    let left = saver.list_threads(None, 0).await.unwrap();
    assert_eq!(ids(&left), ["fresh"]);
    assert_eq!(left[0].checkpoints, 2);
    assert!(
        saver
            .list_stored(&ListFilter::thread("old-1"))
            .await
            .unwrap()
            .is_empty()
    );
}

/// A thread idle for long whose lease a run holds (a resume of a long
/// pause, before it stored anything) is not deleted as idle; once the run
/// gave it back, it is. (It was deleted under the running run.)
async fn a_held_idle_thread_is_kept(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "held", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leases = saver.leases().expect("the saver has leases");
    let request = weaver::checkpoint::LeaseRequest {
        thread_id: "held",
        holder: "worker-1",
        lease: Duration::from_secs(30),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    leases.acquire(&request).await.unwrap();
    let idle = Duration::from_millis(400);
    let gone = saver
        .delete_idle_threads(idle, &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(gone, 0, "a held thread was deleted as idle");
    assert!(saver.thread_info("held").await.unwrap().is_some());
    leases.release("held", "worker-1", None).await.unwrap();
    let gone = saver
        .delete_idle_threads(idle, &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(gone, 1);
    assert!(saver.thread_info("held").await.unwrap().is_none());
}

/// A run that takes an idle thread's lease after the thread was found idle,
/// just before it is deleted, either finds the thread busy (the deletion
/// holds it) or keeps it: the thread is never deleted under a run holding
/// it. (The deletion removed the thread, and the run's lease with it.)
async fn a_thread_taken_while_found_idle_is_kept(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "taken", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wrapped = Arc::new(crate::forwarding::Forwarding::leasing(saver.clone()));
    let took = Arc::new(std::sync::Mutex::new(None));
    let (inner, seen) = (saver.clone(), took.clone());
    *wrapped.before_delete.lock().unwrap() =
        Some(crate::forwarding::BoxedWork(Box::pin(async move {
            let leases = inner.leases().expect("the saver has leases");
            let request = weaver::checkpoint::LeaseRequest {
                thread_id: "taken",
                holder: "worker-1",
                lease: Duration::from_secs(30),
                queue: false,
                ticket: None,
                roll_back_dead: false,
                owns_pause: false,
                interrupting: false,
            };
            let answer = leases.acquire(&request).await.unwrap();
            *seen.lock().unwrap() =
                Some(matches!(answer, weaver::checkpoint::Acquired::Held { .. }));
        })));
    let gone = wrapped
        .delete_idle_threads(Duration::from_millis(400), &mut |_, _| {})
        .await
        .unwrap();
    let took = took.lock().unwrap().expect("the deletion was reached");
    let kept = saver.thread_info("taken").await.unwrap().is_some();
    if took {
        assert!(kept, "a thread a run took was deleted under it");
        assert_eq!(gone, 0);
        let lease = saver
            .leases()
            .unwrap()
            .lease_info("taken")
            .await
            .unwrap()
            .expect("the run's lease is kept");
        assert_eq!(lease.holder, "worker-1");
    } else {
        assert!(!kept, "the thread was found idle and held for deletion");
        assert_eq!(gone, 1);
    }
}

/// An idle thread's deletion stalled until its lease ran out, the thread
/// taken by a run meanwhile, keeps the thread: the deletion goes only while
/// its lease still names it. (It deleted the thread, and the run's lease
/// with it.)
async fn a_deletion_that_lost_its_hold_keeps_the_thread(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "stalled", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wrapped = Arc::new(crate::forwarding::Forwarding::leasing(saver.clone()));
    let inner = saver.clone();
    *wrapped.before_delete.lock().unwrap() =
        Some(crate::forwarding::BoxedWork(Box::pin(async move {
            let leases = inner.leases().expect("the saver has leases");
            // The deletion's hold given up, as its lease running out leaves
            // it, and a run takes the thread.
            let deletion = leases
                .lease_info("stalled")
                .await
                .unwrap()
                .expect("the deletion holds the thread");
            leases
                .release("stalled", &deletion.holder, None)
                .await
                .unwrap();
            let request = weaver::checkpoint::LeaseRequest {
                thread_id: "stalled",
                holder: "worker-1",
                lease: Duration::from_secs(30),
                queue: false,
                ticket: None,
                roll_back_dead: false,
                owns_pause: false,
                interrupting: false,
            };
            let answer = leases.acquire(&request).await.unwrap();
            assert!(matches!(answer, weaver::checkpoint::Acquired::Held { .. }));
        })));
    let gone = wrapped
        .delete_idle_threads(Duration::from_millis(400), &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(gone, 0, "a thread a run took was deleted under it");
    assert!(saver.thread_info("stalled").await.unwrap().is_some());
    let lease = saver
        .leases()
        .unwrap()
        .lease_info("stalled")
        .await
        .unwrap()
        .expect("the run's lease is kept");
    assert_eq!(lease.holder, "worker-1");
}

/// A saver written as a third party would (forwarding only what it must:
/// its `thread_info` has no times) deletes idle threads too. (It deleted
/// none: the listed and the read times never matched.)
async fn idle_threads_are_deleted_through_a_saver_without_thread_times(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "old", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wrapped = crate::forwarding::Forwarding::on(saver.clone());
    assert_eq!(
        wrapped
            .thread_info("old")
            .await
            .unwrap()
            .unwrap()
            .updated_at,
        None
    );
    let gone = wrapped
        .delete_idle_threads(Duration::from_millis(400), &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(gone, 1);
    assert!(saver.thread_info("old").await.unwrap().is_none());
}

async fn prune_by_age_keeps_the_newest_and_the_young(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "p", 5).await;
    chain(saver.as_ref(), "q", 2).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    for order in 6..=7 {
        let parent = saver
            .get_tuple(&CheckpointRef::latest("p"))
            .await
            .unwrap()
            .unwrap();
        let c = new_on(
            "p",
            Some(&parent.checkpoint.id),
            Some(order),
            0,
            json!(order),
        );
        saver.put(c).await.unwrap();
    }
    let threads = ["p".to_owned(), "q".to_owned()];
    let strategy = PruneStrategy::OlderThan {
        age: Duration::from_millis(400),
        keep_newest: 1,
    };
    let deleted = saver.prune(&threads, strategy).await.unwrap();
    // p: the five old ones go, the two young stay; q: all old, one stays.
    assert_eq!(deleted, 5 + 1);
    let orders = |t: &'static str| {
        let saver = saver.clone();
        async move {
            let mut o: Vec<u64> = saver
                .list_stored(&ListFilter::thread(t))
                .await
                .unwrap()
                .iter()
                .map(|t| t.commit_order)
                .collect();
            o.sort();
            o
        }
    };
    assert_eq!(orders("p").await, [6, 7]);
    assert_eq!(orders("q").await, [2]);
    // keep_newest above the young count keeps that many.
    let strategy = PruneStrategy::OlderThan {
        age: Duration::from_millis(1),
        keep_newest: 1,
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(saver.prune(&threads, strategy).await.unwrap(), 1);
    assert_eq!(orders("p").await, [7]);
}

async fn prune_by_age_keeps_delta_channels_whole(saver: Arc<dyn Saver>) {
    let full = new_on("d", None, Some(1), 0, json!(["a"]));
    let mut ids = vec![full.checkpoint.id.clone()];
    saver.put(full).await.unwrap();
    let delta = |depth: u32, item: &str, parent: &str, order: u64| {
        let mut c = new_on(
            "d",
            Some(parent),
            Some(order),
            i64::from(depth),
            json!(null),
        );
        c.checkpoint.channel_values.remove("v");
        c.checkpoint.v = DELTA_CHECKPOINT_FORMAT;
        c.checkpoint.deltas.insert(
            "v".into(),
            ChannelDelta {
                depth,
                items: vec![json!(item)],
            },
        );
        c
    };
    let c = delta(1, "b", &ids[0], 2);
    ids.push(c.checkpoint.id.clone());
    saver.put(c).await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let c = delta(2, "c", &ids[1], 3);
    ids.push(c.checkpoint.id.clone());
    saver.put(c).await.unwrap();
    let strategy = PruneStrategy::OlderThan {
        age: Duration::from_millis(400),
        keep_newest: 1,
    };
    let deleted = saver.prune(&["d".to_owned()], strategy).await.unwrap();
    if !saver.supports_deltas() {
        return;
    }
    assert_eq!(deleted, 2);
    let head = saver
        .get_tuple(&CheckpointRef::latest("d"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head.checkpoint.id, ids[2]);
    assert_eq!(
        head.checkpoint.channel_values["v"],
        json!(["a", "b", "c"]),
        "the kept record was stored in full before its base went"
    );
    let stored = saver.list_stored(&ListFilter::thread("d")).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].checkpoint.channel_values.get("v"),
        Some(&json!(["a", "b", "c"]))
    );
}

async fn bad_fleet_input_is_a_typed_error(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "x", 2).await;
    let invalid = |r: weaver::Result<()>, what: &str| match r {
        Err(weaver::Error::InvalidArgument { .. }) => {}
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what}: accepted"),
    };
    invalid(
        saver
            .search_threads(&ThreadQuery::new().limit(0))
            .await
            .map(|_| ()),
        "limit 0",
    );
    // Times are stored to the millisecond: less, or a fraction of one, is
    // refused, not rounded on some savers and compared exactly on others.
    for idle in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_micros(1_500),
    ] {
        invalid(
            saver
                .search_threads(&ThreadQuery::new().idle_for(idle))
                .await
                .map(|_| ()),
            "idle_for under 1 ms",
        );
        let age = PruneStrategy::OlderThan {
            age: idle,
            keep_newest: 1,
        };
        invalid(
            saver.prune(&["x".to_owned()], age).await.map(|_| ()),
            "an age under 1 ms",
        );
    }
    for cursor in ["", "garbage", "a:notanumber:x", "q:1:x"] {
        invalid(
            saver
                .search_threads(&ThreadQuery::new().after(cursor))
                .await
                .map(|_| ()),
            cursor,
        );
    }
    // A cursor of the other order.
    let page = saver
        .search_threads(&ThreadQuery::new().limit(1))
        .await
        .unwrap();
    assert_eq!(page.next, None, "one thread, one page");
    let other = ThreadQuery::new()
        .order(ThreadOrder::Created)
        .after("a:1:x");
    invalid(
        saver.search_threads(&other).await.map(|_| ()),
        "other order",
    );
    invalid(
        saver
            .delete_idle_threads(Duration::ZERO, &mut |_, _| {})
            .await
            .map(|_| ()),
        "delete idle 0",
    );
    for strategy in [
        PruneStrategy::OlderThan {
            age: Duration::ZERO,
            keep_newest: 1,
        },
        PruneStrategy::OlderThan {
            age: Duration::from_secs(1),
            keep_newest: 0,
        },
    ] {
        invalid(
            saver.prune(&["x".to_owned()], strategy).await.map(|_| ()),
            &format!("{strategy:?}"),
        );
    }
    // Nothing changed.
    assert_eq!(
        saver.thread_info("x").await.unwrap().unwrap().checkpoints,
        2
    );
    let values: Vec<Value> = saver
        .list(&ListFilter::thread("x"))
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.checkpoint.channel_values["v"].clone())
        .collect();
    assert_eq!(values, [json!(1), json!(0)]);
}

/// An idle-thread deletion cut off while it holds a thread's lease (a
/// caller's timeout) leaves the thread busy for five seconds at most, and
/// its lease run out counts as given back, not as a run that died. (The
/// deletion's lease stayed for a minute, then counted as a dead run.)
pub async fn a_cut_off_idle_deletion_gives_the_thread_back(saver: Arc<dyn Saver>) {
    chain(saver.as_ref(), "cut", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let wrapped = Arc::new(crate::forwarding::Forwarding::leasing(saver.clone()));
    *wrapped.before_delete.lock().unwrap() = Some(crate::forwarding::BoxedWork(Box::pin(
        std::future::pending::<()>(),
    )));
    let cut = tokio::time::timeout(
        Duration::from_millis(200),
        wrapped.delete_idle_threads(Duration::from_millis(400), &mut |_, _| {}),
    )
    .await;
    assert!(cut.is_err(), "the deletion was cut off");
    let leases = saver.leases().expect("the saver has leases");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while leases
        .lease_info("cut")
        .await
        .unwrap()
        .is_some_and(|l| l.remaining_ms > 0 && !l.holder.is_empty())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the deletion's lease stayed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(saver.thread_info("cut").await.unwrap().is_some());
    // The thread is taken as given back, not as a run that died mid-turn
    // (whose turn the next run would finish first).
    let request = weaver::checkpoint::LeaseRequest {
        thread_id: "cut",
        holder: "worker-1",
        lease: Duration::from_secs(30),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    match leases.acquire(&request).await.unwrap() {
        weaver::checkpoint::Acquired::Held { previous, .. } => {
            assert_eq!(previous, weaver::checkpoint::Previous::Released);
        }
        busy => panic!("{busy:?}"),
    }
}
