//! Resumable tasks: steps that run once, durable sleeps, and waits for signals, so that work
//! longer than one invocation finishes across many.
//!
//! - [`record`]: what a task has done so far, kept in its envelope (`resume`), and its replay.
//! - [`store`]: the record's entries the envelope no longer keeps, in step znodes
//!   (`steps/<id>/`), so that a step's write does not grow with the run.
//! - [`steps`]: [`Steps`], the handle a handler asks for its work through.
//! - `order`: new work recorded in the order it was asked for (steps awaited together).
//! - `signal_key`: what a signal's key may be ([`check_signal_key`]).
//!
//! The holder's side is in the core: an extension writes the record
//! ([`crate::Queue::extend`]), a release carries it ([`crate::Queue::release`]), and a
//! run answers a suspended handler ([`crate::process`]). Signals are the
//! [`crate::queue::Signals`] recipe.

mod order;
pub mod record;
mod signal_key;
pub mod steps;
pub mod store;

pub use record::{Entry, Mismatch, Record, WaitOutcome};
pub use signal_key::{MAX_SIGNAL_KEY_NAME_BYTES, check_signal_key};
pub use steps::{Binding, MAX_WAIT_KEYS, Steps, Suspend, Then};
