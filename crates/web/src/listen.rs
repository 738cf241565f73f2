//! Binding the listen address the way Prometheus exporters written in Go do.

use std::io;
use std::net::{Ipv6Addr, SocketAddr, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

/// Pending connections the kernel queues before `accept`.
const BACKLOG: i32 = 1024;

/// Binds `spec`: `HOST:PORT`, or `:PORT` for every address. Like Go's `net.Listen`, `:PORT`
/// listens on IPv6 and IPv4 together (one dual-stack socket), and on IPv4 alone where the host
/// has no IPv6. The error names the address.
pub async fn listen(spec: &str) -> io::Result<TcpListener> {
    let spec = spec.trim();
    let named = |e: io::Error| io::Error::new(e.kind(), format!("cannot listen on {spec}: {e}"));
    let listener = match spec.strip_prefix(':') {
        Some(port) => {
            let port: u16 = port
                .parse()
                .map_err(|_| named(io::Error::new(io::ErrorKind::InvalidInput, "invalid port")))?;
            let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, port));
            match bind(any6, true) {
                Ok(l) => l,
                // No IPv6 on this host (disabled, or a container without it).
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
                    ) =>
                {
                    bind(SocketAddr::from(([0, 0, 0, 0], port)), false).map_err(named)?
                }
                Err(e) => return Err(named(e)),
            }
        }
        None => {
            let addr = spec
                .to_socket_addrs()
                .map_err(named)?
                .next()
                .ok_or_else(|| named(io::Error::new(io::ErrorKind::InvalidInput, "no address")))?;
            bind(addr, false).map_err(named)?
        }
    };
    TcpListener::from_std(listener).map_err(named)
}

fn bind(addr: SocketAddr, dual_stack: bool) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if dual_stack {
        socket.set_only_v6(false)?;
    }
    // As Go does: a restarted exporter can bind while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_bare_port_listens_on_ipv4_and_ipv6() {
        let l = listen(":0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        // Where the host has IPv6 loopback, the same socket takes it too.
        if std::net::TcpListener::bind("[::1]:0").is_ok() {
            assert!(l.local_addr().unwrap().is_ipv6());
            assert!(std::net::TcpStream::connect(("::1", port)).is_ok());
        }
    }

    #[tokio::test]
    async fn errors_name_the_address() {
        let taken = listen("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = listen(&addr).await.unwrap_err().to_string();
        assert!(e.starts_with(&format!("cannot listen on {addr}: ")), "{e}");
        assert!(listen(":x")
            .await
            .unwrap_err()
            .to_string()
            .contains("invalid port"));
    }
}
