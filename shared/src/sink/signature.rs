//! The two ways the HTTP sink signs a request.
//!
//! - **hmac** (the default): `X-Event-Bridge-Signature: sha256=<hex>` over
//!   `timestamp + "." + body`, keyed with the secret's UTF-8 bytes (see the HTTP sink's docs).
//! - **standard** ([Standard Webhooks](https://www.standardwebhooks.com/)): `webhook-id` (the
//!   task's envelope id, the same on every attempt), `webhook-timestamp` (seconds) and
//!   `webhook-signature: v1,<base64>` over `id + "." + timestamp + "." + body`, keyed with the
//!   bytes the secret's base64 after `whsec_` stands for, so the libraries of that spec (and
//!   our Ruby job runner) verify it as they are.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::route::SignatureScheme;
use crate::secret::Secret;

/// The headers of Standard Webhooks.
pub const WEBHOOK_ID: &str = "webhook-id";
/// When this attempt was sent: whole seconds since the Unix epoch.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// `v1,<base64>` of the HMAC over `<id>.<timestamp>.<body>`.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// How one sink signs: the scheme and the key as that scheme takes it.
#[derive(Clone)]
pub struct Signer {
    scheme: SignatureScheme,
    key: Vec<u8>,
}

impl Signer {
    /// A signer for `secret` under `scheme`; a standard secret that is not `whsec_` and
    /// base64 is refused (the route's parse refused it already).
    pub fn new(scheme: SignatureScheme, secret: &Secret) -> Result<Self, String> {
        let key = match scheme {
            SignatureScheme::Hmac => secret.expose().as_bytes().to_vec(),
            SignatureScheme::Standard => standard_key(secret.expose())?,
        };
        Ok(Signer { scheme, key })
    }

    /// The scheme it signs by.
    pub fn scheme(&self) -> SignatureScheme {
        self.scheme
    }

    /// The signature header's value for an attempt with `id` at `timestamp` over `body`.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        if self.scheme == SignatureScheme::Standard {
            mac.update(id.as_bytes());
            mac.update(b".");
        }
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        let digest = mac.finalize().into_bytes();
        match self.scheme {
            SignatureScheme::Hmac => format!("sha256={}", hex::encode(digest)),
            SignatureScheme::Standard => format!("v1,{}", BASE64.encode(digest)),
        }
    }
}

/// `sha256=` and the lowercase hex HMAC-SHA256 of `"{timestamp}.{body}"` keyed with the secret:
/// the value of `X-Event-Bridge-Signature`.
pub fn signature(secret: &Secret, timestamp: u64, body: &[u8]) -> String {
    Signer::new(SignatureScheme::Hmac, secret)
        .expect("any secret keys an HMAC")
        .sign("", timestamp, body)
}

/// The key bytes of a Standard Webhooks secret: `whsec_` and base64.
pub fn standard_key(secret: &str) -> Result<Vec<u8>, String> {
    let Some(encoded) = secret.strip_prefix("whsec_") else {
        return Err("a standard signature's secret starts with whsec_".into());
    };
    match BASE64.decode(encoded) {
        Ok(key) if !key.is_empty() => Ok(key),
        _ => Err("a standard signature's secret is whsec_ and base64 of its key".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standard_signature_matches_an_independent_computation() {
        // python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(
        //   base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        //   b"msg_1.1700000000.{\"n\":1}", hashlib.sha256).digest()).decode())'
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let signer = Signer::new(SignatureScheme::Standard, &secret).unwrap();
        assert_eq!(
            signer.sign("msg_1", 1_700_000_000, br#"{"n":1}"#),
            "v1,L+MSsj+58dqBbgZkm1LDu8c1I/Iac8KxENSx6/ib5oc="
        );
    }

    #[test]
    fn a_standard_secret_is_whsec_and_base64() {
        assert!(standard_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_ok());
        assert!(
            standard_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
                .unwrap_err()
                .contains("whsec_")
        );
        assert!(
            standard_key("whsec_not base64!")
                .unwrap_err()
                .contains("base64")
        );
    }
}
