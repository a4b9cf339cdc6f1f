package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/windows/winsec"
)

// stateSDDL is the security of the agent's directories on Windows:
// SYSTEM and Administrators have full control, inherited by what is
// created below, and nobody else has any access; the owner is the
// Administrators group. ProgramData itself lets every user create
// directories, so a directory of the agent's that a user created first
// (and owns, and could plant files in) is refused, never trusted.
const stateSDDL = "O:BAD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"

// secureDir makes dir and each missing parent with stateSDDL, then
// refuses it unless neither it nor any directory above it can be changed
// by anyone but SYSTEM, Administrators or the agent's own user
// (winsec.CheckPath: owners, access lists, reparse points).
func secureDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	sd, err := windows.SecurityDescriptorFromString(stateSDDL)
	if err != nil {
		return fmt.Errorf("security descriptor: %w", err)
	}
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		sa := &windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}
		p, err := windows.UTF16PtrFromString(missing[i])
		if err != nil {
			return err
		}
		if err := windows.CreateDirectory(p, sa); err != nil && !errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
			return fmt.Errorf("create %s: %w", missing[i], err)
		}
	}
	return winsec.CheckPath(dir)
}

// pinDir opens dir so that, while the handle is held, nobody can rename
// or delete it (no FILE_SHARE_DELETE): what secureDir checked stays
// where the agent uses it by path.
func pinDir(dir string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.FILE_LIST_DIRECTORY, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE, nil,
		windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, fmt.Errorf("hold %s: %w", dir, err)
	}
	return os.NewFile(uintptr(h), dir), nil
}
