package signature_test

import (
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
	"toolkit.dev/image-toolkit/pkg/testing/testsign"
)

// These tests sign with the real cosign and notation CLIs (make
// sign-tools); they skip without them, and make test-integrations runs
// them.

func keyed(keys map[string][]byte) signature.Config {
	return signature.Config{Provider: signature.Cosign, Keys: keys}
}

func TestCosignKeyedSignaturesVerifyInBothFormats(t *testing.T) {
	c := testsign.NewCosign(t)
	for _, r := range registries {
		for _, format := range []testsign.Format{testsign.Bundle, testsign.Legacy} {
			t.Run(r.name+"/"+string(format), func(t *testing.T) {
				reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
				d := reg.Push(t, "app", "1.0.0")
				c.Sign(t, reg.Repo("app")+"@"+d, format)
				v := check(t, keyed(map[string][]byte{"cosign.pub": c.PublicKey}), signature.Limits{}, reg, "app", d)
				wantVerified(t, v, "key cosign.pub")
				if v.Format != string(format) {
					t.Errorf("format %q, want %q", v.Format, format)
				}
			})
		}
	}
}

// Every key of the set is tried; a signature by a key outside it is
// Untrusted, in either format.
func TestCosignKeySet(t *testing.T) {
	signer, other := testsign.NewCosign(t), testsign.NewCosign(t)
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	for _, format := range []testsign.Format{testsign.Bundle, testsign.Legacy} {
		d := reg.Push(t, "app", "1.0.0-"+string(format))
		signer.Sign(t, reg.Repo("app")+"@"+d, format)
		v := check(t, keyed(map[string][]byte{"a.pub": other.PublicKey, "b.pub": signer.PublicKey}), signature.Limits{}, reg, "app", d)
		wantVerified(t, v, "key b.pub")
		v = check(t, keyed(map[string][]byte{"a.pub": other.PublicKey}), signature.Limits{}, reg, "app", d)
		wantReason(t, v, signature.Untrusted)
		if !strings.Contains(v.Message, "a.pub") {
			t.Errorf("message %q does not name the key tried", v.Message)
		}
	}
}

func TestNotationSignatureVerifiesWithItsCA(t *testing.T) {
	n := testsign.NewNotation(t, "release")
	for _, r := range registries {
		t.Run(r.name, func(t *testing.T) {
			reg := testregistry.New(t, testregistry.Options{Referrers: r.referrers})
			d := reg.Push(t, "app", "1.0.0")
			cfg := signature.Config{Provider: signature.Notation, TrustPolicy: testsign.TrustPolicy("release", "*"),
				Certificates: map[string][]byte{"ca.crt": n.Certificate}}
			wantReason(t, check(t, cfg, signature.Limits{}, reg, "app", d), signature.NoSignature)
			n.Sign(t, reg.Repo("app")+"@"+d)
			v := check(t, cfg, signature.Limits{}, reg, "app", d)
			wantVerified(t, v, "release")
			if v.Format != "notation" {
				t.Errorf("format %q", v.Format)
			}
		})
	}
}

func TestNotationOtherCAIsUntrusted(t *testing.T) {
	n, other := testsign.NewNotation(t, "release"), testsign.NewNotation(t, "mallory")
	reg := testregistry.New(t, testregistry.Options{Referrers: true})
	d := reg.Push(t, "app", "1.0.0")
	other.Sign(t, reg.Repo("app")+"@"+d)
	cfg := signature.Config{Provider: signature.Notation, TrustPolicy: testsign.TrustPolicy("release", "*"),
		Certificates: map[string][]byte{"ca.crt": n.Certificate}}
	wantReason(t, check(t, cfg, signature.Limits{}, reg, "app", d), signature.Untrusted)
}
