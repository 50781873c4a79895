package git

import (
	"fmt"
	"strconv"
	"strings"
)

// Argo CD keeps a repository's credentials in Secrets of its namespace
// labelled ArgoCDSecretTypeLabel: a "repository" Secret for one URL, or
// "repo-creds" for every URL under a prefix. Their keys are Argo CD's,
// which NewRemoteAuth maps to this package's (FromArgoCD) when given such a
// Secret, so that Argo CD users keep one set of credentials.
const (
	ArgoCDSecretTypeLabel = "argocd.argoproj.io/secret-type"
	ArgoCDRepository      = "repository"
	ArgoCDRepoCreds       = "repo-creds"
	// ArgoCDKnownHostsConfigMap and ArgoCDTLSCertsConfigMap are where
	// Argo CD keeps the SSH known hosts (key ssh_known_hosts) and the CA
	// certificates of HTTPS servers (a key per host name).
	ArgoCDKnownHostsConfigMap = "argocd-ssh-known-hosts-cm"
	ArgoCDTLSCertsConfigMap   = "argocd-tls-certs-cm"
)

// ArgoCDCredentials are an Argo CD repository Secret's data in this
// package's terms.
type ArgoCDCredentials struct {
	// Creds are the credentials Secret's keys (username, password,
	// bearerToken, identity, known_hosts, ca.crt, tls.crt, tls.key, or a
	// GitHub App's), Proxy the proxy Secret's (address), nil without one.
	Creds, Proxy map[string][]byte
	// Provider is github for a GitHub App's credentials, else "".
	Provider string
}

// FromArgoCD maps the data of an Argo CD repository Secret. knownHosts
// are Argo CD's SSH known hosts, ca the CA certificates Argo CD keeps for
// the repository's host (either may be empty). What Argo CD can do and
// this package refuses is an ErrInvalidCredentials error naming the key:
// insecure (TLS and host keys are always verified here) and credentials
// for other than git.
func FromArgoCD(data map[string][]byte, knownHosts, ca []byte) (ArgoCDCredentials, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: Argo CD repository Secret: %s", ErrInvalidCredentials, fmt.Sprintf(format, args...))
	}
	if v := strings.TrimSpace(string(data["insecure"])); v != "" {
		if b, err := strconv.ParseBool(v); err != nil || b {
			return ArgoCDCredentials{}, invalid("insecure is set: image-toolkit always verifies TLS certificates and SSH host keys; add the CA to %s or the host key to %s instead",
				ArgoCDTLSCertsConfigMap, ArgoCDKnownHostsConfigMap)
		}
	}
	if t := string(data["type"]); t != "" && t != "git" {
		return ArgoCDCredentials{}, invalid("type %q: only git repositories are written to", t)
	}
	if len(data["gcpServiceAccountKey"]) > 0 {
		return ArgoCDCredentials{}, invalid("gcpServiceAccountKey is not supported")
	}
	out := ArgoCDCredentials{Creds: map[string][]byte{}}
	for from, to := range map[string]string{
		"username": "username", "password": "password", "bearerToken": "bearerToken",
		"sshPrivateKey": "identity", "tlsClientCertData": "tls.crt", "tlsClientCertKey": "tls.key",
		"githubAppID": "githubAppID", "githubAppInstallationID": "githubAppInstallationID",
		"githubAppPrivateKey": "githubAppPrivateKey", "githubAppEnterpriseBaseUrl": "githubAppBaseURL",
	} {
		if v := data[from]; len(v) > 0 {
			out.Creds[to] = v
		}
	}
	if len(out.Creds["identity"]) > 0 {
		out.Creds["known_hosts"] = knownHosts
	}
	if len(ca) > 0 {
		out.Creds["ca.crt"] = ca
	}
	if len(out.Creds["githubAppPrivateKey"]) > 0 {
		out.Provider = "github"
	}
	if p := strings.TrimSpace(string(data["proxy"])); p != "" {
		out.Proxy = map[string][]byte{"address": []byte(p)}
	}
	return out, nil
}
