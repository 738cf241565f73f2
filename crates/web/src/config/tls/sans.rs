//! `client_allowed_sans`: exporter-toolkit's check (`VerifyPeerCertificate` in
//! web/tls_config.go at commit 19a7c2d590c599b7318733bd00eed83fab3b8dad) that the client's
//! certificate names, among its Subject Alternative Names, one of the listed strings: DNS
//! names, e-mail addresses, IP addresses (Go's text form: dotted IPv4, IPv4-mapped IPv6 as
//! IPv4, other IPv6 compressed) and URIs (Go's text form: the scheme lowercased; see `uri`),
//! compared exactly.
//! It runs after the certificate verified (when the type verifies). Stricter than the toolkit
//! in two ways, so nothing gets in that the list does not name: a certificate is then required
//! (Go does not ask for one with `RequestClientCert` or `VerifyClientCertIfGiven`), and the
//! list needs a `client_auth_type` that asks for certificates.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme,
};

/// The names shown in a refusal, at most (a certificate may carry many).
const SHOWN: usize = 8;

/// A verifier that also requires one of `allowed` among the certificate's SANs.
#[derive(Debug)]
pub(super) struct AllowedSans {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub allowed: Vec<String>,
}

/// Why a certificate was refused: the SANs it has (some), none of them allowed.
struct NotAllowed(Vec<String>);

/// rustls shows the reason of a refusal by its `Debug`: the sentence, then.
impl std::fmt::Debug for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no SAN of the client certificate is in client_allowed_sans (it has: {})",
            self.0.join(", ")
        )
    }
}

impl std::error::Error for NotAllowed {}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let names = sans(end_entity);
        if names.iter().any(|n| self.allowed.contains(n)) {
            return Ok(verified);
        }
        let shown = names.into_iter().take(SHOWN).collect();
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(NotAllowed(shown))),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// One DER element: its tag, its contents and what follows. Definite lengths of at most four
/// bytes only (DER has no other); `None` for anything malformed or cut short.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The elements of a constructed element's contents, in order (stopping at a malformed one).
fn children(mut contents: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (tag, value, rest) = element(contents)?;
        contents = rest;
        Some((tag, value))
    })
}

/// The DER of the OID 2.5.29.17, subjectAltName.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// The SANs of a certificate as Go writes them (see the module); none when it has no SAN
/// extension or cannot be read (the verifier parsed it already, when the type verifies).
pub(super) fn sans(cert: &[u8]) -> Vec<String> {
    let Some(extensions) = extensions(cert) else {
        return Vec::new();
    };
    let Some(names) = children(extensions).find_map(|(_, ext)| {
        let mut parts = children(ext);
        let (_, oid) = parts.next()?;
        // The value is the last part (a BOOLEAN `critical` may come first).
        let (tag, value) = parts.last()?;
        (oid == SAN_OID && tag == 0x04).then_some(value)
    }) else {
        return Vec::new();
    };
    let Some((0x30, names, _)) = element(names) else {
        return Vec::new();
    };
    children(names)
        .filter_map(|(tag, v)| name(tag, v))
        .collect()
}

/// The contents of `tbsCertificate`'s `[3]` extensions, a SEQUENCE of extensions.
fn extensions(cert: &[u8]) -> Option<&[u8]> {
    let (0x30, cert, _) = element(cert)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let (_, explicit) = children(tbs).find(|(tag, _)| *tag == 0xa3)?;
    match element(explicit)? {
        (0x30, exts, _) => Some(exts),
        _ => None,
    }
}

/// One GeneralName in Go's text, for the kinds Go compares.
fn name(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        // rfc822Name, dNSName: IA5 text.
        0x81 | 0x82 => std::str::from_utf8(value).ok().map(str::to_string),
        0x86 => uri(value),
        0x87 => match value.len() {
            4 => Some(Ipv4Addr::new(value[0], value[1], value[2], value[3]).to_string()),
            16 => {
                let mut b = [0u8; 16];
                b.copy_from_slice(value);
                let ip = Ipv6Addr::from(b);
                Some(match ip.to_ipv4_mapped() {
                    Some(v4) => v4.to_string(),
                    None => ip.to_string(),
                })
            }
            _ => None,
        },
        _ => None,
    }
}

/// A URI SAN as Go's `url.Parse(..).String()` writes it: its scheme lowercased. One with a
/// character RFC 3986 does not allow (a space, which Go would write as `%20`) or a malformed
/// `%` escape names nothing, so it can never match a listed string that Go would not.
fn uri(value: &[u8]) -> Option<String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b);
    if !value.iter().all(|&b| allowed(b)) {
        return None;
    }
    let escapes_ok = value
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'%')
        .all(|(i, _)| {
            value
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
        });
    if !escapes_ok {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    // Go's getScheme: letters, then letters, digits, `+`, `-` or `.`, up to the first `:`.
    let scheme_len = text.find(':').filter(|&n| {
        let s = text.as_bytes();
        n > 0
            && s[0].is_ascii_alphabetic()
            && s[1..n]
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    });
    Some(match scheme_len {
        Some(n) => format!("{}{}", text[..n].to_ascii_lowercase(), &text[n..]),
        None => text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_are_read_as_go_writes_them() {
        let mut params =
            rcgen::CertificateParams::new(vec!["scraper.example".to_string()]).unwrap();
        params.subject_alt_names.extend([
            rcgen::SanType::Rfc822Name("ops@example.net".try_into().unwrap()),
            rcgen::SanType::URI(
                "spiffe://cluster/ns/monitoring/sa/prometheus"
                    .try_into()
                    .unwrap(),
            ),
            rcgen::SanType::IpAddress("10.1.2.3".parse().unwrap()),
            rcgen::SanType::IpAddress("::ffff:10.9.9.9".parse().unwrap()),
            rcgen::SanType::IpAddress("2001:db8::1".parse().unwrap()),
        ]);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            sans(cert.der()),
            [
                "scraper.example",
                "ops@example.net",
                "spiffe://cluster/ns/monitoring/sa/prometheus",
                "10.1.2.3",
                "10.9.9.9",
                "2001:db8::1"
            ]
        );
    }

    /// Issue 47 review: Go lowercases a URI's scheme (`url.Parse`) before comparing, and
    /// re-escapes characters a URI may not hold; the certificate's raw text was compared, so
    /// `SPIFFE://...` matched a listed `SPIFFE://...` that Go never matches.
    #[test]
    fn uris_are_compared_as_go_writes_them() {
        let got = |u: &str| uri(u.as_bytes());
        assert_eq!(
            got("SPIFFE://Cluster/ns/A%2Fb").as_deref(),
            Some("spiffe://Cluster/ns/A%2Fb")
        );
        assert_eq!(got("urn:Example:x").as_deref(), Some("urn:Example:x"));
        assert_eq!(got("/no/scheme:here").as_deref(), Some("/no/scheme:here"));
        assert_eq!(got("1http://x").as_deref(), Some("1http://x"));
        // Through a certificate, as the verifier reads it.
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![
            rcgen::SanType::URI("SPIFFE://c/x".try_into().unwrap()),
            rcgen::SanType::URI("spiffe://c/a b".try_into().unwrap()),
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(sans(cert.der()), ["spiffe://c/x"]);
        for never in ["spiffe://x/a b", "spiffe://x/%zz", "spiffe://x/%4", "a\"b"] {
            assert_eq!(got(never), None, "{never}");
        }
    }

    #[test]
    fn malformed_input_gives_no_name_and_no_panic() {
        let key = rcgen::KeyPair::generate().unwrap();
        let der = rcgen::CertificateParams::new(vec!["a.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .der()
            .to_vec();
        assert_eq!(sans(&der), ["a.example"]);
        // Every truncation and every single-byte corruption: no panic, no name invented.
        for n in 0..der.len() {
            let _ = sans(&der[..n]);
            let mut bad = der.clone();
            bad[n] ^= 0xff;
            assert!(sans(&bad).len() <= 1);
        }
        assert!(sans(&[]).is_empty());
        assert!(sans(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_empty());
    }
}
