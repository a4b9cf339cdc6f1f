//go:build linux

package kernel

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Booting the compressed bzImage under TCG spends about half of a small
// test's wall time (4-5 s of 8) in SeaBIOS and in the kernel decompressing
// itself. QEMU can instead boot the uncompressed ELF vmlinux directly
// through its PVH entry point (Debian kernels are built with CONFIG_PVH),
// so we decompress the payload once, when the kernel is cached.

// xenElfNotePhys32Entry is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point note.
const xenElfNotePhys32Entry = 18

// ExtractVmlinux writes the uncompressed, PVH-bootable ELF kernel contained
// in the bzImage bz to dst. It needs xz or zstd on the host for kernels
// compressed with them; gzip is handled in-process.
func ExtractVmlinux(bz, dst string) error {
	data, err := os.ReadFile(bz)
	if err != nil {
		return err
	}
	if len(data) < 0x250 || string(data[0x202:0x206]) != "HdrS" {
		return errors.New("not a bzImage")
	}
	if binary.LittleEndian.Uint16(data[0x206:]) < 0x208 {
		return errors.New("boot protocol too old to locate the payload")
	}
	setupSects := int(data[0x1F1])
	if setupSects == 0 {
		setupSects = 4
	}
	off := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(data[0x248:]))
	n := int(binary.LittleEndian.Uint32(data[0x24C:]))
	if off < 0 || n < 8 || off+n > len(data) {
		return errors.New("payload outside the image")
	}
	// The payload ends with the 4-byte uncompressed size.
	payload := data[off : off+n-4]
	var out []byte
	switch {
	case bytes.HasPrefix(payload, []byte{0xFD, '7', 'z', 'X', 'Z', 0}):
		out, err = filter(payload, "xz", "-dc", "--single-stream")
	case bytes.HasPrefix(payload, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		out, err = filter(payload, "zstd", "-dcq")
	case bytes.HasPrefix(payload, []byte{0x1F, 0x8B}):
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(bytes.NewReader(payload)); err == nil {
			out, err = io.ReadAll(zr)
		}
	default:
		return fmt.Errorf("unsupported payload compression (magic % x)", payload[:4])
	}
	if err != nil {
		return err
	}
	ok, err := hasPVHEntry(out)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the kernel has no PVH entry point (CONFIG_PVH)")
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func filter(in []byte, tool string, args ...string) ([]byte, error) {
	cmd := exec.Command(tool, args...)
	cmd.Stdin = bytes.NewReader(in)
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v %s", tool, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.Bytes(), nil
}

func hasPVHEntry(img []byte) (bool, error) {
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return false, fmt.Errorf("decompressed kernel: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return false, err
		}
		for len(notes) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(notes[0:]))
			descsz := int(binary.LittleEndian.Uint32(notes[4:]))
			typ := binary.LittleEndian.Uint32(notes[8:])
			nameEnd := 12 + (namesz+3)&^3
			end := nameEnd + (descsz+3)&^3
			if end > len(notes) {
				break
			}
			name := string(bytes.TrimRight(notes[12:12+namesz], "\x00"))
			if name == "Xen" && typ == xenElfNotePhys32Entry {
				return true, nil
			}
			notes = notes[end:]
		}
	}
	return false, nil
}
