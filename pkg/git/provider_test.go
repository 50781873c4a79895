package git

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestUnregisteredProvider proves that a program without the providers
// (tk-image) says a github or azure repository's credentials are the
// controllers' to issue, and calls an unknown provider unknown; both are
// ErrInvalidCredentials, before any network call.
func TestUnregisteredProvider(t *testing.T) {
	tests := []struct{ provider, want string }{
		{"github", "provider github: credentials are issued by the controllers; this program does not read cloud or GitHub App identities"},
		{"azure", "provider azure: credentials are issued by the controllers"},
		{"gitlab", `provider "gitlab" is not one this program knows (generic, github, azure)`},
	}
	for _, tt := range tests {
		_, err := NewRemoteAuth(context.Background(), "apps",
			Remote{URL: "https://dev.azure.com/org/project/_git/fleet", Provider: tt.provider}, Secrets{})
		if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.provider, err, tt.want)
		}
	}
}
