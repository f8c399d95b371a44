//! The dashboard's files: embedded, served without a key, fenced in by their headers,
//! compressed when asked, revalidated by hash. (What the page does is tested in a real
//! browser by `tools/dashboard/test.mjs`.)

use crate::TestServer;

#[tokio::test]
async fn the_dashboard_is_served_from_the_binary_with_a_strict_policy() {
    let server = TestServer::start().await;
    for (path, kind) in [
        ("/", "text/html"),
        ("/link", "text/html"),
        ("/assets/app.js", "text/javascript"),
        ("/assets/app.css", "text/css"),
    ] {
        let response = server.http.get(format!("{}{path}", server.base)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let headers = response.headers();
        assert!(headers["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("script-src 'self'") && policy.contains("default-src 'none'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["cache-control"], "no-cache");
        let etag = headers["etag"].to_str().unwrap().to_owned();
        let again =
            server.http.get(format!("{}{path}", server.base)).header("if-none-match", &etag).send().await.unwrap();
        assert_eq!(again.status(), 304, "{path}: unchanged since {etag}");
        assert!(again.bytes().await.unwrap().is_empty());
    }
    let page = server.http.get(format!("{}/", server.base)).send().await.unwrap().text().await.unwrap();
    assert!(page.contains(r#"<script type="module" src="/assets/app.js">"#), "{page}");
    assert!(!page.contains("<script>"), "no inline script");
    let script = server
        .http
        .get(format!("{}/assets/run.js", server.base))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(script.headers()["content-encoding"], "gzip");
    // The largest module: compression shows on a file of some size.
    let plain = include_str!("../../dashboard/run.js").len();
    let compressed = script.bytes().await.unwrap().len();
    assert!(compressed * 3 < plain, "{compressed} bytes for {plain}");
    // The API's answers are not compressed: an event leaves at once.
    let health =
        server.http.get(format!("{}/v1/health", server.base)).header("accept-encoding", "gzip").send().await.unwrap();
    assert!(health.headers().get("content-encoding").is_none());
    let missing = server.http.get(format!("{}/assets/nope.js", server.base)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    // Every module the page imports is served, and what the contract module lists is the
    // API's own vocabulary.
    let mut modules = vec!["app.js".to_owned()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(module) = modules.pop() {
        if !seen.insert(module.clone()) {
            continue;
        }
        let response = server.http.get(format!("{}/assets/{module}", server.base)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{module}");
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"), "{module}");
        let text = response.text().await.unwrap();
        assert!(text.lines().count() <= 400, "{module} is one part of the page, not all of it");
        for line in text.lines().filter(|line| line.starts_with("import ")) {
            let from = line.rsplit("from './").next().unwrap().trim_end_matches("';");
            modules.push(from.to_owned());
        }
    }
    assert!(seen.len() >= 10 && seen.contains("contract.js"), "{seen:?}");
    let contract = server.http.get(format!("{}/assets/contract.js", server.base)).send().await.unwrap();
    let contract = contract.text().await.unwrap();
    let statuses: Vec<&str> = stepwright_api::RunStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert!(contract.contains(&format!("RUN_STATUSES = {}", serde_json::to_string(&statuses).unwrap())), "{contract}");
    assert!(contract.contains(r#"TERMINAL = new Set(["completed","failed","cancelled"])"#), "{contract}");
    server.shutdown().await;
}
