package kernel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ImageVersion returns the version string embedded in an x86 bzImage
// ("6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP ...") and its
// first word, the release that uname -r prints in the guest.
func ImageVersion(path string) (release, full string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return "", "", fmt.Errorf("%s: not a bzImage: %w", path, err)
	}
	if string(hdr[:4]) == "\x7fELF" {
		return elfVersion(path)
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return "", "", fmt.Errorf("%s: not an x86 bzImage (no HdrS magic)", path)
	}
	ptr := binary.LittleEndian.Uint16(hdr[0x20E:])
	if ptr == 0 {
		return "", "", fmt.Errorf("%s: bzImage has no kernel_version field", path)
	}
	buf := make([]byte, 256)
	n, err := f.ReadAt(buf, int64(ptr)+0x200)
	if n == 0 {
		return "", "", fmt.Errorf("%s: reading kernel_version: %v", path, err)
	}
	buf = buf[:n]
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	full = strings.TrimSpace(string(buf))
	fields := strings.Fields(full)
	if len(fields) == 0 {
		return "", "", errors.New(path + ": empty kernel_version string")
	}
	return fields[0], full, nil
}

// elfVersion finds the linux_banner ("Linux version 6.1.0-56-amd64 (...) #1 ...")
// in an uncompressed vmlinux.
func elfVersion(path string) (release, full string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	const marker = "Linux version "
	for off := 0; ; {
		i := bytes.Index(data[off:], []byte(marker))
		if i < 0 {
			return "", "", fmt.Errorf("%s: no Linux version banner found", path)
		}
		start := off + i + len(marker)
		end := bytes.IndexByte(data[start:], 0)
		if end < 0 || end > 512 {
			off = start
			continue
		}
		full = strings.TrimSpace(string(data[start : start+end]))
		// The banner has "#<n>" and the release has no % (format strings do).
		if f := strings.Fields(full); len(f) > 0 && strings.Contains(full, "#") && !strings.Contains(f[0], "%") {
			return f[0], full, nil
		}
		off = start
	}
}
