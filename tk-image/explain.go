package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	sigsyaml "sigs.k8s.io/yaml"

	"toolkit.dev/image-toolkit/tk-image/internal/explain"
)

// explainKinds are the kinds explain takes: the two whose status answers
// "why was (or wasn't) my image updated".
var explainKinds = []string{"policy", "automation"}

type explainOptions struct {
	output       string
	scanCheckout string
}

func newExplainCommand(k *kube) *cobra.Command {
	var o explainOptions
	cmd := &cobra.Command{
		Use:   "explain policy|automation NAME",
		Short: "Explain why an image was (or was not) updated",
		Long: `Explain, from what the controllers record in status, why an image was (or
was not) updated.

For a policy: its ImageRepository's last scan (tags kept, tags the
exclusionList dropped), how the policy's last evaluation treated those tags
(how many the filter and the policy dropped, and the best candidates), the
image chosen, when it changed and what it was before.

For an automation: the policies it selects with their latest image against
the image its last run applied (pending when they differ), the branch head
(listed now from the git server, with the repository's credentials) against
the head its last run saw, the last UpdateJob's outcome and changes, and the
markers naming each policy: from the last job's status, or with
--scan-checkout from a dry run of the setters over a local checkout of the
repository. Markers that name a policy the automation cannot apply, and
selected policies no marker names, are listed as problems.`,
		Example: `  tk-image explain policy podinfo -n apps
  tk-image explain automation fleet -n flux-system
  tk-image explain automation fleet --scan-checkout ~/src/fleet
  tk-image explain policy podinfo -o yaml`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, explainKinds...),
		RunE: func(cmd *cobra.Command, args []string) error {
			kd, err := kindNamed(args[0], explainKinds...)
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), k, kd, args[1], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: yaml or json (default: text)")
	f.StringVar(&o.scanCheckout, "scan-checkout", "", "for an automation: find the markers in this local checkout of its repository (a dry run of the setters over its update path) instead of reading them from the last UpdateJob")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"yaml", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("scan-checkout")
	return cmd
}

func (o *explainOptions) run(ctx context.Context, k *kube, kd kind, name string, out io.Writer) error {
	switch o.output {
	case "", "yaml", "json":
	default:
		return usageError{fmt.Errorf("--output must be yaml or json, got %q", o.output)}
	}
	if o.scanCheckout != "" {
		if kd.name != "automation" {
			return usageError{errors.New("--scan-checkout applies to an automation")}
		}
		if info, err := os.Stat(o.scanCheckout); err != nil || !info.IsDir() {
			return usageError{fmt.Errorf("--scan-checkout %q is not a directory", o.scanCheckout)}
		}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	var e explain.Explanation
	if kd.name == "policy" {
		e, err = explain.Policy(ctx, c, key)
	} else {
		e, err = explain.Automation(ctx, c, key, o.scanCheckout)
	}
	var usage explain.UsageError
	if errors.As(err, &usage) {
		return usageError{usage.Err}
	}
	if err != nil {
		return err
	}
	switch o.output {
	case "yaml":
		b, err := sigsyaml.Marshal(e)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	e.Text(tw)
	return tw.Flush()
}
