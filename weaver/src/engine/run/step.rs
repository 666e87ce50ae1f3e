//! One super-step: replay the tasks that finished before, run the others,
//! store each one's writes as it finishes, then apply the step's writes
//! and checkpoint.

use serde_json::Value;

use super::Loop;
use super::sink::{
    Sink, send_state, send_task_result, send_task_start, send_update, stream_writer,
};
use crate::checkpoint::{Checkpoint, CheckpointSource, INTERRUPT_CHANNEL, PendingWrite};
use crate::engine::algebra::next_step;
use crate::engine::algebra::tasks::send_payload;
use crate::engine::algebra::{
    Author, Ending, Finished, TaskNode, TaskOutput, apply_writes, finish_task, replay_task, tasks,
};
use crate::engine::effect::Journal;
use crate::engine::node::ParentCommand;
use crate::engine::runner::{Runner, cache_result, run_task};
use crate::engine::runtime::{AnswersById, Runtime};
use crate::engine::send::SENDS_CHANNEL;
use crate::engine::spec::INPUT_CHANNEL;
use crate::engine::subgraph_replay::Replayed;
use crate::engine::{Interrupt, StreamWriter, TaskRef};
use crate::error::{Error, Result};
use crate::state::GraphState;

/// The tasks of a step, as the step starts: the output of each that
/// finished on an earlier attempt, the ones still to run, and each task's
/// runtime handle.
struct Started<S: GraphState> {
    ids: Vec<String>,
    outputs: Vec<Option<TaskOutput<S>>>,
    to_run: Vec<usize>,
    runtimes: Vec<Runtime>,
}

/// How the tasks that ran ended, other than by succeeding (by task index).
struct Ended {
    failures: Vec<(usize, Error)>,
    interrupts: Vec<(usize, Vec<Interrupt>)>,
    /// Commands for the parent graph.
    parent: Vec<(usize, ParentCommand)>,
}

impl<S: GraphState> Loop<'_, S> {
    /// Runs one super-step of `tasks` from the current checkpoint. Returns
    /// the interrupts if any task paused.
    pub(super) async fn run_step(&mut self, tasks: &[TaskNode]) -> Result<Option<Vec<Interrupt>>> {
        let step = next_step(self.step, &self.current.id)?;
        let replayed = self.replayed.take();
        let mut started = self.start_step(tasks, step, replayed.as_ref())?;
        let mut ended = self.run_tasks(tasks, &mut started, step).await?;
        if !ended.failures.is_empty() {
            // The run's stop (its hold lost, or a stop asked, seen inside a
            // task's subgraph) before any task's own failure: it decides
            // what the run may still store.
            ended.failures.sort_by_key(|(k, e)| (!e.stops_run(), *k));
            return Err(ended.failures.swap_remove(0).1);
        }
        if !ended.parent.is_empty() {
            ended.parent.sort_by_key(|(k, _)| *k);
            let (k, command) = ended.parent.swap_remove(0);
            let node = self.spec.name_of(tasks[k]).to_owned();
            return Err(match command.update {
                Ok(update) => Error::ParentCommand {
                    node,
                    update,
                    goto: command.goto,
                },
                // An update that is not one fails its node, at any level.
                Err(reason) => Error::NodeFailed {
                    node,
                    source: reason.into(),
                },
            });
        }
        if !ended.interrupts.is_empty() {
            if self.thread.is_none() {
                return Err(Error::CheckpointerRequired {
                    feature: "interrupt (pausing a run for input)",
                });
            }
            ended.interrupts.sort_by_key(|(k, _)| *k);
            return Ok(Some(
                ended.interrupts.into_iter().flat_map(|(_, i)| i).collect(),
            ));
        }
        self.end_step(tasks, started.outputs, step).await?;
        Ok(None)
    }

    /// Prepares the step's tasks: a task that finished on an earlier attempt
    /// is replayed from its writes (and streamed, as LangGraph streams
    /// cached writes), the others get their runtime with their answers.
    /// A replay's first step (`replayed`) tells each task where its
    /// counterpart at the replayed checkpoint paused inside a subgraph.
    fn start_step(
        &self,
        nodes: &[TaskNode],
        step: i64,
        replayed: Option<&Replayed>,
    ) -> Result<Started<S>> {
        let prepared = tasks::prepare(self.spec, &self.current.id, nodes, &self.pending);
        let mut started = Started {
            ids: Vec::with_capacity(nodes.len()),
            outputs: Vec::with_capacity(nodes.len()),
            to_run: Vec::new(),
            runtimes: Vec::with_capacity(nodes.len()),
        };
        // What a subgraph a task runs streams into, once per step.
        let (dropped, nested_sink) = (
            self.stream_dropped(),
            self.sink.as_ref().and_then(Sink::nested_sink),
        );
        // Entries under explicit keys the step's tasks hold, seen by all.
        let step_keyed = crate::engine::effect::Handoff::default();
        // What a task's subgraph records as its checkpoints' parents: this
        // run's, and its namespace's checkpoint the step starts from.
        let mut parents = self.parents.clone();
        parents.insert(self.config.ns().to_owned(), self.current.id.clone());
        let parents = std::sync::Arc::new(parents);
        for (k, task) in prepared.into_iter().enumerate() {
            let mut resume = AnswersById::new();
            let mut writer = StreamWriter::default();
            if task.succeeded() {
                let output = replay_task(self.spec, task.node, &task.writes)?;
                send_update(&self.sink, step, self.spec, task.node, &output);
                started.outputs.push(Some(output));
            } else {
                resume = task.resume_values(&self.current.id)?;
                writer = match &self.sink {
                    Some(s) if s.is_own() => {
                        stream_writer(&self.sink, self.spec, task.node, step, &task.id)
                    }
                    // A subgraph's task: into the parent's stream, as itself.
                    _ if self.outer_stream.is_active() => self.outer_stream.for_task(TaskRef {
                        namespace: self.config.ns().to_owned(),
                        node: self.spec.name_of(task.node).to_owned(),
                        step,
                        id: task.id.clone(),
                    }),
                    _ => StreamWriter::default(),
                };
                send_task_start(
                    &self.sink,
                    self.spec,
                    task.node,
                    step,
                    &task.id,
                    &self.state,
                    match task.node {
                        TaskNode::Push { index, .. } => send_payload(&self.current, index),
                        _ => None,
                    },
                );
                started.outputs.push(None);
                started.to_run.push(k);
            }
            let name = self.spec.name_of(task.node);
            let origin = match replayed {
                Some(r) => r.origin_of(self.spec, task.node)?,
                None => None,
            };
            let renamed_ns = self.renamed_ns(task.node);
            let journal = match &self.thread {
                Some(t) => Journal::new(
                    Some(t.writer.checkpointer().clone()),
                    t.at.at(self.current.id.clone()),
                    t.is_saved(&self.current.id),
                    &task.id,
                    name,
                    &task.writes,
                )
                .with_flight(t.writer.flight())
                .with_outer(self.outer_flights.clone())
                .with_carried([t.keyed_effects.as_slice(), &self.outer_keyed].concat())
                .with_step_keyed(step_keyed.clone()),
                None => {
                    Journal::detached(self.config.thread_id().unwrap_or_default(), &task.id, name)
                }
            };
            let runtime = Runtime::new(self.config.clone(), name, step, task.id.clone(), resume)
                .with_journal(journal)
                .with_origin(origin)
                .with_renamed_ns(renamed_ns)
                .with_store(self.store.clone())
                .with_checkpointer(
                    self.thread
                        .as_ref()
                        .map(|t| t.writer.checkpointer().clone()),
                )
                .with_stream(writer)
                .with_stream_dropped(dropped.clone())
                .with_watch(self.watch.clone())
                .with_nested_sink(nested_sink.clone())
                .with_parents(parents.clone());
            started.runtimes.push(runtime);
            started.ids.push(task.id);
        }
        Ok(started)
    }

    /// For a task of a node renamed since the run's checkpoint was stored
    /// ([`Compile::rename_node`](crate::Compile::rename_node)): the
    /// namespaces its subgraph had under the older names.
    fn renamed_ns(&self, node: TaskNode) -> Vec<String> {
        crate::engine::inspect_subgraphs::older_tasks(
            self.spec,
            self.config.ns(),
            &self.current.id,
            node,
        )
        .into_iter()
        .map(|o| o.ns)
        .collect()
    }

    /// Runs the tasks still to run; each one's update is streamed and its
    /// writes stored as it finishes, even if a sibling then fails or
    /// interrupts.
    async fn run_tasks(
        &mut self,
        nodes: &[TaskNode],
        started: &mut Started<S>,
        step: i64,
    ) -> Result<Ended> {
        let Loop {
            spec,
            config,
            sink,
            thread,
            current,
            state,
            behind,
            pending,
            ..
        } = self;
        let pending: &[PendingWrite] = pending;
        let behind = *behind;
        let (spec, state, current): (_, &S, &_) = (*spec, state, current);
        let input = |node: TaskNode| -> Option<&Value> {
            match node {
                TaskNode::Push { index, .. } => send_payload(current, index),
                _ => current.channel_values.get(INPUT_CHANNEL),
            }
        };
        let persisting = thread.is_some();
        let runtimes = &started.runtimes;
        let to_run = std::mem::take(&mut started.to_run);
        let mut runner = Runner::new(
            to_run,
            config.get_max_concurrency(),
            |k: usize| async move {
                (
                    k,
                    run_task(spec, state, &runtimes[k], nodes[k], input(nodes[k])).await,
                )
            },
        );
        let mut ended = Ended {
            failures: Vec::new(),
            interrupts: Vec::new(),
            parent: Vec::new(),
        };
        // Tasks that finished while a sibling's writes were being stored:
        // handled in turn, after it.
        let mut ready = std::collections::VecDeque::new();
        loop {
            let (k, result) = match ready.pop_front() {
                Some(done) => done,
                None => match runner.next().await {
                    Some(done) => done,
                    None => break,
                },
            };
            let (result, cache_key) = result;
            // What the node returned goes into its cache only if the task
            // succeeds with it (its routing or update may still fail).
            let to_cache = cache_key.and_then(|key| match &result.end {
                Ending::Returned(command) => Some((key, command.clone())),
                _ => None,
            });
            let id = started.ids[k].as_str();
            let (finished, mut writes) = finish_task(spec, state, nodes[k], id, result, persisting);
            keep_earlier_interrupts(pending, id, &mut writes);
            if let (Finished::Succeeded(_), Some((key, command))) = (&finished, to_cache) {
                cache_result(spec, nodes[k], key, command);
            }
            // Effects journaled while the task's checkpoint was not stored
            // go with its other writes.
            writes.extend(runtimes[k].journal().take_held());
            if behind {
                crate::evolution::mark_writes::<S>(&mut writes);
            }
            send_task_result(sink, spec, nodes[k], step, id, &finished);
            match finished {
                Finished::Succeeded(output) => {
                    send_update(sink, step, spec, nodes[k], &output);
                    started.outputs[k] = Some(output);
                }
                Finished::Failed(e) => ended.failures.push((k, e)),
                Finished::Interrupted(i) => ended.interrupts.push((k, i)),
                Finished::Parent(command) => ended.parent.push((k, command)),
            }
            if let Some(thread) = thread.as_mut().filter(|_| !writes.is_empty()) {
                // The step's last task, and every task succeeded: the step
                // ends with a checkpoint, which may carry its writes.
                let with_next = ready.is_empty()
                    && runner.is_done()
                    && ended.failures.is_empty()
                    && ended.interrupts.is_empty();
                // The other tasks go on while the writes are stored (a
                // round trip to the database): a sibling's timeout counts
                // its own time, not the store's.
                let store = thread.store_writes(&current.id, writes, with_next);
                tokio::pin!(store);
                loop {
                    tokio::select! {
                        biased;
                        stored = &mut store => {
                            stored?;
                            break;
                        }
                        Some(done) = runner.next(), if !runner.is_done() => ready.push_back(done),
                    }
                }
            }
        }
        Ok(ended)
    }

    /// Every task finished: applies the step's writes in task order and
    /// checkpoints.
    async fn end_step(
        &mut self,
        tasks: &[TaskNode],
        outputs: Vec<Option<TaskOutput<S>>>,
        step: i64,
    ) -> Result<()> {
        let writes = tasks
            .iter()
            .zip(outputs)
            .filter_map(|(node, output)| Some((Author::Task(*node), output?)))
            .collect();
        self.state_is_current = false;
        // A checkpoint not stored yet (`exit` durability) is stored as it is
        // when the run fails: if the step's state does not encode, it goes
        // back to the versions it had, so that it is stored as it was, with
        // the step's writes pending, never advanced past values it lacks.
        let unsaved = self
            .thread
            .as_ref()
            .is_some_and(|t| !t.is_saved(&self.current.id));
        let versions = unsaved.then(|| {
            (
                self.current.channel_versions.clone(),
                self.current.versions_seen.clone(),
            )
        });
        let sends = apply_writes(
            self.spec,
            &mut self.current,
            &mut self.state,
            tasks.iter().copied(),
            writes,
        )?;
        let values = match self.encode_state() {
            Ok(values) => values,
            Err(e) => {
                if let Some((channels, seen)) = versions {
                    self.current.channel_versions = channels;
                    self.current.versions_seen = seen;
                }
                return Err(e);
            }
        };
        // The current checkpoint is done with: its versions move into the next.
        let mut next = Checkpoint {
            channel_versions: std::mem::take(&mut self.current.channel_versions),
            versions_seen: std::mem::take(&mut self.current.versions_seen),
            ..Checkpoint::empty()
        };
        next.channel_values = values;
        if !sends.is_empty() {
            next.channel_values
                .insert(SENDS_CHANNEL.to_owned(), serde_json::json!(sends));
        }
        self.commit(next, CheckpointSource::Loop, step).await?;
        send_state(&self.sink, step, &self.state);
        Ok(())
    }
}

/// A task that pauses again at a checkpoint where it paused before (its
/// earlier interrupts answered) records them with its new ones: its
/// interrupt write replaces the stored one, and history shows every
/// interrupt raised at the checkpoint. `pending` holds the writes stored at
/// the checkpoint; `writes`, what task `task` writes now.
fn keep_earlier_interrupts(pending: &[PendingWrite], task: &str, writes: &mut [PendingWrite]) {
    let Some(new) = writes.iter_mut().find(|w| w.channel == INTERRUPT_CHANNEL) else {
        return;
    };
    let Some(old) = pending
        .iter()
        .find(|w| w.task_id == task && w.channel == INTERRUPT_CHANNEL)
    else {
        return;
    };
    let (Value::Array(old), Value::Array(raised)) = (&old.value, &mut new.value) else {
        return;
    };
    let ids: Vec<&Value> = raised.iter().filter_map(|i| i.get("id")).collect();
    let mut all: Vec<Value> = old
        .iter()
        .filter(|i| i.get("id").is_none_or(|id| !ids.contains(&id)))
        .cloned()
        .collect();
    all.append(raised);
    *raised = all;
}
