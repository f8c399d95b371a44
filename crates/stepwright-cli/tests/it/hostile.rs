//! Bad input never wins: a corpus of hostile and mistaken inputs, each with the error it
//! must get — a clear message, the documented exit code, nothing read that should not be,
//! nothing echoed from a file that should not be shown, and no unbounded memory or time.

use std::path::Path;

use crate::support::stepwright;

/// One hostile input: the files it needs, the command, and what must come of it.
struct Case {
    name: &'static str,
    files: &'static [(&'static str, &'static str)],
    args: &'static [&'static str],
    code: i32,
    says: &'static str,
    never_says: &'static [&'static str],
}

const OK: (&str, &str) = ("ok.yaml", "workflow: ok\nsteps:\n  - id: a\n    set: 1\n");

const CASES: &[Case] = &[
    Case {
        name: "a call to an absolute path outside the tree",
        files: &[("app/main.yaml", "workflow: w\nsteps:\n  - id: a\n    workflow: /etc/passwd\n")],
        args: &["validate", "app/main.yaml"],
        code: 2,
        says: "app/main.yaml:4:15: the called workflow `/etc/passwd` is outside the directory tree",
        never_says: &["root:"],
    },
    Case {
        name: "a call that climbs out of the tree",
        files: &[
            ("app/main.yaml", "workflow: w\nsteps:\n  - id: a\n    workflow: ../lib/l.yaml\n"),
            ("lib/l.yaml", "workflow: l\nsteps:\n  - id: x\n    set: 2\n"),
        ],
        args: &["validate", "app/main.yaml"],
        code: 2,
        says: "is outside the directory tree of the first file",
        never_says: &[],
    },
    Case {
        name: "a call out of the tree that an allow-list permits",
        files: &[
            ("app/main.yaml", "workflow: w\nsteps:\n  - id: a\n    workflow: ../lib/l.yaml\n"),
            ("lib/l.yaml", "workflow: l\nsteps:\n  - id: x\n    set: 2\n"),
        ],
        args: &["validate", "app/main.yaml", "--allow-dir", "lib"],
        code: 0,
        says: "",
        never_says: &[],
    },
    Case {
        name: "schedules create loads a file too: its calls out of the tree need the allow-list",
        files: &[
            (
                "app/main.yaml",
                "workflow: w\nschedules:\n  hourly: { every: 1h }\nsteps:\n  - id: a\n    workflow: ../lib/l.yaml\n",
            ),
            ("lib/l.yaml", "workflow: l\nsteps:\n  - id: x\n    set: 2\n"),
        ],
        args: &["schedules", "create", "app/main.yaml"],
        code: 2,
        says: "is outside the directory tree of the first file",
        never_says: &[],
    },
    Case {
        name: "schedules create takes the allow-list",
        files: &[
            (
                "app/main.yaml",
                "workflow: w\nschedules:\n  hourly: { every: 1h }\nsteps:\n  - id: a\n    workflow: ../lib/l.yaml\n",
            ),
            ("lib/l.yaml", "workflow: l\nsteps:\n  - id: x\n    set: 2\n"),
        ],
        args: &["schedules", "create", "app/main.yaml", "--allow-dir", "lib"],
        code: 0,
        says: "w/hourly  next ",
        never_says: &[],
    },
    Case {
        name: "triggers create takes the allow-list",
        files: &[
            (
                "app/main.yaml",
                "workflow: w\ntriggers:\n  on-ping: { event: ping }\nsteps:\n  - id: a\n    workflow: ../lib/l.yaml\n",
            ),
            ("lib/l.yaml", "workflow: l\nsteps:\n  - id: x\n    set: 2\n"),
        ],
        args: &["triggers", "create", "app/main.yaml", "--allow-dir", "lib"],
        code: 0,
        says: "w/on-ping",
        never_says: &[],
    },
    Case {
        name: "of schedules, only create loads a file",
        files: &[],
        args: &["schedules", "list", "--allow-dir", "lib"],
        code: 2,
        says: "`schedules` does not take --allow-dir: it loads no workflow file from disk",
        never_says: &[],
    },
    Case {
        name: "a top-level file that is a device",
        files: &[],
        args: &["validate", "/dev/zero"],
        code: 2,
        says: "/dev/zero:1:1: the file cannot be read: it is not a regular file",
        never_says: &[],
    },
    Case {
        name: "a called file that is not UTF-8",
        files: &[("main.yaml", "workflow: w\nsteps:\n  - id: a\n    workflow: blob.yaml\n"), ("blob.yaml", "\u{0}")],
        args: &["validate", "main.yaml"],
        code: 2,
        says: "the called workflow `blob.yaml`",
        never_says: &[],
    },
    Case {
        name: "an input file that is a device",
        files: &[OK],
        args: &["run", "ok.yaml", "--input", "@/dev/zero"],
        code: 2,
        says: "the input file /dev/zero cannot be read: it is not a regular file",
        never_says: &[],
    },
    Case {
        name: "a missing input file",
        files: &[OK],
        args: &["run", "ok.yaml", "--input", "@nope.json"],
        code: 2,
        says: "the input file nope.json cannot be read: No such file or directory",
        never_says: &[],
    },
    Case {
        name: "a missing cassette in replay mode",
        files: &[OK],
        args: &["run", "ok.yaml", "--cassette", "nope.json", "--cassette-mode", "replay"],
        code: 2,
        says: "--cassette nope.json: reading cassette nope.json: No such file or directory",
        never_says: &[],
    },
    Case {
        name: "a cassette that is a device",
        files: &[OK],
        args: &["run", "ok.yaml", "--cassette", "/dev/zero"],
        code: 2,
        says: "it is not a regular file",
        never_says: &[],
    },
    Case {
        name: "an unreachable Postgres",
        files: &[OK],
        args: &["--db", "postgres://postgres@127.0.0.1:1/test", "run", "ok.yaml"],
        code: 1,
        says: "connecting to postgres",
        never_says: &["pool timed out"],
    },
    Case {
        name: "a store URL of no known kind",
        files: &[OK],
        args: &["--db", "mysql://localhost/x", "run", "ok.yaml"],
        code: 2,
        says: "expected sqlite://PATH or postgres://",
        never_says: &[],
    },
    Case {
        name: "a misspelt root name",
        files: &[("t.yaml", "workflow: t\nsteps:\n  - id: a\n    set: \"{{ inptu.name }}\"\n")],
        args: &["validate", "t.yaml"],
        code: 2,
        says: "t.yaml:4:10: `inptu` is not a name an expression can use here (hint: did you mean `input`?",
        never_says: &[],
    },
    Case {
        name: "a misspelt field in a one-expression template",
        files: &[("t.yaml", "workflow: t\nsteps:\n  - id: a\n    set: \"{{ input.nmae }}\"\n")],
        args: &["run", "t.yaml", "--input", "{\"name\": \"ann\"}"],
        code: 1,
        says: "evaluating `input.nmae`: undefined value",
        never_says: &[],
    },
    Case {
        name: "a runaway template",
        files: &[(
            "t.yaml",
            "workflow: t\nsteps:\n  - id: a\n    timeout: 1s\n    set: \"{% for a in range(10000) %}{% for b in range(10000) %}x{% endfor %}{% endfor %}\"\n",
        )],
        args: &["run", "t.yaml"],
        code: 1,
        says: "fuel",
        never_says: &[],
    },
    Case {
        name: "a template that tries to include a file",
        files: &[("t.yaml", "workflow: t\nsteps:\n  - id: a\n    set: \"{% include '/etc/passwd' %}\"\n")],
        args: &["run", "t.yaml"],
        code: 2,
        says: "t.yaml:4:10: the template `{% include '/etc/passwd' %}` does not parse: unknown statement include",
        never_says: &["root:"],
    },
    Case {
        name: "a page size of zero",
        files: &[],
        args: &["runs", "list", "--limit", "0"],
        code: 2,
        says: "--limit must be at least 1",
        never_says: &[],
    },
    Case {
        name: "a status that is not one",
        files: &[],
        args: &["runs", "list", "--status", "done"],
        code: 2,
        says: "unknown status \"done\": pending, running, suspended, completed, failed or cancelled",
        never_says: &[],
    },
    Case {
        name: "a cursor that is not a run id",
        files: &[],
        args: &["runs", "list", "--before", "yesterday"],
        code: 2,
        says: "yesterday",
        never_says: &[],
    },
    Case {
        name: "a wait that is not a duration",
        files: &[],
        args: &["cancel", "0192a9f0-0000-7000-8000-000000000000", "--wait", "soon"],
        code: 2,
        says: "is not a duration",
        never_says: &[],
    },
    Case {
        name: "a cancel of a run that does not exist",
        files: &[],
        args: &["cancel", "0192a9f0-0000-7000-8000-000000000000"],
        code: 2,
        says: "was not found",
        never_says: &[],
    },
];

fn setup(dir: &Path, case: &Case) {
    for (name, body) in case.files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
}

#[test]
fn every_hostile_input_gets_its_error() {
    let mut failures = Vec::new();
    for case in CASES {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path(), case);
        let output = stepwright(dir.path(), case.args);
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let wrong = output.status.code() != Some(case.code)
            || !said.contains(case.says)
            || case.never_says.iter().any(|secret| said.contains(secret));
        if wrong {
            failures.push(format!("{}: exit {:?} (expected {}):\n{said}", case.name, output.status.code(), case.code));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), CASES.len(), failures.join("\n"));
}

/// Files over the limits are refused by size, before they are read.
#[test]
fn files_over_their_limits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.yaml"), OK.1).unwrap();
    let big = vec![b'#'; usize::try_from(stepwright::flow::MAX_FILE_BYTES).unwrap() + 1];
    std::fs::write(dir.path().join("big.yaml"), &big).unwrap();
    let output = stepwright(dir.path(), &["validate", "big.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("big.yaml:1:1: the file cannot be read: it is 1048577 bytes; the limit is 1048576"),
        "{said}"
    );
    // A called file has the same limit.
    std::fs::write(dir.path().join("calls.yaml"), "workflow: c\nsteps:\n  - id: a\n    workflow: big.yaml\n").unwrap();
    let output = stepwright(dir.path(), &["validate", "calls.yaml"]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("the limit is 1048576"));
    // An input file over 16 MiB.
    let input = std::fs::File::create(dir.path().join("input.json")).unwrap();
    input.set_len(16 * 1024 * 1024 + 1).unwrap();
    let output = stepwright(dir.path(), &["run", "ok.yaml", "--input", "@input.json"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("the limit is 16777216"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A cassette over 64 MiB (sparse: nothing is written).
    let cassette = std::fs::File::create(dir.path().join("huge.json")).unwrap();
    cassette.set_len(stepwright::llm::MAX_CASSETTE_BYTES + 1).unwrap();
    let output = stepwright(dir.path(), &["run", "ok.yaml", "--cassette", "huge.json"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("the limit is 67108864"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A FIFO (or any file that is not a regular one) where a file is read is refused at once,
/// never waited on: the workflow file, a called `workflow:`, `--input @…`, `--cassette`.
#[test]
fn pipes_where_files_are_read_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.yaml"), OK.1).unwrap();
    std::fs::write(dir.path().join("calls.yaml"), "workflow: c\nsteps:\n  - id: a\n    workflow: pipe.yaml\n").unwrap();
    for fifo in ["pipe.yaml", "pipe.json"] {
        let made = std::process::Command::new("mkfifo").arg(dir.path().join(fifo)).status().unwrap();
        assert!(made.success());
    }
    let db = format!("sqlite://{}", dir.path().join("x.db").display());
    let cases: [&[&str]; 5] = [
        &["validate", "pipe.yaml"],
        &["--db", &db, "run", "pipe.yaml"],
        &["validate", "calls.yaml"],
        &["--db", &db, "run", "ok.yaml", "--input", "@pipe.json"],
        &["--db", &db, "run", "ok.yaml", "--cassette", "pipe.json"],
    ];
    for args in cases {
        let child = crate::support::command(dir.path(), args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (done, output) = {
            let (send, receive) = std::sync::mpsc::channel();
            std::thread::spawn(move || send.send(child.wait_with_output().unwrap()));
            match receive.recv_timeout(std::time::Duration::from_secs(30)) {
                Ok(output) => (true, Some(output)),
                Err(_) => (false, None),
            }
        };
        assert!(done, "{args:?} waits on a pipe");
        let output = output.unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(said.contains("not a regular file"), "{args:?}: {said}");
    }
}

/// A store this user may only read (a 0444 file in a directory it cannot write) serves
/// the read-only commands; a command that writes fails saying the database is read-only.
/// As root (CI) the commands run as `nobody`, for whom the bits hold.
#[test]
fn a_read_only_store_serves_the_read_only_commands() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.yaml"), OK.1).unwrap();
    let db = format!("sqlite://{}", dir.path().join("ro.db").display());
    let ran = stepwright(dir.path(), &["--db", &db, "run", "ok.yaml", "--json"]);
    let run: serde_json::Value = serde_json::from_slice(&ran.stdout).unwrap();
    let run = run["run_id"].as_str().unwrap().to_owned();
    for leftover in ["ro.db-wal", "ro.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(leftover));
    }
    std::fs::set_permissions(dir.path().join("ro.db"), std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let root = std::process::Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    // `nobody` may not reach the build's directory (a clone under /root): a copy it can run.
    let binary = tempfile::tempdir().unwrap();
    let copy = binary.path().join("stepwright");
    if root {
        std::fs::copy(env!("CARGO_BIN_EXE_stepwright"), &copy).unwrap();
        std::fs::set_permissions(binary.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let as_reader = |args: &[&str]| {
        let mut command = if root {
            let mut command = std::process::Command::new("setpriv");
            command.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&copy);
            command
        } else {
            std::process::Command::new(env!("CARGO_BIN_EXE_stepwright"))
        };
        command.current_dir(dir.path()).env_remove("STEPWRIGHT_DB").args(args).output().unwrap()
    };
    let listed = as_reader(&["--db", &db, "runs", "list"]);
    let said = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(0), "{said}");
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&run), "{}", String::from_utf8_lossy(&listed.stdout));
    let shown = as_reader(&["--db", &db, "runs", "show", &run, "--json"]);
    assert_eq!(shown.status.code(), Some(0), "{}", String::from_utf8_lossy(&shown.stderr));
    let written = as_reader(&["--db", &db, "run", "ok.yaml"]);
    assert_ne!(written.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&written.stderr).contains("readonly database"), "{written:?}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}
