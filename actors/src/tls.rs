//! TLS off loopback (DESIGN §11): certificates and keys read from PEM, the rustls configs that
//! the head and the agents' log servers serve with and that clients verify them with, the rule
//! that a server off loopback speaks TLS unless told `--insecure-http`, and what to tell a user
//! whose connection failed because of TLS.
//!
//! Without a CA file a client trusts Mozilla's roots (webpki-roots): the same set on every
//! machine, minimal containers included; a cluster's private CA is given with `--ca-cert`.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::error::Error;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How long the probe that tells an HTTPS server from another waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why TLS could not be set up, naming the file at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct TlsError {
    pub path: PathBuf,
    pub reason: String,
}

impl TlsError {
    fn new(path: &Path, reason: impl ToString) -> TlsError {
        TlsError { path: path.to_path_buf(), reason: reason.to_string() }
    }
}

/// Why asking the provider for the default protocol versions cannot fail.
const SUPPORTED: &str = "aws-lc-rs supports TLS 1.2 and 1.3";

/// One provider for every config, the one reqwest's rustls feature builds too.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Every certificate in a PEM file, in order (a server's chain: its own first).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::new(path, pem_reason(e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::new(path, pem_reason(e)))?;
    if certs.is_empty() {
        return Err(TlsError::new(path, "no certificate (-----BEGIN CERTIFICATE-----) in it"));
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::new(path, pem_reason(e)))
}

fn pem_reason(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => format!("cannot read it: {e}"),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of the expected kind in it".into(),
        other => format!("not valid PEM: {other}"),
    }
}

/// What a server presents (`--tls-cert`, `--tls-key`).
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let (chain, key_der) = (load_certs(cert)?, load_key(key)?);
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect(SUPPORTED)
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| TlsError::new(key, format!("does not go with the certificate in {}: {e}", cert.display())))
}

/// How a client verifies servers: against the CA in `ca` (`--ca-cert`), else Mozilla's roots.
pub fn client_config(ca: Option<&Path>) -> Result<ClientConfig, TlsError> {
    let roots = match ca {
        Some(path) => ca_roots(path)?,
        None => RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
    };
    let builder =
        ClientConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().expect(SUPPORTED);
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

fn ca_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::new(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}

/// An HTTP client builder that verifies https:// servers as `client_config` says.
pub fn http_client(ca: Option<&Path>) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(client_config(ca)?))
}

/// Whether only this machine can reach `ip` (IPv4-mapped loopback included; `0.0.0.0` is not).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// A plain-HTTP server may listen on loopback only, unless its operator said `--insecure-http`.
/// `what` names the server in the refusal, which says why and how to go on.
pub fn refuse_plain_off_loopback(what: &str, ip: IpAddr, insecure_http: bool) -> Result<(), String> {
    if insecure_http || is_loopback(ip) {
        return Ok(());
    }
    Err(format!(
        "refusing to serve {what} on {ip} without TLS: bearer tokens, commands and logs would cross \
         the network in clear.\n  Give --tls-cert PEM --tls-key PEM (its clients then verify it with \
         --ca-cert or $FTDRIVE_CA_CERT), or pass --insecure-http to accept the risk"
    ))
}

/// Why a request from this side to `url` failed, when TLS is the likely cause: `url` is
/// http:// but the server speaks HTTPS, or the other way round, or the server's certificate is
/// not trusted. `who` names the server ("the head"). `None`: not TLS's doing, as far as can
/// be told.
pub async fn diagnose(who: &str, url: &str, error: &(dyn Error + 'static), trust: &Trust<'_>) -> Option<String> {
    if let Some(cause) = tls_cause(who, url, error, trust) {
        return Some(cause);
    }
    let parsed = reqwest::Url::parse(url).ok()?;
    let plain = matches!(parsed.scheme(), "http" | "ws");
    (plain && speaks_tls(&parsed).await).then(|| {
        format!(
            "{who} at {url} speaks HTTPS; use {} (with --ca-cert PEM or $FTDRIVE_CA_CERT when a private CA \
             signed its certificate)",
            with_scheme(&parsed, "https")
        )
    })
}

/// How the side whose request failed trusts a private CA: the flag that gives it one, and the
/// file it was given, if any. A hint then names the fix on the side that needs it.
pub struct Trust<'a> {
    pub flag: &'a str,
    pub given: Option<&'a std::path::Path>,
}

impl Trust<'_> {
    /// A command-line client's or an agent's own `--ca-cert`.
    pub const OWN_FLAG: &'static str = "--ca-cert PEM or $FTDRIVE_CA_CERT";
}

/// As `diagnose`, from the error alone (no probe of the server): a certificate not trusted, one
/// that does not name the address used, an https:// URL for a server that does not speak TLS,
/// another TLS failure.
pub fn tls_cause(who: &str, url: &str, error: &(dyn Error + 'static), trust: &Trust<'_>) -> Option<String> {
    use rustls::CertificateError::{BadSignature, NotValidForName, NotValidForNameContext, UnknownIssuer};
    let flag = trust.flag;
    let found = rustls_error(error)?;
    // A CA given whose name matches the issuer's, but whose key did not sign, reads BadSignature.
    let not_signed = matches!(found, rustls::Error::InvalidCertificate(UnknownIssuer))
        || (trust.given.is_some() && matches!(found, rustls::Error::InvalidCertificate(BadSignature)));
    if not_signed {
        return Some(match trust.given {
            Some(file) => format!(
                "{who} at {url} presented a certificate that the CA in {} did not sign; give {flag} the CA that did",
                file.display()
            ),
            None => format!(
                "{who} at {url} presented a certificate signed by a CA that is not trusted here; give that CA with {flag}"
            ),
        });
    }
    match found {
        rustls::Error::InvalidCertificate(why @ (NotValidForName | NotValidForNameContext { .. })) => {
            let host = reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
            Some(format!(
                "{who} at {url} presented a certificate that does not name {host} ({why}); reissue it with {host} \
                 as a subjectAltName, or reach {who} by a name the certificate holds"
            ))
        }
        rustls::Error::InvalidCertificate(why) => Some(format!(
            "{who} at {url} presented a certificate that cannot be verified ({why}); when a private CA \
             signed it, give that CA with {flag}"
        )),
        rustls::Error::InvalidMessage(_) => {
            let plain = reqwest::Url::parse(url).map_or_else(|_| "http://".into(), |u| with_scheme(&u, "http"));
            Some(format!("{who} at {url} does not speak TLS; use {plain}"))
        }
        other => Some(format!("TLS with {who} at {url} failed: {other}")),
    }
}

/// The rustls error somewhere in `error`'s chain. An I/O error wrapping another error is
/// followed into that error (its `source` skips it).
fn rustls_error<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        let wrapped = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        next = match wrapped {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// `url`'s server and port under another scheme (`http://h:1/x` → `https://h:1`).
fn with_scheme(url: &reqwest::Url, scheme: &str) -> String {
    let host = url.host_str().unwrap_or_default();
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() };
    // The port the server was reached on, even when it was the old scheme's default.
    match url.port_or_known_default() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

/// Whether the server behind `url` answers a TLS ClientHello with a TLS handshake record.
async fn speaks_tls(url: &reqwest::Url) -> bool {
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let probe = async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let hello = client_hello(&host)?;
        let mut socket = tokio::net::TcpStream::connect((host.as_str(), port)).await.ok()?;
        socket.write_all(&hello).await.ok()?;
        let mut first = [0u8; 2];
        socket.read_exact(&mut first).await.ok()?;
        // A handshake record (22) of TLS 1.x.
        Some(first == [22, 3])
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe).await.ok().flatten().unwrap_or(false)
}

/// The bytes of a ClientHello for `host` (nothing is verified: the handshake goes no further).
fn client_hello(host: &str) -> Option<Vec<u8>> {
    let config = Arc::new(client_config(None).ok()?);
    let name = ServerName::try_from(host.to_string()).unwrap_or(ServerName::try_from("localhost").ok()?);
    let mut connection = rustls::ClientConnection::new(config, name).ok()?;
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).ok()?;
    Some(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBeDCCAR+gAwIBAgIUdX5n\n-----END CERTIFICATE-----\n";

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn loopback_is_127_8_and_1_only() {
        for ip in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["0.0.0.0", "::", "10.0.0.1", "192.168.1.5", "::ffff:10.0.0.1", "fe80::1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn plain_http_off_loopback_is_refused_unless_insecure() {
        assert!(refuse_plain_off_loopback("x", "127.0.0.1".parse().unwrap(), false).is_ok());
        assert!(refuse_plain_off_loopback("x", "0.0.0.0".parse().unwrap(), true).is_ok());
        let refusal = refuse_plain_off_loopback("the head's API", "0.0.0.0".parse().unwrap(), false).unwrap_err();
        for part in ["0.0.0.0", "without TLS", "--tls-cert", "--tls-key", "--insecure-http"] {
            assert!(refusal.contains(part), "{part} missing from: {refusal}");
        }
    }

    #[test]
    fn bad_pem_files_are_named_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.pem");
        let error = load_certs(&missing).unwrap_err().to_string();
        assert!(error.contains("absent.pem") && error.contains("cannot read"), "{error}");
        let empty = write(dir.path(), "empty.pem", "not pem at all\n");
        let error = load_certs(&empty).unwrap_err().to_string();
        assert!(error.contains("empty.pem") && error.contains("no certificate"), "{error}");
        let error = load_key(&empty).unwrap_err().to_string();
        assert!(error.contains("empty.pem") && error.contains("no PEM item"), "{error}");
        let cert = write(dir.path(), "cert.pem", CERT);
        let error = server_config(&cert, &empty).unwrap_err().to_string();
        assert!(error.contains("empty.pem"), "{error}");
        assert!(client_config(Some(&empty)).is_err());
    }

    /// A CA, and a certificate it signed for `names`: (ca.pem, cert.pem, key.pem) in `dir`.
    fn pki(dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names).unwrap().signed_by(&key, &*ca).unwrap();
        (
            write(dir, "ca.pem", &ca.pem()),
            write(dir, "cert.pem", &cert.pem()),
            write(dir, "key.pem", &key.serialize_pem()),
        )
    }

    /// A handshake between the two configs, in memory.
    fn handshake(client: ClientConfig, server: ServerConfig, name: &str) -> Result<(), rustls::Error> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client), name)?;
        let mut server = rustls::ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            let mut bytes = Vec::new();
            client.write_tls(&mut bytes).unwrap();
            server.read_tls(&mut bytes.as_slice()).unwrap();
            server.process_new_packets()?;
            bytes.clear();
            server.write_tls(&mut bytes).unwrap();
            client.read_tls(&mut bytes.as_slice()).unwrap();
            client.process_new_packets()?;
            if !client.is_handshaking() && !server.is_handshaking() {
                return Ok(());
            }
        }
        panic!("the handshake did not finish");
    }

    #[test]
    fn a_client_trusts_a_server_signed_by_its_ca_only() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = pki(dir.path(), &["localhost", "127.0.0.1"]);
        let server = || server_config(&cert, &key).unwrap();
        handshake(client_config(Some(&ca)).unwrap(), server(), "127.0.0.1").unwrap();
        handshake(client_config(Some(&ca)).unwrap(), server(), "localhost").unwrap();
        let untrusted = handshake(client_config(None).unwrap(), server(), "localhost").unwrap_err();
        assert!(matches!(untrusted, rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)));
        let wrong_name = handshake(client_config(Some(&ca)).unwrap(), server(), "example.org").unwrap_err();
        assert!(matches!(wrong_name, rustls::Error::InvalidCertificate(_)), "{wrong_name:?}");
    }

    /// Each certificate failure names its own fix, on the side that must make it.
    #[test]
    fn a_certificate_failure_names_the_fix_that_applies() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = pki(dir.path(), &["localhost", "127.0.0.1"]);
        std::fs::create_dir_all(dir.path().join("other")).unwrap();
        let (other_ca, _, _) = pki(&dir.path().join("other"), &["localhost"]);
        let server = || server_config(&cert, &key).unwrap();
        let hint = |error: rustls::Error, url: &str, trust: &Trust| {
            tls_cause("the head", url, &std::io::Error::new(std::io::ErrorKind::InvalidData, error), trust).unwrap()
        };

        let untrusted = handshake(client_config(None).unwrap(), server(), "localhost").unwrap_err();
        let none = Trust { flag: Trust::OWN_FLAG, given: None };
        assert!(hint(untrusted, "https://localhost:1", &none)
            .ends_with("give that CA with --ca-cert PEM or $FTDRIVE_CA_CERT"));

        let wrong_ca = handshake(client_config(Some(&other_ca)).unwrap(), server(), "localhost").unwrap_err();
        let given = Trust { flag: Trust::OWN_FLAG, given: Some(&other_ca) };
        let said = hint(wrong_ca, "https://localhost:1", &given);
        assert!(said.contains(&format!("the CA in {} did not sign", other_ca.display())), "{said}");

        let wrong_name = handshake(client_config(Some(&ca)).unwrap(), server(), "example.org").unwrap_err();
        let said = hint(wrong_name, "https://example.org:1", &given);
        assert!(said.contains("does not name example.org") && said.contains("reissue it with example.org"), "{said}");
    }

    #[test]
    fn a_key_that_does_not_go_with_the_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, cert, _) = pki(dir.path(), &["localhost"]);
        let other = write(dir.path(), "other.pem", &rcgen::KeyPair::generate().unwrap().serialize_pem());
        let error = server_config(&cert, &other).unwrap_err().to_string();
        assert!(error.contains("other.pem") && error.contains("does not go with"), "{error}");
    }

    #[test]
    fn without_a_ca_the_public_roots_are_trusted() {
        assert!(client_config(None).is_ok());
        assert!(http_client(None).unwrap().build().is_ok());
    }

    #[test]
    fn another_scheme_keeps_host_and_port() {
        let url = reqwest::Url::parse("http://127.0.0.1:7380/v1/jobs").unwrap();
        assert_eq!(with_scheme(&url, "https"), "https://127.0.0.1:7380");
        let url = reqwest::Url::parse("https://[::1]:9/").unwrap();
        assert_eq!(with_scheme(&url, "http"), "http://[::1]:9");
        let url = reqwest::Url::parse("http://head.example/").unwrap();
        assert_eq!(with_scheme(&url, "https"), "https://head.example:80");
    }

    #[test]
    fn a_rustls_error_is_found_inside_an_io_error() {
        let inner = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, inner);
        assert!(matches!(rustls_error(&io), Some(rustls::Error::InvalidCertificate(_))));
        let nested = std::io::Error::other(io);
        assert!(matches!(rustls_error(&nested), Some(rustls::Error::InvalidCertificate(_))));
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(rustls_error(&plain).is_none());
    }

    #[tokio::test]
    async fn a_plain_server_is_not_taken_for_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let (mut socket, _) = listener.accept().await.unwrap();
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        });
        let url = reqwest::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        assert!(!speaks_tls(&url).await);
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let trust = Trust { flag: Trust::OWN_FLAG, given: None };
        assert_eq!(diagnose("the head", "http://127.0.0.1:1", &refused, &trust).await, None);
    }
}
