//! The audit that nothing is stuck: each stuck state built by hand in ZooKeeper and found (and
//! the group's lock repaired), and the states that look alike but have a way out (a group's
//! task waiting out a retry, back in its lane, a slot renamed as its claim's tasks end) left
//! alone.

use std::time::Duration;

use event_bridge::Envelope;
use event_bridge::clock::ZkTime;
use event_bridge::inspect::{self, Audit, Stuck};
use event_bridge::limit::{KeyLimit, Limit};
use event_bridge::queue::{GiveBack, GroupLock, Lease, Restraints, TaskOutcome};
use event_bridge::reap::reap_at;
use event_bridge::stats;
use serde_json::json;
use zookeeper_client as zk;

use harness::TestQueue;

fn plain(event_type: &str) -> Envelope {
    Envelope::new(event_type, json!({}))
}

fn grouped(group: &str) -> Envelope {
    let mut envelope = plain("ordered");
    envelope.group = Some(group.into());
    envelope
}

async fn publish(t: &TestQueue, envelope: Envelope) -> String {
    t.queue.publish_many(&[envelope]).await.unwrap().remove(0)
}

async fn audit(t: &TestQueue, repair: bool) -> Audit {
    inspect::audit(&t.queue, &t.now().await, repair)
        .await
        .unwrap()
}

async fn claim(t: &TestQueue, name: &str, restraints: &Restraints) -> Lease {
    let now = t.now().await;
    let path = t.queue.layout().task(name);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    match t
        .queue
        .claim_read(name, &body, &stat, &now, restraints)
        .await
    {
        Ok(TaskOutcome::Claimed(lease)) => *lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn lock(t: &TestQueue, group: &str) -> Option<GroupLock> {
    let path = t.queue.layout().group(group);
    match t.raw.get_data(&path).await {
        Ok((data, _)) => Some(serde_json::from_slice(&data).unwrap()),
        Err(zk::Error::NoNode) => None,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_queue_in_use_has_nothing_stuck() {
    let t = TestQueue::new().await;
    let parent = plain("a");
    let mut child = plain("b");
    child.after = vec![parent.id.clone()];
    publish(&t, parent).await;
    t.queue.publish_all(&[child]).await.unwrap();
    let first = publish(&t, grouped("g")).await;
    publish(&t, grouped("g")).await;
    let _held = claim(&t, &first, &Restraints::default()).await;
    let found = audit(&t, true).await;
    assert_eq!(found.stuck, Vec::new());
    assert_eq!(found.looked_at, 2, "the child and the lock: {found:?}");
}

/// A child whose entry under its parent's marker is gone is never settled: found, named, and
/// left alone (how its parent ended is not known).
#[tokio::test]
async fn a_child_its_parent_cannot_release_is_found() {
    let t = TestQueue::new().await;
    let parent = plain("a");
    let parent_id = parent.id.clone();
    let mut child = plain("b");
    child.after = vec![parent_id.clone()];
    let child_id = child.id.clone();
    publish(&t, parent).await;
    t.queue.publish_all(&[child]).await.unwrap();
    let layout = t.queue.layout();
    t.raw
        .delete(&layout.dependent(&parent_id, &child_id), None)
        .await
        .unwrap();
    t.raw
        .delete(&layout.dependents_of(&parent_id), None)
        .await
        .unwrap();
    let found = audit(&t, true).await;
    assert_eq!(
        found.stuck,
        vec![Stuck::Orphan {
            child: child_id.clone(),
            parent: parent_id.clone(),
        }]
    );
    assert!(
        found.stuck[0]
            .line()
            .contains(&format!("`cancel {child_id}`"))
    );
    // Not repaired: still there for the next look.
    assert_eq!(audit(&t, true).await.stuck.len(), 1);
}

/// A group's lock whose task went without it (a 000-design consumer completed it after its
/// lease was reaped) holds the group back for good: the audit finds it, and its repair deletes
/// the lock so that the group's next task runs.
#[tokio::test]
async fn a_group_held_by_a_task_that_is_gone_is_found_and_let_go() {
    let t = TestQueue::new().await;
    let first = publish(&t, grouped("customer-9")).await;
    let second = publish(&t, grouped("customer-9")).await;
    let held = claim(&t, &first, &Restraints::default()).await;
    let layout = t.queue.layout();
    t.raw.delete(&layout.lease(&first), None).await.unwrap();
    t.raw.delete(&layout.task(&first), None).await.unwrap();
    drop(held);
    let looked = audit(&t, false).await;
    assert_eq!(looked.stuck.len(), 1, "{looked:?}");
    assert!(
        lock(&t, "customer-9").await.is_some(),
        "a look repairs nothing"
    );

    let now = t.now().await;
    let report = reap_at(&t.queue, &now).await.unwrap();
    let Stuck::HeadGone {
        group,
        task,
        repaired,
        ..
    } = &report.audit.stuck[0]
    else {
        panic!("{:?}", report.audit);
    };
    assert_eq!(
        (group.as_str(), task, *repaired),
        ("customer-9", &first, true)
    );
    assert!(lock(&t, "customer-9").await.is_none());
    // What stats and the dashboard show: the last run's findings.
    let stats = stats::collect(&t.queue, &now).await.unwrap();
    assert_eq!(stats.stuck_tasks, 1);
    let record = stats.audit.expect("the audit's record");
    assert_eq!(record.repaired, 1);
    assert!(
        record.lines[0].contains("its lock was deleted"),
        "{record:?}"
    );
    // The group goes on.
    claim(&t, &second, &Restraints::default()).await;
    reap_at(&t.queue, &t.now().await).await.unwrap();
    let stats = stats::collect(&t.queue, &t.now().await).await.unwrap();
    let record = stats.audit.expect("every run keeps its record");
    assert_eq!(
        (stats.stuck_tasks, record.stuck_tasks, record.lines.len()),
        (0, 0, 0),
        "the next run found nothing"
    );
}

/// A group's task waiting out a retry is under `delayed/`, then back at its lane's tail under
/// a new name: its lock says so at each step (the release, the promotion), and the audit does
/// not take the group for stuck.
#[tokio::test]
async fn a_group_whose_task_retries_is_not_stuck() {
    let t = TestQueue::new().await;
    let first = publish(&t, grouped("g")).await;
    publish(&t, grouped("g")).await;
    let held = claim(&t, &first, &Restraints::default()).await;
    let now = t.now().await;
    let back = GiveBack::after(Some("503".into()), Duration::from_secs(30), &now, true);
    t.queue.release(held, back).await.unwrap();
    let waiting = lock(&t, "g").await.expect("the retry keeps its lock");
    let at = t.find_task(&first).await;
    assert_eq!(waiting.waiting.as_deref(), at.strip_prefix("delayed/"));
    assert_eq!(audit(&t, true).await.stuck, Vec::new());

    let due = event_bridge::clock::ZkTime::at(now.now_ms() + 31_000);
    assert_eq!(t.queue.delays().promote_due(&due, 10).await.unwrap(), 1);
    let moved = lock(&t, "g").await.expect("still held");
    assert!(moved.moved && moved.waiting.is_none(), "{moved:?}");
    assert_eq!(audit(&t, true).await.stuck, Vec::new());

    let back = t.children("tasks").await.pop().unwrap();
    claim(&t, &back, &Restraints::default()).await;
    let claimed = lock(&t, "g").await.unwrap();
    assert_eq!(
        (claimed.task.as_str(), claimed.moved),
        (back.as_str(), false)
    );
    assert_eq!(audit(&t, true).await.stuck, Vec::new());
}

fn capped(max: u32) -> Restraints {
    harness::per_key_restraints(
        Limit::default(),
        KeyLimit {
            max_in_flight: Some(max),
            rate_per_ms: None,
        },
    )
}

fn keyed() -> Envelope {
    let mut envelope = plain("a");
    envelope.concurrency_key = Some("tenant-7".into());
    envelope
}

/// A slot whose claim holds no lease any more (a holder that lost its lease and never freed
/// its place) shrinks its gate: found, and left to its session.
#[tokio::test]
async fn a_slot_no_lease_holds_is_found() {
    let t = TestQueue::new().await;
    let restraints = capped(1);
    let name = publish(&t, keyed()).await;
    let held = claim(&t, &name, &restraints).await;
    assert_eq!(audit(&t, true).await.stuck, Vec::new(), "a held slot");
    let gate = held.slots()[0].gate().to_string();
    let gate_dir = gate
        .trim_start_matches(&format!("{}/", t.config.root))
        .to_string();
    assert_eq!(t.children(&gate_dir).await.len(), 1);
    t.raw
        .delete(&t.queue.layout().lease(&name), None)
        .await
        .unwrap();
    // First a suspect: its session may still end (a frozen consumer's, whose lease was reaped).
    let now = t.now().await;
    let first = reap_at(&t.queue, &now).await.unwrap().audit;
    assert_eq!(
        (first.stuck.len(), first.suspects.len()),
        (0, 1),
        "{first:?}"
    );
    let grace = inspect::SLOT_GRACE_MS;
    let early = ZkTime::at(now.now_ms() + grace - 1_000);
    let still = reap_at(&t.queue, &early).await.unwrap().audit;
    assert_eq!(
        (still.stuck.len(), still.suspects.len()),
        (0, 1),
        "{still:?}"
    );
    assert_eq!(still.suspects[0].since_ms, first.suspects[0].since_ms);
    // Stale for the whole grace: stuck.
    let later = ZkTime::at(now.now_ms() + grace);
    let found = reap_at(&t.queue, &later).await.unwrap().audit;
    assert!(
        matches!(&found.stuck[..], [Stuck::SlotHeld { slot, .. }] if slot.ends_with(&name)),
        "{found:?}"
    );
    assert_eq!(t.children(&gate_dir).await.len(), 1, "not repaired");
}

/// A slot renamed as some of its claim's tasks end keeps its claim's token: while one of its
/// tasks runs, it is not stuck.
#[tokio::test]
async fn a_renamed_slot_belongs_to_its_claim() {
    let t = TestQueue::new().await;
    let restraints = capped(2);
    let names = vec![publish(&t, keyed()).await, publish(&t, keyed()).await];
    let mut reads = Vec::new();
    for name in &names {
        let (body, stat) = t.raw.get_data(&t.queue.layout().task(name)).await.unwrap();
        reads.push((name.clone(), body, stat));
    }
    let now = t.now().await;
    let outcomes = t.queue.claim_many(&reads, &now, &restraints).await.unwrap();
    let mut leases: Vec<Lease> = (outcomes.into_iter())
        .map(|o| match o.unwrap() {
            TaskOutcome::Claimed(lease) => *lease,
            other => panic!("{other:?}"),
        })
        .collect();
    let gate = leases[0].slots()[0].gate().to_string();
    let gate_dir = gate
        .trim_start_matches(&format!("{}/", t.config.root))
        .to_string();
    t.queue.complete(leases.remove(0)).await.unwrap();
    let slot = t.children(&gate_dir).await;
    assert!(
        slot[0].starts_with("1."),
        "renamed to the one left: {slot:?}"
    );
    assert_eq!(audit(&t, true).await.stuck, Vec::new());
    t.queue.complete(leases.remove(0)).await.unwrap();
    assert!(t.children(&gate_dir).await.is_empty());
}

/// A slot found stuck stays counted in every later run while it stands (it does not start
/// over as a suspect for another minute), and the record goes once the slot is gone.
#[tokio::test]
async fn a_stuck_slot_stays_stuck_until_it_is_gone() {
    let t = TestQueue::new().await;
    let name = publish(&t, keyed()).await;
    let held = claim(&t, &name, &capped(1)).await;
    let slot = held.slots()[0].gate().to_string();
    let gate_dir = slot
        .trim_start_matches(&format!("{}/", t.config.root))
        .to_string();
    (t.raw.delete(&t.queue.layout().lease(&name), None))
        .await
        .unwrap();
    let now = t.now().await.now_ms();
    let grace = inspect::SLOT_GRACE_MS;
    let at = |ms: i64| ZkTime::at(now + ms);
    assert_eq!(
        reap_at(&t.queue, &at(0)).await.unwrap().audit.stuck.len(),
        0
    );
    let found = reap_at(&t.queue, &at(grace)).await.unwrap().audit;
    assert_eq!(found.stuck.len(), 1, "{found:?}");
    // Every run after, a reaper's period apart, finds it stuck still: stats say so each time.
    for later in [grace + 5_000, grace + 10_000, 2 * grace + 5_000] {
        let audit = reap_at(&t.queue, &at(later)).await.unwrap().audit;
        assert_eq!(audit.stuck.len(), 1, "at +{later} ms: {audit:?}");
        let stats = stats::collect(&t.queue, &at(later)).await.unwrap();
        assert_eq!(stats.stuck_tasks, 1, "at +{later} ms");
    }
    // Gone (its session ended, or by hand): nothing stuck, and no record.
    let slots = t.children(&gate_dir).await;
    let path = format!("{slot}/{}", slots[0]);
    t.raw.delete(&path, None).await.unwrap();
    let after = at(2 * grace + 10_000);
    let audit = reap_at(&t.queue, &after).await.unwrap().audit;
    assert_eq!(
        (audit.stuck.len(), audit.suspects.len()),
        (0, 0),
        "{audit:?}"
    );
    let stats = stats::collect(&t.queue, &after).await.unwrap();
    assert_audit_found_nothing(&stats);
}

/// That `stats` shows an audit that found nothing: every reaper run keeps its record (its
/// `at_ms` is the reaper's last run), and one that found nothing holds no line and no suspect.
pub(crate) fn assert_audit_found_nothing(stats: &event_bridge::stats::Stats) {
    let record = stats.audit.as_ref().expect("the reaper's record");
    let found = (
        record.stuck_tasks,
        record.lines.len(),
        record.suspects.len(),
    );
    assert_eq!((stats.stuck_tasks, found), (0, (0, 0, 0)), "{record:?}");
}
