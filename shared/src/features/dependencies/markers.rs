//! The markers' part in an ending multi-op: one `check` of `dependents/` for every task while
//! it has no children, else each task's marker written; read again when the write failed; the
//! children of the tasks whose markers were set seen to once the ending is over.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use futures::future::BoxFuture;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::feature::{AfterEnd, End, EndPart, EndWrite, Leaving, Site};
use crate::layout::Layout;
use crate::queue::Queue;
use crate::task::after::ParentEnd;

/// Rereads of markers (or of `dependents/`) one ending may make while other writers keep
/// changing them.
const REREADS: usize = 64;

/// The data version at which `dependents/` was last seen without children (`-1`: not seen so,
/// or not read yet). While that version stands no child waits for anything.
pub(super) struct EmptyAt(AtomicI64);

impl Default for EmptyAt {
    fn default() -> Self {
        EmptyAt(AtomicI64::new(-1))
    }
}

impl EmptyAt {
    /// Remembers what a read of `dependents/` found (`None`: nothing readable).
    pub(super) fn saw(&self, stat: Option<&zk::Stat>) {
        let seen = match stat {
            Some(stat) if stat.num_children == 0 => i64::from(stat.version),
            _ => -1,
        };
        self.0.store(seen, Relaxed);
    }

    /// The version to check `dependents/` at, when it was last seen without children.
    fn version(&self) -> Option<i32> {
        let seen = self.0.load(Relaxed);
        (seen >= 0).then_some(seen as i32)
    }

    /// Reads `dependents/` again (its check failed an ending: a child registered); the
    /// version to check now, if it still has no children.
    async fn read_again(&self, site: &Site<'_>, path: &str) -> Result<Option<i32>> {
        let stat = (site.client.check_stat(path).await).map_err(|e| Error::zk("stat", path, e))?;
        self.saw(stat.as_ref());
        Ok(self.version())
    }
}

/// What ending one task writes to its marker.
struct Marker {
    /// The task's id, as its children name it.
    id: String,
    path: String,
    data: Vec<u8>,
    /// The marker's version when it was read (children wait); `None`: created and deleted.
    version: Option<i32>,
    /// Whether its children are seen to after the ending: not for a task that ends within
    /// another's (a waiting child dying with its parent), whose children the walk that buried
    /// it sees to next.
    follow: bool,
}

impl Marker {
    fn write(&self) -> EndWrite {
        match self.version {
            None => EndWrite::Absent {
                path: self.path.clone(),
            },
            Some(version) => EndWrite::Set {
                path: self.path.clone(),
                data: self.data.clone(),
                version: Some(version),
            },
        }
    }

    /// Catches up after its write failed the ending with `error`: reads the marker (it was
    /// created, changed or deleted meanwhile), or makes `dependents/` in a queue made before
    /// it.
    async fn read_again(&mut self, site: &Site<'_>, error: &zk::Error) -> Result<()> {
        if *error == zk::Error::NoNode && self.version.is_none() {
            return site.ensure(&site.layout.dependents()).await;
        }
        self.version = site.read(&self.path).await?.map(|(_, stat)| stat.version);
        Ok(())
    }
}

/// The markers' part in one ending multi-op.
pub(super) struct Markers {
    empty: Arc<EmptyAt>,
    /// `dependents/`.
    dependents: String,
    /// The version `dependents/` is checked at, while one check stands for every marker.
    covered: Option<i32>,
    /// Each leaving task's marker, by its index; none for a body no child can name.
    each: Vec<Option<Marker>>,
    rereads: usize,
    /// This try's writes: the leaving task each is for, or none for the check.
    sent: Vec<Option<usize>>,
    /// Once landed: the ids whose children wait.
    waited_for: Vec<String>,
}

impl Markers {
    /// The part for `leaving`, ended `how`; none when no task among them can be named.
    pub(super) fn new(
        layout: &Layout,
        empty: &Arc<EmptyAt>,
        leaving: &[Leaving<'_>],
        how: End,
    ) -> Option<Self> {
        let each: Vec<Option<Marker>> = leaving.iter().map(|l| marker(layout, l, how)).collect();
        each.iter().any(Option::is_some).then(|| Markers {
            empty: Arc::clone(empty),
            dependents: layout.dependents(),
            covered: empty.version(),
            each,
            rereads: 0,
            sent: Vec::new(),
            waited_for: Vec::new(),
        })
    }
}

impl Markers {
    /// The multi-op landed: the ids whose markers it set, children waiting, unless a walk
    /// that buried them sees to them.
    fn note_landed(&mut self) {
        let set = (self.sent.iter().flatten())
            .filter_map(|at| self.each[*at].as_ref())
            .filter(|marker| marker.version.is_some() && marker.follow);
        self.waited_for = set.map(|marker| marker.id.clone()).collect();
    }
}

/// What ending `leaving` `how` writes to its marker.
fn marker(layout: &Layout, leaving: &Leaving<'_>, how: End) -> Option<Marker> {
    let id = leaving.id?;
    let task = leaving.name.to_string();
    let settled = match how {
        End::Completed => ParentEnd::Completed { task },
        End::Dead => ParentEnd::Dead {
            task,
            reason: leaving.reason.unwrap_or_default().to_string(),
        },
    };
    Some(Marker {
        id: id.to_string(),
        path: layout.dependents_of(id),
        data: settled.to_bytes(),
        version: None,
        follow: !leaving.within_another,
    })
}

impl EndPart for Markers {
    fn writes(&mut self, still: &[usize]) -> Vec<EndWrite> {
        self.sent.clear();
        if let Some(version) = self.covered {
            self.sent.push(None);
            let path = self.dependents.clone();
            return vec![EndWrite::Check { path, version }];
        }
        let mut writes = Vec::new();
        for &at in still {
            if let Some(marker) = self.each.get(at).and_then(Option::as_ref) {
                self.sent.push(Some(at));
                writes.push(marker.write());
            }
        }
        writes
    }

    fn failed<'a>(
        &'a mut self,
        site: &'a Site<'a>,
        k: usize,
        error: &'a zk::Error,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            self.rereads += 1;
            if self.rereads > REREADS {
                return Ok(false);
            }
            match self.sent.get(k).copied() {
                Some(None) => {
                    self.covered = self.empty.read_again(site, &self.dependents).await?;
                }
                Some(Some(at)) => {
                    let marker = self.each[at].as_mut().expect("a marker was sent");
                    marker.read_again(site, error).await?;
                }
                None => return Ok(false),
            }
            Ok(true)
        })
    }

    fn landed<'a>(
        &'a mut self,
        _site: &'a Site<'a>,
        _results: Vec<&'a zk::MultiWriteResult>,
    ) -> BoxFuture<'a, ()> {
        self.note_landed();
        Box::pin(async {})
    }

    fn after(&mut self) -> Option<Box<dyn AfterEnd>> {
        let parents = std::mem::take(&mut self.waited_for);
        (!parents.is_empty()).then(|| Box::new(SeeToChildren(parents)) as Box<dyn AfterEnd>)
    }
}

/// The children of the parents (ids) whose markers an ending set, seen to one parent after
/// another once it is over.
struct SeeToChildren(Vec<String>);

impl AfterEnd for SeeToChildren {
    fn run<'a>(self: Box<Self>, site: &'a Site<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let queue = (site.queue::<Queue>()).expect("the core makes its sites from its Queue");
            for parent in &self.0 {
                let seen = queue.dependencies().see_to_children_of(parent).await;
                if let Err(error) = seen {
                    tracing::warn!(%parent, %error, "children left for the reaper's sweep");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaving<'a>(name: &'a str, id: Option<&'a str>) -> Leaving<'a> {
        Leaving {
            name,
            id,
            envelope: None,
            held: None,
            delivered: None,
            reason: Some("boom"),
            within_another: name.starts_with("after-"),
        }
    }

    fn part(empty_at: Option<&zk::Stat>, leaving: &[Leaving<'_>]) -> Markers {
        let empty = Arc::new(EmptyAt::default());
        empty.saw(empty_at);
        let layout = Layout::new("/q");
        Markers::new(&layout, &empty, leaving, End::Dead).expect("a task to name")
    }

    fn stat(version: i32, num_children: i32) -> zk::Stat {
        crate::feature::stat_for_tests(version, 1, num_children)
    }

    #[test]
    fn one_check_stands_for_every_task_while_dependents_has_no_children() {
        let tasks = [leaving("task-1", Some("a")), leaving("task-2", Some("b"))];
        let mut markers = part(Some(&stat(7, 0)), &tasks);
        let check = EndWrite::Check {
            path: "/q/dependents".into(),
            version: 7,
        };
        assert_eq!(markers.writes(&[0, 1]), vec![check]);
    }

    #[test]
    fn with_children_each_task_still_ending_writes_its_marker() {
        let tasks = [
            leaving("task-1", Some("a")),
            leaving("task-2", None),
            leaving("task-3", Some("c")),
        ];
        let mut markers = part(Some(&stat(7, 2)), &tasks);
        let absent = |id: &str| EndWrite::Absent {
            path: format!("/q/dependents/{id}"),
        };
        assert_eq!(markers.writes(&[0, 1, 2]), vec![absent("a"), absent("c")]);
        // The first task ended otherwise: only the third is left.
        assert_eq!(markers.writes(&[2]), vec![absent("c")]);
        assert_eq!(markers.sent, vec![Some(2)]);
    }

    #[test]
    fn a_marker_read_with_children_is_set_to_how_its_task_died_and_they_are_seen_to() {
        let tasks = [leaving("task-1", Some("a")), leaving("after-b", Some("b"))];
        let mut markers = part(None, &tasks);
        for marker in markers.each.iter_mut().flatten() {
            marker.version = Some(3);
        }
        let writes = markers.writes(&[0, 1]);
        let EndWrite::Set { data, version, .. } = &writes[0] else {
            panic!("a set, not {writes:?}");
        };
        assert_eq!(*version, Some(3));
        let settled = ParentEnd::parse(data).expect("how it ended");
        assert_eq!(
            settled,
            ParentEnd::Dead {
                task: "task-1".into(),
                reason: "boom".into()
            }
        );
        markers.note_landed();
        // A waiting child that died: its children are the walk's that buried it.
        assert_eq!(markers.waited_for, vec!["a".to_string()]);
        assert!(markers.after().is_some(), "the children of `a` follow");
        assert!(markers.after().is_none(), "once");
    }

    #[test]
    fn no_part_when_no_task_can_be_named() {
        let empty = Arc::new(EmptyAt::default());
        let layout = Layout::new("/q");
        let tasks = [leaving("task-1", None)];
        assert!(Markers::new(&layout, &empty, &tasks, End::Completed).is_none());
    }
}
