//! SQS clients: from the standard AWS environment, or for a local endpoint such as moto's.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, Region};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::Credentials;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

/// The region [`local_client`] signs for.
pub const LOCAL_REGION: &str = "us-east-1";

/// An SQS client from the standard AWS environment (region, credentials, `AWS_ENDPOINT_URL_SQS`).
///
/// Where no credentials are configured the standard chain ends at the EC2 instance metadata
/// service: set `AWS_EC2_METADATA_DISABLED=true` wherever that must not be tried.
pub async fn client() -> Client {
    Client::new(&loader().load().await)
}

/// An SQS client for a local endpoint such as moto's (`http://127.0.0.1:5000`): region
/// [`LOCAL_REGION`] and fake static credentials, whatever the environment says, so it never
/// searches for credentials and never reaches for the instance metadata address. The endpoint
/// given here wins over `AWS_ENDPOINT_URL_SQS`.
pub async fn local_client(endpoint: &str) -> Client {
    let config = loader()
        .region(Region::new(LOCAL_REGION))
        .credentials_provider(Credentials::new(
            "test",
            "test",
            None,
            None,
            "event-bridge-local",
        ))
        .load()
        .await;
    let sqs = aws_sdk_sqs::config::Builder::from(&config)
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(sqs)
}

/// The configuration loader both clients start from: our HTTP client and timeouts.
fn loader() -> ConfigLoader {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(3_100))
        .operation_attempt_timeout(Duration::from_secs(10))
        .operation_timeout(Duration::from_secs(30))
        .build();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts)
}
