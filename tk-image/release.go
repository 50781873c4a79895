package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/hold/ending"
)

func newReleaseCommand(k *kube) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "release automation NAME [SETTER|POLICY|PATH...]",
		Short: "Release an automation's holds: values a person set follow the policy again",
		Long: `An automation leaves a marked value a person set over its own (a hand
rollback or pin) as it is: a hold, listed in its status.holds and by
tk-image explain automation. release ends the holds now, all of them or
those of the setters (apps:podinfo:tag), policies (podinfo) or files
named, by setting the ` + imagev1.ReleaseHoldsAnnotation + ` annotation
and asking for a run: its UpdateJob writes the policies' images over the
held values. Holds made after the release are not released by it.
(By default) it waits until the automation has handled the run.`,
		Example: `  tk-image release automation prod
  tk-image release automation prod podinfo -n flux-system`,
		Args:              usageArgs(cobra.MinimumNArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, "automation"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kd, err := kindNamed(args[0], "automation")
			if err != nil {
				return err
			}
			return releaseHolds(cmd.Context(), k, kd, args[1], args[2:], w, cmd.OutOrStdout())
		},
	}
	w.add(cmd.Flags(), true, defaultWait, "the automation has handled the release")
	return cmd
}

// releaseHolds writes the release annotation (a token, then the
// selection) with a reconcile request of the same token, which the
// controller echoes once the run that released them is recorded.
func releaseHolds(ctx context.Context, k *kube, kd kind, name string, sel []string, w waitFlags, out io.Writer) error {
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	a := &imagev1.ImageUpdateAutomation{}
	if err := c.Get(ctx, key, a); err != nil {
		return err
	}
	if a.Spec.Suspend {
		return fmt.Errorf("ImageUpdateAutomation %s is suspended: resume it first", key)
	}
	n := 0
	for _, h := range a.Status.Holds {
		if h.Reason == imagev1.HeldByPersonReason && ending.Matches(h.Hold, sel) {
			n++
		}
	}
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		imagev1.ReleaseHoldsAnnotation:  strings.Join(append([]string{token}, sel...), " "),
		meta.ReconcileRequestAnnotation: token,
	}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, a, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	fmt.Fprintf(out, "ImageUpdateAutomation %s: release of %d of %d holds requested\n", key, n, len(a.Status.Holds))
	if !w.wait {
		return nil
	}
	return waitCurrent(ctx, c, kd, key, token, w.timeout, out)
}
