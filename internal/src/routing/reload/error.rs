//! Why a reload or rollback was refused, and what asked for a reload (SPEC section 6).

use crate::config::{ConfigError, ConfigIssue};

/// Why a reload or rollback was refused; the live table is unchanged in every case.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReloadError {
    /// The file is invalid.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
    /// More than half of the new nodes failed their connect probe.
    #[error("refused: {failed} of {total} new nodes failed the connect probe")]
    ProbeFailed {
        /// Failed count.
        failed: usize,
        /// New nodes probed.
        total: usize,
        /// Per failed node: `key` = `clusters[i].nodes[j]`, message names the node and the error.
        issues: Vec<ConfigIssue>,
    },
    /// No config file to reload from (started with the embedded defaults).
    #[error("no config file: the gateway runs on its embedded defaults")]
    NoFile,
    /// `POST /admin/rollback` with no previous table.
    #[error("no previous route table to roll back to")]
    NoPrevious,
}

impl ReloadError {
    /// The issues in the admin API's `{"errors": [...]}` shape (SPEC section 3).
    pub fn issues(&self) -> Vec<ConfigIssue> {
        let one = |m: String| {
            vec![ConfigIssue {
                key: "-".into(),
                line: 0,
                column: 0,
                message: m,
            }]
        };
        match self {
            ReloadError::Invalid(e) => e.issues.clone(),
            ReloadError::ProbeFailed { issues, .. } => {
                let mut v = one(self.to_string());
                v.extend(issues.iter().cloned());
                v
            }
            ReloadError::NoFile | ReloadError::NoPrevious => one(self.to_string()),
        }
    }
}

/// What asked for a reload (SPEC section 6: file change, SIGHUP, admin call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadTrigger {
    /// The file watcher saw the file change.
    File,
    /// `SIGHUP`.
    Signal,
    /// `POST /admin/reload`.
    Admin,
}
