package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	kauth "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/policy"
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
// them to the cluster, policy eval runs them here.
type policyFlags struct {
	semver, alphabetical, numerical string
	pattern, extract                string
}

func (p *policyFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&p.semver, "semver", "", "pick the highest version in this range, e.g. '>=1.0.0 <2.0.0'")
	f.StringVar(&p.alphabetical, "alphabetical", "", "alphabetical order: asc (greatest wins) or desc")
	f.StringVar(&p.numerical, "numerical", "", "numerical order: asc (greatest wins) or desc")
	f.StringVar(&p.pattern, "filter-pattern", "", "keep only tags matching this Go regexp")
	f.StringVar(&p.extract, "filter-extract", "", "order by this expansion of the pattern, e.g. '$ts'")
	for _, o := range []string{"alphabetical", "numerical"} {
		_ = cmd.RegisterFlagCompletionFunc(o, cobra.FixedCompletions([]string{"asc", "desc"}, cobra.ShellCompDirectiveNoFileComp))
	}
}

// rules returns the orderings given (and how many: the policy wants
// exactly one) and the filter, nil when no filter flag is given.
func (p *policyFlags) rules() (imagev1.ImagePolicyChoice, *imagev1.TagFilter, int) {
	var choice imagev1.ImagePolicyChoice
	n := 0
	if p.semver != "" {
		n++
		choice.SemVer = &imagev1.SemVerPolicy{Range: p.semver}
	}
	if p.alphabetical != "" {
		n++
		choice.Alphabetical = &imagev1.AlphabeticalPolicy{Order: p.alphabetical}
	}
	if p.numerical != "" {
		n++
		choice.Numerical = &imagev1.NumericalPolicy{Order: p.numerical}
	}
	var filter *imagev1.TagFilter
	if p.pattern != "" || p.extract != "" {
		filter = &imagev1.TagFilter{Pattern: p.pattern, Extract: p.extract}
	}
	return choice, filter, n
}

type evalOptions struct {
	policyFlags
	image, dockerConfig string
	timeout             time.Duration
	explain             bool
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
them in an ImagePolicy's status.lastSelection.`,
		Example: `  crane ls ghcr.io/stefanprodan/podinfo | tk-image policy eval --semver '>=6.0.0 <7.0.0'
  tk-image policy eval --numerical asc --filter-pattern '^main-[a-f0-9]+-(?P<ts>[0-9]+)$' --filter-extract '$ts' < tags.txt
  tk-image policy eval --image ghcr.io/stefanprodan/podinfo --semver 6.x
  tk-image policy eval --image ghcr.io/stefanprodan/podinfo --semver '>=7.0.0' --explain`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.policyFlags.add(cmd)
	f.StringVar(&o.image, "image", "", "list the tags of this image repository instead of reading stdin")
	f.StringVar(&o.dockerConfig, "docker-config", "", "directory of a Docker config.json with credentials for --image (default: anonymous)")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "timeout for listing --image")
	f.BoolVar(&o.explain, "explain", false, "also print what the filter and the policy dropped and the best candidates, as ImagePolicy status.lastSelection records them")
	return cmd
}

func (o *evalOptions) run(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	choice, filter, set := o.rules()
	if set != 1 {
		return usageError{errors.New("give exactly one of --semver, --alphabetical or --numerical")}
	}
	if o.dockerConfig != "" && o.image == "" {
		return usageError{errors.New("--docker-config needs --image")}
	}
	p, err := policy.New(choice, filter)
	if err != nil {
		return usageError{err}
	}

	var tags []string
	if o.image != "" {
		if tags, err = o.listTags(ctx); err != nil {
			return err
		}
	} else {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				tags = append(tags, t)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading tags: %w", err)
		}
	}
	tag, err := p.Select(tags)
	if o.explain {
		e := p.Explain(tags, imagev1.MaxTopCandidates)
		tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
		writeSelection(tw, "", &e, choice, filter)
		if ferr := tw.Flush(); ferr != nil || err != nil {
			return errors.Join(err, ferr)
		}
		return nil
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tag)
	return err
}

func (o *evalOptions) listTags(ctx context.Context) ([]string, error) {
	repo, err := name.NewRepository(o.image)
	if err != nil {
		return nil, usageError{fmt.Errorf("--image: %w", err)}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(authn.Anonymous)}
	if o.dockerConfig != "" {
		keychain, err := configKeychain(ctx, o.dockerConfig)
		if err != nil {
			return nil, usageError{fmt.Errorf("--docker-config: %w", err)}
		}
		opts = []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)}
	}
	return remote.List(repo, opts...)
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
