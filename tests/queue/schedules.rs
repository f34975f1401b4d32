//! Recurring schedules: exactly one task per slot however many firers race or die, misfire
//! policies after downtime, time zones across daylight saving, the worker and `process` as
//! firers. Time is simulated: the firers are handed the instant to judge slots by.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DateTime;
use event_bridge::Queue;
use event_bridge::features::schedules::Schedules;
use event_bridge::recurrence::{Misfire, Schedule};
use event_bridge::schedule::{self, FireReport};
use serde_json::{Value, json};

use harness::{Recorder, TestQueue};

fn ms(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

fn every(name: &str, cron: &str, tz: &str) -> Schedule {
    Schedule {
        name: name.into(),
        cron: cron.into(),
        tz: tz.into(),
        event_type: format!("report.{name}"),
        payload: json!({ "schedule": name }),
        group: None,
        on_dead: None,
        idempotency_key_template: None,
        misfire: Misfire::Last,
        paused: false,
        last_slot_ms: None,
    }
}

/// Every pending task's `(schedule, slot)`, with how many tasks have it.
async fn slots(t: &TestQueue) -> BTreeMap<(String, String), usize> {
    let mut seen = BTreeMap::new();
    for name in t.children("tasks").await {
        let body = t.read_json(&format!("tasks/{name}")).await;
        let scheduled = &body["scheduled"];
        let key = (
            scheduled["schedule"].as_str().unwrap().to_string(),
            scheduled["slot"].as_str().unwrap().to_string(),
        );
        *seen.entry(key).or_default() += 1;
    }
    seen
}

/// Fires from `from_ms` to `to_ms` (both included) in steps of 1 to 7 simulated seconds.
/// Schedule `name` as stored now.
async fn stored(queue: &Queue, name: &str) -> event_bridge::features::schedules::StoredSchedule {
    let stored = Schedules::new(queue).schedule(name).await.unwrap();
    stored.unwrap_or_else(|| panic!("schedule {name} is stored"))
}

async fn firer(queue: Queue, from_ms: i64, to_ms: i64) -> FireReport {
    let mut total = FireReport::default();
    let mut now = from_ms;
    loop {
        let report = schedule::fire_due(&queue, now).await.expect("fire");
        total.fired += report.fired;
        total.raced += report.raced;
        if now == to_ms {
            return total;
        }
        now = (now + fastrand::i64(1_000..=7_000)).min(to_ms);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_firers_over_ten_minutes_make_one_task_per_slot_across_a_clock_change() {
    let t = TestQueue::new().await;
    // 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST. From 01:55 CET to 03:05 CEST.
    let (start, end) = (ms("2026-03-29T00:55:00Z"), ms("2026-03-29T01:05:00Z"));
    schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start)
        .await
        .unwrap();
    schedule::add(
        &t.queue,
        every("nightly", "0 3 * * *", "Europe/Berlin"),
        start,
    )
    .await
    .unwrap();
    let mut firers = Vec::new();
    for i in 0..5 {
        let queue = t.consumer(&format!("firer-{i}")).await;
        firers.push(tokio::spawn(firer(queue, start, end)));
    }
    let mut fired = 0;
    for firer in firers {
        fired += firer.await.unwrap().fired;
    }
    let seen = slots(&t).await;
    let mut expected = BTreeMap::new();
    for minute in 1..=10 {
        let slot = DateTime::from_timestamp_millis(start + minute * 60_000).unwrap();
        expected.insert(("minutely".to_string(), slot.to_rfc3339()), 1);
    }
    expected.insert(
        (
            "nightly".to_string(),
            "2026-03-29T03:00:00+02:00".to_string(),
        ),
        1,
    );
    assert_eq!(seen, expected);
    assert_eq!(fired, 11, "every slot fired by exactly one firer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firer_killed_mid_flight_loses_and_doubles_no_slot() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start)
        .await
        .unwrap();
    // The first firer is cut off at a random moment of every other look (often mid-request:
    // the cut look's writes may land or not), and its session closed after four minutes: it
    // dies, as a killed invocation does. Every minute also has looks that finish.
    let doomed = t.consumer("doomed").await;
    let (mut now, mut look) = (start, 0);
    while now < start + 4 * 60_000 {
        let cut = match look % 2 {
            0 => Duration::from_secs(30),
            _ => Duration::from_micros(fastrand::u64(0..4_000)),
        };
        let _ = tokio::time::timeout(cut, schedule::fire_due(&doomed, now)).await;
        (now, look) = (now + 5_000, look + 1);
    }
    drop(doomed);
    // A second firer goes on from where the first died.
    let survivor = t.consumer("survivor").await;
    firer(survivor, start + 3 * 60_000, start + 10 * 60_000).await;
    let seen = slots(&t).await;
    assert_eq!(
        seen.len(),
        10,
        "one task for each of the 10 slots: {seen:?}"
    );
    assert!(seen.values().all(|n| *n == 1), "no slot doubled: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_downtime_the_last_missed_slot_fires_once_or_none_under_skip() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    let last = every("hourly-last", "15 * * * *", "UTC");
    let skip = Schedule {
        misfire: Misfire::Skip,
        ..every("hourly-skip", "15 * * * *", "UTC")
    };
    let minutely = every("minutely", "* * * * *", "UTC");
    for s in [last, skip, minutely] {
        schedule::add(&t.queue, s, start).await.unwrap();
    }
    let at = |rfc: &str| schedule::fire_due(&t.queue, ms(rfc));
    assert_eq!(at("2026-11-22T10:10:00Z").await.unwrap().fired, 1); // minutely only
    // Down from 10:10 to 10:40: 10:15 was missed, and 30 minutely slots.
    let back = at("2026-11-22T10:40:30Z").await.unwrap();
    assert_eq!((back.fired, back.skipped), (2, 1), "{back:?}");
    let seen = slots(&t).await;
    let count = |name: &str| {
        seen.iter()
            .filter(|((s, _), _)| s == name)
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    assert_eq!(count("hourly-last"), 1);
    assert_eq!(count("hourly-skip"), 0);
    assert_eq!(count("minutely"), 2, "10:10, then one for the downtime");
    assert!(seen.contains_key(&("hourly-last".into(), "2026-11-22T10:15:00+00:00".into())));
    assert!(seen.contains_key(&("minutely".into(), "2026-11-22T10:40:00+00:00".into())));
    // On time again, both fire.
    let on_time = at("2026-11-22T11:15:20Z").await.unwrap();
    assert_eq!(on_time.fired, 3, "{on_time:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_schedules_make_nothing_and_resume_from_their_next_slot() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start)
        .await
        .unwrap();
    let paused = schedule::set_paused(&t.queue, "minutely", true, start)
        .await
        .unwrap()
        .unwrap();
    assert!(paused.paused);
    let during = schedule::fire_due(&t.queue, start + 5 * 60_000)
        .await
        .unwrap();
    assert_eq!(during.fired, 0);
    schedule::set_paused(&t.queue, "minutely", false, start + 5 * 60_000 + 10)
        .await
        .unwrap();
    let after = schedule::fire_due(&t.queue, start + 5 * 60_000 + 20)
        .await
        .unwrap();
    assert_eq!(after.fired, 0, "slots passed while paused make nothing");
    let next = schedule::fire_due(&t.queue, start + 6 * 60_000)
        .await
        .unwrap();
    assert_eq!(next.fired, 1);
    assert!(
        schedule::set_paused(&t.queue, "absent", true, start)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_template_stops_a_second_task_for_the_same_day() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    let keyed = Schedule {
        idempotency_key_template: Some("{name}-{date}".into()),
        ..every("daily-ish", "0 * * * *", "Europe/Berlin")
    };
    schedule::add(&t.queue, keyed, start).await.unwrap();
    let first = schedule::fire_due(&t.queue, ms("2026-11-22T11:00:05Z"))
        .await
        .unwrap();
    let second = schedule::fire_due(&t.queue, ms("2026-11-22T12:00:05Z"))
        .await
        .unwrap();
    assert_eq!((first.fired, second.fired, second.existing), (1, 0, 1));
    assert_eq!(t.children("tasks").await.len(), 1);
    let name = &t.children("tasks").await[0];
    let body: Value = t.read_json(&format!("tasks/{name}")).await;
    assert_eq!(body["idempotency_key"], "daily-ish-2026-11-22");
}

/// A queue with a yearly schedule added over a year ago (its latest slot taken then), so
/// this year's slot is due now, and no new slot falls while a test runs.
async fn yearly_added_long_ago() -> TestQueue {
    let t = TestQueue::new().await;
    let long_ago = t.now().await.now_ms() - 400 * 86_400_000;
    schedule::add(&t.queue, every("yearly", "0 0 1 1 *", "UTC"), long_ago)
        .await
        .unwrap();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_run_fires_what_is_due_and_runs_it() {
    let t = yearly_added_long_ago().await;
    let recorder = Recorder::default();
    let report = harness::run(&t.queue, &recorder, 10).await;
    assert_eq!(
        (report.schedules_fired, report.completed),
        (1, 1),
        "{report:?}"
    );
    let event_type = recorder.seen.lock().unwrap()[0].envelope.event_type.clone();
    assert_eq!(event_type, "report.yearly");
    let again = harness::run(&t.queue, &recorder, 10).await;
    assert_eq!(again.schedules_fired, 0, "the slot is taken: {again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_fires_schedules_beside_its_drains() {
    let t = yearly_added_long_ago().await;
    let recorder = Recorder::default();
    let worker = event_bridge::worker::Worker::new(t.config.clone(), recorder.clone(), 2)
        .with_idle_check(Duration::from_secs(3_600));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let join = tokio::spawn(async move { worker.run(stopped).await.expect("worker") });
    harness::poll(Duration::from_secs(30), || async { recorder.count() > 0 }).await;
    stop.send_replace(true);
    join.await.unwrap();
    assert_eq!(
        recorder.count(),
        1,
        "the worker fired the due slot and ran its task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_patterns_zones_and_names_are_refused_and_removal_takes_the_marks() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    let bad = schedule::add(&t.queue, every("bad", "0 25 * * *", "UTC"), start).await;
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("schedule bad: cron pattern")
    );
    let zone = schedule::add(
        &t.queue,
        every("zone", "0 3 * * *", "Europe/Nowhere"),
        start,
    )
    .await;
    assert!(zone.unwrap_err().to_string().contains("unknown time zone"));
    schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start)
        .await
        .unwrap();
    let twice = schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start).await;
    assert!(twice.unwrap_err().to_string().contains("exists"));
    schedule::fire_due(&t.queue, start + 60_000).await.unwrap();
    assert_eq!(
        t.children("schedules/minutely").await.len(),
        1,
        "the slot's mark"
    );
    assert!(
        Schedules::new(&t.queue)
            .remove_schedule("minutely")
            .await
            .unwrap()
    );
    assert!(t.children("schedules").await.is_empty());
    assert!(
        !Schedules::new(&t.queue)
            .remove_schedule("minutely")
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firer_with_a_stale_read_of_its_schedule_writes_nothing() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    let minutely = schedule::add(&t.queue, every("minutely", "* * * * *", "UTC"), start)
        .await
        .unwrap();
    // A firer reads the schedule, then stalls; meanwhile another takes two slots (the mark of
    // the first is gone by then).
    let stale = stored(&t.queue, "minutely").await;
    let other = t.consumer("other").await;
    for minute in 1..=2 {
        schedule::fire_due(&other, start + minute * 60_000)
            .await
            .unwrap();
    }
    let slot = start + 60_000;
    let envelope = minutely
        .envelope(&minutely.timing().unwrap(), slot)
        .unwrap();
    let taken = Schedules::new(&t.queue)
        .take_slot(&stale, slot, Some(&envelope))
        .await
        .unwrap();
    assert_eq!(taken, event_bridge::features::schedules::SlotTaken::Raced);
    assert_eq!(
        t.children("tasks").await.len(),
        2,
        "no second task for 10:01"
    );
    let now = stored(&t.queue, "minutely").await;
    assert_eq!(
        now.schedule.last_slot_ms,
        Some(start + 120_000),
        "not moved back"
    );
}

/// A payload that fits a znode (and a task) but not twice in one request.
fn big_payload() -> Value {
    json!({ "blob": "x".repeat(600_000) })
}

/// The byte count an error message gives first.
fn first_number(message: &str) -> usize {
    let digits: String = message
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no size in {message:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_whose_firing_would_be_too_large_is_refused_when_added() {
    let t = TestQueue::new().await;
    let start = ms("2026-11-22T10:00:00Z");
    let big = Schedule {
        payload: big_payload(),
        ..every("big", "* * * * *", "UTC")
    };
    let Err(refused) = schedule::add(&t.queue, big, start).await else {
        panic!("a schedule whose firing is too large was added");
    };
    let message = refused.to_string();
    assert!(message.starts_with("schedule big: "), "{message}");
    assert!(message.contains("over the 1000000-byte limit"), "{message}");
    assert!(first_number(&message) > 1_200_000, "{message}");
    assert!(
        t.children("schedules").await.is_empty(),
        "nothing stored: {message}"
    );
    // Half that payload fires: the limit is the firing's, not a guess.
    let half = Schedule {
        payload: json!({ "blob": "x".repeat(300_000) }),
        ..every("half", "* * * * *", "UTC")
    };
    schedule::add(&t.queue, half, start).await.unwrap();
    let fired = schedule::fire_due(&t.queue, start + 60_000).await.unwrap();
    assert_eq!(fired.fired, 1, "{fired:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_refuses_a_schedule_whose_firing_would_be_too_large() {
    let t = TestQueue::new().await;
    // A key of a million bytes: its template, 120 kB, passes as one argument.
    let name = "k".repeat(50);
    let template = "{name}".repeat(20_000);
    let output = std::process::Command::new(harness::binary("event-bridge"))
        .args([
            "schedule",
            "add",
            &name,
            "--cron",
            "0 3 * * *",
            "--type",
            "t",
        ])
        .args(["--idempotency-key-template", &template])
        .env("ZOOKEEPER_CONNECTION_STRING", &t.config.zookeeper)
        .env("EVENT_BRIDGE_ROOT", &t.config.root)
        .output()
        .expect("run event-bridge");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains(&format!("schedule {name}: ")), "{stderr}");
    assert!(first_number(&stderr) > 1_000_000, "{stderr}");
    assert!(t.children("schedules").await.is_empty());
}

/// A schedule whose firing cannot be sent (written by hand, or by a version that did not
/// check) fails alone: the others due fire in the same look, the report names it, and the
/// session stays up for the next look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_that_cannot_fire_does_not_stop_the_others() {
    let t = TestQueue::new().await;
    let long_ago = t.now().await.now_ms() - 400 * 86_400_000;
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let dir = format!("{}/schedules", t.config.root);
    let _ = t.raw.create(&dir, b"", &options).await;
    // Sorted first, so it is looked at before the one that can fire.
    let stuck = Schedule {
        payload: big_payload(),
        last_slot_ms: Some(long_ago),
        ..every("a-stuck", "0 0 1 1 *", "UTC")
    };
    let data = serde_json::to_vec(&stuck).unwrap();
    t.raw
        .create(&format!("{dir}/a-stuck"), &data, &options)
        .await
        .unwrap();
    schedule::add(&t.queue, every("b-yearly", "0 0 1 1 *", "UTC"), long_ago)
        .await
        .unwrap();
    let now = t.now().await.now_ms();
    let report = schedule::fire_due(&t.queue, now)
        .await
        .expect("one schedule's failure is not the look's");
    assert_eq!(report.fired, 1, "{report:?}");
    let [failed] = &report.failed[..] else {
        panic!("{report:?}")
    };
    assert_eq!(failed.schedule, "a-stuck");
    assert!(failed.error.contains("bytes"), "{}", failed.error);
    let seen = slots(&t).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen.keys().all(|(s, _)| s == "b-yearly"), "{seen:?}");
    // Nothing of the stuck one was written, and the session is still up.
    assert_eq!(t.children("schedules/a-stuck").await.len(), 0);
    let again = schedule::fire_due(&t.queue, now).await.unwrap();
    assert_eq!((again.fired, again.failed.len()), (0, 1), "{again:?}");
    // A run's report counts it too.
    let run = harness::run(&t.queue, &harness::Recorder::default(), 10).await;
    assert_eq!(
        (run.schedules_fired, run.schedules_failed),
        (0, 1),
        "{run:?}"
    );
}
