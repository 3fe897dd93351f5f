//! Why a TLS handshake failed, in words a person can act on: rustls'
//! reason and what most likely fixes it, seen from the server (a client it
//! refused, [`refused_client_fix`]) or from the client (a server that
//! refused it, or that it refused: [`tls_failure`]).
//!
//! The usual causes are few: a certificate signed by another CA, a
//! certificate that does not name the host dialled, an X.509 v1
//! certificate (a plain `openssl x509 -req` makes one, and webpki accepts
//! only v3), no client certificate where one is required, or one side
//! speaking plaintext.

use std::error::Error;
use std::io;

use tokio_rustls::rustls::{self, AlertDescription, CertificateError};

/// The fix for an X.509 v1 certificate.
const V3: &str = "issue an X.509 v3 certificate: a plain `openssl x509 -req` makes v1; add \
                  `-extfile` with v3 extensions such as `basicConstraints=CA:FALSE`";

/// The rustls error in `error`'s chain of causes, looking inside I/O
/// errors, if any.
fn rustls_error(error: &(dyn Error + 'static)) -> Option<rustls::Error> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls.clone());
        }
        // I/O errors carry rustls' inside, and HTTP/2's carry I/O errors
        // without naming them as their source.
        let io = match e.downcast_ref::<h2::Error>() {
            Some(h2) => h2.get_io(),
            None => e.downcast_ref::<io::Error>(),
        };
        if let Some(inner) = io.and_then(io::Error::get_ref) {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Some(tls.clone());
            }
            if let Some(alert) = alert_in_words(&inner.to_string()) {
                return Some(rustls::Error::AlertReceived(alert));
            }
        }
        cause = e.source();
    }
    None
}

/// The alerts a server sends a client it refuses, which a TLS 1.3 client
/// may only read after its handshake, when the stream it reads from
/// hands them on as text.
const REFUSALS: [AlertDescription; 6] = [
    AlertDescription::CertificateRequired,
    AlertDescription::BadCertificate,
    AlertDescription::UnsupportedCertificate,
    AlertDescription::UnknownCA,
    AlertDescription::CertificateUnknown,
    AlertDescription::DecryptError,
];

/// The alert named by rustls' words for it (`received fatal alert:
/// UnknownCA`), for the alerts that refuse a client.
fn alert_in_words(text: &str) -> Option<AlertDescription> {
    let name = text.strip_prefix("received fatal alert: ")?;
    REFUSALS.into_iter().find(|a| format!("{a:?}") == name)
}

/// Why a certificate of one's own cannot be used, if `error` is rustls
/// refusing it, with what fixes it.
pub(crate) fn own_certificate(error: &rustls::Error) -> Option<String> {
    match error {
        rustls::Error::InvalidCertificate(e) if is_v1(e) => Some(format!(
            "an X.509 v1 certificate, which TLS peers refuse: {V3}"
        )),
        rustls::Error::InvalidCertificate(e) => Some(format!("rustls refuses it: {e:?}")),
        _ => None,
    }
}

/// Whether a certificate error is webpki refusing an X.509 v1
/// certificate (rustls passes it on as an opaque "other" error).
fn is_v1(error: &CertificateError) -> bool {
    matches!(error, CertificateError::Other(other) if format!("{other:?}").contains("UnsupportedCertVersion"))
}

/// On a server, what most likely fixes the handshake a client failed with
/// `error`; `None` when the error is not a TLS one.
pub(crate) fn refused_client_fix(error: &io::Error) -> Option<&'static str> {
    use rustls::Error as E;
    let fix = match &rustls_error(error)? {
        E::NoCertificatesPresented => {
            "the client sent no certificate: this server requires one signed by its client CA"
        }
        E::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the client's certificate is not signed by the client CA this server trusts"
        }
        E::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => "the client's certificate is outside its validity dates (or a clock is wrong)",
        E::InvalidCertificate(e) if is_v1(e) => {
            "the client's certificate is X.509 v1, which is refused: issue an X.509 v3 \
             certificate (a plain `openssl x509 -req` makes v1; add `-extfile` with v3 \
             extensions such as `basicConstraints=CA:FALSE`)"
        }
        E::InvalidCertificate(_) => {
            "the client's certificate was refused: it must be an X.509 v3 certificate signed by \
             the client CA this server trusts"
        }
        E::AlertReceived(AlertDescription::CertificateExpired) => {
            "the client refused this server's certificate as expired or not valid yet: renew \
             it (or a clock is wrong; the server logs its dates at start)"
        }
        E::AlertReceived(AlertDescription::UnknownCA) => {
            "the client does not trust the CA that signed this server's certificate: the client \
             must trust that CA"
        }
        E::AlertReceived(AlertDescription::BadCertificate) => {
            "the client refused this server's certificate: it must name the host the client \
             dials (or the client must check it against a name it carries)"
        }
        E::AlertReceived(_) => {
            "the client refused this server's certificate: the client must trust the CA that \
             signed it, and it must name the host the client dials"
        }
        E::InvalidMessage(_) => "the client does not speak TLS: is it dialling in plaintext?",
        E::NoApplicationProtocol => "the client does not offer HTTP/2 (ALPN h2), which gRPC needs",
        _ => "",
    };
    Some(fix)
}

/// On a client, `error` (a failed call or connection, with its causes)
/// described as a TLS failure with its likely fix, if a TLS failure is in
/// its chain of causes.
///
/// # Examples
///
/// ```
/// use tollgate_service::rustls;
///
/// let refused = std::io::Error::other(rustls::Error::AlertReceived(
///     rustls::AlertDescription::CertificateRequired,
/// ));
/// let line = tollgate_service::tls_failure(&refused).unwrap();
/// assert!(line.starts_with("TLS failed: the server requires a client certificate"));
/// assert_eq!(tollgate_service::tls_failure(&std::io::Error::other("refused")), None);
/// ```
pub fn tls_failure(error: &(dyn Error + 'static)) -> Option<String> {
    use rustls::Error as E;
    let tls = rustls_error(error)?;
    let why = match &tls {
        E::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the server's certificate is not signed by the CA this client trusts: trust the CA \
             that signed it (--tls-ca)"
                .to_owned()
        }
        E::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "the server's certificate does not name the host dialled: dial a name it carries, \
              or check it against another (--tls-server-name)"
            .to_owned(),
        E::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => "the server's certificate is outside its validity dates (or a clock is wrong)"
            .to_owned(),
        E::InvalidCertificate(e) if is_v1(e) => {
            format!("the server's certificate is X.509 v1, which is refused: {V3}")
        }
        E::AlertReceived(AlertDescription::CertificateRequired) => {
            "the server requires a client certificate: present one signed by its client CA \
             (--tls-cert and --tls-key)"
                .to_owned()
        }
        E::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::DecryptError,
        ) => format!(
            "the server refused this client's certificate: it must be signed by the server's \
             client CA, and be X.509 v3 ({V3}); the server's log names the reason"
        ),
        E::InvalidMessage(_) => {
            "the server does not speak TLS: is it serving plaintext?".to_owned()
        }
        E::NoApplicationProtocol => {
            "the server does not offer HTTP/2 (ALPN h2), which gRPC needs".to_owned()
        }
        other => other.to_string(),
    };
    Some(format!("TLS failed: {why} ({tls})"))
}

/// Whether `error` (a failed call or connection, with its causes) holds a
/// TLS failure that trying again cannot mend: a certificate refused by
/// either side (untrusted, expired, for another name, X.509 v1), no
/// client certificate where one is required, a peer that does not speak
/// TLS or HTTP/2. A connection closed mid-handshake with no reason is not
/// one: the network does that too.
///
/// # Examples
///
/// ```
/// use tollgate_service::rustls::{self, CertificateError};
///
/// let expired = std::io::Error::other(rustls::Error::InvalidCertificate(
///     CertificateError::Expired,
/// ));
/// assert!(tollgate_service::tls_failure_is_permanent(&expired));
/// assert!(!tollgate_service::tls_failure_is_permanent(&std::io::Error::other("reset")));
/// ```
pub fn tls_failure_is_permanent(error: &(dyn Error + 'static)) -> bool {
    use rustls::Error as E;
    matches!(
        rustls_error(error),
        Some(
            E::InvalidCertificate(_)
                | E::NoCertificatesPresented
                | E::InvalidMessage(_)
                | E::NoApplicationProtocol
                | E::AlertReceived(
                    AlertDescription::CertificateRequired
                        | AlertDescription::BadCertificate
                        | AlertDescription::UnsupportedCertificate
                        | AlertDescription::UnknownCA
                        | AlertDescription::CertificateUnknown
                        | AlertDescription::CertificateExpired
                        | AlertDescription::DecryptError
                )
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(e: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn a_server_names_the_fix_for_each_common_refusal() {
        let fix = |e| refused_client_fix(&io(e)).unwrap();
        assert!(fix(rustls::Error::NoCertificatesPresented).contains("sent no certificate"));
        assert!(fix(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
        .contains("not signed by the client CA"));
        assert!(
            fix(rustls::Error::AlertReceived(AlertDescription::UnknownCA))
                .contains("does not trust the CA that signed this server's certificate")
        );
        let expired = fix(rustls::Error::AlertReceived(
            AlertDescription::CertificateExpired,
        ));
        assert!(
            expired.contains("as expired or not valid yet: renew it"),
            "{expired}"
        );
        assert!(!expired.contains("trust"), "{expired}");
        assert!(fix(rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
        ))
        .contains("must name the host the client dials"));
        assert_eq!(fix(rustls::Error::HandshakeNotComplete), "");
        assert_eq!(refused_client_fix(&io::Error::other("reset")), None);
    }

    #[test]
    fn a_client_finds_the_tls_failure_among_the_causes() {
        /// An error whose cause is `source`, as transports wrap them.
        #[derive(Debug)]
        struct Wrapped(io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("transport error")
            }
        }
        impl Error for Wrapped {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = Wrapped(io(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        )));
        let line = tls_failure(&e).unwrap();
        assert!(line.starts_with("TLS failed: the server's certificate is not signed by the CA"));
        assert!(
            line.ends_with("(invalid peer certificate: UnknownIssuer)"),
            "{line}"
        );
        let refused = io(rustls::Error::AlertReceived(
            AlertDescription::BadCertificate,
        ));
        assert!(tls_failure(&refused).unwrap().contains("X.509 v3"));
        // Read after the handshake, the alert comes as rustls' words.
        let in_words = io::Error::new(
            io::ErrorKind::InvalidData,
            "received fatal alert: UnknownCA",
        );
        let line = tls_failure(&in_words).unwrap();
        assert!(
            line.starts_with("TLS failed: the server refused this client's certificate"),
            "{line}"
        );
        let other = io::Error::new(io::ErrorKind::InvalidData, "received fatal alert: Whatever");
        assert_eq!(tls_failure(&other), None);
        assert_eq!(tls_failure(&Wrapped(io::Error::other("refused"))), None);
    }
}
