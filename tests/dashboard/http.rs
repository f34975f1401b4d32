//! Plain HTTP/1.1 over a socket, for what a test asks the dashboard without a browser.

use std::io::{Read, Write};

/// A response: status code, headers (lower-case names) and body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

pub fn get(address: &str, path: &str) -> Option<Answer> {
    send(address, "GET", path, &[], "")
}

/// A GET with extra headers (a `Host` among them replaces the address's).
pub fn get_with(address: &str, path: &str, headers: &[(&str, &str)]) -> Option<Answer> {
    send(address, "GET", path, headers, "")
}

/// A form POST with extra headers (a `Host` among them replaces the address's).
pub fn post(address: &str, path: &str, headers: &[(&str, &str)], form: &str) -> Option<Answer> {
    let mut all = vec![("Content-Type", "application/x-www-form-urlencoded")];
    all.extend_from_slice(headers);
    send(address, "POST", path, &all, form)
}

fn send(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Option<Answer> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    // The address connected to, unless the test names another host.
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Answer {
        status,
        headers,
        body: body.to_string(),
    })
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}
