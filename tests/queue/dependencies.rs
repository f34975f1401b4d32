//! Dependencies on the real ZooKeeper: a child waits under `after/` until each parent
//! completed, by consumers racing; a parent retried and then dead takes its child (and the
//! child's own children) to the dead letters with a reason naming it, or the child runs
//! anyway; a consumer that stops between a parent's settlement and its children leaves them
//! to the reaper; bad input refused with nothing written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::error::Error;
use event_bridge::handler::FnHandler;
use event_bridge::inspect::{self, Status};
use event_bridge::queue::{Published, TaskOutcome};
use event_bridge::task::OnParentDead;
use event_bridge::{Envelope, HandlerError, Task, process, reap};
use serde_json::json;

use harness::{Recorder, TestQueue};

fn task(event_type: &str, n: u64) -> Envelope {
    Envelope::new(event_type, json!({ "n": n }))
}

fn child_of(parents: &[&str], n: u64) -> Envelope {
    let mut e = task("child", n);
    e.after = parents.iter().map(|p| p.to_string()).collect();
    e
}

async fn status(t: &TestQueue, key: &str) -> Status {
    inspect::status(&t.queue, &t.now().await, key)
        .await
        .unwrap()
}

async fn publish_one(t: &TestQueue, e: &Envelope) -> Published {
    t.queue
        .publish_all(std::slice::from_ref(e))
        .await
        .unwrap()
        .remove(0)
}

/// Completes task `name` as its one consumer.
async fn complete(t: &TestQueue, name: &str) {
    let TaskOutcome::Claimed(lease) = t.queue.claim(name, &t.now().await).await.unwrap() else {
        panic!("{name} not claimable");
    };
    let lease = *lease;
    t.queue.complete(lease).await.unwrap();
}

fn waiting_on(status: &Status) -> Vec<String> {
    match status {
        Status::Blocked { task } => task.envelope.as_ref().unwrap().waiting_on.clone(),
        other => panic!("not blocked: {other:?}"),
    }
}

#[tokio::test]
async fn a_child_waits_for_each_parent_by_name_or_id_and_then_runs_once() {
    let t = TestQueue::new().await;
    let (a, b) = (task("parent", 1), task("parent", 2));
    let names = t.queue.publish_many(&[a.clone(), b.clone()]).await.unwrap();
    // One parent by its task name, the other by its id.
    let child = child_of(&[&names[0], &b.id], 3);
    let published = publish_one(&t, &child).await;
    assert_eq!(
        published,
        Published::Blocked {
            id: child.id.clone(),
            waiting_on: vec![a.id.clone(), b.id.clone()]
        }
    );
    assert_eq!(
        waiting_on(&status(&t, &child.id).await),
        [a.id.clone(), b.id.clone()]
    );
    assert_eq!(t.children("tasks").await.len(), 2, "not in the lane");
    let stats = event_bridge::stats::collect_with(&t.queue, None)
        .await
        .unwrap();
    assert_eq!((stats.depth, stats.blocked), (2, 1), "stats count it apart");

    complete(&t, &names[0]).await;
    assert_eq!(
        waiting_on(&status(&t, &child.id).await),
        std::slice::from_ref(&b.id),
        "one parent less"
    );
    complete(&t, &names[1]).await;
    let Status::Pending { task } = status(&t, &child.id).await else {
        panic!("in its lane once both completed");
    };
    assert_eq!(task.envelope.unwrap().after, [a.id, b.id]);
    assert!(t.children("after").await.is_empty());
    let stats = event_bridge::stats::collect_with(&t.queue, None)
        .await
        .unwrap();
    assert_eq!((stats.depth, stats.blocked), (1, 0));
    assert!(
        t.children("dependents").await.is_empty(),
        "markers go once their children are seen to"
    );
    let recorder = Recorder::default();
    harness::run(&t.queue, &recorder, 10).await;
    assert_eq!(recorder.count(), 1);
}

#[tokio::test]
async fn consumers_racing_release_each_child_once_and_after_its_parents() {
    // Parents may complete before their children are published: their records find them.
    let t = TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await;
    let parents: Vec<Envelope> = (0..12).map(|n| task("parent", n)).collect();
    let names = t.queue.publish_many(&parents).await.unwrap();
    // Each child waits for two parents; children published as the parents run.
    let pairs: Vec<(usize, usize)> = (0..12).map(|n| (n, (n + 5) % 12)).collect();
    let children: Vec<Envelope> = (pairs.iter())
        .map(|&(x, y)| child_of(&[&names[x], &parents[y].id], 100 + x as u64))
        .collect();
    let seen = Arc::new(Mutex::new(Vec::<Task>::new()));
    let handler = {
        let seen = Arc::clone(&seen);
        FnHandler(move |task: Task| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(task);
                Ok::<(), HandlerError>(())
            }
        })
    };
    // Half wait before any parent runs, half are published while they do.
    let (early, late) = children.split_at(6);
    for published in t.queue.publish_all(early).await.unwrap() {
        assert!(
            matches!(published, Published::Blocked { .. }),
            "{published:?}"
        );
    }
    let (a, b) = (t.consumer("a").await, t.consumer("b").await);
    let options = harness::options(6, 3);
    let (published, ra, rb) = tokio::join!(
        t.queue.publish_all(late),
        process::run(&a, &handler, &options),
        process::run(&b, &handler, &options)
    );
    published.unwrap();
    ra.unwrap();
    rb.unwrap();
    for _ in 0..4 {
        harness::run(&t.queue, &handler, 50).await;
    }
    let seen = seen.lock().unwrap().clone();
    let at: HashMap<&str, usize> = (seen.iter().enumerate())
        .map(|(i, t)| (t.envelope.id.as_str(), i))
        .collect();
    assert_eq!(at.len(), seen.len(), "each task delivered once");
    assert_eq!(seen.len(), 24);
    for (child, &(x, y)) in children.iter().zip(&pairs) {
        let ran = at[child.id.as_str()];
        for parent in [&parents[x], &parents[y]] {
            let before = at[parent.id.as_str()];
            assert!(
                before < ran,
                "{} ran before its parent {}",
                child.id,
                parent.id
            );
        }
    }
    assert!(t.children("after").await.is_empty());
    assert!(t.children("dependents").await.is_empty());
}

#[tokio::test]
async fn a_parent_retried_then_dead_fails_its_child_and_grandchild_or_lets_one_run() {
    let t = TestQueue::new().await;
    let parent = task("parent", 1);
    let name = t.queue.publish(&parent).await.unwrap();
    // The parent fails once (a retry with backoff), then for good.
    let handler = FnHandler(|task: Task| async move {
        match (task.envelope.event_type.as_str(), task.envelope.attempts) {
            ("parent", 1) => Err(HandlerError::Retryable("busy".into())),
            ("parent", _) => Err(HandlerError::Permanent("broken".into())),
            _ => Ok(()),
        }
    });
    harness::run(&t.queue, &handler, 1).await;
    assert_eq!(t.waiting().await.len(), 1, "waiting out its backoff");

    // Children registered while the parent waits under delayed/.
    let fails = child_of(&[&name], 2);
    let mut runs = child_of(&[&parent.id], 3);
    runs.on_parent_dead = Some(OnParentDead::Run);
    let grandchild = child_of(&[&fails.id], 4);
    for e in [&fails, &runs, &grandchild] {
        assert!(matches!(
            publish_one(&t, e).await,
            Published::Blocked { .. }
        ));
    }

    // Back in line under a new name (a clock the test drives), then dead.
    let later = ZkTime::at(t.now().await.now_ms() + 600_000);
    assert_eq!(t.queue.delays().promote_due(&later, 10).await.unwrap(), 1);
    let recorder_seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let handler = {
        let seen = Arc::clone(&recorder_seen);
        FnHandler(move |task: Task| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(task.envelope.id.clone());
                match task.envelope.event_type.as_str() {
                    "parent" => Err(HandlerError::Permanent("broken".into())),
                    _ => Ok(()),
                }
            }
        })
    };
    harness::run(&t.queue, &handler, 10).await;
    harness::run(&t.queue, &handler, 10).await;

    let Status::Dead {
        name: letter,
        record,
    } = status(&t, &fails.id).await
    else {
        panic!("the child fails with its parent");
    };
    assert_eq!(letter, format!("after-{}", fails.id));
    let reason = record["reason"].as_str().unwrap();
    let Status::Dead {
        name: parent_letter,
        ..
    } = status(&t, &parent.id).await
    else {
        panic!("the parent is dead");
    };
    assert_ne!(parent_letter, name, "the parent moved on its retry");
    let named = format!(
        "parent {parent_letter} (id {}) went to the dead letters",
        parent.id
    );
    assert!(reason.starts_with(&named), "{reason}");
    let Status::Dead { record, .. } = status(&t, &grandchild.id).await else {
        panic!("the grandchild fails with the child");
    };
    assert!(record["reason"].as_str().unwrap().contains(&fails.id));
    assert_eq!(
        *recorder_seen.lock().unwrap(),
        [parent.id.clone(), runs.id.clone()],
        "the parent's last attempt, then the child that runs anyway"
    );
    assert!(t.children("after").await.is_empty());
    assert!(t.children("dependents").await.is_empty());
}

#[tokio::test]
async fn settled_parents_publish_the_child_at_once_and_bad_parents_write_nothing() {
    let t = TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await;
    let (done, dead) = (task("parent", 1), task("parent", 2));
    let names = t
        .queue
        .publish_many(&[done.clone(), dead.clone()])
        .await
        .unwrap();
    complete(&t, &names[0]).await;
    let fail = FnHandler(|_: Task| async { Err(HandlerError::Permanent("no".into())) });
    harness::run(&t.queue, &fail, 1).await;

    // Completed (by its record): the child is in its lane at once.
    let after_done = child_of(&[&done.id], 3);
    assert!(matches!(
        publish_one(&t, &after_done).await,
        Published::Created { .. }
    ));
    // Dead: straight to the dead letters, naming it; or, asked to, at once in its lane.
    let mut after_dead = child_of(&[&names[1]], 4);
    let Published::Buried { reason, .. } = publish_one(&t, &after_dead).await else {
        panic!("buried with its dead parent");
    };
    assert!(
        reason.contains(&names[1]) && reason.contains(&dead.id),
        "{reason}"
    );
    after_dead.id = "runs-anyway".into();
    after_dead.on_parent_dead = Some(OnParentDead::Run);
    assert!(matches!(
        publish_one(&t, &after_dead).await,
        Published::Created { .. }
    ));

    let tasks_before = t.children("tasks").await;
    // A parent that never was: an error naming it.
    let unknown = child_of(&["task-0000099999"], 5);
    match t.queue.publish_all(std::slice::from_ref(&unknown)).await {
        Err(Error::Parent { parent, problem }) => {
            assert_eq!(parent, "task-0000099999");
            assert!(problem.contains("no such task"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
    // A task naming itself, or one published after it: a cycle, refused before any write.
    let mut itself = task("child", 6);
    itself.after = vec![itself.id.clone()];
    assert!(matches!(
        t.queue.publish_all(std::slice::from_ref(&itself)).await,
        Err(Error::Unpublishable { .. })
    ));
    let first = child_of(&["later"], 7);
    let mut later = task("parent", 8);
    later.id = "later".into();
    match t.queue.publish_all(&[first, later]).await {
        Err(Error::Unpublishable { item, problem }) => {
            assert_eq!(item, 1);
            assert!(problem.contains("cycle"), "{problem}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.children("tasks").await, tasks_before, "nothing written");
    assert!(t.children("after").await.is_empty());
    assert!(t.children("dependents").await.is_empty());
}

#[tokio::test]
async fn children_left_by_a_consumer_that_stopped_after_settling_their_parent_go_with_the_reaper() {
    let t = TestQueue::new().await;
    let parent = task("parent", 1);
    let name = t.queue.publish(&parent).await.unwrap();
    let child = child_of(&[&name], 2);
    publish_one(&t, &child).await;

    // What a consumer that died right after its completion's multi-op leaves: the parent
    // gone, its marker settled, the child still waiting.
    let marker = format!("{}/dependents/{}", t.config.root, parent.id);
    let settled = json!({"settled": "completed", "task": name}).to_string();
    let (_, stat) = t.raw.get_data(&marker).await.unwrap();
    let mut multi = t.raw.new_multi_writer();
    multi
        .add_delete(&format!("{}/tasks/{name}", t.config.root), None)
        .unwrap();
    multi
        .add_set_data(&marker, settled.as_bytes(), Some(stat.version))
        .unwrap();
    multi.commit().await.unwrap();
    assert!(matches!(
        status(&t, &child.id).await,
        Status::Blocked { .. }
    ));

    let report = reap::reap(&t.queue).await.unwrap();
    assert_eq!(report.swept.get("dependencies"), Some(&1), "{report:?}");
    assert!(matches!(
        status(&t, &child.id).await,
        Status::Pending { .. }
    ));
    assert!(t.children("dependents").await.is_empty());
}

#[tokio::test]
async fn a_cancelled_waiting_child_is_dead_and_its_own_child_with_it() {
    let t = TestQueue::new().await;
    let name = t.queue.publish(&task("parent", 1)).await.unwrap();
    let child = child_of(&[&name], 2);
    let grandchild = child_of(&[&child.id], 3);
    publish_one(&t, &child).await;
    publish_one(&t, &grandchild).await;
    let cancelled = event_bridge::cancel::cancel(&t.queue, &child.id)
        .await
        .unwrap();
    assert!(
        matches!(cancelled, event_bridge::cancel::Cancelled::Cancelled { .. }),
        "{cancelled:?}"
    );
    let Status::Dead { record, .. } = status(&t, &grandchild.id).await else {
        panic!("the grandchild goes with it");
    };
    assert!(record["reason"].as_str().unwrap().contains("cancelled"));
    // The parent completes later: its entry for the cancelled child is cleaned up.
    complete(&t, &name).await;
    assert!(t.children("after").await.is_empty());
    assert!(t.children("dependents").await.is_empty());
}

#[tokio::test]
async fn a_child_registered_after_a_consumer_saw_no_children_still_follows_its_parent() {
    let t = TestQueue::new().await;
    let name = t.queue.publish(&task("parent", 1)).await.unwrap();
    // The consumer starts a pass while no parent has children: one check of `dependents/`
    // stands for its completions' markers from then on.
    let consumer = t.consumer("consumer").await;
    consumer.read_start().await.unwrap();
    let TaskOutcome::Claimed(lease) = consumer.claim(&name, &t.now().await).await.unwrap() else {
        panic!("claimable");
    };
    let lease = *lease;
    // A child registers while the parent is held.
    let child = child_of(&[&name], 2);
    assert!(matches!(
        publish_one(&t, &child).await,
        Published::Blocked { .. }
    ));
    consumer.complete(lease).await.unwrap();
    assert!(
        matches!(status(&t, &child.id).await, Status::Pending { .. }),
        "released by the completion"
    );
    assert!(t.children("dependents").await.is_empty());
}

/// A child registered while its parent runs, after the run's start read found no parent with
/// children: the parent's completion, whose check of `dependents/` at that read's version
/// stands for the markers, fails that check, asks the dependencies feature for its marker after
/// all, and releases the child, which runs after it.
#[tokio::test]
async fn a_child_registered_while_its_parent_runs_is_released_by_its_completion() {
    let t = TestQueue::new().await;
    let parent = task("parent", 1);
    publish_one(&t, &parent).await;
    let child = child_of(&[&parent.id], 2);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (producer, seen, child) = (t.queue.clone(), seen.clone(), child.clone());
        FnHandler(move |task: Task| {
            let (producer, seen, child) = (producer.clone(), seen.clone(), child.clone());
            async move {
                let n = task.envelope.payload["n"].as_u64().unwrap();
                seen.lock().unwrap().push(n);
                if n == 1 {
                    producer.publish_all(&[child]).await.unwrap();
                }
                Ok::<(), HandlerError>(())
            }
        })
    };
    let first = process::run(&t.queue, &handler, &harness::options(10, 1))
        .await
        .unwrap();
    assert_eq!(first.completed as usize, seen.lock().unwrap().len());
    assert!(
        !matches!(status(&t, &child.id).await, Status::Blocked { .. }),
        "released by its parent's completion"
    );
    process::run(&t.queue, &handler, &harness::options(10, 1))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), [1, 2]);
}
