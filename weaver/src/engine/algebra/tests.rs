//! The algebra driven directly: checkpoint and pending writes in,
//! checkpoint, state and writes out, as tables of cases.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::apply::finished_tasks;
use super::interrupts::{Waiting, pending_interrupts};
use super::tasks::task_id;
use super::writes::succeeded;
use super::*;
use crate::channel::{ChannelKind, ChannelSpec};
use crate::checkpoint::{
    Checkpoint, ERROR_CHANNEL, INTERRUPT_CHANNEL, NO_WRITES_CHANNEL, PendingWrite, RESUME_CHANNEL,
};
use crate::engine::node::{Command, IntoNode};
use crate::engine::spec::{
    END, Edges, NodeSpec, START, START_TRIGGER, Spec, Target, trigger_channel,
};
use crate::engine::{Interrupt, InterruptWhen, Resume};
use crate::error::Error;
use crate::state::{GraphState, Update};

/// A log the nodes append to, and a number the last writer sets (a
/// negative one is refused by its reducer).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Tally {
    log: Vec<String>,
    n: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct TallyUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    log: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<i64>,
}

impl Update for TallyUpdate {}

impl From<Tally> for TallyUpdate {
    fn from(t: Tally) -> Self {
        TallyUpdate {
            log: Some(t.log),
            n: Some(t.n),
        }
    }
}

impl GraphState for Tally {
    type Update = TallyUpdate;
    const CHANNELS: &'static [ChannelSpec] = &[
        ChannelSpec::new("log", ChannelKind::Append),
        ChannelSpec::new("n", ChannelKind::Replace),
    ];
    fn apply(&mut self, updates: Vec<TallyUpdate>) -> crate::Result<()> {
        for u in updates {
            if let Some(l) = u.log {
                self.log.extend(l);
            }
            if let Some(n) = u.n {
                if n == -2 {
                    panic!("n must not be -2");
                }
                if n < 0 {
                    return Err(Error::invalid_argument("n must not be negative"));
                }
                self.n = n;
            }
        }
        Ok(())
    }
}

fn logged(line: &str) -> TallyUpdate {
    TallyUpdate {
        log: Some(vec![line.to_owned()]),
        n: None,
    }
}

/// A spec over `Tally` with the given fixed edges (node names come from
/// them); `before` lists the nodes with an `interrupt_before` stop.
fn spec(edges: &[(&str, &str)], before: &[&str]) -> Spec<Tally> {
    let mut names: Vec<&str> = edges
        .iter()
        .flat_map(|(a, b)| [*a, *b])
        .filter(|n| *n != START && *n != END)
        .collect();
    names.sort_unstable();
    names.dedup();
    let index: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_string(), i))
        .collect();
    let target = |n: &str| match n {
        END => Target::End,
        _ => Target::Node(index[n]),
    };
    let edges_from = |from: &str| Edges {
        fixed: edges
            .iter()
            .filter(|(a, _)| *a == from)
            .map(|(_, b)| target(b))
            .collect(),
        ..Edges::default()
    };
    let nodes = names
        .iter()
        .map(|n| NodeSpec {
            name: n.to_string(),
            trigger: trigger_channel(n),
            node: crate::engine::spec::NodeBody::State(
                (|_: &Tally| TallyUpdate::default()).into_node(),
            ),
            out: edges_from(n),
            policy: crate::engine::NodePolicy::new(),
            cache: crate::engine::node_cache::NodeCache::new(),
        })
        .collect();
    Spec {
        renames: HashMap::new(),
        name: "tally".into(),
        nodes,
        start: edges_from(START),
        interrupt_before: names.iter().map(|n| before.contains(n)).collect(),
        interrupt_after: vec![false; names.len()],
        index,
    }
}

/// START → a → b → END, START → c → END.
fn diamond() -> Spec<Tally> {
    spec(
        &[
            (START, "a"),
            ("a", "b"),
            ("b", END),
            (START, "c"),
            ("c", END),
        ],
        &[],
    )
}

/// A checkpoint with these channel versions and versions seen.
fn checkpoint(versions: Versions<'_>, seen: Seen<'_>) -> Checkpoint {
    let mut cp = Checkpoint::empty();
    for (ch, v) in versions {
        cp.channel_versions.insert(ch.to_string(), *v);
    }
    for (node, ch, v) in seen {
        cp.versions_seen
            .entry(node.to_string())
            .or_default()
            .insert(ch.to_string(), *v);
    }
    cp
}

/// Channel versions, as (channel, version).
type Versions<'a> = &'a [(&'a str, u64)];
/// Versions seen, as (node, channel, version).
type Seen<'a> = &'a [(&'a str, &'a str, u64)];

fn names(spec: &Spec<Tally>, tasks: &[TaskNode]) -> Vec<String> {
    tasks.iter().map(|t| spec.name_of(*t).to_owned()).collect()
}

/// The writes task `node` of `cp` leaves.
fn writes(cp: &Checkpoint, node: &str, writes: &[(&str, Value)]) -> Vec<PendingWrite> {
    let id = task_id(&cp.id, node);
    PendingWrite::for_task(
        &id,
        node,
        writes.iter().map(|(ch, v)| (ch.to_string(), v.clone())),
    )
}

fn output(spec: &Spec<Tally>, node: &str, update: TallyUpdate) -> (Author, TaskOutput<Tally>) {
    let node = TaskNode::Pull(spec.index[node]);
    let channels = serde_json::to_value(&update)
        .ok()
        .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default();
    let triggers = spec.edges_of(node).fixed.clone();
    let output = TaskOutput {
        update,
        channels,
        triggers,
        sends: Vec::new(),
    };
    (Author::Task(node), output)
}

#[test]
fn a_checkpoint_triggers_the_nodes_whose_trigger_is_newer_than_they_saw() {
    let spec = diamond();
    let a = "branch:to:a";
    let b = "branch:to:b";
    let c = "branch:to:c";
    let cases: &[(Versions<'_>, Seen<'_>, &[&str])] = &[
        (&[], &[], &[]),
        (&[(START_TRIGGER, 1)], &[], &[START]),
        (&[(START_TRIGGER, 1)], &[(START, START_TRIGGER, 1)], &[]),
        (&[(a, 2)], &[("a", a, 1)], &["a"]),
        (&[(a, 2)], &[("a", a, 2)], &[]),
        // Task order is START, then the nodes by name, whatever the versions.
        (
            &[(c, 3), (a, 2), (START_TRIGGER, 4)],
            &[],
            &[START, "a", "c"],
        ),
        (&[(b, 5), (a, 5)], &[("a", a, 5)], &["b"]),
        // Another node's seen version does not count.
        (&[(b, 5)], &[("a", b, 5)], &["b"]),
    ];
    for (versions, seen, expected) in cases {
        let cp = checkpoint(versions, seen);
        assert_eq!(
            names(&spec, &next_tasks(&spec, &cp).unwrap()),
            *expected,
            "versions {versions:?}, seen {seen:?}"
        );
    }
}

#[test]
fn a_steps_writes_apply_in_task_order_whatever_order_the_tasks_finished_in() {
    let spec = diamond();
    let orders: &[&[&str]] = &[&["a", "c"], &["c", "a"]];
    let mut results = Vec::new();
    for order in orders {
        let mut cp = checkpoint(&[("branch:to:a", 1), ("branch:to:c", 1)], &[]);
        let mut state = Tally::default();
        let tasks = next_tasks(&spec, &cp).unwrap();
        let writes = order.iter().map(|n| output(&spec, n, logged(n))).collect();
        apply_writes(&spec, &mut cp, &mut state, tasks, writes).unwrap();
        results.push((state, cp.channel_versions, cp.versions_seen));
    }
    assert_eq!(results[0].0.log, ["a", "c"]);
    assert_eq!(results[0], results[1]);
}

#[test]
fn applying_a_step_bumps_what_it_wrote_and_marks_what_it_consumed() {
    let spec = diamond();
    // (writers, expected next tasks, expected versions of log / b's trigger)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], Option<u64>, Option<u64>);
    let cases: &[Case<'_>] = &[
        // `a` routes to `b`: b's trigger and the log get version 3.
        (&["a"], &["b"], Some(3), Some(3)),
        // `c` leads to END: only the log moves; `a` was consumed unrun.
        (&["c"], &[], Some(3), None),
        (&["a", "c"], &["b"], Some(3), Some(3)),
    ];
    for (writers, next, log, b) in cases {
        let mut cp = checkpoint(&[("branch:to:a", 2), ("branch:to:c", 1)], &[]);
        let mut state = Tally::default();
        let consumed = next_tasks(&spec, &cp).unwrap();
        let writes = writers
            .iter()
            .map(|n| output(&spec, n, logged(n)))
            .collect();
        apply_writes(&spec, &mut cp, &mut state, consumed, writes).unwrap();
        assert_eq!(
            names(&spec, &next_tasks(&spec, &cp).unwrap()),
            *next,
            "{writers:?}"
        );
        assert_eq!(cp.channel_versions.get("log").copied(), *log, "{writers:?}");
        assert_eq!(cp.channel_versions.get("branch:to:b").copied(), *b);
        // Consumed at the version the step started from, not the new one.
        assert_eq!(cp.versions_seen["a"]["branch:to:a"], 2);
        assert_eq!(cp.versions_seen["c"]["branch:to:c"], 1);
        assert_eq!(state.log.len(), writers.len());
    }
}

#[test]
fn a_refused_update_fails_the_step_and_leaves_the_checkpoint() {
    let spec = diamond();
    // (n, what the step fails with): a reducer's own error as it is; a
    // reducer's panic as the failure of the step's tasks.
    let cases: &[(i64, &str)] = &[(-1, "invalid argument"), (-2, "a, c")];
    for (n, expected) in cases {
        let mut cp = checkpoint(&[("branch:to:a", 1), ("branch:to:c", 1)], &[]);
        let before = cp.clone();
        let mut state = Tally::default();
        let bad = TallyUpdate {
            log: None,
            n: Some(*n),
        };
        let writes = vec![output(&spec, "c", bad), output(&spec, "a", logged("a"))];
        let consumed = next_tasks(&spec, &cp).unwrap();
        let err = apply_writes(&spec, &mut cp, &mut state, consumed, writes).unwrap_err();
        let got = match &err {
            Error::InvalidArgument { .. } => "invalid argument",
            Error::NodeFailed { node, .. } => node.as_str(),
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(got, *expected);
        assert_eq!(cp.channel_versions, before.channel_versions);
        assert_eq!(cp.versions_seen, before.versions_seen);
    }
}

#[test]
fn task_results_become_writes_that_replay_to_the_same_output() {
    let spec = diamond();
    let state = Tally::default();
    let a = TaskNode::Pull(spec.index["a"]);
    let c = TaskNode::Pull(spec.index["c"]);
    // (node, update, expected channels written)
    let cases: &[(TaskNode, TallyUpdate, &[&str])] = &[
        (a, logged("x"), &["log", "branch:to:b"]),
        (c, logged("y"), &["log"]),
        // A task that writes nothing and leads to END leaves the marker.
        (c, TallyUpdate::default(), &[NO_WRITES_CHANNEL]),
    ];
    for (node, update, channels) in cases {
        let result = TaskRun::once(Ending::Returned(Command::update(update.clone())));
        let (finished, stored) = finish_task(&spec, &state, *node, "t1", result, true);
        let Finished::Succeeded(out) = finished else {
            panic!("{node:?} did not succeed");
        };
        let written: Vec<&str> = stored.iter().map(|w| w.channel.as_str()).collect();
        assert_eq!(written, *channels);
        assert!(stored.iter().all(|w| w.task_id == "t1"));
        let refs: Vec<&PendingWrite> = stored.iter().collect();
        assert!(succeeded(&refs));
        let replayed = replay_task(&spec, *node, &refs).unwrap();
        assert_eq!(replayed.update, out.update);
        assert_eq!(replayed.channels, out.channels);
        // END is where a task leads, not a write it leaves.
        let nodes: Vec<Target> = out
            .triggers
            .iter()
            .copied()
            .filter(|t| *t != Target::End)
            .collect();
        assert_eq!(replayed.triggers, nodes);
        // Without a checkpointer nothing is built.
        let result = TaskRun::once(Ending::Returned(Command::update(update.clone())));
        let (_, none) = finish_task(&spec, &state, *node, "t1", result, false);
        assert!(none.is_empty());
    }
}

#[test]
fn failures_and_interrupts_become_their_special_writes() {
    let spec = diamond();
    let state = Tally::default();
    let a = TaskNode::Pull(spec.index["a"]);
    let boom = || Error::NodeFailed {
        node: "a".into(),
        source: "boom".into(),
    };
    // (how the task ran, attempts, the run's error, the stored message)
    type Expected = fn(&Error) -> bool;
    let cases: Vec<(Error, u32, Expected, &str)> = vec![
        (
            boom(),
            1,
            |e| matches!(e, Error::NodeFailed { node, .. } if node == "a"),
            "boom",
        ),
        (
            Error::RetriesExhausted {
                node: "a".into(),
                attempts: 3,
                last: Box::new(boom()),
            },
            3,
            |e| matches!(e, Error::RetriesExhausted { attempts: 3, .. }),
            "boom",
        ),
        (
            Error::NodeTimeout {
                node: "a".into(),
                timeout: std::time::Duration::from_millis(5),
            },
            1,
            |e| matches!(e, Error::NodeTimeout { .. }),
            "node `a` timed out after 5ms",
        ),
    ];
    for (error, attempts, is_expected, message) in cases {
        let run = TaskRun {
            end: Ending::Failed(error),
            attempts,
            recovered: None,
        };
        let (finished, stored) = finish_task(&spec, &state, a, "t", run, true);
        let Finished::Failed(e) = finished else {
            panic!("{message}: did not fail");
        };
        assert!(is_expected(&e), "{e}");
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].channel, ERROR_CHANNEL);
        assert_eq!(
            stored[0].value,
            json!({"message": message, "attempts": attempts})
        );
        assert!(!succeeded(&[&stored[0]]));
        let refs: Vec<&PendingWrite> = stored.iter().collect();
        let task = tasks::Prepared {
            node: a,
            id: "t".into(),
            writes: refs,
        };
        assert_eq!(task.attempts(), attempts);
        assert_eq!(task.error().as_deref(), Some(message));
    }

    let goto = TaskRun::once(Ending::Returned(
        Command::update(TallyUpdate::default()).goto("nowhere"),
    ));
    let (finished, stored) = finish_task(&spec, &state, a, "t", goto, true);
    assert!(matches!(finished, Finished::Failed(_)));
    assert_eq!(stored[0].channel, ERROR_CHANNEL);
}

#[test]
fn a_success_after_retries_records_the_failure_it_recovered_from() {
    let spec = diamond();
    let state = Tally::default();
    let a = TaskNode::Pull(spec.index["a"]);
    let run = TaskRun {
        end: Ending::Returned(Command::update(TallyUpdate::default())),
        attempts: 3,
        recovered: Some("flaky".into()),
    };
    let (finished, stored) = finish_task(&spec, &state, a, "t", run, true);
    assert!(matches!(finished, Finished::Succeeded(_)));
    let refs: Vec<&PendingWrite> = stored.iter().collect();
    assert!(succeeded(&refs));
    let task = tasks::Prepared {
        node: a,
        id: "t".into(),
        writes: refs,
    };
    assert_eq!((task.attempts(), task.error()), (3, Some("flaky".into())));
    // Replaying it reads only its ordinary writes.
    let refs: Vec<&PendingWrite> = stored.iter().collect();
    let replayed = replay_task(&spec, a, &refs).unwrap();
    assert_eq!(replayed.triggers, [Target::Node(spec.index["b"])]);
    // A first-attempt success records no attempts; an untouched task none.
    let once = TaskRun::once(Ending::Returned(Command::update(TallyUpdate::default())));
    let (_, stored) = finish_task(&spec, &state, a, "t", once, true);
    let first = tasks::Prepared {
        node: a,
        id: "t".into(),
        writes: stored.iter().collect(),
    };
    let untouched = tasks::Prepared {
        node: a,
        id: "t".into(),
        writes: Vec::new(),
    };
    assert_eq!((first.attempts(), first.error()), (1, None));
    assert_eq!(untouched.attempts(), 0);
}

#[test]
fn a_resume_skips_the_tasks_that_finished_and_runs_the_others() {
    let spec = diamond();
    let cp = checkpoint(&[("branch:to:a", 1), ("branch:to:c", 1)], &[]);
    let mut pending = writes(
        &cp,
        "a",
        &[("log", json!(["a"])), ("branch:to:b", Value::Null)],
    );
    pending.extend(writes(
        &cp,
        "c",
        &[(ERROR_CHANNEL, json!({"message": "boom"}))],
    ));
    // (writes, tasks that replay, tasks still to run)
    let later_success = writes(&cp, "c", &[(NO_WRITES_CHANNEL, Value::Null)]);
    let cases: Vec<(Vec<PendingWrite>, &[&str], &[&str])> = vec![
        (Vec::new(), &[], &["a", "c"]),
        (pending.clone(), &["a"], &["c"]),
        // An error of an earlier attempt beside a success is history.
        ([pending.clone(), later_success].concat(), &["a", "c"], &[]),
    ];
    for (pending, replayed, to_run) in cases {
        let tasks = prepare_tasks(&spec, &cp, &pending).unwrap();
        let done: Vec<String> = tasks
            .iter()
            .filter(|t| t.succeeded())
            .map(|t| spec.name_of(t.node).to_owned())
            .collect();
        let left: Vec<String> = tasks
            .iter()
            .filter(|t| !t.succeeded())
            .map(|t| spec.name_of(t.node).to_owned())
            .collect();
        assert_eq!(done, replayed);
        assert_eq!(left, to_run);
        assert_eq!(
            finished_tasks(&spec, &cp, &pending).unwrap().len(),
            replayed.len()
        );
    }

    // Applied as their step would: `a`'s output is in, `a` does not run
    // again, and `b` (which `a` routes to) is triggered beside `c`.
    let mut applied = cp.clone();
    let mut state = Tally::default();
    apply_finished(&spec, &mut applied, &mut state, &pending).unwrap();
    assert_eq!(state.log, ["a"]);
    assert_eq!(
        names(&spec, &next_tasks(&spec, &applied).unwrap()),
        ["b", "c"]
    );
}

#[test]
fn bad_stored_writes_are_typed_errors() {
    let spec = diamond();
    let cp = checkpoint(&[("branch:to:a", 1)], &[]);
    let cases: &[(&str, Value, &str)] = &[
        ("branch:to:ghost", Value::Null, "unknown node `ghost`"),
        ("log", json!("not a list"), "pending write of `a` at `log`"),
        ("n", json!({"no": 1}), "pending write of `a` at `n`"),
    ];
    for (channel, value, says) in cases {
        let pending = writes(&cp, "a", &[(channel, value.clone())]);
        let mut state = Tally::default();
        let mut at = cp.clone();
        let err = apply_finished(&spec, &mut at, &mut state, &pending).unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{channel}: {err:?}");
        assert!(err.to_string().contains(says), "{channel}: {err}");
        assert_eq!(at.channel_versions, cp.channel_versions);
    }
    // A record of interrupts that does not decode, as a whole or by an
    // item, is an error naming its task and checkpoint.
    for bad in [json!("?"), json!([{"id": 1}])] {
        let garbage = writes(&cp, "a", &[(INTERRUPT_CHANNEL, bad)]);
        let err = pending_interrupts(&cp.id, &garbage).unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{err:?}");
        let says = err.to_string();
        assert!(
            says.contains(&garbage[0].task_id) && says.contains(&cp.id),
            "{says}"
        );
    }
}

fn raised(cp: &Checkpoint, node: &str, index: usize) -> (Interrupt, Vec<PendingWrite>) {
    let id = task_id(&cp.id, node);
    let interrupt = Interrupt {
        id: crate::engine::runtime::interrupt_id(&id, index),
        value: json!(format!("{node}?")),
        node: node.to_owned(),
        when: InterruptWhen::Node,
    };
    let stored = writes(cp, node, &[(INTERRUPT_CHANNEL, json!([interrupt.clone()]))]);
    (interrupt, stored)
}

#[test]
fn a_resume_answers_the_interrupts_that_wait_and_refuses_anything_else() {
    let spec = diamond();
    let cp = checkpoint(&[("branch:to:a", 1), ("branch:to:c", 1)], &[]);
    let (ia, wa) = raised(&cp, "a", 0);
    let (ic, wc) = raised(&cp, "c", 0);
    let one = wa.clone();
    let two = [wa.clone(), wc.clone()].concat();
    let map = |pairs: &[(&str, Value)]| {
        Resume::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    };
    let ok = |n: usize| -> Result<usize, &'static str> { Ok(n) };
    // (pending, resume, answers written or the error)
    let cases: Vec<(Vec<PendingWrite>, Resume, Result<usize, &str>)> = vec![
        (one.clone(), Resume::Value(json!("yes")), ok(1)),
        (two.clone(), Resume::Value(json!("yes")), Err("ambiguous")),
        (
            two.clone(),
            map(&[(&ia.id, json!(1)), (&ic.id, json!(2))]),
            ok(2),
        ),
        (two.clone(), map(&[(&ic.id, json!(2))]), ok(1)),
        (two.clone(), map(&[("nope", json!(2))]), Err("unknown")),
        (Vec::new(), Resume::Value(json!("yes")), Err("none pending")),
        // Nothing asked, nothing answered: a static stop's plain resume.
        (Vec::new(), Resume::Value(Value::Null), Ok(0)),
    ];
    for (mut pending, resume, expected) in cases {
        let got = answer(&spec, &cp.id, true, &mut pending, resume, "t");
        let got = match got {
            Ok(Answer::Nothing) => Ok(0),
            Ok(Answer::Writes { writes, earlier }) => {
                assert_eq!(writes.len(), earlier.len());
                assert!(writes.iter().all(|w| w.channel == RESUME_CHANNEL));
                Ok(writes.len())
            }
            Err(Error::AmbiguousResume { pending: 2, .. }) => Err("ambiguous"),
            Err(Error::UnknownInterrupt { .. }) => Err("unknown"),
            Err(Error::NoPendingInterrupt { .. }) => Err("none pending"),
            Err(e) => panic!("unexpected {e:?}"),
        };
        assert_eq!(got, expected);
    }
}

#[test]
fn an_answered_interrupt_waits_no_more_and_a_second_answer_extends_the_first() {
    let spec = diamond();
    let cp = checkpoint(&[("branch:to:a", 1)], &[]);
    let (ia, mut pending) = raised(&cp, "a", 0);
    assert_eq!(
        pending_interrupts(&cp.id, &pending).unwrap(),
        [Waiting {
            task: task_id(&cp.id, "a"),
            node: "a".into(),
            interrupt: ia.clone(),
        }]
    );
    let got = answer(
        &spec,
        &cp.id,
        true,
        &mut pending,
        json!("first").into(),
        "t",
    )
    .unwrap();
    let Answer::Writes { earlier, .. } = got else {
        panic!("nothing answered");
    };
    // Nothing was stored before: the check expects no resume write.
    assert_eq!(earlier[0].1, None);
    let task = task_id(&cp.id, "a");
    let own: Vec<&PendingWrite> = pending.iter().collect();
    assert!(answered(&cp.id, &task, &own, &ia.id).unwrap());
    assert!(pending_interrupts(&cp.id, &pending).unwrap().is_empty());

    // The node runs again and asks a second question.
    let (i2, w2) = raised(&cp, "a", 1);
    pending.retain(|w| w.channel != INTERRUPT_CHANNEL);
    pending.extend(w2);
    assert_eq!(
        pending_interrupts(&cp.id, &pending).unwrap()[0].interrupt,
        i2
    );
    let got = answer(
        &spec,
        &cp.id,
        true,
        &mut pending,
        json!("second").into(),
        "t",
    )
    .unwrap();
    let Answer::Writes { writes, earlier } = got else {
        panic!("nothing answered");
    };
    assert_eq!(writes[0].value, json!(["first", "second"]));
    assert_eq!(earlier[0].1, Some(json!(["first"])));
    let prepared = prepare_tasks(&spec, &cp, &pending).unwrap();
    let by_id = |k: usize| crate::engine::runtime::interrupt_id(&task, k);
    assert_eq!(
        prepared[0].resume_values(&cp.id).unwrap(),
        [(by_id(0), json!("first")), (by_id(1), json!("second"))].into()
    );
    // Stored answers neither an array nor an object are an error naming
    // the task and checkpoint, for the task's next run, for the next
    // resume and for what waits.
    for bad in [json!("?"), json!(7), Value::Null] {
        for w in pending.iter_mut().filter(|w| w.channel == RESUME_CHANNEL) {
            w.value = bad.clone();
        }
        let named = |err: Error| {
            let says = err.to_string();
            assert!(matches!(err, Error::Decode { .. }), "{says}");
            assert!(says.contains(&task) && says.contains(&cp.id), "{says}");
        };
        let prepared = prepare_tasks(&spec, &cp, &pending).unwrap();
        named(prepared[0].resume_values(&cp.id).unwrap_err());
        named(pending_interrupts(&cp.id, &pending).unwrap_err());
        let mut again = pending.clone();
        named(answer(&spec, &cp.id, true, &mut again, json!("x").into(), "t").unwrap_err());
    }
}

#[test]
fn the_interrupts_of_a_subgraph_are_answered_by_their_own_ids() {
    let spec = diamond();
    let cp = checkpoint(&[("branch:to:a", 1)], &[]);
    let task = task_id(&cp.id, "a");
    // Task `a` ran a subgraph that paused at two interrupts of its own.
    let inner = |id: &str| Interrupt {
        id: id.to_owned(),
        value: json!(id),
        node: "inner".into(),
        when: InterruptWhen::Node,
    };
    let (x, y) = (inner("x"), inner("y"));
    let mut pending = writes(&cp, "a", &[(INTERRUPT_CHANNEL, json!([x, y]))]);
    assert_eq!(pending_interrupts(&cp.id, &pending).unwrap().len(), 2);
    let one = Resume::Map([("y".to_owned(), json!("yes"))].into());
    let got = answer(&spec, &cp.id, true, &mut pending, one, "t").unwrap();
    let Answer::Writes { writes, .. } = got else {
        panic!("nothing answered");
    };
    // Not the task's own interrupts by index: stored by id.
    assert_eq!(writes[0].value, json!({"y": "yes"}));
    let own: Vec<&PendingWrite> = pending.iter().collect();
    assert!(answered(&cp.id, &task, &own, "y").unwrap());
    assert!(!answered(&cp.id, &task, &own, "x").unwrap());
    let left = pending_interrupts(&cp.id, &pending).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].interrupt.id, "x");
    // The second answer joins the first; the task gets both by id.
    let got = answer(&spec, &cp.id, true, &mut pending, json!("ok").into(), "t").unwrap();
    let Answer::Writes { writes, earlier } = got else {
        panic!("nothing answered");
    };
    assert_eq!(writes[0].value, json!({"x": "ok", "y": "yes"}));
    assert_eq!(earlier[0].1, Some(json!({"y": "yes"})));
    let prepared = prepare_tasks(&spec, &cp, &pending).unwrap();
    assert_eq!(
        prepared[0].resume_values(&cp.id).unwrap(),
        [
            ("x".to_owned(), json!("ok")),
            ("y".to_owned(), json!("yes"))
        ]
        .into()
    );
    // An id no one asked for is still refused.
    let stray = Resume::Map([("z".to_owned(), json!(1))].into());
    let mut again = writes_of(&cp, &x);
    let err = answer(&spec, &cp.id, true, &mut again, stray, "t").unwrap_err();
    assert!(matches!(err, Error::UnknownInterrupt { .. }), "{err:?}");
}

fn writes_of(cp: &Checkpoint, interrupt: &Interrupt) -> Vec<PendingWrite> {
    writes(cp, "a", &[(INTERRUPT_CHANNEL, json!([interrupt]))])
}

#[test]
fn static_stops_are_named_by_node_and_checkpoint_and_resumed_by_that_name() {
    let spec = spec(&[(START, "a"), ("a", END)], &["a"]);
    let cp = checkpoint(&[("branch:to:a", 1)], &[]);
    let tasks = next_tasks(&spec, &cp).unwrap();
    let stops = static_stops(&spec, &cp.id, &tasks, InterruptWhen::Before);
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].id, format!("before:a:{}", cp.id));
    assert!(static_stops(&spec, &cp.id, &tasks, InterruptWhen::After).is_empty());
    let by_id: BTreeMap<String, Value> = BTreeMap::from([(stops[0].id.clone(), Value::Null)]);
    let mut pending = Vec::new();
    let got = answer(&spec, &cp.id, true, &mut pending, by_id.into(), "t").unwrap();
    assert_eq!(got, Answer::Nothing);
    // A stop at another checkpoint is not this one's.
    let other = BTreeMap::from([("before:a:elsewhere".to_owned(), Value::Null)]);
    let err = answer(&spec, &cp.id, true, &mut pending, other.into(), "t").unwrap_err();
    assert!(matches!(err, Error::UnknownInterrupt { .. }));
}
