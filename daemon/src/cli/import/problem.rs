//! A problem with a file or a line of a transcript: reported as found, counted, listed in
//! the summary; never the end of an import.

use std::fmt;
use std::path::Path;

use serde::Serialize;

/// Something wrong with a file or a line: reported, and the import goes on.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    pub problem: String,
}

impl Problem {
    pub fn file(file: &Path, problem: String) -> Problem {
        Problem {
            file: file.display().to_string(),
            line: None,
            problem,
        }
    }

    pub fn line(file: &Path, line: usize, problem: String) -> Problem {
        Problem {
            line: Some(line),
            ..Problem::file(file, problem)
        }
    }

    /// A line kept as `unmapped` lost nothing; every other problem did.
    pub fn cost_data(&self) -> bool {
        !self.problem.ends_with("kept as unmapped")
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(n) => write!(f, "{}:{n}: {}", self.file, self.problem),
            None => write!(f, "{}: {}", self.file, self.problem),
        }
    }
}
