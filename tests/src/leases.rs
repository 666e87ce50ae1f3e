//! One run per thread at a time, run against any saver: the in-memory saver
//! in the runtime tests, SQLite and PostgreSQL in the SQL tests. Each turn
//! is a user message, a model step and a tool step; a whole turn adds
//! exactly `[u, assistant:u, tool:u]` to the transcript.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weaver::checkpoint::{Acquired, LeaseInfo, LeaseRequest, ListFilter, PruneStrategy};
use weaver::config::{LeaseTimes, Multitask};
use weaver::prelude::*;

use crate::forwarding::Forwarding;

/// The conversation.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Talk {
    /// Every message, in order.
    #[reducer(append)]
    pub messages: Vec<String>,
}

fn last_user(t: &Talk) -> String {
    t.messages
        .iter()
        .rev()
        .find(|m| !m.contains(':'))
        .cloned()
        .unwrap_or_default()
}

/// The turn graph: `model` then `tool`, each taking `step`; `tool` fails
/// while `failing` holds.
pub fn turns(
    saver: Arc<dyn Saver>,
    step: Duration,
    failing: Arc<AtomicBool>,
) -> CompiledGraph<Talk> {
    Graph::<Talk>::new("turns")
        .add_node("model", move |t: &Talk| {
            let u = last_user(t);
            async move {
                tokio::time::sleep(step).await;
                TalkUpdate::default().messages(vec![format!("assistant:{u}")])
            }
        })
        .add_node("tool", move |t: &Talk| {
            let u = last_user(t);
            let failing = failing.clone();
            async move {
                tokio::time::sleep(step).await;
                if failing.load(Ordering::SeqCst) {
                    return Err(NodeError::msg("tool is down"));
                }
                Ok(TalkUpdate::default().messages(vec![format!("tool:{u}")]))
            }
        })
        .add_sequence([START, "model", "tool", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles")
}

/// The turn graph of the queue and stop tests: [`turns`] with 5 ms steps,
/// except that the model step of the turn whose user message is `held`
/// first waits for a permit of `gate`. What such a test checks so waits
/// for an event, not for a step to last longer than a lease call (which a
/// loaded database server does not promise).
fn gated_turns(
    saver: Arc<dyn Saver>,
    held: &'static str,
    gate: Arc<tokio::sync::Semaphore>,
) -> CompiledGraph<Talk> {
    let step = Duration::from_millis(5);
    Graph::<Talk>::new("gated_turns")
        .add_node("model", move |t: &Talk| {
            let u = last_user(t);
            let gate = gate.clone();
            async move {
                if u == held {
                    let _permit = gate.acquire().await;
                }
                tokio::time::sleep(step).await;
                TalkUpdate::default().messages(vec![format!("assistant:{u}")])
            }
        })
        .add_node("tool", move |t: &Talk| {
            let u = last_user(t);
            async move {
                tokio::time::sleep(step).await;
                TalkUpdate::default().messages(vec![format!("tool:{u}")])
            }
        })
        .add_sequence([START, "model", "tool", END])
        .compile(Compile::new().checkpointer_arc(saver))
        .expect("compiles")
}

/// Leases for a slow database server: 5 s, renewed every 200 ms (a
/// waiting run's ticket is dropped when it is not presented again within a
/// lease time, and a holder's lease runs out when renewals lag by one).
pub fn patient() -> LeaseTimes {
    LeaseTimes::new(Duration::from_secs(5)).renew_every(Duration::from_millis(200))
}

/// A plain request of `holder` for thread `t`'s lease: 30 s, not queued,
/// no ticket, no rollback of a dead holder, not answering its own pauses.
pub fn ask(holder: &str) -> LeaseRequest<'_> {
    plain("t", holder, Duration::from_secs(30))
}

/// A plain request of `holder` for `thread`'s lease for `lease`, as
/// [`ask`] makes.
pub fn plain<'a>(thread: &'a str, holder: &'a str, lease: Duration) -> LeaseRequest<'a> {
    LeaseRequest {
        thread_id: thread,
        holder,
        lease,
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    }
}

/// Short leases, so that a test waits milliseconds for a lease to run out.
pub fn short() -> LeaseTimes {
    LeaseTimes::new(Duration::from_millis(300)).renew_every(Duration::from_millis(50))
}

fn say(u: &str) -> TalkUpdate {
    TalkUpdate::default().messages(vec![u.to_owned()])
}

/// The transcript of the thread's head.
async fn transcript(g: &CompiledGraph<Talk>, thread: &str) -> Vec<String> {
    g.get_state(&RunConfig::thread(thread))
        .await
        .unwrap()
        .values
        .messages
}

/// Waits until a run holds the thread's lease (polled: a loaded machine
/// may take a while to start the run); returns the lease.
pub async fn held(saver: &Arc<dyn Saver>, thread: &str) -> LeaseInfo {
    let leases = saver.leases().expect("the saver has leases");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(l) = leases.lease_info(thread).await.unwrap()
            && l.remaining_ms > 0
        {
            return l;
        }
        assert!(Instant::now() < deadline, "no run took thread {thread}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until the thread's head holds `message` (a run committed its
/// input), polled.
async fn committed(g: &CompiledGraph<Talk>, thread: &str, message: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = g.get_state(&RunConfig::thread(thread)).await;
        if state.is_ok_and(|s| s.values.messages.iter().any(|m| m == message)) {
            return;
        }
        assert!(Instant::now() < deadline, "{message} never committed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Checks that the thread's history is one chain (each checkpoint's parent
/// the previous one, commit orders 1, 2, …) on its root namespace.
pub async fn one_chain(saver: &Arc<dyn Saver>, thread: &str) {
    let mut hist = saver
        .list(&ListFilter::thread(thread).ns(""))
        .await
        .unwrap();
    hist.reverse();
    for (i, t) in hist.iter().enumerate() {
        assert_eq!(t.commit_order, i as u64 + 1, "commit orders of {thread}");
        let parent = t
            .parent_config
            .as_ref()
            .and_then(|p| p.checkpoint_id.clone());
        let before = i
            .checked_sub(1)
            .map(|j| hist[j].config.checkpoint_id.clone().unwrap());
        assert_eq!(
            parent,
            before,
            "checkpoint {} of {thread} is off the chain",
            i + 1
        );
    }
}

/// The transcript cut into turns, each checked whole: `[u, assistant:u, tool:u]`.
pub fn whole_turns(messages: &[String]) -> Vec<String> {
    assert_eq!(messages.len() % 3, 0, "not whole turns: {messages:?}");
    messages
        .chunks(3)
        .map(|c| {
            let u = &c[0];
            assert_eq!(c[1], format!("assistant:{u}"), "{messages:?}");
            assert_eq!(c[2], format!("tool:{u}"), "{messages:?}");
            u.clone()
        })
        .collect()
}

/// A second run while one goes fails at once with `ThreadBusy` (the
/// default strategy), writing nothing; once the first ended, a run goes.
pub async fn reject_refuses_a_second_run(saver: Arc<dyn Saver>, thread: &str) {
    // The first run holds the thread until the second has been refused.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let config = RunConfig::thread(thread).lease_times(short());
    let first = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&saver, thread).await;
    let second = g.invoke(say("b"), &config).await.unwrap_err();
    assert!(
        matches!(&second, Error::ThreadBusy { thread_id, holder, .. } if thread_id == thread && !holder.is_empty()),
        "{second:?}"
    );
    gate.add_permits(1);
    first.await.unwrap().unwrap();
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a"]);
    g.invoke(say("c"), &config).await.unwrap();
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a", "c"]);
    one_chain(&saver, thread).await;
    let leases = saver.leases().expect("the saver has leases");
    assert_eq!(leases.lease_info(thread).await.unwrap(), None, "given back");
}

/// Runs that arrive while the thread is held wait their turn and go in the
/// order they arrived; each turn is whole and the history one chain.
pub async fn enqueue_serves_runs_in_arrival_order(saver: Arc<dyn Saver>, thread: &str) {
    enqueue_serves_runs_in_arrival_order_with(saver, thread, short()).await;
}

/// [`enqueue_serves_runs_in_arrival_order`] under lease times `times`
/// ([`patient`] for a slow server). The first run holds the thread until
/// the four after it have queued, each once the one before holds the
/// thread or its ticket.
pub async fn enqueue_serves_runs_in_arrival_order_with(
    saver: Arc<dyn Saver>,
    thread: &str,
    times: LeaseTimes,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "u0", gate.clone());
    let config = RunConfig::thread(thread)
        .lease_times(times)
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(60),
        });
    let leases = saver.leases().expect("the saver has leases");
    let mut runs = Vec::new();
    for i in 0..5 {
        let (g, config) = (g.clone(), config.clone());
        runs.push(tokio::spawn(async move {
            g.invoke(say(&format!("u{i}")), &config).await
        }));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info = leases.lease_info(thread).await.unwrap();
            if info.is_some_and(|l| l.queued >= i) {
                break;
            }
            assert!(Instant::now() < deadline, "run u{i} never queued");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    gate.add_permits(1);
    for r in runs {
        r.await.unwrap().unwrap();
    }
    let turns = whole_turns(&transcript(&g, thread).await);
    assert_eq!(turns, ["u0", "u1", "u2", "u3", "u4"]);
    one_chain(&saver, thread).await;
}

/// `Enqueue` with no wait tries once: `ThreadBusy`, and no ticket left
/// behind to hold up the runs after it.
pub async fn enqueue_with_no_wait_fails_at_once(saver: Arc<dyn Saver>, thread: &str) {
    // The first run holds the thread until the second has been refused.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let config = RunConfig::thread(thread).lease_times(short());
    let first = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&saver, thread).await;
    let none = config.clone().multitask(Multitask::Enqueue {
        wait: Duration::ZERO,
    });
    let e = g.invoke(say("b"), &none).await.unwrap_err();
    assert!(matches!(e, Error::ThreadBusy { .. }), "{e:?}");
    let info = saver
        .leases()
        .unwrap()
        .lease_info(thread)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.queued, 0, "no ticket left: {info:?}");
    gate.add_permits(1);
    first.await.unwrap().unwrap();
    g.invoke(say("c"), &config).await.unwrap();
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a", "c"]);
}

/// Starts turn `a`, then runs `b` under `strategy`: `a` stops at a step
/// boundary with `RunStopped`; returns the transcript. `a`'s model step
/// ends only once `a`'s run has taken in the stop request (its renewal was
/// told and it renewed again), so `a` stops after its input or its model
/// step however slow the server is.
async fn stopped_by(
    saver: Arc<dyn Saver>,
    thread: &str,
    strategy: Multitask,
    times: LeaseTimes,
) -> Vec<String> {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let config = RunConfig::thread(thread).lease_times(times);
    g.invoke(say("first"), &config.clone().multitask(Multitask::Race))
        .await
        .unwrap();
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    committed(&g, thread, "a").await;
    let opener = tokio::spawn(async move {
        let noticed = tokio::time::timeout(Duration::from_secs(30), watched.stop_noticed()).await;
        gate.add_permits(1);
        noticed.is_ok()
    });
    let b = g
        .invoke(say("b"), &config.clone().multitask(strategy))
        .await;
    assert!(
        opener.await.unwrap(),
        "the running turn never took in the stop request"
    );
    b.unwrap();
    let stopped = running.await.unwrap().unwrap_err();
    let name = match strategy {
        Multitask::Rollback { .. } => "rollback",
        _ => "interrupt",
    };
    assert!(
        matches!(&stopped, Error::RunStopped { strategy, .. } if *strategy == name),
        "{stopped:?}"
    );
    one_chain(&saver, thread).await;
    transcript(&g, thread).await
}

/// `Interrupt`: the running turn stops keeping what it committed; the new
/// input goes on from there (LangGraph's interrupt strategy).
pub async fn interrupt_keeps_the_stopped_turn(saver: Arc<dyn Saver>, thread: &str) {
    interrupt_keeps_the_stopped_turn_with(saver, thread, short()).await;
}

/// [`interrupt_keeps_the_stopped_turn`] under lease times `times`.
pub async fn interrupt_keeps_the_stopped_turn_with(
    saver: Arc<dyn Saver>,
    thread: &str,
    times: LeaseTimes,
) {
    let wait = Duration::from_secs(60);
    let messages = stopped_by(saver, thread, Multitask::Interrupt { wait }, times).await;
    assert_eq!(messages[..3], ["first", "assistant:first", "tool:first"]);
    // `a` stopped after its input, or after its model step.
    let rest = &messages[3..];
    let b = rest.iter().position(|m| m == "b").expect("b ran");
    assert!(b >= 1 && rest[0] == "a", "{messages:?}");
    assert!(
        rest[1..b].iter().all(|m| m == "assistant:a"),
        "{messages:?}"
    );
    assert_eq!(whole_turns(&rest[b..]), ["b"]);
}

/// `Rollback`: the running turn stops and what it committed goes; the
/// thread holds whole turns only.
pub async fn rollback_removes_the_stopped_turn(saver: Arc<dyn Saver>, thread: &str) {
    rollback_removes_the_stopped_turn_with(saver, thread, short()).await;
}

/// [`rollback_removes_the_stopped_turn`] under lease times `times`.
pub async fn rollback_removes_the_stopped_turn_with(
    saver: Arc<dyn Saver>,
    thread: &str,
    times: LeaseTimes,
) {
    let wait = Duration::from_secs(60);
    let messages = stopped_by(saver, thread, Multitask::Rollback { wait }, times).await;
    assert_eq!(whole_turns(&messages), ["first", "b"]);
}

/// The turns graph on `saver` with a turn on `thread` that stopped half
/// way (its model step stored, its tool step not: the tool failed once),
/// as a dead holder's is; its tool succeeds from now on.
async fn a_dead_turn(saver: &Arc<dyn Saver>, thread: &str) -> CompiledGraph<Talk> {
    let failing = Arc::new(AtomicBool::new(true));
    let g = turns(saver.clone(), Duration::from_millis(5), failing.clone());
    let race = RunConfig::thread(thread)
        .durability(Durability::Sync)
        .multitask(Multitask::Race);
    // The dead turn: its model step stored, its tool step not.
    let e = g.invoke(say("dead"), &race).await.unwrap_err();
    assert!(matches!(e, Error::NodeFailed { .. }), "{e:?}");
    failing.store(false, Ordering::SeqCst);
    g
}

/// A holder that died mid-turn (its lease runs out, never given back): the
/// next run waits for the lease to run out, finishes the dead turn from its
/// pending writes, then runs its own.
pub async fn a_dead_holder_is_taken_over_and_finished(saver: Arc<dyn Saver>, thread: &str) {
    let g = a_dead_turn(&saver, thread).await;
    let leases = saver.leases().unwrap();
    let ghost = LeaseRequest {
        thread_id: thread,
        holder: "ghost",
        lease: Duration::from_millis(150),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    assert!(matches!(
        leases.acquire(&ghost).await.unwrap(),
        Acquired::Held { .. }
    ));
    let config = RunConfig::thread(thread)
        .lease_times(short())
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(10),
        });
    let started = std::time::Instant::now();
    g.invoke(say("next"), &config).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "waited for the lease"
    );
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["dead", "next"]);
    one_chain(&saver, thread).await;
}

/// A run that expects the head it saw, taking over a dead holder's turn,
/// checks that head before finishing the turn (which moves it), not after.
/// (It finished the turn, then failed against the head it had made.)
pub async fn an_expected_head_is_checked_before_a_dead_turn_is_finished(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let g = a_dead_turn(&saver, thread).await;
    let seen = g
        .get_state(&RunConfig::thread(thread))
        .await
        .unwrap()
        .commit_order;
    let leases = saver.leases().unwrap();
    let ghost = plain(thread, "ghost", Duration::from_millis(150));
    assert!(matches!(
        leases.acquire(&ghost).await.unwrap(),
        Acquired::Held { .. }
    ));
    tokio::time::sleep(Duration::from_millis(250)).await;
    let config = RunConfig::thread(thread)
        .lease_times(short())
        .expect_head(seen);
    g.invoke(say("next"), &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["dead", "next"]);
}

/// A run that cannot run (a recursion limit of 0) is refused before it
/// asks for the thread: it neither stops nor rolls back the run holding
/// it. (It asked the holder to stop, then failed.)
pub async fn a_run_that_cannot_run_asks_nothing_of_the_holder(saver: Arc<dyn Saver>, thread: &str) {
    let leases = saver.leases().unwrap();
    let holder = plain(thread, "worker-1", Duration::from_secs(30));
    leases.acquire(&holder).await.unwrap();
    let g = asking(&saver);
    let config = RunConfig::thread(thread)
        .recursion_limit(0)
        .multitask(Multitask::Rollback {
            wait: Duration::from_millis(300),
        });
    let e = g.invoke(say("x"), &config).await.unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}");
    let info = leases.lease_info(thread).await.unwrap().unwrap();
    assert_eq!((info.holder.as_str(), info.stop), ("worker-1", None));
    leases.release(thread, "worker-1", None).await.unwrap();
}

/// A run whose lease another holder took stops at its next step boundary
/// with `LeaseLost`, storing nothing more. Its model step ends only once a
/// renewal has been refused and a lease time has passed since, so the run
/// has lost its hold however slow the server is.
pub async fn a_run_that_lost_its_lease_stops(saver: Arc<dyn Saver>, thread: &str) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let times = short();
    let config = RunConfig::thread(thread)
        .lease_times(times)
        .lease_holder("victim")
        .durability(Durability::Sync);
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    assert_eq!(held(&saver, thread).await.holder, "victim");
    let leases = saver.leases().unwrap();
    leases.release(thread, "victim", None).await.unwrap();
    let thief = LeaseRequest {
        thread_id: thread,
        holder: "thief",
        lease: Duration::from_secs(30),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    assert!(matches!(
        leases.acquire(&thief).await.unwrap(),
        Acquired::Held { .. }
    ));
    let refused = tokio::time::timeout(Duration::from_secs(30), watched.renewal_refused()).await;
    tokio::time::sleep(times.lease).await;
    gate.add_permits(1);
    assert!(refused.is_ok(), "the victim's renewal was never refused");
    let e = running.await.unwrap().unwrap_err();
    assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}");
    let messages = transcript(&g, thread).await;
    assert!(!messages.contains(&"tool:a".to_owned()), "{messages:?}");
    leases.release(thread, "thief", None).await.unwrap();
}

/// A run whose lease ran out before it could renew it (the database away
/// for longer than the lease) stops with `LeaseLost` at its next step
/// boundary and leaves the lease to run out, not given back: the next run
/// takes the thread over from a holder that died, and finishes that turn
/// before its own input.
pub async fn a_run_whose_lease_ran_out_leaves_its_turn_to_be_finished(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let times = short();
    let config = RunConfig::thread(thread)
        .lease_times(times)
        .durability(Durability::Sync);
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&saver, thread).await;
    // Renewals hang until the lease has run out.
    let renewals = watched.gate_renewals();
    tokio::time::sleep(times.lease * 2).await;
    gate.add_permits(1);
    let e = running.await.unwrap().unwrap_err();
    assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}");
    *watched.renew_gate.lock().unwrap() = None;
    renewals.open.add_permits(1_000);
    let done = g
        .invoke(say("b"), &config)
        .await
        .expect("the next turn")
        .complete()
        .expect("complete");
    assert_eq!(
        done.messages,
        ["a", "assistant:a", "tool:a", "b", "assistant:b", "tool:b"],
        "the stopped turn is finished before the next one"
    );
}

/// How a lease row left stopped or dead is read by the next acquire: a
/// holder asked to stop that died before acting on it died (its turn is
/// unfinished: taken over as dead, not as stopped), unless the caller
/// interrupts runs (then it is interrupted, as asked); a named holder whose
/// run stopped under a rollback request finds its stopped turn rolled back
/// when it comes back under its name.
pub async fn stopped_and_dead_holders_are_told_apart(saver: Arc<dyn Saver>, thread: &str) {
    use weaver::checkpoint::{Previous, Stop};
    let leases = saver.leases().expect("leases");
    let request = |holder: &'static str, lease: Duration| plain(thread, holder, lease);
    let put = |parent: Option<&str>| {
        weaver_conformance::saver::new_on(thread, parent, None, 0, serde_json::json!(1))
    };
    let first = saver.put(put(None)).await.expect("put");
    // Asked to stop, then dead before it renewed.
    let got = leases
        .acquire(&request("a", Duration::from_millis(100)))
        .await
        .expect("acquire");
    assert!(matches!(got, Acquired::Held { .. }), "{got:?}");
    leases
        .request_stop(thread, "a", Stop::Interrupt)
        .await
        .expect("request stop");
    tokio::time::sleep(Duration::from_millis(200)).await;
    match leases.acquire(&request("c", Duration::from_secs(30))).await {
        Ok(Acquired::Held { previous, .. }) => assert_eq!(previous, Previous::Died),
        other => panic!("expected the lease, got {other:?}"),
    }
    leases.release(thread, "c", None).await.expect("release");
    // The same, taken by a run that interrupts: interrupted, as it asked.
    leases
        .acquire(&request("a2", Duration::from_millis(100)))
        .await
        .expect("acquire");
    leases
        .request_stop(thread, "a2", Stop::Interrupt)
        .await
        .expect("request stop");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let interrupting = LeaseRequest {
        interrupting: true,
        ..request("i", Duration::from_secs(30))
    };
    match leases.acquire(&interrupting).await {
        Ok(Acquired::Held { previous, .. }) => {
            assert_eq!(previous, Previous::Stopped(Stop::Interrupt))
        }
        other => panic!("expected the lease, got {other:?}"),
    }
    leases.release(thread, "i", None).await.expect("release");
    // A named holder stopped under a rollback request comes back.
    let got = leases
        .acquire(&request("w:7", Duration::from_secs(30)))
        .await
        .expect("acquire");
    assert!(matches!(got, Acquired::Held { .. }), "{got:?}");
    let second = saver
        .put(put(first.checkpoint_id.as_deref()))
        .await
        .expect("put");
    saver
        .put(put(second.checkpoint_id.as_deref()))
        .await
        .expect("put");
    leases
        .release(thread, "w:7", Some(Stop::Rollback))
        .await
        .expect("release stopped");
    match leases
        .acquire(&request("w:7", Duration::from_secs(30)))
        .await
    {
        Ok(Acquired::Held {
            previous,
            rolled_back,
            ..
        }) => {
            assert_eq!(previous, Previous::Stopped(Stop::Rollback));
            assert_eq!(rolled_back, 2, "the stopped turn is removed");
        }
        other => panic!("expected the lease, got {other:?}"),
    }
    let head = saver
        .get_stored(&weaver::checkpoint::CheckpointRef::latest(thread))
        .await
        .expect("head")
        .expect("a head");
    assert_eq!(head.config, first);
    leases.release(thread, "w:7", None).await.expect("release");
}

/// Bad paths of the lease itself: a foreign holder's row refuses runs and
/// is not given back or renewed by anyone else; a lease that ran out is
/// not renewed; bad lease times are refused before anything is read.
pub async fn foreign_and_expired_leases_are_refused(saver: Arc<dyn Saver>, thread: &str) {
    let leases = saver.leases().unwrap();
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let foreign = LeaseRequest {
        thread_id: thread,
        holder: "someone-else",
        lease: Duration::from_secs(60),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    assert!(matches!(
        leases.acquire(&foreign).await.unwrap(),
        Acquired::Held { .. }
    ));
    let e = g
        .invoke(say("x"), &RunConfig::thread(thread))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::ThreadBusy { holder, .. } if holder == "someone-else"),
        "{e:?}"
    );
    leases
        .release(thread, "not-the-holder", None)
        .await
        .unwrap();
    let e = leases
        .renew(thread, "not-the-holder", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}");
    let info = leases.lease_info(thread).await.unwrap().unwrap();
    assert_eq!(info.holder, "someone-else");
    leases.release(thread, "someone-else", None).await.unwrap();
    // Ran out: renewal refused, and the next holder takes it as dead.
    let short_lived = LeaseRequest {
        lease: Duration::from_millis(20),
        ..foreign.clone()
    };
    leases.acquire(&short_lived).await.unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let e = leases
        .renew(thread, "someone-else", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::LeaseLost { .. }), "{e:?}");
    let next = LeaseRequest {
        holder: "next",
        ..foreign.clone()
    };
    assert!(matches!(
        leases.acquire(&next).await.unwrap(),
        Acquired::Held {
            previous: weaver::checkpoint::Previous::Died,
            ..
        }
    ));
    leases.release(thread, "next", None).await.unwrap();
    // Bad times: refused, nothing written. A lease over the longest would
    // overflow the holder's deadline and leave the thread held.
    for times in [
        LeaseTimes::new(Duration::from_secs(1)).renew_every(Duration::from_secs(2)),
        LeaseTimes::new(Duration::MAX),
        LeaseTimes::new(LeaseTimes::MAX_LEASE + Duration::from_secs(1)),
    ] {
        let bad = RunConfig::thread(thread).lease_times(times);
        let e = g.invoke(say("x"), &bad).await.unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{times:?}: {e:?}");
    }
    assert!(
        saver
            .list(&ListFilter::thread(thread))
            .await
            .unwrap()
            .is_empty()
    );
}

/// `START -> ask -> END`, where `ask` pauses for an approval and then
/// says `approved:<answer>`.
fn asking(saver: &Arc<dyn Saver>) -> CompiledGraph<Talk> {
    Graph::<Talk>::new("paused")
        .add_node("ask", |_: &Talk, rt: &Runtime| {
            let answer = rt.interrupt(serde_json::json!("approve?"))?;
            Ok::<_, NodeError>(TalkUpdate::default().messages(vec![format!("approved:{answer}")]))
        })
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap()
}

/// A named holder's turn that pauses at an interrupt keeps the thread
/// until its resume: another run is refused meanwhile.
pub async fn a_paused_named_holder_keeps_the_thread(saver: Arc<dyn Saver>, thread: &str) {
    let g = asking(&saver);
    let mine = RunConfig::thread(thread)
        .lease_times(short())
        .lease_holder("w:1");
    let paused = g.invoke(say("u"), &mine).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    let other = RunConfig::thread(thread).lease_times(short());
    let e = g.invoke(say("v"), &other).await.unwrap_err();
    assert!(matches!(e, Error::ThreadBusy { .. }), "{e:?}");
    g.resume(serde_json::json!("yes"), &mine).await.unwrap();
    g.invoke(say("v"), &other)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// A named holder's turn paused at a static stop (before its tool, or
/// after the step before it) whose holder never came back is that pause:
/// the run that takes the thread over removes the turn, as it removes one
/// paused at an interrupt, and the tool never runs unreviewed. (The
/// takeover went on past the stop and ran the tool.)
pub async fn a_dead_named_holders_static_stop_is_removed_not_run(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    for before in [true, false] {
        let thread = format!("{thread}-{before}");
        let thread = thread.as_str();
        let tools = Arc::new(AtomicUsize::new(0));
        let counted = tools.clone();
        let stops = Compile::new().checkpointer_arc(saver.clone());
        let stops = match before {
            true => stops.interrupt_before(["tool"]),
            false => stops.interrupt_after(["plan"]),
        };
        let g = Graph::<Talk>::new("reviewed")
            .add_node("plan", |_: &Talk| {
                TalkUpdate::default().messages(vec!["plan".to_owned()])
            })
            .add_node("tool", move |_: &Talk| {
                counted.fetch_add(1, Ordering::SeqCst);
                TalkUpdate::default().messages(vec!["tool".to_owned()])
            })
            .add_sequence([START, "plan", "tool", END])
            .compile(stops)
            .unwrap();
        let alice = RunConfig::thread(thread)
            .lease_times(short())
            .lease_holder("alice");
        let paused = g.invoke(say("u"), &alice).await.unwrap();
        assert_eq!(paused.interrupts().len(), 1);
        // Alice never answers: her hold runs out.
        tokio::time::sleep(short().lease + Duration::from_millis(100)).await;
        let other = RunConfig::thread(thread).lease_times(short());
        let out = g.invoke(say("v"), &other).await.unwrap();
        assert!(out.is_interrupted(), "the new turn pauses at its own stop");
        assert_eq!(
            tools.load(Ordering::SeqCst),
            0,
            "before: {before}: the tool ran unreviewed"
        );
        let messages = transcript(&g, thread).await;
        assert!(!messages.contains(&"u".to_owned()), "{messages:?}");
        assert!(messages.contains(&"v".to_owned()), "{messages:?}");
    }
}

/// A named holder that resumed past its static stop and died once its
/// reviewed node had stored its result: the takeover finishes that turn,
/// since what is stored shows the stop was passed.
pub async fn a_dead_named_holders_resumed_turn_is_finished(saver: Arc<dyn Saver>, thread: &str) {
    let g = Graph::<Talk>::new("reviewed")
        .add_node("plan", |_: &Talk| {
            TalkUpdate::default().messages(vec!["plan".to_owned()])
        })
        .add_node("tool", |_: &Talk| {
            TalkUpdate::default().messages(vec!["tool".to_owned()])
        })
        .add_sequence([START, "plan", "tool", END])
        .compile(
            Compile::new()
                .checkpointer_arc(saver.clone())
                .interrupt_before(["tool"]),
        )
        .unwrap();
    let alice = RunConfig::thread(thread)
        .lease_times(short())
        .lease_holder("alice");
    g.invoke(say("u"), &alice).await.unwrap();
    // Alice resumes: her tool stores its result, then her process dies.
    let paused = g.get_state(&RunConfig::thread(thread)).await.unwrap();
    let leases = saver.leases().unwrap();
    let mut resumed = plain(thread, "alice", short().lease);
    resumed.owns_pause = true;
    assert!(matches!(
        leases.acquire(&resumed).await.unwrap(),
        Acquired::Held { .. }
    ));
    let at = paused.config.checkpoint_ref().expect("a stored checkpoint");
    let task = &paused.tasks[0];
    let wrote = weaver::checkpoint::PendingWrite {
        task_id: task.id.clone(),
        task_path: "tool".into(),
        idx: 0,
        channel: "messages".into(),
        value: serde_json::json!(["tool:alice"]),
    };
    saver.put_writes(&at, vec![wrote]).await.unwrap();
    tokio::time::sleep(short().lease + Duration::from_millis(100)).await;
    let other = RunConfig::thread(thread).lease_times(short());
    g.invoke(say("v"), &other).await.unwrap();
    let messages = transcript(&g, thread).await;
    assert!(
        messages.starts_with(&["u".to_owned(), "plan".to_owned(), "tool:alice".to_owned()]),
        "{messages:?}"
    );
}

/// A run under `Interrupt` or `Rollback` that gives up waiting takes its
/// stop request back: the running turn goes on and ends whole. The running
/// turn's renewals are held while the newer run asks and gives up, so it
/// sees the request only if it was left in the row.
pub async fn a_run_that_gives_up_takes_its_stop_request_back(saver: Arc<dyn Saver>, thread: &str) {
    for (i, strategy) in [
        Multitask::Interrupt {
            wait: Duration::from_millis(20),
        },
        Multitask::Rollback {
            wait: Duration::ZERO,
        },
    ]
    .into_iter()
    .enumerate()
    {
        let thread = format!("{thread}-{i}");
        let thread = thread.as_str();
        let watched = Arc::new(Forwarding::leasing(saver.clone()));
        let leasing: Arc<dyn Saver> = watched.clone();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let g = gated_turns(leasing.clone(), "a", gate.clone());
        let times = LeaseTimes::new(Duration::from_secs(30)).renew_every(Duration::from_millis(50));
        let config = RunConfig::thread(thread).lease_times(times);
        let renewals = watched.gate_renewals();
        let running = tokio::spawn({
            let (g, config) = (g.clone(), config.clone());
            async move { g.invoke(say("a"), &config).await }
        });
        let holder = held(&leasing, thread).await.holder;
        let e = g
            .invoke(say("b"), &config.clone().multitask(strategy))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::ThreadBusy { .. }), "{e:?}");
        let info = held(&leasing, thread).await;
        assert_eq!(info.holder, holder);
        assert_eq!(info.stop, None, "{strategy:?} left its request: {info:?}");
        // The running turn renews again, then ends its model step.
        let before = watched.renewed.load(Ordering::SeqCst);
        renewals.open.add_permits(1);
        let deadline = Instant::now() + Duration::from_secs(20);
        while watched.renewed.load(Ordering::SeqCst) == before {
            assert!(Instant::now() < deadline, "the running turn never renewed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        gate.add_permits(1);
        running
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("the running turn was stopped under {strategy:?}: {e}"));
        assert_eq!(whole_turns(&transcript(&g, thread).await), ["a"]);
    }
}

/// A holder that saw a stop request stops as asked, and leaves the row so:
/// a request taken back after the holder saw it (the asking run gave up in
/// the meantime) does not make the stopped holder look dead, which a
/// `Rollback` run would roll back and any other run would finish.
pub async fn a_holder_stopped_as_asked_is_not_taken_for_dead(saver: Arc<dyn Saver>, thread: &str) {
    let leases = saver.leases().unwrap();
    let lease = Duration::from_secs(30);
    assert!(matches!(
        leases
            .acquire(&LeaseRequest {
                thread_id: thread,
                ..ask("a")
            })
            .await
            .unwrap(),
        Acquired::Held { .. }
    ));
    leases
        .request_stop(thread, "a", weaver::checkpoint::Stop::Interrupt)
        .await
        .unwrap();
    let seen = leases.renew(thread, "a", lease).await.unwrap();
    assert_eq!(seen.stop, Some(weaver::checkpoint::Stop::Interrupt));
    leases
        .withdraw_stop(thread, "a", weaver::checkpoint::Stop::Interrupt)
        .await
        .unwrap();
    leases
        .release(thread, "a", Some(weaver::checkpoint::Stop::Interrupt))
        .await
        .unwrap();
    let next = LeaseRequest {
        thread_id: thread,
        roll_back_dead: true,
        ..ask("d")
    };
    let taken = leases.acquire(&next).await.unwrap();
    assert!(
        matches!(
            taken,
            Acquired::Held {
                previous: weaver::checkpoint::Previous::Stopped(
                    weaver::checkpoint::Stop::Interrupt
                ),
                rolled_back: 0,
                ..
            }
        ),
        "{taken:?}"
    );
    leases.release(thread, "d", None).await.unwrap();
}

/// The `ask` node of [`a_run_asked_to_stop_that_pauses_stops`]: waits for
/// a permit of the run's gate (its context), then pauses.
async fn gated_ask(t: &Talk, rt: &Runtime) -> Result<TalkUpdate, NodeError> {
    let u = last_user(t);
    let gate = rt
        .context::<Arc<tokio::sync::Semaphore>>()
        .cloned()
        .ok_or_else(|| NodeError::msg("the run has no gate"))?;
    let _permit = gate.acquire().await;
    let answer = rt.interrupt(serde_json::json!("approve?"))?;
    Ok(TalkUpdate::default().messages(vec![format!("{u}:{answer}")]))
}

/// A run asked to stop that reaches a pause stops there with `RunStopped`
/// rather than hand its caller a pause the newer run then removes: under
/// `Rollback` the newer run goes on from before the stopped turn.
pub async fn a_run_asked_to_stop_that_pauses_stops(saver: Arc<dyn Saver>, thread: &str) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = Graph::<Talk>::new("asks")
        .add_node("ask", gated_ask)
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread(thread)
        .lease_times(short())
        .with_context(gate.clone());
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&saver, thread).await;
    let newer = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move {
            let rollback = config.multitask(Multitask::Rollback {
                wait: Duration::from_secs(60),
            });
            g.invoke(say("b"), &rollback).await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), watched.stop_noticed())
        .await
        .expect("the running turn never took in the stop request");
    gate.add_permits(2);
    let stopped = running.await.unwrap();
    assert!(
        matches!(&stopped, Err(Error::RunStopped { strategy, .. }) if *strategy == "rollback"),
        "{stopped:?}"
    );
    let next = newer.await.unwrap().unwrap();
    assert_eq!(next.interrupts().len(), 1, "the newer turn pauses in turn");
    assert_eq!(transcript(&g, thread).await, ["b"]);
    one_chain(&saver, thread).await;
}

/// A waiting run dropped while it takes its stop request back still takes
/// it back (in the background): the holder goes on.
pub async fn a_run_dropped_while_it_takes_its_request_back_still_does(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let leasing: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(leasing.clone(), "a", gate.clone());
    let times = LeaseTimes::new(Duration::from_secs(30)).renew_every(Duration::from_millis(50));
    let config = RunConfig::thread(thread).lease_times(times);
    let renewals = watched.gate_renewals();
    let withdrawals = watched.gate_withdrawals();
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&leasing, thread).await;
    let entered = withdrawals.entered.notified();
    let asking = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move {
            let interrupt = config.multitask(Multitask::Interrupt {
                wait: Duration::from_millis(20),
            });
            g.invoke(say("b"), &interrupt).await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), entered)
        .await
        .expect("the asking run never took its request back");
    asking.abort();
    assert!(asking.await.unwrap_err().is_cancelled());
    withdrawals.open.add_permits(1);
    let leases = leasing.leases().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while held(&leasing, thread).await.stop.is_some() {
        assert!(
            Instant::now() < deadline,
            "the dropped run's request stayed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(leases.lease_info(thread).await.unwrap().is_some());
    renewals.open.add_permits(1);
    gate.add_permits(1);
    running
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the running turn was stopped: {e}"));
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a"]);
}

/// A stop request that fails leaves no ticket behind: the waiting run
/// leaves the queue, and the thread is free once its holder gives it back.
/// An empty holder name is refused, by the run and by the saver.
pub async fn a_failed_stop_request_leaves_the_queue(saver: Arc<dyn Saver>, thread: &str) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let leasing: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(leasing.clone(), "a", gate.clone());
    let config = RunConfig::thread(thread).lease_times(short());
    let e = g
        .invoke(say("x"), &config.clone().lease_holder(""))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidConfig { .. }), "{e:?}");
    let nameless = LeaseRequest {
        thread_id: thread,
        ..ask("")
    };
    let e = leasing
        .leases()
        .unwrap()
        .acquire(&nameless)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&leasing, thread).await;
    watched.fail_request_stop.store(true, Ordering::SeqCst);
    let interrupt = config.clone().multitask(Multitask::Interrupt {
        wait: Duration::from_secs(5),
    });
    let e = g.invoke(say("b"), &interrupt).await.unwrap_err();
    assert!(matches!(e, Error::Storage { .. }), "{e:?}");
    assert_eq!(held(&leasing, thread).await.queued, 0, "a ticket stayed");
    gate.add_permits(1);
    running.await.unwrap().unwrap();
    g.invoke(say("c"), &config).await.unwrap();
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a", "c"]);
}

/// A named holder paused at an interrupt, asked to stop by a newer run
/// meanwhile, stops when it resumes: its resume fails with `RunStopped`
/// before running anything, and the newer run goes on from the paused
/// turn (`Interrupt`) or without it (`Rollback`).
pub async fn a_named_holders_resume_stops_when_asked_to(saver: Arc<dyn Saver>, thread: &str) {
    let g = asking(&saver);
    let leases = saver.leases().unwrap();
    for (strategy, name, kept) in [
        (
            Multitask::Interrupt {
                wait: Duration::from_secs(30),
            },
            "interrupt",
            vec!["u", "v"],
        ),
        (
            Multitask::Rollback {
                wait: Duration::from_secs(30),
            },
            "rollback",
            vec!["v"],
        ),
    ] {
        let thread = format!("{thread}-{name}");
        let thread = thread.as_str();
        let mine = RunConfig::thread(thread)
            .lease_times(patient())
            .lease_holder("w:1");
        let paused = g.invoke(say("u"), &mine).await.unwrap();
        assert_eq!(paused.interrupts().len(), 1);
        let newer = tokio::spawn({
            let g = g.clone();
            let config = RunConfig::thread(thread)
                .lease_times(patient())
                .multitask(strategy);
            async move { g.invoke(say("v"), &config).await }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while leases
            .lease_info(thread)
            .await
            .unwrap()
            .and_then(|l| l.stop)
            .is_none()
        {
            assert!(Instant::now() < deadline, "the newer run never asked");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let e = g.resume(serde_json::json!("yes"), &mine).await.unwrap_err();
        assert!(
            matches!(&e, Error::RunStopped { strategy, .. } if *strategy == name),
            "{e:?}"
        );
        let next = newer
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("the newer run under {name}: {e}"));
        assert_eq!(next.interrupts().len(), 1, "the newer turn pauses in turn");
        assert_eq!(transcript(&g, thread).await, kept, "under {name}");
        one_chain(&saver, thread).await;
    }
}

/// The `charge` node: a journaled charge (counted in the run's context),
/// then the approval pause.
async fn charge(t: &Talk, rt: &Runtime) -> Result<TalkUpdate, NodeError> {
    let u = last_user(t);
    let calls = rt
        .context::<Arc<AtomicUsize>>()
        .cloned()
        .ok_or_else(|| NodeError::msg("the run has no charge counter"))?;
    let receipt: String = rt
        .effect("charge", |_key| async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            Ok::<_, std::io::Error>(format!("charge-{n}"))
        })
        .await?;
    let answer = rt.interrupt(serde_json::json!("approve?"))?;
    let answer = answer.as_str().unwrap_or_default().to_owned();
    Ok(TalkUpdate::default().messages(vec![format!("charged:{u}:{receipt}:{answer}")]))
}

/// A thread whose last turn was run by a holder that died at its pause
/// (its lease runs out, never given back), the charge before the pause
/// journaled; `owns_pause`: the holder answered its own pauses. Before
/// it, one whole turn `first`. Returns the graph, the charge counter and
/// the thread's config.
async fn a_dead_holders_paused_turn(
    saver: &Arc<dyn Saver>,
    thread: &str,
    owns_pause: bool,
) -> (CompiledGraph<Talk>, Arc<AtomicUsize>, RunConfig) {
    let calls = Arc::new(AtomicUsize::new(0));
    let g = Graph::<Talk>::new("charges")
        .add_node("charge", charge)
        .add_sequence([START, "charge", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread(thread).with_context(calls.clone());
    let race = config.clone().multitask(Multitask::Race);
    g.invoke(say("first"), &race).await.unwrap();
    g.resume(serde_json::json!("ok"), &race).await.unwrap();
    let leases = saver.leases().unwrap();
    let dead = LeaseRequest {
        thread_id: thread,
        holder: "dead",
        lease: Duration::from_millis(150),
        queue: false,
        ticket: None,
        roll_back_dead: false,
        owns_pause,
        interrupting: false,
    };
    assert!(matches!(
        leases.acquire(&dead).await.unwrap(),
        Acquired::Held { .. }
    ));
    let info = leases.lease_info(thread).await.unwrap().unwrap();
    assert_eq!(info.owns_pause, owns_pause, "{info:?}");
    let paused = g.invoke(say("dead"), &race).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    (g, calls, config)
}

/// A run that takes over a dead holder's thread finishes the dead run; if
/// that run pauses, the pause stays, with the charge journaled before it,
/// for anyone to resume (the resume does not charge again), unless the
/// dead holder answered its own pauses (a named holder): then no one will,
/// and its turn is removed before the new run goes.
pub async fn a_dead_holders_pause_stays_unless_it_owned_it(saver: Arc<dyn Saver>, thread: &str) {
    let unnamed = format!("{thread}-unnamed");
    let (g, calls, config) = a_dead_holders_paused_turn(&saver, &unnamed, false).await;
    let enqueue = config.lease_times(short()).multitask(Multitask::Enqueue {
        wait: Duration::from_secs(20),
    });
    let done = g
        .resume(serde_json::json!("yes"), &enqueue)
        .await
        .unwrap_or_else(|e| panic!("the dead holder's pause was resumed: {e}"));
    assert!(done.interrupts().is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 2, "charged once per turn");
    assert_eq!(
        transcript(&g, &unnamed).await,
        [
            "first",
            "charged:first:charge-1:ok",
            "dead",
            "charged:dead:charge-2:yes"
        ]
    );
    one_chain(&saver, &unnamed).await;

    let named = format!("{thread}-named");
    let (g, calls, config) = a_dead_holders_paused_turn(&saver, &named, true).await;
    let enqueue = config.lease_times(short()).multitask(Multitask::Enqueue {
        wait: Duration::from_secs(20),
    });
    let next = g.invoke(say("next"), &enqueue).await.unwrap();
    assert_eq!(next.interrupts().len(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "the new turn charges");
    assert_eq!(
        transcript(&g, &named).await,
        ["first", "charged:first:charge-1:ok", "next"],
        "the dead holder's turn is gone"
    );
    one_chain(&saver, &named).await;
}

/// A named holder's turn with two pauses: its resume re-takes the lease it
/// kept and the row keeps the turn's base (the head before the turn). If
/// the holder then never answers its second pause, the run that takes the
/// thread over removes the whole turn, not only its resumed half.
pub async fn a_holders_resume_keeps_its_turns_base(saver: Arc<dyn Saver>, thread: &str) {
    a_holders_resume_keeps_its_turns_base_with(saver, thread, short()).await;
}

/// [`a_holders_resume_keeps_its_turns_base`] with lease times `times`
/// (the MongoDB test server needs [`patient`] ones: a 300 ms lease can run
/// out between two of its renewals on a loaded machine).
pub async fn a_holders_resume_keeps_its_turns_base_with(
    saver: Arc<dyn Saver>,
    thread: &str,
    times: LeaseTimes,
) {
    let ask = |name: &'static str| {
        move |_: &Talk, rt: &Runtime| {
            let answer = rt.interrupt(serde_json::json!(name))?;
            let answer = answer.as_str().unwrap_or_default().to_owned();
            Ok::<_, NodeError>(TalkUpdate::default().messages(vec![format!("{name}:{answer}")]))
        }
    };
    let g = Graph::<Talk>::new("two-pauses")
        .add_node("ask1", ask("ask1"))
        .add_node("ask2", ask("ask2"))
        .add_sequence([START, "ask1", "ask2", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    g.invoke(say("first"), &race).await.unwrap();
    g.resume(serde_json::json!("a"), &race).await.unwrap();
    g.resume(serde_json::json!("b"), &race).await.unwrap();
    let before = saver.list(&ListFilter::thread(thread)).await.unwrap()[0].commit_order;

    let mine = RunConfig::thread(thread)
        .lease_times(times)
        .lease_holder("w:1");
    let paused = g.invoke(say("u"), &mine).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    let leases = saver.leases().unwrap();
    let info = leases.lease_info(thread).await.unwrap().unwrap();
    assert_eq!((info.holder.as_str(), info.base_order), ("w:1", before));
    let paused = g.resume(serde_json::json!("c"), &mine).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1, "at the second pause");
    let info = leases.lease_info(thread).await.unwrap().unwrap();
    assert_eq!(
        (info.holder.as_str(), info.base_order),
        ("w:1", before),
        "the resume keeps the turn's base"
    );
    // w:1 never answers: its hold runs out, the next run takes over.
    let other = RunConfig::thread(thread)
        .lease_times(times)
        .multitask(Multitask::Enqueue {
            wait: Duration::from_secs(20),
        });
    let next = g.invoke(say("v"), &other).await.unwrap();
    assert_eq!(next.interrupts().len(), 1);
    assert_eq!(
        transcript(&g, thread).await,
        ["first", "ask1:a", "ask2:b", "v"],
        "no half of w:1's turn is left"
    );
    one_chain(&saver, thread).await;
}

/// A waiting run's ticket is dropped when it is not presented again for
/// the lease time of the run that holds it, whatever the lease time of the
/// run that looks: a caller with a short lease does not drop the ticket of
/// a live waiter with a long one (taking its place), and a caller with a
/// long lease does drop a dead short-lease waiter's ticket.
pub async fn a_ticket_lasts_its_own_lease_time(saver: Arc<dyn Saver>, thread: &str) {
    let leases = saver.leases().unwrap();
    let request = |holder: &'static str, lease_ms: u64, ticket: Option<i64>| LeaseRequest {
        thread_id: thread,
        holder,
        lease: Duration::from_millis(lease_ms),
        queue: true,
        ticket,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    let ticket_of = |a: Acquired| match a {
        Acquired::Busy {
            ticket: Some(k), ..
        } => k,
        other => panic!("expected a ticket, got {other:?}"),
    };
    let queued = || async { leases.lease_info(thread).await.unwrap().unwrap().queued };
    assert!(matches!(
        leases
            .acquire(&request("holder", 60_000, None))
            .await
            .unwrap(),
        Acquired::Held { .. }
    ));
    let patient = ticket_of(
        leases
            .acquire(&request("patient", 60_000, None))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A caller with a 100 ms lease, 300 ms after the patient waiter was
    // last seen: the patient ticket stays, ahead of the caller's.
    let hasty = ticket_of(leases.acquire(&request("hasty", 100, None)).await.unwrap());
    assert_eq!(queued().await, 2, "the patient waiter's ticket was dropped");
    leases.release(thread, "holder", None).await.unwrap();
    let hasty_turn = leases
        .acquire(&request("hasty", 100, Some(hasty)))
        .await
        .unwrap();
    assert!(
        matches!(hasty_turn, Acquired::Busy { .. }),
        "the hasty caller went first: {hasty_turn:?}"
    );
    assert!(matches!(
        leases
            .acquire(&request("patient", 60_000, Some(patient)))
            .await
            .unwrap(),
        Acquired::Held { .. }
    ));
    // The hasty caller dies (never presents its ticket again): a caller
    // with a long lease drops it once its own 100 ms ran out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ticket_of(
        leases
            .acquire(&request("late", 60_000, None))
            .await
            .unwrap(),
    );
    assert_eq!(queued().await, 1, "the dead hasty waiter's ticket stayed");
    leases.release(thread, "patient", None).await.unwrap();
}

/// A waiting run's ticket number is never handed out again on its
/// thread: after the newest ticket leaves the queue, the next waiter gets
/// a new number, so the first waiter presenting (or leaving with) its old
/// ticket cannot take the second's place or remove it.
pub async fn ticket_numbers_are_never_handed_out_twice(saver: Arc<dyn Saver>, thread: &str) {
    let leases = saver.leases().unwrap();
    let request = |holder: &'static str, ticket: Option<i64>| LeaseRequest {
        thread_id: thread,
        holder,
        lease: Duration::from_secs(60),
        queue: true,
        ticket,
        roll_back_dead: false,
        owns_pause: false,
        interrupting: false,
    };
    let ticket_of = |a: Acquired| match a {
        Acquired::Busy {
            ticket: Some(k), ..
        } => k,
        other => panic!("expected a ticket, got {other:?}"),
    };
    assert!(matches!(
        leases.acquire(&request("holder", None)).await.unwrap(),
        Acquired::Held { .. }
    ));
    let first = ticket_of(leases.acquire(&request("first", None)).await.unwrap());
    let gone = ticket_of(leases.acquire(&request("gone", None)).await.unwrap());
    assert_ne!(first, gone);
    // The newest ticket leaves; the next waiter's number is still new.
    leases.leave_queue(thread, gone).await.unwrap();
    let second = ticket_of(leases.acquire(&request("second", None)).await.unwrap());
    assert!(second != first && second != gone, "{first} {gone} {second}");
    // `gone`'s old number, presented again, is not `second`'s place.
    let stale = ticket_of(leases.acquire(&request("gone", Some(gone))).await.unwrap());
    assert_ne!(stale, second);
    assert_eq!(leases.lease_info(thread).await.unwrap().unwrap().queued, 3);
    // Leaving with the old number removes nothing of the second's.
    leases.leave_queue(thread, gone).await.unwrap();
    assert_eq!(leases.lease_info(thread).await.unwrap().unwrap().queued, 3);
    // Every waiter leaves and the holder gives the thread back: numbers
    // handed out before are still not handed out again.
    let before = [first, gone, second, stale];
    for k in [first, second, stale] {
        leases.leave_queue(thread, k).await.unwrap();
    }
    leases.release(thread, "holder", None).await.unwrap();
    assert!(leases.lease_info(thread).await.unwrap().is_none());
    assert!(matches!(
        leases.acquire(&request("next", None)).await.unwrap(),
        Acquired::Held { .. }
    ));
    let after = ticket_of(leases.acquire(&request("later", None)).await.unwrap());
    assert!(
        !before.contains(&after),
        "{after} was handed out before: {before:?}"
    );
    leases.release(thread, "next", None).await.unwrap();
}

/// A run that returned its result is never handed over as stopped: a stop
/// request that reaches it after its last step boundary (during its final
/// write, under `Durability::Exit`) does not let the newer `Rollback` run
/// remove the turn its caller was told had finished.
pub async fn a_finished_run_is_never_rolled_back_as_stopped(saver: Arc<dyn Saver>, thread: &str) {
    finished_run_stopped_late(saver, thread, false).await;
}

/// A finished run cut off while it gives its lease back (its caller's
/// timeout, a dropped task) is given back as it ended: a stop request that
/// reached it after its last step boundary does not let the newer
/// `Rollback` run remove the turn it finished.
pub async fn a_finished_run_dropped_as_it_gives_back_is_not_rolled_back(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    finished_run_stopped_late(saver, thread, true).await;
}

/// Run `a` finishes while a `Rollback` run `b` asks it to stop (the
/// request reaches it during its one write, at exit); `cut_off`: `a` is
/// dropped while it gives its lease back. `a`'s turn stays either way.
async fn finished_run_stopped_late(saver: Arc<dyn Saver>, thread: &str, cut_off: bool) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let config = RunConfig::thread(thread).lease_times(short());
    g.invoke(say("first"), &config).await.unwrap();
    // `a` runs its steps, then waits in its one write (at exit).
    let writes = watched.gate_writes();
    let releases = cut_off.then(|| watched.gate_release());
    let entered = writes.entered.notified();
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone().durability(Durability::Exit));
        async move { g.invoke(say("a"), &config).await }
    });
    entered.await;
    let opener = tokio::spawn({
        let (watched, writes) = (watched.clone(), writes.clone());
        async move {
            let noticed =
                tokio::time::timeout(Duration::from_secs(30), watched.stop_noticed()).await;
            writes.open.add_permits(1_000);
            noticed.is_ok()
        }
    });
    let wait = Duration::from_secs(60);
    let b = tokio::spawn({
        let (g, config) = (
            g.clone(),
            config.clone().multitask(Multitask::Rollback { wait }),
        );
        async move { g.invoke(say("b"), &config).await }
    });
    assert!(opener.await.unwrap(), "the stop request was never taken in");
    match releases {
        // `a` finished and is giving its lease back: cut it off there.
        Some(releases) => {
            releases.entered.notified().await;
            running.abort();
            assert!(running.await.unwrap_err().is_cancelled());
            releases.open.add_permits(1_000);
            b.await.unwrap().unwrap();
        }
        None => {
            b.await.unwrap().unwrap();
            let a = running.await.unwrap();
            assert!(matches!(a, Ok(Outcome::Complete(_))), "{a:?}");
        }
    }
    assert_eq!(
        whole_turns(&transcript(&g, thread).await),
        ["first", "a", "b"],
        "the finished turn stays"
    );
    one_chain(&saver, thread).await;
}

/// A lease taken at the end of a long acquire call (a saver running its
/// transaction again after conflicts, for longer than the lease lasts) is
/// renewed at once: the run does not stop with `LeaseLost` at its first
/// step boundary for a lease that the saver holds for it.
pub async fn a_lease_taken_at_the_end_of_a_slow_call_is_renewed_at_once(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let watched = Arc::new(Forwarding::leasing(saver));
    *watched.slow_acquire.lock().unwrap() = Some(short().lease * 2);
    let saver: Arc<dyn Saver> = watched.clone();
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let config = RunConfig::thread(thread).lease_times(short());
    g.invoke(say("a"), &config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a"]);
}

/// Deleting a thread (by `delete_thread`, then by `prune` with
/// [`PruneStrategy::Delete`]) forgets its lease: a thread deleted while its
/// last holder's lease says that holder died, then written again, is not
/// taken for that holder's unfinished turn, and a rollback run rolls back
/// nothing of the new thread.
pub async fn a_deleted_thread_forgets_its_holder(saver: Arc<dyn Saver>, thread: &str) {
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    let leases = saver.leases().unwrap();
    for by_prune in [false, true] {
        g.invoke(say("old"), &race).await.unwrap();
        // A holder that dies on the old thread's head.
        let dead = plain(thread, "dead", Duration::from_millis(50));
        assert!(matches!(
            leases.acquire(&dead).await.unwrap(),
            Acquired::Held { .. }
        ));
        if by_prune {
            let gone = saver
                .prune(&[thread.to_owned()], PruneStrategy::Delete)
                .await
                .unwrap();
            assert!(gone > 0);
        } else {
            saver.delete_thread(thread).await.unwrap();
        }
        assert_eq!(
            leases.lease_info(thread).await.unwrap().map(|l| l.holder),
            None,
            "the deleted thread's lease is gone (by prune: {by_prune})"
        );
        // The thread written again, past the dead holder's base.
        for u in ["new1", "new2", "new3"] {
            g.invoke(say(u), &race).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let rollback =
            RunConfig::thread(thread)
                .lease_times(short())
                .multitask(Multitask::Rollback {
                    wait: Duration::from_secs(10),
                });
        g.invoke(say("last"), &rollback).await.unwrap();
        assert_eq!(
            whole_turns(&transcript(&g, thread).await),
            ["new1", "new2", "new3", "last"],
            "nothing of the new thread rolled back (by prune: {by_prune})"
        );
        one_chain(&saver, thread).await;
        saver.delete_thread(thread).await.unwrap();
    }
}

/// A resume rolled back by a newer resume (`Rollback`) leaves the pause as
/// it was: the rolled-back answer and what the resumed node wrote with it
/// go with the turn, and the newer answer is the one the thread keeps.
pub async fn a_rolled_back_resume_leaves_the_pause_to_the_next(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = Graph::<Talk>::new("ask_then_slow")
        .add_node("ask", |_: &Talk, rt: &Runtime| {
            let answer = rt.interrupt(serde_json::json!("approve?"))?;
            let answer = answer.as_str().unwrap_or("?").to_owned();
            Ok::<_, NodeError>(TalkUpdate::default().messages(vec![format!("approved:{answer}")]))
        })
        .add_node("slow", {
            let gate = gate.clone();
            move |_: &Talk| {
                let gate = gate.clone();
                async move {
                    let _permit = gate.acquire().await;
                    TalkUpdate::default().messages(vec!["slow".to_owned()])
                }
            }
        })
        .add_sequence([START, "ask", "slow", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .unwrap();
    let config = RunConfig::thread(thread).lease_times(short());
    let paused = g.invoke(say("u"), &config).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    // `a` answers, and its turn waits in `slow`.
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.resume(serde_json::json!("a"), &config).await }
    });
    committed(&g, thread, "approved:a").await;
    let opener = tokio::spawn(async move {
        let noticed = tokio::time::timeout(Duration::from_secs(30), watched.stop_noticed()).await;
        gate.add_permits(100);
        noticed.is_ok()
    });
    let wait = Duration::from_secs(60);
    let b = g
        .resume(
            serde_json::json!("b"),
            &config.clone().multitask(Multitask::Rollback { wait }),
        )
        .await;
    assert!(opener.await.unwrap(), "the stop request was never taken in");
    let a = running.await.unwrap();
    assert!(matches!(a, Err(Error::RunStopped { .. })), "{a:?}");
    b.unwrap_or_else(|e| panic!("the newer resume: {e}"));
    assert_eq!(
        transcript(&g, thread).await,
        ["u", "approved:b", "slow"],
        "the rolled-back answer is gone"
    );
    one_chain(&saver, thread).await;
}

/// A holder that truncates its thread below its base (a run that took over
/// a dead holder's paused turn and removes it) has its base brought down
/// there: its own turn now starts at that checkpoint, and a rollback of it
/// removes everything it stored from there.
pub async fn a_truncate_below_the_base_lowers_it(saver: Arc<dyn Saver>, thread: &str) {
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    for u in ["one", "two"] {
        g.invoke(say(u), &race).await.unwrap();
    }
    let head = saver.list(&ListFilter::thread(thread)).await.unwrap()[0].commit_order;
    let leases = saver.leases().unwrap();
    let mine = plain(thread, "h", Duration::from_secs(30));
    assert!(matches!(
        leases.acquire(&mine).await.unwrap(),
        Acquired::Held { .. }
    ));
    assert_eq!(
        leases.lease_info(thread).await.unwrap().unwrap().base_order,
        head
    );
    let gone = leases.truncate(thread, "h", 3).await.unwrap();
    assert_eq!(gone, head - 3);
    assert_eq!(
        leases.lease_info(thread).await.unwrap().unwrap().base_order,
        3,
        "the base came down with the truncate"
    );
    leases.release(thread, "h", None).await.unwrap();
}

/// A checkpoint rewritten in place (stored checkpoints upgraded) while a
/// holder keeps a copy of its writes: a rollback to it keeps the rewritten
/// writes, not the copy taken before the rewrite.
pub async fn a_rewritten_base_is_not_put_back_as_it_was(saver: Arc<dyn Saver>, thread: &str) {
    let g = asking(&saver);
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    let paused = g.invoke(say("u"), &race).await.unwrap();
    assert_eq!(paused.interrupts().len(), 1);
    let leases = saver.leases().unwrap();
    let mine = plain(thread, "h", Duration::from_secs(30));
    assert!(matches!(
        leases.acquire(&mine).await.unwrap(),
        Acquired::Held { .. }
    ));
    let head = || async {
        saver
            .get_tuple(&weaver::checkpoint::CheckpointRef::latest(thread))
            .await
            .unwrap()
            .unwrap()
    };
    let read = head().await;
    let base = read.commit_order;
    let mut change = weaver::checkpoint::Replacement::of(read);
    let record = &mut change.record;
    let mut changed = 0;
    for w in &mut record.pending_writes {
        let text = w.value.to_string();
        if text.contains("approve?") {
            w.value = serde_json::from_str(&text.replace("approve?", "approve? (v2)")).unwrap();
            changed += 1;
        }
    }
    assert_eq!(changed, 1, "{:?}", record.pending_writes);
    let rewrites = saver.rewrites().expect("the saver rewrites");
    assert_eq!(rewrites.replace(vec![change]).await.unwrap(), 1);
    leases.truncate(thread, "h", base).await.unwrap();
    let after = head().await;
    assert!(
        after
            .pending_writes
            .iter()
            .any(|w| w.value.to_string().contains("approve? (v2)")),
        "the rewritten writes stay: {:?}",
        after.pending_writes
    );
    leases.release(thread, "h", None).await.unwrap();
}

/// A run cancelled while its `async` writes are still queued gives its
/// lease back only once they landed: a run in another process that takes
/// the thread next reads the head the cancelled run left, not one about to
/// move. (The lease was given back at once, and the next run conflicted
/// with the writes landing under it.)
pub async fn a_cancelled_run_gives_its_lease_back_once_its_writes_land(
    saver: Arc<dyn Saver>,
    thread: &str,
) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let leasing: Arc<dyn Saver> = watched.clone();
    // Two graphs, each with its own handle on the saver: two processes.
    // Turn `a`'s model step waits for a permit of `held`.
    let held = Arc::new(tokio::sync::Semaphore::new(0));
    let a = gated_turns(leasing.clone(), "a", held.clone());
    let b = gated_turns(leasing.clone(), "a", held.clone());
    // Short leases: the writes are held for longer than one.
    let config = RunConfig::thread(thread)
        .lease_times(short())
        .durability(Durability::Async);
    a.invoke(say("first"), &config).await.unwrap();
    // `a`'s background writes wait at the gate while its model step waits;
    // the run is cancelled there.
    let writes = watched.gate_writes();
    let releases = watched.gate_release();
    let running = tokio::spawn({
        let (a, config) = (a.clone(), config.clone());
        async move { a.invoke(say("a"), &config).await }
    });
    writes.entered.notified().await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    // Were `a` taken for a dead holder, the next run would finish it.
    held.add_permits(1_000);
    let early = tokio::time::timeout(Duration::from_millis(300), releases.entered.notified()).await;
    assert!(
        early.is_err(),
        "the lease was given back before the run's queued writes landed"
    );
    // Held past the lease time: the lease is renewed meanwhile.
    tokio::time::sleep(Duration::from_millis(400)).await;
    writes.open.add_permits(1_000);
    tokio::time::timeout(Duration::from_secs(30), releases.entered.notified())
        .await
        .expect("the lease was never given back");
    releases.open.add_permits(1_000);
    let leases = leasing.leases().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while leases
        .lease_info(thread)
        .await
        .unwrap()
        .is_some_and(|l| l.remaining_ms > 0)
    {
        assert!(Instant::now() < deadline, "the lease stayed held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.invoke(say("b"), &config).await.unwrap();
    // The cancelled turn keeps what it committed (as a stopped one does),
    // and the next goes on from there: it does not finish it as a dead
    // holder's.
    let t = transcript(&b, thread).await;
    assert_eq!(
        t,
        [
            "first",
            "assistant:first",
            "tool:first",
            "a",
            "b",
            "assistant:b",
            "tool:b"
        ],
        "{t:?}"
    );
    one_chain(&leasing, thread).await;
}

/// A rollback to a base that a prune removed meanwhile (the host kept only
/// the newest checkpoint during a holder's turn) keeps the turn: the
/// thread is never left without its root history. (Every root checkpoint
/// above the pruned base went, and the thread had none left.)
pub async fn a_rollback_to_a_pruned_base_keeps_the_turn(saver: Arc<dyn Saver>, thread: &str) {
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    g.invoke(say("one"), &race).await.unwrap();
    let base = saver.list(&ListFilter::thread(thread)).await.unwrap()[0].commit_order;
    let leases = saver.leases().unwrap();
    let mine = plain(thread, "h", Duration::from_secs(30));
    assert!(matches!(
        leases.acquire(&mine).await.unwrap(),
        Acquired::Held { .. }
    ));
    // The holder's turn, then the host's prune to the newest checkpoint.
    g.invoke(say("two"), &race).await.unwrap();
    saver
        .prune(&[thread.to_owned()], PruneStrategy::KeepLast(1))
        .await
        .unwrap();
    let gone = leases.truncate(thread, "h", base).await.unwrap();
    assert_eq!(gone, 0, "the turn above a pruned base was removed");
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["one", "two"]);
    leases.release(thread, "h", None).await.unwrap();

    // A holder that took the thread over, refused the same rollback, keeps
    // its own base: it is not lowered to the one that is gone (a later
    // rollback of its own turn would then find nothing to go back to).
    let short = plain(thread, "h1", Duration::from_millis(100));
    assert!(matches!(
        leases.acquire(&short).await.unwrap(),
        Acquired::Held { .. }
    ));
    let before = saver.list(&ListFilter::thread(thread)).await.unwrap()[0].commit_order;
    g.invoke(say("three"), &race).await.unwrap();
    saver
        .prune(&[thread.to_owned()], PruneStrategy::KeepLast(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let next = plain(thread, "h2", Duration::from_secs(30));
    assert!(matches!(
        leases.acquire(&next).await.unwrap(),
        Acquired::Held { .. }
    ));
    let own = leases.lease_info(thread).await.unwrap().unwrap().base_order;
    assert!(own > before, "{own} {before}");
    assert_eq!(leases.truncate(thread, "h2", before).await.unwrap(), 0);
    assert_eq!(
        leases.lease_info(thread).await.unwrap().unwrap().base_order,
        own,
        "the base came down to a checkpoint that is gone"
    );
    leases.release(thread, "h2", None).await.unwrap();

    // A dead holder's unfinished turn over a pruned base, taken over by a
    // `Rollback` run: nothing is rolled back, so the run finishes it first
    // (its input landed on the unfinished turn).
    let dead = format!("{thread}-dead");
    let failing = Arc::new(AtomicBool::new(false));
    let g = turns(saver.clone(), Duration::from_millis(1), failing.clone());
    let race = RunConfig::thread(&dead).multitask(Multitask::Race);
    g.invoke(say("one"), &race).await.unwrap();
    let short = plain(&dead, "h1", Duration::from_millis(100));
    assert!(matches!(
        leases.acquire(&short).await.unwrap(),
        Acquired::Held { .. }
    ));
    failing.store(true, Ordering::SeqCst);
    assert!(g.invoke(say("two"), &race).await.is_err());
    failing.store(false, Ordering::SeqCst);
    saver
        .prune(std::slice::from_ref(&dead), PruneStrategy::KeepLast(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rollback = RunConfig::thread(&dead).multitask(Multitask::Rollback {
        wait: Duration::from_secs(5),
    });
    g.invoke(say("three"), &rollback).await.unwrap();
    assert_eq!(
        whole_turns(&transcript(&g, &dead).await),
        ["one", "two", "three"]
    );
}

/// A run asked to stop while its task runs a subgraph stops at the
/// subgraph's next step boundary, as at its own: the subgraph's later
/// nodes do not run, the run ends with `RunStopped`, and the newer run
/// goes on. (The subgraph ran to its end first: its run did not watch the
/// lease.)
pub async fn a_run_asked_to_stop_stops_inside_its_subgraph(saver: Arc<dyn Saver>, thread: &str) {
    let watched = Arc::new(Forwarding::leasing(saver));
    let saver: Arc<dyn Saver> = watched.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut inner = Graph::<Talk>::new("inner");
    let mut order = vec![START.to_owned()];
    for i in 0..5 {
        let (gate, ran) = (gate.clone(), ran.clone());
        let name = format!("inner{i}");
        inner = inner.add_node(&name, move |t: &Talk| {
            let u = last_user(t);
            let (gate, ran) = (gate.clone(), ran.clone());
            async move {
                if u == "a" {
                    if i == 0 {
                        let _permit = gate.acquire().await;
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                }
                TalkUpdate::default().messages(vec![format!("inner{i}:{u}")])
            }
        });
        order.push(name);
    }
    order.push(END.to_owned());
    let inner = inner
        .add_sequence(order.iter().map(String::as_str))
        .compile(Compile::new())
        .expect("compiles");
    let g = Graph::<Talk>::new("outer")
        .add_subgraph("work", inner)
        .add_sequence([START, "work", END])
        .compile(Compile::new().checkpointer_arc(saver.clone()))
        .expect("compiles");
    let config = RunConfig::thread(thread).lease_times(short());
    let running = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    committed(&g, thread, "a").await;
    let opener = tokio::spawn(async move {
        let noticed = tokio::time::timeout(Duration::from_secs(30), watched.stop_noticed()).await;
        gate.add_permits(100);
        noticed.is_ok()
    });
    let wait = Duration::from_secs(60);
    let b = g
        .invoke(
            say("b"),
            &config.clone().multitask(Multitask::Interrupt { wait }),
        )
        .await;
    assert!(opener.await.unwrap(), "the run never took in the stop");
    b.unwrap();
    let stopped = running.await.unwrap().unwrap_err();
    assert!(matches!(stopped, Error::RunStopped { .. }), "{stopped:?}");
    assert!(
        ran.load(Ordering::SeqCst) < 5,
        "the subgraph ran {} of its 5 nodes after the stop was taken in",
        ran.load(Ordering::SeqCst)
    );
    one_chain(&saver, thread).await;
}

/// A thread whose every checkpoint a truncate removed is no thread: a copy
/// onto it succeeds and a copy from it is `ThreadNotFound`, as for a thread
/// never written. (The in-memory saver kept an empty namespace, which
/// counted as a thread: `ThreadExists`, and an empty copy.)
pub async fn a_thread_truncated_to_nothing_is_gone(saver: Arc<dyn Saver>, thread: &str) {
    let g = turns(saver.clone(), Duration::from_millis(1), Arc::default());
    let race = RunConfig::thread(thread).multitask(Multitask::Race);
    g.invoke(say("one"), &race).await.unwrap();
    let leases = saver.leases().unwrap();
    let mine = plain(thread, "h", Duration::from_secs(30));
    assert!(matches!(
        leases.acquire(&mine).await.unwrap(),
        Acquired::Held { .. }
    ));
    assert!(leases.truncate(thread, "h", 0).await.unwrap() > 0);
    leases.release(thread, "h", None).await.unwrap();
    assert!(saver.thread_info(thread).await.unwrap().is_none());
    let copied = saver.copy_thread(thread, "copy").await;
    assert!(
        matches!(copied, Err(Error::ThreadNotFound { .. })),
        "{copied:?}"
    );
    g.invoke(
        say("other"),
        &RunConfig::thread("other").multitask(Multitask::Race),
    )
    .await
    .unwrap();
    saver.copy_thread("other", thread).await.unwrap();
    assert!(saver.thread_info(thread).await.unwrap().is_some());
}

/// A run waiting in the queue that is dropped (a caller's timeout) leaves
/// no ticket behind: once the holder is done, a `Reject` run takes the
/// thread at once. (The ticket stayed until its lease time ran out, and
/// every run meanwhile was refused as busy, with no holder.)
pub async fn a_dropped_waiting_run_leaves_no_ticket(saver: Arc<dyn Saver>, thread: &str) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gated_turns(saver.clone(), "a", gate.clone());
    let config = RunConfig::thread(thread).lease_times(LeaseTimes::new(Duration::from_secs(30)));
    let first = tokio::spawn({
        let (g, config) = (g.clone(), config.clone());
        async move { g.invoke(say("a"), &config).await }
    });
    held(&saver, thread).await;
    let waiting = config.clone().multitask(Multitask::Enqueue {
        wait: Duration::from_secs(30),
    });
    let cut = tokio::time::timeout(Duration::from_millis(200), g.invoke(say("b"), &waiting)).await;
    assert!(cut.is_err(), "the waiting run was cut off");
    gate.add_permits(1);
    first.await.unwrap().unwrap();
    // At once: the next run on the thread waits for what the dropped one
    // leaves behind, as for a dropped holder.
    g.invoke(say("c"), &config)
        .await
        .unwrap_or_else(|e| panic!("the thread after the dropped run: {e}"));
    let info = saver.leases().unwrap().lease_info(thread).await.unwrap();
    assert!(info.as_ref().is_none_or(|i| i.queued == 0), "{info:?}");
    assert_eq!(whole_turns(&transcript(&g, thread).await), ["a", "c"]);
}
