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
//!
//! # How it works
//!
//! A resumable handler asks for its work through `task.steps` (`resume/steps.rs`); what it did is
//! the task's record (`resume/record.rs`): each step with its result, each sleep, wait and patch,
//! in the order asked, and a checkpoint of its own. The envelope keeps the record's tail as
//! `resume`; the entries before it are kept in step znodes of their own, `steps/<id>/<position>`
//! (`resume/store.rs`, `queue/step_store.rs`), so that a step's write does not grow with the run.
//! The core knows the record only as bytes of the envelope and as a handle on the task:
//!
//! - **A step's write is an extension.** `Steps::step` runs new work, appends its entry and asks
//!   the holder for a write; the extender (`process/hold.rs`) wakes at once and sends
//!   `Queue::extend`, whose multi-op sets the task's body with the record's tail at the task's
//!   version (instead of only checking it) beside the lease at the lease's version, and creates
//!   the step znode that stores the entries new since the last write (`Unwritten`: every entry
//!   but a sleep or wait last, which `status`, a redrive's "back early" and a signal's wake read
//!   from the envelope). So a step costs one write, which also extends the lease (the timer
//!   restarts from it), and a stale holder's checkpoint fails on the versions like any of its
//!   writes. Its bytes are the envelope without the earlier entries (its `stored` count grows by
//!   digits), the lease, and one step znode of that step's entry: the same at the 10th step as
//!   at the 10 000th (`make bench`, row `resumable_steps`). A reply lost after it landed is
//!   recognised by reading the task back (`record_landed`). A release writes the record the same
//!   way; a completion or burial carries the envelope as last written.
//! - **Replay.** A recorded entry answers its ask at once; an ask past the end is new work; any
//!   other ask where an entry stands is a non-deterministic resume: the handle remembers it, and the
//!   run buries the task with that reason whatever the handler returned. A run that claims a task
//!   whose record stored entries reads them back once, before its handler runs
//!   (`Run::read_back`: one listing and one pipelined read per step znode, so O(steps) at each
//!   claim); the steps that run then stay in the handle's memory, never read again in that run.
//!   Step znodes that do not read back whole bury the task saying so; a failed read retries it.
//!   What `CHECKPOINT_MAX_BYTES` caps is the envelope's part with the entries not yet stored (one
//!   step's result, a checkpoint), not the number of steps.
//! - **Step znodes end with their task.** A completion deletes the task's step folder once it
//!   landed (`Queue::drop_steps`, from the completing run: one multi-op of up to
//!   `DROP_PER_MULTI` deletes, several for more); a dead letter keeps it (a redrive resumes from
//!   it) and a purge deletes it. A run that dies between a completion and that delete leaves the
//!   folder behind, marked `ended` by the completion itself: the reaper sweeps it
//!   (`features/steps/`).
//! - **Call order** (`resume/order.rs`). New work takes its position when it is asked for, not
//!   when it finishes: steps awaited together are asked for in call order and replayed in call
//!   order, so they are recorded so. A step that finishes before one asked earlier holds its entry
//!   until that one's is in (then both go to the record, in one write); a step given up unfinished
//!   (its work failed, its future dropped) takes the positions after it along, unrecorded in this
//!   run, so no entry moves to a position a replay asks another step for. A sleep or wait so taken
//!   along can no longer be recorded: the task is buried saying so.
//! - **A swallowed suspension is loud.** After a sleep or wait suspended the handler, a further
//!   ask, or an end other than `HandlerError::Suspended`, means the handler swallowed the error
//!   and would skip the sleep: the handle remembers that as it does a non-deterministic resume, and
//!   the task is buried with the reason. (`sleep`, `wait_for`, `stop` and `suspend_with` are
//!   `#[must_use]` too, for what the compiler can see.)
//! - **Suspend** (`process/suspend.rs`, transition `suspend`). `sleep`, `wait_for` and a stop end
//!   the handler with `HandlerError::Suspended`; the run gives the task back
//!   (`Queue::release`, the release with the writes a feature adds) with its record and no
//!   attempt counted: in place (stopping), under `delayed/` until the sleep's end (`sleeping`), or
//!   for a wait, after reading each key (`Signals::look`), either in place with a kept signal
//!   consumed in the same multi-op, or under `delayed/` until its timeout (`awaiting_signal`)
//!   registered under each key with a `check` of the key's version as read. A stopped task is
//!   given back to another run: the run that gave it back keeps its name in memory
//!   (`Run::resumes_elsewhere`) and its passes treat it as held by someone else (a grouped one
//!   holds its group back). Nothing is written for it, so a plain task pays nothing and no other
//!   consumer has anything to read: another consumer's run, or the next invocation, claims it at
//!   once, and a worker's next drain does. A worker's drain lasts while tasks keep coming, so in one
//!   that goes on the name is kept for `WORKER_IDLE_CHECK` (5 s, what an idle worker waits
//!   between drains), then the task is claimed again: never starved, never in a tight loop. (A
//!   not-before time written with the release would hold it back from concurrent consumers too,
//!   and cost a move under `delayed/`.) A signal raises that
//!   version, so a wait registered as a signal lands fails and reads again: a signal sent before
//!   or during a wait is never lost to it. When the keys cannot be read (a dropped link), or
//!   signals keep racing the registration, the wait is taken back (`Steps::retract_wait`) with
//!   the checkpoint a webhook's `202` gave with it, and the task goes back in place: its next run
//!   asks for the wait again. A wait the task's record was in already (the task back before it
//!   ended, suspended in it again without its handler) is not taken back: the task goes back in
//!   place with it, and its next run suspends it in it again.
//! - **Wake** (`queue/signals.rs`, transition `wake`). A signal (`Signals::signal`: a create and
//!   the key's `setData` in one multi-op) is delivered oldest signal to oldest registration: one
//!   multi-op deletes the waiting node at the version read, creates the task at its lane's tail
//!   with the wait's outcome in its record, and deletes the signal and the task's registrations.
//!   Each signaller delivers its own signal and no other: to the registration whose turn among the
//!   key's registrations is its signal's turn among the key's signals, or it keeps it when there is
//!   none. Racing signallers so take different tasks, and each answers with the task that got its
//!   own payload (one that delivered every signal it saw answered with another's task, and a
//!   signaller whose signal another had delivered answered `kept` while tasks waited). A wait that
//!   takes a kept signal leaves a note (`d-<sequence>`, the task's name) in the same multi-op: a
//!   signaller that finds its signal gone reads who took it, and deletes the note.
//!   Two deliverers, a promotion at the timeout, or a consumer's wait cannot both take one signal
//!   or one task: each deletes what the other needs. A registration whose task no longer waits
//!   is stale and removed by whoever meets it.
//! - **Back early.** A task claimed while its record is in a sleep whose end, or a wait whose
//!   timeout, has not come by the run's clock (a cancelled sleeper or waiter redriven from the
//!   dead letters) is suspended in it again without running its handler (`Steps::suspended_until`,
//!   then the same `suspend`): under `delayed/` until the sleep's own end, or through the wait's
//!   look at its keys, which takes a signal kept meanwhile or registers it again until its own
//!   timeout. No sleep or wait ends early, whatever brought the task back.
//! - **Timeout.** A waiting task's due time is its timeout, so `promote_due` (every run, the
//!   worker, the reaper) brings it back then, as any delay; its record's wait has no outcome, which
//!   the resumed handler reads as timed out. No wait holds a task for good.
//! - **Stopping.** `Steps::stopping` turns true at the run's stop time (`deadline - margin`, when
//!   it stops claiming), on the stop signal, when the lease is lost, and when the run's restraints
//!   (read again every half second, only while a resumable handler runs) say the task was
//!   cancelled or its type or the queue paused; a new step then suspends instead of starting.
//!   A plain task pays for the handle: built at its claim, bound when its handler starts, and
//!   looked at by each extension (no I/O).
//! - **The reaper** (`Signals::sweep`, a sample of 256 keys a run) deletes signals and empty keys
//!   kept past `SIGNAL_KEEP_MS`, removes stale registrations, delivers what a signaller that
//!   stopped between its writes left (a signal older than `SIGNALLER_GRACE_MS`, a minute: until
//!   then it is its signaller's to deliver), and deletes notes that old.
//!
//! # Costs
//!
//! Writes per task: one per step (riding on the extension); a sleep or a wait is its release (one
//! multi-op, and one read per key for a wait); a wake is one multi-op plus three reads. The HTTP
//! sink maps a webhook's `202` with a checkpoint onto the same suspension (`Steps::suspend_with`).

mod order;
pub mod record;
mod signal_key;
pub mod steps;
pub mod store;

pub use record::{Entry, Mismatch, Record, WaitOutcome};
pub use signal_key::{MAX_SIGNAL_KEY_NAME_BYTES, check_signal_key};
pub use steps::{Binding, MAX_WAIT_KEYS, Steps, Suspend, Then};
