package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/discover/propose"
	"toolkit.dev/image-toolkit/pkg/setters"
)

type discoverOptions struct {
	dir          string
	output       string
	export       bool
	writeMarkers bool
	expandFlow   bool
	mode         string
	interval     time.Duration
}

func newDiscoverCommand(k *kube) *cobra.Command {
	var o discoverOptions
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Find the images a directory of YAML deploys, and onboard them",
		Long: `List every image the YAML files under --dir deploy, each with every place
it is written: container images of pod templates (Deployments, CronJobs and
any kind with the shape), kustomization images entries, and the
image.repository/image.tag convention of Helm values (HelmReleases and
values files). Strings that only look like images (ConfigMap data, env
values, annotations) are not images; references that cannot be automated
as written (no tag, latest, a digest alone, template expressions) are
listed as skipped with the reason.

With --export, print an ImageRepository and an ImagePolicy for each image,
in -n NAMESPACE; the policy follows the current tag (--policy-mode: patch,
minor (the default: the same major) or major; never below the current
tag), or the workload's image.toolkit.dev/policy.<container> annotation.
With --write-markers, add a $imagepolicy marker naming those policies to
every location, changing nothing else in any file; tk-image update then
updates them all. A value inside a flow mapping ({name: envoy, image: ...})
cannot carry a marker of its own: --expand-flow rewrites just that mapping
in block style (indentation, quotes, comments and CRLF kept) so that it can;
without it such locations are listed as not marked, and only marker-less
discovery (an automation's spec.discover) updates them.`,
		Example: `  tk-image discover --dir ./clusters/prod
  tk-image discover --dir . -o json
  tk-image discover --dir . --export -n apps > image-automation.yaml
  tk-image discover --dir . --write-markers -n apps
  tk-image discover --dir . --write-markers --expand-flow -n apps`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(k, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", ".", "directory to read")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.export, "export", false, "print an ImageRepository and an ImagePolicy (YAML) for each image")
	f.BoolVar(&o.writeMarkers, "write-markers", false, "write a $imagepolicy marker on every location of every image with a policy")
	f.BoolVar(&o.expandFlow, "expand-flow", false, "with --write-markers, rewrite in block style each flow mapping ({...}) holding a location, so that it can be marked")
	f.StringVar(&o.mode, "policy-mode", "minor", "how far the default policies follow: patch, minor or major")
	f.DurationVar(&o.interval, "interval", 5*time.Minute, "scan interval of the exported ImageRepositories")
	_ = cmd.RegisterFlagCompletionFunc("policy-mode", cobra.FixedCompletions([]string{"patch", "minor", "major"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o *discoverOptions) run(k *kube, stdout, stderr io.Writer) error {
	mode, err := o.check()
	if err != nil {
		return err
	}
	res, err := discover.Dir(o.dir)
	if err != nil {
		return err
	}
	if !o.export && !o.writeMarkers {
		if o.output == "json" {
			return json.NewEncoder(stdout).Encode(res)
		}
		return printDiscovered(stdout, res)
	}
	ns, err := k.namespace()
	if err != nil {
		return err
	}
	names := propose.Names(res.Images)
	automated := choosePolicies(res.Images, mode, stderr)
	if o.export {
		if err := o.exportObjects(k, automated, names, stdout); err != nil {
			return err
		}
	}
	if o.writeMarkers {
		return o.markAutomated(res, automated, ns, names, stderr)
	}
	return nil
}

// check refuses flags the command cannot run with, and reads the policy
// mode.
func (o *discoverOptions) check() (propose.Mode, error) {
	if o.output != "text" && o.output != "json" {
		return "", usageError{fmt.Errorf("--output must be text or json, got %q", o.output)}
	}
	mode, err := propose.ParseMode(o.mode)
	if err != nil {
		return "", usageError{fmt.Errorf("--policy-mode: %w", err)}
	}
	if o.expandFlow && !o.writeMarkers {
		return "", usageError{errors.New("--expand-flow needs --write-markers")}
	}
	if o.interval <= 0 {
		return "", usageError{fmt.Errorf("--interval %s: want a positive duration, e.g. 5m", o.interval)}
	}
	if info, err := os.Stat(o.dir); err != nil || !info.IsDir() {
		return "", usageError{fmt.Errorf("--dir %q is not a directory", o.dir)}
	}
	return mode, nil
}

// automatedImage is a discovered image with the policy that follows it.
type automatedImage struct {
	img    discover.Image
	choice imagev1.ImagePolicyChoice
	filter *imagev1.TagFilter
}

// choosePolicies gives each discovered image the policy mode chooses for
// its tag; an image none fits is reported on stderr and left out.
func choosePolicies(images []discover.Image, mode propose.Mode, stderr io.Writer) []automatedImage {
	var with []automatedImage
	for _, img := range images {
		choice, filter, err := propose.Policy(img, mode)
		if err != nil {
			fmt.Fprintf(stderr, "tk-image: %s: %v; not automated\n", img.Name, err)
			continue
		}
		with = append(with, automatedImage{img, choice, filter})
	}
	return with
}

// exportObjects writes an ImageRepository and an ImagePolicy for each
// automated image, named as its markers name them.
func (o *discoverOptions) exportObjects(k *kube, automated []automatedImage, names map[string]string, stdout io.Writer) error {
	for _, c := range automated {
		n := names[c.img.Name]
		repo := &imagev1.ImageRepository{Spec: imagev1.ImageRepositorySpec{Image: c.img.Name, Interval: metav1.Duration{Duration: o.interval}}}
		pol := &imagev1.ImagePolicy{Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef: meta.NamespacedObjectReference{Name: n}, Policy: c.choice, FilterTags: c.filter}}
		repo.Name, pol.Name = n, n
		var f createFlags
		if err := f.writeYAML(k, "repository", repo, stdout); err != nil {
			return err
		}
		if err := f.writeYAML(k, "policy", pol, stdout); err != nil {
			return err
		}
	}
	return nil
}

// markAutomated writes a marker naming NAMESPACE:NAME's policy at each
// place an automated image is used, reporting the files marked and the
// places skipped on stderr.
func (o *discoverOptions) markAutomated(res *discover.Result, automated []automatedImage, ns string, names map[string]string, stderr io.Writer) error {
	keep := map[string]bool{}
	for _, c := range automated {
		keep[c.img.Name] = true
	}
	sites := res.Sites(func(img discover.Image) string {
		if !keep[img.Name] {
			return ""
		}
		return ns + ":" + names[img.Name]
	})
	if o.expandFlow {
		expanded, moved, left, err := discover.ExpandFlow(o.dir, sites)
		for _, f := range expanded {
			fmt.Fprintf(stderr, "expanded flow style in %s\n", f)
		}
		for _, s := range left {
			fmt.Fprintf(stderr, "tk-image: %s:%d: %s\n", s.File, s.Line, s.Reason)
		}
		if err != nil {
			return err
		}
		sites = moved
	}
	written, skipped, err := discover.WriteMarkers(o.dir, sites)
	for _, f := range written {
		fmt.Fprintf(stderr, "marked %s\n", f)
	}
	if err == nil && len(written) == 0 && len(skipped) == 0 {
		// Said, not left silent: a second run finds every marker written.
		what := fmt.Sprintf("the %d automated images", len(automated))
		if len(automated) == 1 {
			what = "the automated image"
		}
		fmt.Fprintf(stderr, "nothing to mark: every location of %s already has its marker\n", what)
	}
	flow := 0
	for _, s := range skipped {
		fmt.Fprintf(stderr, "tk-image: %s:%d: not marked: %s\n", s.File, s.Line, s.Reason)
		if s.Reason == setters.FlowStyleReason {
			flow++
		}
	}
	if flow > 0 {
		what := fmt.Sprintf("%d locations in flow style are", flow)
		if flow == 1 {
			what = "1 location in flow style is"
		}
		fmt.Fprintf(stderr, "tk-image: %s not marked: tk-image update leaves them behind, only marker-less discovery (spec.discover) updates them; --expand-flow rewrites them in block style so that they can be marked\n", what)
	}
	return err
}

// printDiscovered prints a table: image, tag, locations (the first, and
// how many more), then what was skipped.
func printDiscovered(w io.Writer, res *discover.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tTAG\tLOCATIONS")
	for _, img := range res.Images {
		var locs []string
		for _, l := range img.Locations {
			locs = append(locs, fmt.Sprintf("%s:%d", l.File, l.Line))
		}
		tag := img.Tag
		if img.Digest != "" {
			tag += "@" + img.Digest
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", img.Name, tag, strings.Join(locs, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped:")
		for _, s := range res.Skipped {
			where := s.File
			if s.Line > 0 {
				where = fmt.Sprintf("%s:%d", s.File, s.Line)
			}
			if s.Value != "" {
				fmt.Fprintf(w, "  %s: %s: %s\n", where, s.Value, s.Reason)
			} else {
				fmt.Fprintf(w, "  %s: %s\n", where, s.Reason)
			}
		}
	}
	return nil
}
