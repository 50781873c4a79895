package gitremote

import (
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testgit"
)

func TestFromSecrets(t *testing.T) {
	key, pub := testgit.SSHKeygen(t, "")
	encrypted, _ := testgit.SSHKeygen(t, "pw")
	known := []byte("[127.0.0.1]:2222 " + pub + "\n")
	tests := []struct {
		name    string
		url     string
		auth    map[string][]byte
		proxy   map[string][]byte
		wantErr string
		check   func(*testing.T, Options)
	}{
		{"basic", "https://h/r.git", map[string][]byte{"username": []byte("u"), "password": []byte("p")}, nil, "",
			func(t *testing.T, o Options) {
				if o.Username != "u" || o.Password != "p" {
					t.Errorf("%+v", o)
				}
			}},
		{"bearer and proxy", "https://h/r.git", map[string][]byte{"bearerToken": []byte("tok")},
			map[string][]byte{"address": []byte("http://proxy:3128"), "username": []byte("pu"), "password": []byte("pp")}, "",
			func(t *testing.T, o Options) {
				if o.BearerToken != "tok" || o.Proxy.String() != "http://pu:pp@proxy:3128" {
					t.Errorf("%+v", o)
				}
				if s := o.Secrets(); !strings.Contains(strings.Join(s, ","), "pp") || !strings.Contains(strings.Join(s, ","), "tok") {
					t.Errorf("Secrets() = %v", s)
				}
			}},
		{"no secret", "http://h/r.git", nil, nil, "", nil},
		{"bad ca.crt", "https://h/r.git", map[string][]byte{"ca.crt": []byte("not pem")}, nil, "ca.crt holds no PEM", nil},
		{"ssh", "ssh://git@h/r.git", map[string][]byte{"identity": key, "known_hosts": known}, nil, "", nil},
		{"ssh encrypted", "ssh://git@h/r.git", map[string][]byte{"identity": encrypted, "password": []byte("pw"), "known_hosts": known}, nil, "", nil},
		{"ssh encrypted, no password", "ssh://git@h/r.git", map[string][]byte{"identity": encrypted, "known_hosts": known}, nil, "no password", nil},
		{"ssh without secret", "ssh://git@h/r.git", nil, nil, "needs a Secret with identity", nil},
		{"ssh without known_hosts", "ssh://git@h/r.git", map[string][]byte{"identity": key}, nil, "known_hosts", nil},
		{"ssh bad known_hosts", "ssh://git@h/r.git", map[string][]byte{"identity": key, "known_hosts": []byte("h ssh-ed25519 !!!\n")}, nil, "parsing known_hosts", nil},
		{"ssh bad identity", "ssh://git@h/r.git", map[string][]byte{"identity": []byte("junk"), "known_hosts": known}, nil, "parsing the identity", nil},
		{"ssh with proxy", "ssh://git@h/r.git", map[string][]byte{"identity": key, "known_hosts": known}, map[string][]byte{"address": []byte("http://p:1")}, "only supported for http", nil},
		{"proxy without address", "https://h/r.git", nil, map[string][]byte{"username": []byte("u")}, "no address", nil},
		{"proxy not a URL", "https://h/r.git", nil, map[string][]byte{"address": []byte("proxy:3128")}, "must be a URL", nil},
		{"git scheme", "git://h/r.git", nil, nil, "unsupported URL scheme", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := FromSecrets(tt.url, tt.auth, tt.proxy)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}
