package history

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/safefile"
)

// checkDir refuses a history directory the agent's uid alone may not
// write, as state.dir is checked (safefile.PrivateDir): a symbolic link,
// not a directory, another user's, or writable by a group or others. It
// holds every session's command lines, redacted, and what it says
// decides nothing, but another user must not be able to replace its
// files.
func checkDir(dir string) error {
	fd, err := safefile.OpenPrivateDir(dir, fmt.Sprintf("use a directory owned by uid %d with mode 0700 (or let the agent create it); it holds every session's history", os.Geteuid()))
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	unix.Close(fd)
	return nil
}
