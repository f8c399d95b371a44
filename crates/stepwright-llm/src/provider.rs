//! The built-in model providers: a leaf the price table and the model layer both name.

use serde::{Deserialize, Serialize};

/// A built-in provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible chat completions.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// Its name in files and specs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The environment variable the key is read from by default.
    pub fn key_variable(self) -> &'static str {
        match self {
            Self::Openai => "OPENAI_API_KEY",
            Self::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
}

impl std::str::FromStr for Provider {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(Self::Openai),
            "anthropic" => Ok(Self::Anthropic),
            other => Err(format!("unknown provider {other:?}: expected openai or anthropic")),
        }
    }
}
