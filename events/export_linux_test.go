package events

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The export holds every user's events: it is written only into a
// directory nobody else may write, never through a symbolic link.
func TestExportRefusesADirectoryOthersMayWriteAndASymlink(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o1777)
	if _, err := OpenExport(NewHub("n", 0), ExportOptions{Path: filepath.Join(shared, "events.jsonl")}); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Errorf("export into a world-writable directory: %v, want a refusal", err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.Symlink(target, filepath.Join(dir, "events.jsonl")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExport(NewHub("n", 0), ExportOptions{Path: filepath.Join(dir, "events.jsonl")}); err == nil {
		t.Error("export through a symbolic link at its path was opened")
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the symbolic link's target was created")
	}
}
