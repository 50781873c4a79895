package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/policy"
	"toolkit.dev/image-toolkit/pkg/signature"
	"toolkit.dev/image-toolkit/tk-image/internal/explain"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Work with image policies offline",
		Args:  usageArgs(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newPolicyEvalCommand())
	return cmd
}

// policyFlags are an ImagePolicy's rules as flags: create policy writes
// them to the cluster, policy eval runs them here. Both take the same
// names and values, so a rule tested with eval is created as tested. The
// policy kinds' flags, their help and completion are policy.Kinds'.
type policyFlags struct {
	// flags is the command's, where the kinds' flags are read.
	flags            *pflag.FlagSet
	pattern, extract string
	minimumAge       time.Duration
	ageSource        string
}

func (p *policyFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	p.flags = f
	for _, k := range policy.Ordering() {
		for _, kf := range append([]policy.Flag{k.Flag}, k.Qualifiers...) {
			addKindFlag(f, kf)
			if kf.Completions != nil {
				_ = cmd.RegisterFlagCompletionFunc(kf.Name, cobra.FixedCompletions(kf.Completions, cobra.ShellCompDirectiveNoFileComp))
			}
		}
	}
	f.StringVar(&p.pattern, "filter-pattern", "", "keep only tags matching this Go regexp")
	f.StringVar(&p.extract, "filter-extract", "", "order by this expansion of the pattern, e.g. '$ts'")
	f.DurationVar(&p.minimumAge, "minimum-age", 0, "only tags at least this old are candidates (spec.minimumAge.duration)")
	f.StringVar(&p.ageSource, "age-source", string(imagev1.AgeSeen), "what a tag's age counts from: seen or created (spec.minimumAge.source)")
	_ = cmd.RegisterFlagCompletionFunc("age-source", cobra.FixedCompletions([]string{string(imagev1.AgeSeen), string(imagev1.AgeCreated)}, cobra.ShellCompDirectiveNoFileComp))
}

// addKindFlag declares a kind's flag with its type, so help shows it as
// any other flag; its value is read back as a string (kindValue).
func addKindFlag(f *pflag.FlagSet, kf policy.Flag) {
	switch kf.Type {
	case policy.BoolFlag:
		f.Bool(kf.Name, kf.Default == "true", kf.Usage)
	case policy.IntFlag:
		n, _ := strconv.Atoi(kf.Default)
		f.Int(kf.Name, n, kf.Usage)
	default:
		f.String(kf.Name, kf.Default, kf.Usage)
	}
}

// kindValue is the value of a kind's flag, as pflag prints it.
func (p *policyFlags) kindValue(name string) string { return p.flags.Lookup(name).Value.String() }

// check refuses what the flags cannot mean: a flag that only qualifies
// another given alone would be dropped without a word, and the values the
// API would refuse are refused here too, also for --export and eval, which
// no API server checks.
func (p *policyFlags) check() error {
	if source := imagev1.AgeSource(p.ageSource); source != imagev1.AgeSeen && source != imagev1.AgeCreated {
		return fmt.Errorf("--age-source must be seen or created, got %q", p.ageSource)
	}
	if p.minimumAge < 0 {
		return errors.New("--minimum-age cannot be negative")
	}
	if p.flags.Changed("age-source") && p.minimumAge == 0 {
		return errors.New("--age-source needs --minimum-age")
	}
	for _, k := range policy.Ordering() {
		for _, q := range k.Qualifiers {
			if p.flags.Changed(q.Name) && !k.Flag.Given(p.kindValue(k.Flag.Name)) {
				return fmt.Errorf("--%s needs --%s", q.Name, k.Flag.Name)
			}
			if q.Check != nil {
				if err := q.Check(p.kindValue(q.Name)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// validate is what policy.New says of the policy the flags give, in the
// flags' words (--filter-pattern, not filterTags.pattern): a refusal names
// what the user typed. n is how many orderings were given; the policy
// wants exactly one.
func (p *policyFlags) validate(choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter, n int) error {
	if n != 1 {
		msg := "give exactly one of " + policy.Alternatives(kindFlags(false))
		if n > 1 {
			var given []string
			for _, k := range policy.Ordering() {
				if k.Flag.Given(p.kindValue(k.Flag.Name)) {
					given = append(given, "--"+k.Flag.Name)
				}
			}
			msg += " (given: " + strings.Join(given, ", ") + ")"
		}
		return usageError{errors.New(msg)}
	}
	if _, err := policy.New(choice, filter); err != nil {
		return usageError{errors.New(inFlagWords(err.Error()))}
	}
	return nil
}

// inFlagWords rewrites the API's field names in a policy's refusal to the
// flags that set them.
func inFlagWords(msg string) string {
	pairs := []string{"invalid policy: ", "", "filterTags.pattern", "--filter-pattern", "filterTags.extract", "--filter-extract",
		"newestBuild.maxCandidates", "--max-candidates", "docker.compatibleWith", "--compatible-with"}
	for _, k := range policy.Ordering() {
		pairs = append(pairs, k.Field+" range", "--"+k.Flag.Name)
	}
	return strings.NewReplacer(pairs...).Replace(msg)
}

// rules returns the orderings given (and how many: the policy wants
// exactly one) and the filter, nil when no filter flag is given. A
// qualifier not given is left unset when explicit (create writes what
// the API defaults as a hand-written policy would), else set to its
// default.
func (p *policyFlags) rules(explicit bool) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, int) {
	var choice imagev1.ImagePolicyChoice
	n := 0
	for _, k := range policy.Ordering() {
		v := p.kindValue(k.Flag.Name)
		if !k.Flag.Given(v) {
			continue
		}
		n++
		// The values are pflag's of the flag's type, and Check has
		// refused the ones out of range.
		_ = k.Flag.Set(&choice, v)
		for _, q := range k.Qualifiers {
			if !explicit || p.flags.Changed(q.Name) {
				_ = q.Set(&choice, p.kindValue(q.Name))
			}
		}
	}
	var filter *imagev1.TagFilter
	if p.pattern != "" || p.extract != "" {
		filter = &imagev1.TagFilter{Pattern: p.pattern, Extract: p.extract}
	}
	return choice, filter, n
}

// kindFlags are the kinds' flags: "--semver" ("--semver RANGE" with args).
func kindFlags(args bool) []string {
	var out []string
	for _, k := range policy.Ordering() {
		if args {
			out = append(out, k.Flag.String())
		} else {
			out = append(out, "--"+k.Flag.Name)
		}
	}
	return out
}

// timedFlags are the flags whose evaluation needs tag times.
func timedFlags() []string {
	out := []string{"minimum-age"}
	for _, k := range policy.Ordering() {
		if k.ByBuildTime {
			out = append(out, k.Flag.Name)
		}
	}
	return out
}

type evalOptions struct {
	policyFlags
	image, dockerConfig string
	timeout             time.Duration
	explain             bool
	// file is -f: the ImagePolicy whose rules are evaluated, "-" for
	// stdin.
	file string

	// The tag times --minimum-age and --newest-build need.
	tagTimes string
	now      string

	verify evalVerifyFlags
}

// evalVerifyFlags are spec.verify for policy eval: what a policy's
// Secrets and ConfigMap would hold, from files.
type evalVerifyFlags struct {
	provider, issuer, subject, trustedRoot, trustPolicy string
	keys, certs                                         []string
	// attestations is --verify-attestations; rules are -f's
	// spec.verify.attestations.
	attestations string
	rules        []imagev1.AttestationRule
}

func (v *evalVerifyFlags) add(f *pflag.FlagSet) {
	f.StringVar(&v.provider, "verify-provider", "", "only tags whose image signature verifies are chosen, walking the candidates best first (needs --image): cosign or notation")
	f.StringSliceVar(&v.keys, "verify-key", nil, "cosign public key file (PEM); repeat for a key set")
	f.StringVar(&v.issuer, "verify-issuer", "", "cosign keyless: regexp of the OIDC issuer (with --verify-subject)")
	f.StringVar(&v.subject, "verify-subject", "", "cosign keyless: regexp of the certificate subject (with --verify-issuer)")
	f.StringVar(&v.trustedRoot, "verify-trusted-root", "", "cosign keyless: trusted_root.json file of a private Sigstore (default: the public Sigstore)")
	f.StringSliceVar(&v.certs, "verify-cert", nil, "notation: trusted certificate file (PEM or DER); repeat for more")
	f.StringVar(&v.trustPolicy, "verify-trust-policy", "", "notation: trustpolicy.json file")
	f.StringVar(&v.attestations, "verify-attestations", "", "cosign: YAML or JSON file of attestation rules, spec.verify.attestations' list (with -f, the policy's own are used)")
}

// config reads the files into the config spec.verify would make.
func (v *evalVerifyFlags) config() (signature.Config, error) {
	cfg := signature.Config{Provider: signature.Provider(v.provider)}
	read := func(files []string) (map[string][]byte, error) {
		out := map[string][]byte{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			out[filepath.Base(f)] = b
		}
		return out, nil
	}
	var err error
	if cfg.Keys, err = read(v.keys); err != nil {
		return cfg, err
	}
	if len(cfg.Keys) == 0 {
		cfg.Keys = nil
	}
	if cfg.Certificates, err = read(v.certs); err != nil {
		return cfg, err
	}
	if v.issuer != "" || v.subject != "" {
		cfg.Identities = []signature.Identity{{Issuer: v.issuer, Subject: v.subject}}
	}
	if v.trustedRoot != "" {
		if cfg.TrustedRoot, err = os.ReadFile(v.trustedRoot); err != nil {
			return cfg, err
		}
	}
	if v.trustPolicy != "" {
		if cfg.TrustPolicy, err = os.ReadFile(v.trustPolicy); err != nil {
			return cfg, err
		}
	}
	rules := v.rules
	if v.attestations != "" {
		b, err := os.ReadFile(v.attestations)
		if err != nil {
			return cfg, err
		}
		data, err := sigsyaml.YAMLToJSON(b)
		if err != nil {
			return cfg, fmt.Errorf("--verify-attestations %s: %w", v.attestations, err)
		}
		if err := decodeStrict(data, &rules); err != nil {
			return cfg, fmt.Errorf("--verify-attestations %s: want a list of spec.verify.attestations rules: %w", v.attestations, err)
		}
	}
	cfg.Attestations = signature.AttestationsOf(rules)
	return cfg, nil
}

func newPolicyEvalCommand() *cobra.Command {
	var o evalOptions
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Select the latest tag the way an ImagePolicy would",
		Long: `Select the latest tag from tags read one per line from stdin, or listed from
a live repository with --image, with the same code the image-reflector-controller
runs. Prints the selected tag; exits 1 when no tag is selected, 2 for an invalid
policy or arguments. With --explain, prints instead what the filter and the
policy dropped, the best candidates and the selection, as the controller records
them in an ImagePolicy's status.lastSelection.

--minimum-age (spec.minimumAge) and --newest-build (spec.policy.newestBuild) need
the tags' times, from --tag-times FILE: one tag a line, then when it was first
seen and optionally when it was built, RFC 3339 ("-" for unknown); blank lines
and lines starting with # are skipped:

  # tag   first seen            built
  1.4.0   2026-11-20T08:00:00Z  2026-11-20T07:42:10Z
  1.5.0   2026-11-23T09:30:00Z  -

The file's tags are the tags evaluated, unless --image lists them (a listed tag
the file does not date is never old enough). When no tag is old enough, the
tag that will be first and when are printed on stderr, exit 1.

-f FILE evaluates the rules of the first ImagePolicy in FILE (spec.policy,
filterTags and minimumAge; "-" reads it from stdin, and the tags then come from
--image or --tag-times) instead of the policy flags: a policy is tested exactly
as it will be applied.`,
		Example: `  crane ls ghcr.io/stefanprodan/podinfo | tk-image policy eval --semver '>=6.0.0 <7.0.0'
  crane ls redis | tk-image policy eval --docker '>=7.2 <8' --compatible-with 7.2-alpine
  crane ls redis | tk-image policy eval -f imagepolicy.yaml
  tk-image policy eval -f imagepolicy.yaml --image redis --explain
  tk-image policy eval --numerical asc --filter-pattern '^main-[a-f0-9]+-(?P<ts>[0-9]+)$' --filter-extract '$ts' < tags.txt
  tk-image policy eval --image ghcr.io/stefanprodan/podinfo --semver 6.x
  tk-image policy eval --image ghcr.io/stefanprodan/podinfo --semver '>=7.0.0' --explain
  tk-image policy eval --semver 1.x --minimum-age 72h --tag-times times.txt --explain
  tk-image policy eval --newest-build --minimum-age 24h --age-source created --tag-times times.txt`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return usageError{err}
			}
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.policyFlags.add(cmd)
	f.StringVar(&o.image, "image", "", "list the tags of this image repository instead of reading stdin")
	f.StringVar(&o.dockerConfig, "docker-config", "", "directory of a Docker config.json with credentials for --image (default: anonymous)")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "timeout for listing --image")
	f.BoolVar(&o.explain, "explain", false, "also print what the filter and the policy dropped and the best candidates, as ImagePolicy status.lastSelection records them")
	// Offline, the times come from a file, not from the controller's store.
	for _, n := range timedFlags() {
		f.Lookup(n).Usage += "; needs --tag-times"
	}
	f.StringVar(&o.tagTimes, "tag-times", "", "file of tags with when each was first seen and built (see above)")
	f.StringVar(&o.now, "now", "", "measure ages at this RFC 3339 time instead of now")
	f.StringVarP(&o.file, "filename", "f", "", "evaluate the first ImagePolicy of this manifest instead of the policy flags, - for stdin")
	o.verify.add(f)
	return cmd
}

func (o *evalOptions) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	choice, filter, set := o.rules(false)
	if o.file != "" {
		var err error
		if choice, filter, err = o.fromFile(stdin); err != nil {
			return err
		}
		if o.file == "-" {
			stdin = strings.NewReader("")
		}
	} else if set != 1 {
		return usageError{errors.New("give exactly one of " + policy.Alternatives(kindFlags(false)) + ", or -f FILE")}
	} else if err := o.validate(choice, filter, set); err != nil {
		return err
	}
	if o.dockerConfig != "" && o.image == "" {
		return usageError{errors.New("--docker-config needs --image")}
	}
	source := imagev1.AgeSource(o.ageSource)
	if (o.minimumAge > 0 || byBuildTime(choice)) && o.tagTimes == "" {
		return usageError{errors.New("--" + strings.Join(timedFlags(), " and --") + " need --tag-times")}
	}
	now := time.Now()
	if o.now != "" {
		var err error
		if now, err = time.Parse(time.RFC3339, o.now); err != nil {
			return usageError{fmt.Errorf("--now: %w", err)}
		}
	}
	p, err := policy.New(choice, filter)
	if err != nil {
		return usageError{err}
	}

	tags, times, err := o.readTags(ctx, stdin)
	if err != nil {
		return err
	}
	verifier, err := o.verifier()
	if err != nil {
		return err
	}
	opts := policy.Options{MinimumAge: o.minimumAge, Source: source, Now: now, Top: imagev1.MaxTopCandidates}
	if verifier != nil {
		// The reflector's walk: the best candidates, verified best first.
		opts.Top = verifyCandidates
	}
	if times != nil {
		opts.Times = times
	}
	res, err := p.Evaluate(ctx, tags, opts)
	var walk *signature.Walk
	if err == nil && verifier != nil {
		w, verr := o.walk(ctx, verifier, res.Selection.TopCandidates)
		if verr != nil {
			return verr
		}
		walk = &w
		if len(res.Selection.TopCandidates) > imagev1.MaxTopCandidates {
			res.Selection.TopCandidates = res.Selection.TopCandidates[:imagev1.MaxTopCandidates]
		}
	}
	if o.explain {
		return o.writeExplained(stdout, res, walk, err, choice, filter)
	}
	if err != nil {
		return err
	}
	selected := res.Selection.Selected()
	if walk != nil {
		if walk.Tag == "" {
			return errors.New(walk.Summary())
		}
		selected = walk.Tag + "@" + walk.Verdict.Digest
	}
	_, err = fmt.Fprintln(stdout, selected)
	return err
}

// readTags reads the tags to choose from: the registry's (--image), those
// of --tag-times with their times, or else one a line from stdin.
func (o *evalOptions) readTags(ctx context.Context, stdin io.Reader) ([]string, fileTimes, error) {
	var times fileTimes
	var tags []string
	var err error
	if o.tagTimes != "" {
		if tags, times, err = readTagTimes(o.tagTimes); err != nil {
			return nil, nil, usageError{fmt.Errorf("--tag-times: %w", err)}
		}
	}
	switch {
	case o.image != "":
		if tags, err = o.listTags(ctx); err != nil {
			return nil, nil, err
		}
	case o.tagTimes == "":
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				tags = append(tags, t)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("reading tags: %w", err)
		}
	}
	return tags, times, nil
}

// verifier is the signature verifier of the --verify-* flags; nil without
// --verify-provider.
func (o *evalOptions) verifier() (*signature.Verifier, error) {
	if o.verify.provider == "" {
		return nil, nil
	}
	if o.image == "" {
		return nil, usageError{errors.New("--verify-provider needs --image: signatures are read from the registry")}
	}
	cfg, err := o.verify.config()
	if err != nil {
		return nil, usageError{fmt.Errorf("--verify-*: %w", err)}
	}
	v, err := signature.New(cfg, signature.Limits{})
	if err != nil {
		return nil, usageError{fmt.Errorf("--verify-*: %w", err)}
	}
	return v, nil
}

// writeExplained is --explain's output: the selection, the pending tag and
// the signature walk, with the evaluation's error (or the walk's, when it
// verified no candidate) after it.
func (o *evalOptions) writeExplained(stdout io.Writer, res policy.Result, walk *signature.Walk, err error, choice imagev1.ImagePolicyChoice, filter *imagev1.TagFilter) error {
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	explain.WriteSelection(tw, "", &res.Selection, choice, filter)
	if res.Pending != nil {
		fmt.Fprintf(tw, "Pending:\t%s at %s (minimum age %s)\n", res.Pending.Tag, res.Pending.EligibleAt.UTC().Format(time.RFC3339), o.minimumAge)
	}
	if walk != nil {
		writeWalk(tw, walk)
		if walk.Tag == "" {
			err = errors.Join(err, errors.New(walk.Summary()))
		}
	}
	if ferr := tw.Flush(); ferr != nil || err != nil {
		return errors.Join(err, ferr)
	}
	return nil
}

// verifyCandidates is how many candidates eval verifies at most, as the
// reflector does (MaxVerifyCandidates there).
const verifyCandidates = 100

// walk verifies the candidates best first, each tag's digest read from
// --image, as the reflector's verify phase does.
func (o *evalOptions) walk(ctx context.Context, v *signature.Verifier, candidates []string) (signature.Walk, error) {
	repo, opts, access, err := o.registry(ctx)
	if err != nil {
		return signature.Walk{}, err
	}
	check := func(ctx context.Context, tag string) (signature.Verdict, error) {
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		d, err := remote.Head(repo.Tag(tag), append(opts, remote.WithContext(ctx))...)
		if err != nil {
			return signature.Verdict{}, err
		}
		return v.Verify(ctx, repo.Digest(d.Digest.String()), access)
	}
	return signature.FirstVerified(ctx, candidates, verifyCandidates, check)
}

// writeWalk prints the verification step of --explain.
func writeWalk(w io.Writer, walk *signature.Walk) {
	for _, s := range walk.Skipped {
		fmt.Fprintf(w, "Not verified:\t%s (%s): %s: %s\n", s.Tag, s.Verdict.Digest, s.Verdict.Reason, s.Verdict.Message)
	}
	if walk.Tag != "" {
		fmt.Fprintf(w, "Verified:\t%s@%s, signed by %s (%s signature)\n", walk.Tag, walk.Verdict.Digest, walk.Verdict.Signer, walk.Verdict.Format)
		for _, a := range walk.Verdict.Attestations {
			fmt.Fprintf(w, "Attested:\t%s\n", a)
		}
	} else {
		fmt.Fprintf(w, "Verified:\tnone: %s\n", walk.Summary())
	}
}

// fromFile reads the rules of the first ImagePolicy of -f into o: its
// policy and filter, and its minimum age. The policy flags cannot be given
// with it: they would say two things.
func (o *evalOptions) fromFile(stdin io.Reader) (imagev1.ImagePolicyChoice, *imagev1.TagFilter, error) {
	none := imagev1.ImagePolicyChoice{}
	given := []string{}
	for _, n := range append(kindFlags(false), "--filter-pattern", "--filter-extract", "--minimum-age", "--age-source") {
		if o.flags.Changed(strings.TrimPrefix(n, "--")) {
			given = append(given, n)
		}
	}
	if len(given) > 0 {
		return none, nil, usageError{fmt.Errorf("-f gives the policy: drop %s", strings.Join(given, " "))}
	}
	if o.file == "-" && o.image == "" && o.tagTimes == "" {
		return none, nil, usageError{errors.New("-f - reads the policy from stdin: give the tags with --image or --tag-times")}
	}
	r := stdin
	if o.file != "-" {
		f, err := os.Open(o.file)
		if err != nil {
			return none, nil, usageError{fmt.Errorf("-f: %w", err)}
		}
		defer f.Close()
		r = f
	}
	p, err := firstImagePolicy(r)
	if err != nil {
		return none, nil, usageError{fmt.Errorf("-f %s: %w", o.file, err)}
	}
	if age := p.Spec.MinimumAge; age != nil {
		o.minimumAge, o.ageSource = age.Duration.Duration, string(cmp.Or(age.Source, imagev1.AgeSeen))
	}
	if v := p.Spec.Verify; v != nil && len(v.Attestations) > 0 {
		if o.verify.attestations != "" {
			return none, nil, usageError{fmt.Errorf("-f %s has spec.verify.attestations: drop --verify-attestations", o.file)}
		}
		o.verify.rules = v.Attestations
	}
	return p.Spec.Policy, p.Spec.FilterTags, nil
}

// firstImagePolicy reads the first ImagePolicy of a manifest, strictly: a
// field the API does not know is an error, not a rule silently dropped.
func firstImagePolicy(r io.Reader) (*imagev1.ImagePolicy, error) {
	objs, err := readObjects(r)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if kind, _ := obj["kind"].(string); kind != imagev1.ImagePolicyKind {
			continue
		}
		if api, _ := obj["apiVersion"].(string); api != imagev1.GroupVersion.String() {
			return nil, fmt.Errorf("ImagePolicy of apiVersion %q: want %s (tk-image migrate converts Flux's)", api, imagev1.GroupVersion)
		}
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var p imagev1.ImagePolicy
		if err := decodeStrict(data, &p); err != nil {
			return nil, err
		}
		return &p, nil
	}
	return nil, errors.New("no ImagePolicy")
}

// byBuildTime reports whether choice sets a kind ordered by build time.
func byBuildTime(choice imagev1.ImagePolicyChoice) bool {
	for _, k := range policy.Ordering() {
		if k.ByBuildTime && k.Sets(choice) {
			return true
		}
	}
	return false
}

// fileTimes are the tag times of a --tag-times file.
type fileTimes map[string]tagTime

type tagTime struct{ seen, created time.Time }

func (f fileTimes) Seen(tag string) (time.Time, bool) {
	t := f[tag].seen
	return t, !t.IsZero()
}

func (f fileTimes) Created(_ context.Context, tag string) (time.Time, bool, error) {
	t := f[tag].created
	return t, !t.IsZero(), nil
}

// readTagTimes reads a --tag-times file: "TAG SEEN [CREATED]" a line, RFC
// 3339 times or "-"; blank lines and # comments skipped. It returns the
// tags in file order.
func readTagTimes(path string) ([]string, fileTimes, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var tags []string
	times := fileTimes{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 {
			return nil, nil, fmt.Errorf("line %d: want TAG SEEN [CREATED], got %q", n, line)
		}
		var tt tagTime
		for i, dst := range []*time.Time{&tt.seen, &tt.created} {
			if i+1 >= len(fields) || fields[i+1] == "-" {
				continue
			}
			if *dst, err = time.Parse(time.RFC3339, fields[i+1]); err != nil {
				return nil, nil, fmt.Errorf("line %d: %w", n, err)
			}
		}
		if _, dup := times[fields[0]]; dup {
			return nil, nil, fmt.Errorf("line %d: tag %s given twice", n, fields[0])
		}
		times[fields[0]] = tt
		tags = append(tags, fields[0])
	}
	return tags, times, sc.Err()
}

func (o *evalOptions) listTags(ctx context.Context) ([]string, error) {
	repo, opts, _, err := o.registry(ctx)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tags, err := remote.List(repo, append(opts, remote.WithContext(ctx))...)
	if err != nil {
		return nil, fmt.Errorf("--image %s: listing its tags: %w", o.image, err)
	}
	return tags, nil
}

// registry is --image with its credentials (--docker-config, else
// anonymous), for go-containerregistry and for pkg/signature.
func (o *evalOptions) registry(ctx context.Context) (name.Repository, []remote.Option, signature.Access, error) {
	repo, err := name.NewRepository(o.image)
	if err != nil {
		return repo, nil, signature.Access{}, usageError{fmt.Errorf("--image: %w", err)}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var auth authn.Authenticator = authn.Anonymous
	if o.dockerConfig != "" {
		keychain, err := configKeychain(ctx, o.dockerConfig)
		if err != nil {
			return repo, nil, signature.Access{}, usageError{fmt.Errorf("--docker-config: %w", err)}
		}
		if auth, err = keychain.Resolve(repo); err != nil {
			return repo, nil, signature.Access{}, usageError{fmt.Errorf("--docker-config: %w", err)}
		}
	}
	return repo, []remote.Option{remote.WithAuth(auth)}, signature.Access{Auth: auth, Insecure: repo.Scheme() == "http"}, nil
}

// configKeychain reads a Docker config.json (or a directory holding one)
// the way the controller reads a dockerconfigjson pull secret.
func configKeychain(ctx context.Context, path string) (authn.Keychain, error) {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, "config.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return kauth.NewFromPullSecrets(ctx, []corev1.Secret{{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: data},
	}})
}
