//! `publish`: one task from arguments, or many from JSON lines, pipelined and streamed: a
//! window of lines at a time, so a file of any size is published in constant memory (but for
//! the ids its lines give, kept to refuse one given twice). Each task is printed as it lands.
//!
//! A line that can never be published (a field refused, a name over its limit, a body over the
//! znode limit) stops the publish before its window is sent, naming its line and why: from a
//! file nothing is published (every line is checked first), from standard input the windows
//! before it were, and every task of them printed.
//!
//! A connection lost under a window (a leader election) is ridden out for `--retry-for`:
//! once a session answers again, the lines whose answers were lost are looked for where they
//! would have landed, found ones printed, the others sent again
//! ([`Queue::publish_each`]). A line that may have landed and run already is printed with
//! `"published": "unknown"`, the publish goes on, and it exits 1 naming the first such line.
//! A line that landed under a task name nothing tells any more is printed with `"task": null`
//! and why; a debounced line whose key holds a later publish now, with `"replaced_by"`.

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal, Write};

use event_bridge::features::expiry::ExpiresAt;
use event_bridge::queue::{Outcome, PublishOptions, Published};
use event_bridge::task::Section;
use event_bridge::task::shown;
use event_bridge::{CutShort, Envelope, Error, Queue, Session};
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::lines::envelopes;
use crate::{Failure, Publish};

/// Lines published together (pipelined), at most.
const WINDOW: usize = 1_000;

pub(crate) async fn publish(session: &Session, args: Publish) -> Result<(), Failure> {
    let queue = &session.queue();
    // A session that ends under the publish is replaced, and the publish goes on.
    let renew = |stale: Queue| -> BoxFuture<'_, event_bridge::Result<Queue>> {
        Box::pin(async move { session.renew(&stale, "the session is over").await })
    };
    let options = PublishOptions {
        retry_for: args.retry_for,
        renew: Some(&renew),
        deadline: None,
    };
    let mut unknown = Unknown::default();
    if args.raw {
        let body = args.payload.unwrap_or_default();
        let name = queue.publish_raw(body.as_bytes()).await?;
        out!("{}", json!({ "task": name }));
        return Ok(());
    }
    let defaults = Defaults::of(&args, queue).await?;
    let stamp = |envelope: Envelope| defaults.stamp(envelope);
    // Without --payload or -f, a piped stdin is read as JSON lines; an empty one (a pipe
    // nothing was written to) publishes the one task from the arguments, as a terminal does.
    let implicit = args.input.is_none() && args.payload.is_none() && stdin_is_piped();
    let single = || {
        let payload: Value = serde_json::from_str(args.payload.as_deref().unwrap_or("{}"))
            .map_err(|e| format!("--payload is not JSON: {e}"))?;
        let mut envelope = Envelope::new(&args.event_type, payload);
        envelope.idempotency_key = args.idempotency_key.clone();
        let envelope = stamp(envelope);
        check_one(queue, &envelope)?;
        Ok::<_, Failure>(envelope)
    };
    let path = match (&args.input, implicit) {
        (Some(path), _) => path.clone(),
        (None, true) => "-".to_string(),
        (None, false) => {
            let one = [single()?];
            publish_window(session, &options, &one, &[], &mut unknown, After::NOTHING).await?;
            return unknown.verdict();
        }
    };
    if args.idempotency_key.is_some() && !implicit {
        return Err(keyed_lines());
    }
    // A file is read twice: every line checked before any is published, so a bad line
    // publishes nothing. Standard input can be read once only: a bad line stops it at its
    // window, after the windows before it were published (their names are printed).
    let total = match path.as_str() {
        "-" => None,
        _ => Some(check(queue, &path, &args.event_type, &stamp)?),
    };
    let keyed = args.idempotency_key.is_some();
    let lines = envelopes(&path, &args.event_type, queue.features())?;
    let publisher = Publisher {
        session,
        options: &options,
        unknown: &mut unknown,
    };
    let published = publish_lines(publisher, lines, total, keyed, &stamp).await?;
    if implicit && published == 0 {
        let one = [single()?];
        publish_window(session, &options, &one, &[], &mut unknown, After::NOTHING).await?;
        return unknown.verdict();
    }
    unknown.verdict()
}

/// What a publish of lines publishes with: the session, the options, and the items whose fate
/// is not known yet.
struct Publisher<'a, 'o> {
    session: &'a Session,
    options: &'a PublishOptions<'o>,
    unknown: &'a mut Unknown,
}

/// Publishes `lines` (`total` of them, when known: they were checked before) a window at a
/// time, each task stamped with the arguments' `stamp`, showing a progress bar; how many.
async fn publish_lines(
    Publisher {
        session,
        options,
        unknown,
    }: Publisher<'_, '_>,
    mut lines: impl Iterator<Item = Result<(usize, Envelope), String>>,
    total: Option<u64>,
    keyed: bool,
    stamp: &impl Fn(Envelope) -> Envelope,
) -> Result<usize, Failure> {
    let queue = &session.queue();
    let bar = progress_bar(total);
    let mut published = 0;
    loop {
        let (numbers, window): (Vec<usize>, Vec<Envelope>) = lines
            .by_ref()
            .take(WINDOW)
            .map(|line| line.map(|(number, envelope)| (number, stamp(envelope))))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        if window.is_empty() {
            break;
        }
        if keyed {
            return Err(keyed_lines());
        }
        if total.is_none() {
            check_window(queue, &window, &numbers)?;
        }
        let after = match (total, window.len() < WINDOW) {
            (Some(total), _) => After::Lines(total as usize - published - window.len()),
            (None, true) => After::NOTHING,
            (None, false) => After::Unread(numbers.last().copied().unwrap_or_default()),
        };
        publish_window(session, options, &window, &numbers, unknown, after).await?;
        published += window.len();
        if let Some(bar) = &bar {
            bar.inc(window.len() as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_with_message("published");
    }
    Ok(published)
}

/// The error for `--idempotency-key` with more than one task.
fn keyed_lines() -> Failure {
    "--idempotency-key is for one task (with --payload); give each JSON line its own \
     \"idempotency_key\""
        .into()
}

/// What the arguments give every task that does not say otherwise.
struct Defaults {
    debounce: Option<event_bridge::task::Debounce>,
    priority: Option<event_bridge::task::Priority>,
    group: Option<String>,
    concurrency_key: Option<String>,
    batch: Option<String>,
    after: Vec<String>,
    on_parent_dead: Option<event_bridge::task::OnParentDead>,
    traceparent: Option<String>,
    on_dead: Option<event_bridge::task::OnDead>,
    retry_at: Option<i64>,
    expires_at: Option<ExpiresAt>,
}

impl Defaults {
    /// Read from `args`; a `--delay` counts from ZooKeeper's time now.
    async fn of(args: &Publish, queue: &Queue) -> Result<Self, Failure> {
        let retry_at = match args.delay {
            Some(delay) => Some(queue.server_time().await?.now_ms() + delay.as_millis() as i64),
            None => None,
        };
        let expires_at = match args.expires_in {
            Some(span) => {
                let ms = queue.server_time().await?.now_ms() + span.as_millis() as i64;
                let at = ExpiresAt::at_ms(ms).ok_or("--expires-in is too far ahead")?;
                Some(at)
            }
            None => None,
        };
        let on_dead = match args.on_dead.as_deref() {
            Some("pause") => Some(event_bridge::task::OnDead::Pause),
            Some(_) => Some(event_bridge::task::OnDead::Continue),
            None => None,
        };
        let on_parent_dead = (args.on_parent_dead.as_deref())
            .map(event_bridge::task::OnParentDead::parse)
            .transpose()
            .map_err(Failure::from)?;
        let priority = (args.priority.as_deref())
            .map(event_bridge::task::Priority::parse)
            .transpose()
            .map_err(Failure::from)?;
        let span = |field: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| event_bridge::task::parse_span(field, t))
                .transpose()
        };
        let debounce = match &args.debounce_key {
            Some(key) => Some(event_bridge::task::Debounce {
                key: key.clone(),
                period_ms: span("debounce", &args.debounce)?.unwrap_or_default(),
                max_ms: span("debounce_max", &args.debounce_max)?,
            }),
            None => None,
        };
        Ok(Defaults {
            debounce,
            priority,
            group: args.group.clone(),
            concurrency_key: args.concurrency_key.clone(),
            batch: args.batch.clone(),
            after: args.after.clone(),
            on_parent_dead,
            traceparent: args.traceparent.clone(),
            on_dead,
            retry_at,
            expires_at,
        })
    }

    /// `envelope` with what it does not say taken from the arguments.
    fn stamp(&self, mut envelope: Envelope) -> Envelope {
        if envelope.debounce.is_none() {
            envelope.debounce = self.debounce.clone();
        }
        if envelope.priority.is_normal() {
            envelope.priority = self.priority.unwrap_or_default();
        }
        envelope.group = envelope.group.take().or_else(|| self.group.clone());
        envelope.concurrency_key =
            (envelope.concurrency_key.take()).or_else(|| self.concurrency_key.clone());
        envelope.batch = envelope.batch.take().or_else(|| self.batch.clone());
        if envelope.after.is_empty() {
            envelope.after = self.after.clone();
        }
        envelope.on_parent_dead = envelope.on_parent_dead.or(self.on_parent_dead);
        envelope.traceparent = (envelope.traceparent.take()).or_else(|| self.traceparent.clone());
        envelope.on_dead = envelope.on_dead.or(self.on_dead);
        envelope.retry_at = self.retry_at;
        if let Some(at) = self.expires_at
            && !envelope.extra.contains_key(ExpiresAt::KEY)
        {
            at.set(&mut envelope);
        }
        envelope
    }
}

/// Publishes `window` (`numbers`: its lines' numbers, none for the task of the arguments) on
/// the session's queue and prints each task's name and id as it lands; for an idempotency key
/// that was taken, the task that has it, with `"duplicate": true` and where it is; for a line
/// whose fate cannot be told (its answer lost with the connection, and it may have run
/// already), `"published": "unknown"` with the line and why, kept in `unknown`.
///
/// A connection that does not come back within the options' budget fails it, naming the first
/// line with no answer and counting every line without one: the window's, and those `after`
/// it.
async fn publish_window(
    session: &Session,
    options: &PublishOptions<'_>,
    window: &[Envelope],
    numbers: &[usize],
    unknown: &mut Unknown,
    after: After,
) -> Result<(), Failure> {
    let earlier_unknown = unknown.count;
    let line = |i: usize| numbers.get(i).copied();
    let mut written = Ok(());
    let print = |i: usize, outcome: &Outcome| {
        if written.is_err() {
            return;
        }
        if let Outcome::Unknown { id, reason } = outcome {
            unknown.note(line(i), id, reason);
        }
        written = writeln!(std::io::stdout().lock(), "{}", answer(outcome, line(i)));
    };
    let queue = session.queue();
    let published = queue.publish_each(window, options, print).await;
    written?;
    match published {
        Ok(_) => Ok(()),
        Err(Error::InDoubt {
            item,
            id,
            problem,
            cut,
        }) => {
            let at = at(line(item.saturating_sub(1)));
            let cut = cut.map_or_else(String::new, |cut| after.counted(cut, earlier_unknown));
            Err(format!("{at} (id {id}): {problem}{cut}").into())
        }
        Err(Error::Unpublishable { item, problem }) => {
            Err(format!("{}: {problem}", at(line(item.saturating_sub(1)))).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// What follows a window in the input, for a publish that stops there to count.
#[derive(Clone, Copy)]
enum After {
    /// This many lines (of a file, counted before), never sent.
    Lines(usize),
    /// Standard input, not read past this line.
    Unread(usize),
}

impl After {
    /// Nothing: the last window, or the task of the arguments.
    const NOTHING: After = After::Lines(0);

    /// A window's `cut` counted for the whole input (`earlier_unknown`: lines of the windows
    /// before it printed unknown), as the end of the message that stops the publish.
    fn counted(self, cut: CutShort, earlier_unknown: usize) -> String {
        let unknown = earlier_unknown + cut.unknown;
        match self {
            After::Lines(more) => {
                let unsent = cut.unsent + more;
                format!(": {}", CutShort { unknown, unsent })
            }
            After::Unread(line) => format!(
                ": {}, nor any line after line {line} (standard input is not read further)",
                CutShort { unknown, ..cut }
            ),
        }
    }
}

/// A publish's answer for one line (`line`, when it came from one) as printed.
fn answer(outcome: &Outcome, line: Option<usize>) -> Value {
    match outcome {
        Outcome::Published(Published::Created { id, task }) => json!({ "task": task, "id": id }),
        Outcome::Published(Published::Existing { id, task, state }) => {
            json!({ "task": task, "id": id, "duplicate": true, "state": state })
        }
        // An outcome added later: as it serializes.
        Outcome::Published(other) => json!(other),
        // Debounced, its answer lost, and its key holding a later publish now.
        Outcome::Replaced { published, by } => {
            let mut answer = json!(published);
            answer["replaced_by"] = json!(by);
            answer
        }
        // Published, under a task name that cannot be told: `status` by its id finds it.
        Outcome::Unnamed { id, reason } => json!({ "task": null, "id": id, "reason": reason }),
        Outcome::Unknown { id, reason } => {
            json!({ "published": "unknown", "id": id, "line": line, "reason": reason })
        }
    }
}

/// Where a task came from, as an error says it: its line, or the arguments.
fn at(line: Option<usize>) -> String {
    match line {
        Some(line) => format!("line {line}"),
        None => "the task".to_string(),
    }
}

/// The lines whose fate could not be told: the first, and how many.
#[derive(Default)]
struct Unknown {
    first: Option<(Option<usize>, String, String)>,
    count: usize,
}

impl Unknown {
    fn note(&mut self, line: Option<usize>, id: &str, reason: &str) {
        self.count += 1;
        self.first
            .get_or_insert_with(|| (line, id.to_string(), reason.to_string()));
    }

    /// Exit 1 naming the first line whose fate is unknown, if any.
    fn verdict(&self) -> Result<(), Failure> {
        let Some((line, id, reason)) = &self.first else {
            return Ok(());
        };
        let more = match self.count {
            1 => String::new(),
            n => format!(" ({n} lines in all, printed with \"published\": \"unknown\")"),
        };
        Err(format!(
            "{} (id {id}): cannot tell whether it was published: {reason}{more}; `event-bridge \
             status {id}` may find it: send it again only if it is not found",
            at(*line)
        )
        .into())
    }
}

/// Checks every line of file `path` before any is published (as `stamp` will make it): a
/// task, with no id an earlier line gave, within what one ZooKeeper request carries. Returns
/// how many tasks it holds. Only the ids lines give are kept: a fresh id is unique.
fn check(
    queue: &Queue,
    path: &str,
    event_type: &str,
    stamp: &dyn Fn(Envelope) -> Envelope,
) -> Result<u64, Failure> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let mut given: HashMap<String, usize> = HashMap::new();
    // Parents named by id, with the line naming them: one given at or after it is refused.
    let mut parents: Vec<(String, usize)> = Vec::new();
    let mut count = 0;
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{path}: {e}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{path}:{}", i + 1);
        let value: Value =
            serde_json::from_str(&line).map_err(|e| format!("{at}: not JSON: {e}"))?;
        let id = Envelope::id_given_in(&value).map(str::to_string);
        let envelope = (queue.features().envelope_from_item(value, Some(event_type)))
            .map_err(|e| format!("{at}: {e}"))?;
        if let Some(id) = id
            && let Some(first) = given.insert(id, i + 1)
        {
            return Err(format!("{at}: {}", repeated(&envelope.id, "line", first)).into());
        }
        let envelope = stamp(envelope);
        parents.extend(envelope.after.iter().map(|p| (p.clone(), i + 1)));
        check_one(queue, &envelope).map_err(|e| format!("{at}: {e}"))?;
        count += 1;
    }
    for (parent, line) in parents {
        if let Some(&at) = given.get(&parent).filter(|&&at| at >= line) {
            return Err(format!(
                "{path}:{line}: \"after\" names {}, the id of line {at}: a task waits only for \
                 tasks published before it, so dependencies cannot form a cycle",
                shown(&parent)
            )
            .into());
        }
    }
    Ok(count)
}

/// Checks a window of standard input before it is published (`numbers`: its lines' numbers),
/// as `check` does a file, but for ids within the window only: standard input is read once, in
/// constant memory, so the windows before a bad line's are published (and printed) already.
fn check_window(queue: &Queue, window: &[Envelope], numbers: &[usize]) -> Result<(), Failure> {
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (envelope, &n) in window.iter().zip(numbers) {
        if let Some(earlier) = ids.insert(&envelope.id, n) {
            return Err(format!("-:{n}: {}", repeated(&envelope.id, "line", earlier)).into());
        }
        check_one(queue, envelope).map_err(|e| format!("-:{n}: {e}"))?;
    }
    Ok(())
}

/// Why an id given twice is refused: `what` `first` gave it already.
fn repeated(id: &str, what: &str, first: usize) -> String {
    format!(
        "id {} is also {what} {first}'s: ids must be unique within a publish (status and \
         cancel by id would find only one task)",
        shown(id)
    )
}

/// Refuses a task whose fields are not publishable (an empty id, a name over its limit), one
/// over the znode limit (sent, the tasks pipelined around it would land and it not), and a
/// keyed task ZooKeeper would refuse before it is sent (see `AllOrNothing::check_batch`): its
/// key's path and data go with its body.
fn check_one(queue: &Queue, envelope: &Envelope) -> Result<(), String> {
    envelope.check_publishable()?;
    event_bridge::task::check_envelope_size(envelope)?;
    if envelope.idempotency_key.is_none() {
        return Ok(());
    }
    match queue
        .all_or_nothing()
        .check_batch(std::slice::from_ref(envelope))
    {
        Ok(()) => Ok(()),
        Err(Error::Unpublishable { problem, .. }) => Err(problem),
        Err(e) => Err(e.to_string()),
    }
}

/// Progress on stderr for bulk input, only when stderr is a terminal: a bar when the total is
/// known (a file), a counter otherwise (stdin).
fn progress_bar(total: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() || total == Some(1) {
        return None;
    }
    let (bar, template) = match total {
        Some(total) => (
            indicatif::ProgressBar::new(total),
            "{bar:40} {pos}/{len} tasks {per_sec} {msg}",
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            "{spinner} {pos} tasks {per_sec} {msg}",
        ),
    };
    bar.set_style(indicatif::ProgressStyle::with_template(template).expect("static template"));
    Some(bar)
}

/// Whether standard input is a pipe or a file: then `publish` without `--payload` or `-f`
/// reads JSON lines from it, as `-f -` does. A terminal, `/dev/null` (cron) or a closed
/// input keep the one task from the arguments.
#[cfg(unix)]
fn stdin_is_piped() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_file())
}

#[cfg(not(unix))]
fn stdin_is_piped() -> bool {
    !std::io::stdin().is_terminal()
}
