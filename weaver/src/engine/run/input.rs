//! How a run starts: new input, continuing, or answers to interrupts.

use super::Loop;
use super::sink::send_state;
use crate::checkpoint::CheckpointSource;
use crate::engine::InterruptWhen;
use crate::engine::algebra::{
    Answer, advance, answer, apply_finished, next_step, next_tasks, static_stops, triggered_tasks,
};
use crate::engine::finite::encode_value;
use crate::engine::send::SENDS_CHANNEL;
use crate::engine::spec::{INPUT_CHANNEL, START_TRIGGER};
use crate::engine::subgraph_replay::Replayed;
use crate::engine::{Input, Resume};
use crate::error::{Error, Result};
use crate::state::GraphState;

impl<S: GraphState> Loop<'_, S> {
    /// Takes in `input`; returns whether the first step's static stops
    /// before nodes are to be skipped (a run that goes on from a pause).
    pub(super) async fn take_input(&mut self, input: Input<S>) -> Result<bool> {
        match input {
            Input::Update(update) => {
                self.apply_input(update).await?;
                Ok(false)
            }
            // A run that goes on from a checkpoint first streams the state it
            // starts from, as LangGraph does when resuming; a resume that is
            // refused runs nothing and streams nothing (answering interrupts
            // changes no state, so it is streamed once they are taken).
            Input::Continue => {
                self.require_history("continuing a run")?;
                self.fork_if_replaying().await?;
                send_state(&self.sink, self.step, &self.state);
                Ok(true)
            }
            Input::Resume(resume) => {
                self.require_history("resuming a run")?;
                self.apply_resume(resume).await?;
                send_state(&self.sink, self.step, &self.state);
                Ok(true)
            }
        }
    }

    fn require_history(&self, feature: &'static str) -> Result<()> {
        match &self.thread {
            None => Err(Error::CheckpointerRequired { feature }),
            Some(t) if self.step == -2 => Err(Error::ThreadNotFound {
                thread_id: t.at.thread_id.clone(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Writes the `input` checkpoint: unfinished tasks are discarded and the
    /// input waits in the START channel.
    async fn apply_input(&mut self, update: S::Update) -> Result<()> {
        // New input starts a new step: no task of it is a replayed one.
        self.replayed = None;
        // Tasks of the latest checkpoint that succeeded before the run
        // stopped (a crash between their writes and the step's checkpoint)
        // keep their output, as `get_state` shows it: the input comes after
        // it. The tasks left unfinished are discarded.
        // If they cannot be applied (a reducer refuses them, they no longer
        // decode), they are dropped as unfinished tasks are: the new input
        // must stay a way out of a stuck step.
        // The sends those tasks made stay for the input's checkpoint (tasks
        // of the step after theirs). The nodes they triggered do not: they
        // would run in the input's step beside START and meet its writes
        // on last-value channels, so they are discarded with the unfinished
        // tasks (as LangGraph discards pending tasks on new input).
        let mut sends = Vec::new();
        if !self.replaying && !self.pending.is_empty() {
            let (mut current, mut state) = (self.current.clone(), self.state.clone());
            match apply_finished(self.spec, &mut current, &mut state, &self.pending) {
                Ok(made) => {
                    self.state_is_current = false;
                    (self.current, self.state) = (current, state);
                    sends = made;
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "the stopped step's succeeded writes cannot be applied; the new input discards them"
                ),
            }
        }
        let mut next = self.current.successor_without_values();
        // Unfinished tasks are discarded: the triggered ones marked seen, the
        // sends of the current checkpoint not carried over.
        let discarded = triggered_tasks(self.spec, &self.current);
        advance(self.spec, &mut next, discarded, [START_TRIGGER.to_owned()])?;
        let input = encode_value("input", &update)?;
        next.channel_values = self.encode_state()?;
        next.channel_values.insert(INPUT_CHANNEL.to_owned(), input);
        if !sends.is_empty() {
            next.channel_values
                .insert(SENDS_CHANNEL.to_owned(), serde_json::json!(sends));
        }
        let step = next_step(self.step, &self.current.id)?;
        self.commit(next, CheckpointSource::Input, step).await
    }

    /// Replaying an older checkpoint starts with a `fork` copy of it.
    async fn fork_if_replaying(&mut self) -> Result<()> {
        if self.replaying {
            // The fork's first step runs the replayed checkpoint's tasks
            // again; those paused inside a subgraph find it there.
            self.replayed = Some(Replayed {
                id: self.current.id.clone(),
                ns: self.start_ns.clone(),
                pending: std::mem::take(&mut self.pending),
            });
            // At the replayed checkpoint's step + 1, as in LangGraph: no two
            // checkpoints of one lineage share a step.
            let next = self.current.successor();
            let step = next_step(self.step, &self.current.id)?;
            self.commit(next, CheckpointSource::Fork, step).await?;
        }
        Ok(())
    }

    /// Whether the current checkpoint is a run's stop after a node
    /// (`interrupt_after`), as [`after_stops`](Self::after_stops) finds it.
    /// Such a checkpoint resumes with `null` as often as asked: resuming it
    /// stores nothing.
    async fn paused_after(&self) -> Result<bool> {
        Ok(!self.after_stops().await?.is_empty())
    }

    /// The stops after nodes (`interrupt_after`) the checkpoint the run
    /// started from is: the nodes the step that stored it ran, read from
    /// the tasks its parent started, that the graph stops after (none known
    /// when the parent is not stored).
    pub(super) async fn after_stops(&self) -> Result<Vec<crate::engine::Interrupt>> {
        let (Some(thread), Some(parent)) = (self.thread.as_ref(), self.start_parent.as_ref())
        else {
            return Ok(Vec::new());
        };
        if !self.spec.interrupt_after.iter().any(|f| *f) {
            return Ok(Vec::new());
        }
        // A saver that keeps only the latest checkpoint (or a prune) has no
        // parent to read: no stop is known there.
        let parent = match thread.writer.checkpointer().get_stored(parent).await {
            Ok(Some(parent)) => parent,
            Ok(None) | Err(Error::ShallowSaver { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let ran = next_tasks(self.spec, &parent.checkpoint)?;
        Ok(static_stops(
            self.spec,
            &self.current.id,
            &ran,
            InterruptWhen::After,
        ))
    }

    /// Answers the current checkpoint's pending interrupts with `resume`,
    /// and stores the answers.
    async fn apply_resume(&mut self, resume: Resume) -> Result<()> {
        let thread_id = self
            .thread
            .as_ref()
            .map(|t| t.at.thread_id.clone())
            .unwrap_or_default();
        if self.replaying {
            return Err(Error::invalid_argument(
                "resume continues the thread's latest checkpoint; drop `checkpoint_id` from the config",
            ));
        }
        let has_tasks = !next_tasks(self.spec, &self.current)?.is_empty();
        // A stop after a node that led to END leaves no task: `null`
        // resumes it as any static stop (the run completes), where a
        // finished thread has nothing to resume.
        if !has_tasks
            && matches!(&resume, Resume::Value(v) if v.is_null())
            && self.paused_after().await?
        {
            return Ok(());
        }
        let id = &self.current.id;
        let answered = answer(
            self.spec,
            id,
            has_tasks,
            &mut self.pending,
            resume,
            &thread_id,
        )?;
        let (Answer::Writes { writes, earlier }, Some(thread)) = (answered, self.thread.as_mut())
        else {
            return Ok(());
        };
        thread.save_answers(id, earlier, writes).await
    }
}
