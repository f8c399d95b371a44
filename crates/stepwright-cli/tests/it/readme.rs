//! The README cannot drift: every YAML block loads (a fragment inside a minimal file), every
//! `stepwright` command of its shell blocks parses (its subcommand and flags exist), and every
//! example's header commands parse and use the input the example was recorded with. (The API
//! walkthrough runs as written in `serve.rs`.)

use std::path::{Path, PathBuf};

use crate::support::stepwright;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fenced block: its language, its text and the README line it starts on.
struct Block {
    lang: String,
    text: String,
    line: usize,
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut open: Option<Block> = None;
    for (number, line) in markdown.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(Block { lang: lang.trim().to_owned(), text: String::new(), line: number + 1 });
            }
            (Some(_), Some(_)) => found.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    found
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

/// A YAML block as a whole file: a fragment (a `tools:` section, `steps: …`) inside a minimal
/// workflow, so that what it shows is checked by the same loader.
fn as_file(text: &str) -> String {
    let minimal = "steps:\n  - id: a\n    set: 1\n";
    let mut file = text.replace("steps: …\n", minimal);
    if !file.lines().any(|l| l.starts_with("workflow:")) {
        file = format!("workflow: readme-fragment\n{file}");
    }
    if !file.lines().any(|l| l.starts_with("steps:")) {
        file.push_str(minimal);
    }
    file
}

#[test]
fn every_yaml_block_of_the_readme_loads() {
    let dir = tempfile::tempdir().unwrap();
    let yaml: Vec<Block> = blocks(&readme()).into_iter().filter(|b| b.lang == "yaml").collect();
    assert!(yaml.len() >= 8, "{} YAML blocks", yaml.len());
    for block in yaml {
        // An experiment file is checked as `experiments run` reads it.
        if block.text.starts_with("experiment:") {
            let checked = stepwright::app::experiment::parse_experiment(&block.text, "README.md");
            assert!(checked.is_ok(), "README.md:{}: the experiment does not parse: {checked:?}", block.line);
            continue;
        }
        let file = dir.path().join(format!("readme-{}.yaml", block.line));
        std::fs::write(&file, as_file(&block.text)).unwrap();
        // A file a block calls (`workflow: parts/x.yaml`) is not the README's to show: a
        // minimal one stands in for it.
        let calls = block
            .text
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("workflow: ").or(l.strip_prefix("spawn: ")));
        for called in calls {
            let called = called.split_whitespace().next().unwrap_or_default();
            if called.ends_with(".yaml") {
                let path = dir.path().join(called);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(
                    &path,
                    "workflow: called
steps:
  - id: a
    set: 1
",
                )
                .unwrap();
            }
        }
        let checked = stepwright(dir.path(), &["validate", file.to_str().unwrap()]);
        assert_eq!(
            checked.status.code(),
            Some(0),
            "README.md:{}: the YAML block does not load:\n{}\n{}",
            block.line,
            String::from_utf8_lossy(&checked.stderr),
            as_file(&block.text)
        );
    }
}

/// The `stepwright` commands of a shell block's text: each logical line (continuations
/// joined) split into words as a shell does, cut at `&&`, `|`, `;` and `&`, with `$( … )`
/// opened; a command is what follows `stepwright` or `cargo run -p stepwright-cli --`, after
/// any `NAME=value` words.
fn commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut found = Vec::new();
    for line in joined.lines() {
        let Some(words) = shlex::split(line) else { continue };
        let mut current: Vec<String> = Vec::new();
        let mut pieces: Vec<Vec<String>> = Vec::new();
        let mut skip_next = false;
        for word in words {
            if word.starts_with('#') {
                break;
            }
            if [">", ">>", "<", "2>", "2>&1"].contains(&word.as_str()) || word.starts_with('>') {
                // A redirection: its target is not an argument.
                skip_next = !word.ends_with("&1") && word.len() <= 2;
                continue;
            }
            if std::mem::take(&mut skip_next) {
                continue;
            }
            if ["&&", "||", "|", ";", "&"].contains(&word.as_str()) {
                pieces.push(std::mem::take(&mut current));
                continue;
            }
            match word.split_once("$(") {
                Some((_, inner)) => {
                    pieces.push(std::mem::take(&mut current));
                    current.push(inner.to_owned());
                }
                None => current.push(
                    word.strip_suffix(')')
                        .filter(|_| word.ends_with(')') && !word.contains('('))
                        .unwrap_or(&word)
                        .to_owned(),
                ),
            }
        }
        pieces.push(current);
        for piece in pieces {
            let words: Vec<String> = piece.into_iter().skip_while(|w| is_assignment(w)).collect();
            let args = match words.first().map(String::as_str) {
                Some("stepwright") => words[1..].to_vec(),
                Some("cargo")
                    if words.get(1..5) == Some(&["run".into(), "-p".into(), "stepwright-cli".into(), "--".into()]) =>
                {
                    words[5..].to_vec()
                }
                _ => continue,
            };
            found.push(args);
        }
    }
    found
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

/// `stepwright ARGS --help` exits 0: the subcommand and every flag exist, and every value
/// given parses (help is shown only once the words before it parse).
fn assert_parses(dir: &Path, args: &[String], place: &str) {
    let mut line: Vec<&str> = args.iter().map(String::as_str).collect();
    line.push("--help");
    let parsed = stepwright(dir, &line);
    assert_eq!(
        parsed.status.code(),
        Some(0),
        "{place}: `stepwright {}` does not parse: {}",
        args.join(" "),
        String::from_utf8_lossy(&parsed.stderr)
    );
}

#[test]
fn every_stepwright_command_of_the_readme_parses() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for block in blocks(&readme()).into_iter().filter(|b| b.lang == "sh") {
        for args in commands(&block.text) {
            assert_parses(dir.path(), &args, &format!("README.md:{}", block.line));
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked} commands");
}

/// Every example's header commands (its first comment lines) parse; its `run` names its own
/// cassette and the input the example is recorded with (which `examples.rs` runs).
#[test]
fn every_examples_header_commands_parse() {
    let dir = tempfile::tempdir().unwrap();
    let examples = root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    for file in files {
        let name = file.file_stem().unwrap().to_str().unwrap().to_owned();
        let header: String = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .take_while(|l| l.starts_with('#'))
            .filter_map(|l| l.strip_prefix("#   "))
            .map(|l| format!("{}\n", l.trim_start().replace("<run id>", "01a20eed-6750-77e6-926f-c4215cacbf0d")))
            .collect();
        let commands = commands(&header);
        let run = commands
            .iter()
            .find(|c| c.first().is_some_and(|w| w == "run"))
            .unwrap_or_else(|| panic!("{name}: no `run` in its header"));
        let flag = |flag: &str| run.iter().position(|w| w == flag).and_then(|i| run.get(i + 1)).cloned();
        assert_eq!(flag("--cassette"), Some(format!("examples/{name}.cassette.json")), "{name}");
        assert_eq!(flag("--input").as_deref(), Some(crate::examples::input_of(&name)), "{name}");
        for args in &commands {
            assert_parses(dir.path(), args, &name);
        }
    }
}
