//! Effects recorded by past runs, found again by what they were given: what an experiment's
//! fresh run (a new input, run in a sandbox) is served instead of performing a `write` or an
//! unsafe `external` step again — the step at the same place in the definition, given the
//! same input, answered so once; the answer is served. An effect no past run performed with
//! that input is not performed either (`not_executed`).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::hash::ContentHash;
use crate::ids::{RunId, StepPath};
use crate::journal::{LoadedRun, Record};

/// Where a step is in its definition, whichever map item or loop round reached it:
/// `each[3]/charge` and `each[7]/charge` are one place, `loop#2/send` and `loop#5/send`
/// another. Two map items given the same input do the same thing.
fn place(path: &StepPath) -> String {
    let mut out = String::with_capacity(path.as_str().len());
    let mut digits_of = None;
    for c in path.as_str().chars() {
        match (digits_of, c) {
            (Some(_), '0'..='9') => {}
            (Some('['), ']') => {
                out.push(']');
                digits_of = None;
            }
            (_, '[' | '#') => {
                out.push(c);
                digits_of = Some(c);
            }
            _ => {
                out.push(c);
                digits_of = None;
            }
        }
    }
    out
}

/// Recorded effects by place and input: see the module's doc.
#[derive(Debug, Default, Clone)]
pub struct RecordedEffects {
    answers: HashMap<(String, ContentHash), (RunId, Arc<Value>)>,
    /// Every answer by its intent's hash alone: a call's ([`Self::call_identity`]) holds
    /// its step's place and what the call does.
    calls: HashMap<ContentHash, (RunId, Arc<Value>)>,
    runs: usize,
}

impl RecordedEffects {
    /// Nothing recorded: every effect is refused.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds what `run` recorded: each fenced step that kept the hash of its input and
    /// completed in the attempt of that intent. A later run's answer to the same place and
    /// input replaces an earlier one's (add runs oldest first: the newest answer is served).
    pub fn add(&mut self, run: &LoadedRun) {
        let mut intents: HashMap<&StepPath, (u32, ContentHash)> = HashMap::new();
        for entry in &run.entries {
            match &entry.record {
                Record::Intent { attempt, input: Some(input), .. } => {
                    intents.insert(&entry.path, (*attempt, *input));
                }
                Record::Completed { attempt, output, .. } => {
                    if let Some((intended, input)) = intents.get(&entry.path)
                        && intended == attempt
                        && let Some(value) = run.blobs.get(output)
                    {
                        let answer = (run.record.id, value.clone());
                        self.calls.insert(*input, answer.clone());
                        self.answers.insert((place(&entry.path), *input), answer);
                    }
                }
                _ => {}
            }
        }
        self.runs += 1;
    }

    /// How many runs were added.
    #[must_use]
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// How many answers are kept (one per place and input).
    #[must_use]
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// What identifies a call within the step at `step` (an agent's tool call: the tool and
    /// its arguments), wherever the step's map item or loop round, whichever turn made it:
    /// the hash its intent keeps.
    #[must_use]
    pub fn call_identity(step: &StepPath, call: &Value) -> ContentHash {
        ContentHash::of_value(&serde_json::json!({ "at": place(step), "call": call }))
    }

    /// The answer a past run recorded for a call with this identity, and which run.
    #[must_use]
    pub fn answer_to_call(&self, identity: ContentHash) -> Option<(RunId, Arc<Value>)> {
        self.calls.get(&identity).cloned()
    }

    /// The answer a past run recorded at `path`'s place for an input with this hash, and
    /// which run recorded it.
    #[must_use]
    pub fn answer(&self, path: &StepPath, input: ContentHash) -> Option<(RunId, Arc<Value>)> {
        self.answers.get(&(place(path), input)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::place;
    use crate::StepPath;

    #[test]
    fn a_place_forgets_which_item_or_round_reached_it() {
        for (path, expected) in [
            ("charge", "charge"),
            ("each[3]/charge", "each[]/charge"),
            ("each[30]/charge", "each[]/charge"),
            ("loop#2/send", "loop#/send"),
            ("a[1]/b#12/c[0]", "a[]/b#/c[]"),
            ("v2/step3", "v2/step3"),
            ("turn.1/tool.0", "turn.1/tool.0"),
        ] {
            assert_eq!(place(&StepPath::new(path)), expected, "{path}");
        }
    }
}
