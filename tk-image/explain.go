package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until explain lands; replaced wholesale.
func newExplainCommand(k *kube) *cobra.Command {
	return &cobra.Command{Use: "explain", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("explain: not built yet") }}
}
