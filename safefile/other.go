//go:build !linux

package safefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// File is a file Open read. Outside Linux it is found by its path again
// when it is replaced.
type File struct {
	Name, Dir, Base string
	Data            []byte
	mode            os.FileMode
}

// Open reads name (following symbolic links: only Linux walks by
// handles and refuses other users' links and directories).
func Open(name string, mode Mode) (*File, error) {
	real, err := filepath.EvalSymlinks(name)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", real)
	}
	if st.Size() > MaxBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", real, MaxBytes)
	}
	data, err := os.ReadFile(real)
	if err != nil {
		return nil, err
	}
	return &File{Name: name, Dir: filepath.Dir(real), Base: filepath.Base(real), Data: data, mode: st.Mode().Perm()}, nil
}

// Close does nothing here.
func (f *File) Close() error { return nil }

// Replace keeps a backup beside the file and replaces it by a temporary
// file renamed over it, by path.
func (f *File) Replace(data []byte) (string, error) {
	file := filepath.Join(f.Dir, f.Base)
	stamp := file + ".mcptrace-backup-" + time.Now().UTC().Format("20060102T150405Z")
	backup := stamp
	for n := 2; ; n++ {
		err := writeNew(backup, f.Data, f.mode)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || n > 100 {
			return "", fmt.Errorf("keep a copy of %s: %w; the file was not changed", file, err)
		}
		backup = fmt.Sprintf("%s.%d", stamp, n)
	}
	tmp := file + ".mcptrace-new"
	if err := writeNew(tmp, data, f.mode); err != nil {
		return "", fmt.Errorf("write %s: %w; the file was not changed", tmp, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("replace %s: %w; the file was not changed", file, err)
	}
	return backup, nil
}

func writeNew(name string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}
