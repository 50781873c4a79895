package git

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrSecretNotFound: a Secret the repository names does not exist (yet).
var ErrSecretNotFound = errors.New("secret not found")

// ReadAuth reads the credentials and proxy Secrets a repository names
// (either name may be empty) in namespace, and builds its Auth by the rules
// of AuthFromSecrets. It also returns the Secrets' values, for redacting
// messages. A missing Secret wraps ErrSecretNotFound, a Secret that breaks
// the rules ErrInvalidCredentials; anything else is the API server's error.
// Both controllers read git Secrets only through it.
func ReadAuth(ctx context.Context, reader client.Reader, namespace, repoURL, secretName, proxySecretName string) (*Auth, []string, error) {
	return ReadRemoteAuth(ctx, reader, namespace, Remote{URL: repoURL, SecretName: secretName, ProxySecretName: proxySecretName})
}

// readSecrets reads the credentials and proxy Secrets (nil for an empty
// name), whether the credentials Secret is Argo CD's, and their values for
// redacting.
func readSecrets(ctx context.Context, reader client.Reader, namespace, secretName, proxySecretName string) (creds, proxy map[string][]byte, argo bool, values []string, err error) {
	read := func(name, what string) (map[string][]byte, error) {
		if name == "" {
			return nil, nil
		}
		s := &corev1.Secret{}
		key := types.NamespacedName{Namespace: namespace, Name: name}
		if err := reader.Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, secretNotFound{key, what}
			}
			return nil, fmt.Errorf("reading Secret %s (the %s): %w", key, what, err)
		}
		if what == "secretRef" {
			argo = IsArgoCDSecret(s)
		}
		for _, v := range s.Data {
			if len(v) >= 4 { // shorter values would redact ordinary words
				values = append(values, string(v))
			}
		}
		if s.Data == nil {
			return map[string][]byte{}, nil
		}
		return s.Data, nil
	}
	if creds, err = read(secretName, "secretRef"); err != nil {
		return nil, nil, false, values, err
	}
	proxy, err = read(proxySecretName, "proxySecretRef")
	return creds, proxy, argo, values, err
}

// secretNotFound names the missing Secret and is ErrSecretNotFound.
type secretNotFound struct {
	key  types.NamespacedName
	what string
}

func (e secretNotFound) Error() string {
	return fmt.Sprintf("Secret %s (the %s) not found", e.key, e.what)
}

func (e secretNotFound) Is(target error) bool { return target == ErrSecretNotFound }
