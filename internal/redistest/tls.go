package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// RedisTLS starts a fresh redis-server as Redis does, whose Addr takes TLS connections only,
// with a certificate made for the test: self-signed, for 127.0.0.1. The Backend's
// ClientOption and Client trust it, and CACert is its file, for a process the test starts.
// (The server also listens in plain text on a port of its own, which the tests use only to
// see that it is up.)
func RedisTLS(t testing.TB) *Backend {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	port, err := freePort()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	start(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	return &Backend{Name: NameRedis, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), CACert: certFile,
		tls: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key under dir, and
// returns their files and a pool that trusts the certificate.
func selfSigned(t testing.TB, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "latchkey test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("redistest: %v", fmt.Errorf("parse the certificate made: %w", err))
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
