//go:build mangen

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/mcptrace/mcptrace/internal/version"
)

// Built only with -tags mangen (scripts/deb.sh): the agent's binary does
// not carry the man page renderer.
func init() {
	buildCmds = append(buildCmds, &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write a man page per command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.RemoveCommand(cmd)
			root.DisableAutoGenTag = true
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			// The footer: "mcptrace 0.1.0  Nov 2026  MCPTRACE-STATUS(1)".
			// The whole version (0.1.0~git…) would run into the date; it
			// is in mcptrace version. The date is SOURCE_DATE_EPOCH's
			// (scripts/deb.sh: the last commit's) or today's.
			release, _, _ := strings.Cut(version.Get().Version, "~")
			header := &doc.GenManHeader{Section: "1", Source: "mcptrace " + release, Manual: "mcptrace manual"}
			if err := doc.GenManTreeFromOpts(root, doc.GenManTreeOptions{Header: header, Path: args[0], CommandSeparator: "-"}); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return addManSections(root, args[0])
		},
	})
}

// addManSections puts each page's EXIT STATUS, ENVIRONMENT and FILES
// before its SEE ALSO, and calls cobra's EXAMPLE section EXAMPLES, as
// man-pages(7) orders and names them.
func addManSections(cmd *cobra.Command, dir string) error {
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand() {
			continue
		}
		if err := addManSections(c, dir); err != nil {
			return err
		}
	}
	name := filepath.Join(dir, strings.ReplaceAll(cmd.CommandPath(), " ", "-")+".1")
	page, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("man page of %s: %w", cmd.CommandPath(), err)
	}
	var extra strings.Builder
	for _, s := range manSections(cmd) {
		extra.WriteString(s.roff())
	}
	// cobra writes EXAMPLE after the options; it goes last, as EXAMPLES.
	if i := bytes.Index(page, []byte(".SH EXAMPLE\n")); i >= 0 {
		end := bytes.Index(page[i+1:], []byte("\n.SH "))
		if end < 0 {
			end = len(page) - i - 1
		}
		ex := page[i : i+1+end+1]
		page = append(page[:i:i], page[i+1+end+1:]...)
		extra.WriteString(".SH EXAMPLES\n")
		extra.Write(bytes.TrimPrefix(ex, []byte(".SH EXAMPLE\n")))
	}
	if i := bytes.Index(page, []byte(".SH SEE ALSO")); i >= 0 {
		page = append(page[:i:i], append([]byte(extra.String()), page[i:]...)...)
	} else {
		page = append(page, extra.String()...)
	}
	return os.WriteFile(name, page, 0o644)
}
