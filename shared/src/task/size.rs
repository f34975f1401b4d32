//! The size limit a task body must keep to.

/// ZooKeeper refuses a request over `jute.maxbuffer` (1 MiB by default); leave room for the
/// envelope growing on a claim (attempts, last error).
pub const MAX_BODY_BYTES: usize = 1_000_000;

/// Refuses a body that ZooKeeper would refuse.
pub fn check_size(bytes: &[u8]) -> crate::error::Result<()> {
    if bytes.len() > MAX_BODY_BYTES {
        return Err(crate::error::Error::TooLarge {
            size: bytes.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    Ok(())
}
