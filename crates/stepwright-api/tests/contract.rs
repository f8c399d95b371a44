//! The contract's own promises: the committed document is the generated one, every
//! operation is named once, and the wire types read back what they write.

use std::collections::HashSet;

use stepwright_api::webhook::WebhookPayload;
use stepwright_api::{Method, operations};

fn committed_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = serde_json::to_string_pretty(&stepwright_api::openapi::document()).unwrap() + "\n";
    let path = committed_path();
    if std::env::var_os("STEPWRIGHT_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is not the document the contract gives; regenerate it with \
         STEPWRIGHT_BLESS=1 cargo test -p stepwright-api --test contract"
    );
}

#[test]
fn each_operation_is_one_method_on_one_path_with_one_id() {
    let mut ids = HashSet::new();
    let mut routes = HashSet::new();
    for operation in operations() {
        assert!(ids.insert(operation.id), "{:?} is in the table twice", operation.id);
        assert!(routes.insert((operation.method, operation.path)), "{:?} {} twice", operation.method, operation.path);
        assert!(operation.path.starts_with('/'), "{}", operation.path);
        // A body only where a method carries one.
        if operation.body.is_some() {
            assert_eq!(operation.method, Method::Post, "{:?} takes a body", operation.id);
        }
    }
    let document = stepwright_api::openapi::document();
    let documented: usize =
        document["paths"].as_object().unwrap().values().map(|methods| methods.as_object().unwrap().len()).sum();
    assert_eq!(documented, operations().len(), "every operation is in the document, once");
    let names: HashSet<String> = operations().iter().map(|operation| operation.id.name()).collect();
    assert!(names.contains("startRun") && names.contains("openapi") && names.contains("decideByLink"));
}

#[test]
fn a_webhook_payload_names_its_event_as_its_body_does() {
    let interrupt = stepwright_api::webhook::WebhookInterrupt {
        id: "approve-0".into(),
        step: "approve".into(),
        kind: stepwright_api::InterruptKind::Approval,
        message: "ok?".into(),
        payload: serde_json::json!({ "draft": 1 }),
        deadline: None,
        decide: "/v1/interrupts/r.approve-0/decision".into(),
    };
    let (run_id, workflow, at) = ("r".to_owned(), "w".to_owned(), 7);
    let payloads = [
        WebhookPayload::InterruptOpened {
            run_id: run_id.clone(),
            workflow: workflow.clone(),
            at,
            interrupt: interrupt.clone(),
        },
        WebhookPayload::RunSuspended {
            run_id: run_id.clone(),
            workflow: workflow.clone(),
            at,
            status: stepwright_api::RunStatus::Suspended,
            interrupt: Some(interrupt),
            wake_at: None,
        },
        WebhookPayload::RunCompleted {
            run_id: run_id.clone(),
            workflow: workflow.clone(),
            at,
            status: stepwright_api::RunStatus::Completed,
            output: serde_json::json!(null),
        },
        WebhookPayload::RunFailed {
            run_id,
            workflow,
            at,
            status: stepwright_api::RunStatus::Failed,
            error: Some(stepwright_api::ErrorView { code: "step_failed".into(), message: "no".into() }),
        },
    ];
    let mut events = Vec::new();
    for payload in payloads {
        let body = serde_json::to_value(&payload).unwrap();
        assert_eq!(body["event"], payload.event(), "{body}");
        assert_eq!(serde_json::from_value::<WebhookPayload>(body).unwrap(), payload);
        events.push(payload.event());
    }
    events.sort_unstable();
    assert_eq!(events, WebhookPayload::EVENTS, "every event a webhook may ask for has a payload");
}
