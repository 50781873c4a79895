package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until migrate lands; replaced wholesale.
func newMigrateCommand(k *kube) *cobra.Command {
	return &cobra.Command{Use: "migrate", Hidden: true, RunE: func(*cobra.Command, []string) error { return errors.New("migrate: not built yet") }}
}
