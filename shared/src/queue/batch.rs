//! All-or-nothing publishing, for producers that send a batch over HTTP: every task of the
//! batch (with its idempotency key, when it has one) is created in one multi-op, or none is.
//! A key already taken is no error: its item is answered with the task that has it, and the
//! rest is created; a key given twice in one batch makes one task.

use std::collections::HashMap;

use zookeeper_client as zk;

use super::Queue;
use super::keys::{KeyState, KeyedWrite, Published, created_name};
use super::ops::Op;
use crate::error::{Error, Result};
use crate::task::Envelope;

/// Times a batch is tried again when a key was taken or a base path made meanwhile.
const TRIES: usize = 3;

/// What one item of a batch writes, or where its answer comes from.
enum Item {
    Plain(Vec<u8>),
    Keyed(KeyedWrite),
    /// Its key is taken by a task that existed before the batch.
    Existing(Published),
    /// Its key is that of an earlier item of the batch (its index).
    SameAs(usize),
}

impl Queue {
    /// Publishes `envelopes` in one multi-op: all of them, or (on an error) none. Each
    /// answer says whether the item made a task or met its key taken.
    pub async fn publish_batch(&self, envelopes: &[Envelope]) -> Result<Vec<Published>> {
        for _ in 0..TRIES {
            let items = self.batch_items(envelopes).await?;
            let prefix = self.layout().task_prefix();
            let mut ops = Vec::new();
            // The index in `ops` of each item's task create.
            let mut task_ops = vec![None; items.len()];
            for (i, item) in items.iter().enumerate() {
                match item {
                    Item::Plain(body) => ops.push(Op::CreateSequential(&prefix, body)),
                    Item::Keyed(write) => {
                        ops.push(Op::Create(&write.key_path, &write.unnamed));
                        ops.push(Op::CreateSequential(&prefix, &write.body));
                    }
                    Item::Existing(_) | Item::SameAs(_) => continue,
                }
                task_ops[i] = Some(ops.len() - 1);
            }
            if ops.is_empty() {
                return Ok(answers(envelopes, items, &[]));
            }
            match self.commit("publish batch", &ops).await? {
                Ok(results) => {
                    let mut names = Vec::with_capacity(items.len());
                    for (item, at) in items.iter().zip(&task_ops) {
                        let name = match at {
                            Some(at) => Some(created_name(&results, *at, &prefix)?),
                            None => None,
                        };
                        if let (Item::Keyed(write), Some(name)) = (item, &name) {
                            self.name_key(write, name).await?;
                        }
                        names.push(name);
                    }
                    return Ok(answers(envelopes, items, &names));
                }
                // A key was taken meanwhile: look at the keys again.
                Err((_, zk::Error::NodeExists)) => continue,
                Err((_, zk::Error::NoNode)) => self.ensure_paths().await?,
                Err((i, e)) => return Err(Error::zk("publish batch", ops[i].path(), e)),
            }
        }
        Err(Error::Unreadable {
            path: self.layout().keys(),
            problem: "the batch's keys kept changing while it was published; try again".into(),
        })
    }

    /// What each envelope of a batch writes, its key looked up first.
    async fn batch_items(&self, envelopes: &[Envelope]) -> Result<Vec<Item>> {
        let mut items = Vec::with_capacity(envelopes.len());
        let mut first_with: HashMap<&str, usize> = HashMap::new();
        for (i, envelope) in envelopes.iter().enumerate() {
            let Some(key) = envelope.idempotency_key.as_deref() else {
                items.push(Item::Plain(envelope.to_bytes()?));
                continue;
            };
            if let Some(first) = first_with.get(key) {
                items.push(Item::SameAs(*first));
                continue;
            }
            first_with.insert(key, i);
            let write = self.keyed_write(envelope, key)?;
            items.push(match self.existing(&write.key_path).await? {
                Some(existing) => Item::Existing(existing),
                None => Item::Keyed(write),
            });
        }
        Ok(items)
    }
}

/// Each item's answer, from the names the multi-op created (`None` for items it did not).
fn answers(envelopes: &[Envelope], items: Vec<Item>, names: &[Option<String>]) -> Vec<Published> {
    let name = |i: usize| names.get(i).cloned().flatten();
    let mut out: Vec<Published> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let answer = match item {
            Item::Plain(_) | Item::Keyed(_) => Published::Created {
                id: envelopes[i].id.clone(),
                task: name(i).unwrap_or_default(),
            },
            Item::Existing(existing) => existing,
            Item::SameAs(first) => match &out[first] {
                Published::Created { id, task } => Published::Existing {
                    id: id.clone(),
                    task: Some(task.clone()),
                    state: KeyState::Pending,
                },
                existing => existing.clone(),
            },
        };
        out.push(answer);
    }
    out
}
