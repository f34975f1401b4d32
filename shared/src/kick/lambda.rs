//! A kick through Lambda's Invoke API: `EVENT_BRIDGE_KICK_URL=lambda:<function>` (a name, or
//! its ARN). The publisher invokes process_events asynchronously (`X-Amz-Invocation-Type:
//! Event`) with `{"mode": "drain"}`, signed with SigV4 by the standard AWS credentials (the
//! environment, a profile, the function's or the container's role): Lambda answers `202` once
//! it has queued the invocation, so the publisher never waits for the drain. IAM stands where
//! the HTTP trigger's bearer secret stands: the publisher needs `lambda:InvokeFunction` on the
//! function.
//!
//! The endpoint is Lambda's in the function's region (the ARN's, else `AWS_REGION`), or
//! `AWS_ENDPOINT_URL_LAMBDA` / `AWS_ENDPOINT_URL` when set, as the AWS SDKs read them.

use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, SdkConfig};
use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::OnceCell;

use crate::error::{Error, Result};

/// The payload of a kick: a drain, as process_events reads a direct invocation.
const DRAIN: &[u8] = br#"{"mode":"drain"}"#;

/// What a path label keeps unencoded, as the AWS SDKs encode one: the unreserved characters.
const LABEL: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// process_events, as a publisher invokes it.
#[derive(Debug)]
pub struct Invoke {
    /// The function's name or ARN.
    function: String,
    /// `AWS_ENDPOINT_URL_LAMBDA` or `AWS_ENDPOINT_URL`, when set.
    endpoint: Option<String>,
    /// `KICK_WAIT_MS`: how long to wait for Lambda's answer.
    wait: Duration,
    /// The AWS configuration (region, credentials), loaded at the first kick.
    aws: OnceCell<SdkConfig>,
    client: reqwest::Client,
}

impl Invoke {
    /// Invokes `function` (name or ARN) at `endpoint`, or at Lambda's in its region.
    pub fn new(function: &str, endpoint: Option<String>, wait: Duration) -> Self {
        Invoke {
            function: function.to_string(),
            endpoint,
            wait,
            aws: OnceCell::new(),
            client: reqwest::Client::new(),
        }
    }

    /// Invokes the function asynchronously; Ok once Lambda has queued the invocation.
    ///
    /// # Notable errors
    /// - [`Error::Kick`] without a region or credentials, when the request could not be sent,
    ///   or when Lambda answered anything but `202` (queued) or `200` (run at once, as
    ///   emulators answer) (its error type and message said).
    pub async fn send(&self) -> Result<()> {
        let aws = self.aws.get_or_init(load).await;
        let region = self.region(aws)?;
        let url = self.url(&region);
        let credentials = (aws.credentials_provider())
            .ok_or_else(|| self.failed("no AWS credentials are configured".into()))?
            .provide_credentials()
            .await
            .map_err(|e| self.failed(format!("no AWS credentials: {e}")))?;
        let identity = credentials.into();
        let headers = [
            ("content-type", "application/json"),
            ("x-amz-invocation-type", "Event"),
        ];
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name("lambda")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| self.failed(format!("cannot sign: {e}")))?
            .into();
        let signable = SignableRequest::new(
            "POST",
            &url,
            headers.into_iter(),
            SignableBody::Bytes(DRAIN),
        )
        .map_err(|e| self.failed(format!("cannot sign: {e}")))?;
        let (signature, _) = sign(signable, &params)
            .map_err(|e| self.failed(format!("cannot sign: {e}")))?
            .into_parts();
        let mut request = self.client.post(&url).timeout(self.wait).body(DRAIN);
        for (name, value) in headers.into_iter().chain(signature.headers()) {
            request = request.header(name, value);
        }
        let answer = request
            .send()
            .await
            .map_err(|e| self.failed(format!("{e:#}")))?;
        match answer.status().as_u16() {
            202 => Ok(()),
            // Run at once and answered, as emulators do an `Event` invocation (cargo lambda's
            // Invoke API): the drain ran.
            200 => Ok(()),
            status => {
                let kind = (answer.headers().get("x-amzn-errortype"))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let body = answer.text().await.unwrap_or_default();
                let body = crate::quoted::one_line(&body, 200);
                Err(self.failed(format!("Lambda answered {status} {kind}: {body}")))
            }
        }
    }

    /// The function's region: its ARN's, else the configuration's.
    fn region(&self, aws: &SdkConfig) -> Result<String> {
        arn_region(&self.function)
            .map(str::to_string)
            .or_else(|| aws.region().map(|r| r.to_string()))
            .ok_or_else(|| {
                self.failed("no region: set AWS_REGION, or give the function's ARN".into())
            })
    }

    /// The Invoke API's URL for this function.
    fn url(&self, region: &str) -> String {
        let base = match &self.endpoint {
            Some(endpoint) => endpoint.trim_end_matches('/').to_string(),
            None => format!("https://lambda.{region}.amazonaws.com"),
        };
        let function = utf8_percent_encode(&self.function, LABEL);
        format!("{base}/2015-03-31/functions/{function}/invocations")
    }

    fn failed(&self, problem: String) -> Error {
        Error::Kick {
            target: format!("lambda:{}", self.function),
            problem,
        }
    }
}

/// The AWS configuration from the standard environment, over our HTTP client.
async fn load() -> SdkConfig {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await
}

/// The region of a function's ARN (`arn:aws:lambda:<region>:<account>:function:<name>`).
fn arn_region(function: &str) -> Option<&str> {
    let mut parts = function.strip_prefix("arn:")?.split(':');
    let (_partition, service, region) = (parts.next()?, parts.next()?, parts.next()?);
    (service == "lambda" && !region.is_empty()).then_some(region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arn_names_its_region_and_a_name_does_not() {
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function:process-events";
        assert_eq!(arn_region(arn), Some("eu-west-1"));
        assert_eq!(arn_region("process-events"), None);
        assert_eq!(arn_region("arn:aws:sqs:eu-west-1:1:q"), None);
    }

    #[test]
    fn the_function_is_one_encoded_path_label() {
        let arn = "arn:aws:lambda:eu-west-1:123456789012:function:process-events:live";
        let invoke = Invoke::new(arn, None, Duration::from_secs(1));
        assert_eq!(
            invoke.url("eu-west-1"),
            "https://lambda.eu-west-1.amazonaws.com/2015-03-31/functions/\
             arn%3Aaws%3Alambda%3Aeu-west-1%3A123456789012%3Afunction%3Aprocess-events%3Alive\
             /invocations"
        );
        let local = Invoke::new("fn_1", Some("http://127.0.0.1:9/".into()), Duration::ZERO);
        assert_eq!(
            local.url("x"),
            "http://127.0.0.1:9/2015-03-31/functions/fn_1/invocations"
        );
    }
}
