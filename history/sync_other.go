//go:build !linux

package history

import "os"

// datasync makes f's data durable (where there is no fdatasync, a full
// sync).
func datasync(f *os.File) error { return f.Sync() }

// writev writes bufs whole, one after the other (no vectored write
// here).
func writev(f *os.File, bufs [][]byte) error {
	for _, b := range bufs {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}
