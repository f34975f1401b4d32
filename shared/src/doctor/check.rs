//! One check's outcome, and the report of them all.

use serde::Serialize;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Pass,
    /// Works, but worth a look (the fix says what); does not fail the report.
    Warn,
    /// Broken: the deployment will not work as configured until the fix is applied.
    Fail,
    /// Not run: what it needs is missing (the detail says what).
    Skip,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

/// One check's outcome: what it looked at, what it found and, when that is wrong, what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Which check: `zookeeper`, `root`, `acl`, `clock`, `reaper`, `leases`, `routes`,
    /// `sink`, `secret`, or `config`.
    pub check: &'static str,
    /// What it looked at, when the check runs once per thing: a server, a route, a variable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Passed, warned, failed or skipped.
    pub status: Status,
    /// What it found.
    pub detail: String,
    /// What to do about it (a failure or a warning always has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A passed check that found `detail`.
    pub fn pass(check: &'static str, detail: impl Into<String>) -> Self {
        Check::new(check, Status::Pass, detail.into(), None)
    }

    /// A warning: `detail` is worth a look, and `fix` says what to do.
    pub fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check::new(check, Status::Warn, detail.into(), Some(fix.into()))
    }

    /// A failure: `detail` is wrong, and `fix` says what to do.
    pub fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Check::new(check, Status::Fail, detail.into(), Some(fix.into()))
    }

    /// A check that did not run, `detail` saying why.
    pub fn skip(check: &'static str, detail: impl Into<String>) -> Self {
        Check::new(check, Status::Skip, detail.into(), None)
    }

    fn new(check: &'static str, status: Status, detail: String, fix: Option<String>) -> Self {
        Check {
            check,
            subject: None,
            status,
            detail,
            fix,
        }
    }

    /// The same, about `subject`.
    pub fn on(self, subject: impl Into<String>) -> Self {
        Check {
            subject: Some(subject.into()),
            ..self
        }
    }

    /// The check as one line: `fail  zookeeper 127.0.0.1:2182   <detail>; fix: <fix>`.
    pub fn line(&self) -> String {
        let label = match &self.subject {
            Some(subject) => format!("{} {subject}", self.check),
            None => self.check.to_string(),
        };
        let mut line = format!("{}  {label:<24} {}", self.status.word(), self.detail);
        if let Some(fix) = &self.fix {
            line.push_str("; fix: ");
            line.push_str(fix);
        }
        line
    }
}

/// Every check's outcome, in the order they ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// No check failed (warnings and skips do not count).
    pub ok: bool,
    /// Every check's outcome, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    /// The report of `checks`: `ok` unless one of them failed.
    pub fn of(checks: Vec<Check>) -> Self {
        Report {
            ok: !checks.iter().any(|c| c.status == Status::Fail),
            checks,
        }
    }

    /// The checks that failed.
    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.status == Status::Fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_the_check_its_subject_and_the_fix() {
        let check = Check::fail("zookeeper", "refused", "start it").on("127.0.0.1:2182");
        assert_eq!(
            check.line(),
            "fail  zookeeper 127.0.0.1:2182 refused; fix: start it"
        );
        assert_eq!(
            Check::pass("root", "/q exists").line(),
            format!("pass  {:<24} /q exists", "root")
        );
    }

    #[test]
    fn only_a_failure_fails_the_report() {
        let warned = Report::of(vec![
            Check::warn("clock", "off", "sync"),
            Check::skip("acl", "-"),
        ]);
        assert!(warned.ok);
        let failed = Report::of(vec![
            Check::pass("root", "ok"),
            Check::fail("acl", "no", "grant"),
        ]);
        assert!(!failed.ok);
        assert_eq!(failed.failed().count(), 1);
    }
}
