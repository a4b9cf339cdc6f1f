//go:build !windows

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"
)

// runTagged runs run's and exec's command: it asks the agent to confirm
// the tag, then execs into the command, whose command line with the tag
// the kernel reports to the agent.
func runTagged(cmd *cobra.Command, id string, args []string) error {
	if err := confirmTag(cmd, id); err != nil {
		return err
	}
	return execInto(args)
}

// execInto replaces this process with argv. The agent has already seen this
// process's own exec (with the tag in its argv) in the kernel, so the
// program keeps the identity the tag named.
func execInto(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return exitError{code: 127, err: fmt.Errorf("%s: %w", argv[0], err)}
	}
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return exitError{code: 126, err: fmt.Errorf("exec %s: %w", path, err)}
	}
	return nil
}
