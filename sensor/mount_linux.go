package sensor

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// ensureMounts mounts tracefs and bpffs where they are missing, so the agent
// starts on a bare host or in a minimal VM.
func ensureMounts(tracefs, bpffs string, log *slog.Logger) error {
	for _, m := range []struct {
		dir, fstype, data string
		magic             int64
	}{
		{tracefs, "tracefs", "", unix.TRACEFS_MAGIC},
		// Root's alone, as systemd mounts it: pins are kill orders.
		{bpffs, "bpf", "mode=0700", unix.BPF_FS_MAGIC},
	} {
		var st unix.Statfs_t
		if err := unix.Statfs(m.dir, &st); err == nil && int64(st.Type) == m.magic {
			continue
		}
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("create %s mount point %s: %w", m.fstype, m.dir, err)
		}
		if err := unix.Mount(m.fstype, m.dir, m.fstype, 0, m.data); err != nil {
			return fmt.Errorf("mount %s at %s (needs CAP_SYS_ADMIN): %w", m.fstype, m.dir, err)
		}
		log.Info("mounted", "fstype", m.fstype, "dir", m.dir)
	}
	return nil
}
