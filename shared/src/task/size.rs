//! The size limit a task body must keep to.

use super::Envelope;

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

/// Refuses `envelope` when its body would be over [`MAX_BODY_BYTES`], saying how large it is;
/// measured as it is written out, without keeping what is written.
pub fn check_envelope_size(envelope: &Envelope) -> Result<(), String> {
    let mut counted = Counted(0);
    serde_json::to_writer(&mut counted, envelope)
        .map_err(|e| format!("the task is not serializable: {e}"))?;
    if counted.0 > MAX_BODY_BYTES {
        return Err(format!(
            "the task is {} bytes as JSON, over the {MAX_BODY_BYTES} a task may be (ZooKeeper's \
             znode limit): put large data elsewhere and a reference in the payload",
            counted.0
        ));
    }
    Ok(())
}

/// A writer that only counts what it is given.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_envelope_is_measured_as_it_is_written() {
        let fits = Envelope::new("a", json!("x".repeat(MAX_BODY_BYTES - 1_000)));
        assert_eq!(check_envelope_size(&fits), Ok(()));
        let over = Envelope::new("a", json!("x".repeat(MAX_BODY_BYTES)));
        let size = serde_json::to_vec(&over).unwrap().len();
        let problem = check_envelope_size(&over).unwrap_err();
        assert!(
            problem.starts_with(&format!(
                "the task is {size} bytes as JSON, over the 1000000"
            )),
            "{problem}"
        );
    }
}
