//! The kit's verdicts: one line per check, a precise reason under each
//! failure, and a summary.

use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase", tag = "outcome", content = "detail")]
pub enum Outcome {
    /// Passed; what was seen, e.g. "144 instance types".
    Pass(String),
    /// Failed; exactly what is wrong.
    Fail(String),
    /// Not run: it needs what an earlier check, named here, failed to give.
    Skip(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// A stable identifier, e.g. `well-known-labels`.
    pub id: &'static str,
    /// What the check asserts, in a sentence.
    pub title: &'static str,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

impl Report {
    pub(crate) fn push(
        &mut self,
        id: &'static str,
        title: &'static str,
        result: Result<String, String>,
    ) {
        let outcome = match result {
            Ok(detail) => Outcome::Pass(detail),
            Err(why) => Outcome::Fail(why),
        };
        self.checks.push(Check { id, title, outcome });
    }

    /// Records `id` as not run because the check `cause` failed: one root
    /// cause is reported once, as a failure, not again under each check
    /// that needed it.
    pub(crate) fn skip(&mut self, id: &'static str, title: &'static str, cause: &str) {
        self.checks.push(Check {
            id,
            title,
            outcome: Outcome::Skip(format!("{cause} failed")),
        });
    }

    /// Whether nothing failed. A skipped check means an earlier one failed.
    pub fn passed(&self) -> bool {
        self.checks
            .iter()
            .all(|c| matches!(c.outcome, Outcome::Pass(_)))
    }

    pub fn get(&self, id: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.id == id)
    }

    /// The ids of the failed checks.
    pub fn failed(&self) -> Vec<&'static str> {
        self.checks
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
            .map(|c| c.id)
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            match &c.outcome {
                Outcome::Pass(detail) => writeln!(f, "PASS  {:<20} {} ({detail})", c.id, c.title)?,
                Outcome::Fail(why) => {
                    writeln!(f, "FAIL  {:<20} {}", c.id, c.title)?;
                    for line in why.lines() {
                        writeln!(f, "      {line}")?;
                    }
                }
                Outcome::Skip(why) => writeln!(f, "SKIP  {:<20} {} ({why})", c.id, c.title)?,
            }
        }
        let failed = self.failed().len();
        let skipped = self
            .checks
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skip(_)))
            .count();
        write!(
            f,
            "conformance: {} passed, {failed} failed, {skipped} skipped",
            self.checks.len() - failed - skipped
        )
    }
}
