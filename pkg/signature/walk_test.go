package signature_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/signature"
)

// verdicts is a table of tag → verdict, recording which tags were asked.
type verdicts struct {
	table map[string]signature.Verdict
	asked []string
	fail  string
}

func (v *verdicts) check(_ context.Context, tag string) (signature.Verdict, error) {
	v.asked = append(v.asked, tag)
	if tag == v.fail {
		return signature.Verdict{}, errors.New("registry unavailable")
	}
	if r, ok := v.table[tag]; ok {
		return r, nil
	}
	return signature.Verdict{Digest: "sha256:" + tag, Reason: signature.NoSignature, Message: "unsigned"}, nil
}

func signed(tag string) signature.Verdict {
	return signature.Verdict{Digest: "sha256:" + tag, Verified: true, Signer: "key cosign.pub", Format: "bundle"}
}

func TestWalkChoosesTheBestVerifiedAndChecksNothingBelowIt(t *testing.T) {
	v := &verdicts{table: map[string]signature.Verdict{"1.2.0": signed("1.2.0"), "1.1.0": signed("1.1.0")}}
	w, err := signature.FirstVerified(context.Background(), []string{"1.4.0", "1.3.0", "1.2.0", "1.1.0"}, 0, v.check)
	if err != nil {
		t.Fatal(err)
	}
	if w.Tag != "1.2.0" || w.Verdict.Digest != "sha256:1.2.0" {
		t.Fatalf("chose %q (%s), want 1.2.0", w.Tag, w.Verdict.Digest)
	}
	if !slices.Equal(v.asked, []string{"1.4.0", "1.3.0", "1.2.0"}) {
		t.Errorf("asked %v: nothing below the winner is verified", v.asked)
	}
	if len(w.Skipped) != 2 || w.Skipped[0].Tag != "1.4.0" {
		t.Errorf("skipped %+v, want 1.4.0 then 1.3.0", w.Skipped)
	}
	if s := w.Summary(); !strings.Contains(s, "1.2.0") || !strings.Contains(s, "1.4.0") || !strings.Contains(s, "NoSignature") {
		t.Errorf("summary %q", s)
	}
}

func TestWalkWithNothingVerified(t *testing.T) {
	v := &verdicts{}
	w, err := signature.FirstVerified(context.Background(), []string{"3", "2", "1"}, 2, v.check)
	if err != nil {
		t.Fatal(err)
	}
	if w.Tag != "" || !w.Truncated || len(w.Skipped) != 2 || len(v.asked) != 2 {
		t.Fatalf("walk %+v asked %v: want none chosen, two checked, truncated", w, v.asked)
	}
	if s := w.Summary(); !strings.Contains(s, "none of 2") || !strings.Contains(s, "3") {
		t.Errorf("summary %q", s)
	}
}

// A registry failure on a better candidate stops the walk: a lower tag
// must not win because the registry blinked.
func TestWalkStopsOnARegistryFailure(t *testing.T) {
	v := &verdicts{table: map[string]signature.Verdict{"1": signed("1")}, fail: "2"}
	if w, err := signature.FirstVerified(context.Background(), []string{"3", "2", "1"}, 0, v.check); err == nil {
		t.Fatalf("chose %q past a failed check", w.Tag)
	}
}
