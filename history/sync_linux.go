package history

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// datasync makes f's data durable (fdatasync: the file's size too, not
// its times).
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// writev writes bufs whole, IOV_MAX at a time.
func writev(f *os.File, bufs [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Writev(int(fd), bufs[:min(len(bufs), 1024)])
			return true
		}); err != nil {
			return err
		}
		if errors.Is(werr, unix.EINTR) {
			continue
		}
		if werr != nil {
			return werr
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		for n > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
			} else {
				bufs[0] = bufs[0][n:]
				n = 0
			}
		}
	}
	return nil
}
