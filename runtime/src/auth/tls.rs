//! TLS 1.3 for a job's sockets (`JITCCL_TLS=1`), with no certificate authority: both ends
//! present one raw public key (RFC 7250), an Ed25519 key derived from the job's key, and
//! each accepts only that same public key from its peer.
//!
//! Why this is sound: the private key is a keyed hash of the job's key, so only a process
//! that knows the job's key can make it, and TLS 1.3 makes each side sign the handshake
//! with the key behind the public key it presents. A peer that completes the handshake
//! therefore knows the job's key, whichever side it is on; a man in the middle without it
//! can finish neither half. The session keys come from a fresh ephemeral key exchange, so
//! what was recorded stays secret even if the job's key is learnt later. Both ends share
//! one identity on purpose: the job's ranks are peers, and the job's key is what makes
//! one of them.

use std::fmt;
use std::io::{self, Read, Write};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature_with_raw_key, WebPkiSupportedAlgorithms};
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime,
};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, Connection, DigitallySignedStruct, DistinguishedName,
    ServerConfig, ServerConnection, SignatureScheme,
};
use sha2::Sha256;

use super::key::JobKey;

/// The PKCS#8 (v1, RFC 8410) encoding of an Ed25519 private key, less its 32-byte seed.
const ED25519_PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
/// The name a client asks for: the verifiers ignore names (the public key is the identity).
const SERVER_NAME: &str = "jitccl";
/// Plaintext a session buffers for sending: the proxy hands it whole steps.
const BUFFER_LIMIT: usize = 1 << 20;

/// A job's TLS settings for both ends of a connection, made once per communicator.
#[derive(Clone)]
pub struct Tls {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tls(pinned to the job's key)")
    }
}

impl Tls {
    /// The settings of the job whose key is `key`.
    pub fn new(key: &JobKey) -> Result<Tls, rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
        mac.update(b"jitccl tls ed25519 1\0");
        let mut pkcs8 = ED25519_PKCS8_PREFIX.to_vec();
        pkcs8.extend_from_slice(&mac.finalize().into_bytes());
        let signer = provider.key_provider.load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8)))?;
        let spki = signer.public_key().ok_or(rustls::Error::General("an Ed25519 key without a public key".into()))?;
        let pinned =
            Arc::new(Pinned { spki: spki.as_ref().to_vec(), algorithms: provider.signature_verification_algorithms });
        let certified = Arc::new(CertifiedKey::new(vec![CertificateDer::from(spki.as_ref().to_vec())], signer));

        let mut client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(pinned.clone())
            .with_client_cert_resolver(Arc::new(rustls::client::AlwaysResolvesClientRawPublicKeys::new(
                certified.clone(),
            )));
        client.resumption = rustls::client::Resumption::disabled();
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(pinned)
            .with_cert_resolver(Arc::new(rustls::server::AlwaysResolvesServerRawPublicKeys::new(certified)));
        // Every connection is a fresh full handshake: no tickets to send or keep.
        server.send_tls13_tickets = 0;
        Ok(Tls { client: Arc::new(client), server: Arc::new(server) })
    }

    /// Opens a session as the connecting end on blocking `io` (its timeouts bound it).
    pub fn connect(&self, io: &mut (impl Read + Write)) -> io::Result<Connection> {
        handshake(self.client()?, io)
    }

    /// Opens a session as the accepting end on blocking `io` (its timeouts bound it).
    pub fn accept(&self, io: &mut (impl Read + Write)) -> io::Result<Connection> {
        handshake(self.server()?, io)
    }

    /// A session of the connecting end whose handshake has not begun, for a caller that
    /// drives it itself (on a non-blocking socket).
    pub fn client(&self) -> io::Result<Connection> {
        let name = ServerName::try_from(SERVER_NAME).expect("a valid name");
        let mut conn: Connection = ClientConnection::new(self.client.clone(), name).map_err(io::Error::other)?.into();
        conn.set_buffer_limit(Some(BUFFER_LIMIT));
        Ok(conn)
    }

    /// A session of the accepting end whose handshake has not begun (see [`client`](Self::client)).
    pub fn server(&self) -> io::Result<Connection> {
        let mut conn: Connection = ServerConnection::new(self.server.clone()).map_err(io::Error::other)?.into();
        conn.set_buffer_limit(Some(BUFFER_LIMIT));
        Ok(conn)
    }
}

fn handshake(mut conn: Connection, io: &mut (impl Read + Write)) -> io::Result<Connection> {
    while conn.is_handshaking() {
        conn.complete_io(io)?;
    }
    Ok(conn)
}

/// Accepts exactly one public key, on either end.
#[derive(Debug)]
struct Pinned {
    spki: Vec<u8>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Pinned {
    fn check(&self, presented: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if presented.as_ref() == self.spki.as_slice() {
            Ok(())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure))
        }
    }

    fn signature(
        &self, message: &[u8], key: &CertificateDer<'_>, dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature_with_raw_key(
            message,
            &SubjectPublicKeyInfoDer::from(key.as_ref()),
            dss,
            &self.algorithms,
        )
    }
}

/// What the two verifiers (of a server, of a client) share: TLS 1.3 signatures by the
/// pinned raw public key, Ed25519 only. TLS 1.2 is never offered, so its signatures never
/// come.
macro_rules! pinned_signatures {
    () => {
        fn verify_tls12_signature(
            &self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Err(rustls::Error::General("TLS 1.2 is not offered".into()))
        }

        fn verify_tls13_signature(
            &self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            vec![SignatureScheme::ED25519]
        }

        fn requires_raw_public_keys(&self) -> bool {
            true
        }
    };
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self, end_entity: &CertificateDer<'_>, _intermediates: &[CertificateDer<'_>], _name: &ServerName<'_>,
        _ocsp: &[u8], _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity).map(|()| ServerCertVerified::assertion())
    }

    pinned_signatures!();
}

impl ClientCertVerifier for Pinned {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self, end_entity: &CertificateDer<'_>, _intermediates: &[CertificateDer<'_>], _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity).map(|()| ClientCertVerified::assertion())
    }

    pinned_signatures!();
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// One session over a socket, the accepting end keyed `theirs`: what each end's
    /// handshake gave, and, when both opened, a message carried through.
    fn meet(mine: &JobKey, theirs: &JobKey) -> (io::Result<()>, io::Result<()>) {
        let (a, b) = (Tls::new(mine).unwrap(), Tls::new(theirs).unwrap());
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            let mut conn = b.accept(&mut s)?;
            let mut got = [0u8; 5];
            while conn.wants_read() && conn.complete_io(&mut s)?.0 > 0 {}
            conn.reader().read_exact(&mut got)?;
            assert_eq!(&got, b"hello");
            Ok(())
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mine = a.connect(&mut c).and_then(|mut conn| {
            conn.writer().write_all(b"hello")?;
            conn.complete_io(&mut c).map(drop)
        });
        if mine.is_err() {
            drop(c);
        }
        (mine, server.join().unwrap())
    }

    #[test]
    fn only_holders_of_the_same_key_open_a_session() {
        let k = JobKey::from_secret("the TLS test's job key").unwrap();
        let (mine, theirs) = meet(&k, &k);
        assert!(mine.is_ok() && theirs.is_ok(), "{mine:?} {theirs:?}");
        let other = JobKey::from_secret("a key of another job entirely").unwrap();
        let (mine, theirs) = meet(&k, &other);
        assert!(mine.is_err() && theirs.is_err(), "{mine:?} {theirs:?}");
        assert!(format!("{:?}", mine.unwrap_err()).contains("InvalidCertificate"));
    }
}
