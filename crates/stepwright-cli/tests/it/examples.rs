//! Every workflow in `examples/` end to end through the binary, offline: the model calls are
//! played back from each example's cassette (no API key, no network), tools and MCP servers
//! run for real. The cassettes are recordings against a scripted model on loopback (the
//! `screenplay`): a test records every example again and checks the committed cassette is
//! exactly what it records now (`STEPWRIGHT_BLESS=1` rewrites them).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{Answer, Tokens, contents, stepwright};
use serde_json::{Value, json};

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").canonicalize().unwrap()
}

/// The examples this file knows how to check; a new example must be added here.
const EXAMPLES: &[&str] = &["mcp-agent", "order-followup", "refine", "research", "ticket-triage"];

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!("not JSON: {}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    })
}

/// The example's file, where the test can run it: the MCP example starts the reference
/// server with npx, which needs the network; the test starts the same pinned version from
/// the copy `.ci/run` installs (`STEPWRIGHT_TEST_MCP_EVERYTHING`). `None` when that is not set.
fn runnable(name: &str, dir: &Path) -> Option<PathBuf> {
    let file = examples_dir().join(format!("{name}.yaml"));
    if name != "mcp-agent" {
        return Some(file);
    }
    let Ok(script) = std::env::var("STEPWRIGHT_TEST_MCP_EVERYTHING") else {
        #[allow(clippy::print_stderr)] // A skipped example says so.
        {
            eprintln!("skipped: the mcp-agent example (STEPWRIGHT_TEST_MCP_EVERYTHING is not set)");
        }
        return None;
    };
    let text = std::fs::read_to_string(&file).unwrap();
    let npx =
        "    command: npx\n    args: [\"-y\", \"@modelcontextprotocol/server-everything@2026.8.31\", \"stdio\"]\n";
    assert!(text.contains(npx), "the mcp-agent example no longer starts the server as this test expects");
    let local = text.replace(npx, &format!("    command: node\n    args: [{script:?}, \"stdio\"]\n"));
    let copy = dir.join("mcp-agent.yaml");
    std::fs::write(&copy, local).unwrap();
    Some(copy)
}

/// The input each example is run (and was recorded) with, as its header comment shows.
pub(crate) fn input_of(name: &str) -> &'static str {
    match name {
        "ticket-triage" => r#"{"ticket": "I was charged twice for order A-1042, please refund one of them."}"#,
        "research" => r#"{"topic": "durable execution for AI agents"}"#,
        "mcp-agent" => r#"{"question": "What is 1234 + 5678, and what is that plus 100?"}"#,
        "refine" => r#"{"brief": "a durable workflow engine for AI agents, in one binary"}"#,
        "order-followup" => r#"{"order_id": "A-1042", "customer": "Ann"}"#,
        other => panic!("no input for {other}"),
    }
}

fn cassette(name: &str) -> String {
    examples_dir().join(format!("{name}.cassette.json")).display().to_string()
}

#[test]
fn every_example_runs_offline_from_its_cassette() {
    let mut found: Vec<String> = std::fs::read_dir(examples_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".yaml").map(str::to_owned))
        .collect();
    found.sort();
    assert_eq!(found, EXAMPLES, "every example in examples/ is run here");

    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let Some(file) = runnable(name, dir.path()) else { continue };
        let file = file.display().to_string();
        let cassette = cassette(name);
        let replay = ["--cassette", cassette.as_str(), "--cassette-mode", "replay"];
        let input = input_of(name);
        let run = stepwright(dir.path(), &[&["run", file.as_str(), "--input", input, "--json"][..], &replay].concat());
        let report = json_of(&run);
        let output = &report["output"];
        match *name {
            "ticket-triage" => {
                assert_eq!(run.status.code(), Some(3), "{name}: {report}");
                assert_eq!(report["pending"][0]["step"], json!("review"), "{report}");
                let message = report["pending"][0]["message"].as_str().unwrap();
                assert!(message.starts_with("Send this reply?") && message.contains("refund"), "{message}");
                let run_id = report["run_id"].as_str().unwrap();
                // Only a lead may approve.
                let denied = stepwright(dir.path(), &[&["approve", run_id, "--as", "bob"][..], &replay].concat());
                assert_eq!(denied.status.code(), Some(2), "{}", String::from_utf8_lossy(&denied.stderr));
                let approved = stepwright(
                    dir.path(),
                    &[&["approve", run_id, "--as", "ann", "--role", "lead", "--json"][..], &replay].concat(),
                );
                let done = json_of(&approved);
                assert_eq!(approved.status.code(), Some(0), "{done}");
                let output = &done["output"];
                assert_eq!((&output["category"], &output["urgency"]), (&json!("billing"), &json!("high")));
                // The agent looked the order up with the tool and reported what it found.
                assert!(output["findings"].as_str().unwrap().contains("charged twice"), "{output}");
                assert!(output["sent"]["body"].as_str().unwrap().contains("A-1042"), "{output}");
                let shown = json_of(&stepwright(dir.path(), &["runs", "show", run_id, "--json"]));
                let paths: Vec<&str> =
                    shown["steps"].as_array().unwrap().iter().filter_map(|s| s["path"].as_str()).collect();
                assert!(paths.contains(&"route/investigate/turn.0/tool.0"), "{paths:?}");
                assert_eq!(shown["usage"]["calls"], json!(4), "classify, two agent turns, draft: {shown}");
            }
            "research" => {
                assert_eq!(run.status.code(), Some(0), "{name}: {report}");
                assert!(output["title"].is_string() && output["summary"].is_string(), "{output}");
                assert!(output["key_points"].as_array().unwrap().len() >= 2, "{output}");
                let run_id = report["run_id"].as_str().unwrap();
                let shown = json_of(&stepwright(dir.path(), &["runs", "show", run_id, "--json"]));
                let paths: Vec<&str> =
                    shown["steps"].as_array().unwrap().iter().filter_map(|s| s["path"].as_str()).collect();
                for path in ["sides[0]/case-for", "sides[1]/case-against", "answers[2]/answer", "report"] {
                    assert!(paths.contains(&path), "{path} in {paths:?}");
                }
                assert_eq!(shown["usage"]["calls"], json!(7), "plan, two sides, three answers, report: {shown}");
            }
            "mcp-agent" => {
                assert_eq!(run.status.code(), Some(0), "{name}: {report}");
                assert!(output["answer"].as_str().unwrap().contains("7012"), "{output}");
                assert_eq!(output["echoed"], json!(format!("Echo: {}", output["answer"].as_str().unwrap())));
            }
            "refine" => {
                assert_eq!(run.status.code(), Some(0), "{name}: {report}");
                assert_eq!(output["score"], json!(9), "{output}");
                assert!(output["blurb"].as_str().unwrap().contains("durable"), "{output}");
                let run_id = report["run_id"].as_str().unwrap();
                let shown = json_of(&stepwright(dir.path(), &["runs", "show", run_id, "--json"]));
                let paths: Vec<&str> =
                    shown["steps"].as_array().unwrap().iter().filter_map(|s| s["path"].as_str()).collect();
                assert!(paths.contains(&"improve#2/critique") && !paths.contains(&"improve#3/draft"), "{paths:?}");
            }
            "order-followup" => {
                // Suspended on the wait, saying for what; the model calls before it done.
                assert_eq!(run.status.code(), Some(3), "{name}: {report}");
                assert_eq!(report["awaiting"][0]["event"], json!("delivered"), "{report}");
                let run_id = report["run_id"].as_str().unwrap();
                let sent = stepwright(
                    dir.path(),
                    &["send", run_id, "--inbox", "delivered", "--message", r#"{"signed_by": "Ann"}"#],
                );
                assert_eq!(sent.status.code(), Some(0), "{}", String::from_utf8_lossy(&sent.stderr));
                let resumed = stepwright(dir.path(), &[&["resume", run_id, "--json"][..], &replay].concat());
                let done = json_of(&resumed);
                assert_eq!(resumed.status.code(), Some(0), "{done}");
                let output = &done["output"];
                assert_eq!(output["signed_by"], json!("Ann"), "{output}");
                assert_eq!(output["tracking"], json!({ "status": "in transit", "source": "estimate" }), "the fallback");
                assert!(output["note"].as_str().unwrap().len() <= 120, "shortened: {output}");
                let shown = json_of(&stepwright(dir.path(), &["runs", "show", run_id, "--json"]));
                let steps = shown["steps"].as_array().unwrap();
                let step = |path: &str| steps.iter().find(|s| s["path"] == json!(path)).cloned();
                assert_eq!(step("tracking").unwrap()["attempts"], json!(2), "retried once: {shown}");
                assert!(step("tracking/@fallback/estimate").is_some(), "{shown}");
                assert!(step("thanks#2/write").is_some() && step("thanks#3/write").is_none(), "{shown}");
                assert_eq!(shown["usage"]["calls"], json!(3), "summary and two drafts: {shown}");
                // A second run of the same order is served the summary from the store's cache.
                let again = stepwright(
                    dir.path(),
                    &[&["run", file.as_str(), "--input", input, "--json"][..], &replay].concat(),
                );
                let again = json_of(&again)["run_id"].as_str().unwrap().to_owned();
                let shown = json_of(&stepwright(dir.path(), &["runs", "show", &again, "--json"]));
                assert_eq!(shown["usage"]["calls"], json!(2), "the cached summary called no model: {shown}");
            }
            other => panic!("no checks for {other}"),
        }
    }
}

/// What the scripted model says in the examples: written for each example's prompts.
fn screenplay(request: &Value) -> Answer {
    let system = contents(request, "system").first().copied().unwrap_or_default();
    let user = contents(request, "user").first().copied().unwrap_or_default();
    let results = contents(request, "tool");
    let text = |s: &str| Answer::Text(s.to_owned());
    let call = |id: &str, name: &str, args: Value| Answer::Calls(vec![(id.to_owned(), name.to_owned(), args)]);
    if user.starts_with("Classify this support ticket") {
        return text(r#"{"category": "billing", "urgency": "high"}"#);
    }
    if system.starts_with("You investigate billing tickets") {
        return match results.first() {
            None => call("call_lookup_1", "lookup_order", json!({ "order_id": "A-1042" })),
            Some(_) => text(
                "Order A-1042 was delivered and charged twice (two charges of $42.50). Refund the duplicate \
                 charge of $42.50 and confirm it to the customer.",
            ),
        };
    }
    if system.starts_with("You write short, friendly support replies") {
        return text(
            "Hi! Sorry about the double charge on order A-1042. We found the duplicate $42.50 payment and have \
             started a refund; you will see it within 5 business days.",
        );
    }
    if user.starts_with("Plan a short research brief") {
        return text(
            r#"{"questions": ["What does durable execution guarantee for an agent run?", "What does journaling every step cost?", "How do people in the loop fit into durable runs?"]}"#,
        );
    }
    if user.contains("the strongest case for") {
        return text(
            "Agents run for minutes to days and call paid models and side-effecting tools; durable execution \
             makes a crash cost a resume, with no finished call paid twice. Approvals and timers become \
             ordinary steps that can wait for days.",
        );
    }
    if user.contains("the strongest case against") {
        return text(
            "Journaling every step adds latency and storage to every run, and code with side effects has to \
             be fenced carefully to resume safely. For short, cheap, stateless calls a plain retry is simpler.",
        );
    }
    if let Some(question) = user.strip_prefix("Answer in at most three sentences: ") {
        return text(match question {
            q if q.contains("guarantee") => {
                "Every finished step is recorded before the run moves on, so after a crash the run resumes \
                 where it stopped and finished steps are served from the journal. Side effects run at most \
                 once when they are fenced, or again only when declared safe to retry."
            }
            q if q.contains("cost") => {
                "One journal write per step, batched into group commits: tens of microseconds on SQLite, \
                 well under a millisecond on Postgres. That is small next to a model call of seconds."
            }
            _ => {
                "An approval is an interrupt the run suspends on; the run holds no process while it waits \
                 and resumes on any worker once someone decides. Timeouts decide for nobody after a deadline."
            }
        });
    }
    if system.starts_with("You write crisp research reports") {
        return text(
            r#"{"title": "Durable execution for AI agents", "summary": "Durable execution records every step of an agent run, so crashes, deploys and days-long waits for people cost a resume instead of a rerun. Its price is a journal write per step, small next to a model call.", "key_points": ["Finished steps are never paid for twice.", "Side effects need fencing or a retry-safe declaration.", "Approvals and timers become ordinary, durable steps.", "A journal write per step is cheap next to a model call."]}"#,
        );
    }
    if system.starts_with("You answer arithmetic questions") {
        return match results.len() {
            0 => call("call_sum_1", "everything__get-sum", json!({ "a": 1234, "b": 5678 })),
            1 => call("call_sum_2", "everything__get-sum", json!({ "a": 6912, "b": 100 })),
            _ => text("1234 + 5678 = 6912, and 6912 + 100 = 7012."),
        };
    }
    if user.starts_with("Write a two-sentence product blurb") {
        return text(if user.contains("The critic said") {
            "Stepwright is a durable engine for AI-agent workflows in a single binary: every step is \
             journaled, so runs survive crashes and wait days for a person. Start on SQLite with no \
             infrastructure and grow to Postgres with many workers."
        } else {
            "Stepwright runs your AI agent workflows. It is fast and easy."
        });
    }
    if user.starts_with("Score this product blurb") {
        return text(if user.contains("durable") {
            r#"{"score": 9, "feedback": "Specific and credible: it names what is different (durability, one binary, no infrastructure). Keep it."}"#
        } else {
            r#"{"score": 4, "feedback": "Too vague: say what makes it different, such as surviving crashes, waiting for people, and needing no infrastructure."}"#
        });
    }
    if user.starts_with("Summarize order A-1042") {
        return text("Order A-1042 for Ann: one pair of trail shoes, paid and shipped on Monday.");
    }
    if user.starts_with("Write a thank-you note to Ann") {
        return text(
            "Dear Ann, thank you so much for your order A-1042! We hope the trail shoes carry you far, and we \
             would love to hear how they feel after your first long run. Warmly, the team",
        );
    }
    if user.starts_with("Shorten this note") {
        return text("Thanks for order A-1042, Ann! Enjoy the trail shoes and tell us how they feel.");
    }
    panic!("the screenplay has no line for this request: {request}");
}

/// A cassette's recordings by key (the file's order follows which call finished first).
/// A cassette's recordings by key.
pub(crate) fn recordings(path: &Path) -> std::collections::BTreeMap<String, Value> {
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    file["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["key"].as_str().unwrap().to_owned(), i.clone()))
        .collect()
}

#[test]
fn recording_the_examples_again_reproduces_their_cassettes() {
    let (port, served) = crate::support::fake_openai(screenplay, Tokens::Proportional);
    let base = format!("http://127.0.0.1:{port}/v1");
    let bless = std::env::var("STEPWRIGHT_BLESS").is_ok();
    for name in EXAMPLES {
        let dir = tempfile::tempdir().unwrap();
        let Some(file) = runnable(name, dir.path()) else { continue };
        let source = std::fs::read_to_string(&file).unwrap();
        let loaded = stepwright::flow::load_source(&source, &file.display().to_string()).unwrap();
        let recorded = dir.path().join("recorded.cassette.json");
        let mut args: Vec<String> = vec!["run".into(), file.display().to_string(), "--json".into()];
        args.extend(["--cassette".into(), recorded.display().to_string(), "--cassette-mode".into(), "record".into()]);
        // Every model binding points at the scripted model; the cassette key leaves the
        // endpoint out, so the recording plays back against the file's own models.
        for (binding, config) in &loaded.models {
            args.extend(["--model".into(), format!("{binding}=openai:{}@{base}", config.model)]);
        }
        args.extend(["--input".into(), input_of(name).into()]);
        let before = served.served();
        let output = Command::new(env!("CARGO_BIN_EXE_stepwright"))
            .current_dir(dir.path())
            .env_remove("STEPWRIGHT_DB")
            .env("OPENAI_API_KEY", "sk-recording")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            matches!(output.status.code(), Some(0 | 3)),
            "{name}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let calls = served.served() - before;
        let committed = PathBuf::from(cassette(name));
        if bless {
            std::fs::copy(&recorded, &committed).unwrap();
        }
        let (fresh, kept) = (recordings(&recorded), recordings(&committed));
        assert_eq!(fresh.len(), calls, "{name}: every call the model answered is recorded");
        assert!(
            fresh == kept,
            "{name}: the committed cassette is not what the example records now; STEPWRIGHT_BLESS=1 rewrites it"
        );
    }
}

/// Every example finishes over `serve` as its header says it does locally: one server replays
/// all the examples' cassettes; each example is started with `--server` (which registers its
/// file), and the ones that wait are finished over the server — the ticket's reply approved by
/// a key with the custom role `role:lead` (and refused to one without), the order's delivery
/// sent to its inbox. Each ends `completed` with the output the local run gives.
#[test]
fn every_example_finishes_over_serve() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("served.db").display());
    // One cassette holding every example's recordings (their keys differ by request).
    let mut interactions = Vec::new();
    for name in EXAMPLES {
        let file: Value = serde_json::from_str(&std::fs::read_to_string(cassette(name)).unwrap()).unwrap();
        interactions.extend(file["interactions"].as_array().unwrap().iter().cloned());
    }
    let all = dir.path().join("all.cassette.json");
    std::fs::write(&all, json!({ "version": 1, "interactions": interactions }).to_string()).unwrap();
    // Registering a file is an admin's act; starting its runs an operator's.
    let operator = crate::support::api_key(dir.path(), &db, "ops", &["admin", "operator", "viewer"]);
    let lead = crate::support::api_key(dir.path(), &db, "ann", &["approver", "viewer", "role:lead"]);
    let approver = crate::support::api_key(dir.path(), &db, "bob", &["approver", "viewer"]);
    let all = all.display().to_string();
    let serving =
        crate::support::serve_flags(dir.path(), &db, &["--cassette", all.as_str(), "--cassette-mode", "replay"]);
    let call = |key: &str, args: &[&str]| {
        crate::support::command(dir.path(), args)
            .env("STEPWRIGHT_SERVER", &serving.base)
            .env("STEPWRIGHT_API_KEY", key)
            .output()
            .unwrap()
    };
    let mut finished = Vec::new();
    for name in EXAMPLES {
        let Some(file) = runnable(name, dir.path()) else { continue };
        let file = file.display().to_string();
        let started = call(&operator, &["run", file.as_str(), "--input", input_of(name), "--json"]);
        let report = json_of(&started);
        let run = report["run_id"].as_str().unwrap().to_owned();
        let done = match *name {
            "ticket-triage" => {
                assert_eq!(started.status.code(), Some(3), "{name}: {report}");
                assert_eq!(report["pending"][0]["step"], json!("review"), "{report}");
                let refused = call(&approver, &["approve", &run]);
                assert_eq!(refused.status.code(), Some(2), "an approver without role:lead: {refused:?}");
                let approved = call(&lead, &["approve", &run, "--json"]);
                assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
                json_of(&approved)
            }
            "order-followup" => {
                assert_eq!(started.status.code(), Some(3), "{name}: {report}");
                assert_eq!(report["awaiting"][0]["event"], json!("delivered"), "{report}");
                let sent =
                    call(&operator, &["send", &run, "--inbox", "delivered", "--message", r#"{"signed_by": "Ann"}"#]);
                assert_eq!(sent.status.code(), Some(0), "{}", String::from_utf8_lossy(&sent.stderr));
                // The server's worker resumes it: wait for the end over the API.
                let mut shown = json!(null);
                for _ in 0..200 {
                    shown = json_of(&call(&operator, &["runs", "show", &run, "--json"]));
                    if shown["status"] == json!("completed") {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                shown
            }
            _ => {
                assert_eq!(started.status.code(), Some(0), "{name}: {report}");
                report
            }
        };
        assert_eq!(done["status"], json!("completed"), "{name}: {done}");
        let output = &done["output"];
        let expected = match *name {
            "ticket-triage" => output["sent"]["body"].as_str().is_some_and(|b| b.contains("A-1042")),
            "order-followup" => output["signed_by"] == json!("Ann"),
            "research" => output["key_points"].as_array().is_some_and(|points| points.len() >= 2),
            "mcp-agent" => output["answer"].as_str().is_some_and(|a| a.contains("7012")),
            "refine" => output["score"] == json!(9),
            other => panic!("no checks for {other}"),
        };
        assert!(expected, "{name}: {output}");
        finished.push(*name);
    }
    let expected: Vec<&str> = EXAMPLES
        .iter()
        .copied()
        .filter(|name| *name != "mcp-agent" || std::env::var("STEPWRIGHT_TEST_MCP_EVERYTHING").is_ok())
        .collect();
    assert_eq!(finished, expected, "every example finished over the server");
}
