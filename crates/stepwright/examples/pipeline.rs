//! A typed Rust pipeline with a fork, a loop and a retry, run on the in-memory store.
//!
//! `cargo run --example pipeline` — no network, no API key. It drafts a product blurb in
//! two tones at once (a fork), refines the better one until it is short enough (a loop), and
//! publishes it through a flaky "CMS" that fails twice before it accepts (a retry with
//! exponential backoff). The journal is printed at the end.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use stepwright::{
    Backoff, Effect, Engine, ErrorCode, Event, Expr, Fork, ForkMode, InMemoryStore, Loop, Node, Outcome, PathResult,
    Record, RetryPolicy, Step, StepContext, StepError, Store, Verdict, Workflow, fn_step,
};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Brief {
    product: String,
    max_words: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Draft {
    tone: String,
    text: String,
}

/// Writes a draft in one tone (a stand-in for a model call).
struct Write {
    tone: &'static str,
}

impl Step for Write {
    type Input = Brief;
    type Output = Draft;

    async fn run(&self, _ctx: &StepContext, brief: Brief) -> Result<Outcome<Draft>, StepError> {
        let text = match self.tone {
            "formal" => format!(
                "We are pleased to introduce {}, a carefully engineered product that serves every need you might reasonably have today",
                brief.product
            ),
            _ => format!(
                "Meet {}: it just works, and you will love it from the very first minute you use it",
                brief.product
            ),
        };
        Ok(Draft { tone: self.tone.to_owned(), text }.into())
    }
}

/// Drops the last word (a stand-in for a critique-and-rewrite turn).
fn shorten() -> Node {
    Node::step(
        "shorten",
        fn_step(|_ctx, draft: Draft| async move {
            let mut words: Vec<&str> = draft.text.split_whitespace().collect();
            words.pop();
            Ok(Draft { tone: draft.tone, text: words.join(" ") })
        }),
    )
}

/// A CMS that is unavailable for its first two calls.
struct Publish {
    calls: Arc<AtomicU32>,
}

impl Step for Publish {
    type Input = Draft;
    type Output = serde_json::Value;

    async fn run(&self, ctx: &StepContext, draft: Draft) -> Result<Outcome<serde_json::Value>, StepError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call <= 2 {
            return Err(StepError::new(
                ErrorCode::new("cms_unavailable"),
                format!("publishing: the cms answered 503 (call {call})"),
            )
            .retryable(true));
        }
        // The idempotency key is the same in every attempt: the CMS can de-duplicate.
        let key = ctx.idempotency_key().unwrap_or_default().to_owned();
        ctx.emit(Event::new("blurb.published", json!({ "words": draft.text.split_whitespace().count() })));
        Ok(json!({ "published": draft.text, "tone": draft.tone, "idempotency_key": &key[..12] }).into())
    }
}

fn pick_shorter(results: Vec<PathResult>) -> Result<serde_json::Value, StepError> {
    results
        .into_iter()
        .filter_map(|r| match r {
            PathResult::Completed(v) => Some(v),
            _ => None,
        })
        .min_by_key(|d| d["text"].as_str().map_or(usize::MAX, |t| t.split_whitespace().count()))
        .ok_or_else(|| StepError::execution_failed("no draft was written"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls = Arc::new(AtomicU32::new(0));
    let workflow = Workflow::builder("product-blurb")
        .version("1.0.0")
        .input_type::<Brief>()
        .step(
            Fork::new("drafts")
                .mode(ForkMode::All)
                .path([Node::step("formal", Write { tone: "formal" })])
                .path([Node::step("friendly", Write { tone: "friendly" })])
                .merge(pick_shorter),
        )
        .step(Loop::new("refine", 20, [shorten()]).until(Expr::new(|scope| {
            let words =
                scope.output("shorten").and_then(|d| d["text"].as_str()).map_or(0, |t| t.split_whitespace().count());
            let limit = scope.input()["max_words"].as_u64().unwrap_or(10) as usize;
            if words <= limit {
                Verdict::done(format!("{words} words fit the limit of {limit}"))
            } else {
                Verdict::again(format!("{words} words, limit {limit}"))
            }
        })))
        .step(
            Node::step("publish", Publish { calls: calls.clone() }).effect(Effect::External).retry(
                RetryPolicy::new(5)
                    .backoff(Backoff::Exponential)
                    .initial_delay(Duration::from_millis(50))
                    .max_delay(Duration::from_secs(1)),
            ),
        )
        .build()?;

    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let report = engine.start(&workflow, json!({ "product": "Stepwright", "max_words": 8 })).await?;

    println!("run {} {:?}", report.run_id, report.status);
    println!("output: {}", serde_json::to_string_pretty(&report.output)?);
    println!("\njournal:");
    for entry in store.entries(report.run_id) {
        let what = match &entry.record {
            Record::Started { attempt } => format!("started (attempt {attempt})"),
            Record::Intent { attempt, key, .. } => {
                format!("intent (attempt {attempt}, key {}…)", &key[..12])
            }
            Record::Completed { attempt, output, .. } => {
                format!("completed (attempt {attempt}) → {}…", &output.to_hex()[..12])
            }
            Record::Failed { attempt, error, retry_at, .. } => {
                format!("failed (attempt {attempt}): {error}{}", if retry_at.is_some() { ", will retry" } else { "" })
            }
            Record::Decided { choice } => format!("decided {}", serde_json::to_value(choice).unwrap_or_default()),
            other => format!("{other:?}"),
        };
        println!("  {:<22} {what}", entry.path.as_str());
    }
    println!("\nevents:");
    for event in engine.store().events(report.run_id).await? {
        println!("  {:<22} {} {}", event.path.as_str(), event.kind, event.data);
    }
    if report.status != stepwright::RunStatus::Completed {
        return Err(format!("the run ended {:?}: {:?}", report.status, report.error).into());
    }
    Ok(())
}
