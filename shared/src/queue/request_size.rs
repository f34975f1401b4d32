//! How much of a request an ending's extra writes may fill: completions whose features write
//! large znodes (completion records with results near their limit) go out as several
//! multi-ops, each within ZooKeeper's request limit.

/// The most bytes of features' writes (and batch tallies) one completion multi-op carries.
/// With the rest of up to 32 completions (paths, keys of up to 4 KiB written twice) it stays
/// well under ZooKeeper's 1 MiB `jute.maxbuffer`: eight completion records with results at the
/// 64 KiB limit.
pub(super) const WRITE_BYTES_PER_REQUEST: usize = 512 * 1024;

/// `items` in order, in runs whose `bytes` add up to at most [`WRITE_BYTES_PER_REQUEST`]
/// (an item over it alone makes a run of one).
pub(super) fn within_request<T>(items: Vec<T>, bytes: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut runs: Vec<Vec<T>> = Vec::new();
    let mut total = 0;
    for item in items {
        let size = bytes(&item);
        match runs.last_mut() {
            Some(run) if total + size <= WRITE_BYTES_PER_REQUEST => {
                total += size;
                run.push(item);
            }
            _ => {
                total = size;
                runs.push(vec![item]);
            }
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_split_into_runs_within_a_request() {
        const K: usize = 1024;
        for (sizes, runs) in [
            (vec![], vec![]),
            (vec![0; 32], vec![32]),
            (vec![66 * K; 32], vec![7, 7, 7, 7, 4]),
            (vec![600 * K, 1, 1], vec![1, 2]),
            (vec![1, 600 * K, 1], vec![1, 1, 1]),
            (vec![256 * K, 256 * K, 1], vec![2, 1]),
        ] {
            let split = within_request(sizes.clone(), |s| *s);
            let lengths: Vec<usize> = split.iter().map(Vec::len).collect();
            assert_eq!(lengths, runs, "{sizes:?}");
            assert_eq!(split.concat(), sizes, "order and every item kept");
        }
    }
}
