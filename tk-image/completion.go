package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Names the binary may be installed under. As a kubectl plugin
// (kubectl-tk_image on PATH) kubectl runs it for `kubectl tk-image`; kubectl
// asks kubectl_complete-tk_image for completions of a plugin's arguments, so
// the same binary linked under that name answers them. As a Flux CLI plugin
// (flux plugin install tk-image puts flux-tk-image in ~/.fluxcd/plugins)
// flux runs it for `flux tk-image`, and for completions runs it with
// cobra's own __complete, which needs nothing more.
const (
	pluginName         = "kubectl-tk_image"
	pluginCompleteName = "kubectl_complete-tk_image"
	fluxPluginName     = "flux-tk-image"
)

// invocation adapts the arguments to the name the binary was run as.
func invocation(argv0 string, args []string) (display string, out []string) {
	switch strings.TrimSuffix(filepath.Base(argv0), ".exe") {
	case fluxPluginName:
		return "flux tk-image", args
	case pluginName:
		return "kubectl tk-image", args
	case pluginCompleteName:
		return "kubectl tk-image", append([]string{cobra.ShellCompRequestCmd}, args...)
	}
	return "", args
}

// completionTimeout bounds the API calls a completion makes: a shell waits
// for them on every <TAB>.
const completionTimeout = 5 * time.Second

// completeKindAndNames completes a kind word (among allowed) first, then
// the names of that kind's objects in the namespace the flags select.
func completeKindAndNames(k *kube, allowed ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return allowed, cobra.ShellCompDirectiveNoFileComp
		}
		kd, err := kindNamed(args[0], allowed...)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return k.objectNames(cmd.Context(), kd, args[1:]), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNames completes the names of one kind's objects.
func completeNames(k *kube, kindName string, max int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kd, _ := kindNamed(kindName)
		return k.objectNames(cmd.Context(), kd, args), cobra.ShellCompDirectiveNoFileComp
	}
}

// objectNames lists the names of kd's objects in the selected namespace,
// leaving out the ones already given. Errors give no completions: a shell
// has no place to show them.
func (k *kube) objectNames(ctx context.Context, kd kind, given []string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	c, err := k.client()
	if err != nil {
		return nil
	}
	ns, err := k.namespace()
	if err != nil {
		return nil
	}
	list := kd.newList()
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var names []string
	_ = eachItem(list, func(obj client.Object) error {
		if !slices.Contains(given, obj.GetName()) {
			names = append(names, obj.GetName())
		}
		return nil
	})
	return names
}

// completeNamespaces completes -n with the cluster's namespaces.
func completeNamespaces(k *kube) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
		defer cancel()
		c, err := k.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var list corev1.NamespaceList
		if err := c.List(ctx, &list); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, toComplete) {
				names = append(names, ns.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeContexts completes --context with the kubeconfig's contexts.
func completeContexts(k *kube) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		raw, err := k.flags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for name := range raw.Contexts {
			names = append(names, name)
		}
		slices.Sort(names)
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// registerFlagCompletions completes the connection flags that name things
// in the cluster or the kubeconfig.
func (k *kube) registerFlagCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("namespace", completeNamespaces(k))
	_ = root.RegisterFlagCompletionFunc("context", completeContexts(k))
}

// argv0 is the name the binary was run as.
func argv0() string {
	if len(os.Args) == 0 {
		return ""
	}
	return os.Args[0]
}
