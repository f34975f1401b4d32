//! Unit tests of a lane's walk: what its knowledge lets the head pass.

use super::*;

fn probed(number: i64) -> Probed {
    Probed {
        number,
        name: crate::layout::task_name(number),
        read: super::super::TaskRead::Gone,
        lease: None,
    }
}

fn settled_through(walk: &LaneWalk) -> i64 {
    walk.head_after(&HeadData::default()).next
}

#[test]
fn a_listing_proves_gone_what_lies_below_and_between_its_numbers() {
    let gone = listed_gaps(&[5, 6, 9, 20], 5, 21);
    assert_eq!(gone.to_pairs(10), vec![[0, 5], [7, 9], [10, 20]]);
    assert_eq!(listed_gaps(&[], 0, 0).to_pairs(10), Vec::<[i64; 2]>::new());
    assert_eq!(listed_gaps(&[], 12, 12).to_pairs(10), vec![[0, 12]]);
    // A task created by name far past the tail (12): nothing at or past the tail is gone.
    let gone = listed_gaps(&[3, 50_000], 3, 12);
    assert_eq!(gone.to_pairs(10), vec![[0, 3], [4, 12]]);
    assert_eq!(
        listed_gaps(&[50_000], 50_000, 12).to_pairs(10),
        vec![[0, 12]]
    );
}

#[test]
fn the_head_passes_only_what_is_known_gone() {
    let mut walk = LaneWalk::new(Lane::NORMAL);
    // A window of 32 from 0 that saw tasks 3 and 7, with the tail at 10.
    walk.observe(&[probed(3), probed(7)], WINDOW, 10);
    // 0..3 were seen missing below the tail: gone. 3 and 7 are open.
    assert_eq!(settled_through(&walk), 3);
    walk.mark_gone(3);
    assert_eq!(settled_through(&walk), 7, "4..7 missing below the tail");
    walk.mark_gone(7);
    assert_eq!(settled_through(&walk), 10, "10 and on were not given yet");
}

#[test]
fn numbers_jumped_over_are_never_passed() {
    let mut walk = LaneWalk::new(Lane::NORMAL);
    walk.observe(&[probed(1)], WINDOW, 1_000);
    walk.mark_gone(1);
    walk.next = 32;
    walk.tail = 1_000;
    walk.skip(100);
    // A window seen after the jump does not settle what was jumped over...
    walk.observe(&[probed(140)], WINDOW, 1_000);
    walk.mark_gone(140);
    let head = walk.head_after(&HeadData::default());
    assert_eq!(head.next, 32);
    // ...but the head keeps it, for whoever learns what lies between.
    assert_eq!(head.gone, [[132, 164]]);
}

#[test]
fn knowledge_of_several_consumers_adds_up_in_the_head() {
    // Consumer a walked 0..32 and jumped to 96; b walked 32..96 (say, after a lost race).
    let mut a = LaneWalk::new(Lane::NORMAL);
    a.observe(&[probed(5)], WINDOW, 1_000);
    a.mark_gone(5);
    a.next = 96;
    a.observe(&[probed(100)], WINDOW, 1_000);
    let head = a.head_after(&HeadData::default());
    assert_eq!(
        (head.next, head.gone.clone()),
        (32, vec![[96, 100], [101, 128]])
    );
    let mut b = LaneWalk::new(Lane::NORMAL);
    b.next = 32;
    b.observe(&[], 64, 1_000);
    let head = b.head_after(&head);
    assert_eq!(head.next, 100, "a's open task 100 stops the head");
    assert_eq!(head.gone, [[101, 128]]);
    // A walk starting from that head passes what it knows gone without a probe.
    let mut c = LaneWalk::new(Lane::NORMAL);
    c.known = Ranges::from_pairs(&head.gone);
    c.next = 101;
    c.tail = 1_000;
    assert_eq!(c.known.reach(c.next), 128);
}
