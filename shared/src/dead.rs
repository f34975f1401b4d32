//! The dead letters: tasks that will not run again without an operator.

use serde_json::Value;
use zookeeper_client as zk;

use crate::layout::oldest_first;
use crate::queue::Queue;
use crate::{Error, Result};

/// Every dead-letter record, oldest task first, with its name.
pub async fn list(queue: &Queue) -> Result<Vec<(String, Value)>> {
    let dead = queue.layout().dead();
    let names = queue
        .client()
        .list_children(&dead)
        .await
        .map_err(|e| Error::zk("list", &dead, e))?;
    let names = oldest_first(names);
    let reads: Vec<_> = names
        .iter()
        .map(|n| queue.client().get_data(&queue.layout().dead_letter(n)))
        .collect();
    let mut records = Vec::with_capacity(names.len());
    for (name, read) in names
        .into_iter()
        .zip(futures::future::join_all(reads).await)
    {
        let data = match read {
            Ok((data, _)) => data,
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(Error::zk("get", queue.layout().dead_letter(&name), e)),
        };
        let record = serde_json::from_slice(&data)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&data).into()));
        records.push((name, record));
    }
    Ok(records)
}
