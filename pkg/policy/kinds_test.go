package policy

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Kinds has one entry per field of spec.policy, in the API's order, and
// each entry recognises its own field and no other: a field added to
// ImagePolicyChoice without its kind (or the reverse) fails here.
func TestKindsAreTheChoiceFields(t *testing.T) {
	typ := reflect.TypeFor[imagev1.ImagePolicyChoice]()
	var fields []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	if !slices.Equal(fields, Fields()) {
		t.Fatalf("ImagePolicyChoice's fields %v, the kinds' %v", fields, Fields())
	}
	for i := range typ.NumField() {
		var choice imagev1.ImagePolicyChoice
		f := reflect.ValueOf(&choice).Elem().Field(i)
		f.Set(reflect.New(f.Type().Elem()))
		for _, k := range Kinds {
			if got, want := k.Sets(choice), k.Field == fields[i]; got != want {
				t.Errorf("kind %s: Sets(choice with %s) = %v", k.Field, fields[i], got)
			}
		}
	}
}

// The CRD's exactly-one rule is a static CEL marker; it names the kinds'
// fields, in order, and says what New says.
func TestCELRuleIsTheKinds(t *testing.T) {
	src, err := os.ReadFile("../apis/image/v1beta1/imagepolicy_types.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^// \+kubebuilder:validation:XValidation:rule="(.*)",message="(.*)"\ntype ImagePolicyChoice struct`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no XValidation marker on ImagePolicyChoice")
	}
	var has []string
	for _, h := range regexp.MustCompile(`has\(self\.(\w+)\)`).FindAllSubmatch(m[1], -1) {
		has = append(has, string(h[1]))
	}
	want := "[has(self." + strings.Join(Fields(), "), has(self.") + ")].filter(x, x).size() == 1"
	if !slices.Equal(has, Fields()) || string(m[1]) != want {
		t.Errorf("CEL rule %s, want %s", m[1], want)
	}
	if string(m[2]) != ExactlyOne() {
		t.Errorf("CEL message %q, New says %q", m[2], ExactlyOne())
	}
	if _, err := New(imagev1.ImagePolicyChoice{}, nil); err == nil || err.Error() != "invalid policy: "+ExactlyOne() {
		t.Errorf("New of no kind: %v", err)
	}
}

// Each kind's flag, given a value, sets that kind and a policy New
// accepts; ByBuildTime is what the policy needs; a bad value is refused
// as New or the flag's Check refuses it, and each annotation reads as the
// flag does.
func TestKindFlags(t *testing.T) {
	tests := map[string]struct {
		good, bad  string
		annotation string
	}{
		"semver":       {good: ">=1.0.0 <2.0.0", bad: "not a range", annotation: ">=1.0.0 <2.0.0"},
		"docker":       {good: ">=7.2 <8", bad: "not a range", annotation: ">=7.2 <8"},
		"alphabetical": {good: "desc", bad: "up", annotation: "desc"},
		"numerical":    {good: "asc", bad: "down", annotation: "asc"},
		"newestBuild":  {good: "true"},
	}
	for _, k := range Ordering() {
		tt, ok := tests[k.Field]
		if !ok {
			t.Errorf("kind %s has no test case", k.Field)
			continue
		}
		var choice imagev1.ImagePolicyChoice
		if err := k.Flag.Set(&choice, tt.good); err != nil || !k.Sets(choice) {
			t.Errorf("%s: --%s %s: %v, sets it: %v", k.Field, k.Flag.Name, tt.good, err, k.Sets(choice))
			continue
		}
		p, err := New(choice, nil)
		if err != nil {
			t.Errorf("%s: %v", k.Field, err)
			continue
		}
		if p.NeedsTimes() != k.ByBuildTime {
			t.Errorf("%s: NeedsTimes %v, ByBuildTime %v", k.Field, p.NeedsTimes(), k.ByBuildTime)
		}
		if tt.bad != "" {
			var bad imagev1.ImagePolicyChoice
			_ = k.Flag.Set(&bad, tt.bad)
			if _, err := New(bad, nil); err == nil {
				t.Errorf("%s: New accepts --%s %q", k.Field, k.Flag.Name, tt.bad)
			}
			if _, err := k.Annotate(tt.bad); err == nil {
				t.Errorf("%s: annotation accepts %q", k.Field, tt.bad)
			}
		}
		if (k.Annotation != "") != (tt.annotation != "") {
			t.Errorf("%s: annotation %q", k.Field, k.Annotation)
		}
		if tt.annotation != "" {
			got, err := k.Annotate(tt.annotation)
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(choice)
			if err != nil || string(a) != string(b) {
				t.Errorf("%s: annotation gives %s (%v), the flag %s", k.Field, a, err, b)
			}
		}
	}
}

// newestBuild's --max-candidates refines the kind within the API's bounds;
// docker's --compatible-with sets the reference tag whatever order the
// flags are set in, and New refuses a reference that is no version.
func TestQualifiers(t *testing.T) {
	d, _ := KindOf("docker")
	var dc imagev1.ImagePolicyChoice
	_ = d.Qualifiers[0].Set(&dc, "7.2-alpine")
	_ = d.Flag.Set(&dc, ">=7.2 <8")
	if want := (imagev1.DockerPolicy{Range: ">=7.2 <8", CompatibleWith: "7.2-alpine"}); dc.Docker == nil || *dc.Docker != want {
		t.Errorf("--docker with --compatible-with: %+v", dc.Docker)
	}
	if err := d.Qualifiers[0].Check("alpine"); err == nil {
		t.Error("--compatible-with alpine passes its check")
	}
	if err := errors.Join(d.Qualifiers[0].Check(""), d.Qualifiers[0].Check("7.2-alpine")); err != nil {
		t.Errorf("--compatible-with check: %v", err)
	}
	dc.Docker.CompatibleWith = "alpine"
	if _, err := New(dc, nil); err == nil || !strings.Contains(err.Error(), "not a Docker-style version") {
		t.Errorf("New with compatibleWith alpine: %v", err)
	}

	k, _ := KindOf("newestBuild")
	q := k.Qualifiers[0]
	for v, ok := range map[string]bool{"1": true, q.Default: true, "1000": true, "0": false, "1001": false, "x": false} {
		if err := q.Check(v); (err == nil) != ok {
			t.Errorf("--%s %s: %v", q.Name, v, err)
		}
	}
	var choice imagev1.ImagePolicyChoice
	_ = k.Flag.Set(&choice, "true")
	if err := q.Set(&choice, "50"); err != nil || choice.NewestBuild.MaxCandidates != 50 {
		t.Errorf("--%s 50: %+v, %v", q.Name, choice.NewestBuild, err)
	}
}

// Each kind words its rules as explain prints them, and names the drops it
// counts with the selection's count for each; Chosen finds the kind a
// choice sets, the first in the table's order.
func TestKindWords(t *testing.T) {
	sel := imagev1.TagSelection{Unparsable: 4, OutOfRange: 3}
	tests := map[string]struct {
		choice   imagev1.ImagePolicyChoice
		describe string
		drops    []Drop
	}{
		"semver": {choice: semverPolicy(">=1.0.0"), describe: `semver range ">=1.0.0": the highest version in range`,
			drops: []Drop{{"Not a version", 4, "(a version needs all three numbers, e.g. 1.2.0)"}, {"Out of range", 3, `outside ">=1.0.0"`}}},
		"docker": {choice: imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: ">=7.2 <8", CompatibleWith: "7.2-alpine"}},
			describe: `docker range ">=7.2 <8": the highest version in range, of 2 numbers and the suffix -alpine, like 7.2-alpine`,
			drops:    []Drop{{"Not a version of its shape", 4, "(of 2 numbers and the suffix -alpine, like 7.2-alpine)"}, {"Out of range", 3, `outside ">=7.2 <8"`}}},
		"alphabetical": {choice: alpha("desc"), describe: "alphabetical desc"},
		"numerical":    {choice: numeric(""), describe: "numerical asc", drops: []Drop{{Label: "Not a number", Count: 4}}},
		"newestBuild":  {choice: imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 50}}, describe: "newest build, of the 50 candidates most recently first seen"},
		"promotion": {choice: imagev1.ImagePolicyChoice{Promotion: promotion()},
			describe: "promotion from automation dev (policy app-dev), once Kustomization/apps-dev ran it healthy for 1h0m0s"},
	}
	for _, k := range Kinds {
		tt, ok := tests[k.Field]
		if !ok {
			t.Errorf("kind %s has no test case", k.Field)
			continue
		}
		if got, ok := Chosen(tt.choice); !ok || got.Field != k.Field {
			t.Errorf("%s: Chosen gives %q, %v", k.Field, got.Field, ok)
		}
		if got := k.Describe(tt.choice); got != tt.describe {
			t.Errorf("%s: Describe = %q, want %q", k.Field, got, tt.describe)
		}
		if got := k.Drops(tt.choice, sel); !slices.Equal(got, tt.drops) {
			t.Errorf("%s: Drops = %v, want %v", k.Field, got, tt.drops)
		}
	}
	both := semverPolicy(">=1.0.0")
	both.Numerical = &imagev1.NumericalPolicy{}
	if k, ok := Chosen(both); !ok || k.Field != "semver" {
		t.Errorf("Chosen(semver and numerical) = %q, %v; want the first, semver", k.Field, ok)
	}
	if _, ok := Chosen(imagev1.ImagePolicyChoice{}); ok {
		t.Error("Chosen finds a kind in an empty choice")
	}
}

func TestAlternatives(t *testing.T) {
	for words, want := range map[string]string{"": "", "a": "a", "a b": "a or b", "a b c": "a, b or c"} {
		if got := Alternatives(strings.Fields(words)); got != want {
			t.Errorf("Alternatives(%q) = %q, want %q", words, got, want)
		}
	}
}

func promotion() *imagev1.PromotionPolicy {
	return &imagev1.PromotionPolicy{
		From:     imagev1.PromotionSource{Automation: "dev", Policy: "app-dev"},
		HealthOf: []imagev1.HealthObjectReference{{APIVersion: "kustomize.toolkit.fluxcd.io/v1", Kind: "Kustomization", Name: "apps-dev", Namespace: "flux-system"}},
		Soak:     &metav1.Duration{Duration: time.Hour},
	}
}

// A promotion has no flag, and New refuses it with what is wrong with it
// first: it orders no tags, only the reflector can evaluate it.
func TestPromotionIsNoOrdering(t *testing.T) {
	k, ok := KindOf("promotion")
	if !ok || !k.Follows || k.Flag.Name != "" || k.Annotation != "" || slices.ContainsFunc(Ordering(), func(o Kind) bool { return o.Field == "promotion" }) {
		t.Fatalf("promotion kind %+v", k)
	}
	if _, err := New(imagev1.ImagePolicyChoice{Promotion: promotion()}, nil); err == nil || !strings.Contains(err.Error(), "orders no tags") {
		t.Errorf("New(promotion) = %v", err)
	}
	bad := promotion()
	bad.HealthOf[0].APIVersion = "a/b/c"
	if _, err := New(imagev1.ImagePolicyChoice{Promotion: bad}, nil); err == nil || !strings.Contains(err.Error(), "healthOf[0]") {
		t.Errorf("New(promotion with a bad apiVersion) = %v", err)
	}
	neg := promotion()
	neg.Soak.Duration = -time.Second
	if err := CheckPromotion(neg); err == nil {
		t.Error("a negative soak passes")
	}
}
