//! A run's journal as the engine consults it when it executes the run again: indexed by step
//! path, and used as the execution's mode says (resume everything; replay only what must not
//! happen again; recompute from a point).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{InterruptId, StepPath, Timestamp};
use crate::journal::{Choice, LoadedRun, Record};
use crate::outcome::{InterruptRequest, Resolution};
use crate::policy::Effect;
use crate::services::CallKind;
use crate::store::StoreError;

/// What the journal says about one step path.
#[derive(Default, Debug)]
pub(crate) struct PathLog {
    pub(crate) last_attempt: u32,
    pub(crate) completed: Option<(u32, ContentHash)>,
    pub(crate) failures: Vec<(u32, StepError, Option<Timestamp>)>,
    pub(crate) intent: Option<u32>,
    /// The hash of the input the last intent was given, when the journal kept it.
    pub(crate) intent_input: Option<ContentHash>,
    pub(crate) skipped: Option<String>,
    pub(crate) decided: Option<Choice>,
    pub(crate) values: HashMap<(u32, u32), Value>,
    pub(crate) checkpoint: Option<(u32, Value)>,
    pub(crate) handoff: Option<(String, Value)>,
    /// The attempt that handed a task to a step worker, and the task.
    pub(crate) dispatched: Option<(u32, crate::task::TaskId)>,
}

/// An interrupt as the journal knows it.
#[derive(Debug, Clone)]
pub(crate) struct InterruptLog {
    pub(crate) path: StepPath,
    pub(crate) request: InterruptRequest,
    pub(crate) deadline: Option<Timestamp>,
    pub(crate) resolution: Option<Resolution>,
}

/// The journal of a run, indexed by step path, consulted when a run resumes. Empty for a
/// fresh run, so the fast path pays only an `is_empty` check.
/// What a run's journal is used for.
#[derive(Default)]
pub(crate) enum ReplayMode {
    /// Continue the run: serve everything recorded.
    #[default]
    Resume,
    /// Re-execute the run in a sandbox: serve only what must not happen again (fenced steps'
    /// outputs, human decisions, timing-dependent inputs) and journaled values.
    Replay,
    /// Re-execute from a point in a sandbox: serve everything recorded before it (these
    /// paths), and after it only `write` steps, `external` steps not safe to retry, human
    /// decisions and timing-dependent inputs.
    Recompute(std::collections::HashSet<StepPath>),
}

/// A sub-step as the journal knows it.
pub(crate) enum RecordedCall {
    /// It completed with this output.
    Output(Arc<Value>),
    /// Its intent was committed but nothing after it: it may or may not have happened.
    Unfinished,
}

#[derive(Default)]
pub(crate) struct ReplayIndex {
    mode: ReplayMode,
    paths: HashMap<StepPath, PathLog>,
    blobs: HashMap<ContentHash, Arc<Value>>,
    pub(crate) interrupts: HashMap<InterruptId, InterruptLog>,
    /// Past runs' answers a sandbox serves for the effects it refuses to perform anew.
    recorded: Option<Arc<super::RecordedEffects>>,
}

impl ReplayIndex {
    pub(crate) fn from_loaded(loaded: &LoadedRun) -> Result<Self, StoreError> {
        let mut index = Self { blobs: loaded.blobs.clone(), ..Self::default() };
        for entry in &loaded.entries {
            let log = index.paths.entry(entry.path.clone()).or_default();
            match &entry.record {
                Record::Started { attempt } => log.last_attempt = log.last_attempt.max(*attempt),
                Record::Intent { attempt, input, .. } => {
                    log.intent = Some(*attempt);
                    log.intent_input = *input;
                }
                Record::Completed { attempt, output, .. } => {
                    let value = index.blobs.get(output).ok_or(StoreError::Corrupt(*output))?;
                    if ContentHash::of_value(value) != *output {
                        return Err(StoreError::Corrupt(*output));
                    }
                    log.completed = Some((*attempt, *output));
                    // A folded `Started` entry means the completion also marks the attempt.
                    log.last_attempt = log.last_attempt.max(*attempt);
                }
                Record::Failed { attempt, error, retry_at, .. } => {
                    log.failures.push((*attempt, error.clone(), *retry_at));
                    log.last_attempt = log.last_attempt.max(*attempt);
                }
                Record::Skipped { reason } => log.skipped = Some(reason.clone()),
                Record::Decided { choice } => log.decided = Some(choice.clone()),
                Record::Value { attempt, seq, value } => {
                    log.values.insert((*attempt, *seq), value.clone());
                }
                Record::Checkpoint { attempt, state } => log.checkpoint = Some((*attempt, state.clone())),
                Record::Handoff { target, payload } => log.handoff = Some((target.clone(), payload.clone())),
                Record::InterruptOpened { id, request, deadline } => {
                    index.interrupts.insert(
                        id.clone(),
                        InterruptLog {
                            path: entry.path.clone(),
                            request: request.clone(),
                            deadline: *deadline,
                            resolution: None,
                        },
                    );
                }
                Record::InterruptResolved { id, resolution } => {
                    if let Some(log) = index.interrupts.get_mut(id) {
                        log.resolution = Some(resolution.clone());
                    }
                }
                Record::Dispatched { attempt, task } => {
                    log.dispatched = Some((*attempt, task.id.clone()));
                    log.last_attempt = log.last_attempt.max(*attempt);
                }
                Record::Artifact { .. } | Record::Cancelled { .. } => {}
            }
        }
        Ok(index)
    }

    /// The same journal, used another way.
    pub(crate) fn with_mode(mut self, mode: ReplayMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same journal, with past runs' answers for the effects a sandbox refuses to
    /// perform anew ([`Self::recorded_answer`]).
    pub(crate) fn with_recorded(mut self, recorded: Option<Arc<super::RecordedEffects>>) -> Self {
        self.recorded = recorded;
        self
    }

    /// Whether past runs' answers are served (an experiment's fresh run, or its recompute).
    pub(crate) fn serves_recorded(&self) -> bool {
        self.recorded.is_some()
    }

    /// A past run's answer for a step this sandbox refuses to perform anew (see
    /// [`Self::refuses_anew`]), when one recorded the step's place with the same input: the
    /// answer, and the run that recorded it.
    pub(crate) fn recorded_answer(
        &self,
        path: &StepPath,
        effect: (Effect, bool),
        input: &Value,
    ) -> Option<(crate::ids::RunId, Arc<Value>)> {
        let recorded = self.recorded.as_ref().filter(|r| !r.is_empty())?;
        if !self.refuses_anew(effect) {
            return None;
        }
        recorded.answer(path, ContentHash::of_value(input))
    }

    /// A past run's answer for a call with this identity (see
    /// [`super::RecordedEffects::call_identity`]), and the run that recorded it.
    pub(crate) fn recorded_call(&self, identity: ContentHash) -> Option<(crate::ids::RunId, Arc<Value>)> {
        self.recorded.as_ref()?.answer_to_call(identity)
    }

    /// The attempt whose task the journal shows dispatched at `path`, if any (whatever this
    /// execution serves: a task exists exactly when its entry does).
    pub(crate) fn dispatched(&self, path: &StepPath) -> Option<u32> {
        self.raw(path)?.dispatched.as_ref().map(|(attempt, _)| *attempt)
    }

    /// Whether this is a replay (not a resume, not a recompute).
    pub(crate) fn is_replay(&self) -> bool {
        matches!(self.mode, ReplayMode::Replay)
    }

    /// The output the journal records at `path`, whatever this execution serves (a replay
    /// gives a step worker's recorded answer back instead of dispatching it again).
    pub(crate) fn recorded_output(&self, path: &StepPath) -> Option<Arc<Value>> {
        let (_, hash) = self.raw(path)?.completed?;
        self.blobs.get(&hash).cloned()
    }

    /// Whether this is a sandbox re-execution (replay or recompute), whose own journal
    /// records served steps too, for comparison.
    pub(crate) fn replaying(&self) -> bool {
        !matches!(self.mode, ReplayMode::Resume)
    }

    /// The hash of the input a served step was given when it ran, when a recompute serves
    /// it past its starting point (a write or an unsafe external step) and the journal kept
    /// the hash: a recompute compares it with the input the step would get now.
    pub(crate) fn served_effect_input(&self, path: &StepPath) -> Option<ContentHash> {
        match &self.mode {
            ReplayMode::Recompute(prefix) if !prefix.contains(path) => self.raw(path)?.intent_input,
            _ => None,
        }
    }

    /// Whether an effect of this class that the journal has no result for must not be
    /// performed: a sandbox re-execution never does what the original run did not (a replay
    /// no fenced effect, a recompute no `write` and no `external` that is not safe to retry —
    /// the classes [`Self::path`] serves).
    pub(crate) fn refuses_anew(&self, effect: (Effect, bool)) -> bool {
        let (effect, safe_to_retry) = effect;
        match &self.mode {
            ReplayMode::Resume => false,
            ReplayMode::Replay => effect.is_fenced(),
            ReplayMode::Recompute(_) => effect == Effect::Write || (effect == Effect::External && !safe_to_retry),
        }
    }

    fn serves_code(&self, path: &StepPath) -> bool {
        match &self.mode {
            ReplayMode::Resume => true,
            ReplayMode::Replay => false,
            ReplayMode::Recompute(prefix) => prefix.contains(path),
        }
    }

    fn raw(&self, path: &StepPath) -> Option<&PathLog> {
        if self.paths.is_empty() { None } else { self.paths.get(path) }
    }

    /// What the journal says about a node with this effect class (see [`ReplayMode`]).
    pub(crate) fn path(&self, path: &StepPath, effect: (Effect, bool)) -> Option<&PathLog> {
        let (effect, safe_to_retry) = effect;
        let served = match &self.mode {
            ReplayMode::Resume => true,
            ReplayMode::Replay => effect.is_fenced(),
            ReplayMode::Recompute(prefix) => {
                prefix.contains(path) || effect == Effect::Write || (effect == Effect::External && !safe_to_retry)
            }
        };
        if served { self.raw(path) } else { None }
    }

    pub(crate) fn completed_output(&self, path: &StepPath, effect: (Effect, bool)) -> Option<Arc<Value>> {
        let (_, hash) = self.path(path, effect)?.completed?;
        self.blobs.get(&hash).cloned()
    }

    /// Every recorded completion, by path (for comparing a replay with its original).
    pub(crate) fn completions(&self) -> impl Iterator<Item = (&StepPath, ContentHash)> {
        self.paths.iter().filter_map(|(path, log)| log.completed.map(|(_, hash)| (path, hash)))
    }

    pub(crate) fn value(&self, path: &StepPath, attempt: u32, seq: u32) -> Option<&Value> {
        if matches!(self.mode, ReplayMode::Recompute(_)) && !self.serves_code(path) {
            return None;
        }
        self.raw(path)?.values.get(&(attempt, seq))
    }

    /// A decision the code makes (branch arm, map items, loop verdict, graph edge): served
    /// on resume, re-evaluated in a replay (and after a recompute's starting point).
    /// What the journal holds for a sub-step (`StepContext::call`) of the given attempt,
    /// when this mode serves it: its output, or that it started and did not finish.
    pub(crate) fn call(&self, path: &StepPath, attempt: u32, kind: CallKind) -> Option<RecordedCall> {
        let log = match kind {
            CallKind::Input => match &self.mode {
                ReplayMode::Resume | ReplayMode::Replay => self.raw(path)?,
                ReplayMode::Recompute(prefix) => {
                    if prefix.contains(path) {
                        self.raw(path)?
                    } else {
                        return None;
                    }
                }
            },
            CallKind::Action { effect, safe_to_retry } => self.path(path, (effect, safe_to_retry))?,
        };
        if let Some((done, hash)) = log.completed
            && done == attempt
        {
            return self.blobs.get(&hash).cloned().map(RecordedCall::Output);
        }
        // A call that handed its work to a step worker and suspended is not unfinished: it
        // runs again and finds its task.
        let dispatched = log.dispatched.as_ref().is_some_and(|(at, _)| *at == attempt);
        (log.intent == Some(attempt) && !dispatched).then_some(RecordedCall::Unfinished)
    }

    /// The choice recorded at `path`, when this execution serves it: one that came from
    /// outside the code ([`Choice::is_outside_input`]) always, one the code made (an arm,
    /// items, a verdict, an edge) where code is served (see [`ReplayMode`]).
    pub(crate) fn choice(&self, path: &StepPath) -> Option<&Choice> {
        let choice = self.raw(path)?.decided.as_ref()?;
        (choice.is_outside_input() || self.serves_code(path)).then_some(choice)
    }

    /// Every recorded choice, by path (for comparing a recompute with its original).
    pub(crate) fn choices(&self) -> impl Iterator<Item = (&StepPath, &Choice)> {
        self.paths.iter().filter_map(|(path, log)| log.decided.as_ref().map(|d| (path, d)))
    }

    pub(crate) fn has_interrupts(&self) -> bool {
        !self.interrupts.is_empty()
    }

    pub(crate) fn interrupt(&self, id: &InterruptId) -> Option<&InterruptLog> {
        self.interrupts.get(id)
    }
}
