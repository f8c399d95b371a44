//! The OpenAPI document as the server serves it: the contract's, naming every route the
//! server answers (its router is built from the same table). That the committed
//! `docs/openapi.json` is the generated one is `stepwright-api`'s test.

use serde_json::Value;

use crate::TestServer;

#[tokio::test]
async fn the_served_document_is_3_1_and_every_operation_answers_as_documented() {
    let server = TestServer::start().await;
    let served: Value =
        server.http.get(format!("{}/v1/openapi.json", server.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(served, stepwright_api::openapi::document());
    assert_eq!(served["openapi"], "3.1.0");
    let paths = served["paths"].as_object().unwrap();
    // Every documented operation exists: without a key it answers 401 (or, open, 200; 415
    // without the body it needs), never 404 or 405 from the router.
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().unwrap() {
            let concrete = path.replace("{id}", "01a20a00-6495-7509-b03d-a6af6726a5a7").replace("{name}", "x");
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            let response =
                server.http.request(method.clone(), format!("{}{concrete}", server.base)).send().await.unwrap();
            let status = response.status().as_u16();
            let open = operation["security"] == serde_json::json!([]);
            let needs_body = operation["requestBody"]["required"] == true;
            // An open operation that takes a body (the sign-in) refuses an empty request.
            let expected = match (open, needs_body) {
                (false, _) => 401,
                (true, true) => 415,
                // Sign-in through a provider answers, from its handler, that none is set up.
                (true, false) if path.starts_with("/v1/auth/oidc/") => 404,
                (true, false) => 200,
            };
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(status, expected, "{method} {path}: {body}");
            if status == 404 {
                assert_eq!(body["code"], "oidc_not_configured", "{method} {path}: the handler's, not the router's");
            }
            // Every schema a response names is in the components.
            for reference in references(operation) {
                let name = reference.trim_start_matches("#/components/schemas/");
                assert!(served["components"]["schemas"].get(name).is_some(), "{reference} of {method} {path}");
            }
        }
    }
    assert!(paths.len() >= 11);
    server.shutdown().await;
}

fn references(value: &Value) -> Vec<String> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(key, value)| match (key.as_str(), value) {
                ("$ref", Value::String(reference)) => vec![reference.clone()],
                _ => references(value),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(references).collect(),
        _ => Vec::new(),
    }
}

/// Where schemathesis found the document and the server apart, they agree now: a whole
/// number written with a fraction is an integer (`1.0`), another fraction or a number out of
/// the type's range is refused naming it; an event name is counted in characters, as the
/// document counts; an empty or malformed filter is refused as the document says.
#[tokio::test(flavor = "multi_thread")]
async fn the_server_reads_numbers_and_names_as_the_document_says() {
    let server = crate::TestServer::start().await;
    let key = server.key("acme", "ann", &["admin", "operator", "viewer"]).await;
    server.register(&key, crate::THREE_SETS).await;
    let start = |version: serde_json::Value| {
        server.post(
            &key,
            "/v1/runs",
            serde_json::json!({ "workflow": "three", "version": version, "input": 1, "wait_seconds": 5 }),
        )
    };
    assert_eq!(start(serde_json::json!(1.0)).await.0, 201, "1.0 is the integer 1");
    let (status, body) = start(serde_json::json!(1.5)).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("version: invalid type: 1.5 is not a whole number"), "{body}");
    let (status, body) = start(serde_json::json!(8_679_580_776_152_u64)).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("out of range for u32"), "{body}");
    // 255 characters of three bytes each: a name the document allows.
    let name = "é".repeat(255);
    let (status, body) = server.post(&key, "/v1/events", serde_json::json!({ "name": name, "payload": {} })).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = server.post(&key, "/v1/events", serde_json::json!({ "name": "é".repeat(256) })).await;
    assert_eq!(status, 400);
    for query in ["name=", "before=0", "name=%C2%84"] {
        assert_eq!(server.get(&key, &format!("/v1/events?{query}")).await.0, 400, "{query}");
    }
    assert_eq!(server.get(&key, "/v1/events/not-a-number").await.0, 400);
    assert_eq!(server.get(&key, "/v1/runs?cursor=").await.0, 400);
}
