// Package gitsecret reads from the API server the Secrets (and Argo CD's
// ConfigMaps) a repository names, for pkg/git to build its Auth from. It is
// the Kubernetes half of pkg/git, split from it so that the write-back
// engine, which takes plain values, links no Kubernetes client: the
// controllers and tk-image read here, an embedder of the engine passes its
// own credentials.
package gitsecret

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/git"
)

// ErrNotFound: a Secret the repository names does not exist (yet).
var ErrNotFound = errors.New("secret not found")

// Read reads the credentials and proxy Secrets repository r names (either
// name may be empty) in namespace, and Argo CD's ConfigMaps beside an Argo
// CD repository Secret, and builds its Auth (git.NewRemoteAuth). It also
// returns the Secrets' values, for redacting messages. A missing Secret
// wraps ErrNotFound, a Secret that breaks the rules
// git.ErrInvalidCredentials; anything else is the API server's error. Both
// controllers and tk-image read git Secrets only through it.
func Read(ctx context.Context, reader client.Reader, namespace string, r git.Remote) (*git.Auth, []string, error) {
	s, values, err := readSecrets(ctx, reader, namespace, r.SecretName, r.ProxySecretName)
	if err != nil {
		return nil, values, err
	}
	if s.ArgoCD {
		if s.KnownHosts, s.CA, err = readArgoCDConfig(ctx, reader, namespace, r.URL); err != nil {
			return nil, values, err
		}
	}
	auth, err := git.NewRemoteAuth(ctx, namespace, r, s)
	return auth, values, err
}

// readSecrets reads the credentials and proxy Secrets (nil for an empty
// name), whether the credentials Secret is Argo CD's, and their values for
// redacting.
func readSecrets(ctx context.Context, reader client.Reader, namespace, secretName, proxySecretName string) (s git.Secrets, values []string, err error) {
	read := func(name, what string) (map[string][]byte, error) {
		if name == "" {
			return nil, nil
		}
		sec := &corev1.Secret{}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		if err := reader.Get(ctx, key, sec); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, notFound{key, what}
			}
			return nil, fmt.Errorf("reading Secret %s (the %s): %w", key, what, err)
		}
		if what == "secretRef" {
			s.ArgoCD = IsArgoCD(sec)
		}
		for _, v := range sec.Data {
			if len(v) >= 4 { // shorter values would redact ordinary words
				values = append(values, string(v))
			}
		}
		if sec.Data == nil {
			return map[string][]byte{}, nil
		}
		return sec.Data, nil
	}
	if s.Creds, err = read(secretName, "secretRef"); err != nil {
		return s, values, err
	}
	s.Proxy, err = read(proxySecretName, "proxySecretRef")
	return s, values, err
}

// notFound names the missing Secret and is ErrNotFound.
type notFound struct {
	key  types.NamespacedName
	what string
}

func (e notFound) Error() string {
	return fmt.Sprintf("Secret %s (the %s) not found", e.key, e.what)
}

func (e notFound) Is(target error) bool { return target == ErrNotFound }

// IsArgoCD reports whether s is one of Argo CD's repository Secrets.
func IsArgoCD(s *corev1.Secret) bool {
	t := s.Labels[git.ArgoCDSecretTypeLabel]
	return t == git.ArgoCDRepository || t == git.ArgoCDRepoCreds
}

// normalizeArgoCDURL is how Argo CD compares repository URLs: lower case,
// without a trailing slash or .git.
func normalizeArgoCDURL(u string) string {
	u = strings.ToLower(strings.TrimSpace(u))
	u = strings.TrimSuffix(u, "/")
	return strings.TrimSuffix(u, ".git")
}

// FindArgoCD picks, among Argo CD's repository Secrets, the one
// Argo CD would use for repoURL: the repository Secret of that URL when it
// holds credentials, else the repo-creds Secret with the longest URL
// prefix of it; nil when none applies (a public repository).
func FindArgoCD(secrets []corev1.Secret, repoURL string) *corev1.Secret {
	want := normalizeArgoCDURL(repoURL)
	var best *corev1.Secret
	bestLen := -1
	for i := range secrets {
		s := &secrets[i]
		u := normalizeArgoCDURL(string(s.Data["url"]))
		switch s.Labels[git.ArgoCDSecretTypeLabel] {
		case git.ArgoCDRepository:
			if u == want && hasArgoCDCredentials(s.Data) {
				return s
			}
		case git.ArgoCDRepoCreds:
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

// readArgoCDConfig reads what Argo CD keeps beside its Secrets for url: the
// SSH known hosts, or the CA certificates of its host. A missing ConfigMap
// or key is none.
func readArgoCDConfig(ctx context.Context, reader client.Reader, namespace, url string) (knownHosts, ca []byte, err error) {
	ep, err := git.ParseEndpoint(url)
	if err != nil || ep.Scheme == "http" {
		return nil, nil, err
	}
	name, key := git.ArgoCDTLSCertsConfigMap, ep.Host
	if ep.Scheme == "ssh" {
		name, key = git.ArgoCDKnownHostsConfigMap, "ssh_known_hosts"
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

// ListArgoCD lists Argo CD's repository Secrets of namespace,
// sorted by name.
func ListArgoCD(ctx context.Context, reader client.Reader, namespace string) ([]corev1.Secret, error) {
	var out []corev1.Secret
	for _, t := range []string{git.ArgoCDRepository, git.ArgoCDRepoCreds} {
		list := &corev1.SecretList{}
		if err := reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{git.ArgoCDSecretTypeLabel: t}); err != nil {
			return nil, fmt.Errorf("listing Argo CD's repository Secrets in namespace %s: %w", namespace, err)
		}
		out = append(out, list.Items...)
	}
	slices.SortFunc(out, func(a, b corev1.Secret) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}
