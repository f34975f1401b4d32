//! A publish cut by a leader election: `event-bridge publish -f -` of a few hundred lines
//! (every lane: normal, high, low, two key lanes, and keyed lines) on a three-server ensemble,
//! its leader SIGKILLed while the publish is in flight. The command is connected to the leader
//! through a [`Link`] that lets half the creates through, loses the answers of most of them,
//! and holds the rest back, so the kill always catches creates that landed unanswered and
//! creates that never left, however fast the machine. The command must find what landed, send
//! the rest once a session is back, print one answer per line (in order), and exit 0, with
//! every line published exactly once.
//!
//! The tests after those put a fault at an exact step of a publish on the test ZooKeeper
//! (standalone), through a [`Tap`]: an answer lost, a request refused or held while the test
//! moves a task, so that each way a task can be missed or sent twice is met every run.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use event_bridge::queue::{Outcome, PublishOptions, Published, Renew};
use event_bridge::{Envelope, Queue};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use zookeeper_client as zk;

use crate::ensemble::Ensemble;
use crate::link::{Aim, Fault, Link, Tap};
use crate::scratch::Scratch;
use crate::tree::Tree;

/// Lines published; the creates the link lets through, and the create from which it loses
/// the answers.
const LINES: usize = 300;
const PASS: usize = 150;
const HOLD_REPLIES_FROM: usize = 40;
/// The last lines carry idempotency keys (their keyed runs go after the plain creates).
const KEYED: usize = 12;
/// Hang guards, not speed claims.
const GUARD: Duration = Duration::from_secs(120);

/// An ensemble whose leader a publish reaches through a [`Link`], and a look at its lanes.
struct Cut {
    // Dropped last: the servers, then the scratch directory.
    reader: Reader,
    link: Link,
    leader: usize,
    connection: String,
    tree: Tree,
    ensemble: Ensemble,
    _scratch: Scratch,
}

impl Cut {
    /// The link lets `pass` task writes through, and loses the answers from the
    /// `hold_replies_from`th on.
    async fn start(pass: usize, hold_replies_from: usize) -> Self {
        let scratch = Scratch::new();
        let ensemble = Ensemble::start(&scratch).await;
        let tree = Tree::create(&ensemble.hosts()).await;
        let leader = ensemble.leader().await.expect("a leader serves");
        let (first, all) = (ensemble.port(leader), ensemble.ports());
        let link = Link::start(first, all, pass, hold_replies_from).await;
        let zookeeper = &tree.config.zookeeper;
        let chroot = &zookeeper[zookeeper.find('/').expect("a chroot")..];
        let connection = format!("{}{chroot}", link.address);
        let reader = Reader::connect(&tree).await;
        Cut {
            reader,
            link,
            leader,
            connection,
            tree,
            ensemble,
            _scratch: scratch,
        }
    }

    /// `event-bridge publish -f -` through the link, `lines` written to its stdin.
    fn publish(&self, lines: &[Value]) -> Publisher {
        self.publish_with(lines, &[])
    }

    /// As [`Cut::publish`], with more environment variables.
    fn publish_with(&self, lines: &[Value], env: &[(&str, &str)]) -> Publisher {
        let mut command = Command::new(harness::binary("event-bridge"))
            .args(["publish", "-f", "-"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("ZOOKEEPER_CONNECTION_STRING", &self.connection)
            .env("ZOOKEEPER_SESSION_TIMEOUT_MS", "10000")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start event-bridge");
        let mut stdin = command.stdin.take().expect("stdin");
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        tokio::spawn(async move {
            stdin
                .write_all(input.as_bytes())
                .await
                .expect("write the lines");
        });
        let stdout = command.stdout.take().expect("stdout");
        let stderr = command.stderr.take().expect("stderr");
        let answers = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut all = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                all.push(line);
            }
            all
        });
        let errors = tokio::spawn(async move {
            let mut text = String::new();
            let mut stderr = BufReader::new(stderr);
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
            text
        });
        Publisher {
            command,
            answers,
            errors,
        }
    }

    /// Once the link let its writes through and `landed` tasks are in the lanes: the leader
    /// SIGKILLed (the two others elect a new one).
    async fn kill_leader_once(&self, landed: usize) {
        self.kill_leader_after(landed, Duration::ZERO).await;
    }

    /// As [`Cut::kill_leader_once`], `wait` later.
    async fn kill_leader_after(&self, landed: usize, wait: Duration) {
        within(self.link.passed()).await;
        until(|| async { self.reader.tasks().await.len() >= landed }).await;
        let why = "the leader dies this long after the answers stopped";
        harness::real_time(wait, why).await;
        self.ensemble.kill(self.leader);
    }

    /// That the kill cut the publish's connection (with answers in flight: held from before).
    fn assert_cut(&self) {
        assert!(
            self.link.server_ended(),
            "the leader's kill ended the connection"
        );
    }
}

/// The `event-bridge publish` of a test.
struct Publisher {
    command: tokio::process::Child,
    answers: tokio::task::JoinHandle<Vec<String>>,
    errors: tokio::task::JoinHandle<String>,
}

impl Publisher {
    /// Its exit status, stdout's lines and stderr, once it ended.
    async fn end(mut self) -> (std::process::ExitStatus, Vec<String>, String) {
        let status = within(self.command.wait()).await.expect("event-bridge ran");
        let answers = self.answers.await.expect("stdout read");
        let errors = self.errors.await.expect("stderr read");
        eprintln!("the publish said on stderr:\n{errors}");
        (status, answers, errors)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_cut_by_a_leader_kill_finds_what_landed_and_sends_the_rest_once() {
    let cut = Cut::start(PASS, HOLD_REPLIES_FROM).await;
    let lines: Vec<Value> = (0..LINES).map(line).collect();
    let publisher = cut.publish(&lines);
    // The creates let through have landed, most of their answers lost: the leader dies.
    cut.kill_leader_once(PASS).await;
    check_every_line_once(&cut, publisher).await;
}

/// As above, the kill coming long after the answers stopped: longer than the client waits
/// for a silent connection (its connection timeout, 1 s here). The pings the link lets
/// through keep the connection up, so it is still the kill that cuts it, however slow the
/// machine, and the outcome is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_cut_by_a_late_leader_kill_is_cut_by_the_kill_and_finishes_alike() {
    let cut = Cut::start(PASS, HOLD_REPLIES_FROM).await;
    let lines: Vec<Value> = (0..LINES).map(line).collect();
    let publisher = cut.publish_with(&lines, &[("ZOOKEEPER_CONNECT_TIMEOUT_MS", "1000")]);
    cut.kill_leader_after(PASS, Duration::from_secs(3)).await;
    check_every_line_once(&cut, publisher).await;
}

/// The publish ended with exit 0, every line published once and answered once, in order.
async fn check_every_line_once(cut: &Cut, publisher: Publisher) {
    let (status, answers, errors) = publisher.end().await;
    cut.assert_cut();
    assert!(
        cut.link.requests_held() > 0,
        "creates had not left at the kill"
    );
    assert!(
        status.success(),
        "exit {status}, {} answers; stderr:\n{errors}",
        answers.len()
    );

    // Every line exactly once, across the lanes, by id and by payload.
    let tasks = cut.reader.tasks().await;
    let mut by_n: HashMap<u64, Vec<&Task>> = HashMap::new();
    for task in &tasks {
        by_n.entry(task.n).or_default().push(task);
    }
    let twins: Vec<_> = by_n.iter().filter(|(_, t)| t.len() > 1).collect();
    assert!(twins.is_empty(), "published twice: {twins:?}");
    let lost: Vec<usize> = (0..LINES)
        .filter(|n| !by_n.contains_key(&(*n as u64)))
        .collect();
    assert!(lost.is_empty(), "never published: lines {lost:?}");
    assert_eq!(tasks.len(), LINES);
    for task in &tasks {
        assert_eq!(task.lane, lane_of(task.n as usize), "{task:?}");
    }

    // One answer per line, in the lines' order, naming the task that line made.
    assert_eq!(answers.len(), LINES, "stderr:\n{errors}");
    let by_name: HashMap<&str, &Task> = tasks.iter().map(|t| (t.name.as_str(), t)).collect();
    for (n, answer) in answers.iter().enumerate() {
        let answer: Value = serde_json::from_str(answer).expect("an answer is JSON");
        let name = answer["task"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"));
        let task = by_name
            .get(name)
            .unwrap_or_else(|| panic!("{answer}: no such task"));
        assert_eq!(task.n, n as u64, "answer {n} names {name}");
        assert_eq!(answer["id"].as_str(), Some(task.id.as_str()), "{answer}");
        assert!(answer.get("duplicate").is_none(), "{answer}");
    }
}

/// Lines whose answers were lost, and whose tasks left their lane before the publish could
/// look for them (a consumer took and completed them, keeping no record). One was sent before
/// a line found landed: ZooKeeper applies a session's requests in order, so it landed too, at
/// the one number that went missing between them, and it is answered so. The last one that
/// landed has nothing after it to tell: whether it landed cannot be told. The publish says so
/// for that line, publishes the lines after it (which never left), and exits 1 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_that_may_have_run_already_is_named_and_nothing_is_published_twice() {
    // Four creates land, every answer lost; the two lines after them never leave.
    let cut = Cut::start(4, 1).await;
    let lines: Vec<Value> = (0..6).map(|n| json!({"payload": {"n": n}})).collect();
    let publisher = cut.publish(&lines);
    within(cut.link.passed()).await;
    let landed = until(|| async {
        let tasks = cut.reader.tasks().await;
        (tasks.len() == 4).then_some(tasks)
    })
    .await;
    // Lines 2 and 4 are completed, leaving no trace: then the leader dies.
    let task_of = |n: u64| landed.iter().find(|t| t.n == n).expect("landed");
    let (second, fourth) = (task_of(1), task_of(3));
    cut.reader.delete(second).await;
    cut.reader.delete(fourth).await;
    cut.kill_leader_once(2).await;
    let (status, answers, errors) = publisher.end().await;
    cut.assert_cut();
    assert_eq!(status.code(), Some(1), "stderr:\n{errors}");
    assert!(
        errors.contains("line 4 (id ") && errors.contains("cannot tell whether it was published"),
        "{errors}"
    );
    let answers: Vec<Value> = (answers.iter())
        .map(|a| serde_json::from_str(a).expect("JSON"))
        .collect();
    assert_eq!(answers.len(), 6, "{answers:?}");
    assert_eq!(answers[1]["task"].as_str(), Some(second.name.as_str()));
    assert_eq!(answers[1]["id"].as_str(), Some(second.id.as_str()));
    assert_eq!(answers[3]["published"], "unknown", "{answers:?}");
    assert_eq!(answers[3]["line"], 4, "{answers:?}");
    assert_eq!(answers[3]["id"].as_str(), Some(fourth.id.as_str()));
    // The others once each; lines 2 and 4 never sent again.
    let tasks = cut.reader.tasks().await;
    let mut ns: Vec<u64> = tasks.iter().map(|t| t.n).collect();
    ns.sort_unstable();
    assert_eq!(ns, [0, 2, 4, 5], "{tasks:?}");
    for n in [0, 2, 4, 5] {
        let task = tasks.iter().find(|t| t.n == n as u64).expect("published");
        assert_eq!(answers[n]["task"].as_str(), Some(task.name.as_str()));
    }
}

/// The HTTP publish (all or nothing, one multi-op) cut by a leader kill after its multi-op
/// landed, its answer lost: it finds the batch and answers 202 with each task, as the CLI and
/// the library's bulk publish do; nothing is published twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_publish_cut_by_a_leader_kill_answers_what_landed() {
    // The batch's multi-op lands, its answer lost; whatever follows is held back.
    let cut = Cut::start(1, 1).await;
    let mut config = cut.tree.config.clone();
    config.zookeeper = cut.connection.clone();
    let app = process_events::App::open(config, "lambda")
        .await
        .expect("the function starts");
    let body: String = (0..20)
        .map(|n| format!("{}\n", json!({"type": "chaos.cut", "payload": {"n": n}})))
        .collect();
    let (reply, ()) = tokio::join!(
        within(process_events::intake::publish(
            &app,
            body.as_bytes(),
            "/",
            GUARD
        )),
        cut.kill_leader_once(20)
    );
    cut.assert_cut();
    assert_eq!(reply.status, 202, "{}", reply.body);
    let published = reply.body["published"].as_array().expect("answers");
    let tasks = cut.reader.tasks().await;
    assert_eq!(tasks.len(), 20, "{tasks:?}");
    assert_eq!(published.len(), 20);
    for (n, answer) in published.iter().enumerate() {
        let task = tasks.iter().find(|t| t.n == n as u64).expect("published");
        assert_eq!(
            answer["task"].as_str(),
            Some(task.name.as_str()),
            "{answer}"
        );
        assert_eq!(answer["id"].as_str(), Some(task.id.as_str()), "{answer}");
    }
}

/// Line `n`: its lane by `n` (see [`lane_of`]); the last [`KEYED`] carry idempotency keys.
fn line(n: usize) -> Value {
    let mut line = json!({"type": "chaos.cut", "payload": {"n": n}});
    match n % 5 {
        1 => line["priority"] = json!("high"),
        2 => line["priority"] = json!("low"),
        3 => line["concurrency_key"] = json!("tenant1"),
        4 => line["concurrency_key"] = json!("tenant2"),
        _ => {}
    }
    if n >= LINES - KEYED {
        line["idempotency_key"] = json!(format!("cut-{n}"));
    }
    line
}

/// The lane line `n`'s task is in, below the root.
fn lane_of(n: usize) -> String {
    match n % 5 {
        1 => "lanes/high".into(),
        2 => "lanes/low".into(),
        3 => "lanes/keys/tenant1".into(),
        4 => "lanes/keys/tenant2".into(),
        _ => "tasks".into(),
    }
}

/// A task as read from its lane.
#[derive(Debug)]
struct Task {
    lane: String,
    name: String,
    id: String,
    n: u64,
}

/// Reads the lanes through a server of the ensemble, after a `sync`.
struct Reader {
    client: zk::Client,
    root: String,
}

impl Reader {
    async fn connect(tree: &Tree) -> Self {
        let client = event_bridge::session::connect(&tree.config)
            .await
            .expect("connect to the ensemble");
        Reader {
            client,
            root: tree.config.root.clone(),
        }
    }

    /// Every task in every lane (retrying while the ensemble elects a leader).
    async fn tasks(&self) -> Vec<Task> {
        until(|| async { self.read().await.ok() }).await
    }

    /// Deletes `task`, as a consumer completing it without a record does.
    async fn delete(&self, task: &Task) {
        let path = format!("{}/{}/{}", self.root, task.lane, task.name);
        self.client
            .delete(&path, None)
            .await
            .expect("delete the task");
    }

    async fn read(&self) -> Result<Vec<Task>, zk::Error> {
        self.client.sync(&self.root).await?;
        let keys = format!("{}/lanes/keys", self.root);
        let mut lanes = vec!["tasks".to_string(), "lanes/high".into(), "lanes/low".into()];
        match self.client.list_children(&keys).await {
            Ok(names) => lanes.extend(names.into_iter().map(|k| format!("lanes/keys/{k}"))),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
        let mut tasks = Vec::new();
        for lane in lanes {
            let path = format!("{}/{lane}", self.root);
            let names = match self.client.list_children(&path).await {
                Ok(names) => names,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(e),
            };
            for name in names {
                let (data, _) = self.client.get_data(&format!("{path}/{name}")).await?;
                let body: Value = serde_json::from_slice(&data).unwrap_or_default();
                tasks.push(Task {
                    lane: lane.clone(),
                    name,
                    id: body["id"].as_str().unwrap_or_default().to_string(),
                    n: body["payload"]["n"].as_u64().unwrap_or(u64::MAX),
                });
            }
        }
        Ok(tasks)
    }
}

pub(crate) async fn within<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, work)
        .await
        .expect("hang guard: nothing happened for two minutes")
}

/// Looks with `check` until it finds what it waits for (see [`harness::poll`]), within
/// [`GUARD`].
async fn until<L, F>(check: impl FnMut() -> F) -> L::Found
where
    L: harness::wait::Look,
    F: std::future::Future<Output = L>,
{
    harness::poll(GUARD, check)
        .await
        .expect("hang guard: nothing happened for two minutes")
}

/// The library's bulk publish whose session ends while its answers are lost: it goes on on a
/// new session (from `renew`, as the CLI's and the functions' sessions give one), finds what
/// landed, sends the rest, and hands every outcome on in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_publish_whose_session_ended_goes_on_on_a_new_one() {
    // Twenty creates land, every answer lost; ten never leave.
    let cut = Cut::start(20, 1).await;
    let mut config = cut.tree.config.clone();
    config.zookeeper = cut.connection.clone();
    let connect = || async {
        let client = event_bridge::session::connect(&config)
            .await
            .expect("connect through the link");
        Queue::new(client, &config, "chaos-cut")
    };
    let queue = connect().await;
    let renew = |_stale: Queue| -> BoxFuture<'_, event_bridge::Result<Queue>> {
        Box::pin(async { Ok(connect().await) })
    };
    let renew: &Renew = &renew;
    let sent: Vec<Envelope> = (0..30)
        .map(|n| Envelope::new("chaos.cut", json!({ "n": n })))
        .collect();
    let publish = async {
        let options = PublishOptions {
            retry_for: Duration::from_secs(60),
            renew: Some(renew),
            ..PublishOptions::default()
        };
        let mut order = Vec::new();
        let outcomes = (queue.publish_each(&sent, &options, |i, _| order.push(i))).await;
        (outcomes, order)
    };
    let end = async {
        within(cut.link.passed()).await;
        until(|| async { cut.reader.tasks().await.len() >= 20 }).await;
        end_session(queue.session(), &cut.ensemble.hosts()).await;
    };
    let ((outcomes, order), ()) = within(async { tokio::join!(publish, end) }).await;
    cut.assert_cut();
    assert!(queue.session_over(), "the first session ended");
    assert_eq!(order, (0..30).collect::<Vec<_>>(), "handed on in order");
    let outcomes = outcomes.expect("published");
    let tasks = cut.reader.tasks().await;
    assert_eq!(tasks.len(), 30, "{tasks:?}");
    for (n, outcome) in outcomes.iter().enumerate() {
        let Outcome::Published(Published::Created { id, task }) = outcome else {
            panic!("{outcome:?}");
        };
        let found = tasks.iter().find(|t| t.n == n as u64).expect("published");
        assert_eq!((id, task), (&found.id, &found.name));
    }
}

/// Ends `session` on the servers at `hosts`, as an expiry does: a second client joins it and
/// closes it; returns once joining again fails.
async fn end_session(session: &zk::SessionInfo, hosts: &str) {
    until(|| async {
        let twin = zk::Client::connector()
            .with_session(session.clone())
            .with_connection_timeout(Duration::from_millis(500))
            .connect(hosts)
            .await;
        // Joined: closing it on drop; refused: the session is over.
        twin.is_err()
    })
    .await;
}

// Faults at an exact step, on the test ZooKeeper: a publish through a [`Tap`] whose answer is
// lost (or refused), and what happens to its tasks meanwhile, done on a session of the test's
// own. Each of these failed before the fix it names.

/// A queue in a chroot of its own on the test ZooKeeper, and one on the same chroot reached
/// through a [`Tap`].
pub(crate) struct Tapped {
    pub(crate) t: harness::TestQueue,
    pub(crate) tap: Tap,
    /// The config through the tap.
    pub(crate) config: event_bridge::Config,
    pub(crate) queue: Queue,
}

impl Tapped {
    pub(crate) async fn start() -> Self {
        Self::with(|_| {}).await
    }

    pub(crate) async fn with(change: impl FnOnce(&mut event_bridge::Config)) -> Self {
        let t = harness::TestQueue::with(change).await;
        let tap = Tap::start(harness::zk_address()).await;
        let mut config = t.config.clone();
        let chroot = &config.zookeeper[config.zookeeper.find('/').expect("a chroot")..];
        config.zookeeper = format!("{}{chroot}", tap.address);
        let client = event_bridge::session::connect(&config)
            .await
            .expect("connect through the tap");
        let queue = Queue::new(client, &config, "tapped");
        Tapped {
            t,
            tap,
            config,
            queue,
        }
    }

    /// `publish_each` of `envelopes` through the tap, on a task of its own.
    fn publish(
        &self,
        envelopes: Vec<Envelope>,
        retry_for: Duration,
    ) -> tokio::task::JoinHandle<event_bridge::Result<Vec<Outcome>>> {
        let queue = self.queue.clone();
        tokio::spawn(async move {
            let options = PublishOptions {
                retry_for,
                ..PublishOptions::default()
            };
            queue.publish_each(&envelopes, &options, |_, _| {}).await
        })
    }

    /// The tasks of `lane` (below the root: `tasks`, `lanes/high`) with their ids.
    async fn lane(&self, lane: &str) -> Vec<(String, String)> {
        let mut tasks = Vec::new();
        for name in self.t.children(lane).await {
            let body = self.t.read_json(&format!("{lane}/{name}")).await;
            tasks.push((name, body["id"].as_str().unwrap_or_default().to_string()));
        }
        tasks
    }

    /// Waits until `lane` holds `n` tasks.
    async fn until_lane_holds(&self, lane: &str, n: usize) -> Vec<(String, String)> {
        until(|| async {
            let tasks = self.lane(lane).await;
            (tasks.len() >= n).then_some(tasks)
        })
        .await
    }

    /// Whether the znode at `path` (below the root) exists.
    pub(crate) async fn exists(&self, path: &str) -> bool {
        let full = format!("{}/{path}", self.t.config.root);
        self.t.raw.check_stat(&full).await.expect("stat").is_some()
    }

    async fn delete(&self, path: &str) {
        let full = format!("{}/{path}", self.t.config.root);
        self.t.raw.delete(&full, None).await.expect("delete");
    }
}

fn debounced(key: &str, period_ms: u64) -> Envelope {
    let mut envelope = Envelope::new("cut.debounced", json!({}));
    envelope.debounce = Some(event_bridge::task::Debounce {
        key: key.to_string(),
        period_ms,
        max_ms: None,
    });
    envelope
}

fn the_outcome(outcomes: event_bridge::Result<Vec<Outcome>>) -> Outcome {
    let mut outcomes = outcomes.expect("published");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    outcomes.remove(0)
}

/// Item 1: a debounced publish whose answer was lost fires between the publish's reads. Its
/// key is read first, then its lane, so it is found in one or the other; read the other way
/// round, it was in neither, sent again, and pending twice.
#[tokio::test]
async fn a_debounced_publish_that_fires_while_its_fate_is_read_is_found_once() {
    let c = Tapped::start().await;
    let key = format!("k-{}", harness::uuid_like());
    let d = debounced(&key, 1);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let publish = c.publish(vec![d.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    // Its key's read, once the session is back, waits for the firing.
    c.tap
        .arm(Aim::naming(&format!("/debounce/{key}")), Fault::Hold);
    within(c.tap.fired()).await;
    // Due a millisecond after its publish: fired as of a second later.
    let now = c.t.now().await.now_ms() + 1_000;
    assert_eq!(
        event_bridge::features::debounce::fire_due(&c.t.queue, now)
            .await
            .expect("fire"),
        1
    );
    c.tap.release();
    let outcome = the_outcome(within(publish).await.expect("joined"));
    let tasks = c.lane("tasks").await;
    assert_eq!(tasks.len(), 1, "one task: {tasks:?}");
    assert_eq!(tasks[0].1, d.id);
    assert!(
        !c.exists(&format!("debounce/{key}")).await,
        "not pending again"
    );
    assert_eq!(
        outcome,
        Outcome::Published(Published::Created {
            id: d.id.clone(),
            task: tasks[0].0.clone()
        })
    );
}

/// Item 1: a child whose answer was lost is released to its lane (its parent completed)
/// between the publish's reads: found there, not published again.
#[tokio::test]
async fn a_child_released_while_its_fate_is_read_is_found_once() {
    let c = Tapped::start().await;
    let parent = Envelope::new("cut.parent", json!({}));
    c.t.queue
        .publish_all(std::slice::from_ref(&parent))
        .await
        .expect("the parent");
    let mut child = Envelope::new("cut.child", json!({}));
    child.after = vec![parent.id.clone()];
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let publish = c.publish(vec![child.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    c.tap
        .arm(Aim::naming(&format!("/after/{}", child.id)), Fault::Hold);
    within(c.tap.fired()).await;
    // The parent completes: the child goes to its lane.
    let recorder = harness::Recorder::default();
    harness::run(&c.t.queue, &recorder, 1).await;
    assert_eq!(recorder.count(), 1);
    c.tap.release();
    let outcome = the_outcome(within(publish).await.expect("joined"));
    let tasks = c.lane("tasks").await;
    assert_eq!(tasks.len(), 1, "the child once: {tasks:?}");
    assert_eq!(tasks[0].1, child.id);
    assert_eq!(
        outcome,
        Outcome::Published(Published::Created {
            id: child.id.clone(),
            task: tasks[0].0.clone()
        })
    );
}

/// Item 1: a grouped debounced publish whose answer was lost, withdrawn before the publish
/// looked: its key is gone, but the place it made in its lane (in its own multi-op) says it
/// landed. It is not published again, which would undo the withdrawal.
#[tokio::test]
async fn a_place_made_with_a_publish_says_it_landed() {
    let c = Tapped::start().await;
    let key = format!("k-{}", harness::uuid_like());
    let mut d = debounced(&key, 3_600_000);
    d.group = Some("g".into());
    c.tap.refuse(true);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let publish = c.publish(vec![d.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    let place = format!("debounce/{key}");
    until(|| c.exists(&place)).await;
    event_bridge::cancel::cancel(&c.t.queue, &d.id)
        .await
        .expect("withdrawn");
    c.tap.refuse(false);
    let outcome = the_outcome(within(publish).await.expect("joined"));
    assert_eq!(
        outcome,
        Outcome::Published(Published::Debounced {
            id: d.id.clone(),
            key: key.clone(),
            replaced: None
        })
    );
    assert!(
        !c.exists(&format!("debounce/{key}")).await,
        "still withdrawn"
    );
}

/// Item 2: a line that landed and went to the dead letters before the publish looked, its body
/// kept as text in the record (too deeply nested to nest once more): it is read, found to be
/// the line's, and the line is answered with its task, not sent again.
#[tokio::test]
async fn a_dead_letter_whose_body_is_kept_as_text_is_read() {
    let c = Tapped::start().await;
    let mut payload = json!(1);
    for _ in 0..255 {
        payload = json!([payload]);
    }
    let deep = Envelope::new("cut.deep", payload);
    c.tap.refuse(true);
    c.tap.arm(Aim::create(), Fault::LoseReply);
    let publish = c.publish(vec![deep.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    let landed = c.until_lane_holds("tasks", 1).await;
    event_bridge::cancel::cancel(&c.t.queue, &landed[0].0)
        .await
        .expect("cancelled");
    let record = c.t.read_json(&format!("dead/{}", landed[0].0)).await;
    assert!(record.get("body_text").is_some(), "kept as text: {record}");
    c.tap.refuse(false);
    let outcome = the_outcome(within(publish).await.expect("joined"));
    assert_eq!(
        outcome,
        Outcome::Published(Published::Created {
            id: deep.id.clone(),
            task: landed[0].0.clone()
        })
    );
    assert!(c.lane("tasks").await.is_empty(), "not published again");
}

/// Item 3: an all-or-nothing batch whose answer was lost, one of its tasks found and the other
/// gone from its lane (taken and completed, no record): the batch landed whole, so the other
/// landed too, at the one number its lane lost; nothing is sent again.
#[tokio::test]
async fn a_batch_with_one_task_found_landed_whole() {
    let c = Tapped::start().await;
    let normal = Envelope::new("cut.batch", json!({"n": 0}));
    let mut high = Envelope::new("cut.batch", json!({"n": 1}));
    high.priority = event_bridge::task::Priority::parse("high").expect("a priority");
    c.tap.refuse(true);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let queue = c.queue.clone();
    let batch = vec![normal.clone(), high.clone()];
    let publish = tokio::spawn(async move {
        let options = PublishOptions {
            retry_for: Duration::from_secs(20),
            ..PublishOptions::default()
        };
        queue.publish_batch_with(&batch, &options).await
    });
    within(c.tap.fired()).await;
    let first = c.until_lane_holds("tasks", 1).await;
    let gone = c.until_lane_holds("lanes/high", 1).await;
    c.delete(&format!("lanes/high/{}", gone[0].0)).await;
    c.tap.refuse(false);
    let outcomes = within(publish).await.expect("joined").expect("published");
    assert_eq!(
        outcomes,
        [
            Outcome::Published(Published::Created {
                id: normal.id.clone(),
                task: first[0].0.clone()
            }),
            Outcome::Published(Published::Created {
                id: high.id.clone(),
                task: gone[0].0.clone()
            }),
        ]
    );
    assert_eq!(c.lane("tasks").await.len(), 1, "nothing sent again");
    assert!(c.lane("lanes/high").await.is_empty(), "nothing sent again");
}

/// Item 4: a task that landed past the tail its lane's stat gives (a server whose numbering
/// jumped): found past it, by the head's `tail_offset` or by reading on while numbers hold
/// tasks, not sent again.
#[tokio::test]
async fn a_task_past_the_tail_the_stat_gives_is_found() {
    let c = Tapped::start().await;
    let lane = event_bridge::lane::Lane::NORMAL;
    let tasks = c.t.queue.layout().lane_tasks(&lane);
    for (ahead, offset) in [(5, None), (200, Some(300))] {
        let one = Envelope::new("cut.far", json!({}));
        c.tap.refuse(true);
        c.tap.arm(Aim::create(), Fault::LoseRequest);
        let publish = c.publish(vec![one.clone()], Duration::from_secs(20));
        within(c.tap.fired()).await;
        // It "landed" where the stat does not reach.
        let stat = c.t.raw.check_stat(&tasks).await.unwrap().unwrap();
        let tail = (stat.cversion as i64 + stat.num_children as i64) / 2;
        let name = event_bridge::layout::lane_task_name(&lane, tail + ahead);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let body = one.to_bytes().unwrap();
        c.t.raw
            .create(&format!("{tasks}/{name}"), &body, &persistent)
            .await
            .expect("the task far ahead");
        if let Some(offset) = offset {
            let head = c.t.queue.layout().lane_head(&lane);
            let data = serde_json::to_vec(&json!({"next": 0, "tail_offset": offset})).unwrap();
            match c.t.raw.create(&head, &data, &persistent).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    c.t.raw.set_data(&head, &data, None).await.expect("head");
                }
                Err(e) => panic!("head: {e}"),
            }
        }
        c.tap.refuse(false);
        let outcome = the_outcome(within(publish).await.expect("joined"));
        assert_eq!(
            outcome,
            Outcome::Published(Published::Created {
                id: one.id.clone(),
                task: name.clone()
            }),
            "{ahead} ahead"
        );
        let copies = (c.lane("tasks").await.into_iter())
            .filter(|(_, id)| *id == one.id)
            .count();
        assert_eq!(copies, 1, "not sent again");
    }
}

/// Item 5: a create the server refused (throttled) was not applied: it is sent again, even
/// when its lane lost a task meanwhile that nothing explains (which would make a create in
/// doubt unknown).
#[tokio::test]
async fn a_throttled_create_is_sent_again() {
    let c = Tapped::start().await;
    let lines: Vec<Envelope> = (0..2)
        .map(|n| Envelope::new("cut.throttled", json!({ "n": n })))
        .collect();
    // The second create waits; meanwhile another producer's task comes and goes.
    c.tap.arm(
        Aim {
            skip: 1,
            ..Aim::create()
        },
        Fault::Hold,
    );
    let publish = c.publish(lines.clone(), Duration::from_secs(20));
    within(c.tap.fired()).await;
    let other = c.t.publish(1).await;
    c.delete(&format!("tasks/{}", other[0])).await;
    c.tap.arm(Aim::create(), Fault::Throttle);
    c.tap.release();
    let outcomes = within(publish).await.expect("joined").expect("published");
    assert!(c.tap.has_fired(), "throttled");
    let tasks = c.lane("tasks").await;
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    for (line, outcome) in lines.iter().zip(&outcomes) {
        let task = tasks
            .iter()
            .find(|(_, id)| *id == line.id)
            .expect("published");
        assert_eq!(
            outcome,
            &Outcome::Published(Published::Created {
                id: line.id.clone(),
                task: task.0.clone()
            })
        );
    }
}

/// Item 6: two envelopes with one id refuse the publish (a publish in doubt looks for what
/// landed by id), naming the second, and nothing is written.
#[tokio::test]
async fn a_publish_with_an_id_twice_is_refused() {
    let t = harness::TestQueue::new().await;
    let first = Envelope::new("cut.twice", json!({"n": 0}));
    let mut second = Envelope::new("cut.twice", json!({"n": 1}));
    second.id = first.id.clone();
    let options = PublishOptions::default();
    let refused = t
        .queue
        .publish_each(&[first, second], &options, |_, _| {})
        .await
        .expect_err("refused");
    match refused {
        event_bridge::Error::Unpublishable { item, problem } => {
            assert_eq!(item, 2, "{problem}");
            assert!(problem.contains("also task 1's"), "{problem}");
        }
        other => panic!("{other}"),
    }
    assert!(t.children("tasks").await.is_empty(), "nothing written");
}

/// Item 7: a debounced publish whose answer was lost, its key holding another producer's
/// newer publish by the time the publish looks: answered as replaced, not sent again (which
/// would overwrite the newer one).
#[tokio::test]
async fn a_debounced_publish_whose_key_holds_a_newer_one_is_not_sent_again() {
    let c = Tapped::start().await;
    let key = format!("k-{}", harness::uuid_like());
    let ours = debounced(&key, 3_600_000);
    let newer = debounced(&key, 3_600_000);
    c.tap.refuse(true);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let publish = c.publish(vec![ours.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    let place = format!("debounce/{key}");
    until(|| c.exists(&place)).await;
    c.t.queue
        .publish_all(std::slice::from_ref(&newer))
        .await
        .expect("the newer publish");
    c.tap.refuse(false);
    let outcome = the_outcome(within(publish).await.expect("joined"));
    assert_eq!(
        outcome,
        Outcome::Replaced {
            published: Published::Debounced {
                id: ours.id.clone(),
                key: key.clone(),
                replaced: None
            },
            by: newer.id.clone(),
        }
    );
    let pending = c.t.read_json(&format!("debounce/{key}")).await;
    assert_eq!(
        pending["id"].as_str(),
        Some(newer.id.as_str()),
        "the newer one stays"
    );
}

/// Item 7, the other way round: a debounced publish that never reached the server, its key
/// holding an older publish (the one it was to replace): the key was not written since before
/// the publish, so it did not land, and it is sent again (it replaces the older one), rather
/// than taken as replaced and lost.
#[tokio::test]
async fn a_debounced_publish_that_never_landed_replaces_the_older_one_when_sent_again() {
    let c = Tapped::start().await;
    let key = format!("k-{}", harness::uuid_like());
    let older = debounced(&key, 3_600_000);
    c.t.queue
        .publish_all(std::slice::from_ref(&older))
        .await
        .expect("the older publish");
    let ours = debounced(&key, 3_600_000);
    c.tap.arm(Aim::multi(), Fault::LoseRequest);
    let publish = c.publish(vec![ours.clone()], Duration::from_secs(20));
    let outcome = the_outcome(within(publish).await.expect("joined"));
    assert!(c.tap.has_fired(), "its write was lost");
    assert_eq!(
        outcome,
        Outcome::Published(Published::Debounced {
            id: ours.id.clone(),
            key: key.clone(),
            replaced: Some(older.id.clone())
        })
    );
    let pending = c.t.read_json(&format!("debounce/{key}")).await;
    assert_eq!(
        pending["id"].as_str(),
        Some(ours.id.as_str()),
        "ours, the last"
    );
}

/// Item 8: an outage settled with nothing to send again ends there: a later one, in a later
/// step of the publish, has a budget of its own, not what was left of the first.
#[tokio::test]
async fn a_later_outage_has_a_budget_of_its_own() {
    let c = Tapped::start().await;
    let parent = Envelope::new("cut.parent", json!({}));
    let mut child = Envelope::new("cut.child", json!({}));
    child.after = vec![parent.id.clone()];
    let retry_for = Duration::from_secs(2);
    // The parent's answer is lost (an outage, settled: it landed).
    c.tap.arm(Aim::create(), Fault::LoseReply);
    let publish = c.publish(vec![parent.clone(), child.clone()], retry_for);
    within(c.tap.fired()).await;
    // The child goes in a step of its own: held past the first outage's budget, then its
    // answer lost too.
    c.tap.arm(Aim::multi(), Fault::Hold);
    within(c.tap.fired()).await;
    let why = "the child's step is held past the first outage's budget";
    harness::real_time(retry_for + Duration::from_millis(500), why).await;
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    c.tap.release();
    let outcomes = within(publish).await.expect("joined").expect("published");
    assert!(c.tap.has_fired(), "the child's answer was lost");
    let tasks = c.lane("tasks").await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(
        outcomes[0],
        Outcome::Published(Published::Created {
            id: parent.id.clone(),
            task: tasks[0].0.clone()
        })
    );
    assert!(
        matches!(&outcomes[1], Outcome::Published(Published::Blocked { id, .. }) if *id == child.id),
        "{outcomes:?}"
    );
}

/// Item 9: a keyed line whose answer was lost, its key never named with its task, and its task
/// gone from its lane (taken and completed, no record) before the publish looked: it landed
/// (its key names its id), under a name nothing tells. Not someone else's duplicate.
#[tokio::test]
async fn a_keyed_line_whose_key_names_it_landed_even_unnamed() {
    let c = Tapped::start().await;
    let mut keyed = Envelope::new("cut.keyed", json!({}));
    keyed.idempotency_key = Some(format!("key-{}", harness::uuid_like()));
    c.tap.refuse(true);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let publish = c.publish(vec![keyed.clone()], Duration::from_secs(20));
    within(c.tap.fired()).await;
    let landed = c.until_lane_holds("tasks", 1).await;
    c.delete(&format!("tasks/{}", landed[0].0)).await;
    c.tap.refuse(false);
    let outcome = the_outcome(within(publish).await.expect("joined"));
    match &outcome {
        Outcome::Unnamed { id, .. } => assert_eq!(*id, keyed.id),
        other => panic!("{other:?}"),
    }
    assert!(c.lane("tasks").await.is_empty(), "not sent again");
}

/// Item 10: the HTTP publish rides out a lost connection within the invocation's time left,
/// not the run's whole budget: with no session back, it answers 503 by then.
#[tokio::test]
async fn an_http_publish_answers_within_the_time_left() {
    let c = Tapped::with(|config| {
        config.time_budget = Duration::from_secs(60);
        config.deadline_margin = Duration::from_millis(500);
    })
    .await;
    let app = process_events::App::open(c.config.clone(), "lambda")
        .await
        .expect("the function starts");
    c.tap.refuse(true);
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let body = format!("{}\n", json!({"type": "cut.http", "payload": {}}));
    let started = tokio::time::Instant::now();
    let publish =
        process_events::intake::publish(&app, body.as_bytes(), "/", Duration::from_secs(3));
    let reply = tokio::time::timeout(Duration::from_secs(15), publish)
        .await
        .expect("answered within the invocation's time, not the run's budget");
    c.tap.refuse(false);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(reply.status, 503, "{}", reply.body);
    assert!(
        reply.body.to_string().contains("PublishInDoubt"),
        "{}",
        reply.body
    );
}

/// A bulk publish large enough to pack its creates into multi-ops (600 items, some keyed)
/// whose first multi-op landed with its answer lost: once the session answers again, the
/// run's tasks are found where they landed, the rest sent once, and every item answered with
/// the task that has its id, in order.
#[tokio::test]
async fn a_packed_publish_whose_multi_op_answer_was_lost_lands_each_task_once() {
    let c = Tapped::start().await;
    c.tap.arm(Aim::multi(), Fault::LoseReply);
    let envelopes: Vec<Envelope> = (0..600)
        .map(|n| {
            let mut envelope = Envelope::new("cut.packed", json!({ "n": n }));
            if n % 7 == 0 {
                envelope.idempotency_key = Some(format!("packed-{n}"));
            }
            envelope
        })
        .collect();
    let publish = c.publish(envelopes.clone(), Duration::from_secs(20));
    within(c.tap.fired()).await;
    let outcomes = within(publish).await.expect("joined").expect("published");
    let lane: HashMap<String, String> = c.lane("tasks").await.into_iter().collect();
    assert_eq!(lane.len(), envelopes.len(), "each item once");
    assert_eq!(outcomes.len(), envelopes.len());
    for (n, (outcome, envelope)) in outcomes.iter().zip(&envelopes).enumerate() {
        let Outcome::Published(Published::Created { id, task }) = outcome else {
            panic!("item {n}: {outcome:?}");
        };
        assert_eq!(id, &envelope.id, "item {n}");
        assert_eq!(lane.get(task), Some(id), "item {n} names its own task");
    }
}
