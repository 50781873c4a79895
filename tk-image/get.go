package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/rest"
)

type getOptions struct {
	output    string
	all       bool
	watch     bool
	selector  string
	noHeaders bool
	// showManagedFields keeps metadata.managedFields in YAML and JSON,
	// which kubectl also hides unless asked.
	showManagedFields bool
}

func newGetCommand(k *kube) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get repositories|policies|automations|jobs [NAME...]",
		Short: "List image-toolkit objects as tables, or print them",
		Long: `List ImageRepositories, ImagePolicies, ImageUpdateAutomations or UpdateJobs
in a table with the columns kubectl shows for them (the CRDs' printer columns,
rendered by the API server), or print them as YAML or JSON. With --watch,
keeps printing a row for every change until interrupted.

The kind may be singular or plural, the kind's name or its short name
(imgrepo, imgpol, iua, uj).`,
		Example: `  tk-image get policies -A
  tk-image get repository podinfo -o yaml
  tk-image get jobs -n apps --watch
  tk-image get automations -o wide -l team=web`,
		Args:              usageArgs(cobra.MinimumNArgs(1)),
		ValidArgsFunction: completeKindAndNames(k, kindNames()...),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), k, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, yaml, json or name (default: a table)")
	f.BoolVarP(&o.all, "all-namespaces", "A", false, "list across all namespaces")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, print changes as they happen")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. team=web")
	f.BoolVar(&o.noHeaders, "no-headers", false, "print tables without the header row")
	f.BoolVar(&o.showManagedFields, "show-managed-fields", false, "keep metadata.managedFields in YAML and JSON")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "yaml", "json", "name"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// tableAccept asks the API server to render objects as a meta.k8s.io Table
// with the CRD's printer columns, as kubectl get does; JSON is the fallback
// for a server that cannot.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

func (o *getOptions) run(ctx context.Context, k *kube, args []string, stdout, stderr io.Writer) error {
	switch o.output {
	case "", "wide", "yaml", "json", "name":
	default:
		return usageError{fmt.Errorf("--output must be wide, yaml, json or name, got %q", o.output)}
	}
	kd, err := kindNamed(args[0])
	if err != nil {
		return err
	}
	names := args[1:]
	if o.all && len(names) > 0 {
		return usageError{errors.New("a name cannot be given with --all-namespaces")}
	}
	if o.watch && len(names) > 1 {
		return usageError{errors.New("--watch takes at most one name")}
	}
	ns, err := k.namespace()
	if err != nil {
		return err
	}
	table := o.output == "" || o.output == "wide"

	build := func(getter resource.RESTClientGetter) *resource.Builder {
		b := resource.NewBuilder(getter).Unstructured().
			NamespaceParam(ns).DefaultNamespace().AllNamespaces(o.all).
			LabelSelectorParam(o.selector).
			ResourceTypeOrNameArgs(true, append([]string{kd.qualified()}, names...)...).
			ContinueOnError().Flatten().
			// Chunked lists keep memory flat however many objects there are.
			RequestChunksOf(500)
		if table {
			b = b.TransformRequests(func(req *rest.Request) { req.SetHeader("Accept", tableAccept) })
		}
		return b
	}
	infos, err := build(k.flags).Do().Infos()

	p := o.printer(o.all)
	var objs []runtime.Object
	for _, info := range infos {
		objs = append(objs, info.Object)
	}
	printed, printErr := o.print(p, objs, len(names) == 1 && !o.watch, stdout)
	if printErr != nil {
		return printErr
	}
	if err != nil {
		return err
	}
	if !o.watch && printed == 0 {
		if o.all {
			fmt.Fprintln(stderr, "No resources found")
		} else {
			fmt.Fprintf(stderr, "No resources found in %s namespace.\n", ns)
		}
	}
	if !o.watch {
		return nil
	}
	rv := ""
	if len(infos) > 0 {
		rv = infos[0].ResourceVersion
	}
	r := build(watchGetter{k.flags}).SingleResourceType().Do()
	for {
		w, err := r.Watch(rv)
		if err != nil {
			return err
		}
		next, err := o.stream(ctx, w, p, stdout)
		w.Stop()
		if err != nil || ctx == nil || ctx.Err() != nil {
			return err
		}
		if next != "" {
			rv = next
		}
	}
}

// stream prints each watch event's object until the watch or ctx ends,
// and returns the last resource version seen, to resume from.
func (o *getOptions) stream(ctx context.Context, w watch.Interface, p printers.ResourcePrinter, out io.Writer) (string, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	rv := ""
	for {
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			if ev.Type == watch.Error {
				return rv, fmt.Errorf("watch: %v", apiStatusMessage(ev.Object))
			}
			if v := resourceVersionOf(ev.Object); v != "" {
				rv = v
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if _, err := o.print(p, []runtime.Object{ev.Object}, true, out); err != nil {
				return rv, err
			}
		}
	}
}

// resourceVersionOf reads the version of a watched object, or of the one
// row of a watched Table.
func resourceVersionOf(obj runtime.Object) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	if u.GetKind() != "Table" {
		return u.GetResourceVersion()
	}
	if t, err := asTable(obj); err == nil && len(t.Rows) > 0 {
		if m, ok := t.Rows[len(t.Rows)-1].Object.Object.(*metav1.PartialObjectMetadata); ok {
			return m.ResourceVersion
		}
	}
	return ""
}

func (o *getOptions) printer(allNamespaces bool) printers.ResourcePrinter {
	switch o.output {
	case "yaml":
		return &printers.YAMLPrinter{}
	case "json":
		return &printers.JSONPrinter{}
	case "name":
		return &printers.NamePrinter{}
	}
	return printers.NewTablePrinter(printers.PrintOptions{
		Wide:          o.output == "wide",
		WithNamespace: allNamespaces,
		NoHeaders:     o.noHeaders,
	})
}

// print writes objs: tables merged into one (one header), a single object
// as itself, several as a v1 List, as kubectl does. It returns how many
// objects (table rows) it printed.
func (o *getOptions) print(p printers.ResourcePrinter, objs []runtime.Object, single bool, out io.Writer) (int, error) {
	if len(objs) == 0 {
		return 0, nil
	}
	switch o.output {
	case "", "wide":
		var merged *metav1.Table
		for _, obj := range objs {
			t, err := asTable(obj)
			if err != nil {
				return 0, err
			}
			if merged == nil {
				merged = t
				continue
			}
			merged.Rows = append(merged.Rows, t.Rows...)
		}
		if len(merged.Rows) == 0 {
			return 0, nil
		}
		return len(merged.Rows), p.PrintObj(merged, out)
	case "name":
		for _, obj := range objs {
			if err := p.PrintObj(obj, out); err != nil {
				return 0, err
			}
		}
		return len(objs), nil
	}
	if !o.showManagedFields {
		for _, obj := range objs {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				u.SetManagedFields(nil)
			}
		}
	}
	if single && len(objs) == 1 {
		return 1, p.PrintObj(objs[0], out)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return 0, fmt.Errorf("unexpected object %T", obj)
		}
		list.Items = append(list.Items, *u)
	}
	return len(objs), p.PrintObj(list, out)
}

// asTable reads the Table the API server rendered.
func asTable(obj runtime.Object) (*metav1.Table, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetKind() != "Table" {
		return nil, fmt.Errorf("the API server did not return a table for %T", obj)
	}
	t := &metav1.Table{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("reading table: %w", err)
	}
	// Rows carry their object as raw JSON; the printer decodes it for the
	// namespace column.
	for i := range t.Rows {
		if raw := t.Rows[i].Object.Raw; len(raw) > 0 {
			m := &metav1.PartialObjectMetadata{}
			if err := json.Unmarshal(raw, m); err != nil {
				return nil, fmt.Errorf("reading table row: %w", err)
			}
			t.Rows[i].Object.Object = m
		}
	}
	return t, nil
}

// apiStatusMessage is the message of a watch error's Status.
func apiStatusMessage(obj runtime.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if msg, _, _ := unstructured.NestedString(u.Object, "message"); msg != "" {
			return msg
		}
	}
	if s, ok := obj.(*metav1.Status); ok {
		return s.Message
	}
	return strings.TrimSpace(fmt.Sprint(obj))
}
