//! The registry: the registered features in the order the core asks them, and each hook
//! asked of them all ([`Features`]): only the features a task concerns, at the ends they
//! name, with what the run's start read for them.

use std::sync::Arc;

use serde_json::Value;
use zookeeper_client as zk;

use super::covered::Covered;
use super::{
    AfterFailure, Asked, AtClaim, AtStart, End, EndPart, EndParts, EndWrite, EndedTask, Feature,
    Found, Idle, IdleCheck, LatestCovers, Leaving, Said, Site, StartRead, Upkeep, carries,
};
use crate::error::Result;
use crate::layout::Layout;
use crate::task::{Envelope, Task, envelope_from_value};

/// The registered features, in the order the core asks them. Cheap to clone.
#[derive(Clone, Default)]
pub struct Features {
    list: Arc<[Arc<dyn Feature>]>,
    /// Each one's [`Feature::name`], read once.
    names: Arc<[&'static str]>,
    /// Each one's [`Feature::item_fields`] and [`Feature::envelope_fields`], read once: a
    /// task without them asks no feature that has some.
    fields: Arc<[Vec<&'static str>]>,
    /// Each one's [`Feature::ends`], read once.
    ends: Arc<[&'static [End]]>,
    /// The folders the features' [`Feature::listed_at_start`] name, read once, with the
    /// index of the feature.
    listed: Arc<[(usize, &'static str)]>,
    /// The znodes the features' [`Feature::read_at_start`] name, likewise, each with what
    /// the feature makes it with ([`Feature::made_with`]).
    read: Arc<[ReadAtStart]>,
}

/// A znode a feature's start read reads ([`Feature::read_at_start`]).
struct ReadAtStart {
    /// The feature's index.
    at: usize,
    /// The znode's name under the root.
    name: &'static str,
    /// What the feature makes it with ([`Feature::made_with`]).
    made_with: Option<&'static [u8]>,
    /// What it is while the feature is idle ([`Feature::idle`]).
    idle: Option<Idle>,
}

impl std::fmt::Debug for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Features {
    /// The features of `list`, asked in its order.
    pub fn new(list: Vec<Arc<dyn Feature>>) -> Self {
        let fields = (list.iter())
            .map(|f| [f.item_fields(), f.envelope_fields()].concat())
            .collect();
        let ends = list.iter().map(|f| f.ends()).collect();
        let names = list.iter().map(|f| f.name()).collect();
        let listed = (list.iter().enumerate())
            .filter_map(|(at, f)| Some((at, f.listed_at_start()?)))
            .collect();
        let read = (list.iter().enumerate())
            .filter_map(|(at, f)| {
                Some(ReadAtStart {
                    at,
                    name: f.read_at_start()?,
                    made_with: f.made_with(),
                    idle: f.idle(),
                })
            })
            .collect();
        Features {
            list: list.into(),
            names,
            fields,
            ends,
            listed,
            read,
        }
    }

    /// Their names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.names.to_vec()
    }

    /// The index in the list of the feature named `name`, if it is there.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| *n == name)
    }

    /// The name of the feature at index `at`.
    pub fn name_at(&self, at: usize) -> Option<&'static str> {
        self.names.get(at).copied()
    }

    /// The first refusal of `envelope` at publish, naming the feature's field.
    pub fn check_publish(&self, envelope: &Envelope) -> Result<(), String> {
        self.carried_by(envelope)
            .try_for_each(|(_, f)| f.check_publish(envelope))
    }

    /// Whether a claim at `now_ms` may take the task, with what the run's start read found
    /// (`found`): the first feature that does not take it says why.
    pub fn at_claim(&self, envelope: &Envelope, now_ms: i64, found: &Found) -> AtClaim {
        self.carried_by(envelope)
            .filter(|(at, _)| !found.empty_for(*at))
            .map(|(at, f)| f.at_claim(envelope, now_ms, &found.of(at)))
            .find(|answer| *answer != AtClaim::Take)
            .unwrap_or(AtClaim::Take)
    }

    /// Whether the feature at index `at` alone leaves the task where it is now
    /// ([`AtClaim::Leave`]): what a claim asks again once that feature's checked znode
    /// moved and was read again.
    pub fn leaves(&self, at: usize, envelope: &Envelope, now_ms: i64, found: &Found) -> bool {
        self.carried_by(envelope)
            .filter(|(i, _)| *i == at && !found.empty_for(at))
            .any(|(_, f)| f.at_claim(envelope, now_ms, &found.of(at)) == AtClaim::Leave)
    }

    /// Whether any feature leaves the task where it is now ([`AtClaim::Leave`]), whatever
    /// the others say: what a claim asks of a place, about the task as far as the place
    /// tells it (a task that would be buried is buried once it is in its place).
    pub fn any_leaves(&self, envelope: &Envelope, now_ms: i64, found: &Found) -> bool {
        self.carried_by(envelope)
            .filter(|(at, _)| !found.empty_for(*at))
            .any(|(at, f)| f.at_claim(envelope, now_ms, &found.of(at)) == AtClaim::Leave)
    }

    /// Whether a feature asks a running resumable handler of the task to stop.
    pub fn stops_running(&self, envelope: &Envelope, found: &Found) -> bool {
        self.carried_by(envelope)
            .filter(|(at, _)| !found.empty_for(*at))
            .any(|(at, f)| f.stops_running(envelope, &found.of(at)))
    }

    /// The folders the run's start read lists, each with the index of the feature that asked.
    pub fn listed_at_start(&self, layout: &Layout) -> Vec<(usize, String)> {
        (self.listed.iter())
            .map(|(at, folder)| (*at, format!("{}/{folder}", layout.root())))
            .collect()
    }

    /// The znodes the run's start read reads, each with the index of the feature that
    /// asked.
    pub fn read_at_start(&self, layout: &Layout) -> Vec<(usize, String)> {
        (self.read.iter())
            .map(|read| (read.at, format!("{}/{}", layout.root(), read.name)))
            .collect()
    }

    /// Tells the feature at index `at` what a read of its znode found; its answer. A znode
    /// found idle ([`Feature::idle`]) is answered without asking the feature
    /// ([`AtStart::idle`]).
    pub fn saw_at_start(&self, at: usize, read: &StartRead<'_>) -> Result<AtStart> {
        let Some(feature) = self.list.get(at) else {
            return Ok(AtStart::default());
        };
        match (self.idle_of(at), read.found) {
            (Some(idle), Some((data, stat))) if data == idle.data && stat.num_children == 0 => {
                Ok(AtStart::idle(read.path, stat, idle.check))
            }
            _ => feature.saw_at_start(read),
        }
    }

    /// What the znode of the feature at index `at` is while it is idle, if it says.
    fn idle_of(&self, at: usize) -> Option<Idle> {
        (self.read.iter()).find(|r| r.at == at).and_then(|r| r.idle)
    }

    /// Whether the feature at index `at` has its ends covered while idle ([`IdleCheck::Ends`]).
    fn covers_ends(&self, at: usize) -> bool {
        self.idle_of(at)
            .is_some_and(|idle| idle.check == IdleCheck::Ends)
    }

    /// Tells `covers` what the feature at index `at` answered to a read of its znode that
    /// found it with `stat` (`None`: not there).
    pub fn tell_covers(
        &self,
        covers: &LatestCovers,
        at: usize,
        answer: &AtStart,
        stat: Option<&zk::Stat>,
    ) {
        if let Some(name) = self.name_at(at) {
            covers.saw(name, self.covers_ends(at), answer, stat);
        }
    }

    /// Each feature's writes at the release of held `task`, with the feature's index.
    pub fn at_release(&self, layout: &Layout, task: &Task) -> Vec<(usize, EndWrite)> {
        let mut writes = Vec::new();
        for (at, feature) in self.list.iter().enumerate() {
            writes.extend(
                feature
                    .at_release(layout, task)
                    .into_iter()
                    .map(|w| (at, w)),
            );
        }
        writes
    }

    /// What each feature says of the task, with what a start read found (`found`), with the
    /// feature's name; in the list's order.
    pub fn explain(
        &self,
        envelope: &Envelope,
        asked: &Asked,
        found: &Found,
    ) -> Vec<(&'static str, Said)> {
        self.carried_by(envelope)
            .filter(|(at, _)| !found.empty_for(*at))
            .filter_map(|(at, f)| Some((f.name(), f.explain(envelope, asked, &found.of(at))?)))
            .collect()
    }

    /// The fields the features add to `stats`, with what a start read found (`found`).
    pub fn in_stats(&self, found: &Found) -> Vec<(&'static str, Value)> {
        (self.list.iter().enumerate())
            .filter_map(|(at, f)| f.in_stats(&found.of(at)))
            .collect()
    }

    /// The features' start-read znodes made with the base paths ([`Feature::made_with`]),
    /// each with its data.
    pub fn made_with(&self, layout: &Layout) -> Vec<(String, &'static [u8])> {
        (self.read.iter())
            .filter_map(|read| Some((format!("{}/{}", layout.root(), read.name), read.made_with?)))
            .collect()
    }

    /// The features `envelope` concerns: those that read no field, and those whose field it
    /// carries ([`Feature::item_fields`], [`Feature::envelope_fields`]). None at all for an
    /// envelope without such fields when every feature has some.
    fn carried_by<'a>(
        &'a self,
        envelope: &'a Envelope,
    ) -> impl Iterator<Item = (usize, &'a Arc<dyn Feature>)> {
        (self.list.iter().zip(self.fields.iter()).enumerate())
            .filter(move |(_, (_, fields))| fields.is_empty() || carries(envelope, fields))
            .map(|(at, (feature, _))| (at, feature))
    }

    /// Each feature's writes at the end of the held tasks `leaving` ([`Feature::at_end`]):
    /// for each task, its writes with the feature's index in the list.
    pub async fn at_end(
        &self,
        site: &Site<'_>,
        leaving: &[Leaving<'_>],
        how: End,
    ) -> Result<Vec<Vec<(usize, EndWrite)>>> {
        let mut writes: Vec<Vec<(usize, EndWrite)>> = leaving.iter().map(|_| Vec::new()).collect();
        for (at, feature) in self.asked_at(how, leaving) {
            for (i, write) in feature.at_end(site, leaving, how).await? {
                writes[i].push((at, write));
            }
        }
        Ok(writes)
    }

    /// Each feature's part in the one multi-op that ends `leaving` `how`
    /// ([`Feature::end_part`]); for a feature whose ends `covers` says are covered, the check
    /// of its idle znode instead, which asks it for its part only if that check fails on a
    /// znode no longer idle (see `covered.rs`).
    pub async fn end_parts(
        &self,
        site: &Site<'_>,
        leaving: &[Leaving<'_>],
        how: End,
        covers: &LatestCovers,
    ) -> Result<EndParts> {
        let mut parts = Vec::new();
        for (at, feature) in self.asked_at(how, leaving) {
            let covered = (self.idle_of(at))
                .filter(|idle| idle.check == IdleCheck::Ends)
                .zip(covers.of(self.names[at]));
            if let Some((idle, cover)) = covered {
                let feature = Arc::clone(feature);
                let part = Covered::new(feature, idle.data, cover, leaving, how);
                parts.push((at, Box::new(part) as Box<dyn EndPart>));
            } else if let Some(part) = feature.end_part(site, leaving, how).await? {
                parts.push((at, part));
            }
        }
        Ok(EndParts(parts))
    }

    /// What the features' parts may add to the request that ends `leaving` `how`, by task
    /// ([`Feature::end_bytes`]).
    pub fn end_bytes(&self, leaving: &[Leaving<'_>], how: End) -> Vec<usize> {
        let mut bytes = vec![0; leaving.len()];
        for (_, feature) in self.asked_at(how, leaving) {
            for (total, more) in bytes.iter_mut().zip(feature.end_bytes(leaving)) {
                *total += more;
            }
        }
        bytes
    }

    /// The features asked at end `how` ([`Feature::ends`]) about the tasks `leaving`: those
    /// that read no field, and those whose field one of them carries; with their index.
    fn asked_at<'a>(
        &'a self,
        how: End,
        leaving: &'a [Leaving<'a>],
    ) -> impl Iterator<Item = (usize, &'a Arc<dyn Feature>)> {
        let concerned = move |fields: &[&str]| {
            fields.is_empty()
                || (leaving.iter()).any(|l| l.envelope.is_some_and(|e| carries(e, fields)))
        };
        (self
            .list
            .iter()
            .zip(self.ends.iter())
            .zip(self.fields.iter()))
        .enumerate()
        .filter(move |(_, ((_, ends), fields))| ends.contains(&how) && concerned(fields))
        .map(|(at, ((feature, _), _))| (at, feature))
    }

    /// For each of `keys`, the first feature's account of that task, which left the queue
    /// ([`Feature::find_ended`]); each feature is asked once, about the keys still unfound.
    pub async fn find_ended(
        &self,
        site: &Site<'_>,
        keys: &[String],
    ) -> Result<Vec<Option<EndedTask>>> {
        let mut found: Vec<Option<EndedTask>> = keys.iter().map(|_| None).collect();
        for feature in self.list.iter() {
            let (at, unfound): (Vec<usize>, Vec<String>) = (keys.iter().enumerate())
                .filter(|(i, _)| found[*i].is_none())
                .map(|(i, key)| (i, key.clone()))
                .unzip();
            if unfound.is_empty() {
                break;
            }
            let answers = feature.find_ended(site, &unfound).await?;
            for (i, answer) in at.into_iter().zip(answers) {
                found[i] = answer;
            }
        }
        Ok(found)
    }

    /// The answer of the feature at index `at` to its `write` that failed with `error`.
    pub fn after_failure(&self, at: usize, write: &EndWrite, error: &zk::Error) -> AfterFailure {
        self.list
            .get(at)
            .map_or(AfterFailure::Unexpected, |f| f.after_failure(write, error))
    }

    /// Every feature's sweep, in order: how many things each tidied, by its name.
    pub async fn sweep(&self, upkeep: &Upkeep) -> Result<Vec<(&'static str, u32)>> {
        let mut swept = Vec::with_capacity(self.list.len());
        for feature in self.list.iter() {
            swept.push((feature.name(), feature.sweep(upkeep).await?));
        }
        Ok(swept)
    }

    /// The envelope a JSON line or an HTTP publish item asks for
    /// ([`envelope_from_value`]), with the fields the features read carried into it, and
    /// checked by them ([`Features::check_publish`]).
    pub fn envelope_from_item(
        &self,
        item: Value,
        default_type: Option<&str>,
    ) -> Result<Envelope, String> {
        // Without a payload the whole item is the payload: its fields are data.
        let carried: Vec<(&str, Value)> = match item.get("payload") {
            None => Vec::new(),
            Some(_) => (self.list.iter())
                .flat_map(|f| f.item_fields().iter())
                .filter_map(|field| Some((*field, item.get(*field)?.clone())))
                // A field given as `null` is absent, as the item's other fields are.
                .filter(|(_, value)| !value.is_null())
                .collect(),
        };
        let mut envelope = envelope_from_value(item, default_type)?;
        for (field, value) in carried {
            envelope.extra.insert(field.to_string(), value);
        }
        self.check_publish(&envelope)?;
        Ok(envelope)
    }
}

#[cfg(test)]
mod tests {
    use crate::feature::*;
    use serde_json::json;

    use super::*;

    /// Refuses a claim of tasks whose `colour` is `red`, and a publish of one that is not a
    /// string.
    struct Colour;

    impl Feature for Colour {
        fn name(&self) -> &'static str {
            "colour"
        }
        fn item_fields(&self) -> &'static [&'static str] {
            &["colour"]
        }
        fn check_publish(&self, envelope: &Envelope) -> Result<(), String> {
            match envelope.extra.get("colour") {
                None | Some(Value::String(_)) => Ok(()),
                Some(_) => Err("\"colour\" must be a string".into()),
            }
        }
        fn at_claim(&self, envelope: &Envelope, _now_ms: i64, _started: &Started<'_>) -> AtClaim {
            match envelope.extra.get("colour") {
                Some(c) if c == "red" => AtClaim::Bury {
                    reason: "red".into(),
                },
                _ => AtClaim::Take,
            }
        }
        fn explain(&self, envelope: &Envelope, asked: &Asked, _: &Started<'_>) -> Option<Said> {
            let colour = envelope.extra.get("colour")?;
            let line = format!("{colour} at {}", asked.now_ms);
            Some(Said {
                line,
                holds: None,
                last: false,
            })
        }
    }

    /// Has no hooks of its own.
    struct Quiet;

    impl Feature for Quiet {
        fn name(&self) -> &'static str {
            "quiet"
        }
    }

    fn both() -> Features {
        Features::new(vec![Arc::new(Quiet), Arc::new(Colour)])
    }

    #[test]
    fn each_hook_asks_every_feature_and_a_quiet_one_says_nothing() {
        let features = both();
        assert_eq!(features.names(), ["quiet", "colour"]);
        let mut red = Envelope::new("t", json!({}));
        red.extra.insert("colour".into(), json!("red"));
        let refused = AtClaim::Bury {
            reason: "red".into(),
        };
        assert_eq!(features.at_claim(&red, 5, &Found::default()), refused);
        let said = |e| -> Vec<(&str, String)> {
            let found = Found::default();
            let asked = Asked {
                state: crate::state::State::Pending,
                now_ms: 5,
            };
            let said = features.explain(e, &asked, &found).into_iter();
            said.map(|(f, said)| (f, said.line)).collect()
        };
        assert_eq!(said(&red), [("colour", "\"red\" at 5".into())]);
        let plain = Envelope::new("t", json!({}));
        assert_eq!(
            features.at_claim(&plain, 5, &Found::default()),
            AtClaim::Take
        );
        assert!(said(&plain).is_empty());
        assert_eq!(
            Features::default().at_claim(&red, 5, &Found::default()),
            AtClaim::Take
        );
    }

    /// Refuses every claim it is asked about; reads the field `strict`.
    struct Strict;

    impl Feature for Strict {
        fn name(&self) -> &'static str {
            "strict"
        }
        fn item_fields(&self) -> &'static [&'static str] {
            &["strict"]
        }
        fn at_claim(&self, _envelope: &Envelope, _now_ms: i64, _started: &Started<'_>) -> AtClaim {
            AtClaim::Bury {
                reason: "strict".into(),
            }
        }
    }

    #[test]
    fn a_feature_with_sections_is_asked_only_about_an_envelope_that_carries_one() {
        let features = Features::new(vec![Arc::new(Strict)]);
        let plain = Envelope::new("t", json!({}));
        assert_eq!(
            features.at_claim(&plain, 5, &Found::default()),
            AtClaim::Take
        );
        let mut carrying = Envelope::new("t", json!({}));
        carrying.extra.insert("strict".into(), json!(true));
        let refused = AtClaim::Bury {
            reason: "strict".into(),
        };
        assert_eq!(features.at_claim(&carrying, 5, &Found::default()), refused);
    }

    #[test]
    fn an_item_carries_the_fields_features_read_and_they_check_them() {
        let features = both();
        let item = json!({"type": "t", "payload": {}, "colour": "blue", "other": 1});
        let envelope = features.envelope_from_item(item, None).unwrap();
        assert_eq!(envelope.extra.get("colour"), Some(&json!("blue")));
        assert_eq!(
            envelope.extra.get("other"),
            None,
            "a field nobody reads is dropped"
        );
        let null = json!({"type": "t", "payload": {}, "colour": null});
        let envelope = features.envelope_from_item(null, None).unwrap();
        assert!(envelope.extra.is_empty(), "null is absent");
        let bad = json!({"type": "t", "payload": {}, "colour": 7});
        let problem = features.envelope_from_item(bad, None).unwrap_err();
        assert_eq!(problem, "\"colour\" must be a string");
        // Without a payload the item is the payload: its fields are data.
        let bare = json!({"colour": "blue"});
        let envelope = features.envelope_from_item(bare, Some("t")).unwrap();
        assert!(envelope.extra.is_empty());
        assert_eq!(envelope.payload, json!({"colour": "blue"}));
    }

    /// Refuses what its folder lists; writes only when tasks die.
    struct Lister;

    impl Feature for Lister {
        fn name(&self) -> &'static str {
            "lister"
        }
        fn listed_at_start(&self) -> Option<&'static str> {
            Some("listed")
        }
        fn at_claim(&self, envelope: &Envelope, _now_ms: i64, started: &Started<'_>) -> AtClaim {
            assert!(!started.listed.is_empty(), "asked with an empty listing");
            match started.listed.contains(&envelope.id) {
                true => AtClaim::Bury {
                    reason: "listed".into(),
                },
                false => AtClaim::Take,
            }
        }
        fn ends(&self) -> &'static [End] {
            &[End::Dead]
        }
    }

    #[test]
    fn a_feature_whose_listing_came_back_empty_is_not_asked_and_ends_pick_who_is_called() {
        let features = Features::new(vec![Arc::new(Quiet), Arc::new(Lister)]);
        let layout = Layout::new("/q");
        assert_eq!(features.listed_at_start(&layout), [(1, "/q/listed".into())]);
        let envelope = Envelope::new("t", json!({}));
        let empty = Found::new(vec![(1, Listed::new())], Vec::new());
        assert_eq!(features.at_claim(&envelope, 5, &empty), AtClaim::Take);
        let listing = Found::new(vec![(1, Listed::from([envelope.id.clone()]))], Vec::new());
        let refused = AtClaim::Bury {
            reason: "listed".into(),
        };
        assert_eq!(features.at_claim(&envelope, 5, &listing), refused);
        let other = Envelope::new("t", json!({}));
        assert_eq!(features.at_claim(&other, 5, &listing), AtClaim::Take);
        let at = |how| {
            features
                .asked_at(how, &[])
                .map(|(_, f)| f.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(at(End::Completed), ["quiet"]);
        assert_eq!(at(End::Dead), ["quiet", "lister"]);
    }

    /// Reads the envelope's own `batch` field.
    struct Member;

    impl Feature for Member {
        fn name(&self) -> &'static str {
            "member"
        }
        fn envelope_fields(&self) -> &'static [&'static str] {
            &["batch"]
        }
    }

    #[test]
    fn a_feature_that_reads_a_field_is_asked_only_about_tasks_that_carry_it() {
        let features = Features::new(vec![Arc::new(Quiet), Arc::new(Member)]);
        let plain = Envelope::new("t", json!({}));
        let mut member = Envelope::new("t", json!({}));
        member.batch = Some("b".into());
        let leaving = |envelope| Leaving {
            name: "task-0000000001",
            id: None,
            envelope: Some(envelope),
            held: None,
            delivered: None,
            reason: None,
            within_another: false,
        };
        let asked = |leaving: &[Leaving]| {
            (features.asked_at(End::Completed, leaving))
                .map(|(_, f)| f.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(asked(&[leaving(&plain)]), ["quiet"]);
        assert_eq!(
            asked(&[leaving(&plain), leaving(&member)]),
            ["quiet", "member"]
        );
        let names = |envelope| {
            (features.carried_by(envelope))
                .map(|(_, f)| f.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&plain), ["quiet"]);
        assert_eq!(names(&member), ["quiet", "member"]);
    }

    /// Reads a znode idle as `{}`, and counts the reads it was told about.
    #[derive(Default)]
    struct Sleepy(std::sync::atomic::AtomicUsize);

    impl Feature for Sleepy {
        fn name(&self) -> &'static str {
            "idle"
        }
        fn read_at_start(&self) -> Option<&'static str> {
            Some("idle")
        }
        fn idle(&self) -> Option<Idle> {
            Some(Idle {
                data: b"{}",
                check: IdleCheck::Claims,
            })
        }
        fn saw_at_start(&self, _read: &StartRead<'_>) -> Result<AtStart> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(AtStart {
                asks_at_claim: true,
                ..AtStart::default()
            })
        }
    }

    /// A znode found idle is answered by the core: the feature is not asked, and every claim
    /// still checks the version read; anything else asks it (other data, children, none).
    #[test]
    fn an_idle_znode_is_answered_without_asking_its_feature() {
        let idle = Arc::new(Sleepy::default());
        let features = Features::new(vec![Arc::new(Quiet), idle.clone()]);
        let stat = crate::feature::stat_for_tests(7, 70, 0);
        let read = |data: &'static [u8]| StartRead {
            path: "/q/idle",
            found: Some((data, &stat)),
        };
        let answer = features.saw_at_start(1, &read(b"{}")).unwrap();
        assert_eq!(answer, AtStart::idle("/q/idle", &stat, IdleCheck::Claims));
        assert!(answer.covers_ends.is_none(), "it covers claims");
        assert!(!answer.asks_at_claim && answer.kept.is_none());
        assert_eq!((answer.checks[0].version, answer.checks[0].mzxid), (7, 70));
        assert_eq!(idle.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        let answer = features.saw_at_start(1, &read(b"{\"x\":1}")).unwrap();
        assert!(answer.asks_at_claim, "the feature's own answer");
        assert_eq!(idle.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        let gone = StartRead {
            path: "/q/idle",
            found: None,
        };
        features.saw_at_start(1, &gone).unwrap();
        assert_eq!(idle.0.load(std::sync::atomic::Ordering::SeqCst), 2);
        let parent = crate::feature::stat_for_tests(7, 70, 1);
        let with_children = StartRead {
            path: "/q/idle",
            found: Some((b"{}", &parent)),
        };
        features.saw_at_start(1, &with_children).unwrap();
        assert_eq!(idle.0.load(std::sync::atomic::Ordering::SeqCst), 3);
    }
}
