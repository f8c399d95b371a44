//! Broken workflow files and the diagnostics they must produce (`corpus/NAME.yaml` beside
//! `corpus/NAME.diagnostics`). A missing `.diagnostics` file is written from the current
//! output, for review; `STEPWRIGHT_BLESS=1` rewrites them all.

use std::path::Path;

#[test]
fn every_broken_file_reports_its_diagnostics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let bless = std::env::var("STEPWRIGHT_BLESS").is_ok();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "the corpus has {} files; it needs at least 30", files.len());
    let mut mismatches = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&file).unwrap();
        let actual = match stepwright_flow::load_str(&source, &name) {
            Ok(_) => "(loads without problems)\n".to_owned(),
            Err(error) => error.diagnostics.iter().map(|d| format!("{d}\n")).collect(),
        };
        let expected_path = file.with_extension("diagnostics");
        match std::fs::read_to_string(&expected_path) {
            Ok(expected) if !bless => {
                if expected != actual {
                    mismatches.push(format!("{name}:\n--- expected\n{expected}--- actual\n{actual}"));
                }
            }
            _ => std::fs::write(&expected_path, &actual).unwrap(),
        }
        assert!(!actual.starts_with("(loads"), "{name} is in the broken corpus but loads");
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
