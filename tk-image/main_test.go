package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	tests := []struct {
		args    []string
		want    string
		wantErr bool
	}{
		{args: []string{"version"}, want: "tk-image dev"},
		{args: []string{"version", "extra"}, wantErr: true},
		{args: []string{"no-such-command"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := newRootCommand(&out, &errOut)
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v (stderr %q)", err, tt.wantErr, errOut.String())
			}
			if !strings.HasPrefix(out.String(), tt.want) {
				t.Errorf("stdout = %q, want prefix %q", out.String(), tt.want)
			}
		})
	}
}
