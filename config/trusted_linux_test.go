package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// The agent runs as root: a configuration file under another user's
// directory, or reached through another user's symbolic link, is
// refused, naming what is theirs; root's own is read.
func TestConfigThroughAnotherUsersPathIsRefused(t *testing.T) {
	isolate(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root", "the refusal is of what root reads (making a path of another user's needs uid 0)")
	}
	dir := t.TempDir()
	theirs := filepath.Join(dir, "theirs")
	mine := filepath.Join(dir, "config.yaml")
	link := filepath.Join(dir, "link.yaml")
	if err := errors.Join(os.Chmod(dir, 0o755), os.Mkdir(theirs, 0o755), os.Chown(theirs, 65534, 65534),
		os.WriteFile(filepath.Join(theirs, "config.yaml"), []byte("log:\n  level: debug\n"), 0o644),
		os.WriteFile(mine, []byte("log:\n  level: debug\n"), 0o600), os.Symlink(mine, link), os.Lchown(link, 65534, 65534)); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(theirs, "config.yaml"), link} {
		if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("Load(%s) = %v, want it refused as uid 65534's", path, err)
		}
	}
	if c, err := Load(mine, nil); err != nil || c.Log.Level != "debug" {
		t.Errorf("Load(root's own) = %+v, %v", c.Log, err)
	}
}
