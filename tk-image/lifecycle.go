package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// The kinds a controller reconciles on an interval, which reconcile,
// suspend and resume act on; an UpdateJob runs once.
var scheduledKinds = []string{"repository", "policy", "automation"}

// waitFlags are --wait and --timeout, shared by the commands that can wait.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) add(fs *pflag.FlagSet, wait bool, timeout time.Duration, what string) {
	fs.BoolVar(&w.wait, "wait", wait, "wait until "+what)
	fs.DurationVar(&w.timeout, "timeout", timeout, "how long --wait waits")
}

// defaultWait bounds the waits of all commands but job run.
const defaultWait = 5 * time.Minute

func newReconcileCommand(k *kube) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "reconcile repository|policy|automation NAME",
		Short: "Ask a controller to reconcile an object now",
		Long: `Ask the controller to reconcile the object now instead of at its next
interval, by setting the ` + meta.ReconcileRequestAnnotation + ` annotation, and
(by default) wait until the controller has handled the request. Prints the
object's Ready message; exits 1 when it is not Ready.

For a repository that is a scan, for a policy a new selection, for an
automation a run (which may create an UpdateJob; the wait ends when that
job has finished and the automation records its outcome).`,
		Example: `  tk-image reconcile repository podinfo
  tk-image reconcile automation apps -n flux-system --timeout 2m`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, scheduledKinds...),
		RunE: func(cmd *cobra.Command, args []string) error {
			kd, err := kindNamed(args[0], scheduledKinds...)
			if err != nil {
				return err
			}
			return reconcileNow(cmd.Context(), k, kd, args[1], w, cmd.OutOrStdout())
		},
	}
	w.add(cmd.Flags(), true, defaultWait, "the controller has handled the request")
	return cmd
}

// reconcileNow requests a reconciliation and optionally waits for it.
func reconcileNow(ctx context.Context, k *kube, kd kind, name string, w waitFlags, out io.Writer) error {
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	obj := kd.newObj()
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	token, err := requestReconcile(ctx, c, kd, obj, out)
	if err != nil || !w.wait {
		return err
	}
	return waitCurrent(ctx, c, kd, key, token, w.timeout, out)
}

// requestReconcile sets the reconcile request annotation on obj to a new
// token, which the controller echoes in status.lastHandledReconcileAt.
func requestReconcile(ctx context.Context, c client.Client, kd kind, obj client.Object, out io.Writer) (string, error) {
	if suspended(obj) {
		return "", fmt.Errorf("%s %s is suspended: resume it first", kd.gvk.Kind, client.ObjectKeyFromObject(obj))
	}
	token := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "%s %s: reconcile requested\n", kd.gvk.Kind, client.ObjectKeyFromObject(obj))
	return token, nil
}

// waitCurrent polls until the object is current in kstatus terms (status
// for the latest generation, Reconciling not True and, with a token, the
// request handled), then reports its Ready condition: nil when True.
func waitCurrent(ctx context.Context, c client.Client, kd kind, key types.NamespacedName, token string, timeout time.Duration, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kd.gvk)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Get(ctx, key, u)
		switch {
		case err == nil:
			if ready, done := current(u, token); done {
				msg := "no Ready condition"
				if ready != nil {
					msg = ready.Message
				}
				if ready != nil && ready.Status == metav1.ConditionTrue {
					fmt.Fprintf(out, "%s %s: %s\n", kd.gvk.Kind, key, msg)
					return nil
				}
				return fmt.Errorf("%s %s is not ready: %s", kd.gvk.Kind, key, msg)
			}
		case apierrors.IsNotFound(err):
			return err
		case ctx.Err() == nil:
			// A transient API error: try again on the next tick.
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: not reconciled within %s: %s", kd.gvk.Kind, key, timeout, progress(u))
		case <-tick.C:
		}
	}
}

// current reports whether the controller has caught up with the object,
// and its Ready condition.
func current(u *unstructured.Unstructured, token string) (*metav1.Condition, bool) {
	conds := statusConditions(u)
	ready := apimeta.FindStatusCondition(conds, conditions.ReadyCondition)
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if observed != u.GetGeneration() || ready == nil {
		return ready, false
	}
	if token != "" {
		if handled, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt"); handled != token {
			return ready, false
		}
	}
	if apimeta.IsStatusConditionTrue(conds, conditions.ReconcilingCondition) {
		return ready, false
	}
	return ready, true
}

// progress says where a wait stopped.
func progress(u *unstructured.Unstructured) string {
	conds := statusConditions(u)
	for _, t := range []string{conditions.ReconcilingCondition, conditions.ReadyCondition} {
		if c := apimeta.FindStatusCondition(conds, t); c != nil {
			return fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return "no conditions yet"
}

func statusConditions(u *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if err := runtimeConvert(m, &c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func suspended(obj client.Object) bool {
	u, err := toUnstructured(obj)
	if err != nil {
		return false
	}
	s, _, _ := unstructured.NestedBool(u, "spec", "suspend")
	return s
}

func newSuspendCommand(k *kube, suspend bool) *cobra.Command {
	var w waitFlags
	verb, short := "resume", "Resume a suspended object, and reconcile it"
	if suspend {
		verb, short = "suspend", "Stop a controller from reconciling an object"
	}
	cmd := &cobra.Command{
		Use:               verb + " repository|policy|automation NAME...",
		Short:             short,
		Args:              usageArgs(cobra.MinimumNArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, scheduledKinds...),
		RunE: func(cmd *cobra.Command, args []string) error {
			kd, err := kindNamed(args[0], scheduledKinds...)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args[1:] {
				if err := setSuspend(cmd.Context(), k, kd, name, suspend, w, cmd.OutOrStdout()); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
	if suspend {
		cmd.Long = `Set spec.suspend: the controller leaves the object alone (a repository is
not scanned, a policy keeps its result, an automation creates no UpdateJob)
until it is resumed.`
		cmd.Example = "  tk-image suspend automation apps"
	} else {
		cmd.Long = `Clear spec.suspend and request a reconciliation, then (by default) wait for
it, as reconcile does.`
		cmd.Example = "  tk-image resume automation apps"
		w.add(cmd.Flags(), true, defaultWait, "the controller has reconciled the resumed object")
	}
	return cmd
}

func setSuspend(ctx context.Context, k *kube, kd kind, name string, suspend bool, w waitFlags, out io.Writer) error {
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	obj := kd.newObj()
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	token := ""
	patch := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, suspend)
	if !suspend {
		// Resuming also asks for a reconcile now, as flux resume does:
		// the object may have waited a whole interval.
		token = time.Now().Format(time.RFC3339Nano)
		patch = fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}},"spec":{"suspend":false}}`,
			meta.ReconcileRequestAnnotation, token)
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	if suspend {
		fmt.Fprintf(out, "%s %s suspended\n", kd.gvk.Kind, key)
		return nil
	}
	fmt.Fprintf(out, "%s %s resumed\n", kd.gvk.Kind, key)
	if !w.wait {
		return nil
	}
	return waitCurrent(ctx, c, kd, key, token, w.timeout, out)
}

func newDeleteCommand(k *kube) *cobra.Command {
	var w waitFlags
	cmd := &cobra.Command{
		Use:   "delete repository|policy|automation|job NAME...",
		Short: "Delete image-toolkit objects",
		Long: `Delete the named objects and (by default) wait until they are gone. The
deletion propagates in the background: the cluster's garbage collector then
deletes the UpdateJobs an automation owns (a batch job, which carries the
updates of several automations, once all of them are gone).`,
		Example:           "  tk-image delete policy podinfo\n  tk-image delete job apps-1a2b3c --wait=false",
		Args:              usageArgs(cobra.MinimumNArgs(2)),
		ValidArgsFunction: completeKindAndNames(k, kindNames()...),
		RunE: func(cmd *cobra.Command, args []string) error {
			kd, err := kindNamed(args[0])
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args[1:] {
				if err := deleteObject(cmd.Context(), k, kd, name, w, cmd.OutOrStdout()); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		},
	}
	w.add(cmd.Flags(), true, defaultWait, "the objects are gone")
	return cmd
}

func deleteObject(ctx context.Context, k *kube, kd kind, name string, w waitFlags, out io.Writer) error {
	c, key, err := k.target(name)
	if err != nil {
		return err
	}
	obj := kd.newObj()
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	// Background propagation: owned UpdateJobs go with their automation.
	if err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return err
	}
	if w.wait {
		if ctx == nil {
			ctx = context.Background()
		}
		wctx, cancel := context.WithTimeout(ctx, w.timeout)
		defer cancel()
		for {
			cur := kd.newObj()
			err := c.Get(wctx, key, cur)
			if apierrors.IsNotFound(err) {
				break
			}
			select {
			case <-wctx.Done():
				return fmt.Errorf("%s %s: still present after %s (finalizers: %v)", kd.gvk.Kind, key, w.timeout, cur.GetFinalizers())
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	fmt.Fprintf(out, "%s %s deleted\n", kd.gvk.Kind, key)
	return nil
}

// target is a client and the key of a named object in the selected
// namespace.
func (k *kube) target(name string) (client.WithWatch, types.NamespacedName, error) {
	ns, err := k.namespace()
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	c, err := k.client()
	if err != nil {
		return nil, types.NamespacedName{}, err
	}
	return c, types.NamespacedName{Namespace: ns, Name: name}, nil
}
