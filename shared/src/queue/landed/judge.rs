//! Judging what was read after a lost connection (see `landed`): the fate of each item in
//! doubt, and the names of an all-or-nothing batch that landed. Pure: nothing here reads.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::super::idempotency_keys::Published;
use super::{Fate, Look, Side, Tail};
use crate::lane::Lane;
use crate::layout;
use crate::task::{Envelope, StandsFor};

impl Look {
    /// The fate of each of `doubts` from what was read (`losses`: the loss each failed on).
    pub(super) fn fates(&self, doubts: &[&Envelope], losses: &[u64]) -> Vec<Fate> {
        let empty = Tail::default();
        let mut fates = Vec::with_capacity(doubts.len());
        // Items not found that a resend cannot duplicate: never made unknown by gaps.
        let mut harmless = vec![false; doubts.len()];
        for (i, envelope) in doubts.iter().enumerate() {
            let id = &envelope.id;
            let tail = self.tails.get(&envelope.lane()).unwrap_or(&empty);
            let place = tail.places.get(id);
            let landed = |task: &String| {
                Fate::Landed(Published::Created {
                    id: id.clone(),
                    task: task.clone(),
                })
            };
            let debounced = || debounced_answer(envelope);
            let fate = if let Some((_, task)) = tail.found.get(id) {
                landed(task)
            } else if let Some(task) = self.elsewhere.get(id) {
                landed(task)
            } else {
                let key = envelope.debounce.as_ref().map(|d| d.key.as_str());
                let before = key.and_then(|key| self.marks.get(key));
                match (&self.sides[i], place) {
                    (Side::Pending(Some((pending, _))), _) if pending == id => {
                        Fate::Landed(debounced())
                    }
                    // The key was not written since before the item was sent: it never landed,
                    // and the publish it would have replaced is older.
                    (Side::Pending(Some((_, mzxid))), _) if before == Some(&Some(*mzxid)) => {
                        harmless[i] = true;
                        Fate::NotLanded
                    }
                    // Written since: by this item and a later publish, or by a publish as late.
                    (Side::Pending(Some((other, _))), _) => Fate::Replaced {
                        published: debounced(),
                        by: other.clone(),
                    },
                    // Its place was made with it: it started its key (fired or withdrawn since).
                    (Side::Pending(None), Some(_)) => Fate::Landed(debounced()),
                    // A grouped publish of a key that another started: once fired, it is in
                    // that one's place, which may be below the floor.
                    (Side::Pending(None), None) if envelope.group.is_some() => Fate::Unknown(
                        "its answer was lost with the connection, its debounce key holds \
                         nothing now and it is not in its lane from where the publish started: \
                         it may have fired into its group's place, made by an earlier publish \
                         of its key, and run already"
                            .into(),
                    ),
                    (Side::Child(Some(found)), _) => Fate::Landed(found.clone()),
                    (Side::Child(None), Some(_)) => Fate::Landed(Published::Blocked {
                        id: id.clone(),
                        waiting_on: envelope.after.clone(),
                    }),
                    (Side::Key(Some(key)), _) if key.id == *id => match &key.task {
                        Some(task) => landed(task),
                        None => Fate::Unnamed(
                            "its answer was lost with the connection; its idempotency key names \
                             it, so it was published, but the key was never named with its task \
                             and the task left its lane before it could be found: its name \
                             cannot be told"
                                .into(),
                        ),
                    },
                    (Side::Key(Some(_)), _) => {
                        // Sent again, it is answered with the task that has the key.
                        harmless[i] = true;
                        Fate::NotLanded
                    }
                    // A place for a task that went to the dead letters before its turn: its
                    // letter has its name.
                    (_, Some((name, StandsFor::Dead { letter, .. }))) => {
                        let task = letter
                            .split_once(layout::DEAD_NAME_SUFFIX)
                            .map_or(letter.as_str(), |(task, _)| task);
                        let task = match task.is_empty() {
                            true => name.clone(),
                            false => task.to_string(),
                        };
                        landed(&task)
                    }
                    _ => Fate::NotLanded,
                }
            };
            fates.push(fate);
        }
        for (lane, gaps) in &self.unexplained {
            let in_lane: Vec<usize> = (0..doubts.len())
                .filter(|&i| doubts[i].lane() == *lane && !harmless[i])
                .collect();
            let found = self.tails.get(lane).map(|t| &t.found);
            let empty = HashMap::new();
            let found = found.unwrap_or(&empty);
            judge_open(doubts, &mut fates, &in_lane, found, gaps, losses);
        }
        fates
    }

    /// For a batch that landed (one multi-op: each lane's creates took consecutive numbers, in
    /// the batch's order), the names of the items not found whose numbers can be worked out:
    /// in a lane where every item of the batch makes one plain create, counted from an item
    /// found there at the number it landed at, or, none found, when the numbers missing from
    /// the lane that nothing explains are exactly as many as its items, and consecutive.
    pub(super) fn worked_out(&self, batch: &[&Envelope], fates: &[Fate]) -> Vec<Option<String>> {
        let mut names = vec![None; batch.len()];
        let mut lanes: BTreeMap<Lane, Vec<usize>> = BTreeMap::new();
        for (i, envelope) in batch.iter().enumerate() {
            lanes.entry(envelope.lane()).or_default().push(i);
        }
        for (lane, items) in lanes {
            if !items.iter().all(|&i| simple(batch[i])) {
                continue;
            }
            let Some(tail) = self.tails.get(&lane) else {
                continue;
            };
            let missing: HashSet<i64> = tail.missing.iter().map(|(n, _)| *n).collect();
            let anchor = items.iter().enumerate().find_map(|(k, &i)| {
                let (number, _) = tail.found.get(&batch[i].id)?;
                Some((k as i64, (*number)?))
            });
            let numbers: Vec<i64> = match anchor {
                Some((k, at)) => (0..items.len() as i64).map(|j| at + j - k).collect(),
                None => {
                    let gaps = self.unexplained.get(&lane).cloned().unwrap_or_default();
                    let consecutive = gaps.windows(2).all(|w| w[1].0 == w[0].0 + 1);
                    if gaps.len() != items.len() || !consecutive {
                        continue;
                    }
                    gaps.iter().map(|(n, _)| *n).collect()
                }
            };
            for (&i, number) in items.iter().zip(numbers) {
                if !fates[i].landed() && missing.contains(&number) {
                    names[i] = Some(layout::lane_task_name(&lane, number));
                }
            }
        }
        names
    }
}

/// The fates of the items of one lane (`in_lane`: their indices in `doubts`, in the order they
/// were sent) that were not found, when the lane lost tasks nothing explains (`gaps`: their
/// numbers and names, in order) between the floor and the tail; `found`: the numbers of the
/// items that were found (where they landed), by id; `losses`: the connection loss each item
/// failed on.
///
/// ZooKeeper applies the requests a connection carries in the order they were sent, so the
/// plain creates of one lane that failed on one loss and landed did so in their order, at
/// rising numbers: a run of such items not found, between found ones at `lo` and `hi`, all
/// landed (at numbers in between, gaps since: named when there are as many gaps as items);
/// one after the last found landed only in part, a first few, each at a gap past `lo`: as
/// many as there are such gaps are unknown, the rest did not land. Items of different losses
/// tell nothing of each other (a request sent after a loss goes on the next connection). Any
/// other item not found (keyed, debounced, with `after`, a batch member) may be any gap:
/// unknown.
fn judge_open(
    doubts: &[&Envelope],
    fates: &mut [Fate],
    in_lane: &[usize],
    found: &HashMap<String, (Option<i64>, String)>,
    gaps: &[(i64, String)],
    losses: &[u64],
) {
    if gaps.is_empty() {
        return;
    }
    let open = |fates: &[Fate], i: usize| matches!(fates[i], Fate::NotLanded);
    for &i in in_lane {
        if open(fates, i) && !plain(doubts[i]) {
            fates[i] = Fate::Unknown(gone(gaps));
        }
    }
    let mut by_loss: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for &i in in_lane.iter().filter(|&&i| plain(doubts[i])) {
        by_loss.entry(losses[i]).or_default().push(i);
    }
    for items in by_loss.values() {
        let mut lo = i64::MIN;
        let mut run: Vec<usize> = Vec::new();
        for &i in items {
            if open(fates, i) {
                run.push(i);
                continue;
            }
            // Landed where it is no more (found elsewhere, or back after an attempt): its number
            // is not known, and the run goes on past it.
            let Some(&(Some(hi), _)) = found.get(&doubts[i].id) else {
                continue;
            };
            let between: Vec<&(i64, String)> =
                gaps.iter().filter(|(n, _)| lo < *n && *n < hi).collect();
            for (k, &j) in run.iter().enumerate() {
                fates[j] = match between.len() == run.len() {
                    true => Fate::Landed(Published::Created {
                        id: doubts[j].id.clone(),
                        task: between[k].1.clone(),
                    }),
                    false => Fate::Unknown(format!(
                        "it landed (a line sent after it did) and left its lane before it could \
                         be found, as {} other task(s) did: which task it was cannot be told",
                        between.len().saturating_sub(1)
                    )),
                };
            }
            run.clear();
            lo = hi;
        }
        let after: Vec<(i64, String)> = gaps.iter().filter(|(n, _)| lo < *n).cloned().collect();
        for &j in run.iter().take(after.len()) {
            fates[j] = Fate::Unknown(gone(&after));
        }
    }
}

/// Why an item not found may have landed all the same: its lane lost `gaps` meanwhile.
fn gone(gaps: &[(i64, String)]) -> String {
    let first = gaps.first().map_or("", |(_, name)| name.as_str());
    format!(
        "its answer was lost with the connection, it is not in its lane, and {} task(s) left \
         the lane meanwhile that no completion record, waiting task or dead letter explains \
         ({first} first): one may have been it, run and completed already",
        gaps.len()
    )
}

/// Why an item of a batch that landed has no name: the item with id `found` was found.
pub(super) fn batch_gone(found: &str) -> String {
    format!(
        "its answer was lost with the connection; its batch landed (one multi-op, and its task \
         with id {found} was found), but this item's task left its lane before it could be \
         found: its name cannot be told"
    )
}

/// Whether publishing `envelope` is one create in its lane, sent as the window starts.
fn plain(envelope: &Envelope) -> bool {
    simple(envelope) && envelope.batch.is_none()
}

/// Whether `envelope`, in a batch's multi-op, is one create in its lane.
fn simple(envelope: &Envelope) -> bool {
    envelope.after.is_empty() && envelope.debounce.is_none() && envelope.idempotency_key.is_none()
}

/// The idempotency key a publish of `envelope` takes (a debounced one's key is not taken, nor
/// a child's).
pub(super) fn keyed(envelope: &Envelope) -> Option<&str> {
    match (&envelope.debounce, envelope.after.is_empty()) {
        (None, true) => envelope.idempotency_key.as_deref(),
        _ => None,
    }
}

/// The answer of a debounced item that landed (nothing known of what it replaced).
pub(super) fn debounced_answer(envelope: &Envelope) -> Published {
    Published::Debounced {
        id: envelope.id.clone(),
        key: (envelope.debounce.as_ref()).map_or_else(String::new, |d| d.key.clone()),
        replaced: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelopes(n: usize) -> Vec<Envelope> {
        (0..n)
            .map(|i| Envelope::new("t", serde_json::json!({ "n": i })))
            .collect()
    }

    fn gaps(numbers: &[i64]) -> Vec<(i64, String)> {
        numbers
            .iter()
            .map(|n| (*n, format!("task-{n:010}")))
            .collect()
    }

    /// Items 0..n of one lane with `found` of them found at numbers, the others not; each
    /// failed on the loss `losses` gives it (all on one when empty).
    fn judge_with(
        items: &[Envelope],
        found: &[(usize, i64)],
        missing: &[i64],
        losses: &[u64],
    ) -> Vec<Fate> {
        let doubts: Vec<&Envelope> = items.iter().collect();
        let mut fates: Vec<Fate> = (0..items.len()).map(|_| Fate::NotLanded).collect();
        let mut at = HashMap::new();
        for &(i, n) in found {
            let name = format!("task-{n:010}");
            at.insert(items[i].id.clone(), (Some(n), name.clone()));
            fates[i] = Fate::Landed(Published::Created {
                id: items[i].id.clone(),
                task: name,
            });
        }
        let in_lane: Vec<usize> = (0..items.len()).collect();
        let losses = match losses {
            [] => vec![1; items.len()],
            some => some.to_vec(),
        };
        judge_open(&doubts, &mut fates, &in_lane, &at, &gaps(missing), &losses);
        fates
    }

    fn judge(items: &[Envelope], found: &[(usize, i64)], missing: &[i64]) -> Vec<Fate> {
        judge_with(items, found, missing, &[])
    }

    fn kinds(fates: &[Fate]) -> String {
        (fates.iter())
            .map(|f| match f {
                Fate::Landed(_) => 'L',
                Fate::NotLanded => 'n',
                Fate::Unknown(_) => '?',
                Fate::Unnamed(_) => 'u',
                Fate::Replaced { .. } => 'r',
            })
            .collect()
    }

    #[test]
    fn without_gaps_what_was_not_found_did_not_land() {
        let items = envelopes(4);
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 11)], &[])), "LLnn");
    }

    #[test]
    fn a_line_sent_before_one_that_landed_landed_too_at_the_gap_between() {
        let items = envelopes(4);
        let fates = judge(&items, &[(0, 10), (2, 12)], &[11]);
        assert_eq!(kinds(&fates), "LLLn");
        let Fate::Landed(Published::Created { task, .. }) = &fates[1] else {
            panic!("{fates:?}");
        };
        assert_eq!(task, "task-0000000011");
        // More gaps between than lines: landed, but which task it was cannot be told.
        let fates = judge(&items, &[(0, 10), (2, 14)], &[11, 12]);
        assert_eq!(kinds(&fates), "L?Ln");
        // From the floor on, as well.
        assert_eq!(kinds(&judge(&items, &[(1, 11)], &[10])), "LLnn");
    }

    #[test]
    fn past_the_last_line_found_as_many_lines_as_gaps_are_unknown_and_the_rest_did_not_land() {
        let items = envelopes(5);
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[11])), "L?nnn");
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[11, 13])), "L??nn");
        // A gap below the last line found is no line's after it.
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 12)], &[11])), "LLnnn");
    }

    #[test]
    fn a_keyed_line_not_found_may_be_any_gap() {
        let mut items = envelopes(3);
        items[2].idempotency_key = Some("k".into());
        assert_eq!(kinds(&judge(&items, &[(0, 10), (1, 12)], &[11])), "LL?");
        assert_eq!(kinds(&judge(&items, &[(0, 10)], &[])), "Lnn");
    }

    #[test]
    fn lines_that_failed_on_another_loss_are_not_inferred_from_a_line_found() {
        let items = envelopes(4);
        // Line 1 failed on the first loss, line 2 (found) on a later one: line 1 may never have
        // reached the server, so the gap before line 2 is not its.
        let fates = judge_with(&items, &[(0, 10), (2, 12)], &[11], &[1, 1, 2, 2]);
        assert_eq!(kinds(&fates), "L?Ln", "{fates:?}");
        // And of the lines of its own loss, none found, as many as there are gaps may be them
        // (a first few: those that landed did in order).
        let fates = judge_with(&items, &[(2, 12)], &[11], &[1, 1, 2, 2]);
        assert_eq!(kinds(&fates), "?nLn", "{fates:?}");
        // On one loss, the same lines are inferred.
        let fates = judge_with(&items, &[(0, 10), (2, 12)], &[11], &[1, 1, 1, 1]);
        assert_eq!(kinds(&fates), "LLLn", "{fates:?}");
    }

    #[test]
    fn a_batch_that_landed_has_its_names_worked_out_from_the_numbers_it_took() {
        let items = envelopes(3);
        let batch: Vec<&Envelope> = items.iter().collect();
        let lane = items[0].lane();
        let mut tail = Tail::default();
        let name = |n: i64| layout::lane_task_name(&lane, n);
        tail.found.insert(items[1].id.clone(), (Some(21), name(21)));
        tail.missing = vec![(20, name(20)), (22, name(22))];
        let mut look = Look {
            sides: (0..3).map(|_| Side::Nothing).collect(),
            ..Look::default()
        };
        look.tails.insert(lane.clone(), tail);
        let fates = look.fates(&batch, &[0, 0, 0]);
        assert_eq!(kinds(&fates), "nLn");
        let worked = look.worked_out(&batch, &fates);
        assert_eq!(worked, [Some(name(20)), None, Some(name(22))]);
        // None found in the lane: its unexplained gaps, when they are as many and consecutive.
        let mut look = Look {
            sides: (0..3).map(|_| Side::Nothing).collect(),
            ..Look::default()
        };
        let gaps = vec![(5, name(5)), (6, name(6)), (7, name(7))];
        let tail = Tail {
            missing: gaps.clone(),
            ..Tail::default()
        };
        look.tails.insert(lane.clone(), tail);
        look.unexplained.insert(lane.clone(), gaps);
        let fates: Vec<Fate> = (0..3).map(|_| Fate::NotLanded).collect();
        let worked = look.worked_out(&batch, &fates);
        assert_eq!(worked, [Some(name(5)), Some(name(6)), Some(name(7))]);
    }
}
