package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The binary answers to the names kubectl and flux run plugins by: help
// says the command the user typed, and kubectl's completion helper turns
// its arguments into a completion request.
func TestInvocationByPluginName(t *testing.T) {
	tests := []struct {
		name, argv0 string
		display     string
		args        []string
	}{
		{"as itself", "/usr/local/bin/tk-image", "", []string{"get", "policies"}},
		{"as a kubectl plugin", "/usr/local/bin/kubectl-tk_image", "kubectl tk-image", []string{"get", "policies"}},
		{"as kubectl's completion helper", "kubectl_complete-tk_image", "kubectl tk-image", []string{cobra.ShellCompRequestCmd, "get", "policies"}},
		{"as a Flux CLI plugin", "/root/.fluxcd/plugins/flux-tk-image", "flux tk-image", []string{"get", "policies"}},
		{"as a Flux CLI plugin on Windows", `flux-tk-image.exe`, "flux tk-image", []string{"get", "policies"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			display, args := invocation(tt.argv0, []string{"get", "policies"})
			if display != tt.display || !slices.Equal(args, tt.args) {
				t.Errorf("invocation(%q) = %q %v, want %q %v", tt.argv0, display, args, tt.display, tt.args)
			}
		})
	}
}

// Run as flux-tk-image, help names the command flux tk-image.
func TestHelpAsFluxPlugin(t *testing.T) {
	displayName = "flux tk-image"
	defer func() { displayName = "" }()
	code, out, _ := runCLI(t, "", "dashboard", "--help")
	if code != 0 || !strings.Contains(out, "flux tk-image dashboard [flags]") {
		t.Errorf("exit %d, help:\n%s", code, out)
	}
}
