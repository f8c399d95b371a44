//! The model layer's integration tests: adapters against loopback servers speaking the providers' wire formats, and the llm, agent, tool and memory steps in a running engine.
//!
//! One test binary for the crate: each module is one area (a file per area, as before),
//! linked once instead of once per file.

mod support;

mod agent;
mod anthropic;
mod litellm;
mod llm_step;
mod memory;
mod openai;
mod sdk_bodies;
mod push;
mod tools;
