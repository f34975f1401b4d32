//! A resumable task's record kept flat: each step's write stores the new entry in a step znode
//! of its own (`steps/<id>/<position>`) and rewrites the envelope with the record's tail only,
//! so a step costs the same bytes at its 10th step and at its 300th; the record's cap no
//! longer limits the number of steps; a record the previous version wrote (every entry in the
//! envelope) resumes, and one whose step znodes are gone is buried unrun; and no step znode
//! outlives its task (completed, or its dead letter purged). Sizes are read from
//! what ZooKeeper holds (each znode's `dataLength`), never timed.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use event_bridge::handler::{FnHandler, HandlerError};
use event_bridge::resume::{Entry, Record};
use event_bridge::{Envelope, Task, process};
use serde_json::json;
use zookeeper_client as zk;

use harness::{TestQueue, options};

async fn publish(t: &TestQueue, envelope: Envelope) -> (String, String) {
    let id = envelope.id.clone();
    let name = t.queue.publish_many(&[envelope]).await.unwrap().remove(0);
    (id, name)
}

/// The step znodes of the task with envelope id `id` (none: no folder).
async fn step_znodes(t: &TestQueue, id: &str) -> Option<Vec<String>> {
    let folder = t.queue.layout().steps_of(id);
    match t.raw.list_children(&folder).await {
        Ok(mut names) => {
            names.sort();
            Some(names)
        }
        Err(zk::Error::NoNode) => None,
        Err(e) => panic!("list {folder}: {e}"),
    }
}

/// The size of znode `path` as ZooKeeper holds it.
async fn size_of(raw: &zk::Client, path: &str) -> usize {
    let stat = raw.check_stat(path).await.unwrap();
    stat.unwrap_or_else(|| panic!("{path} missing")).data_length as usize
}

/// A step whose result is as long at every position.
fn result_of(i: u32) -> String {
    format!("row-{i:05}-{}", "x".repeat(40))
}

/// 300 steps under a 1 024-byte cap: the whole record would be about 25 KB, so the previous
/// version buried the task after its 15th step or so. Each step's write is measured as it
/// lands: the task znode it rewrote and the step znode it created. Neither grows with the
/// step's number: the task stays within a few digits of its size at step 10 (the stored count
/// grows from 2 digits to 3), every step znode is the same size. The task completes and its
/// step znodes go with it.
#[tokio::test]
async fn a_step_writes_as_many_bytes_at_its_300th_step_as_at_its_10th_and_the_cap_no_longer_limits_steps()
 {
    const STEPS: u32 = 300;
    let t = TestQueue::with(|c| c.checkpoint_max_bytes = 1024).await;
    let (id, name) = publish(&t, Envelope::new("export", json!({}))).await;
    let task_path = t.queue.layout().task(&name);
    let sizes = Arc::new(Mutex::new(Vec::<(usize, usize)>::new()));
    let (raw, layout) = (t.raw.clone(), t.queue.layout().clone());
    let handler = FnHandler(|task: Task| {
        let (sizes, raw, layout, task_path) = (
            sizes.clone(),
            raw.clone(),
            layout.clone(),
            task_path.clone(),
        );
        async move {
            for i in 0..STEPS {
                let result = result_of(i);
                let name = format!("s{i:05}");
                task.steps.step(&name, async { Ok(result) }).await?;
                // Written before `step` returned: the task's body and this step's znode.
                let body = size_of(&raw, &task_path).await;
                let chunk = layout.step_chunk(&task.envelope.id, i as usize);
                let chunk = size_of(&raw, &chunk).await;
                sizes.lock().unwrap().push((body, chunk));
            }
            Ok(())
        }
    });
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(
        (report.completed, report.dead_lettered),
        (1, 0),
        "{report:?}"
    );
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.len(), STEPS as usize);
    let (body_10, chunk_10) = sizes[9];
    let (body_last, chunk_last) = sizes[STEPS as usize - 1];
    assert!(
        body_last <= body_10 + 4,
        "the task's body grew from {body_10} bytes at step 10 to {body_last} at step {STEPS}"
    );
    assert!(
        sizes.iter().all(|(_, chunk)| *chunk == chunk_10),
        "each step znode as large as the 10th's ({chunk_10} bytes): {sizes:?}"
    );
    let (last, tenth) = (body_last + chunk_last, body_10 + chunk_10);
    assert!(
        last * 10 <= tenth * 12,
        "{last} bytes at the last step, {tenth} at the 10th"
    );
    assert_eq!(
        step_znodes(&t, &id).await,
        None,
        "its step znodes went with it"
    );
}

/// A record the previous version wrote (every entry in the envelope, no `stored`) resumes: its
/// steps come back without running, the next one runs, and the first write stores them all.
#[tokio::test]
async fn a_record_written_with_every_entry_in_the_envelope_resumes() {
    let t = TestQueue::new().await;
    let mut envelope = Envelope::new("export", json!({}));
    envelope.resume = Some(Record {
        done: vec![
            Entry::Step {
                name: "count".into(),
                result: json!(12),
            },
            Entry::Step {
                name: "write".into(),
                result: json!("export-12.csv"),
            },
        ],
        ..Record::default()
    });
    let (id, name) = publish(&t, envelope).await;
    let stored =
        serde_json::to_value(t.read_json(&format!("tasks/{name}")).await["resume"].clone());
    assert_eq!(
        stored.unwrap()["done"].as_array().unwrap().len(),
        2,
        "the old form, as written"
    );
    let ran = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(None));
    let handler = FnHandler(|task: Task| {
        let (ran, seen) = (ran.clone(), seen.clone());
        async move {
            let steps = &task.steps;
            let rows: u32 = steps
                .step("count", async {
                    ran.fetch_add(1, SeqCst);
                    Ok(0)
                })
                .await?;
            let file: String = steps
                .step("write", async {
                    ran.fetch_add(1, SeqCst);
                    Ok(String::new())
                })
                .await?;
            let sent: bool = steps.step("upload", async { Ok(true) }).await?;
            *seen.lock().unwrap() = Some((rows, file, sent));
            Err(steps.stop())
        }
    });
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.suspended, 1, "{report:?}");
    assert_eq!(ran.load(SeqCst), 0, "recorded steps did not run again");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, Some((12, "export-12.csv".into(), true)));
    let record = t.read_json(&format!("tasks/{name}")).await["resume"].clone();
    assert_eq!(
        (record["stored"].clone(), record["stored_steps"].clone()),
        (json!(3), json!(3))
    );
    assert!(
        record.get("done").is_none(),
        "the envelope keeps no entry now: {record}"
    );
    assert_eq!(step_znodes(&t, &id).await, Some(vec!["0000000000".into()]));
}

/// A task's step znodes stay with it while it can still resume (asleep, dead, redriven) and
/// go when it ends: completed, or its dead letter purged.
#[tokio::test]
async fn step_znodes_stay_while_a_task_can_resume_and_go_when_it_ends() {
    let t = TestQueue::new().await;
    let (done_id, _) = publish(&t, Envelope::new("finish", json!({}))).await;
    let (dead_id, _) = publish(&t, Envelope::new("fail", json!({}))).await;
    let ran = Arc::new(AtomicU32::new(0));
    let handler = FnHandler(|task: Task| {
        let ran = ran.clone();
        async move {
            let steps = &task.steps;
            let n = ran.fetch_add(1, SeqCst);
            steps.step("first", async { Ok(n) }).await?;
            if task.envelope.event_type == "fail" {
                return Err(HandlerError::Permanent("no such account".into()));
            }
            match n {
                0 => Err(steps.stop()),
                _ => Ok(()),
            }
        }
    });
    let report = process::run(&t.queue, &handler, &options(2, 1))
        .await
        .unwrap();
    assert_eq!(
        (report.suspended, report.dead_lettered),
        (1, 1),
        "{report:?}"
    );
    assert!(step_znodes(&t, &done_id).await.is_some(), "stopped: kept");
    assert!(
        step_znodes(&t, &dead_id).await.is_some(),
        "dead: kept for a redrive"
    );

    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(step_znodes(&t, &done_id).await, None, "completed: gone");

    let dead = t.children("dead").await;
    assert_eq!(event_bridge::dead::purge(&t.queue, &dead).await.unwrap(), 1);
    assert_eq!(step_znodes(&t, &dead_id).await, None, "purged: gone");
    assert_eq!(t.children("steps").await, Vec::<String>::new());
}

/// A dead task redriven resumes from its step znodes: its recorded step does not run again,
/// and the znodes go when it completes.
#[tokio::test]
async fn a_redriven_task_resumes_from_its_step_znodes_and_drops_them_when_it_completes() {
    let t = TestQueue::new().await;
    let (id, _) = publish(&t, Envelope::new("charge", json!({}))).await;
    let (ran, calls) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let handler = FnHandler(|task: Task| {
        let (ran, calls) = (ran.clone(), calls.clone());
        async move {
            let charged: u32 = task
                .steps
                .step("charge", async { Ok(ran.fetch_add(1, SeqCst) + 100) })
                .await?;
            match calls.fetch_add(1, SeqCst) {
                0 => Err(HandlerError::Permanent(format!(
                    "receipt {charged} refused"
                ))),
                _ => Ok(()),
            }
        }
    });
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert!(step_znodes(&t, &id).await.is_some());
    let dead = t.children("dead").await;
    let redriven = event_bridge::dead::redrive(&t.queue, &dead).await.unwrap();
    assert_eq!(redriven.redriven.len(), 1);
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!(ran.load(SeqCst), 1, "the charge ran once");
    assert_eq!(step_znodes(&t, &id).await, None);
}

/// A record whose step znodes are gone (deleted by hand) cannot resume: its handler would run
/// its steps again, so the task goes to the dead letters saying so, without being run.
#[tokio::test]
async fn a_record_whose_step_znodes_are_gone_goes_to_the_dead_letters_unrun() {
    let t = TestQueue::new().await;
    let (id, name) = publish(&t, Envelope::new("export", json!({}))).await;
    let calls = Arc::new(AtomicU32::new(0));
    let handler = FnHandler(|task: Task| {
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, SeqCst);
            task.steps.step("count", async { Ok(1) }).await?;
            Err(task.steps.stop())
        }
    });
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let chunk = t.queue.layout().step_chunk(&id, 0);
    t.raw.delete(&chunk, None).await.unwrap();
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.dead_lettered, 1, "{report:?}");
    assert_eq!(calls.load(SeqCst), 1, "not run again");
    let reason = t.read_json(&format!("dead/{name}")).await["reason"].clone();
    assert_eq!(
        reason,
        json!(
            "the record's step znodes do not read back: the record's stored entries stop at \
             position 0, 1 were stored"
        )
    );
}

/// A completed task's step folder that its run did not delete (a run stopped between the
/// completion and the drop: here a completion through the queue alone, which never drops) is
/// marked `ended` by the completion's own multi-op and deleted by the reaper's sweep, step
/// znodes and all; the folder of a task that can still resume is not touched.
#[tokio::test]
async fn a_step_folder_its_run_left_behind_is_swept_by_the_reaper_once_its_task_completed() {
    let t = TestQueue::new().await;
    let handler = FnHandler(|task: Task| async move {
        task.steps.step("first", async { Ok(1) }).await?;
        Err::<(), _>(task.steps.stop())
    });
    let (left_id, _) = publish(&t, Envelope::new("left", json!({}))).await;
    let report = process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert_eq!(report.suspended, 1, "{report:?}");
    let folder = t.queue.layout().steps_of(&left_id);
    assert!(step_znodes(&t, &left_id).await.is_some(), "stopped: kept");

    let name = t.children("tasks").await.remove(0);
    let now = t.queue.server_time().await.unwrap();
    let lease = match t.queue.claim(&name, &now).await.unwrap() {
        event_bridge::queue::TaskOutcome::Claimed(lease) => *lease,
        other => panic!("claim: {other:?}"),
    };
    t.queue.complete(lease).await.unwrap();
    let (data, _) = t.raw.get_data(&folder).await.unwrap();
    assert_eq!(data, b"ended", "the completion marked its folder");
    assert!(step_znodes(&t, &left_id).await.is_some(), "not dropped yet");

    let (live_id, _) = publish(&t, Envelope::new("live", json!({}))).await;
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    assert!(step_znodes(&t, &live_id).await.is_some());

    let report = event_bridge::reap::reap(&t.queue).await.unwrap();
    assert_eq!(report.swept.get("steps"), Some(&1), "{report:?}");
    assert_eq!(step_znodes(&t, &left_id).await, None, "swept");
    assert!(
        step_znodes(&t, &live_id).await.is_some(),
        "a task that can resume keeps its folder"
    );
}

/// A completion whose task's step folder is already gone (another ender dropped it) completes
/// all the same: the mark is left out of its multi-op.
#[tokio::test]
async fn a_completion_whose_step_folder_is_gone_completes_without_the_mark() {
    let t = TestQueue::new().await;
    let handler = FnHandler(|task: Task| async move {
        task.steps.step("first", async { Ok(1) }).await?;
        Err::<(), _>(task.steps.stop())
    });
    let (id, _) = publish(&t, Envelope::new("gone", json!({}))).await;
    process::run(&t.queue, &handler, &options(1, 1))
        .await
        .unwrap();
    let name = t.children("tasks").await.remove(0);
    let now = t.queue.server_time().await.unwrap();
    let lease = match t.queue.claim(&name, &now).await.unwrap() {
        event_bridge::queue::TaskOutcome::Claimed(lease) => *lease,
        other => panic!("claim: {other:?}"),
    };
    assert_eq!(
        t.queue.drop_steps(&id).await.unwrap(),
        2,
        "one step znode and the folder"
    );

    let settled = t.queue.complete(lease).await.unwrap();
    assert_eq!(settled, event_bridge::queue::Settled::Done);
    assert!(t.children("tasks").await.is_empty());
    assert_eq!(step_znodes(&t, &id).await, None);
}
