//! Y1: the engine's cost per step of a workflow written in YAML — what most users write — as
//! W1 measures it for typed Rust steps: one run, a chain of `set` steps, each one expression over
//! the step before (`{{ steps.sN.output + 1 }}`), in-memory journal on. Its difference from W1 is
//! the template language: compiling and evaluating each expression, and the scope it reads.

/// The YAML of a chain of `steps` `set` steps, each adding one to the one before.
fn chain(steps: usize) -> String {
    let mut yaml = String::from("workflow: y1\nsteps:\n  - id: s0\n    set: \"{{ input + 1 }}\"\n");
    for i in 1..steps {
        yaml.push_str(&format!("  - id: s{i}\n    set: \"{{{{ steps.s{}.output + 1 }}}}\"\n", i - 1));
    }
    yaml
}

/// Median and best µs per step over `runs` runs of a chain of `steps`.
pub(crate) fn y1(steps: usize, runs: usize) -> (f64, f64) {
    let workflow = stepwright::flow::load_str(&chain(steps), "y1.yaml").expect("valid");
    crate::chain_per_step(&workflow, steps, runs)
}
