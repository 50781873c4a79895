package git

import (
	"errors"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// One Secret, one verdict: these are the rules by which both controllers
// read a repository's credentials and proxy Secrets (the automation before it
// lists a branch, a job before it fetches), with the cases on which the two
// once disagreed: SOCKS5 proxies, SSH through a proxy, scp-like URLs, a
// username without a password, a bearer token over plain http.
func TestAuthFromSecrets(t *testing.T) {
	key, _ := testgit.SSHKeygen(t, "")
	encrypted, _ := testgit.SSHKeygen(t, "key-secret")
	known := []byte("[git.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
	tests := []struct {
		name    string
		url     string
		creds   map[string][]byte
		proxy   map[string][]byte
		want    Auth
		wantErr string // substring of an ErrInvalidCredentials error
	}{
		{name: "public https", url: "https://git.example.com/fleet.git"},
		{name: "basic", url: "https://git.example.com/fleet.git",
			creds: map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret")},
			want:  Auth{Username: "bot", Password: "s3cret"}},
		{name: "basic over http is allowed", url: "http://git.example.com/fleet.git",
			creds: map[string][]byte{"username": []byte("bot"), "password": []byte("s3cret")},
			want:  Auth{Username: "bot", Password: "s3cret"}},
		{name: "username without password (a token as user name)", url: "https://git.example.com/fleet.git",
			creds: map[string][]byte{"username": []byte("tok-s3cret")}, want: Auth{Username: "tok-s3cret"}},
		{name: "ssh known_hosts only whitespace", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": []byte(" \n\t\n")}, wantErr: "known_hosts"},
		{name: "password without username", url: "https://git.example.com/fleet.git",
			creds: map[string][]byte{"password": []byte("s3cret")}, wantErr: "without username"},
		{name: "bearer", url: "https://git.example.com/fleet.git",
			creds: map[string][]byte{"bearerToken": []byte("tok-s3cret")}, want: Auth{BearerToken: "tok-s3cret"}},
		{name: "bearer over http", url: "http://git.example.com/fleet.git",
			creds: map[string][]byte{"bearerToken": []byte("tok-s3cret")}, wantErr: "plain http"},
		{name: "bearer and basic", url: "https://git.example.com/fleet.git",
			creds:   map[string][]byte{"bearerToken": []byte("tok-s3cret"), "username": []byte("bot"), "password": []byte("s3cret")},
			wantErr: "cannot be used together"},
		{name: "ca.crt not PEM", url: "https://git.example.com/fleet.git",
			creds: map[string][]byte{"ca.crt": []byte("not a certificate s3cret")}, wantErr: "no PEM certificate"},
		{name: "ssh", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": known},
			want:  Auth{Identity: key, KnownHosts: known}},
		{name: "scp-like ssh", url: "git@git.example.com:org/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": known},
			want:  Auth{Identity: key, KnownHosts: known}},
		{name: "ssh encrypted identity", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": encrypted, "password": []byte("key-secret"), "known_hosts": known},
			want:  Auth{Identity: encrypted, IdentityPassword: "key-secret", KnownHosts: known}},
		{name: "ssh identity wrong password", url: "ssh://git@git.example.com:2222/fleet.git",
			creds:   map[string][]byte{"identity": encrypted, "password": []byte("s3cret"), "known_hosts": known},
			wantErr: "does not decrypt"},
		{name: "ssh identity encrypted without password", url: "ssh://git@git.example.com:2222/fleet.git",
			creds:   map[string][]byte{"identity": encrypted, "known_hosts": known},
			wantErr: "no password"},
		{name: "ssh without known_hosts", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key}, wantErr: "known_hosts"},
		{name: "ssh without identity", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"known_hosts": known}, wantErr: "identity"},
		{name: "ssh without secret", url: "ssh://git@git.example.com:2222/fleet.git", wantErr: "identity"},
		{name: "ssh malformed known_hosts", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": []byte("git.example.com ssh-ed25519 !!!\n")}, wantErr: "known_hosts:1"},
		{name: "ssh identity not a key", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": []byte("s3cret"), "known_hosts": known}, wantErr: "not a private key"},
		{name: "ssh with a proxy", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": known},
			proxy: map[string][]byte{"address": []byte("http://proxy:3128")},
			want:  Auth{Identity: key, KnownHosts: known, ProxyURL: "http://proxy:3128"}},
		{name: "proxy", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("http://proxy:3128"), "username": []byte("pu"), "password": []byte("p@ss s3cret")},
			want:  Auth{ProxyURL: "http://pu:p%40ss%20s3cret@proxy:3128"}},
		{name: "proxy without credentials", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("https://proxy:3128/")}, want: Auth{ProxyURL: "https://proxy:3128"}},
		{name: "proxy without address", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"username": []byte("pu")}, wantErr: "no address"},
		{name: "proxy address malformed", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("http://pu:s3cret@proxy:99999999x")}, wantErr: "not a URL"},
		{name: "proxy address without scheme", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("proxy:3128")}, wantErr: "not a URL"},
		{name: "proxy for http", url: "http://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("http://proxy:3128")}, want: Auth{ProxyURL: "http://proxy:3128"}},
		{name: "socks proxy", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("socks5://proxy:1080")}, want: Auth{ProxyURL: "socks5://proxy:1080"}},
		{name: "ssh through a socks proxy", url: "ssh://git@git.example.com:2222/fleet.git",
			creds: map[string][]byte{"identity": key, "known_hosts": known},
			proxy: map[string][]byte{"address": []byte("socks5://proxy:1080")},
			want:  Auth{Identity: key, KnownHosts: known, ProxyURL: "socks5://proxy:1080"}},
		{name: "ftp proxy", url: "https://git.example.com/fleet.git",
			proxy: map[string][]byte{"address": []byte("ftp://proxy:21")}, wantErr: "want http, https or socks5"},
		{name: "unsupported scheme", url: "file:///etc/fleet.git", wantErr: "unsupported URL scheme"},
		{name: "URL not parsable", url: "https://bot:s3cret@git.example.com:x/fleet.git", wantErr: "not a valid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := AuthFromSecrets(tt.url, tt.creds, tt.proxy)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalidCredentials) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want ErrInvalidCredentials with %q, got %v", tt.wantErr, err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error quotes a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Username != tt.want.Username || a.Password != tt.want.Password || a.BearerToken != tt.want.BearerToken ||
				string(a.Identity) != string(tt.want.Identity) || a.IdentityPassword != tt.want.IdentityPassword ||
				string(a.KnownHosts) != string(tt.want.KnownHosts) || a.ProxyURL != tt.want.ProxyURL {
				t.Errorf("got %+v\nwant %+v", *a, tt.want)
			}
		})
	}
}
