package git

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// emptyPack is a pack of no objects, what a push sends when the server has
// everything already: the header and its SHA-1.
func emptyPack() []byte {
	b := []byte("PACK")
	b = binary.BigEndian.AppendUint32(b, 2)
	b = binary.BigEndian.AppendUint32(b, 0)
	sum := sha1.Sum(b)
	return append(b, sum[:]...)
}

// receivePack runs git's own git-receive-pack on a bare repository: the
// advertisement is read, then request is sent and the report read.
func receivePack(t *testing.T, repo string, request func(Refs, map[string]string) []byte) (map[string]string, string, error) {
	t.Helper()
	cmd := exec.Command("git", "receive-pack", repo)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	defer stdin.Close()
	refs, caps, err := ReadPushAdvertisement(stdout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(request(refs, caps)); err != nil {
		t.Fatal(err)
	}
	var said bytes.Buffer
	report, err := ReadPushReport(stdout, true, &said)
	_, _ = io.Copy(io.Discard, stdout)
	return report, said.String(), err
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "gc.auto=0"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestPushAgainstGitReceivePack speaks to git's git-receive-pack: a new
// ref from objects the server has (an empty pack) is reported ok, an
// update from a stale old value is refused with git's reason, and a
// pre-receive hook's refusal comes with what the hook printed.
func TestPushAgainstGitReceivePack(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo.git")
	gitIn(t, filepath.Dir(repo), "init", "-q", "--bare", "-b", "main", repo)
	work := t.TempDir()
	gitIn(t, work, "init", "-q", "-b", "main")
	gitIn(t, work, "commit", "-q", "--allow-empty", "-m", "one")
	one := gitIn(t, work, "rev-parse", "HEAD")
	gitIn(t, work, "commit", "-q", "--allow-empty", "-m", "two")
	two := gitIn(t, work, "rev-parse", "HEAD")
	gitIn(t, work, "push", "-q", repo, "main")

	report, _, err := receivePack(t, repo, func(refs Refs, caps map[string]string) []byte {
		if refs["refs/heads/main"] != two {
			t.Errorf("advertised %v, want main at %s", refs, two)
		}
		if _, ok := caps["report-status"]; !ok {
			t.Errorf("capabilities %v lack report-status", caps)
		}
		return append(PushRequest([]PushCommand{{ZeroID, one, "refs/heads/old"}, {ZeroID, two, "refs/tags/two"}}, caps), emptyPack()...)
	})
	if err != nil || report["refs/heads/old"] != "" || report["refs/tags/two"] != "" || len(report) != 2 {
		t.Fatalf("report %v, err %v", report, err)
	}
	if got := gitIn(t, repo, "rev-parse", "refs/heads/old"); got != one {
		t.Errorf("refs/heads/old = %s, want %s", got, one)
	}

	report, _, err = receivePack(t, repo, func(_ Refs, caps map[string]string) []byte {
		return append(PushRequest([]PushCommand{{one, one, "refs/heads/main"}}, caps), emptyPack()...)
	})
	if err != nil || report["refs/heads/main"] == "" {
		t.Fatalf("a stale old value gave report %v, err %v", report, err)
	}

	hook := filepath.Join(repo, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'main is protected' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	report, said, err := receivePack(t, repo, func(refs Refs, caps map[string]string) []byte {
		return append(PushRequest([]PushCommand{{refs["refs/heads/main"], one, "refs/heads/main"}}, caps), emptyPack()...)
	})
	if err != nil || !strings.Contains(report["refs/heads/main"], "hook declined") || !strings.Contains(said, "main is protected") {
		t.Fatalf("hook refusal: report %v, said %q, err %v", report, said, err)
	}
}

func TestReadPushReport(t *testing.T) {
	band := func(ch byte, s string) string { return pkt(string([]byte{ch}) + s) }
	for _, tt := range []struct {
		name, in string
		sideband bool
		want     map[string]string
		wantErr  string
	}{
		{"plain", pkt("unpack ok\n") + pkt("ok refs/heads/main\n") + pkt("ng refs/heads/x non-fast-forward\n") + flushPkt,
			false, map[string]string{"refs/heads/main": "", "refs/heads/x": "non-fast-forward"}, ""},
		{"report split across sideband packets",
			band(2, "remote: hello\n") + band(1, pkt("unpack ok\n")+"00") + band(1, "17ok refs/heads/main\n"+flushPkt) + flushPkt,
			true, map[string]string{"refs/heads/main": ""}, ""},
		{"unpack failed", pkt("unpack index-pack failed\n") + flushPkt, false, nil, "could not store the pushed objects: index-pack failed"},
		{"error channel", band(3, "disk full\n"), true, nil, "git server: disk full"},
		{"not a report", pkt("hello\n") + flushPkt, false, nil, "not \"unpack\""},
		{"cut short", pkt("unpack ok\n"), false, nil, "ended early"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadPushReport(strings.NewReader(tt.in), tt.sideband, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
			for k, v := range tt.want {
				if r, ok := got[k]; !ok || r != v {
					t.Errorf("%s: got %q, want %q", k, r, v)
				}
			}
		})
	}
}
