//! One push to one subscription: the endpoint checked again (a lookup,
//! every address by netpolicy), a connection to a checked address, TLS
//! with the shared client config, the request web-push-native built sent
//! by hyper's HTTP/1.1 client, and the answer's status read. No redirect is
//! followed and no proxy is read from the environment: the connection is
//! chatd's own to the address it checked.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, HOST};
use tandem_shared::netpolicy::{Host, Policy};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::endpoint::{self, Endpoint, Loopback};

/// A push's whole exchange, lookup to status, at most this long.
pub const BOUND: Duration = Duration::from_secs(15);
/// A connection attempt to one address.
const CONNECT: Duration = Duration::from_secs(5);

/// How one push ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// 2xx: the push service took it.
    Delivered(u16),
    /// 404 or 410: the subscription is gone; chatd forgets it.
    Gone(u16),
    /// Any other status (a redirect is not followed).
    Refused(u16),
    /// No answer: refused by netpolicy, no connection, TLS, a timeout.
    Failed(String),
}

/// Sends `request` (web-push-native's, aimed at `endpoint`).
pub async fn send(
    endpoint: &Endpoint,
    policy: &Policy,
    loopback: Loopback,
    request: hyper::Request<Vec<u8>>,
) -> Sent {
    match timeout(BOUND, exchange(endpoint, policy, loopback, request)).await {
        Err(_) => Sent::Failed(format!("no answer within {} s", BOUND.as_secs())),
        Ok(Err(why)) => Sent::Failed(why),
        Ok(Ok(status)) if (200..300).contains(&status) => Sent::Delivered(status),
        Ok(Ok(status @ (404 | 410))) => Sent::Gone(status),
        Ok(Ok(status)) => Sent::Refused(status),
    }
}

async fn exchange(
    endpoint: &Endpoint,
    policy: &Policy,
    loopback: Loopback,
    request: hyper::Request<Vec<u8>>,
) -> Result<u16, String> {
    let addresses = endpoint::resolve(endpoint, policy, loopback).await?;
    let stream = connect(&addresses).await?;
    let (mut parts, body) = request.into_parts();
    // The request line carries the path; the host goes in its header.
    parts.uri = endpoint
        .target()
        .parse()
        .map_err(|_| "the endpoint's path is not a request target".to_string())?;
    let host = HeaderValue::from_str(&endpoint.authority())
        .map_err(|_| "the endpoint's host cannot go in a header".to_string())?;
    parts.headers.insert(HOST, host);
    let request = hyper::Request::from_parts(parts, Full::new(Bytes::from(body)));
    if endpoint.tls {
        let tls = handshake(stream, &endpoint.host).await?;
        status_of(tls, request).await
    } else {
        status_of(stream, request).await
    }
}

/// A connection to the first checked address that answers.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::new();
    for address in addresses {
        match timeout(CONNECT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {address}: {e}"),
            Err(_) => last = format!("connecting to {address}: no answer in 5 s"),
        }
    }
    Err(last)
}

async fn handshake(
    stream: TcpStream,
    host: &Host,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    use rustls::pki_types::ServerName;
    let name = match host {
        Host::Name(name) => ServerName::try_from(name.clone())
            .map_err(|_| format!("{name} is not a name TLS can check"))?,
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    tokio_rustls::TlsConnector::from(tandem_shared::tls::client_config())
        .connect(name, stream)
        .await
        .map_err(|e| format!("the TLS handshake with {host} failed: {e}"))
}

async fn status_of<S>(io: S, request: hyper::Request<Full<Bytes>>) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("the connection failed: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let answer = sender.send_request(request).await;
    driver.abort();
    answer
        .map(|response| response.status().as_u16())
        .map_err(|e| format!("no answer came: {e}"))
}
