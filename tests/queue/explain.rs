//! `explain`: why a task is where it is and what would let it go, for every state and every
//! reason a pending task is held back, each built by the queue's own operations.

use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::features::pause::PauseTarget;
use event_bridge::inspect::{self, Explanation, Reason};
use event_bridge::limit::{KeyLimit, Limit};
use event_bridge::queue::{GiveBack, Lease, Restraints, TaskOutcome};
use event_bridge::state::State;
use event_bridge::task::{Debounce, OnDead};
use event_bridge::{Envelope, process};
use serde_json::json;

use harness::TestQueue;

async fn explain(t: &TestQueue, key: &str) -> Explanation {
    let now = t.now().await;
    inspect::explain(&t.queue, &now, key).await.unwrap()
}

async fn publish(t: &TestQueue, envelope: Envelope) -> String {
    t.queue.publish_many(&[envelope]).await.unwrap().remove(0)
}

fn plain(event_type: &str) -> Envelope {
    Envelope::new(event_type, json!({}))
}

async fn claim(t: &TestQueue, name: &str, restraints: &Restraints) -> Lease {
    let queue = &t.queue;
    let now = queue.server_time().await.unwrap();
    let path = queue.layout().task(name);
    let (body, stat) = t.raw.get_data(&path).await.unwrap();
    match queue.claim_read(name, &body, &stat, &now, restraints).await {
        Ok(TaskOutcome::Claimed(lease)) => *lease,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The one reason, and the line it reads as.
fn only(explained: &Explanation) -> (&Reason, &str) {
    assert_eq!(explained.reasons.len(), 1, "{explained:?}");
    (&explained.reasons[0], &explained.lines[0])
}

#[tokio::test]
async fn a_task_nothing_holds_back_is_ready() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("a")).await;
    let explained = explain(&t, &name).await;
    assert_eq!(explained.state, Some(State::Pending));
    let (reason, line) = only(&explained);
    assert_eq!(reason, &Reason::Ready);
    assert!(line.starts_with("ready"), "{line}");
}

/// What a reason says is paused, as its JSON says it (a pause is the pause feature's reason):
/// `Some(None)` the whole queue, `Some(Some(t))` type `t`; `None`: no pause.
fn paused(reason: &Reason) -> Option<Option<String>> {
    let json = reason.to_json();
    let since = json["since_ms"].as_i64().is_some();
    (json["reason"] == "paused" && since).then(|| json["event_type"].as_str().map(String::from))
}

#[tokio::test]
async fn a_paused_type_and_a_paused_queue_name_themselves_and_their_resume() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("email.send")).await;
    let email = PauseTarget::Type("email.send".into());
    assert!(t.queue.pauses().pause(&email).await.unwrap());
    let explained = explain(&t, &name).await;
    let (reason, line) = only(&explained);
    assert!(
        paused(reason) == Some(Some("email.send".into())),
        "{reason:?}"
    );
    assert!(
        line.starts_with("paused: type email.send, since "),
        "{line}"
    );
    assert!(
        line.ends_with("`resume --type email.send` lets it go"),
        "{line}"
    );
    assert!(t.queue.pauses().pause(&PauseTarget::Queue).await.unwrap());
    let explained = explain(&t, &name).await;
    let (reason, line) = only(&explained);
    assert_eq!(paused(reason), Some(None), "{reason:?}");
    assert!(line.contains("the whole queue"), "{line}");
}

#[tokio::test]
async fn a_released_task_waits_out_its_backoff_with_its_attempt_and_error() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("a")).await;
    let lease = claim(&t, &name, &Restraints::default()).await;
    let now = t.now().await;
    let error = Some("503 from https://partner.example".to_string());
    (t.queue.release(
        lease,
        GiveBack::after(error, Duration::from_secs(600), &now, true),
    ))
    .await
    .unwrap();
    let explained = explain(&t, &name).await;
    assert_eq!(explained.state, Some(State::Waiting));
    let (reason, line) = only(&explained);
    let Reason::NotDue {
        due_at_ms,
        attempts,
        last_error,
    } = reason
    else {
        panic!("{reason:?}");
    };
    assert_eq!(*attempts, 1);
    assert!(*due_at_ms > now.now_ms() + 590_000, "{due_at_ms}");
    assert_eq!(
        last_error.as_deref(),
        Some("503 from https://partner.example")
    );
    assert!(
        line.contains("(in 10 min): backoff after attempt 1: 503 from https://partner.example"),
        "{line}"
    );
}

#[tokio::test]
async fn a_task_published_for_later_is_delayed_by_its_producer() {
    let t = TestQueue::new().await;
    let mut later = plain("a");
    later.delay_ms = Some(3_600_000);
    let name = publish(&t, later).await;
    let explained = explain(&t, &name).await;
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::NotDue { attempts: 0, .. }),
        "{reason:?}"
    );
    assert!(
        line.contains("(in 60 min): delayed by its producer"),
        "{line}"
    );
}

fn grouped(group: &str, on_dead: Option<OnDead>) -> Envelope {
    let mut envelope = plain("ordered");
    envelope.group = Some(group.into());
    envelope.on_dead = on_dead;
    envelope
}

#[tokio::test]
async fn a_grouped_task_waits_behind_the_task_that_holds_its_group() {
    let t = TestQueue::new().await;
    let first = publish(&t, grouped("customer-9", None)).await;
    let second = publish(&t, grouped("customer-9", None)).await;
    let lease = claim(&t, &first, &Restraints::default()).await;
    let explained = explain(&t, &second).await;
    let (reason, line) = only(&explained);
    assert_eq!(
        reason,
        &Reason::GroupBehind {
            group: "customer-9".into(),
            holder: first.clone(),
            holder_state: Some(State::Leased),
            holder_why: Vec::new(),
        }
    );
    assert_eq!(
        line,
        &format!("group customer-9: behind {first} (leased), which goes first")
    );
    // The holder itself is not held back by its own group.
    let holder = explain(&t, &first).await;
    assert!(matches!(only(&holder).0, Reason::Held { .. }));
    drop(lease);
}

#[tokio::test]
async fn a_group_paused_at_a_dead_task_names_it_and_its_resume() {
    let t = TestQueue::new().await;
    let head = publish(&t, grouped("g", Some(OnDead::Pause))).await;
    let next = publish(&t, grouped("g", None)).await;
    let lease = claim(&t, &head, &Restraints::default()).await;
    t.queue.bury(lease, "poison", None).await.unwrap();
    let explained = explain(&t, &next).await;
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::GroupPaused { group, task, .. } if group == "g" && *task == head),
        "{reason:?}"
    );
    assert!(line.ends_with("`resume --group g` lets it go on"), "{line}");
}

#[tokio::test]
async fn a_key_at_its_cap_names_the_tasks_that_hold_it() {
    let t = TestQueue::new().await;
    let restraints = harness::per_key_restraints(
        Limit::default(),
        KeyLimit {
            max_in_flight: Some(1),
            rate_per_ms: None,
        },
    );
    let keyed = || {
        let mut envelope = plain("a");
        envelope.concurrency_key = Some("tenant-7".into());
        envelope
    };
    let first = publish(&t, keyed()).await;
    let second = publish(&t, keyed()).await;
    let _held = claim(&t, &first, &restraints).await;
    let explained = explain(&t, &second).await;
    let (reason, line) = only(&explained);
    let Reason::AtCap { gate } = reason else {
        panic!("{reason:?}");
    };
    assert_eq!(gate.key.as_deref(), Some("tenant-7"));
    assert_eq!((gate.in_flight, gate.max_in_flight), (1, Some(1)));
    assert_eq!(
        line,
        &format!(
            "key tenant-7 of route @default at its cap 1/1: held by {first}; it goes when one \
             of them ends"
        )
    );
}

/// A route whose rate has no token left says when the next comes, by the gate's own data (the
/// moment is the bucket's, driven by the test: no wait for the clock).
#[tokio::test]
async fn a_route_out_of_tokens_says_when_the_next_comes() {
    let t = TestQueue::new().await;
    let one_a_second = Limit {
        rate_per_ms: Some(0.001),
        ..Limit::default()
    };
    let restraints = Restraints {
        limits: event_bridge::limit::RouteLimits {
            types: [("sms.send".to_string(), one_a_second)].into(),
            ..Default::default()
        },
        ..Default::default()
    };
    let first = publish(&t, plain("sms.send")).await;
    let second = publish(&t, plain("sms.send")).await;
    let _held = claim(&t, &first, &restraints).await;
    let gate = t.read_json("limits/sms%2Esend").await;
    let at_ms = gate["at_ms"].as_i64().expect("the bucket's moment");
    let now = event_bridge::clock::ZkTime::at(at_ms + 400);
    let explained = inspect::explain(&t.queue, &now, &second).await.unwrap();
    let (reason, line) = only(&explained);
    let Reason::RateLimited { gate } = reason else {
        panic!("{reason:?}");
    };
    assert_eq!(
        (gate.route.as_str(), gate.next_token_at_ms),
        ("sms.send", Some(at_ms + 1_000))
    );
    assert!(
        line.starts_with("route sms.send at its rate: its next token comes at ")
            && line.ends_with("(in 1 s); it goes then"),
        "{line}"
    );
    // Once the token is there, nothing holds it back.
    let later = event_bridge::clock::ZkTime::at(at_ms + 1_000);
    let explained = inspect::explain(&t.queue, &later, &second).await.unwrap();
    assert_eq!(only(&explained).0, &Reason::Ready);
}

#[tokio::test]
async fn a_child_names_its_parents_and_their_states() {
    let t = TestQueue::new().await;
    let parent = plain("a");
    let parent_id = parent.id.clone();
    publish(&t, parent).await;
    let mut child = plain("b");
    child.after = vec![parent_id.clone()];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();
    let explained = explain(&t, &child_id).await;
    assert_eq!(explained.state, Some(State::Blocked));
    let (reason, line) = only(&explained);
    assert_eq!(
        reason,
        &Reason::Parents {
            waiting_on: vec![inspect::Parent {
                id: parent_id.clone(),
                state: Some(State::Pending),
                gone: false,
            }],
        }
    );
    assert_eq!(
        line,
        &format!(
            "waiting for its parents {parent_id} (pending): it goes to its lane when they complete"
        )
    );
}

/// What the HTTP status answer and the dashboard show reads the parents' markers and `after/`
/// only, at the same cost at any depth: a parent waiting for its own parents is `blocked`, a
/// pending one has no state to show.
#[tokio::test]
async fn the_status_answers_why_reads_only_the_parents_markers() {
    let t = TestQueue::new().await;
    let grandparent = plain("a");
    let mut parent = plain("b");
    parent.after = vec![grandparent.id.clone()];
    let mut child = plain("c");
    child.after = vec![parent.id.clone(), grandparent.id.clone()];
    let (parent_id, child_id) = (parent.id.clone(), child.id.clone());
    let grandparent_id = grandparent.id.clone();
    publish(&t, grandparent).await;
    t.queue.publish_all(&[parent, child]).await.unwrap();
    let (_, why) = inspect::status_and_why(&t.queue, &child_id).await.unwrap();
    assert_eq!(
        only(&why).0,
        &Reason::Parents {
            waiting_on: vec![
                inspect::Parent {
                    id: parent_id,
                    state: Some(State::Blocked),
                    gone: false,
                },
                inspect::Parent {
                    id: grandparent_id,
                    state: None,
                    gone: false,
                },
            ],
        }
    );
}

#[tokio::test]
async fn a_held_task_names_its_consumer_and_a_cancel_of_it_says_it_will_not_run_again() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("a")).await;
    let lease = claim(&t, &name, &Restraints::default()).await;
    let explained = explain(&t, &name).await;
    assert_eq!(explained.state, Some(State::Leased));
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::Held { fencing_token, expires_in_ms, .. }
            if *fencing_token == lease.task.fencing_token && *expires_in_ms > 0),
        "{reason:?}"
    );
    assert!(line.contains("until"), "{line}");
    event_bridge::cancel::cancel(&t.queue, &name).await.unwrap();
    let explained = explain(&t, &name).await;
    assert_eq!(explained.reasons.len(), 2, "{explained:?}");
    assert_eq!(
        explained.reasons[1].to_json(),
        json!({"reason": "cancelled"})
    );
}

/// What the features say of a held task comes where the core said it: its cancel mark right
/// after its holder, then a line (when it expires); a pause of its type holds back no task
/// already held, so it says nothing.
#[tokio::test]
async fn a_held_task_s_cancel_mark_comes_before_its_expiry_and_its_types_pause_is_not_said() {
    let t = TestQueue::new().await;
    let now = t.now().await.now_ms();
    let mut envelope = plain("report.send");
    event_bridge::features::expiry::ExpiresAt::at_ms(now + 3_600_000)
        .unwrap()
        .set(&mut envelope);
    let name = publish(&t, envelope).await;
    let _lease = claim(&t, &name, &Restraints::default()).await;
    let report = PauseTarget::Type("report.send".into());
    assert!(t.queue.pauses().pause(&report).await.unwrap());
    event_bridge::cancel::cancel(&t.queue, &name).await.unwrap();
    let explained = explain(&t, &name).await;
    let kinds: Vec<String> = (explained.reasons.iter())
        .map(|r| {
            r.to_json()["reason"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["held", "cancelled", "feature"], "{explained:?}");
    assert!(
        explained.lines[2].starts_with("expires at "),
        "{explained:?}"
    );
}

#[tokio::test]
async fn a_body_that_cannot_run_says_it_goes_to_the_dead_letters() {
    let t = TestQueue::new().await;
    let path = format!("{}/tasks/task-", t.config.root);
    let created = t
        .raw
        .create(
            &path,
            b"{not json",
            &zookeeper_client::CreateMode::PersistentSequential
                .with_acls(zookeeper_client::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let name = format!("task-{:010}", created.1);
    let explained = explain(&t, &name).await;
    let (reason, line) = only(&explained);
    assert!(matches!(reason, Reason::Poison { .. }), "{reason:?}");
    assert!(line.contains("body is not JSON"), "{line}");
}

#[tokio::test]
async fn a_dead_task_names_its_reason_and_its_redrive() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("a")).await;
    let lease = claim(&t, &name, &Restraints::default()).await;
    t.queue.bury(lease, "gave up", None).await.unwrap();
    let explained = explain(&t, &name).await;
    assert_eq!(explained.state, Some(State::Dead));
    let (_, line) = only(&explained);
    assert_eq!(
        line,
        &format!("dead: gave up; `dead redrive {name}` queues it again")
    );
}

#[tokio::test]
async fn a_completed_task_says_when_while_its_record_is_kept() {
    let t = TestQueue::with(|c| c.keep_done = Some(Duration::from_secs(3600))).await;
    let envelope = plain("a");
    let id = envelope.id.clone();
    let name = publish(&t, envelope).await;
    let lease = claim(&t, &name, &Restraints::default()).await;
    t.queue.complete(lease).await.unwrap();
    let explained = explain(&t, &id).await;
    assert_eq!(explained.state, Some(State::Completed));
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::Completed { task, attempts: 1, .. } if *task == name),
        "{reason:?}"
    );
    assert!(line.ends_with("after 1 attempt"), "{line}");
}

#[tokio::test]
async fn a_debounced_publish_says_when_it_fires() {
    let t = TestQueue::new().await;
    let mut envelope = plain("search.reindex");
    envelope.debounce = Some(Debounce {
        key: "user-7".into(),
        period_ms: 600_000,
        max_ms: None,
    });
    let id = envelope.id.clone();
    t.queue.publish_all(&[envelope]).await.unwrap();
    let explained = explain(&t, &id).await;
    assert_eq!(explained.state, Some(State::Debounced));
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::Debounced { key, .. } if key == "user-7"),
        "{reason:?}"
    );
    assert!(
        line.starts_with("debounced under key user-7: fires at "),
        "{line}"
    );
}

#[tokio::test]
async fn a_grouped_child_keeps_a_place_that_names_what_it_stands_for() {
    let t = TestQueue::new().await;
    let parent = plain("a");
    let parent_id = parent.id.clone();
    publish(&t, parent).await;
    let mut child = grouped("g", None);
    child.after = vec![parent_id];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();
    let place = t.children("tasks").await.into_iter().max().unwrap();
    let explained = explain(&t, &place).await;
    assert_eq!(explained.state, None, "a place is not a state");
    let (reason, line) = only(&explained);
    assert!(
        matches!(reason, Reason::Place { group, task_id, .. } if group == "g" && *task_id == child_id),
        "{reason:?}"
    );
    assert!(line.ends_with("which waits for its parents"), "{line}");
}

#[tokio::test]
async fn a_grouped_child_whose_parents_are_done_waits_for_its_groups_turn() {
    let t = TestQueue::new().await;
    let parent = plain("a");
    let parent_id = parent.id.clone();
    let parent_name = publish(&t, parent).await;
    let mut child = grouped("g", None);
    child.after = vec![parent_id];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();
    let lease = claim(&t, &parent_name, &Restraints::default()).await;
    t.queue.complete(lease).await.unwrap();
    let explained = explain(&t, &child_id).await;
    assert_eq!(explained.state, Some(State::Blocked));
    let (reason, line) = only(&explained);
    assert_eq!(reason, &Reason::GroupTurn { group: "g".into() });
    assert!(
        line.contains("waits for group g to reach its place"),
        "{line}"
    );
}

/// The command prints the lines, or the explanation as JSON; exit 3 when nothing is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explain_command_prints_the_lines_or_json() {
    let t = TestQueue::new().await;
    let name = publish(&t, plain("a")).await;
    let out = crate::cli::eb(&t, &["explain", &name], "");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("ready: nothing holds it back"), "{text}");
    let out = crate::cli::eb(&t, &["explain", &name, "--json"], "");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["state"], "pending");
    assert_eq!(json["reasons"], json!([{ "reason": "ready" }]));
    let out = crate::cli::eb(&t, &["explain", "no-such-id"], "");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[tokio::test]
async fn nothing_found_says_where_it_looked() {
    let t = TestQueue::new().await;
    let explained = explain(&t, "no-such-id").await;
    assert_eq!(explained.state, None);
    assert_eq!(only(&explained).0, &Reason::NotFound);
}

/// A drain at the moment `at` (a driven clock: nothing waits for time to pass) with a handler
/// that records what it ran: the names of the tasks run, in order.
async fn drain_at(t: &TestQueue, at: &ZkTime) -> Vec<String> {
    ran_at(t, at)
        .await
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// As [`drain_at`]: the name and envelope id of each task run, in order.
async fn ran_at(t: &TestQueue, at: &ZkTime) -> Vec<(String, String)> {
    let recorder = harness::Recorder::default();
    let options = harness::options(100, 1);
    process::run_at(&t.queue, &recorder, &options, at)
        .await
        .unwrap();
    let seen = recorder.seen.lock().unwrap();
    (seen.iter())
        .map(|task| (task.name.clone(), task.envelope.id.clone()))
        .collect()
}

/// The group-mate a grouped task waits behind, and what holds that one back.
fn behind(explained: &Explanation) -> (&str, Option<State>, &[Reason]) {
    match only(explained).0 {
        Reason::GroupBehind {
            holder,
            holder_state,
            holder_why,
            ..
        } => (holder, *holder_state, holder_why),
        other => panic!("{other:?}"),
    }
}

/// G1 published with a delay, then G2 in its group: G2 waits behind G1 until G1's due time
/// (the run leaves both), then runs after it.
#[tokio::test]
async fn a_grouped_task_behind_a_delayed_head_waits_for_its_due_time() {
    let t = TestQueue::new().await;
    let mut head = grouped("G", None);
    head.delay_ms = Some(3_000);
    let first = publish(&t, head).await;
    let second = publish(&t, grouped("G", None)).await;
    let now = t.now().await;
    let explained = inspect::explain(&t.queue, &now, &second).await.unwrap();
    let (holder, state, why) = behind(&explained);
    assert_eq!((holder, state), (first.as_str(), Some(State::Pending)));
    let [Reason::NotDue { due_at_ms, .. }] = why else {
        panic!("{why:?}");
    };
    let line = &explained.lines[0];
    assert!(
        line.starts_with(&format!(
            "group G: behind {first} (pending), which goes first; "
        )),
        "{line}"
    );
    assert!(line.contains("delayed by its producer"), "{line}");
    assert_eq!(drain_at(&t, &now).await, Vec::<String>::new(), "held back");

    // At G1's due time: G1 is ready, G2 still goes after it; the next run runs both in order.
    let due = ZkTime::at(*due_at_ms);
    let head = inspect::explain(&t.queue, &due, &first).await.unwrap();
    assert_eq!(only(&head).0, &Reason::Ready);
    let explained = inspect::explain(&t.queue, &due, &second).await.unwrap();
    assert_eq!(
        behind(&explained),
        (first.as_str(), Some(State::Pending), &[][..])
    );
    assert_eq!(drain_at(&t, &due).await, vec![first, second]);
}

/// A group-mate ahead whose type is paused holds its group back: the line names the pause and
/// its resume, the run leaves both, and once resumed both run in order.
#[tokio::test]
async fn a_grouped_task_behind_a_paused_group_mate_names_the_pause() {
    let t = TestQueue::new().await;
    let mut head = grouped("G", None);
    head.event_type = "billing.charge".into();
    let first = publish(&t, head).await;
    let second = publish(&t, grouped("G", None)).await;
    let billing = PauseTarget::Type("billing.charge".into());
    assert!(t.queue.pauses().pause(&billing).await.unwrap());
    let explained = explain(&t, &second).await;
    let (holder, state, why) = behind(&explained);
    assert_eq!((holder, state), (first.as_str(), Some(State::Pending)));
    assert!(
        matches!(why, [r] if paused(r) == Some(Some("billing.charge".into()))),
        "{why:?}"
    );
    assert!(
        explained.lines[0].ends_with("`resume --type billing.charge` lets it go"),
        "{}",
        explained.lines[0]
    );
    let now = t.now().await;
    assert_eq!(drain_at(&t, &now).await, Vec::<String>::new(), "held back");

    assert!(t.queue.pauses().unpause(&billing).await.unwrap());
    assert_eq!(only(&explain(&t, &first).await).0, &Reason::Ready);
    let now = t.now().await;
    assert_eq!(drain_at(&t, &now).await, vec![first, second]);
}

/// A group-mate ahead that is a place (a grouped child waiting for its parent) holds the group
/// back: the line names the place and what it waits for; once the parent is due, the run
/// takes the parent, the child into its place, then the task behind it.
#[tokio::test]
async fn a_grouped_task_behind_a_place_names_what_the_place_waits_for() {
    let t = TestQueue::new().await;
    let mut parent = plain("a");
    parent.delay_ms = Some(3_000);
    let parent_id = parent.id.clone();
    publish(&t, parent).await;
    let mut child = grouped("G", None);
    child.after = vec![parent_id.clone()];
    let child_id = child.id.clone();
    t.queue.publish_all(&[child]).await.unwrap();
    let place = t.children("tasks").await.into_iter().max().unwrap();
    let second = publish(&t, grouped("G", None)).await;
    let now = t.now().await;
    let explained = inspect::explain(&t.queue, &now, &second).await.unwrap();
    let (holder, state, why) = behind(&explained);
    assert_eq!((holder, state), (place.as_str(), None));
    assert!(
        matches!(why, [Reason::Place { task_id, .. }] if *task_id == child_id),
        "{why:?}"
    );
    let line = &explained.lines[0];
    assert!(
        line.starts_with(&format!(
            "group G: behind {place} (a place), which goes first; "
        )),
        "{line}"
    );
    assert!(line.ends_with("which waits for its parents"), "{line}");
    assert_eq!(drain_at(&t, &now).await, Vec::<String>::new(), "held back");

    // The parent (not due, it waited under `delayed/` and comes back under a new name), then
    // the child in its place, then the task behind it.
    let due = ZkTime::at(now.now_ms() + 3_000);
    let ran = ran_at(&t, &due).await;
    let ids: Vec<&str> = ran.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids[..2], [parent_id.as_str(), child_id.as_str()], "{ran:?}");
    let names: Vec<&str> = ran.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names[1..], [place.as_str(), second.as_str()], "{ran:?}");
}

/// What the HTTP status answer and the dashboard show reads a bounded stretch of a grouped
/// task's lane before it: a group-mate further back is not looked for, and the answer says so
/// instead of "ready"; `explain` reads as far as the task.
#[tokio::test]
async fn the_status_answer_reads_a_bounded_stretch_ahead_of_a_grouped_task() {
    let t = TestQueue::new().await;
    t.publish(32 * inspect::AHEAD_WINDOWS_FLAT + 10).await;
    let mut head = grouped("G", None);
    head.delay_ms = Some(600_000);
    let first = publish(&t, head).await;
    let last = publish(&t, grouped("G", None)).await;
    let (_, why) = inspect::status_and_why(&t.queue, &last).await.unwrap();
    let (reason, line) = only(&why);
    assert!(
        matches!(reason, Reason::GroupUnread { group, numbers } if group == "G" && *numbers > 0),
        "{reason:?}"
    );
    assert!(line.contains("`event-bridge explain` reads them"), "{line}");
    let explained = explain(&t, &last).await;
    assert_eq!(behind(&explained).0, first);
}
