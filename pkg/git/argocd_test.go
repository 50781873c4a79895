package git

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// Each of Argo CD's keys becomes this package's, and the result builds an
// Auth by the same rules as any Secret: HTTPS basic credentials with a
// proxy and a client certificate, an SSH key with Argo CD's known hosts,
// a GitHub App.
func TestFromArgoCDMapsArgoCDsKeys(t *testing.T) {
	certPEM, keyPEM := clientCert(t)
	m, err := FromArgoCD(map[string][]byte{
		"url": []byte("https://git.example.com/org/apps.git"), "username": []byte("bot"), "password": []byte("s3cret"),
		"tlsClientCertData": certPEM, "tlsClientCertKey": keyPEM, "proxy": []byte("http://proxy.example.com:3128"),
		"type": []byte("git"), "name": []byte("apps"), "project": []byte("default"), "insecure": []byte("false"),
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := AuthFromSecrets("https://git.example.com/org/apps.git", m.Creds, m.Proxy)
	if err != nil {
		t.Fatal(err)
	}
	if a.Username != "bot" || a.Password != "s3cret" || a.ProxyURL != "http://proxy.example.com:3128" || m.Provider != "" {
		t.Errorf("auth %+v, provider %q", a, m.Provider)
	}
	if certs, err := a.clientCertificates(); err != nil || len(certs) != 1 {
		t.Errorf("client certificate: %v, %v", certs, err)
	}

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	hostKey, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := ssh.NewPublicKey(hostKey)
	knownHosts := []byte("git.example.com " + string(ssh.MarshalAuthorizedKey(pub)))
	m, err = FromArgoCD(map[string][]byte{"sshPrivateKey": pem.EncodeToMemory(block)}, knownHosts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AuthFromSecrets("ssh://git@git.example.com/org/apps.git", m.Creds, m.Proxy); err != nil {
		t.Errorf("ssh: %v", err)
	}
	// Without Argo CD's known hosts the key is refused, as any ssh Secret
	// without known_hosts is.
	m, _ = FromArgoCD(map[string][]byte{"sshPrivateKey": pem.EncodeToMemory(block)}, nil, nil)
	if _, err := AuthFromSecrets("ssh://git@git.example.com/org/apps.git", m.Creds, m.Proxy); !errors.Is(err, ErrInvalidCredentials) ||
		!strings.Contains(err.Error(), "known_hosts") {
		t.Errorf("ssh without known hosts: %v", err)
	}

	m, err = FromArgoCD(map[string][]byte{"githubAppID": []byte("1"), "githubAppInstallationID": []byte("2"),
		"githubAppPrivateKey": []byte("key"), "githubAppEnterpriseBaseUrl": []byte("https://ghe.example.com/api/v3")}, nil, nil)
	if err != nil || m.Provider != "github" || string(m.Creds["githubAppInstallationID"]) != "2" ||
		string(m.Creds["githubAppBaseURL"]) != "https://ghe.example.com/api/v3" {
		t.Errorf("GitHub App: %+v, %v", m, err)
	}
}

// What Argo CD allows and image-toolkit refuses is refused by name.
func TestFromArgoCDRefusesInsecure(t *testing.T) {
	for key, value := range map[string]string{"insecure": "true", "type": "helm", "gcpServiceAccountKey": "{}"} {
		_, err := FromArgoCD(map[string][]byte{"username": []byte("u"), key: []byte(value)}, nil, nil)
		if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: %v", key, value, err)
		}
	}
}

func clientCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bot"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})
}
