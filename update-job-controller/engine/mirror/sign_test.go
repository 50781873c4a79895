package mirror

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"

	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// gpg runs gpg with its own home, which is removed with its agent at the
// end of the test.
type gpg struct {
	t    *testing.T
	home string
}

func newGPG(t *testing.T) *gpg {
	t.Helper()
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg is not installed (Debian package gnupg; make deps)")
	}
	// gpg-agent's socket path must stay short: not under t.TempDir().
	home, err := os.MkdirTemp("", "gpg-")
	if err != nil {
		t.Fatal(err)
	}
	// gpg protects exported keys with 65 million hash rounds by default,
	// seconds of work under the race detector for each decryption; the
	// format stays the same with fewer.
	if err := os.WriteFile(filepath.Join(home, "gpg-agent.conf"), []byte("s2k-count 65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &gpg{t: t, home: home}
	t.Cleanup(func() {
		kill := exec.Command("gpgconf", "--kill", "gpg-agent")
		kill.Env = g.env()
		_ = kill.Run()
		_ = os.RemoveAll(home)
	})
	return g
}

func (g *gpg) env() []string { return append(os.Environ(), "GNUPGHOME="+g.home) }

func (g *gpg) run(stdin []byte, args ...string) []byte {
	g.t.Helper()
	cmd := exec.Command("gpg", append([]string{"--batch", "--no-tty", "--pinentry-mode", "loopback"}, args...)...)
	cmd.Env = g.env()
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		g.t.Fatalf("gpg %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// gpgKey makes an ed25519 signing key with gpg and returns it armored,
// secret (encrypted with passphrase) and public.
func gpgKey(t *testing.T, passphrase string) (secret, public []byte) {
	g := newGPG(t)
	g.run(nil, "--passphrase", passphrase, "--quick-gen-key", "Bot <bot@example.com>", "ed25519", "sign", "never")
	return g.run(nil, "--passphrase", passphrase, "--armor", "--export-secret-keys", "bot@example.com"),
		g.run(nil, "--armor", "--export", "bot@example.com")
}

// openpgpPublicKey returns the armored public key of a new key (made
// without gpg, which takes seconds).
func openpgpPublicKey(t *testing.T) []byte {
	e, err := openpgp.NewEntity("Bot", "", "bot@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestSignedCommitsVerifyWithGit(t *testing.T) {
	gpgSecret, gpgPublic := gpgKey(t, "gpg-pass")
	otherGPGPublic := openpgpPublicKey(t)
	sshKey, sshPublic := testgit.SSHKeygen(t, "ssh-pass")
	_, otherSSHPublic := testgit.SSHKeygen(t, "")

	// verify runs git verify-commit with the given public key trusted.
	type verifier func(t *testing.T, dir, commit string, public []byte) error
	gitVerify := func(t *testing.T, dir string, env []string, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return err
	}
	verifyGPG := func(t *testing.T, dir, commit string, public []byte) error {
		g := newGPG(t)
		g.run(public, "--import")
		return gitVerify(t, dir, g.env()[len(os.Environ()):], "verify-commit", commit)
	}
	verifySSH := func(t *testing.T, dir, commit string, public []byte) error {
		allowed := filepath.Join(t.TempDir(), "allowed_signers")
		if err := os.WriteFile(allowed, []byte("bot@example.com "+string(public)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return gitVerify(t, dir, nil, "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", commit)
	}

	tests := []struct {
		name          string
		keyType       string
		data          map[string][]byte
		public, other []byte
		verify        verifier
		armor         string
	}{
		{"gpg", "gpg", map[string][]byte{"git.asc": gpgSecret, "passphrase": []byte("gpg-pass")},
			gpgPublic, otherGPGPublic, verifyGPG, "-----BEGIN PGP SIGNATURE-----"},
		{"ssh", "ssh", map[string][]byte{"identity": sshKey, "password": []byte("ssh-pass")},
			[]byte(sshPublic), []byte(otherSSHPublic), verifySSH, "-----BEGIN SSH SIGNATURE-----"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer, err := NewSigner(tt.keyType, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			srv := testgit.New(t, testgit.Options{})
			srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
			m, release, parent, dir := checkout(t, srv)
			defer release()
			if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ci := info("Update images\n\nSigned by the bot.")
			ci.Signer = signer
			commit, err := m.Commit(mustOid(t, parent), dir, []string{"apps/app.yaml"}, ci)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Push(context.Background(), nil, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
				t.Fatal(err)
			}

			clone := t.TempDir()
			testgit.Git(t, "", "clone", "-q", srv.RepoURL("fleet"), clone)
			raw := testgit.Git(t, clone, "cat-file", "commit", commit.String())
			if !strings.Contains(raw, "\ngpgsig "+tt.armor) || strings.Contains(raw, "SIGNATURE-----\n \n\n") {
				t.Errorf("the commit's signature header is not what git writes:\n%s", raw)
			}
			if err := tt.verify(t, clone, commit.String(), tt.public); err != nil {
				t.Errorf("git verify-commit with the signer's key: %v", err)
			}
			if err := tt.verify(t, clone, commit.String(), tt.other); err == nil {
				t.Error("git verify-commit succeeded with another key")
			}
			if log, content := remoteFile(t, srv, "main", "apps/app.yaml"); !strings.HasPrefix(log, commit.String()+" "+parent) || content != "image: a:2\n" {
				t.Errorf("remote main: %q, %q", log, content)
			}
		})
	}
}

func TestNewSignerRejectsBadKeys(t *testing.T) {
	gpgSecret, gpgPublic := gpgKey(t, "gpg-s3cret")
	sshKey, _ := testgit.SSHKeygen(t, "ssh-s3cret")
	tests := []struct {
		name    string
		keyType string
		data    map[string][]byte
		want    string
	}{
		{"gpg wrong passphrase", "gpg", map[string][]byte{"git.asc": gpgSecret, "passphrase": []byte("wrong-s3cret")}, "does not decrypt"},
		{"gpg no passphrase", "gpg", map[string][]byte{"git.asc": gpgSecret}, "no passphrase"},
		{"gpg public key only", "gpg", map[string][]byte{"git.asc": gpgPublic}, "no private key"},
		{"gpg not a key", "gpg", map[string][]byte{"git.asc": []byte("s3cret")}, "not an armored OpenPGP key"},
		{"gpg missing", "gpg", map[string][]byte{"identity": sshKey}, "git.asc is missing"},
		{"ssh wrong password", "ssh", map[string][]byte{"identity": sshKey, "password": []byte("wrong-s3cret")}, "does not decrypt"},
		{"ssh no password", "ssh", map[string][]byte{"identity": sshKey}, "no password"},
		{"ssh not a key", "ssh", map[string][]byte{"identity": []byte("s3cret")}, "not an SSH private key"},
		{"unknown type", "x509", map[string][]byte{"git.asc": gpgSecret}, "unknown signing key type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSigner(tt.keyType, tt.data)
			if !errors.Is(err, ErrInvalidSigningKey) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want ErrInvalidSigningKey saying %q, got %v", tt.want, err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error quotes a secret: %v", err)
			}
		})
	}
}
