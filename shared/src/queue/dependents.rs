//! Settling the children of a settled parent (see `parents` for how a child waits).
//!
//! Every write that ends a task (a completion, a bury) carries the write of its marker, in the
//! same multi-op: the dependencies feature's part in the ending (`features/dependencies/`), a
//! check of `dependents/` while it has no children, else the marker created and deleted (which
//! fails when a child registered), or set to how the task was settled ([`ParentEnd`]).
//!
//! A child's publish checks the parent where it is and creates (or checks) the marker in one
//! multi-op, so a parent is settled either before a child registers (and the child sees it
//! settled) or after (and the settlement writes the marker). Nothing in between.
//!
//! The children are then seen to one multi-op each, right after the settlement
//! ([`Dependencies::see_to_children_of`]): the child's entry deleted with what the settlement means for
//! it (released to its lane when it waits for nothing more, rewritten with one parent less, or
//! buried when the parent died and it fails with it). A child buried so is settled too: its
//! own children follow. A consumer that dies in between leaves the marker settled, and the
//! reaper's sweep (the dependencies feature's, `features/dependencies/sweep.rs`) finishes the
//! work.
//!
//! # Costs
//!
//! For every completion multi-op, one more operation while no parent has children, and two per
//! task while some do (a burial: one, or two); for a parent with children, a read of its marker, a
//! second multi-op, and per child a read and a multi-op; for a child, a read per parent (more
//! when a parent is named by an id) and one multi-op; for a child that dies with its parent,
//! one more read (of its own marker, for its children). No read is added to a completion that
//! has no children.

use zookeeper_client as zk;

use super::Queue;
use super::end::{Ending, To, Where};
use super::held::Settled;
use super::ops::{Failed, Landed, Multi, Op, Part};
use super::record::DeadLetter;
use super::write::{self, Next, Read, Tries, Write};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::task::after::ParentEnd;
use crate::task::{self, Body, Envelope, OnParentDead};

recipe!(
    /// Dependencies: children published with `after`, waiting under `after/` for their
    /// parents, and the markers a parent's settlement writes for them (`dependents`,
    /// `parents`).
    Dependencies,
    dependencies
);

/// What a parent's settlement does to one child.
enum ChildStep {
    /// Waits for nothing more: to the tail of its lane.
    Release(Vec<u8>),
    /// Waits for nothing more, and keeps a place in its lane: rewritten ready, to be taken
    /// into its place when its group reaches it (see `place`).
    Ready(Vec<u8>),
    /// Waits for other parents still: rewritten without this one.
    Rewrite(Vec<u8>),
    /// Dies with its parent: to the dead letters under its blocked name.
    Bury(Box<DeadLetter>),
}

impl Dependencies<'_> {
    /// Sees to the children of the task with envelope id `parent`, once its marker says how it
    /// was settled, and to theirs when they die with it; how many children it moved. A marker
    /// not settled (its parent pending) is left as it is.
    pub async fn see_to_children_of(self, parent: &str) -> Result<usize> {
        let mut work = vec![parent.to_string()];
        let mut moved = 0;
        while let Some(id) = work.pop() {
            let marker = self.layout().dependents_of(&id);
            let Some((data, _)) = self.read_path(&marker).await? else {
                continue;
            };
            let Some(settled) = ParentEnd::parse(&data) else {
                continue;
            };
            let children = match self.client().list_children(&marker).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(Error::zk("list", marker, e)),
            };
            for child in children {
                if let Some(buried) = self.see_to_child(&id, &settled, &child).await? {
                    work.push(buried);
                }
                moved += 1;
            }
            // Nothing registers under a settled marker: it goes.
            match self.client().delete(&marker, None).await {
                Ok(()) | Err(zk::Error::NoNode | zk::Error::NotEmpty) => {}
                Err(e) => return Err(Error::zk("delete", marker, e)),
            }
        }
        Ok(moved)
    }

    /// One child's entry (`child`, an encoded id) under the settled parent `parent`: the
    /// child's id when it was buried (its own children, if it has any, are next).
    async fn see_to_child(
        self,
        parent: &str,
        settled: &ParentEnd,
        child: &str,
    ) -> Result<Option<String>> {
        let see = SeeToChild {
            parent,
            settled,
            entry: format!("{}/{child}", self.layout().dependents_of(parent)),
            path: format!("{}/{child}", self.layout().after()),
            read: None,
        };
        write::run(&self, see).await
    }

    /// The blocked child with envelope id `id` dies (`letter`), taken `from` where it waits,
    /// with its own children told in the same multi-op (see `end`, and the markers' part in it,
    /// `features/dependencies/`): how that came out. Its children, if it has any, are next:
    /// the caller sees to them.
    async fn blocked_dies(self, id: &str, letter: Box<DeadLetter>, from: Where) -> Result<Settled> {
        let name = Layout::blocked_name(id);
        let leaving = crate::feature::Leaving {
            name: &name,
            id: Some(id),
            envelope: None,
            held: None,
            delivered: None,
            reason: Some(&letter.reason),
            within_another: true,
        };
        let (site, leaving) = (self.site(), [leaving]);
        let dead = crate::feature::End::Dead;
        let writes = self.features().at_end(&site, &leaving, dead).await?;
        let covers = &self.memory.covers;
        let parts = (self.features())
            .end_parts(&site, &leaving, dead, covers)
            .await?;
        let to = To::Dead { letter };
        let mut ending = Ending::new(name, from, to);
        ending.writes = writes.into_iter().next().unwrap_or_default();
        let ended = self.end("settle child", vec![ending], parts).await?;
        Ok(ended.settled.first().map_or(Settled::Moved, |s| s.1))
    }

    /// What `parent`'s settlement does to the child `envelope`.
    fn outcome(
        &self,
        mut envelope: Envelope,
        parent: &str,
        settled: &ParentEnd,
    ) -> Result<ChildStep> {
        envelope.waiting_on.retain(|p| p != parent);
        let fails = envelope.on_parent_dead.unwrap_or_default() == OnParentDead::Fail;
        if let Some(reason) = settled.child_reason(parent).filter(|_| fails) {
            envelope.waiting_on.clear();
            let body = serde_json::to_vec(&envelope)?;
            let name = Layout::blocked_name(&envelope.id);
            let letter = self.dead_letter_of(&name, &body, &reason, 0, None);
            return Ok(ChildStep::Bury(Box::new(letter)));
        }
        let body = envelope.to_bytes()?;
        Ok(match (envelope.waiting_on.is_empty(), &envelope.placed) {
            (true, None) => ChildStep::Release(body),
            (true, Some(_)) => ChildStep::Ready(body),
            (false, _) => ChildStep::Rewrite(body),
        })
    }

    /// After a child's settlement landed: logged, its lane woken when its place can be taken.
    async fn settled_child(self, envelope: &Envelope, outcome: &ChildStep) -> Option<String> {
        match outcome {
            ChildStep::Release(_) => {
                tracing::debug!(task = %envelope.id, "parents settled: the task is in its lane")
            }
            // Its lane's workers learn that its place can be taken.
            ChildStep::Ready(_) => {
                tracing::debug!(task = %envelope.id, "parents settled: the task waits for its turn");
                if let Err(error) = self.groups().wake_lane(&envelope.lane()).await {
                    tracing::warn!(task = %envelope.id, %error, "lane not woken");
                }
            }
            ChildStep::Rewrite(_) | ChildStep::Bury(_) => {}
        }
        None
    }

    /// Cancels the task with envelope id `id` that waits for its parents (its node read with
    /// `body` at `version`): to the dead letters as `after-<id>`, with its own children told
    /// in the same multi-op. `false` when it changed or went meanwhile.
    pub async fn cancel_blocked(self, id: &str, body: &[u8], version: i32) -> Result<bool> {
        let name = Layout::blocked_name(id);
        let reason = super::record::CANCELLED;
        let letter = Box::new(self.dead_letter_of(&name, body, reason, 0, None));
        let from = Where::Blocked {
            path: self.layout().blocked(id),
            version,
            entry: None,
        };
        let settled = self.blocked_dies(id, letter, from).await?;
        if settled == Settled::Done
            && let Err(error) = self.see_to_children_of(id).await
        {
            tracing::warn!(parent = %id, %error, "children left for the reaper's sweep");
        }
        Ok(settled == Settled::Done)
    }

    async fn delete_entry(self, entry: &str) -> Result<()> {
        match self.client().delete(entry, None).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(Error::zk("delete", entry, e)),
        }
    }
}

/// One child's settlement under its parent's (see [`Dependencies::see_to_child`]): its entry
/// under the parent deleted with what the settlement does to it. Its parents may settle at
/// once, each rewriting it: a try that meets another reads it again.
struct SeeToChild<'p> {
    parent: &'p str,
    settled: &'p ParentEnd,
    /// The child's entry under the parent, and where it waits.
    entry: String,
    path: String,
    /// This try's read: the child, its version, its step, its lane's tail.
    read: Option<(Envelope, i32, ChildStep, String)>,
}

impl Write for SeeToChild<'_> {
    type Tag = Part;
    type Out = Option<String>;
    const WHAT: &'static str = "settle child";
    const TRIES: Tries = Tries::Contended;

    /// The child as it is now. Gone (cancelled, or an earlier try landed) or unreadable: only
    /// its entry is left. Dying with the parent: it ends as every task does, through `end`,
    /// read again when another parent rewrote it first.
    async fn read(&mut self, queue: &Queue) -> Result<Read<Option<String>>> {
        let deps = queue.dependencies();
        let envelope = match queue.read_path(&self.path).await? {
            Some((body, stat)) => match task::parse(&body) {
                Body::Envelope(envelope) => Some((envelope, stat.version)),
                _ => None,
            },
            None => None,
        };
        let Some((envelope, version)) = envelope else {
            deps.delete_entry(&self.entry).await?;
            return Ok(Read::Stop(None));
        };
        let step = deps.outcome(envelope.clone(), self.parent, self.settled)?;
        if let ChildStep::Bury(letter) = step {
            let from = Where::Blocked {
                path: self.path.clone(),
                version,
                entry: Some(self.entry.clone()),
            };
            // Boxed: the walk ends tasks through `end`, whose parts may walk again.
            let dies = Box::pin(deps.blocked_dies(&envelope.id, letter, from));
            return Ok(match dies.await? {
                Settled::Moved => Read::Again,
                Settled::Gone => {
                    deps.delete_entry(&self.entry).await?;
                    Read::Stop(None)
                }
                // Its children, if it has any, are next.
                Settled::Done => Read::Stop(Some(envelope.id.clone())),
                _ => Read::Stop(None),
            });
        }
        let lane = queue.key_lanes().lane_for(&envelope).await?;
        let prefix = queue.layout().lane_prefix(&lane);
        self.read = Some((envelope, version, step, prefix));
        Ok(Read::Write)
    }

    fn build<'a>(&'a self, multi: &mut Multi<'a, Part>) {
        let Some((_, version, step, prefix)) = &self.read else {
            return;
        };
        multi.push(Part::Parent, Op::Delete(&self.entry, -1));
        match step {
            ChildStep::Release(new) => multi
                .push(Part::Blocked, Op::Delete(&self.path, *version))
                .push(Part::NewTask, Op::CreateSequential(prefix, new)),
            ChildStep::Rewrite(new) | ChildStep::Ready(new) => {
                multi.push(Part::Blocked, Op::Set(&self.path, new, *version))
            }
            ChildStep::Bury(_) => unreachable!("a dying child ends through `end`"),
        };
    }

    async fn landed(self, queue: &Queue, _: Landed<Part>) -> Result<Option<String>> {
        let (envelope, _, step, _) = self.read.expect("a try reads before it writes");
        Ok(queue.dependencies().settled_child(&envelope, &step).await)
    }

    /// Another parent rewrote it, or it went: read again. Its entry gone: another settler of
    /// this parent saw to it.
    async fn failed(&mut self, _: &Queue, failed: Failed<Part>) -> Result<Next<Option<String>>> {
        match (failed.tag, &failed.error) {
            (Part::Blocked, zk::Error::BadVersion | zk::Error::NoNode) => Ok(Next::Again),
            (Part::Parent, zk::Error::NoNode) => Ok(Next::Stop(None)),
            _ => Err(failed.unexpected(Self::WHAT)),
        }
    }

    fn exhausted(&self) -> Result<Option<String>> {
        Err(Error::Unreadable {
            path: self.path.clone(),
            problem: "a waiting child kept changing while its parent was settled".into(),
        })
    }
}
