package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	sigsyaml "sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// createFlags are shared by every create subcommand.
type createFlags struct {
	export bool
	labels []string
	waitFlags
}

func (f *createFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().BoolVar(&f.export, "export", false, "print the object as YAML instead of applying it")
	cmd.PersistentFlags().StringArrayVar(&f.labels, "label", nil, "a label KEY=VALUE to set (repeatable)")
	f.waitFlags.add(cmd.PersistentFlags(), false, defaultWait, "the controller has reconciled the object (a job: until it finished)")
}

func newCreateCommand(k *kube) *cobra.Command {
	var f createFlags
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create or update image-toolkit objects from flags",
		Long: `Create an ImageRepository, ImagePolicy, ImageUpdateAutomation or UpdateJob
from flags, or update the spec and labels of the one that already exists
(as flux create does). --export prints the YAML instead, for git. The API
server validates the object; its errors are printed as it states them.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	f.add(cmd)
	cmd.AddCommand(
		newCreateRepositoryCommand(k, &f),
		newCreatePolicyCommand(k, &f),
		newCreateAutomationCommand(k, &f),
		newCreateJobCommand(k, &f),
	)
	return cmd
}

func newCreateRepositoryCommand(k *kube, f *createFlags) *cobra.Command {
	var (
		spec                            imagev1.ImageRepositorySpec
		interval, scanTimeout           time.Duration
		secret, certSecret, proxySecret string
		exclusions, accessFrom          []string
	)
	cmd := &cobra.Command{
		Use:   "repository NAME --image IMAGE",
		Short: "Create or update an ImageRepository: an image repository to scan",
		Example: `  tk-image create repository podinfo --image ghcr.io/stefanprodan/podinfo --interval 5m
  tk-image create repository app --image registry.example.com/team/app --secret-ref regcred --export`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Interval = metav1.Duration{Duration: interval}
			if scanTimeout > 0 {
				spec.Timeout = &metav1.Duration{Duration: scanTimeout}
			}
			spec.SecretRef = localRef(secret)
			spec.CertSecretRef = localRef(certSecret)
			spec.ProxySecretRef = localRef(proxySecret)
			if cmd.Flags().Changed("exclude") {
				spec.ExclusionList = exclusions
			}
			if len(accessFrom) > 0 {
				af, err := parseAccessFrom(accessFrom)
				if err != nil {
					return usageError{err}
				}
				spec.AccessFrom = af
			}
			if err := checkRepositoryFlags(spec); err != nil {
				return usageError{err}
			}
			obj := &imagev1.ImageRepository{Spec: spec}
			return f.apply(cmd.Context(), k, "repository", args[0], obj, func(cur client.Object) {
				cur.(*imagev1.ImageRepository).Spec = spec
			}, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&spec.Image, "image", "", "image repository to scan, without tag, e.g. ghcr.io/org/app (required)")
	fl.DurationVar(&interval, "interval", 5*time.Minute, "time between scans")
	fl.DurationVar(&scanTimeout, "scan-timeout", 0, "bound on one scan (default: the interval)")
	fl.StringVar(&secret, "secret-ref", "", "Secret of type kubernetes.io/dockerconfigjson with registry credentials")
	fl.StringVar(&spec.ServiceAccountName, "service-account", "", "ServiceAccount whose imagePullSecrets are the credentials")
	fl.StringVar(&certSecret, "cert-secret-ref", "", "Secret with ca.crt, and tls.crt and tls.key for client certificates")
	fl.StringVar(&proxySecret, "proxy-secret-ref", "", "Secret with the proxy address, and username and password")
	fl.StringArrayVar(&exclusions, "exclude", nil, "regexp of tags to drop (repeatable; replaces the default '^.*\\.sig$')")
	fl.StringArrayVar(&accessFrom, "access-from", nil, "namespaces whose policies may use this repository: LABEL=VALUE[,...] of the namespace, or '*' for all (repeatable)")
	fl.StringVar(&spec.Provider, "provider", "generic", "registry provider: generic, aws, azure or gcp")
	fl.BoolVar(&spec.Insecure, "insecure", false, "allow plain HTTP to the registry")
	_ = cmd.MarkFlagRequired("image")
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions([]string{"generic", "aws", "azure", "gcp"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// checkRepositoryFlags refuses, in the flags' words, what the API server
// or the reflector would refuse of the spec the flags give (--export has
// neither to ask): a spec.image with a scheme other than a Helm
// repository's, a tag, a digest or capitals; a scan interval that is not
// positive; a provider the API does not know; an exclusion that is no Go
// regexp.
func checkRepositoryFlags(spec imagev1.ImageRepositorySpec) error {
	img := strings.ToLower(spec.Image)
	if !strings.HasPrefix(img, "https://") && !strings.HasPrefix(img, "http://") {
		if scheme, rest, ok := strings.Cut(spec.Image, "://"); ok {
			return fmt.Errorf("--image %q: no %s:// before an image repository, give %s (http(s):// is for a chart of a Helm repository)", spec.Image, scheme, rest)
		}
		if _, err := name.NewRepository(spec.Image); err != nil {
			return fmt.Errorf("--image %q: want a repository without tag or digest, e.g. ghcr.io/org/app, or a Helm chart's https://REPOSITORY/CHART: %v", spec.Image, err)
		}
	}
	if spec.Interval.Duration <= 0 {
		return fmt.Errorf("--interval %s: want a positive duration, e.g. 5m", spec.Interval.Duration)
	}
	if t := spec.Timeout; t != nil && t.Duration < 0 {
		return fmt.Errorf("--scan-timeout %s: want a positive duration, or none for the interval", t.Duration)
	}
	if providers := []string{"generic", "aws", "azure", "gcp"}; !slices.Contains(providers, spec.Provider) {
		return fmt.Errorf("--provider %q: want one of %s", spec.Provider, strings.Join(providers, ", "))
	}
	for _, e := range spec.ExclusionList {
		if _, err := regexp.Compile(e); err != nil {
			return fmt.Errorf("--exclude %q: %v", e, err)
		}
	}
	return nil
}

// parseAccessFrom reads --access-from values into namespace selectors.
func parseAccessFrom(values []string) (*meta.AccessFrom, error) {
	af := &meta.AccessFrom{}
	for _, v := range values {
		sel := meta.NamespaceSelector{MatchLabels: map[string]string{}}
		if v != "*" {
			m, err := parseKeyValues(v, ",")
			if err != nil {
				return nil, fmt.Errorf("--access-from: %w", err)
			}
			sel.MatchLabels = m
		}
		af.NamespaceSelectors = append(af.NamespaceSelectors, sel)
	}
	return af, nil
}

func newCreatePolicyCommand(k *kube, f *createFlags) *cobra.Command {
	var (
		repository, digest, platform string
		rules                        policyFlags
		interval                     time.Duration
		verify                       verifyFlags
	)
	cmd := &cobra.Command{
		Use:   "policy NAME --repository REPOSITORY (" + strings.Join(kindFlags(true), " | ") + ")",
		Short: "Create or update an ImagePolicy: how to pick the latest tag",
		Long: `Create or update an ImagePolicy. Test the choice offline first with
tk-image policy eval, which runs the same code and takes the same policy flags.`,
		Example: `  tk-image create policy podinfo --repository podinfo --semver '>=6.0.0'
  tk-image create policy app --repository app --numerical asc \
    --filter-pattern '^main-[a-f0-9]+-(?P<ts>[0-9]+)$' --filter-extract '$ts'
  tk-image create policy podinfo --repository podinfo --semver 6.x --minimum-age 72h
  tk-image create policy app --repository app --newest-build --max-candidates 50 --minimum-age 24h --age-source created
  tk-image create policy podinfo --repository podinfo --semver 6.x --digest-reflection IfNotPresent --platform linux/arm64
  tk-image create policy podinfo --repository podinfo --semver 6.x --verify-provider cosign --verify-secret-ref cosign-keys
  tk-image create policy podinfo --repository podinfo --semver 6.x --verify-provider cosign \
    --verify-issuer '^https://token.actions.githubusercontent.com$' --verify-subject '^https://github.com/org/podinfo/'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rules.check(); err != nil {
				return usageError{err}
			}
			spec := imagev1.ImagePolicySpec{DigestReflectionPolicy: imagev1.ReflectionPolicy(digest), Platform: platform}
			ns, name, _ := strings.Cut(repository, "/")
			if name == "" {
				ns, name = "", repository
			}
			spec.ImageRepositoryRef = meta.NamespacedObjectReference{Namespace: ns, Name: name}
			// newestBuild: {} leaves the limit to the API's default.
			var n int
			spec.Policy, spec.FilterTags, n = rules.rules(true)
			// Checked here, not only by the API server: --export has none.
			if err := rules.validate(spec.Policy, spec.FilterTags, n); err != nil {
				return err
			}
			if rules.minimumAge > 0 {
				spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: rules.minimumAge}}
				if cmd.Flags().Changed("age-source") {
					spec.MinimumAge.Source = imagev1.AgeSource(rules.ageSource)
				}
			}
			if interval > 0 {
				spec.Interval = &metav1.Duration{Duration: interval}
			}
			v, err := verify.spec()
			if err != nil {
				return usageError{err}
			}
			spec.Verify = v
			obj := &imagev1.ImagePolicy{Spec: spec}
			return f.apply(cmd.Context(), k, "policy", args[0], obj, func(cur client.Object) {
				cur.(*imagev1.ImagePolicy).Spec = spec
			}, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&repository, "repository", "", "the ImageRepository: NAME, or NAMESPACE/NAME (required)")
	rules.add(cmd)
	fl.StringVar(&digest, "digest-reflection", "", "when to look up the chosen tag's digest: Never, IfNotPresent or Always")
	fl.DurationVar(&interval, "interval", 0, "time between digest look-ups (with --digest-reflection Always)")
	fl.StringVar(&platform, "platform", "", "OS/ARCH[/VARIANT], e.g. linux/arm64: the digest is this platform's manifest in the tag's index, not the index, and its build time counts")
	verify.add(cmd)
	_ = cmd.MarkFlagRequired("repository")
	_ = cmd.RegisterFlagCompletionFunc("repository", completeNames(k, "repository", 0))
	_ = cmd.RegisterFlagCompletionFunc("digest-reflection", cobra.FixedCompletions([]string{"Never", "IfNotPresent", "Always"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("platform", cobra.FixedCompletions(commonPlatforms, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// verifyFlags are spec.verify as flags, named as the Flux CLI names them
// for sources (flux create source oci --verify-provider ...).
type verifyFlags struct {
	provider, secretRef, issuer, subject, trustedRoot, trustPolicy string
}

func (v *verifyFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&v.provider, "verify-provider", "", "only images whose signature verifies are chosen: cosign or notation (spec.verify)")
	fl.StringVar(&v.secretRef, "verify-secret-ref", "", "Secret of the cosign public keys (*.pub) or the notation certificates (*.crt, *.pem)")
	fl.StringVar(&v.issuer, "verify-issuer", "", "cosign keyless: regexp of the OIDC issuer (with --verify-subject)")
	fl.StringVar(&v.subject, "verify-subject", "", "cosign keyless: regexp of the certificate subject (with --verify-issuer)")
	fl.StringVar(&v.trustedRoot, "verify-trusted-root-secret-ref", "", "cosign keyless: Secret whose trusted_root.json is a private Sigstore's root (default: the public Sigstore)")
	fl.StringVar(&v.trustPolicy, "verify-trust-policy-ref", "", "notation: ConfigMap whose trustpolicy.json is the trust policy")
	_ = cmd.RegisterFlagCompletionFunc("verify-provider", cobra.FixedCompletions([]string{imagev1.SignatureProviderCosign, imagev1.SignatureProviderNotation}, cobra.ShellCompDirectiveNoFileComp))
}

// spec is spec.verify, nil without --verify-provider; combinations the
// API would refuse are refused here first, with the flags' names.
func (v *verifyFlags) spec() (*imagev1.ImageVerification, error) {
	if v.provider == "" {
		if v.secretRef != "" || v.issuer != "" || v.subject != "" || v.trustedRoot != "" || v.trustPolicy != "" {
			return nil, fmt.Errorf("--verify-* flags need --verify-provider")
		}
		return nil, nil
	}
	ref := func(n string) *meta.LocalObjectReference {
		if n == "" {
			return nil
		}
		return &meta.LocalObjectReference{Name: n}
	}
	out := &imagev1.ImageVerification{Provider: v.provider, SecretRef: ref(v.secretRef),
		TrustedRootSecretRef: ref(v.trustedRoot), TrustPolicyRef: ref(v.trustPolicy)}
	switch v.provider {
	case imagev1.SignatureProviderCosign:
		if (v.issuer == "") != (v.subject == "") {
			return nil, fmt.Errorf("--verify-issuer and --verify-subject go together")
		}
		if (v.secretRef == "") == (v.issuer == "") {
			return nil, fmt.Errorf("cosign needs --verify-secret-ref (public keys) or --verify-issuer with --verify-subject (keyless), not both")
		}
		if v.trustPolicy != "" {
			return nil, fmt.Errorf("--verify-trust-policy-ref is for notation")
		}
		if v.issuer != "" {
			out.MatchOIDCIdentity = []imagev1.OIDCIdentityMatch{{Issuer: v.issuer, Subject: v.subject}}
		}
	case imagev1.SignatureProviderNotation:
		if v.secretRef == "" || v.trustPolicy == "" {
			return nil, fmt.Errorf("notation needs --verify-secret-ref (certificates) and --verify-trust-policy-ref")
		}
		if v.issuer != "" || v.subject != "" || v.trustedRoot != "" {
			return nil, fmt.Errorf("--verify-issuer, --verify-subject and --verify-trusted-root-secret-ref are for cosign")
		}
	default:
		return nil, fmt.Errorf("--verify-provider %q: cosign or notation", v.provider)
	}
	return out, nil
}

// commonPlatforms complete --platform: those multi-arch images usually
// carry (any other OS/ARCH[/VARIANT] may be typed).
var commonPlatforms = []string{"linux/amd64", "linux/arm64", "linux/arm/v7", "linux/arm/v6", "linux/386",
	"linux/ppc64le", "linux/s390x", "linux/riscv64", "windows/amd64"}

// gitFlags describe a git repository, the revision to start from, the
// commit and the push, for automations and jobs.
type gitFlags struct {
	url, secret, proxySecret      string
	timeout                       time.Duration
	branch, tag, semver, refName  string
	commit                        string
	pushBranch, pushRefspec       string
	pushOptions                   []string
	authorName, authorEmail       string
	template                      string
	values                        []string
	signingSecret, signingKeyType string
	pr                            pullRequestFlags
}

func (g *gitFlags) add(fl *pflag.FlagSet, defaultAuthor bool) {
	fl.StringVar(&g.url, "url", "", "git repository URL: https://, http:// or ssh://")
	fl.StringVar(&g.secret, "secret", "", "Secret with the git credentials (username and password, bearerToken, or identity and known_hosts)")
	fl.StringVar(&g.proxySecret, "proxy-secret", "", "Secret with the proxy address, and username and password")
	fl.DurationVar(&g.timeout, "git-timeout", 0, "bound on each git operation (default 60s)")
	fl.StringVar(&g.branch, "branch", "", "branch to check out (and push to)")
	fl.StringVar(&g.tag, "checkout-tag", "", "tag to check out instead of a branch")
	fl.StringVar(&g.semver, "checkout-semver", "", "check out the highest tag in this semver range")
	fl.StringVar(&g.refName, "checkout-ref", "", "reference to check out, e.g. refs/pull/42/head")
	fl.StringVar(&g.commit, "checkout-commit", "", "commit to check out")
	fl.StringVar(&g.pushBranch, "push-branch", "", "branch to push to (default: the checkout branch)")
	fl.StringVar(&g.pushRefspec, "push-refspec", "", "refspec to push, e.g. refs/heads/main:refs/heads/auto: alone, instead of the branch; with --push-branch, as well (Flux's push.refspec)")
	fl.StringArrayVar(&g.pushOptions, "push-option", nil, "a git push option KEY=VALUE (repeatable)")
	name, email := "", ""
	if defaultAuthor {
		name, email = "tk-image", "tk-image@localhost"
	}
	fl.StringVar(&g.authorName, "author-name", name, "commit author name")
	fl.StringVar(&g.authorEmail, "author-email", email, "commit author email")
	fl.StringVar(&g.template, "commit-template", "", "commit message template (Go text/template); @FILE reads it from a file")
	fl.StringArrayVar(&g.values, "commit-value", nil, "a template value KEY=VALUE, as .Values.KEY (repeatable)")
	fl.StringVar(&g.signingSecret, "signing-key-secret", "", "Secret holding the key commits are signed with")
	fl.StringVar(&g.signingKeyType, "signing-key-type", "", "signing key type: gpg (git.asc) or ssh (identity)")
	g.pr.add(fl)
}

func (g *gitFlags) repository() updatev1.GitRepositorySpec {
	r := updatev1.GitRepositorySpec{URL: g.url, SecretRef: localRef(g.secret), ProxySecretRef: localRef(g.proxySecret)}
	if g.timeout > 0 {
		r.Timeout = &metav1.Duration{Duration: g.timeout}
	}
	return r
}

func (g *gitFlags) checkout() *updatev1.GitCheckoutSpec {
	ref := updatev1.GitRepositoryRef{Branch: g.branch, Tag: g.tag, SemVer: g.semver, Name: g.refName, Commit: g.commit}
	if ref == (updatev1.GitRepositoryRef{}) {
		return nil
	}
	return &updatev1.GitCheckoutSpec{Reference: ref}
}

func (g *gitFlags) commitSpec() (updatev1.CommitSpec, error) {
	c := updatev1.CommitSpec{Author: updatev1.CommitUser{Name: g.authorName, Email: g.authorEmail}}
	tmpl, err := readTemplate("--commit-template", g.template)
	if err != nil {
		return c, err
	}
	c.MessageTemplate = tmpl
	if len(g.values) > 0 {
		v, err := parseKeyValueList(g.values)
		if err != nil {
			return c, usageError{fmt.Errorf("--commit-value: %w", err)}
		}
		c.MessageTemplateValues = v
	}
	if g.signingSecret != "" {
		c.SigningKey = &updatev1.SigningKey{SecretRef: meta.LocalObjectReference{Name: g.signingSecret}, Type: updatev1.SigningKeyType(g.signingKeyType)}
	} else if g.signingKeyType != "" {
		return c, usageError{errors.New("--signing-key-type needs --signing-key-secret")}
	}
	return c, nil
}

// readTemplate is a template flag's value, read from FILE when it is @FILE.
func readTemplate(flag, value string) (string, error) {
	file, ok := strings.CutPrefix(value, "@")
	if !ok {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	return string(b), nil
}

func (g *gitFlags) push() (*updatev1.PushSpec, error) {
	pr, err := g.pr.spec()
	if err != nil {
		return nil, err
	}
	// The API refuses both (a request has a head branch of its own); said
	// here, --export does not write what it would refuse.
	if pr != nil && (g.pushBranch != "" || g.pushRefspec != "") {
		return nil, usageError{fmt.Errorf("%s pushes to a head branch of its own (--pr-branch-template): not with --push-branch or --push-refspec", g.pr.askedBy())}
	}
	p := &updatev1.PushSpec{Branch: g.pushBranch, Refspec: g.pushRefspec, PullRequest: pr}
	if len(g.pushOptions) > 0 {
		o, err := parseKeyValueList(g.pushOptions)
		if err != nil {
			return nil, usageError{fmt.Errorf("--push-option: %w", err)}
		}
		p.Options = o
	}
	if p.Branch == "" && p.Refspec == "" && p.Options == nil && p.PullRequest == nil {
		return nil, nil
	}
	return p, nil
}

func newCreateAutomationCommand(k *kube, f *createFlags) *cobra.Command {
	var (
		g                gitFlags
		source, selector string
		path             string
		interval         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "automation NAME (--url URL | --source GITREPOSITORY) --author-email EMAIL",
		Short: "Create or update an ImageUpdateAutomation: keep a git repository's markers up to date",
		Long: `Create or update an ImageUpdateAutomation. The repository is given either
directly (--url, --secret, --branch, ...) or as a Flux GitRepository
(--source NAME or NAMESPACE/NAME), whose URL, credentials and ref are used.

With --pull-request (or any --pr-* flag) its jobs propose each update as one
pull (merge) request from a head branch of their own instead of pushing to
the branch: not with --push-branch or --push-refspec.`,
		Example: `  tk-image create automation apps --url https://github.com/org/fleet --secret fleet-auth \
    --branch main --path ./clusters/prod --author-email bot@example.com
  tk-image create automation apps --source flux-system/flux-system --author-email bot@example.com \
    --push-branch image-updates --policy-selector team=web --export
  tk-image create automation apps --url https://github.com/org/fleet --secret fleet-auth \
    --branch main --author-email bot@example.com --pull-request --pr-reviewer org/platform --pr-auto-merge squash`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := imagev1.ImageUpdateAutomationSpec{Interval: metav1.Duration{Duration: interval}}
			if source != "" {
				ns, name, _ := strings.Cut(source, "/")
				if name == "" {
					ns, name = "", source
				}
				spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Kind: "GitRepository", Name: name, Namespace: ns}
			}
			if g.url != "" || g.secret != "" || g.proxySecret != "" || g.timeout > 0 {
				r := g.repository()
				spec.GitSpec.Repository = &r
			}
			spec.GitSpec.Checkout = g.checkout()
			var err error
			if spec.GitSpec.Commit, err = g.commitSpec(); err != nil {
				return err
			}
			if spec.GitSpec.Push, err = g.push(); err != nil {
				return err
			}
			if selector != "" {
				ls, err := metav1.ParseToLabelSelector(selector)
				if err != nil {
					return usageError{fmt.Errorf("--policy-selector: %w", err)}
				}
				spec.PolicySelector = ls
			}
			if path != "" {
				spec.Update = &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: path}
			}
			obj := &imagev1.ImageUpdateAutomation{Spec: spec}
			return f.apply(cmd.Context(), k, "automation", args[0], obj, func(cur client.Object) {
				cur.(*imagev1.ImageUpdateAutomation).Spec = spec
			}, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	g.add(fl, false)
	g.pr.complete(cmd)
	fl.StringVar(&source, "source", "", "a Flux GitRepository: NAME or NAMESPACE/NAME (instead of --url)")
	fl.StringVar(&path, "path", "", "directory in the repository to update (default: the root)")
	fl.DurationVar(&interval, "interval", 5*time.Minute, "time between runs")
	fl.StringVar(&selector, "policy-selector", "", "label selector of the ImagePolicies to apply (default: all in the namespace)")
	_ = cmd.MarkFlagRequired("author-email")
	return cmd
}

func newCreateJobCommand(k *kube, f *createFlags) *cobra.Command {
	var j jobFlags
	cmd := &cobra.Command{
		Use:   "job NAME --url URL --set NAMESPACE:NAME=IMAGE:TAG...",
		Short: "Create an UpdateJob: one update of a git repository",
		Long: `Create an UpdateJob, which the update-job-controller runs once: check out,
set the marked values, commit and push (with --pull-request, propose the
change as a pull request instead). An UpdateJob cannot be changed once
created. tk-image job run creates one and follows it to the end.`,
		Example: `  tk-image create job bump-podinfo --url https://github.com/org/fleet --secret fleet-auth \
    --branch main --set apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0 --export`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := j.spec()
			if err != nil {
				return err
			}
			job := &updatev1.UpdateJob{Spec: spec}
			job.Name = args[0]
			return createJob(cmd.Context(), k, f, job, cmd.OutOrStdout())
		},
	}
	j.add(cmd.Flags())
	j.pr.complete(cmd)
	return cmd
}

// apply writes obj (of kind kindName, named name in the selected namespace)
// to the cluster: created when missing, else mutate sets the desired spec on
// the current object, and labels are added, keeping everything else (status,
// other labels, annotations). With --export it prints the YAML instead.
func (f *createFlags) apply(ctx context.Context, k *kube, kindName, name string, obj client.Object, mutate func(client.Object), out io.Writer) error {
	// The API server's rule for object names, checked here for --export,
	// whose YAML no server sees until it is applied.
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return usageError{fmt.Errorf("NAME %q: %s", name, strings.Join(msgs, "; "))}
	}
	lbls, err := f.labelMap()
	if err != nil {
		return err
	}
	obj.SetName(name)
	obj.SetLabels(lbls)
	if f.export {
		return f.writeYAML(k, kindName, obj, out)
	}
	kd, _ := kindNamed(kindName)
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	cur := kd.newObj()
	cur.SetNamespace(key.Namespace)
	cur.SetName(key.Name)
	res, err := controllerutil.CreateOrUpdate(ctx, c, cur, func() error {
		mutate(cur)
		if len(lbls) > 0 {
			l := cur.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			maps.Copy(l, lbls)
			cur.SetLabels(l)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s %s %s\n", kd.gvk.Kind, key, res)
	if !f.wait {
		return nil
	}
	return waitCurrent(ctx, c, kd, key, "", f.timeout, out)
}

// labelMap is --label as a map; nil when none given.
func (f *createFlags) labelMap() (map[string]string, error) {
	lbls, err := parseKeyValueList(f.labels)
	if err != nil {
		return nil, usageError{fmt.Errorf("--label: %w", err)}
	}
	return lbls, nil
}

// writeYAML prints obj as the YAML a user commits: apiVersion, kind, name,
// namespace, labels and spec; no status or server-set fields.
func (f *createFlags) writeYAML(k *kube, kindName string, obj client.Object, out io.Writer) error {
	kd, _ := kindNamed(kindName)
	ns, err := k.namespace()
	if err != nil {
		return err
	}
	obj.SetNamespace(ns)
	m, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(kd.gvk)
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	b, err := sigsyaml.Marshal(u.Object)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "---\n%s", b)
	return err
}

func localRef(name string) *meta.LocalObjectReference {
	if name == "" {
		return nil
	}
	return &meta.LocalObjectReference{Name: name}
}

// parseKeyValueList reads repeated KEY=VALUE flags.
func parseKeyValueList(values []string) (map[string]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range values {
		m, err := parseKeyValues(v, "\x00")
		if err != nil {
			return nil, err
		}
		maps.Copy(out, m)
	}
	return out, nil
}

// parseKeyValues reads KEY=VALUE pairs separated by sep.
func parseKeyValues(s, sep string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, sep) {
		key, value, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", kv)
		}
		out[key] = value
	}
	return out, nil
}

// parseSetters reads --set NAMESPACE:NAME=IMAGE:TAG[@DIGEST] values.
func parseSetters(values []string) ([]updatev1.PolicySetter, error) {
	var out []updatev1.PolicySetter
	seen := map[string]bool{}
	for _, v := range values {
		policy, img, err := setters.ParsePolicyArg(v)
		if err != nil {
			return nil, usageError{fmt.Errorf("--set %w", err)}
		}
		if seen[policy] {
			return nil, usageError{fmt.Errorf("--set %s given twice", policy)}
		}
		seen[policy] = true
		out = append(out, updatev1.PolicySetter{Policy: policy, ImageRef: img})
	}
	return out, nil
}
