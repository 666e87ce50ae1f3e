//! Human in the loop: dynamic interrupts, resume, static interrupts.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use weaver::InterruptWhen;
use weaver::prelude::*;
use weaver_tests::states::{Steps, StepsUpdate};

use crate::common::Runs;

fn approval_graph(runs: &Runs) -> CompiledGraph<Steps> {
    let r = runs.clone();
    Graph::<Steps>::new("Approval")
        .add_node("draft", |_: &Steps| {
            StepsUpdate::default().foo("Approve this?")
        })
        .add_node(
            "review",
            move |s: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                r.hit("review");
                let answer = rt.interrupt(json!({ "draft": s.foo }))?;
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "draft", "review", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap()
}

#[tokio::test]
async fn interrupt_pauses_and_resume_answers() {
    let runs = Runs::default();
    let graph = approval_graph(&runs);
    let config = RunConfig::thread("review-thread-1");
    let outcome = graph.invoke(Steps::default(), &config).await.unwrap();
    let interrupts = match outcome {
        Outcome::Interrupted(i) => i,
        Outcome::Complete(_) => panic!("expected an interrupt"),
    };
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].value, json!({"draft": "Approve this?"}));
    assert_eq!(interrupts[0].node, "review");
    assert_eq!(interrupts[0].when, InterruptWhen::Node);

    // The pause is visible in the snapshot and in history.
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(snap.next, ["review"]);
    assert_eq!(snap.interrupts, interrupts);
    assert_eq!(snap.tasks[0].interrupts, interrupts);
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    assert!(history.iter().any(|s| !s.interrupts.is_empty()));

    let answers: BTreeMap<String, Value> =
        BTreeMap::from([(interrupts[0].id.clone(), json!("approved"))]);
    let state = graph
        .resume(answers, &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(state.bar, ["approved"]);
    assert_eq!(runs.get("review"), 2, "the node runs again from its start");

    // Nothing is pending any more.
    let err = graph.resume(json!("again"), &config).await.unwrap_err();
    assert!(matches!(err, Error::NoPendingInterrupt { .. }), "{err}");
}

#[tokio::test]
async fn several_interrupts_in_one_node_are_answered_in_order() {
    let graph = Graph::<Steps>::new("TwoQuestions")
        .add_node(
            "ask",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let name = rt.interrupt("name?")?;
                let age = rt.interrupt("age?")?;
                Ok(StepsUpdate::default().bar([name.to_string(), age.to_string()]))
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("q");
    let first = graph.invoke(Steps::default(), &config).await.unwrap();
    assert_eq!(first.interrupts()[0].value, json!("name?"));
    let second = graph.resume(json!("ann"), &config).await.unwrap();
    assert_eq!(second.interrupts().len(), 1);
    assert_eq!(second.interrupts()[0].value, json!("age?"));
    assert_ne!(second.interrupts()[0].id, first.interrupts()[0].id);
    let done = graph
        .resume(json!(42), &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar, ["\"ann\"", "42"]);
}

#[tokio::test]
async fn several_nodes_interrupting_need_a_map() {
    let ask = |q: &'static str| {
        move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
            let a = rt.interrupt(q)?;
            Ok(StepsUpdate::default().bar([format!("{q}={}", a.as_str().unwrap_or_default())]))
        }
    };
    let graph = Graph::<Steps>::new("Parallel")
        .add_node("p", ask("p"))
        .add_node("q", ask("q"))
        .add_edge(START, "p")
        .add_edge(START, "q")
        .add_edge("p", END)
        .add_edge("q", END)
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("par");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    let ids: Vec<String> = out.interrupts().iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids.len(), 2);
    let err = graph.resume(json!("x"), &config).await.unwrap_err();
    assert!(
        matches!(err, Error::AmbiguousResume { pending: 2, .. }),
        "{err}"
    );
    let err = graph
        .resume(
            Resume::Map(BTreeMap::from([("no-such-id".to_owned(), json!(1))])),
            &config,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownInterrupt { .. }), "{err}");
    let answers: Resume = ids
        .iter()
        .zip(["yes", "no"])
        .map(|(id, a)| (id.clone(), json!(a)))
        .collect();
    let done = graph
        .resume(answers, &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    let mut bar = done.bar.clone();
    bar.sort();
    assert_eq!(bar.len(), 2);
    assert!(
        bar.iter()
            .all(|b| b.starts_with("p=") || b.starts_with("q="))
    );
}

#[tokio::test]
async fn resume_on_a_thread_without_history_or_checkpointer_fails() {
    let runs = Runs::default();
    let graph = approval_graph(&runs);
    let err = graph
        .resume(json!("x"), &RunConfig::thread("nobody"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ThreadNotFound { .. }), "{err}");

    // interrupt() without a checkpointer cannot pause: typed error at run time.
    let plain = Graph::<Steps>::new("NoSaver")
        .add_node(
            "ask",
            |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                rt.interrupt("?")?;
                Ok(StepsUpdate::default())
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new())
        .unwrap();
    let err = plain
        .invoke(Steps::default(), &RunConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CheckpointerRequired { .. }), "{err}");
}

#[tokio::test]
async fn static_interrupts_before_and_after() {
    let runs = Runs::default();
    let (ra, rb) = (runs.clone(), runs.clone());
    let graph = Graph::<Steps>::new("Static")
        .add_node("node_a", move |_: &Steps| {
            ra.hit("node_a");
            StepsUpdate::default().bar(["a"])
        })
        .add_node("node_b", move |_: &Steps| {
            rb.hit("node_b");
            StepsUpdate::default().bar(["b"])
        })
        .add_sequence([START, "node_a", "node_b", END])
        .compile(
            Compile::new()
                .checkpointer(InMemorySaver::new())
                .interrupt_before(["node_a"])
                .interrupt_after(["node_a"]),
        )
        .unwrap();
    let config = RunConfig::thread("s");
    let out = graph.invoke(Steps::default(), &config).await.unwrap();
    assert_eq!(out.interrupts()[0].when, InterruptWhen::Before);
    assert_eq!(runs.get("node_a"), 0);
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["node_a"]);

    let out = graph.continue_run(&config).await.unwrap();
    assert_eq!(out.interrupts()[0].when, InterruptWhen::After);
    assert_eq!(out.interrupts()[0].node, "node_a");
    assert_eq!((runs.get("node_a"), runs.get("node_b")), (1, 0));
    assert_eq!(graph.get_state(&config).await.unwrap().next, ["node_b"]);

    let done = graph
        .resume(Value::Null, &config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar, ["a", "b"]);
    assert_eq!((runs.get("node_a"), runs.get("node_b")), (1, 1));
}

#[tokio::test]
async fn an_interrupt_answered_before_its_node_failed_takes_no_second_answer() {
    // `ask` takes its answer, then fails once (a flaky call after the
    // question): the answer is stored, the interrupt is not pending any more.
    let runs = Runs::default();
    let r = runs.clone();
    let graph = Graph::<Steps>::new("AnsweredThenFailed")
        .add_node(
            "ask",
            move |_: &Steps, rt: &Runtime| -> Result<StepsUpdate, NodeError> {
                let answer = rt.interrupt("ok?")?;
                r.hit("answered");
                if r.get("answered") == 1 {
                    return Err(NodeError::msg("flaky call after the answer"));
                }
                Ok(StepsUpdate::default().bar([answer.as_str().unwrap_or("?").to_owned()]))
            },
        )
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("answered-then-failed");
    let first = graph.invoke(Steps::default(), &config).await.unwrap();
    let id = first.interrupts()[0].id.clone();
    let err = graph.resume(json!("yes"), &config).await.unwrap_err();
    assert!(matches!(err, Error::NodeFailed { .. }), "{err}");
    assert_eq!(runs.get("answered"), 1);

    // The latest state waits for no answer: the task is left to run again.
    let snap = graph.get_state(&config).await.unwrap();
    assert_eq!(snap.next, ["ask"]);
    assert!(snap.interrupts.is_empty(), "{:?}", snap.interrupts);
    assert!(snap.tasks[0].interrupts.is_empty());
    assert!(snap.tasks[0].error.is_some());
    // History still shows where the run paused.
    let at = graph
        .get_state(
            &config
                .clone()
                .checkpoint_id(snap.config.get_checkpoint_id().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(at.interrupts[0].id, id);

    // A second answer, by value or by the answered id, reaches no
    // `interrupt`: refused, not stored and dropped.
    let err = graph.resume(json!("no"), &config).await.unwrap_err();
    assert!(matches!(err, Error::NoPendingInterrupt { .. }), "{err}");
    let by_id = Resume::Map(BTreeMap::from([(id, json!("no"))]));
    let err = graph.resume(by_id, &config).await.unwrap_err();
    assert!(matches!(err, Error::UnknownInterrupt { .. }), "{err}");
    assert_eq!(runs.get("answered"), 1, "a refused resume runs nothing");

    // Continuing runs the node again with the answer it took.
    let done = graph
        .continue_run(&config)
        .await
        .unwrap()
        .complete()
        .unwrap();
    assert_eq!(done.bar, ["yes"]);
}

/// A stop after the last node (`interrupt_after` on a node that leads to
/// END) resumes with `null` as any static stop does, completing the run;
/// a finished thread still has nothing to resume. (The stop was refused
/// with `NoPendingInterrupt`.)
#[tokio::test]
async fn a_stop_after_the_last_node_resumes_with_null() {
    for stop_after in [true, false] {
        let compile = Compile::new().checkpointer(InMemorySaver::new());
        let compile = if stop_after {
            compile.interrupt_after(["a"])
        } else {
            compile
        };
        let graph = Graph::<Steps>::new("last")
            .add_node("a", |_: &Steps| StepsUpdate::default().foo("done"))
            .add_sequence([START, "a", END])
            .compile(compile)
            .unwrap();
        let config = RunConfig::thread("t");
        let first = graph.invoke(Steps::default(), &config).await.unwrap();
        assert_eq!(first.is_interrupted(), stop_after);
        let resumed = graph.resume(Value::Null, &config).await;
        if stop_after {
            assert_eq!(resumed.unwrap().complete().unwrap().foo, "done");
        } else {
            let err = resumed.unwrap_err();
            assert!(matches!(err, Error::NoPendingInterrupt { .. }), "{err}");
        }
    }
}

/// A node that pauses twice at one checkpoint (asks, is answered, asks
/// again): history shows both interrupts raised there; the latest state
/// shows the one still waiting. (The second replaced the first in the
/// task's stored interrupts.)
#[tokio::test]
async fn history_keeps_every_interrupt_a_node_raised() {
    let graph = Graph::<Steps>::new("trip")
        .add_node("ask", |_: &Steps, rt: &Runtime| {
            let city = rt.interrupt("which city?")?;
            let nights = rt.interrupt(json!({ "nights for": city }))?;
            Ok::<_, NodeError>(StepsUpdate::default().foo(format!("{city} x{nights}")))
        })
        .add_sequence([START, "ask", END])
        .compile(Compile::new().checkpointer(InMemorySaver::new()))
        .unwrap();
    let config = RunConfig::thread("t");
    graph.invoke(Steps::default(), &config).await.unwrap();
    let second = graph.resume(json!("Lisbon"), &config).await.unwrap();
    assert_eq!(second.interrupts().len(), 1);
    let now = graph.get_state(&config).await.unwrap();
    assert_eq!(now.interrupts.len(), 1, "{:?}", now.interrupts);
    assert_eq!(now.interrupts[0].value, json!({ "nights for": "Lisbon" }));
    let done = graph.resume(json!(3), &config).await.unwrap();
    assert_eq!(done.complete().unwrap().foo, "\"Lisbon\" x3");
    let history = graph
        .get_state_history(&config, History::default())
        .await
        .unwrap();
    let paused = history
        .iter()
        .find(|s| s.next == ["ask"])
        .expect("the paused checkpoint");
    let asked: Vec<&Value> = paused.interrupts.iter().map(|i| &i.value).collect();
    assert_eq!(
        asked,
        [&json!("which city?"), &json!({ "nights for": "Lisbon" })]
    );
}
