//! The features that join the core through its hooks ([`crate::feature::Feature`]), a folder
//! each, and the one list of them: [`registered`].
//!
//! A new feature adds its folder here and one line to [`registered`]; it edits no file of the
//! core. What a feature keeps with a task is its section of the envelope
//! ([`crate::task::Section`]).

pub mod batches;
pub mod cancel_marks;
pub mod concurrency_keys;
pub mod debounce;
pub mod dependencies;
pub mod done_records;
pub mod expiry;
pub mod idempotency_keys;
pub mod pause;
#[cfg(feature = "schedule")]
pub mod schedules;
pub mod signals;
pub mod steps;

use std::sync::Arc;

use crate::config::Config;
use crate::feature::{Feature, Features};
use crate::run_hook::Registered;

/// Every feature, with what it reads of `config`, in the order the core asks them: what a
/// [`crate::Queue`] is built with.
pub fn registered(config: &Config) -> Features {
    let list: Vec<Arc<dyn Feature>> = vec![
        // First: a task whose concurrency key no gate can be named after is buried as
        // malformed, and then a cancelled one as cancelled, whatever else would refuse it.
        Arc::new(concurrency_keys::ConcurrencyKeys),
        Arc::new(cancel_marks::CancelMarks),
        Arc::new(expiry::Expiry),
        // After those that bury: a paused task that is cancelled or expired is buried.
        Arc::new(pause::Pause),
        Arc::new(steps::StepFolders),
        Arc::new(idempotency_keys::Keys::new(config.dedup_window)),
        Arc::new(batches::Batches::default()),
        Arc::new(dependencies::Dependencies::default()),
        Arc::new(signals::Signals::new(config.signal_keep)),
        Arc::new(done_records::DoneRecords::new(config.keep_done)),
    ];
    Features::new(list)
}

/// Every hook a run calls beside its work ([`crate::run_hook`]), in order.
pub const RUN_HOOKS: &[Registered] = &[
    #[cfg(feature = "schedule")]
    Registered {
        hook: &schedules::FireDue,
        watched: Some(schedules::WATCHED),
    },
    Registered {
        hook: &debounce::FireDue,
        watched: Some(debounce::WATCHED),
    },
];
