package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/promotion"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

func newApproveCommand(k *kube) *cobra.Command {
	var w waitFlags
	var digest string
	cmd := &cobra.Command{
		Use:   "approve policy NAME",
		Short: "Approve the image a promotion waits for (spec.policy.promotion.approval: Required)",
		Long: `A promotion ImagePolicy with spec.policy.promotion.approval: Required
waits, once its upstream ran the image healthy for the soak, until a
person approves that exact image. approve names the image waiting in its
status.pendingRef (by digest; by tag for an image without one) in the
` + imagev1.ApproveAnnotation + ` annotation, and who you are, as the
API server says (a SelfSubjectReview), in ` + imagev1.ApprovedByAnnotation + `.
The commit that brings the image has an Approved-by trailer naming you.

--digest makes sure the approval is of the image you checked: approve
refuses when another image waits. An approval is of one image only: a
newer image waits for its own. Approving needs patch on the ImagePolicy.
(By default) it waits until the policy has handled the approval, and
prints what it decided.`,
		Example: `  tk-image approve policy app-prod -n apps
  tk-image approve policy app-prod --digest sha256:4f9e...`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, "policy"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := kindNamed(args[0], "policy"); err != nil {
				return err
			}
			return approve(cmd.Context(), k, args[1], digest, w, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&digest, "digest", "", "approve only if the waiting image has this digest (sha256:...)")
	w.add(cmd.Flags(), true, defaultWait, "the policy has handled the approval")
	return cmd
}

// approve writes the approval of the policy's waiting image, with the
// user's name and a reconcile request the policy echoes once decided.
func approve(ctx context.Context, k *kube, name, digest string, w waitFlags, out, errOut io.Writer) error {
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	p := &imagev1.ImagePolicy{}
	if err := c.Get(ctx, key, p); err != nil {
		if apierrors.IsForbidden(err) {
			return needsRBAC(key, err)
		}
		return err
	}
	img, err := promotion.Waiting(p, digest)
	if err != nil {
		return err
	}
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	user := whoAmI(ctx, cfg)
	if user == "" {
		fmt.Fprintln(errOut, "warning: the API server did not say who you are (SelfSubjectReview): the approval is recorded as by field manager tk-image")
	}
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch := promotion.ApprovalPatch(img, user, token)
	if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("tk-image")); err != nil {
		if apierrors.IsForbidden(err) {
			return needsRBAC(key, err)
		}
		return fmt.Errorf("approving %s for ImagePolicy %s: %w", img, key, err)
	}
	who := user
	if who == "" {
		who = "field manager tk-image"
	}
	fmt.Fprintf(out, "ImagePolicy %s: %s approved by %s\n", key, img, who)
	if !w.wait {
		return nil
	}
	return waitDecided(ctx, c, key, token, w.timeout, out)
}

// needsRBAC says what approving needs, with the API server's words.
func needsRBAC(key types.NamespacedName, err error) error {
	return fmt.Errorf("approving a promotion of ImagePolicy %s needs get and patch on imagepolicies in namespace %s (the reflector chart's <release>-approver ClusterRole, bound there; docs/policies.md#approvals). The API server said: %w",
		key, key.Namespace, err)
}

// waitDecided waits until the policy has handled the request token and
// prints its Ready message: an approved image may still wait for its
// soak or its upstream's health, which is no failure of the approval.
func waitDecided(ctx context.Context, c client.Client, key types.NamespacedName, token string, timeout time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	p := &imagev1.ImagePolicy{}
	for {
		if err := c.Get(ctx, key, p); err == nil && p.Status.LastHandledReconcileAt == token && p.Status.ObservedGeneration == p.Generation {
			ready := apimeta.FindStatusCondition(p.Status.Conditions, conditions.ReadyCondition)
			if ready == nil {
				return fmt.Errorf("ImagePolicy %s has no Ready condition", key)
			}
			fmt.Fprintf(out, "ImagePolicy %s: %s\n", key, ready.Message)
			switch ready.Reason {
			case imagev1.AwaitingApprovalReason:
				return fmt.Errorf("ImagePolicy %s still waits for an approval: %s", key, ready.Message)
			case conditions.SucceededReason, imagev1.SoakNotElapsedReason, imagev1.UpstreamNotHealthyReason, imagev1.PromotionGroupWaitingReason:
				return nil
			}
			if ready.Status != "True" {
				return fmt.Errorf("ImagePolicy %s is not ready: %s", key, ready.Message)
			}
			return nil
		} else if apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ImagePolicy %s: the approval was not handled within %s", key, timeout)
		case <-tick.C:
		}
	}
}
