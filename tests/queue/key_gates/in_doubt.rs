//! Gates and slots when this process cannot be sure of what it knows: a key's gate the reaper
//! deleted and a claim made again (its version starts over), and writes whose answer never
//! came (the call dropped after its request went out, as a link that drops leaves it).

use std::time::Duration;

use event_bridge::clock::ZkTime;
use event_bridge::queue::{KEY_GATE_IDLE_MS, Settled, TaskOutcome};
use event_bridge::reap;
use futures::FutureExt;

use super::{capped, claim_at, claim_together, claimed, learn_gate, publish, reads_of, slots};
use harness::TestQueue;

const GATE: &str = "concurrency/@default/tenant-a";

/// A consumer that knew a key's gate at version 0 meets it swept by the reaper and made again
/// by another consumer, at version 0 again, with that consumer's task in it: it reads the gate
/// instead of counting on what it knew, and the key stays at its cap of one.
#[tokio::test]
async fn a_gate_swept_and_made_again_is_read_before_a_claim_goes_through_it() {
    let t = TestQueue::new().await;
    let restraints = capped(1);
    let other = t.consumer("other").await;
    learn_gate(&t, &restraints).await;
    let now = t.queue.server_time().await.unwrap().now_ms();
    let later = ZkTime::at(now + 2 * KEY_GATE_IDLE_MS);
    let swept = reap::reap_at(&t.queue, &later).await.unwrap();
    assert_eq!(swept.swept.get("concurrency_keys"), Some(&1), "{swept:?}");
    let second = publish(&t, "tenant-a").await;
    claimed(claim_at(&t, &other, &second, &restraints, &later).await);
    let (_, stat) = t
        .raw
        .get_data(&format!("{}/{GATE}", t.config.root))
        .await
        .unwrap();
    assert_eq!(
        stat.version, 0,
        "the new gate has the version the old one had"
    );
    let third = publish(&t, "tenant-a").await;
    let outcome = claim_at(&t, &t.queue, &third, &restraints, &later).await;
    assert!(
        matches!(outcome, TaskOutcome::Limited { .. }),
        "the other consumer's task is in flight: {outcome:?}"
    );
}

/// A free whose answer never came landed: the next write to the slot finds it under the name
/// that free gave it, and the slot still goes with its last task.
#[tokio::test]
async fn a_free_whose_answer_never_came_is_found_under_the_name_it_gave() {
    let t = TestQueue::new().await;
    let restraints = capped(3);
    let mut names = Vec::new();
    for _ in 0..3 {
        names.push(publish(&t, "tenant-a").await);
    }
    let mut held = claim_together(&t, &names, &restraints).await;
    let shares = held[0].take_slots();
    assert!(
        t.queue.gates().free_slots(&shares).now_or_never().is_none(),
        "sent, its answer not awaited"
    );
    // A session's requests are answered in order: this one after the free.
    t.queue.server_time().await.unwrap();
    assert_eq!(slots(&t, GATE).await, [(2, names[0].clone())], "it landed");
    let settled = t.queue.complete(held.remove(1)).await.unwrap();
    assert_eq!(settled, Settled::Done);
    assert_eq!(slots(&t, GATE).await, [(1, names[0].clone())]);
    t.queue
        .gates()
        .free_slots(&held.remove(1).take_slots())
        .await;
    assert!(
        t.children(GATE).await.is_empty(),
        "the slot went with its last task"
    );
}

/// A claim whose answer never came landed, slot and all: nobody runs its tasks (their leases
/// expire), so the slot is taken back, and the key has its whole cap for other claims.
#[tokio::test]
async fn a_claim_whose_answer_never_came_gives_its_slot_back() {
    let t = TestQueue::new().await;
    let restraints = capped(2);
    // This consumer knows the gate, so its claim goes without a read.
    learn_gate(&t, &restraints).await;
    let names = [publish(&t, "tenant-a").await, publish(&t, "tenant-a").await];
    let reads = reads_of(&t, &names).await;
    let now = t.queue.server_time().await.unwrap();
    let claim_many = t.queue.claim_many(&reads, &now, &restraints);
    assert!(
        claim_many.now_or_never().is_none(),
        "sent, its answer not awaited"
    );
    t.queue.server_time().await.unwrap();
    let leases = t.children("leases").await;
    assert!(
        names.iter().all(|n| leases.contains(n)),
        "the claim landed: {leases:?}"
    );
    let freed = || async { t.children(GATE).await.is_empty() };
    if harness::poll(Duration::from_secs(30), freed)
        .await
        .is_none()
    {
        panic!(
            "the claim's slot is still held: {:?}",
            slots(&t, GATE).await
        );
    }
    let other = t.consumer("other").await;
    for _ in 0..2 {
        let name = publish(&t, "tenant-a").await;
        claimed(super::claim_by(&t, &other, &name, &restraints).await);
    }
}
