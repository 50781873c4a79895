package meta

import "testing"

// An object's name leaves out the parts its file does not give.
func TestObjectNameLeavesOutWhatIsMissing(t *testing.T) {
	for o, want := range map[ObjectID]string{
		{Kind: "Deployment", Namespace: "apps", Name: "web"}: "Deployment/apps/web",
		{Kind: "Deployment", Name: "web"}:                    "Deployment/web",
		{Kind: "Kustomization"}:                              "Kustomization",
		{}:                                                   "(no kind)",
	} {
		if got := o.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", o, got, want)
		}
	}
}
