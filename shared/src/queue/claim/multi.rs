//! The claim's multi-op: what it sends, each operation tagged with what it belongs to.

use super::Take;
use crate::feature::ClaimCheck;
use crate::queue::gate::GateWrite;
use crate::queue::group_lock::LockOp;
use crate::queue::ops::{Multi, Op};

/// What an operation of a claim's multi-op belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// The check of a znode a feature's answers rest on (`paused`), at the version read (its
    /// index in the claim's checks).
    Check(usize),
    /// A gate's rewrite (its index).
    Gate(usize),
    /// The slot the tasks admitted through a gate hold (the gate's index).
    Slot(usize),
    /// A task's (its index in the takes), and which of its operations.
    Task(usize, Step),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Lock,
    Lease,
    Bump,
    Task,
}

/// The claim's multi-op for `takes` (their task and lease paths in `paths`) through `gates`,
/// whose slots are `slots` (see `shares::slots_of`): the checks of the znodes the features'
/// answers rest on (`checks`, such as `paused`, each at the version read) first, then the
/// gates' rewrites, then the slots, then each task's operations.
pub(super) fn claim_multi<'a>(
    checks: &'a [(usize, ClaimCheck)],
    gates: &'a [GateWrite],
    slots: &'a [(String, Vec<String>)],
    takes: &'a [(usize, Take)],
    paths: &'a [(String, String)],
    lease_data: &'a [u8],
) -> Multi<'a, Owner> {
    let mut multi = Multi::new();
    for (c, (_, check)) in checks.iter().enumerate() {
        multi.push(Owner::Check(c), Op::Check(&check.path, check.version));
    }
    for (g, gate) in gates.iter().enumerate() {
        let op = match gate.version {
            Some(version) => Op::Set(&gate.path, &gate.data, version),
            None => Op::Create(&gate.path, &gate.data),
        };
        multi.push(Owner::Gate(g), op);
    }
    for (g, (path, _)) in slots.iter().enumerate().filter(|(_, s)| !s.1.is_empty()) {
        multi.push(Owner::Slot(g), Op::CreateEphemeral(path, b""));
    }
    for (i, ((_, take), (task_path, lease_path))) in takes.iter().zip(paths).enumerate() {
        let step = |step| Owner::Task(i, step);
        match &take.lock {
            Some(LockOp::Create { path, data }) => {
                multi.push(step(Step::Lock), Op::Create(path, data));
            }
            Some(LockOp::TakeOver {
                path,
                data,
                version,
            }) => {
                multi.push(step(Step::Lock), Op::Set(path, data, *version));
            }
            None => {}
        }
        multi
            .push(step(Step::Lease), Op::Create(lease_path, lease_data))
            .push(step(Step::Bump), Op::Set(lease_path, lease_data, 0))
            .push(
                step(Step::Task),
                Op::Set(task_path, &take.body, take.read_version),
            );
    }
    multi
}
