package debian

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Bootstrap makes a Debian root of suite (e.g. bookworm) in dir with
// debootstrap's minbase variant and the packages include, from the host's
// mirror (HostMirror). A failure says which mirror it used and ends with
// the last lines debootstrap printed.
func Bootstrap(ctx context.Context, suite, dir string, include ...string) error {
	m, err := HostMirror()
	if err != nil {
		return err
	}
	args := []string{"--variant=minbase", "--keyring=" + m.Keyring}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	out, err := exec.CommandContext(ctx, "debootstrap", append(args, suite, dir, m.URI)...).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		return fmt.Errorf("debootstrap %s from %s (%s): %w\n%s", suite, m.URI, m.Origin, err, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return nil
}
