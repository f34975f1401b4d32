//! The reaper's sweep of settled markers: the children a consumer that stopped between a
//! parent's end and its children left waiting.

use crate::error::Result;
use crate::queue::Queue;
use crate::task::after::ParentEnd;

/// Markers read per request.
const READ_BATCH: usize = 64;

/// Sees to the children of every settled marker; how many it moved.
pub async fn settled_markers(queue: &Queue) -> Result<usize> {
    let root = queue.layout().dependents();
    let names = queue.children_of(&root).await?;
    let paths: Vec<String> = names.iter().map(|n| format!("{root}/{n}")).collect();
    let mut moved = 0;
    for (chunk, read_names) in paths.chunks(READ_BATCH).zip(names.chunks(READ_BATCH)) {
        let found = queue.read_paths(chunk).await?;
        for (read, name) in found.into_iter().zip(read_names) {
            let settled = read.is_some_and(|(data, _)| ParentEnd::parse(&data).is_some());
            if settled {
                let id = crate::layout::decode_segment(name);
                moved += queue.dependencies().see_to_children_of(&id).await?;
            }
        }
    }
    Ok(moved)
}
