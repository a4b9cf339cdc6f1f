package dockertest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"time"
)

// imageLinks are the programs of the image: symlinks to busybox in /bin.
var imageLinks = []string{"sh", "sleep", "cat", "true"}

// importImage imports ImageTag: a root file system of /bin/busybox and
// its links, made here as a tar stream (no registry is reachable).
func (e *Engine) importImage() error {
	layer, err := busyboxLayer()
	if err != nil {
		return fmt.Errorf("image %s: %w", ImageTag, err)
	}
	if _, err := e.output(layer, "import", "-", ImageTag); err != nil {
		return fmt.Errorf("image %s: %w", ImageTag, err)
	}
	return nil
}

// busyboxLayer returns a tar stream holding bin/busybox, bin/<link> for
// each of imageLinks, and an empty tmp.
func busyboxLayer() ([]byte, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	mod := time.Unix(0, 0)
	hdrs := []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mod},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mod},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: mod},
	}
	for _, h := range hdrs {
		if err := w.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := w.Write(bin); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range imageLinks {
		if err := w.WriteHeader(&tar.Header{Name: "bin/" + l, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777, ModTime: mod}); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
