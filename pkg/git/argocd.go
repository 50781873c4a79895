package git

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Argo CD keeps a repository's credentials in Secrets of its namespace
// labelled ArgoCDSecretTypeLabel: a "repository" Secret for one URL, or
// "repo-creds" for every URL under a prefix. Their keys are Argo CD's,
// which ReadRemoteAuth maps to this package's when it reads such a
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

// IsArgoCDSecret reports whether s is one of Argo CD's repository Secrets.
func IsArgoCDSecret(s *corev1.Secret) bool {
	t := s.Labels[ArgoCDSecretTypeLabel]
	return t == ArgoCDRepository || t == ArgoCDRepoCreds
}

// normalizeArgoCDURL is how Argo CD compares repository URLs: lower case,
// without a trailing slash or .git.
func normalizeArgoCDURL(u string) string {
	u = strings.ToLower(strings.TrimSpace(u))
	u = strings.TrimSuffix(u, "/")
	return strings.TrimSuffix(u, ".git")
}

// FindArgoCDSecret picks, among Argo CD's repository Secrets, the one
// Argo CD would use for repoURL: the repository Secret of that URL when it
// holds credentials, else the repo-creds Secret with the longest URL
// prefix of it; nil when none applies (a public repository).
func FindArgoCDSecret(secrets []corev1.Secret, repoURL string) *corev1.Secret {
	want := normalizeArgoCDURL(repoURL)
	var best *corev1.Secret
	bestLen := -1
	for i := range secrets {
		s := &secrets[i]
		u := normalizeArgoCDURL(string(s.Data["url"]))
		switch s.Labels[ArgoCDSecretTypeLabel] {
		case ArgoCDRepository:
			if u == want && hasArgoCDCredentials(s.Data) {
				return s
			}
		case ArgoCDRepoCreds:
			if u != "" && strings.HasPrefix(want, u) && len(u) > bestLen {
				best, bestLen = s, len(u)
			}
		}
	}
	return best
}

func hasArgoCDCredentials(data map[string][]byte) bool {
	for _, k := range []string{"username", "password", "sshPrivateKey", "tlsClientCertData", "githubAppPrivateKey", "bearerToken"} {
		if len(data[k]) > 0 {
			return true
		}
	}
	return false
}

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

// readArgoCDConfig reads what Argo CD keeps beside its Secrets for url: the
// SSH known hosts, or the CA certificates of its host. A missing ConfigMap
// or key is none.
func readArgoCDConfig(ctx context.Context, reader client.Reader, namespace, url string) (knownHosts, ca []byte, err error) {
	ep, err := ParseEndpoint(url)
	if err != nil || ep.Scheme == "http" {
		return nil, nil, err
	}
	name, key := ArgoCDTLSCertsConfigMap, ep.Host
	if ep.Scheme == "ssh" {
		name, key = ArgoCDKnownHostsConfigMap, "ssh_known_hosts"
	}
	cm := &corev1.ConfigMap{}
	switch err := reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cm); {
	case apierrors.IsNotFound(err):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
	}
	v := []byte(cm.Data[key])
	if ep.Scheme == "ssh" {
		return v, nil, nil
	}
	return nil, v, nil
}

// ListArgoCDSecrets lists Argo CD's repository Secrets of namespace,
// sorted by name.
func ListArgoCDSecrets(ctx context.Context, reader client.Reader, namespace string) ([]corev1.Secret, error) {
	var out []corev1.Secret
	for _, t := range []string{ArgoCDRepository, ArgoCDRepoCreds} {
		list := &corev1.SecretList{}
		if err := reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{ArgoCDSecretTypeLabel: t}); err != nil {
			return nil, fmt.Errorf("listing Argo CD's repository Secrets in namespace %s: %w", namespace, err)
		}
		out = append(out, list.Items...)
	}
	slices.SortFunc(out, func(a, b corev1.Secret) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
