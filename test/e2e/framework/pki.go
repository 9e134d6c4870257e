package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// pki is the control plane's certificate authority and the files made from it.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	// CAFile is the CA certificate, trusted by every client and by the API server for
	// client certificates.
	CAFile string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "gpudra-e2e-ca"}, key)
	if err != nil {
		return nil, fmt.Errorf("create the e2e CA: %w", err)
	}
	p := &pki{dir: dir, caCert: ca, caKey: key, CAFile: filepath.Join(dir, "ca.crt")}
	if err := os.WriteFile(p.CAFile, pemCert(ca.Raw), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// certPair is a certificate and key written to files.
type certPair struct{ CertFile, KeyFile string }

// serving issues the API server's serving certificate for 127.0.0.1, localhost and extra.
func (p *pki) serving(name string, extra ...net.IP) (certPair, error) {
	return p.issue(name, x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, extra...),
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
}

// client issues a client certificate for user cn in groups orgs, as the API server's
// x509 authenticator reads them (CN user, O groups).
func (p *pki) client(name, cn string, orgs ...string) (certPair, error) {
	return p.issue(name, x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p *pki) issue(name string, tmpl x509.Certificate) (certPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return certPair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return certPair{}, fmt.Errorf("issue the %s certificate: %w", name, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return certPair{}, err
	}
	pair := certPair{CertFile: filepath.Join(p.dir, name+".crt"), KeyFile: filepath.Join(p.dir, name+".key")}
	if err := os.WriteFile(pair.CertFile, pemCert(der), 0o600); err != nil {
		return certPair{}, err
	}
	return pair, os.WriteFile(pair.KeyFile, keyPEM, 0o600)
}

// serviceAccountKey writes the key pair that signs and verifies ServiceAccount tokens.
func (p *pki) serviceAccountKey() (certPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certPair{}, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return certPair{}, err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return certPair{}, err
	}
	pair := certPair{CertFile: filepath.Join(p.dir, "sa.pub"), KeyFile: filepath.Join(p.dir, "sa.key")}
	if err := os.WriteFile(pair.CertFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return certPair{}, err
	}
	return pair, os.WriteFile(pair.KeyFile, keyPEM, 0o600)
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
