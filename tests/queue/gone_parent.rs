//! A parent gone from the queue without an end (its znode deleted by hand here; a 000-design
//! consumer's completion in the interop tests): the audit counts its waiting child stuck,
//! `explain` says so and names the ways out, and `end-parent` takes the parent as completed or
//! dead so that the child goes on. A parent that is somewhere (pending, held, waiting, moved
//! by a retry, waiting for its own parents, ended by one of ours) is never taken for gone.

use std::time::Duration;

use event_bridge::config::GoneParents;
use event_bridge::inspect::{self, Parent, Reason, Stuck};
use event_bridge::queue::{GiveBack, Lease, Restraints, TaskOutcome};
use event_bridge::reap::reap_at;
use event_bridge::task::OnParentDead;
use event_bridge::{Envelope, stats};
use serde_json::{Value, json};

use crate::cli::eb;
use harness::{Recorder, TestQueue};

fn plain(event_type: &str) -> Envelope {
    Envelope::new(event_type, json!({}))
}

/// A parent published, then a child after it; their names and ids.
struct Family {
    parent: String,
    parent_id: String,
    child_id: String,
}

async fn family(t: &TestQueue, child: Envelope) -> Family {
    let parent = plain("report.build");
    let parent_id = parent.id.clone();
    let name = t.queue.publish_many(&[parent]).await.unwrap().remove(0);
    let mut child = child;
    child.after = vec![parent_id.clone()];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();
    Family {
        parent: name,
        parent_id,
        child_id,
    }
}

/// Deletes a pending task's znode by hand, as an operator or another tool might.
async fn delete_by_hand(t: &TestQueue, name: &str) {
    let path = t.queue.layout().task(name);
    t.raw.delete(&path, None).await.unwrap();
}

async fn stuck(t: &TestQueue) -> Vec<Stuck> {
    let now = t.now().await;
    reap_at(&t.queue, &now).await.unwrap().audit.stuck
}

async fn explain(t: &TestQueue, key: &str) -> inspect::Explanation {
    inspect::explain(&t.queue, &t.now().await, key)
        .await
        .unwrap()
}

/// Runs a drain with a recorder: the ids of the tasks it ran.
async fn drain(t: &TestQueue) -> Vec<String> {
    let recorder = Recorder::default();
    harness::run(&t.queue, &recorder, 100).await;
    let seen = recorder.seen.lock().unwrap();
    seen.iter().map(|task| task.envelope.id.clone()).collect()
}

fn ok_json(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

/// A parent deleted by hand: the audit counts its child stuck, `explain` names the ways out,
/// and the command it names lets the child go on: to its lane, where `explain` says the next
/// run claims it, and the next run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_deleted_by_hand_is_found_gone_and_ended_as_completed_by_the_operator() {
    let t = TestQueue::new().await;
    let f = family(&t, plain("report.mail")).await;
    delete_by_hand(&t, &f.parent).await;

    let found = stuck(&t).await;
    assert_eq!(
        found,
        vec![Stuck::ParentGone {
            child: f.child_id.clone(),
            parent: f.parent_id.clone(),
            repaired: false,
        }]
    );
    let line = found[0].line();
    let command = format!("`event-bridge end-parent {} --as completed`", f.parent_id);
    assert!(line.contains(&command), "{line}");
    assert!(line.contains(&format!("`cancel {}`", f.child_id)), "{line}");
    let stats = stats::collect(&t.queue, &t.now().await).await.unwrap();
    assert_eq!(stats.stuck_tasks, 1);

    let explained = explain(&t, &f.child_id).await;
    assert_eq!(
        explained.reasons,
        vec![Reason::Parents {
            waiting_on: vec![Parent {
                id: f.parent_id.clone(),
                state: None,
                gone: true,
            }],
        }]
    );
    let line = &explained.lines[0];
    assert!(line.contains(&command), "{line}");
    assert!(!line.contains("when they complete"), "{line}");

    let ended = ok_json(&eb(
        &t,
        &["end-parent", &f.parent_id, "--as", "completed"],
        "",
    ));
    assert_eq!(ended["children"], 1, "{ended}");
    let explained = explain(&t, &f.child_id).await;
    assert_eq!(explained.reasons, vec![Reason::Ready], "{explained:?}");
    assert_eq!(drain(&t).await, vec![f.child_id.clone()]);
    assert_eq!(stuck(&t).await, Vec::new());
    let stats = stats::collect(&t.queue, &t.now().await).await.unwrap();
    crate::audit::assert_audit_found_nothing(&stats);
}

/// Taken as dead, a gone parent takes its children as their `on_parent_dead` says: one that
/// fails with it goes to the dead letters, one that runs anyway runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_parent_ended_as_dead_takes_each_child_as_it_asked() {
    let t = TestQueue::new().await;
    let f = family(&t, plain("report.mail")).await;
    let mut runs = plain("cleanup");
    runs.after = vec![f.parent_id.clone()];
    runs.on_parent_dead = Some(OnParentDead::Run);
    let runs_id = runs.id.clone();
    t.queue.publish_all(&[runs]).await.unwrap();
    delete_by_hand(&t, &f.parent).await;
    assert_eq!(stuck(&t).await.len(), 2);

    let ended = ok_json(&eb(&t, &["end-parent", &f.parent_id, "--as", "dead"], ""));
    assert_eq!(ended["children"], 2, "{ended}");
    let failed = explain(&t, &f.child_id).await;
    let [Reason::Dead { why, .. }] = &failed.reasons[..] else {
        panic!("{failed:?}");
    };
    assert!(why.contains(&f.parent_id), "{why}");
    assert!(why.contains("end-parent"), "{why}");
    assert_eq!(explain(&t, &runs_id).await.reasons, vec![Reason::Ready]);
    assert_eq!(drain(&t).await, vec![runs_id]);
    assert_eq!(stuck(&t).await, Vec::new());
}

async fn claim(t: &TestQueue, name: &str) -> Lease {
    let now = t.now().await;
    let path = t.queue.layout().task(name);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    let restraints = Restraints::default();
    match t
        .queue
        .claim_read(name, &body, &stat, &now, &restraints)
        .await
    {
        Ok(TaskOutcome::Claimed(lease)) => *lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The audit finds nothing, `explain` does not take the parent `id` of `child` for gone, and
/// `end-parent` refuses it.
async fn not_gone(t: &TestQueue, id: &str, child: &str) {
    assert_eq!(stuck(t).await, Vec::new());
    let explained = explain(t, child).await;
    let Reason::Parents { waiting_on } = &explained.reasons[0] else {
        panic!("{explained:?}");
    };
    assert!(!waiting_on[0].gone, "{explained:?}");
    let refused = eb(t, &["end-parent", id, "--as", "completed"], "");
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("is not gone"), "{stderr}");
}

/// Not gone: a parent pending, held, waiting out a retry under its name, back in its lane
/// under a new one, waiting for parents of its own. The audit finds nothing, `explain` names
/// its state, and `end-parent` refuses, naming where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_is_somewhere_is_never_gone() {
    let t = TestQueue::new().await;
    let f = family(&t, plain("report.mail")).await;
    not_gone(&t, &f.parent_id, &f.child_id).await;
    let held = claim(&t, &f.parent).await;
    not_gone(&t, &f.parent_id, &f.child_id).await;
    let now = t.now().await;
    let back = GiveBack::after(Some("503".into()), Duration::from_secs(30), &now, true);
    t.queue.release(held, back).await.unwrap();
    not_gone(&t, &f.parent_id, &f.child_id).await;
    let due = event_bridge::clock::ZkTime::at(now.now_ms() + 31_000);
    assert_eq!(t.queue.delays().promote_due(&due, 10).await.unwrap(), 1);
    assert!(
        t.raw
            .check_stat(&t.queue.layout().task(&f.parent))
            .await
            .unwrap()
            .is_none(),
        "back in its lane under a new name"
    );
    not_gone(&t, &f.parent_id, &f.child_id).await;

    // A parent that waits for a parent of its own.
    let grandparent = plain("a");
    let mut parent = plain("b");
    parent.after = vec![grandparent.id.clone()];
    let mut child = plain("c");
    child.after = vec![parent.id.clone()];
    let blocked = (parent.id.clone(), child.id.clone());
    t.queue.publish_many(&[grandparent]).await.unwrap();
    t.queue.publish_all(&[parent, child]).await.unwrap();
    not_gone(&t, &blocked.0, &blocked.1).await;
}

/// A parent that one of our consumers completes (no completion record kept) settles its
/// children on the way: nothing is stuck, before or after.
#[tokio::test]
async fn a_parent_our_consumer_completes_leaves_nothing_stuck() {
    let t = TestQueue::new().await;
    let f = family(&t, plain("report.mail")).await;
    assert_eq!(stuck(&t).await, Vec::new());
    let ran = drain(&t).await;
    assert_eq!(ran, vec![f.parent_id.clone(), f.child_id.clone()]);
    assert_eq!(stuck(&t).await, Vec::new());
}

/// With `GONE_PARENTS=completed` (only 000-design consumers delete tasks, and only those that
/// succeeded), the reaper takes a gone parent as completed: the finding says so, and the child
/// is in its lane, where the next run claims it.
#[tokio::test]
async fn with_gone_parents_completed_the_reaper_lets_the_children_go_on() {
    let t = TestQueue::with(|c| c.gone_parents = GoneParents::Completed).await;
    let f = family(&t, plain("report.mail")).await;
    delete_by_hand(&t, &f.parent).await;
    let now = t.now().await;
    let report = reap_at(&t.queue, &now).await.unwrap();
    assert_eq!(
        report.audit.stuck,
        vec![Stuck::ParentGone {
            child: f.child_id.clone(),
            parent: f.parent_id.clone(),
            repaired: true,
        }]
    );
    let line = report.audit.stuck[0].line();
    assert!(
        line.contains("taken as completed (GONE_PARENTS=completed)"),
        "{line}"
    );
    let stats = stats::collect(&t.queue, &now).await.unwrap();
    let record = stats.audit.expect("the audit's record");
    assert_eq!((record.stuck_tasks, record.repaired), (1, 1));
    assert_eq!(explain(&t, &f.child_id).await.reasons, vec![Reason::Ready]);
    assert_eq!(drain(&t).await, vec![f.child_id.clone()]);
    assert_eq!(stuck(&t).await, Vec::new());
}
