//! Endpoint URLs as socket addresses: [`parse_endpoint`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// An endpoint URL that is not an address to connect to (see [`parse_endpoint`]).
#[derive(Debug, thiserror::Error)]
#[error("invalid endpoint {url:?}: {reason}")]
pub struct InvalidEndpoint {
    /// The URL given.
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl From<InvalidEndpoint> for std::io::Error {
    fn from(e: InvalidEndpoint) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// The socket address of an endpoint URL such as `http://127.0.0.1:4566`.
///
/// The scheme (`http://`, `https://`) is optional and gives the default port (80, 443); without
/// it the port is required. The host must be an IP address or `localhost` (127.0.0.1): names
/// are never resolved. A path after the authority is ignored.
///
/// ```
/// use latency_proxy::parse_endpoint;
///
/// assert_eq!(parse_endpoint("http://127.0.0.1:4566").unwrap(), "127.0.0.1:4566".parse().unwrap());
/// assert_eq!(parse_endpoint("http://localhost:5000/").unwrap(), "127.0.0.1:5000".parse().unwrap());
/// assert_eq!(parse_endpoint("http://[::1]").unwrap(), "[::1]:80".parse().unwrap());
/// assert_eq!(parse_endpoint("127.0.0.1:4566").unwrap().port(), 4566);
/// assert!(parse_endpoint("http://moto.example:4566").is_err());
/// assert!(parse_endpoint("ftp://127.0.0.1:21").is_err());
/// ```
pub fn parse_endpoint(url: &str) -> Result<SocketAddr, InvalidEndpoint> {
    let invalid = |reason| InvalidEndpoint {
        url: url.to_owned(),
        reason,
    };
    let trimmed = url.trim();
    let (rest, default_port) = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, Some(80)),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, Some(443)),
        Some(_) => return Err(invalid("the scheme must be http or https")),
        None => (trimmed, None),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(invalid("user information is not supported"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("unclosed [ in the host"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| invalid("expected :PORT after the IPv6 address"))?,
                ),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(port) => port
            .parse()
            .map_err(|_| invalid("the port is not a number"))?,
        None => default_port.ok_or_else(|| invalid("no port (and no scheme to default it)"))?,
    };
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        Ipv4Addr::LOCALHOST.into()
    } else {
        host.parse()
            .map_err(|_| invalid("the host must be an IP address or localhost"))?
    };
    Ok(SocketAddr::new(ip, port))
}
