package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"
)

// stateSDDL is the security of the agent's directories on Windows:
// SYSTEM and Administrators have full control, inherited by what is
// created below, and nobody else has any access; the owner is the
// Administrators group. ProgramData itself lets every user create
// directories, so a directory of the agent's that a user created first
// (and owns, and could plant files in) is refused, never trusted.
const stateSDDL = "O:BAD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"

// secureDir makes dir and each missing parent with stateSDDL, and
// refuses one that exists owned by anyone but SYSTEM, Administrators or
// the agent's own user, or that is a reparse point (a junction or link
// leads elsewhere).
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
	return checkDir(dir)
}

// checkDir refuses dir unless it is a directory, no reparse point, and
// owned by SYSTEM, Administrators or the agent's own user.
func checkDir(dir string) error {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return err
	}
	attrs, err := windows.GetFileAttributes(p)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 || attrs&windows.FILE_ATTRIBUTE_DIRECTORY == 0 {
		return fmt.Errorf("%s is not a plain directory (a junction or link?): remove it as an administrator; the agent makes it itself", dir)
	}
	sd, err := windows.GetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("%s: owner: %w", dir, err)
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return fmt.Errorf("%s: owner: %w", dir, err)
	}
	if owner.IsWellKnown(windows.WinLocalSystemSid) || owner.IsWellKnown(windows.WinBuiltinAdministratorsSid) {
		return nil
	}
	// The agent's own user (an administrator: Preflight) may own what it
	// made, where the system gives new objects the user as owner.
	if self, err := windows.GetCurrentProcessToken().GetTokenUser(); err == nil && owner.Equals(self.User.Sid) {
		return nil
	}
	return fmt.Errorf("%s is owned by %s, not SYSTEM, Administrators or the agent's user: another user may have made it and planted what is in it; remove it as an administrator, the agent makes it itself", dir, owner)
}
