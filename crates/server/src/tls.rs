//! TLS on the TCP listeners, as mongod's `--tlsMode`: `disabled` (the default),
//! `allowTLS` and `preferTLS` (TLS and plain connections on the same port), and
//! `requireTLS` (plain connections refused). The certificate and its key come from
//! `--tlsCertificateKeyFile` (one PEM file, the chain then the key, as mongod's);
//! `--tlsCAFile` makes the server ask clients for a certificate signed by that CA
//! (required unless `--tlsAllowConnectionsWithoutCertificates`). The Unix domain socket
//! stays plain, as mongod's.
//!
//! rustls does the protocol (TLS 1.2 and 1.3 only), through tokio-rustls; the
//! `certificate` module below reads the names and dates rustls does not expose (the
//! client certificate's subject, kept on the connection for MONGODB-X509
//! authentication; serverStatus's `security`).

use bson::{doc, Document};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// `--tlsMode`, spelled as mongod's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No TLS: every connection is plain.
    #[default]
    #[value(name = "disabled")]
    Disabled,
    /// Plain connections are the norm; TLS ones are accepted too.
    #[value(name = "allowTLS")]
    AllowTls,
    /// TLS connections are the norm; plain ones are accepted too (and logged).
    #[value(name = "preferTLS")]
    PreferTls,
    /// Only TLS connections are accepted.
    #[value(name = "requireTLS")]
    RequireTls,
}

impl Mode {
    /// The name mongod gives the mode (getCmdLineOpts' `net.tls.mode`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Disabled => "disabled",
            Mode::AllowTls => "allowTLS",
            Mode::PreferTls => "preferTLS",
            Mode::RequireTls => "requireTLS",
        }
    }
}

/// Why the server cannot start with the TLS options given, and the exit code.
#[derive(Debug)]
pub struct StartError {
    pub message: String,
    pub exit_code: i32,
}

/// mongod's exit code for options that contradict one another.
const EXIT_BAD_OPTIONS: i32 = 2;
/// mongod's exit code when its TLS set-up (global initialization) fails: a file that
/// cannot be read or holds no usable certificate or key.
const EXIT_FAILED_INITIALIZATION: i32 = 1;

fn bad_options(message: impl Into<String>) -> StartError {
    StartError {
        message: message.into(),
        exit_code: EXIT_BAD_OPTIONS,
    }
}

fn bad_file(message: impl Into<String>) -> StartError {
    StartError {
        message: message.into(),
        exit_code: EXIT_FAILED_INITIALIZATION,
    }
}

/// The server's TLS state: its acceptor (none when disabled), what serverStatus shows
/// about its certificate, and the count of TLS connections per protocol version.
#[derive(Default)]
pub struct Tls {
    pub mode: Mode,
    acceptor: Option<TlsAcceptor>,
    /// serverStatus's `security` fields about the server's certificate.
    server_certificate: Option<Document>,
    /// Connections made with TLS 1.2 and 1.3 (the only versions rustls speaks);
    /// serverStatus's `transportSecurity`.
    tls12: AtomicU64,
    tls13: AtomicU64,
    /// With `--tlsAllowInvalidCertificates`, the CA's own verifier: a certificate let
    /// through without verifying names no one for MONGODB-X509 (mongod's "No verified
    /// subject name available from client").
    strict_verifier: Option<Verifier>,
}

/// The options that shape TLS, from the command line or the config file's `net.tls`.
pub struct Options<'a> {
    pub mode: Mode,
    pub certificate_key_file: Option<&'a Path>,
    pub ca_file: Option<&'a Path>,
    pub allow_connections_without_certificates: bool,
    pub allow_invalid_certificates: bool,
}

impl Tls {
    /// Checks the options and reads the files; any problem stops the start, as mongod's.
    pub fn load(o: &Options) -> Result<Tls, StartError> {
        if o.mode == Mode::Disabled {
            let any_option = o.certificate_key_file.is_some()
                || o.ca_file.is_some()
                || o.allow_connections_without_certificates
                || o.allow_invalid_certificates;
            if any_option {
                return Err(bad_options(
                    "need to enable TLS via the sslMode/tlsMode flag when using TLS configuration parameters",
                ));
            }
            return Ok(Tls::default());
        }
        let Some(key_file) = o.certificate_key_file else {
            return Err(bad_options(
                "need tlsCertificateKeyFile or certificateSelector when TLS is enabled",
            ));
        };
        let (chain, key) = read_certificate_key_file(key_file)?;
        let server_certificate = Some(certificate_status(&chain[0], o.ca_file.is_some()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = match o.ca_file {
            Some(ca) => Some(client_verifier(ca, o, provider.clone())?),
            None => None,
        };
        let strict_verifier = match &verifier {
            Some((_, strict)) if o.allow_invalid_certificates => Some(strict.clone()),
            _ => None,
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad_file(format!("Can not set up TLS: {e}")))?;
        let builder = match verifier {
            Some((v, _)) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| {
            bad_file(format!(
                "Can not set up PEM key file: {}: {e}",
                key_file.display()
            ))
        })?;
        Ok(Tls {
            mode: o.mode,
            acceptor: Some(TlsAcceptor::from(Arc::new(config))),
            server_certificate,
            strict_verifier,
            ..Tls::default()
        })
    }

    /// The subject of the client certificate a handshake verified (RFC 2253), the
    /// user MONGODB-X509 logs in as; none without one, or when it did not verify and
    /// `--tlsAllowInvalidCertificates` let it through.
    pub fn verified_subject(&self, chain: &[CertificateDer<'_>]) -> Option<String> {
        let (end_entity, intermediates) = chain.split_first()?;
        if let Some(strict) = &self.strict_verifier {
            strict
                .verify_client_cert(end_entity, intermediates, UnixTime::now())
                .ok()?;
        }
        subject_name(end_entity)
    }

    /// The acceptor for TCP connections; none when TLS is disabled.
    pub fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }

    /// Counts a connection that completed its handshake with `version`.
    pub fn count(&self, version: Option<rustls::ProtocolVersion>) {
        match version {
            Some(rustls::ProtocolVersion::TLSv1_3) => &self.tls13,
            _ => &self.tls12,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// serverStatus's `transportSecurity`: TLS connections made, per protocol version
    /// (TLS 1.0 and 1.1 are never negotiated: rustls does not speak them).
    pub fn transport_security(&self) -> Document {
        doc! {
            "1.0": 0_i64,
            "1.1": 0_i64,
            "1.2": self.tls12.load(Ordering::Relaxed) as i64,
            "1.3": self.tls13.load(Ordering::Relaxed) as i64,
            "unknown": 0_i64,
        }
    }

    /// serverStatus's `security` fields about the server's certificate (mongod's
    /// `SSLServerSubjectName`, `SSLServerHasCertificateAuthority`,
    /// `SSLServerCertificateExpirationDate`); none when TLS is disabled.
    pub fn server_certificate_status(&self) -> Option<&Document> {
        self.server_certificate.as_ref()
    }
}

/// A protocol version as OpenSSL names it (`TLSv1.3`), for the log.
pub fn version_name(version: Option<rustls::ProtocolVersion>) -> &'static str {
    match version {
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        _ => "unknown",
    }
}

/// A TLS connection's read side that takes a close without TLS's `close_notify` for
/// the end of the stream: drivers close their sockets without one, and mongod ends
/// such a connection as any other. (A close in the middle of a message still fails
/// that message's read.)
pub struct EndWithoutNotify<R>(pub R);

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EndWithoutNotify<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
            std::task::Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                std::task::Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// The certificate chain and private key of `--tlsCertificateKeyFile`.
fn read_certificate_key_file(
    path: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), StartError> {
    let pem = std::fs::read(path)
        .map_err(|e| bad_file(format!("cannot read PEM key file: {}: {e}", path.display())))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_file(format!("cannot read PEM key file: {}: {e}", path.display())))?;
    if chain.is_empty() {
        return Err(bad_file(format!(
            "Can not set up PEM key file: {}: no certificate in it",
            path.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad_file(format!(
            "Can not set up PEM key file: {}: no private key in it ({e})",
            path.display()
        ))
    })?;
    Ok((chain, key))
}

type Verifier = Arc<dyn ClientCertVerifier>;

/// Verifies client certificates against `--tlsCAFile`: a certificate is asked for, and
/// required unless `--tlsAllowConnectionsWithoutCertificates`; with
/// `--tlsAllowInvalidCertificates` one that does not verify is let through (as mongod's).
/// Returns the handshake's verifier and the CA's own (the same one without that option).
fn client_verifier(
    ca_file: &Path,
    o: &Options,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<(Verifier, Verifier), StartError> {
    let cannot = |e: &dyn std::fmt::Display| {
        bad_file(format!(
            "cannot read certificate file: {}: {e}",
            ca_file.display()
        ))
    };
    let pem = std::fs::read(ca_file).map_err(|e| cannot(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.map_err(|e| cannot(&e))?)
            .map_err(|e| cannot(&e))?;
    }
    if roots.is_empty() {
        return Err(cannot(&"no certificate in it"));
    }
    let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
    if o.allow_connections_without_certificates {
        builder = builder.allow_unauthenticated();
    }
    let verifier = builder.build().map_err(|e| cannot(&e))?;
    Ok(if o.allow_invalid_certificates {
        (Arc::new(AcceptInvalid(verifier.clone())), verifier)
    } else {
        (verifier.clone(), verifier)
    })
}

/// `--tlsAllowInvalidCertificates`: asks for client certificates as the CA verifier does
/// and checks the handshake's signatures (the client holds the key of the certificate
/// it shows), but takes a certificate that does not chain to the CA or has expired.
#[derive(Debug)]
struct AcceptInvalid(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for AcceptInvalid {
    fn offer_client_auth(&self) -> bool {
        self.0.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.0.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if let Err(e) = self.0.verify_client_cert(end_entity, intermediates, now) {
            // mongod warns and goes on.
            tracing::warn!(error = %e, "SSL peer certificate validation failed");
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// serverStatus's `security` fields for the server's own certificate.
fn certificate_status(cert: &CertificateDer<'_>, has_ca: bool) -> Document {
    let mut d = Document::new();
    if let Some(c) = certificate::read(cert) {
        d.insert("SSLServerSubjectName", c.subject);
        d.insert("SSLServerHasCertificateAuthority", has_ca);
        if let Some(expires) = c.not_after {
            d.insert("SSLServerCertificateExpirationDate", expires);
        }
    }
    d
}

/// A certificate's subject as mongod shows it (OpenSSL's RFC 2253 form: the last
/// name first, `CN=client,OU=Kernel,O=MongoDB,C=US`); none if the bytes are not a
/// certificate.
pub fn subject_name(cert: &CertificateDer<'_>) -> Option<String> {
    certificate::read(cert).map(|c| c.subject)
}

/// The two fields of an X.509 certificate the server shows (RFC 5280, section 4.1).
mod certificate {
    use yasna::models::ObjectIdentifier;
    use yasna::{ASN1Result, BERReaderSeq, Tag};

    pub struct Fields {
        /// The subject in RFC 2253 form.
        pub subject: String,
        pub not_after: Option<bson::DateTime>,
    }

    /// Reads `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm,
    /// signatureValue }`, where `TBSCertificate ::= SEQUENCE { [0] version OPTIONAL,
    /// serialNumber, signature, issuer, validity, subject, ... }`.
    pub fn read(der: &[u8]) -> Option<Fields> {
        yasna::parse_der(der, |r| {
            r.read_sequence(|r| {
                let fields = r.next().read_sequence(|r| {
                    if r.next().lookahead_tag()? == Tag::context(0) {
                        r.next().read_der()?; // version
                    }
                    r.next().read_der()?; // serialNumber
                    r.next().read_der()?; // signature
                    r.next().read_der()?; // issuer
                    let not_after = r.next().read_sequence(|r| {
                        r.next().read_der()?; // notBefore
                        Ok(time(&r.next().read_der()?))
                    })?;
                    let subject = name(r)?;
                    skip_rest(r)?;
                    Ok(Fields { subject, not_after })
                })?;
                skip_rest(r)?;
                Ok(fields)
            })
        })
        .ok()
    }

    fn skip_rest(r: &mut BERReaderSeq) -> ASN1Result<()> {
        while r.read_optional(|r| r.read_der())?.is_some() {}
        Ok(())
    }

    /// `Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY }`, written as RFC
    /// 2253 writes it: the last relative name first, `+` between a set's attributes.
    fn name(r: &mut BERReaderSeq) -> ASN1Result<String> {
        let mut rdns = Vec::new();
        r.next().read_sequence_of(|r| {
            let mut attributes = Vec::new();
            r.read_set_of(|r| {
                r.read_sequence(|r| {
                    let oid = r.next().read_oid()?;
                    let value = r.next().read_der()?;
                    attributes.push(attribute(&oid, &value));
                    Ok(())
                })
            })?;
            rdns.push(attributes.join("+"));
            Ok(())
        })?;
        rdns.reverse();
        Ok(rdns.join(","))
    }

    /// One `type=value`: OpenSSL's short names for the usual types; a string value
    /// escaped (RFC 2253), any other as `#` and its DER in hex.
    fn attribute(oid: &ObjectIdentifier, value: &[u8]) -> String {
        let components = oid.components().as_slice();
        let short = SHORT_NAMES
            .iter()
            .find(|(c, _)| *c == components)
            .map(|(_, n)| n.to_string());
        let key = short.unwrap_or_else(|| {
            components
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(".")
        });
        match string(value) {
            Some(s) => format!("{key}={}", super::escape_rfc2253(&s)),
            None => {
                let hex: String = value.iter().map(|b| format!("{b:02X}")).collect();
                format!("{key}=#{hex}")
            }
        }
    }

    /// OpenSSL's short names of the attribute types certificates name people and hosts with.
    const SHORT_NAMES: &[(&[u64], &str)] = &[
        (&[2, 5, 4, 3], "CN"),
        (&[2, 5, 4, 4], "SN"),
        (&[2, 5, 4, 5], "serialNumber"),
        (&[2, 5, 4, 6], "C"),
        (&[2, 5, 4, 7], "L"),
        (&[2, 5, 4, 8], "ST"),
        (&[2, 5, 4, 9], "street"),
        (&[2, 5, 4, 10], "O"),
        (&[2, 5, 4, 11], "OU"),
        (&[2, 5, 4, 12], "title"),
        (&[2, 5, 4, 42], "GN"),
        (&[0, 9, 2342, 19200300, 100, 1, 1], "UID"),
        (&[0, 9, 2342, 19200300, 100, 1, 25], "DC"),
        (&[1, 2, 840, 113549, 1, 9, 1], "emailAddress"),
    ];

    /// A DER element's tag and contents (certificates' names and times are short:
    /// one tag byte, a length under 128 or in one or two further bytes).
    fn contents(tlv: &[u8]) -> Option<(u8, &[u8])> {
        let (&tag, rest) = tlv.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = match first {
            n if n < 0x80 => (usize::from(n), rest),
            0x81 => (usize::from(*rest.first()?), &rest[1..]),
            0x82 => (
                usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?])),
                &rest[2..],
            ),
            _ => return None,
        };
        Some((tag, rest.get(..len)?))
    }

    /// The text of a directory string (UTF8String, PrintableString, IA5String,
    /// TeletexString as Latin-1, BMPString as UTF-16).
    fn string(tlv: &[u8]) -> Option<String> {
        const UTF8: u8 = 0x0c;
        const PRINTABLE: u8 = 0x13;
        const TELETEX: u8 = 0x14;
        const IA5: u8 = 0x16;
        const BMP: u8 = 0x1e;
        let (tag, bytes) = contents(tlv)?;
        match tag {
            UTF8 | PRINTABLE | IA5 => String::from_utf8(bytes.to_vec()).ok(),
            TELETEX => Some(bytes.iter().map(|&b| char::from(b)).collect()),
            BMP => {
                let units: Vec<u16> = bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_be_bytes([c[0], c[1]]))
                    .collect();
                String::from_utf16(&units).ok()
            }
            _ => None,
        }
    }

    /// `Time ::= CHOICE { utcTime YYMMDDHHMMSSZ, generalTime YYYYMMDDHHMMSSZ }`; in
    /// UTCTime, years 50-99 are 19xx (RFC 5280).
    fn time(tlv: &[u8]) -> Option<bson::DateTime> {
        const UTC_TIME: u8 = 0x17;
        const GENERALIZED_TIME: u8 = 0x18;
        let (tag, bytes) = contents(tlv)?;
        let text = std::str::from_utf8(bytes).ok()?;
        let full = match tag {
            UTC_TIME => {
                let century = if text.get(..2)? >= "50" { "19" } else { "20" };
                format!("{century}{text}")
            }
            GENERALIZED_TIME => text.to_string(),
            _ => return None,
        };
        let t = chrono::NaiveDateTime::parse_from_str(&full, "%Y%m%d%H%M%SZ").ok()?;
        Some(bson::DateTime::from_millis(t.and_utc().timestamp_millis()))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn times_and_strings() {
            let utc = b"\x17\x0d491231235959Z";
            assert_eq!(
                super::time(utc).unwrap().try_to_rfc3339_string().unwrap(),
                "2049-12-31T23:59:59Z"
            );
            let old = b"\x17\x0d500101000000Z";
            assert_eq!(
                super::time(old).unwrap().try_to_rfc3339_string().unwrap(),
                "1950-01-01T00:00:00Z"
            );
            let general = b"\x18\x0f20500101000000Z";
            assert_eq!(
                super::time(general)
                    .unwrap()
                    .try_to_rfc3339_string()
                    .unwrap(),
                "2050-01-01T00:00:00Z"
            );
            assert_eq!(super::string(b"\x0c\x03a,b").unwrap(), "a,b");
            assert_eq!(super::string(b"\x1e\x04\x00h\x00i").unwrap(), "hi");
            assert!(super::string(b"\x02\x01\x05").is_none());
            assert!(super::contents(b"\x0c\x05ab").is_none());
        }
    }
}

/// RFC 2253's escaping of an attribute value.
fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether a TCP connection's first message header (its first 16 bytes) starts a TLS
/// handshake, decided as mongod decides it: a client's first MongoDB message answers
/// nothing, so its `responseTo` (bytes 8..12) is 0 (or -1); anything else is taken for
/// TLS and handed to the handshake, which rejects garbage. A TLS ClientHello always
/// lands there: its bytes 9 and 10 are the client's protocol version (0x03 0x03), so
/// that field can be neither 0 nor -1.
pub fn starts_tls(header: &[u8; 16]) -> bool {
    let response_to = i32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    response_to != 0 && response_to != -1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_hello_is_told_from_a_first_message() {
        // The first 16 bytes of a TLS 1.2/1.3 ClientHello (record header, handshake
        // header, client version, the random's first byte).
        let hello = [
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x5a, 0x11, 0x22,
            0x33, 0x44,
        ];
        assert!(starts_tls(&hello));
        // An OP_MSG hello: length 300, requestID 7, responseTo 0, opCode 2013.
        let mut msg = [0u8; 16];
        msg[0..4].copy_from_slice(&300_i32.to_le_bytes());
        msg[4..8].copy_from_slice(&7_i32.to_le_bytes());
        msg[12..16].copy_from_slice(&2013_i32.to_le_bytes());
        assert!(!starts_tls(&msg));
        msg[8..12].copy_from_slice(&(-1_i32).to_le_bytes());
        assert!(!starts_tls(&msg));
        msg[8..12].copy_from_slice(&5_i32.to_le_bytes());
        assert!(starts_tls(&msg));
    }

    #[test]
    fn bad_combinations_stop_the_start() {
        let none = Options {
            mode: Mode::Disabled,
            certificate_key_file: None,
            ca_file: None,
            allow_connections_without_certificates: false,
            allow_invalid_certificates: false,
        };
        assert!(Tls::load(&none).unwrap().acceptor().is_none());
        let key_without_mode = Options {
            certificate_key_file: Some(Path::new("/x.pem")),
            ..none
        };
        let e = Tls::load(&key_without_mode).err().unwrap();
        assert_eq!(e.exit_code, EXIT_BAD_OPTIONS);
        assert!(e.message.contains("need to enable TLS"), "{}", e.message);
        let require_without_key = Options {
            mode: Mode::RequireTls,
            certificate_key_file: None,
            ..key_without_mode
        };
        let e = Tls::load(&require_without_key).err().unwrap();
        assert_eq!(e.exit_code, EXIT_BAD_OPTIONS);
        assert!(e.message.contains("tlsCertificateKeyFile"), "{}", e.message);
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = Tls::load(&Options {
            certificate_key_file: Some(&missing),
            ..require_without_key
        })
        .err()
        .unwrap();
        assert_eq!(e.exit_code, EXIT_FAILED_INITIALIZATION);
        assert!(e.message.contains("missing.pem"), "{}", e.message);
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a PEM file\n").unwrap();
        let e = Tls::load(&Options {
            certificate_key_file: Some(&garbage),
            ..require_without_key
        })
        .err()
        .unwrap();
        assert!(e.message.contains("no certificate"), "{}", e.message);
    }

    #[test]
    fn subject_values_are_escaped_as_rfc2253() {
        assert_eq!(escape_rfc2253("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_rfc2253(" x "), "\\ x\\ ");
        assert_eq!(escape_rfc2253("#1"), "\\#1");
        assert_eq!(escape_rfc2253("plain"), "plain");
    }
}
