//! Bulk publishing in multi-ops: a window of a bulk publish goes out in runs, each run one
//! multi-op where it can be. A window of at least [`PACK_FROM`] items packs each stretch of
//! plain and keyed envelopes (no debounce, batch or parents) into runs of up to [`PACKED_RUN`]
//! that fit one request; a smaller window keeps one create per plain envelope and packs only
//! its runs of keyed envelopes (up to [`KEYED_RUN`]). A run of several goes out as one
//! all-or-nothing batch (`AllOrNothing::try_batch`: one multi-read of its keys, when it has
//! any; one multi-op for its tasks and keys; one multi-op naming the keys). Its multi-op fails
//! whole when one operation fails: a key taken since it was read is read again and that item
//! answered with the task that has it, and the others are sent again without it, so none is
//! lost. A run the batch refuses, or whose keys other producers kept taking through its tries,
//! goes one by one, as every other envelope does. No run is more than one request carries: a
//! task over [`crate::task::MAX_BODY_BYTES`] is refused before anything is sent, so no
//! operation of a run can fail for its size.
//!
//! Publishes of one debounce key go in order: a window is cut where a key comes again. Answers
//! are handed on as they come; a run whose connection is lost under it is left in doubt, for
//! the publish to settle (`landed`), tagged with the loss it failed on; a run the server
//! refused (throttled) is left unsent.

use futures::StreamExt;
use futures::stream::FuturesOrdered;

use super::Queue;
use super::idempotency_keys::{KeyData, KeyedWrite, Published};
use super::landed::{Floors, Losses};
use super::ops::{Multi, Op, Part};
use super::outage::{in_doubt, refused, retriable};
use crate::error::{Error, Result};
use crate::task::Envelope;

/// Keyed envelopes published together in one batch, at most, in a window smaller than
/// [`PACK_FROM`].
pub(super) const KEYED_RUN: usize = 32;

/// Envelopes packed into one multi-op, at most, in a window of at least [`PACK_FROM`] items.
/// For `make bench`'s publish row (`tests/bench/publish.rs`): ZooKeeper applies a multi-op of
/// many creates at a fraction of their cost one by one.
pub(super) const PACKED_RUN: usize = 32;

/// Windows of this many items or more pack their plain creates into multi-ops; smaller ones
/// send one create per plain envelope, as a publish of a few tasks gains nothing from packing.
pub(super) const PACK_FROM: usize = 512;

/// What sending a window came to (see [`Queue::send_window`]).
#[derive(Debug, Default)]
pub(super) struct Sent {
    /// Its lanes' tails (and its debounce keys' nodes) as read before its writes, when that
    /// read was answered.
    pub(super) floors: Option<Floors>,
    /// Items (by index in the window) sent whose answers were lost with the connection.
    pub(super) doubts: Vec<usize>,
    /// The connection loss each of `doubts` failed on ([`Losses`]).
    pub(super) losses: Vec<u64>,
    /// Items not sent: the window's segments after the one the connection was lost in, and
    /// runs the server refused (throttled) before applying anything of them.
    pub(super) unsent: Vec<usize>,
    /// The failure that left items in doubt or unsent.
    pub(super) lost: Option<Error>,
}

impl Queue {
    /// Publishes `window` (pipelined, in order): runs of keyed envelopes as batches, the
    /// others one by one; a part of it after a repeated debounce key once the part before it
    /// has landed. Each item's answer goes to `answered` (with its index in the window) as
    /// its run is answered, in order. The tails of the window's lanes are read before its
    /// first create ([`Sent::floors`]), so that what landed can be found if answers are lost:
    /// pipelined with the creates when `known` has a floor for each of its lanes already (one
    /// read before, which the pipelined one may only raise) and it has no debounced item, else
    /// first, on their own.
    ///
    /// A run whose connection is lost under it leaves its items in doubt (tagged with the loss
    /// it failed on), and the segments after it unsent ([`Sent`]); a run the server refused
    /// before it wrote anything (throttled) is unsent; any other failure is returned once the
    /// window's requests are answered.
    pub(super) async fn send_window(
        &self,
        window: &[Envelope],
        known: &Floors,
        answered: &mut (impl FnMut(usize, Published) + Send),
    ) -> Result<Sent> {
        let lanes: Vec<_> = window.iter().map(Envelope::lane).collect();
        // Watches the session from before the window's first request on.
        let mut losses = Losses::new(self);
        let unsent = |e: Error| {
            // Nothing was sent: any failure a publish rides out leaves the window unsent.
            if !retriable(&e, self.session_over()) {
                return Err(e);
            }
            // Nothing of the window was sent.
            Ok(Sent {
                unsent: (0..window.len()).collect(),
                lost: Some(e),
                ..Sent::default()
            })
        };
        if let Err(e) = self.key_lanes().ensure_lanes(&lanes).await {
            return unsent(e);
        }
        let (mut pipelined, mut first) = (None, None);
        if known.pipelinable(window) {
            pipelined = Some(self.in_doubt().read_floors(window));
        } else {
            match self.in_doubt().read_floors(window).await {
                Ok(floors) => first = Some(floors),
                Err(e) => return unsent(e),
            }
        }
        let mut sent = Sent::default();
        let mut failed = None;
        let mut at = 0;
        for segment in debounce_segments(window) {
            let first = at;
            at += segment.len();
            if sent.lost.is_some() || failed.is_some() {
                sent.unsent.extend(first..at);
                continue;
            }
            let mut start = first;
            let mut runs = FuturesOrdered::new();
            for run in self.runs(segment, window.len() >= PACK_FROM) {
                let from = start;
                start += run.len();
                runs.push_back(async move { (from, run.len(), self.publish_run(run).await) });
            }
            while let Some((from, len, result)) = runs.next().await {
                match result {
                    Ok(published) => {
                        for (i, one) in published.into_iter().enumerate() {
                            answered(from + i, one);
                        }
                    }
                    Err(e) if refused(&e) && !wrote_before(&e, &segment[from - first..][..len]) => {
                        sent.unsent.extend(from..from + len);
                        sent.lost.get_or_insert(e);
                    }
                    Err(e) if in_doubt(&e, self.session_over()) || refused(&e) => {
                        let loss = losses.tag(&e);
                        sent.doubts.extend(from..from + len);
                        sent.losses.extend(std::iter::repeat_n(loss, len));
                        sent.lost.get_or_insert(e);
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        sent.floors = match pipelined {
            Some(read) => read.await.ok(),
            None => first,
        };
        match failed {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }

    async fn publish_run(&self, run: &[Envelope]) -> Result<Vec<Published>> {
        if let Some(batch) = run[0].batch.as_deref() {
            for envelope in run {
                (envelope.check_publishable())
                    .map_err(|problem| Error::Unpublishable { item: 1, problem })?;
            }
            return self.batches().publish_members(run, batch).await;
        }
        // Due times are set already (`publish_all`). Keys another producer keeps taking
        // meanwhile send the run one by one, as before.
        if run.len() > 1
            && self.all_or_nothing().check_batch(run).is_ok()
            && let Some(published) = self.all_or_nothing().try_batch(run).await?
        {
            return Ok(published);
        }
        let each = run.iter().map(|e| self.idempotency_keys().publish_one(e));
        futures::future::join_all(each).await.into_iter().collect()
    }

    /// Writes the names of the tasks a publish just created into their keys, in one multi-op;
    /// key by key when that fails (a key may have moved on already: its task completed).
    pub(super) async fn name_keys(&self, named: &[(&KeyedWrite, &str)]) -> Result<()> {
        if let [(write, task)] = named {
            return self.idempotency_keys().name_key(write, task).await;
        }
        let datas: Vec<Vec<u8>> = named
            .iter()
            .map(|(write, task)| serde_json::to_vec(&KeyData::named(write, task)))
            .collect::<std::result::Result<_, _>>()?;
        let mut multi = Multi::new();
        for ((write, _), data) in named.iter().zip(&datas) {
            multi.push(Part::IdempotencyKey, Op::Set(&write.key_path, data, 0));
        }
        if self.commit("name keys", &multi).await?.is_ok() {
            return Ok(());
        }
        for (write, task) in named {
            self.idempotency_keys().name_key(write, task).await?;
        }
        Ok(())
    }
}

/// Whether a publish of `run` that failed with `error` (a request the server refused) may
/// have written some of it before: a batch's members go in chunks, one multi-op after another,
/// and a keyed run names its keys after its multi-op landed.
pub(super) fn wrote_before(error: &Error, run: &[Envelope]) -> bool {
    run.iter().any(|e| e.batch.is_some())
        || matches!(
            error,
            Error::Zk {
                op: "name keys",
                ..
            }
        )
}

/// `window` cut where a debounce key comes again: each segment is published pipelined after
/// the one before, so that publishes of one key land in order (the last one's envelope is the
/// one left pending, and each replaced the one before it). Most windows are one segment.
fn debounce_segments(window: &[Envelope]) -> Vec<&[Envelope]> {
    let mut segments = Vec::new();
    let mut keys = std::collections::HashSet::new();
    let mut start = 0;
    for (i, envelope) in window.iter().enumerate() {
        let Some(debounce) = &envelope.debounce else {
            continue;
        };
        if !keys.insert(debounce.key.as_str()) {
            segments.push(&window[start..i]);
            start = i;
            keys.clear();
            keys.insert(debounce.key.as_str());
        }
    }
    segments.push(&window[start..]);
    segments
}

impl Queue {
    /// `window` cut into runs: consecutive members of one batch; when `packed`, consecutive
    /// envelopes without debounce, batch or parents, up to [`PACKED_RUN`] and one request's
    /// bytes; else consecutive keyed envelopes (not debounced), up to [`KEYED_RUN`]; every
    /// other envelope alone.
    fn runs<'w>(&self, window: &'w [Envelope], packed: bool) -> Vec<&'w [Envelope]> {
        let all = self.all_or_nothing();
        let mut runs = Vec::new();
        let mut start = 0;
        while start < window.len() {
            let first = &window[start];
            let mut end = start + 1;
            if first.batch.is_some() {
                // A batch's members go as one run (written one chunk after another: they
                // share the batch's znode).
                while end < window.len() && window[end].batch == first.batch {
                    end += 1;
                }
            } else if packed && packable(first) {
                let mut bytes = all.run_bytes(first);
                while end < window.len() && end - start < PACKED_RUN && packable(&window[end]) {
                    bytes = bytes.saturating_add(all.run_bytes(&window[end]));
                    if !all.fits(bytes) {
                        break;
                    }
                    end += 1;
                }
            } else if keyed(first) {
                while end < window.len() && end - start < KEYED_RUN && keyed(&window[end]) {
                    end += 1;
                }
            }
            runs.push(&window[start..end]);
            start = end;
        }
        runs
    }
}

/// Whether `envelope` is published with an idempotency key and nothing that waits (debounce).
fn keyed(envelope: &Envelope) -> bool {
    envelope.idempotency_key.is_some() && envelope.debounce.is_none()
}

/// Whether `envelope` can share a multi-op with its neighbours in a packed window: a task
/// created in its lane (with its key, when it has one) and nothing else.
fn packable(envelope: &Envelope) -> bool {
    envelope.debounce.is_none() && envelope.batch.is_none() && envelope.after.is_empty()
}
