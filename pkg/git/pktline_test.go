package git

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

const (
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
	oidC = "3333333333333333333333333333333333333333"
)

func TestReadAdvertisement(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantRefs Refs
		wantCaps map[string]string
		wantErr  string
	}{
		{"v0 over http",
			pkt("# service=git-upload-pack\n") + flushPkt +
				pkt(oidA+" HEAD\x00multi_ack symref=HEAD:refs/heads/main agent=git/2.39\n") +
				pkt(oidA+" refs/heads/main\n") + pkt(oidB+" refs/tags/v1\n") + pkt(oidC+" refs/tags/v1^{}\n") + flushPkt,
			Refs{"HEAD": oidA, "refs/heads/main": oidA, "refs/tags/v1": oidB, "refs/tags/v1^{}": oidC},
			map[string]string{"multi_ack": "", "symref": "HEAD:refs/heads/main", "agent": "git/2.39"}, ""},
		{"v0 over ssh, no service line",
			pkt(oidA+" refs/heads/main\x00caps\n") + flushPkt,
			Refs{"refs/heads/main": oidA}, map[string]string{"caps": ""}, ""},
		{"v1",
			pkt("version 1\n") + pkt(oidA+" refs/heads/main\x00caps\n") + flushPkt,
			Refs{"refs/heads/main": oidA}, map[string]string{"caps": ""}, ""},
		{"empty repository",
			pkt(strings.Repeat("0", 40)+" capabilities^{}\x00caps\n") + flushPkt,
			Refs{}, map[string]string{"caps": ""}, ""},
		{"v2",
			pkt("# service=git-upload-pack\n") + flushPkt + pkt("version 2\n") + pkt("agent=git/2.39\n") +
				pkt("ls-refs=unborn\n") + pkt("object-format=sha1\n") + flushPkt,
			Refs{}, map[string]string{"agent": "git/2.39", "ls-refs": "unborn", "object-format": "sha1"}, ""},
		{"server error", pkt("ERR access denied\n"), nil, nil, "git server: access denied"},
		{"truncated", pkt(oidA + " refs/heads/main\x00caps\n"), nil, nil, "ended early"},
		{"not hex", "zzzz", nil, nil, "not a git pkt-line"},
		{"short oid", pkt("abc refs/heads/main\n") + flushPkt, nil, nil, "malformed ref line"},
		{"too long", "fff5" + strings.Repeat("x", 10), nil, nil, "exceeds"},
		{"cut inside a line", "0032" + oidA, nil, nil, "inside a pkt-line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ad, err := readAdvertisement(newPktReader(strings.NewReader(tt.in)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ad.v2 != strings.Contains(tt.in, "version 2") || !maps.Equal(ad.refs, tt.wantRefs) || !maps.Equal(ad.caps, tt.wantCaps) {
				t.Errorf("got v2=%v refs=%v caps=%v", ad.v2, ad.refs, ad.caps)
			}
		})
	}
	var serr *ServerError
	_, err := readAdvertisement(newPktReader(strings.NewReader(pkt("ERR no\n"))))
	if !errors.As(err, &serr) {
		t.Errorf("ERR packet gave %T", err)
	}
}

func TestLsRefs(t *testing.T) {
	req := string(lsRefsRequest(map[string]string{"agent": "x", "object-format": "sha1"}, []string{"refs/heads/main"}, false))
	want := pkt("command=ls-refs\n") + pkt("agent="+UserAgent+"\n") + pkt("object-format=sha1\n") + delimPkt +
		pkt("peel\n") + pkt("ref-prefix refs/heads/main\n") + flushPkt
	if req != want {
		t.Errorf("request %q, want %q", req, want)
	}
	resp := pkt(oidA+" refs/heads/main\n") + pkt(oidB+" refs/tags/v1 peeled:"+oidC+"\n") + flushPkt
	refs, err := readLsRefs(newPktReader(strings.NewReader(resp)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Refs{"refs/heads/main": oidA, "refs/tags/v1": oidB, "refs/tags/v1^{}": oidC}); !maps.Equal(refs, want) {
		t.Errorf("refs %v, want %v", refs, want)
	}
	if _, err := readLsRefs(newPktReader(strings.NewReader(pkt("garbage\n")+flushPkt)), nil); err == nil {
		t.Error("accepted a malformed ls-refs line")
	}
}

func TestFilter(t *testing.T) {
	refs := Refs{"refs/heads/main": oidA, "refs/heads/mainline": oidB, "refs/tags/v1": oidC}
	if got := filter(refs, []string{"refs/heads/"}); len(got) != 2 || got["refs/tags/v1"] != "" {
		t.Errorf("filter = %v", got)
	}
	if got := filter(refs, nil); len(got) != 3 {
		t.Errorf("no prefixes filtered: %v", got)
	}
}

// Symbolic refs are read from both protocols: v0's symref= capability on
// the first ref line, v2's symref-target attribute of ls-refs.
func TestSymrefsOfBothProtocols(t *testing.T) {
	oid := strings.Repeat("a", 40)
	v0 := pkt(oid+" HEAD\x00multi_ack symref=HEAD:refs/heads/trunk agent=git/2.45\n") + pkt(oid+" refs/heads/trunk\n") + flushPkt
	ad, err := readAdvertisement(newPktReader(strings.NewReader(v0)))
	if err != nil {
		t.Fatal(err)
	}
	if ad.symrefs["HEAD"] != "refs/heads/trunk" || ad.refs["refs/heads/trunk"] != oid {
		t.Errorf("v0: symrefs %v, refs %v", ad.symrefs, ad.refs)
	}
	sym := map[string]string{}
	refs, err := readLsRefs(newPktReader(strings.NewReader(pkt(oid+" HEAD symref-target:refs/heads/trunk\n")+flushPkt)), sym)
	if err != nil || refs["HEAD"] != oid || sym["HEAD"] != "refs/heads/trunk" {
		t.Errorf("v2: refs %v, symrefs %v, %v", refs, sym, err)
	}
	if req := string(lsRefsRequest(nil, []string{"HEAD"}, true)); !strings.Contains(req, "symrefs\n") {
		t.Errorf("request %q does not ask for symrefs", req)
	}
}
