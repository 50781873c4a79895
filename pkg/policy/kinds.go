package policy

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// Kind is one way of ordering tags: one field of spec.policy
// (ImagePolicyChoice). Kinds is the table of them, and everything that
// knows the kinds is made from it: New, the "exactly one" rule's message,
// tk-image's policy flags with their help and completion, discover's
// policy annotations, and how explain words a kind's rules and drops. The
// CRD's rule is a CEL marker on ImagePolicyChoice, which must be static; a
// test holds it, and the choice's fields, to this table. So a new kind is
// its entry here, its test, and its field and name in the CEL rule.
type Kind struct {
	// Field is the kind's field of spec.policy, e.g. semver.
	Field string
	// Flag gives the kind on tk-image's command line; Qualifiers are flags
	// that only refine it (newestBuild's --max-candidates).
	Flag       Flag
	Qualifiers []Flag
	// ByBuildTime says the kind orders by build time, so evaluating it
	// needs tag times (Policy.NeedsTimes).
	ByBuildTime bool
	// Follows says the kind orders no tags but follows another object
	// (promotion): it has no flag, and New refuses it.
	Follows bool
	// Annotation names the argument of a workload's policy annotation
	// FIELD:ARG in messages (RANGE, asc|desc); "" when the kind has no
	// annotation. Annotate reads ARG.
	Annotation string
	annotate   func(arg string) (imagev1.ImagePolicyChoice, error)
	// set reports whether a choice sets the kind.
	set func(imagev1.ImagePolicyChoice) bool
	// order checks the kind's settings in a choice that sets it and makes
	// its ordering; its errors are invalid's.
	order func(imagev1.ImagePolicyChoice) (orderer, error)
	// describe words a choice that sets the kind (see Describe).
	describe func(imagev1.ImagePolicyChoice) string
	// drops are the kind's reasons to drop a tag (see Drops); nil when it
	// drops none.
	drops func(imagev1.ImagePolicyChoice, imagev1.TagSelection) []Drop
}

// Drop is one reason a kind drops tags, with how many a selection dropped
// for it, as explain prints it: "Not a version: 4 (a version needs ...)".
type Drop struct {
	// Label names the reason: "Not a version".
	Label string
	Count int
	// Detail follows the count, e.g. the range a tag is outside; "" for
	// none.
	Detail string
}

// Flag is a command-line flag of a kind. tk-image declares it with the
// pflag type named Type, so help shows it as any other flag.
type Flag struct {
	Name string
	Type FlagType
	// Arg names the value in a usage line (RANGE); "" for a bool flag.
	Arg     string
	Default string
	Usage   string
	// Completions are the values the shell completes.
	Completions []string
	// Check, when set, refuses a value the API would refuse; it is run on
	// every value, given or default.
	Check func(value string) error
	// Set writes a given value into the choice: a kind's flag sets the
	// kind, a qualifier refines it (the kind is then set).
	Set func(c *imagev1.ImagePolicyChoice, value string) error
}

// FlagType is a flag value's type, named as pflag names it.
type FlagType string

// The types of kinds' flags.
const (
	StringFlag FlagType = "string"
	BoolFlag   FlagType = "bool"
	IntFlag    FlagType = "int"
)

// Given reports whether value, as pflag prints it, gives a kind's flag:
// an empty string or a false bool does not.
func (f Flag) Given(value string) bool { return value != "" && value != "false" }

// String is the flag as a usage line writes it: --semver RANGE.
func (f Flag) String() string {
	if f.Arg == "" {
		return "--" + f.Name
	}
	return "--" + f.Name + " " + f.Arg
}

// Annotate reads the argument of the kind's policy annotation (a
// workload's FIELD:ARG) into a choice; errors say what is wrong with ARG.
func (k Kind) Annotate(arg string) (imagev1.ImagePolicyChoice, error) {
	if k.annotate == nil {
		return imagev1.ImagePolicyChoice{}, fmt.Errorf("%s has no policy annotation", k.Field)
	}
	return k.annotate(arg)
}

// Sets reports whether choice sets the kind.
func (k Kind) Sets(choice imagev1.ImagePolicyChoice) bool { return k.set(choice) }

// Describe says how a choice that sets the kind orders tags, in the
// spec's words: `numerical asc`.
func (k Kind) Describe(choice imagev1.ImagePolicyChoice) string { return k.describe(choice) }

// Drops are the kind's reasons to drop a tag, in the order explain prints
// them, each with the count sel has for it; none for a kind that keeps
// every tag (alphabetical, newestBuild). choice must set the kind.
func (k Kind) Drops(choice imagev1.ImagePolicyChoice, sel imagev1.TagSelection) []Drop {
	if k.drops == nil {
		return nil
	}
	return k.drops(choice, sel)
}

// Chosen returns the kind a choice sets, the first in Kinds' order when
// it sets more than one (which New refuses); false when it sets none.
func Chosen(choice imagev1.ImagePolicyChoice) (Kind, bool) {
	for _, k := range Kinds {
		if k.set(choice) {
			return k, true
		}
	}
	return Kind{}, false
}

// Orders of the alphabetical and numerical kinds, and how they complete.
var orders = []string{Ascending, Descending}

// Kinds are the policy kinds, in the API's order of spec.policy's fields.
var Kinds = []Kind{
	{
		Field: "semver",
		Flag: Flag{Name: "semver", Type: StringFlag, Arg: "RANGE",
			Usage: "pick the highest version in this range, e.g. '>=1.0.0 <2.0.0'",
			Set: func(c *imagev1.ImagePolicyChoice, v string) error {
				c.SemVer = &imagev1.SemVerPolicy{Range: v}
				return nil
			}},
		Annotation: "RANGE",
		annotate: annotatedRange(func(r string) imagev1.ImagePolicyChoice {
			return imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: r}}
		}),
		set: func(c imagev1.ImagePolicyChoice) bool { return c.SemVer != nil },
		order: func(c imagev1.ImagePolicyChoice) (orderer, error) {
			constraint, err := rangeOf("semver", c.SemVer.Range)
			return semverOrder{constraint}, err
		},
		describe: func(c imagev1.ImagePolicyChoice) string {
			return fmt.Sprintf("semver range %q: the highest version in range", c.SemVer.Range)
		},
		drops: func(c imagev1.ImagePolicyChoice, s imagev1.TagSelection) []Drop {
			return []Drop{
				{Label: "Not a version", Count: s.Unparsable, Detail: "(a version needs all three numbers, e.g. 1.2.0)"},
				{Label: "Out of range", Count: s.OutOfRange, Detail: fmt.Sprintf("outside %q", c.SemVer.Range)},
			}
		},
	},
	{
		Field: "docker",
		Flag: Flag{Name: "docker", Type: StringFlag, Arg: "RANGE",
			Usage: "pick the highest Docker-style version (22, 1.27, 7.4-alpine) in this range, e.g. '>=7.2 <8'",
			Set: func(c *imagev1.ImagePolicyChoice, v string) error {
				if c.Docker == nil {
					c.Docker = &imagev1.DockerPolicy{}
				}
				c.Docker.Range = v
				return nil
			}},
		Qualifiers: []Flag{{Name: "compatible-with", Type: StringFlag, Arg: "TAG",
			Usage: "with --docker, only tags of this tag's shape: its suffix and number of parts (7.2-alpine)",
			Check: func(v string) error {
				if _, ok := parseDocker(v); v != "" && !ok {
					return fmt.Errorf("--compatible-with %q is not a Docker-style version (1 to 4 numbers, then an optional -suffix)", v)
				}
				return nil
			},
			Set: func(c *imagev1.ImagePolicyChoice, v string) error {
				if c.Docker == nil {
					c.Docker = &imagev1.DockerPolicy{}
				}
				c.Docker.CompatibleWith = v
				return nil
			}}},
		// The annotation gives the range; discover takes the shape from the
		// workload's current tag.
		Annotation: "RANGE",
		annotate: annotatedRange(func(r string) imagev1.ImagePolicyChoice {
			return imagev1.ImagePolicyChoice{Docker: &imagev1.DockerPolicy{Range: r}}
		}),
		set: func(c imagev1.ImagePolicyChoice) bool { return c.Docker != nil },
		order: func(c imagev1.ImagePolicyChoice) (orderer, error) {
			constraint, err := rangeOf("docker", c.Docker.Range)
			if err != nil {
				return nil, err
			}
			shape := dockerShape{}
			if ref := c.Docker.CompatibleWith; ref != "" {
				v, ok := parseDocker(ref)
				if !ok {
					return nil, invalid(fmt.Errorf("docker.compatibleWith %q is not a Docker-style version (1 to 4 numbers, then an optional -suffix)", ref))
				}
				shape = dockerShape{suffix: v.suffix, parts: v.parts}
			}
			return dockerOrder{c: constraint, shape: shape}, nil
		},
		describe: func(c imagev1.ImagePolicyChoice) string {
			return fmt.Sprintf("docker range %q: the highest version in range, %s", c.Docker.Range, dockerShapeWords(c.Docker.CompatibleWith))
		},
		drops: func(c imagev1.ImagePolicyChoice, s imagev1.TagSelection) []Drop {
			return []Drop{
				{Label: "Not a version of its shape", Count: s.Unparsable, Detail: "(" + dockerShapeWords(c.Docker.CompatibleWith) + ")"},
				{Label: "Out of range", Count: s.OutOfRange, Detail: fmt.Sprintf("outside %q", c.Docker.Range)},
			}
		},
	},
	orderedKind("alphabetical", "alphabetical order: asc (greatest wins) or desc", "",
		func(c *imagev1.ImagePolicyChoice, o string) { c.Alphabetical = &imagev1.AlphabeticalPolicy{Order: o} },
		func(c imagev1.ImagePolicyChoice) (string, bool) {
			if c.Alphabetical == nil {
				return "", false
			}
			return c.Alphabetical.Order, true
		},
		func(desc bool) orderer { return alphabeticalOrder{desc: desc} }),
	orderedKind("numerical", "numerical order: asc (greatest wins) or desc", "Not a number",
		func(c *imagev1.ImagePolicyChoice, o string) { c.Numerical = &imagev1.NumericalPolicy{Order: o} },
		func(c imagev1.ImagePolicyChoice) (string, bool) {
			if c.Numerical == nil {
				return "", false
			}
			return c.Numerical.Order, true
		},
		func(desc bool) orderer { return numericalOrder{desc: desc} }),
	{
		Field: "newestBuild",
		Flag: Flag{Name: "newest-build", Type: BoolFlag,
			Usage: "order tags by build time, newest first (spec.policy.newestBuild)",
			Set: func(c *imagev1.ImagePolicyChoice, _ string) error {
				if c.NewestBuild == nil {
					c.NewestBuild = &imagev1.NewestBuildPolicy{}
				}
				return nil
			}},
		Qualifiers: []Flag{{Name: "max-candidates", Type: IntFlag, Default: strconv.Itoa(imagev1.DefaultMaxCandidates),
			Usage: "with --newest-build, order only the candidates most recently first seen (1 to 1000)",
			Check: func(v string) error {
				if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
					return fmt.Errorf("--max-candidates must be between 1 and 1000, got %s", v)
				}
				return nil
			},
			Set: func(c *imagev1.ImagePolicyChoice, v string) error {
				n, err := strconv.Atoi(v)
				c.NewestBuild = &imagev1.NewestBuildPolicy{MaxCandidates: n}
				return err
			}}},
		ByBuildTime: true,
		set:         func(c imagev1.ImagePolicyChoice) bool { return c.NewestBuild != nil },
		order: func(c imagev1.ImagePolicyChoice) (orderer, error) {
			n := c.NewestBuild.MaxCandidates
			if n == 0 {
				n = imagev1.DefaultMaxCandidates
			}
			if n < 1 || n > 1000 {
				return nil, invalid(fmt.Errorf("newestBuild.maxCandidates must be 1 to 1000, got %d", n))
			}
			return newestBuildOrder{max: n}, nil
		},
		describe: func(c imagev1.ImagePolicyChoice) string {
			return fmt.Sprintf("newest build, of the %d candidates most recently first seen", max(c.NewestBuild.MaxCandidates, 1))
		},
	}, // A promotion orders no tags: it follows what an upstream
	// environment ran healthy (pkg/promotion). It has no flag and no
	// annotation, and New refuses it: only the reflector, which can
	// read the upstream and its health, evaluates it.
	{
		Field:   "promotion",
		Follows: true,
		set:     func(c imagev1.ImagePolicyChoice) bool { return c.Promotion != nil },
		order: func(c imagev1.ImagePolicyChoice) (orderer, error) {
			if err := CheckPromotion(c.Promotion); err != nil {
				return nil, err
			}
			return nil, invalid(errors.New("a promotion follows an upstream automation: it orders no tags"))
		},
		describe: func(c imagev1.ImagePolicyChoice) string {
			p := c.Promotion
			from := "automation " + p.From.Automation
			switch {
			case p.From.Automation == "":
				from = "policy " + p.From.Policy
			case p.From.Policy != "":
				from += " (policy " + p.From.Policy + ")"
			}
			soak := "0s"
			if p.Soak != nil {
				soak = p.Soak.Duration.String()
			}
			objs := make([]string, len(p.HealthOf))
			for i, o := range p.HealthOf {
				objs[i] = o.Kind + "/" + o.Name
			}
			return fmt.Sprintf("promotion from %s, once %s ran it healthy for %s", from, strings.Join(objs, ", "), soak)
		},
	},
}

// CheckPromotion checks what the API server's schema cannot: that
// healthOf's apiVersions parse and the soak is not negative.
func CheckPromotion(p *imagev1.PromotionPolicy) error {
	if p.From.Automation == "" && p.From.Policy == "" {
		return invalid(errors.New("promotion.from needs an automation, a policy or both"))
	}
	if len(p.HealthOf) == 0 {
		return invalid(errors.New("promotion.healthOf needs at least one object"))
	}
	for i, o := range p.HealthOf {
		if _, err := schema.ParseGroupVersion(o.APIVersion); err != nil || o.APIVersion == "" || o.Kind == "" || o.Name == "" {
			return invalid(fmt.Errorf("promotion.healthOf[%d]: apiVersion %q, kind %q and name %q must all be set and valid", i, o.APIVersion, o.Kind, o.Name))
		}
	}
	if p.Soak != nil && p.Soak.Duration < 0 {
		return invalid(fmt.Errorf("promotion.soak %s is negative", p.Soak.Duration))
	}
	return nil
}

// orderedKind is a kind ordered one way or the other, asc or desc
// (alphabetical, numerical): set writes its field of a choice with an
// order, get reads it (false when unset), and newOrder makes the ordering.
// unparsable labels the tags it cannot order ("" when it orders all).
func orderedKind(field, usage, unparsable string, set func(*imagev1.ImagePolicyChoice, string),
	get func(imagev1.ImagePolicyChoice) (string, bool), newOrder func(desc bool) orderer) Kind {
	k := Kind{
		Field: field,
		Flag: Flag{Name: field, Type: StringFlag, Arg: "ORDER", Completions: orders, Usage: usage,
			Set: func(c *imagev1.ImagePolicyChoice, v string) error {
				set(c, v)
				return nil
			}},
		Annotation: strings.Join(orders, "|"),
		annotate: func(arg string) (imagev1.ImagePolicyChoice, error) {
			var c imagev1.ImagePolicyChoice
			o, err := annotatedOrder(arg)
			if err == nil {
				set(&c, o)
			}
			return c, err
		},
		set: func(c imagev1.ImagePolicyChoice) bool {
			_, ok := get(c)
			return ok
		},
		order: func(c imagev1.ImagePolicyChoice) (orderer, error) {
			o, _ := get(c)
			o, err := order(o)
			return newOrder(o == Descending), err
		},
		describe: func(c imagev1.ImagePolicyChoice) string {
			o, _ := get(c)
			return field + " " + cmp.Or(o, Ascending)
		},
	}
	if unparsable != "" {
		k.drops = func(_ imagev1.ImagePolicyChoice, s imagev1.TagSelection) []Drop {
			return []Drop{{Label: unparsable, Count: s.Unparsable}}
		}
	}
	return k
}

// dockerShapeWords says which tags a docker policy's compatibleWith
// (ref) lets be candidates.
func dockerShapeWords(ref string) string {
	v, ok := parseDocker(ref)
	switch {
	case ref == "" || !ok:
		return "of 1 to 4 numbers, without a suffix"
	case v.suffix == "":
		return fmt.Sprintf("of %d numbers, without a suffix, like %s", v.parts, ref)
	}
	return fmt.Sprintf("of %d numbers and the suffix -%s, like %s", v.parts, v.suffix, ref)
}

// rangeOf parses the range of a kind (semver, docker); its error is
// invalid's.
func rangeOf(kind, rng string) (*semver.Constraints, error) {
	c, err := semver.NewConstraint(rng)
	if err != nil {
		return nil, invalid(fmt.Errorf("%s range %q: %w", kind, rng, err))
	}
	return c, nil
}

// annotatedRange reads the annotation of a kind whose argument is a
// semver range (semver, docker): choice makes the kind's choice of it.
func annotatedRange(choice func(rng string) imagev1.ImagePolicyChoice) func(string) (imagev1.ImagePolicyChoice, error) {
	return func(arg string) (imagev1.ImagePolicyChoice, error) {
		if _, err := semver.NewConstraint(arg); err != nil {
			return imagev1.ImagePolicyChoice{}, err
		}
		return choice(arg), nil
	}
}

// annotatedOrder is the order an annotation gives, asc or desc.
func annotatedOrder(arg string) (string, error) {
	if arg != Ascending && arg != Descending {
		return "", fmt.Errorf("order is %s", Alternatives(orders))
	}
	return arg, nil
}

// KindOf returns the kind whose field of spec.policy is field.
func KindOf(field string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Field == field {
			return k, true
		}
	}
	return Kind{}, false
}

// Ordering are the kinds that order tags: the ones with a command-line
// flag.
func Ordering() []Kind {
	var out []Kind
	for _, k := range Kinds {
		if !k.Follows {
			out = append(out, k)
		}
	}
	return out
}

// Fields are the kinds' fields of spec.policy, in order.
func Fields() []string {
	out := make([]string, len(Kinds))
	for i, k := range Kinds {
		out[i] = k.Field
	}
	return out
}

// ExactlyOne is the rule a choice must keep, as the API server and New
// word it.
func ExactlyOne() string { return "exactly one of " + Alternatives(Fields()) + " must be set" }

// Alternatives lists words as a sentence offers a choice: "a, b or c".
func Alternatives(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
