//! `workbench probe`: one GET of a probe path from this configuration's own listener, for
//! health checks run inside a container. The image holds nothing but the binary (no shell, no
//! curl), so a container runtime's health check has only the binary to run.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context};

/// A probe gives up after this, well within any health check's own timeout.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Where a process listening on `listen` is reached from the same host: an unspecified
/// address (`0.0.0.0`, `::`) is reached on loopback of its family.
pub fn target(listen: &str) -> anyhow::Result<SocketAddr> {
    let mut address: SocketAddr = listen
        .parse()
        .with_context(|| format!("WORKBENCH_LISTEN must be host:port, got `{listen}`"))?;
    if address.ip().is_unspecified() {
        address.set_ip(match address.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    if address.port() == 0 {
        bail!(
            "WORKBENCH_LISTEN has port 0 (a free port picked at start): there is no fixed port \
            to probe"
        );
    }
    Ok(address)
}

/// The status code `GET path` answers at `address`.
pub fn status(address: SocketAddr, path: &str) -> anyhow::Result<u16> {
    if !path.starts_with('/') || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("the probe path must start with / and hold no spaces, got `{path}`");
    }
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT)
        .with_context(|| format!("cannot connect to {address}"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    // The status line is all that is read: "HTTP/1.1 200 OK".
    let mut head = [0u8; 64];
    let mut read = 0;
    while read < head.len() {
        let n = stream
            .read(&mut head[read..])
            .with_context(|| format!("no answer from {address}"))?;
        if n == 0 || head[..read + n].contains(&b'\n') {
            read += n;
            break;
        }
        read += n;
    }
    let line = String::from_utf8_lossy(&head[..read]);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP answer from {address}: `{}`", line.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_probed_on_loopback() {
        assert_eq!(
            target("0.0.0.0:8080").expect("v4").to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(target("[::]:8080").expect("v6").to_string(), "[::1]:8080");
        assert_eq!(
            target("10.1.2.3:9000").expect("given").to_string(),
            "10.1.2.3:9000"
        );
        assert!(target("127.0.0.1:0").is_err());
    }

    #[test]
    fn a_listener_that_answers_is_read_for_its_status() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut byte = [0u8; 1];
            while !request.ends_with(b"\r\n\r\n") {
                stream.read_exact(&mut byte).expect("request");
                request.push(byte[0]);
            }
            let request = String::from_utf8_lossy(&request).into_owned();
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                .expect("answer");
            request
        });
        assert_eq!(status(address, "/readyz").expect("status"), 503);
        assert!(server
            .join()
            .expect("server")
            .starts_with("GET /readyz HTTP/1.1\r\n"));
        assert!(status(address, "readyz").is_err());
    }
}
