//! `[[budgets]]`: limits on what agents spend, in USD, over a scope, and what happens once one
//! is crossed.

use serde::Deserialize;

use crate::util::glob::glob_match;

/// What a budget's spending is summed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// One lineage: a session with its subagents.
    Session,
    /// A UTC calendar day (as `dstream usage --by day`).
    Day,
    /// An ISO week in UTC (as `dstream usage --by week`).
    Week,
    /// A project folder, over all time.
    Project,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Day => "day",
            Scope::Week => "week",
            Scope::Project => "project",
        }
    }
}

/// What a crossed budget does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetAction {
    /// Record `usage.budget_exceeded` and tell the person (desktop, inbox); nothing is held.
    Notify,
    /// Every later tool call in the scope waits for a person.
    Ask,
    /// Every later tool call in the scope is refused.
    Deny,
}

impl BudgetAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetAction::Notify => "notify",
            BudgetAction::Ask => "ask",
            BudgetAction::Deny => "deny",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// How events and checkpoints name it; by default `<scope> $<limit>`.
    #[serde(default)]
    pub name: Option<String>,
    pub scope: Scope,
    pub limit_usd: f64,
    pub action: BudgetAction,
    /// Only projects (the agent's working folder) this glob matches; all by default.
    #[serde(default)]
    pub project: Option<String>,
}

impl BudgetConfig {
    pub fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} ${}", self.scope.as_str(), self.limit_usd))
    }

    /// The limit in millionths of a dollar, as spending is summed.
    pub fn limit_micros(&self) -> u64 {
        (self.limit_usd * 1e6).round() as u64
    }

    /// Whether the budget covers work in `project` (a call with no known folder is covered
    /// only by budgets that name none).
    pub fn covers(&self, project: Option<&str>) -> bool {
        match (&self.project, project) {
            (None, _) => true,
            (Some(glob), Some(p)) => glob_match(glob, p, false),
            (Some(_), None) => false,
        }
    }

    /// Why the budget cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if !self.limit_usd.is_finite() || self.limit_usd <= 0.0 {
            return Err(format!(
                "limit_usd must be a positive number of dollars, not {}",
                self.limit_usd
            ));
        }
        if self.limit_usd > 1e9 {
            return Err("limit_usd is over a billion dollars".into());
        }
        if let Some(n) = &self.name
            && (n.is_empty() || n.len() > 128)
        {
            return Err("name must be 1 to 128 bytes".into());
        }
        Ok(())
    }
}

/// Checks every budget, and that no two share a name (crossings are recorded by name).
pub fn check_all(budgets: &[BudgetConfig]) -> Result<(), (usize, String)> {
    let mut names = std::collections::HashSet::new();
    for (i, b) in budgets.iter().enumerate() {
        b.check().map_err(|e| (i, e))?;
        if !names.insert(b.name()) {
            return Err((i, format!("another budget is named {:?}", b.name())));
        }
    }
    Ok(())
}
