//! Holding a task while its handler runs: the lease is extended beside the handler, never in
//! front of it, and the handler is cancelled once its lease can no longer be vouched for.
//!
//! # Extensions
//!
//! An extender runs next to the handler (both are polled by one `select!`, so a slow answer
//! from ZooKeeper never holds the handler up). It extends a third of the lease timeout after
//! the last extension was *sent*, so missed ticks never come in a burst. It is sent through
//! the holder's one retry loop ([`Run::send`]): after a dropped link it is sent again after a
//! twelfth of the timeout; a session that ends is replaced (when the run has a
//! [`Session`](crate::Session)) and the extension sent on the new one: leases are persistent
//! znodes, so they outlive sessions. A failure the retry policy gives up on (not a link or
//! session fault) ends the handler as an unvouched lease does.
//!
//! # Vouching
//!
//! The holder can vouch for its lease until [`lease::vouch_window`] (four fifths of the
//! timeout) after the last extension that got through was sent: the server stamped it no
//! earlier, so no reaper can free the lease before then, even with a leader's clock a fifth of
//! the timeout off. When that time comes without an extension getting through, the handler is
//! dropped (cancelled) and nothing of it is committed: the task is left to the reaper, and its
//! next holder's fencing token is higher than any request this one sent.

use std::sync::Mutex;

use tokio::time::Instant;

use super::send::Sent;
use super::{Run, stopped};
use crate::error::Result;
use crate::handler::{Delivered, Handler, HandlerError};
use crate::lease;
use crate::queue::{Lease, Queue, Settled};
use crate::resume::Binding;

/// How a handler's run ended.
pub(super) enum HandlerEnd {
    Finished(Result<Delivered, HandlerError>),
    /// Stopped unfinished: at the deadline (`deadline`), or when the stop signal's grace ran
    /// out.
    Interrupted {
        deadline: bool,
    },
    /// The lease passed on while the handler ran.
    LeaseLost,
    /// No extension got through in time: the handler was cancelled.
    Unvouched,
}

impl<H: Handler> Run<'_, H> {
    /// Runs the handler of `lease` (claimed at `claimed_at`) with the extender beside it, until
    /// it finishes, the lease passes on or can no longer be vouched for, the deadline nears, or
    /// the stop signal's grace runs out. `lease` takes the versions of the last extension.
    pub(super) async fn run_handler(
        &self,
        lease: &mut Lease,
        claimed_at: Instant,
    ) -> Result<HandlerEnd> {
        let timeout = self.queue().settings().lease_timeout;
        let vouched = Mutex::new(claimed_at + lease::vouch_window(timeout));
        // A claim whose answer came after the window (a frozen process) runs nothing.
        if Instant::now() >= *vouched.lock().expect("vouch lock") {
            return Ok(self.unvouched(&Mutex::new(lease.clone())));
        }
        let held = Mutex::new(lease.clone());
        let task = lease.task.clone();
        let stop_at = self.options.deadline - self.options.margin / 2;
        let queue = self.queue();
        let settings = queue.settings();
        task.steps.bind(Binding {
            now: self.now,
            stop_at: self.options.deadline - self.options.margin,
            max_bytes: settings.checkpoint_max_bytes,
            version: settings.handler_version.clone(),
        });
        let end = {
            let mut work = std::pin::pin!(self.handler.handle_delivered(&task));
            // The handler is polled only while its lease is vouched for, checked against the
            // clock itself at every poll: a timer may fire late after a pause (a frozen
            // process), the clock never does.
            let guarded = std::future::poll_fn(|cx| {
                if Instant::now() >= *vouched.lock().expect("vouch lock") {
                    return std::task::Poll::Ready(None);
                }
                work.as_mut().poll(cx).map(Some)
            });
            let extender = self.keep_extended(&held, &vouched, claimed_at);
            let restrained = self.watch_restraints(&task);
            tokio::pin!(guarded, extender, restrained);
            let mut grace: Option<Instant> = None;
            let mut asked_to_stop = false;
            loop {
                let until = grace.map_or(stop_at, |g| g.min(stop_at));
                // The extender first: after a pause (a frozen process), a lease that can no longer
                // be vouched for ends the handler before it takes another step.
                tokio::select! {
                    biased;
                    end = &mut extender => break end,
                    result = &mut guarded => match result {
                        Some(result) => break HandlerEnd::Finished(result),
                        None => break self.unvouched(&held),
                    },
                    _ = tokio::time::sleep_until(until) => {
                        break HandlerEnd::Interrupted { deadline: until == stop_at };
                    }
                    _ = stopped(self.stop.clone()), if grace.is_none() => {
                        grace = Some(Instant::now() + self.options.margin);
                        task.steps.set_stopping();
                    }
                    () = &mut restrained, if !asked_to_stop => {
                        asked_to_stop = true;
                        task.steps.set_stopping();
                    }
                }
            }
        };
        if !matches!(end, HandlerEnd::Finished(_)) {
            task.steps.lost();
        }
        *lease = held.into_inner().expect("lease lock");
        Ok(end)
    }

    /// Extends the lease in `held` until it passes on or can no longer be vouched for; see the
    /// module documentation. Never returns while the lease is ours and vouched for.
    /// `vouched` holds the instant until which the holder can vouch for the lease.
    async fn keep_extended(
        &self,
        held: &Mutex<Lease>,
        vouched: &Mutex<Instant>,
        claimed_at: Instant,
    ) -> HandlerEnd {
        let timeout = self.queue().settings().lease_timeout;
        let (every, window) = (
            lease::extend_interval(timeout),
            lease::vouch_window(timeout),
        );
        let mut vouched_until = claimed_at + window;
        let mut next = claimed_at + every;
        let steps = held.lock().expect("lease lock").task.steps.clone();
        loop {
            // A resumable handler's step asks for its record's write: the next extension,
            // sent at once.
            tokio::select! {
                _ = tokio::time::sleep_until(next.min(vouched_until)) => {}
                _ = steps.write_asked() => {}
            }
            if Instant::now() >= vouched_until {
                return self.unvouched(held);
            }
            // The window counts from the first try: the server stamps no try earlier.
            let sent = Instant::now();
            let lease = held.lock().expect("lease lock").clone();
            let extend = |queue: Queue| {
                let mut lease = lease.clone();
                async move { Ok((queue.extend(&mut lease).await?, lease)) }
            };
            match self.send(vouched_until, every / 4, extend).await {
                Ok(Sent::Answered((Settled::Done, lease), _)) => {
                    *held.lock().expect("lease lock") = lease;
                    vouched_until = sent + window;
                    *vouched.lock().expect("vouch lock") = vouched_until;
                    next = sent + every;
                }
                Ok(Sent::Answered((_, lease), _)) => {
                    tracing::warn!(task = %lease.task.name, fencing_token = lease.task.fencing_token, "lease lost while running");
                    return HandlerEnd::LeaseLost;
                }
                Ok(Sent::Unsettled) => return self.unvouched(held),
                // Not a link or session fault: no extension will get through.
                Err(error) => {
                    tracing::warn!(task = %lease.task.name, %error, "lease extension failed for good");
                    return self.unvouched(held);
                }
            }
        }
    }

    /// Resolves once a resumable handler's task is cancelled, or its type (or the queue)
    /// paused, as the run's restraints (read again every half second while a resumable
    /// handler runs) say: the handler's [`Steps::stopping`](crate::Steps::stopping) turns
    /// true, and it saves and returns. Never resolves for a handler that is not resumable.
    async fn watch_restraints(&self, task: &crate::Task) {
        // No timer for a handler that never asks for a step.
        task.steps.resumable().await;
        loop {
            tokio::time::sleep(super::RESTRAINTS_FRESH_FOR).await;
            let restraints = self.fresh_restraints().await;
            let envelope = &task.envelope;
            if (self.queue().features()).stops_running(envelope, &restraints.found) {
                tracing::info!(task = %task.name, "cancelled or paused while running: the handler is asked to stop");
                return;
            }
        }
    }

    fn unvouched(&self, held: &Mutex<Lease>) -> HandlerEnd {
        let lease = held.lock().expect("lease lock");
        tracing::warn!(task = %lease.task.name, fencing_token = lease.task.fencing_token,
            "no extension got through: the lease can no longer be vouched for; handler cancelled");
        HandlerEnd::Unvouched
    }
}
