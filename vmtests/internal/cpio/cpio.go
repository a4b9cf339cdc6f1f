// Package cpio writes "newc" (SVR4, no CRC) cpio archives, the format the
// Linux kernel unpacks as an initramfs.
//
// Only what an initramfs needs is supported: directories, regular files,
// symlinks and device nodes. Parent directories are created automatically
// (the kernel does not create missing parents itself), every entry gets a
// fresh inode number, and timestamps and owners are fixed (root, mtime 0)
// so that the same inputs give the same archive.
package cpio

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File type bits of the cpio mode field (same values as Linux S_IF*).
const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

const trailer = "TRAILER!!!"

// Writer writes a newc cpio archive. Call Close to write the trailer.
type Writer struct {
	w       *bufio.Writer
	n       int64 // bytes written so far, for padding
	ino     uint32
	entries map[string]bool // names already written (dirs and files)
	err     error
}

// NewWriter returns a Writer that writes the archive to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 1<<20), entries: map[string]bool{}}
}

// clean turns a guest path ("/bin/sh", "bin/sh", "./bin/sh") into the
// archive form ("bin/sh"). The root itself is "".
func clean(name string) (string, error) {
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("cpio: path %q contains \"..\"", name)
		}
	}
	c := path.Clean("/" + name)
	if c == "/" {
		return "", nil
	}
	return strings.TrimPrefix(c, "/"), nil
}

func (w *Writer) write(p []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(p)
	w.n += int64(n)
	w.err = err
}

func (w *Writer) pad() {
	if r := w.n % 4; r != 0 {
		w.write(make([]byte, 4-r))
	}
}

func (w *Writer) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) {
	if size > 0xFFFFFFFF {
		w.err = fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, size)
		return
	}
	w.ino++
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		w.ino, mode, 0, 0, nlink, 0, uint32(size), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	w.write([]byte(hdr))
	w.write([]byte(name))
	w.write([]byte{0})
	w.pad()
}

// mkparents writes directory entries for every missing parent of name.
func (w *Writer) mkparents(name string) {
	dir := path.Dir(name)
	if dir == "." || dir == "/" || dir == "" || w.entries[dir] {
		return
	}
	w.mkparents(dir)
	w.entries[dir] = true
	w.header(dir, modeDir|0o755, 0, 0, 0)
}

// entry claims the archive name of a new non-directory entry, after its
// missing parent directories.
func (w *Writer) entry(name string) (string, error) {
	c, err := clean(name)
	if err != nil {
		return "", err
	}
	if c == "" {
		return "", errors.New("cpio: empty file name")
	}
	if w.entries[c] {
		return "", fmt.Errorf("cpio: duplicate entry %q", c)
	}
	w.mkparents(c)
	w.entries[c] = true
	return c, nil
}

// Dir adds a directory (and its missing parents).
func (w *Writer) Dir(name string, perm uint32) error {
	c, err := clean(name)
	if err != nil {
		return err
	}
	if c == "" || w.entries[c] {
		return w.err
	}
	w.mkparents(c)
	w.entries[c] = true
	w.header(c, modeDir|perm&0o7777, 0, 0, 0)
	return w.err
}

// File adds a regular file whose content is the size bytes read from r.
func (w *Writer) File(name string, perm uint32, size int64, r io.Reader) error {
	c, err := w.entry(name)
	if err != nil {
		return err
	}
	w.header(c, modeRegular|perm&0o7777, size, 0, 0)
	if w.err != nil {
		return w.err
	}
	n, err := io.CopyN(w.w, r, size)
	w.n += n
	if err != nil {
		w.err = fmt.Errorf("cpio: %s: %w", c, err)
		return w.err
	}
	w.pad()
	return w.err
}

// Bytes adds a regular file with the given content.
func (w *Writer) Bytes(name string, perm uint32, data []byte) error {
	return w.File(name, perm, int64(len(data)), strings.NewReader(string(data)))
}

// Symlink adds a symbolic link name -> target.
func (w *Writer) Symlink(name, target string) error {
	c, err := w.entry(name)
	if err != nil {
		return err
	}
	w.header(c, modeSymlink|0o777, int64(len(target)), 0, 0)
	w.write([]byte(target))
	w.pad()
	return w.err
}

// CharDev adds a character device node.
func (w *Writer) CharDev(name string, perm, major, minor uint32) error {
	c, err := w.entry(name)
	if err != nil {
		return err
	}
	w.header(c, modeCharDev|perm&0o7777, 0, major, minor)
	return w.err
}

// Has reports whether name was already added.
func (w *Writer) Has(name string) bool {
	c, err := clean(name)
	return err == nil && w.entries[c]
}

// Close writes the trailer and flushes. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.header(trailer, 0, 0, 0, 0)
	// The kernel does not need it, but cpio(1) pads archives to 512 bytes.
	if r := w.n % 512; r != 0 {
		w.write(make([]byte, 512-r))
	}
	if w.err != nil {
		return w.err
	}
	return w.w.Flush()
}

// HostFile adds the host's regular file host as guest, with perm.
func (w *Writer) HostFile(host, guest string, perm uint32) error {
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", host)
	}
	return w.File(guest, perm, fi.Size(), f)
}

// HostTree adds the host directory hostRoot as guestRoot, with what it
// holds: directories, regular files and symlinks (kept as symlinks
// unless follow is set) with their permission bits; sockets, fifos and
// devices are left out.
func (w *Writer) HostTree(hostRoot, guestRoot string, follow bool) error {
	return filepath.WalkDir(hostRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(hostRoot, p)
		if err != nil {
			return err
		}
		g := path.Join(guestRoot, filepath.ToSlash(rel))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if !follow {
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return w.Symlink(g, target)
			}
			if fi, err = os.Stat(p); err != nil {
				return err
			}
			if fi.IsDir() {
				return w.HostTree(p, g, follow)
			}
		}
		switch {
		case fi.IsDir():
			return w.Dir(g, unixPerm(fi.Mode()))
		case fi.Mode().IsRegular():
			return w.HostFile(p, g, unixPerm(fi.Mode()))
		default:
			return nil // sockets, fifos, devices: not shipped
		}
	})
}

// unixPerm is m's permission bits with setuid, setgid and sticky, as
// stat(2) has them.
func unixPerm(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}
