//! Publishing and status over HTTP (the Function URL and the Vercel function): a `POST` of one
//! task or of JSON lines is published all or nothing (riding out a lost connection: what landed
//! is found, what did not is sent again) and answered `202` with each task's name
//! and status URL (a debounced item's, a child's waiting for its parents and one dead with a
//! parent ask by id, escaped); `GET ?status=<task name or id>` answers where that task is.

use std::time::Duration;

use event_bridge::inspect::{self, Status};
use event_bridge::queue::{Outcome, PublishOptions, Published};
use event_bridge::{Envelope, Error, Queue};
use platform::HttpReply;
use platform::intake::{Batch, Refused, read_batch};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::App;

/// Publishes the tasks in `body` (a request to `path`), answering within `time_left` (the
/// invocation's, less nothing: the deadline margin is kept here); the reply names each task and
/// where to ask for its status. A body that is refused publishes nothing.
pub async fn publish(app: &App, body: &[u8], path: &str, time_left: Duration) -> HttpReply {
    if let Some(signal) = platform::intake::read_signal(body) {
        return match signal {
            Ok((key, payload)) => self::signal(app, &key, &payload).await,
            Err(problem) => HttpReply::bad_request(&problem),
        };
    }
    let deadline = Instant::now() + time_left.saturating_sub(app.session.config().deadline_margin);
    let limit = app.session.config().publish_max_bytes;
    let features = app.session.queue().features().clone();
    let Batch { envelopes, lines } = match read_batch(body, limit, &features) {
        Ok(batch) => batch,
        Err(Refused::TooLarge(problem)) => return HttpReply::too_large(&problem),
        Err(Refused::Bad(problem)) => return HttpReply::bad_request(&problem),
    };
    let mut queue = app.session.queue();
    if queue.session_over() {
        queue = match app.session.renew(&queue, "the session is over").await {
            Ok(fresh) => fresh,
            Err(e) => return HttpReply::failed(&e),
        };
    }
    // A link dropped under the batch (a leader election) is ridden out within the invocation's
    // time left (less the deadline margin): once a session answers, a batch that landed is
    // found and answered, one that did not is sent again, as the library's bulk publish does.
    // Only a batch whose fate cannot be told is a 503 naming its first line.
    let renew = |stale: Queue| -> Renewed<'_> {
        Box::pin(async move { app.session.renew(&stale, "the session is over").await })
    };
    let options = PublishOptions {
        retry_for: deadline.saturating_duration_since(Instant::now()),
        renew: Some(&renew),
        deadline: Some(deadline),
    };
    let line_of = |item: usize| lines.get(item.saturating_sub(1)).copied().unwrap_or(item);
    match queue.publish_batch_with(&envelopes, &options).await {
        Ok(outcomes) => match settled(&outcomes) {
            Ok(published) => HttpReply::accepted(answer(&envelopes, &published, path)),
            Err((item, id, reason)) => in_doubt(line_of(item), &id, &reason, envelopes.len()),
        },
        Err(Error::InDoubt {
            item,
            id,
            problem,
            cut,
        }) => {
            let cut = cut.map(|cut| format!(": {cut}")).unwrap_or_default();
            in_doubt(
                line_of(item),
                &id,
                &format!("{problem}{cut}"),
                envelopes.len(),
            )
        }
        // The body read well, but its multi-op would be more than ZooKeeper takes in one
        // request (keys' paths count), or an item waits for a later one, or its id is a
        // child's that waits or died already: refused before anything was written.
        Err(Error::Unpublishable { item, problem }) => {
            let line = lines.get(item.saturating_sub(1)).copied().unwrap_or(item);
            tracing::warn!(line, tasks = envelopes.len(), %problem, "publish over HTTP refused");
            let message = format!("line {line}: {problem}");
            // Of what `check_batch` checks, only the size is left once `read_batch` read the
            // body: a line it lets through was refused for what it asks (400), not its size.
            match queue
                .all_or_nothing()
                .check_batch(&envelopes[..item.min(envelopes.len())])
            {
                Err(_) => HttpReply::too_large(&message),
                Ok(()) => HttpReply::bad_request(&message),
            }
        }
        // A batch that is unknown or sealed, a parent that is unknown (or can never complete):
        // nothing was written.
        Err(e @ (Error::Batch { .. } | Error::Parent { .. })) => {
            tracing::warn!(error = %e, tasks = envelopes.len(), "publish over HTTP refused");
            HttpReply::bad_request(&e.to_string())
        }
        Err(e) => {
            tracing::error!(error = %e, tasks = envelopes.len(), "publish over HTTP failed");
            HttpReply::failed(&e)
        }
    }
}

/// Sends signal `key`: `202` saying whether a waiting task took it or it is kept.
async fn signal(app: &App, key: &str, payload: &Value) -> HttpReply {
    let queue = app.session.queue();
    match queue.signals().signal(key, payload).await {
        Ok(sent) => HttpReply::accepted(sent.answer(key)),
        Err(e @ Error::Signal { .. }) => HttpReply::bad_request(&e.to_string()),
        Err(e) => {
            tracing::error!(error = %e, key, "signal over HTTP failed");
            HttpReply::failed(&e)
        }
    }
}

/// A queue on a new session, once it is open (what [`event_bridge::queue::Renew`] answers).
type Renewed<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = event_bridge::Result<Queue>> + Send + 'a>>;

/// What each item of a publish did, as answered; the first item whose fate is unknown (from 1,
/// its id and why) when there is one.
fn settled(outcomes: &[Outcome]) -> Result<Vec<Answer>, (usize, String, String)> {
    (outcomes.iter().enumerate())
        .map(|(i, outcome)| match outcome {
            Outcome::Published(published) => Ok(Answer::Published(published.clone())),
            Outcome::Replaced { published, by } => {
                Ok(Answer::Replaced(published.clone(), by.clone()))
            }
            Outcome::Unnamed { id, reason } => Ok(Answer::Unnamed(id.clone(), reason.clone())),
            Outcome::Unknown { id, reason } => Err((i + 1, id.clone(), reason.clone())),
        })
        .collect()
}

/// What one item of a publish is answered with.
enum Answer {
    Published(Published),
    /// Debounced, and its key found holding a later publish (this id) after a lost connection.
    Replaced(Published, String),
    /// Published (its id), its task's name unknown (why).
    Unnamed(String, String),
}

/// 503: a publish cut by a lost connection whose fate cannot be told, from line `line` (id
/// `id`) on.
fn in_doubt(line: usize, id: &str, problem: &str, tasks: usize) -> HttpReply {
    tracing::error!(
        line,
        id,
        problem,
        tasks,
        "publish over HTTP cut by a lost connection"
    );
    let message = format!("line {line} (id {id}): {problem}");
    HttpReply::error(503, "PublishInDoubt", &message)
}

/// Where the task `key` names (its name, a name it had, or its envelope id) is now, and why
/// (`why`: what `event-bridge explain` says).
pub async fn status(app: &App, key: &str) -> HttpReply {
    let found = (app.session)
        .run(|queue| async move { inspect::status_and_why(&queue, key).await })
        .await;
    match found {
        Ok((status, why)) => {
            let mut body = serde_json::to_value(&status).expect("statuses are plain data");
            body["why"] = serde_json::to_value(&why).expect("explanations are plain data");
            HttpReply::status(status != Status::NotFound, body)
        }
        Err(e) => HttpReply::failed(&e),
    }
}

/// `GET ?batch=<name>`: the batch's counts (`batch status --json`); 404 `{"state":
/// "not_found"}` when there is none, as a task's status answers for a task that is nowhere.
pub async fn batch_status(app: &App, name: &str) -> HttpReply {
    let found = (app.session)
        .run(|queue| async move { event_bridge::batch::status(&queue, name).await })
        .await;
    match found {
        Ok(status) => HttpReply::status(true, json!(status)),
        Err(Error::Batch { problem, .. }) if problem.starts_with("no such batch") => {
            let body = serde_json::to_value(Status::NotFound).expect("statuses are plain data");
            HttpReply::status(false, body)
        }
        Err(e) => HttpReply::failed(&e),
    }
}

fn answer(envelopes: &[Envelope], answers: &[Answer], path: &str) -> Value {
    let url = |task: &str| format!("{path}?status={task}");
    let by_id = |id: &str| url(&event_bridge::layout::encode_segment(id));
    let tasks: Vec<Value> = envelopes
        .iter()
        .zip(answers)
        .map(|(envelope, one)| match one {
            Answer::Published(one) => published(envelope, one, &url),
            Answer::Replaced(one, by) => {
                let mut answer = published(envelope, one, &url);
                answer["replaced_by"] = json!(by);
                answer
            }
            // Published, its task left its lane under a name nothing tells: asked for by id.
            Answer::Unnamed(id, reason) => json!({
                "task": null,
                "id": id,
                "reason": reason,
                "status_url": by_id(id),
            }),
        })
        .collect();
    json!({ "published": tasks })
}

/// The answer for an item that published `one`.
fn published(envelope: &Envelope, one: &Published, url: &dyn Fn(&str) -> String) -> Value {
    match one {
        Published::Created { id, task } => {
            json!({ "task": task, "id": id, "status_url": url(task) })
        }
        Published::Existing { id, task, state } => json!({
            "task": task,
            "id": id,
            "duplicate": true,
            "state": state,
            "idempotency_key": envelope.idempotency_key,
            "status_url": task.as_deref().map(url),
        }),
        // Asked for by id: it has no task name until it fires.
        Published::Debounced { id, key, replaced } => json!({
            "published": "debounced",
            "id": id,
            "key": key,
            "replaced": replaced,
            "status_url": url(&event_bridge::layout::encode_segment(id)),
        }),
        // Waiting for its parents, asked for by id: it has no task name until released.
        Published::Blocked { id, waiting_on } => json!({
            "published": "blocked",
            "id": id,
            "waiting_on": waiting_on,
            "status_url": url(&event_bridge::layout::encode_segment(id)),
        }),
        // Dead with a parent before it ever ran: its letter is found by its id.
        Published::Buried {
            id,
            dead_letter,
            reason,
        } => json!({
            "published": "buried",
            "id": id,
            "dead_letter": dead_letter,
            "reason": reason,
            "status_url": url(&event_bridge::layout::encode_segment(id)),
        }),
        // An outcome added later: as it serializes.
        other => json!(other),
    }
}
