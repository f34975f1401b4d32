//! The task format: what a producer writes into a task znode.
//!
//! Our producers write an [`Envelope`]. Any other producer may write any JSON (the 000 design's
//! Ruby producer writes the event hash as it is): such a body is a *plain* task, and its whole
//! JSON becomes the payload. A body that is not UTF-8 JSON, or claims to be an envelope and is
//! not one, is *poison*: it goes to the dead letters on its first claim, with the reason.

pub mod after;
pub mod batch;
mod body;
mod debounce;
mod envelope;
mod field;
pub mod json;
mod line;
mod names;
mod pending_debounced;
mod place;
mod publishable;
mod section;
mod size;

pub use crate::lane::{LaneWeights, Priority};
use crate::progress::Progress;
pub use crate::quoted::{SHOWN_BYTES, clipped, one_line, shown};
pub use after::OnParentDead;
pub use body::{Body, group_of, parse};
pub use debounce::{Debounce, MAX_DEBOUNCE_KEY_NAME_BYTES, parse_span};
pub use envelope::{Envelope, FORMAT, OnDead, OnDeadPolicy, is_traceparent};
pub use field::check_text;
pub use line::{envelope_from_value, parse_delay};
pub use names::{
    MAX_CONCURRENCY_KEY_NAME_BYTES, MAX_GROUP_NAME_BYTES, MAX_ID_NAME_BYTES, MAX_KEY_NAME_BYTES,
    MAX_RUNNABLE_NAME_BYTES, MAX_TYPE_NAME_BYTES,
};
pub use pending_debounced::PendingDebounced;
pub use place::{PLACE_DUE_MS, Place, StandsFor};
pub use publishable::check_envelope_size;
pub use section::Section;
pub use size::{MAX_BODY_BYTES, check_size};

/// A claimed task, as a handler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// The task znode's name, such as `task-0000000042`.
    pub name: String,
    /// What the producer published: type, payload, id and the options it asked for.
    pub envelope: Envelope,
    /// The zxid of the claim (the lease znode's `czxid`): it grows with every claim of this
    /// task, across the whole ensemble and across redrives. Downstream systems that remember
    /// the highest token they saw for a task id can reject a write from a consumer whose lease
    /// has passed on.
    pub fencing_token: i64,
    /// Where the handler reports how far it is: the holder's next lease extension writes the
    /// latest report (see [`crate::progress`]).
    pub progress: Progress,
    /// Where a resumable handler asks for its steps, sleeps and waits (see
    /// [`crate::resume`]).
    pub steps: crate::resume::Steps,
}

impl Task {
    /// This claim's number: 1 on the first claim.
    pub fn attempt(&self) -> u32 {
        self.envelope.attempts
    }
}
