package winsec

import (
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"
)

// trustedInstaller is NT SERVICE\TrustedInstaller.
const trustedInstaller = "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"

// Access rights that would let their holder change what the agent trusts.
const (
	fileAddFile         = 0x0002 // FILE_WRITE_DATA on a file
	fileAddSubdirectory = 0x0004 // FILE_APPEND_DATA on a file
	fileDeleteChild     = 0x0040
	deleteRight         = 0x00010000
	writeDAC            = 0x00040000
	writeOwner          = 0x00080000
	genericAll          = 0x10000000
	genericWrite        = 0x40000000

	// aboveRights are what must not be granted on a directory above the
	// target: removing or renaming it or what is in it, changing it.
	aboveRights = fileDeleteChild | deleteRight | writeDAC | writeOwner | genericAll
	// targetRights are what must not be granted on the target.
	targetRights = aboveRights | fileAddFile | fileAddSubdirectory | deleteRight | genericWrite
)

// Trusted is the SID check: SYSTEM, Administrators, TrustedInstaller, or
// this process's own user.
func Trusted(sid *windows.SID) bool {
	if sid.IsWellKnown(windows.WinLocalSystemSid) || sid.IsWellKnown(windows.WinBuiltinAdministratorsSid) || sid.String() == trustedInstaller {
		return true
	}
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	return err == nil && sid.Equals(u.User.Sid)
}

// CheckPath returns an error that names the first component of path
// (absolute) that anyone but the trusted SIDs could change, or that could
// not be read; nil when none can.
func CheckPath(path string) error {
	path, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	var parts []string
	for p := path; ; p = filepath.Dir(p) {
		parts = append(parts, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		if err := checkOne(parts[i], i == 0); err != nil {
			return err
		}
	}
	return nil
}

// checkOne checks one component; target says it is the path itself.
func checkOne(p string, target bool) error {
	u, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return err
	}
	attrs, err := windows.GetFileAttributes(u)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0 {
		return fmt.Errorf("%s is a junction or link: refused (it may lead where anyone can write)", p)
	}
	sd, err := windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION|windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("%s: security: %w", p, err)
	}
	if why := Untrusted(sd, target, Trusted); why != "" {
		return fmt.Errorf("%s %s: only SYSTEM and Administrators may be able to change it; fix its owner and permissions as an administrator", p, why)
	}
	return nil
}

// Untrusted says why sd lets an untrusted SID change what it protects
// ("" when it does not): its owner is not trusted, it has no DACL (every
// access), or an allowed ACE that applies to it grants an untrusted SID
// aboveRights, or for the target targetRights. Deny ACEs are not
// counted: an allow elsewhere in the list may still grant what is asked.
func Untrusted(sd *windows.SECURITY_DESCRIPTOR, target bool, trusted func(*windows.SID) bool) string {
	owner, _, err := sd.Owner()
	if err != nil || owner == nil {
		return "has no owner one can read"
	}
	if !trusted(owner) {
		return "is owned by " + owner.String()
	}
	dacl, _, err := sd.DACL()
	if errors.Is(err, windows.ERROR_OBJECT_NOT_FOUND) || err == nil && dacl == nil {
		return "has no access list: anyone may do anything"
	}
	if err != nil {
		return "has an access list one cannot read: " + err.Error()
	}
	bad := uint32(aboveRights)
	if target {
		bad = targetRights
	}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return "has an access list one cannot read: " + err.Error()
		}
		if ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE || ace.Header.AceFlags&windows.INHERIT_ONLY_ACE != 0 {
			continue
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		if uint32(ace.Mask)&bad != 0 && !trusted(sid) && !sid.IsWellKnown(windows.WinCreatorOwnerSid) {
			return fmt.Sprintf("lets %s change it (access %#x)", sid, uint32(ace.Mask))
		}
	}
	return ""
}
