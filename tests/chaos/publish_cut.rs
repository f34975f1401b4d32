//! A publish cut by a leader election: `event-bridge publish -f -` of a few hundred lines
//! (every lane: normal, high, low, two key lanes, and keyed lines) on a three-server ensemble,
//! its leader SIGKILLed while the publish is in flight. The command is connected to the leader
//! through a [`Link`] that lets half the creates through, loses the answers of most of them,
//! and holds the rest back, so the kill always catches creates that landed unanswered and
//! creates that never left, however fast the machine. The command must find what landed, send
//! the rest once a session is back, print one answer per line (in order), and exit 0, with
//! every line published exactly once.

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
use crate::link::Link;
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
        let mut command = Command::new(harness::binary("event-bridge"))
            .args(["publish", "-f", "-"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("ZOOKEEPER_CONNECTION_STRING", &self.connection)
            .env("ZOOKEEPER_SESSION_TIMEOUT_MS", "10000")
            .env("RUST_LOG", "warn")
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
        within(self.link.passed()).await;
        within(async {
            while self.reader.tasks().await.len() < landed {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
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
    let landed = within(async {
        loop {
            let tasks = cut.reader.tasks().await;
            if tasks.len() == 4 {
                return tasks;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
        within(process_events::intake::publish(&app, body.as_bytes(), "/")),
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
        loop {
            match self.read().await {
                Ok(tasks) => return tasks,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
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

async fn within<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(GUARD, work)
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
        };
        let mut order = Vec::new();
        let outcomes = (queue.publish_each(&sent, &options, |i, _| order.push(i))).await;
        (outcomes, order)
    };
    let end = async {
        within(cut.link.passed()).await;
        while cut.reader.tasks().await.len() < 20 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
    loop {
        let twin = zk::Client::connector()
            .with_session(session.clone())
            .with_connection_timeout(Duration::from_millis(500))
            .connect(hosts)
            .await;
        match twin {
            Ok(twin) => drop(twin),
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
