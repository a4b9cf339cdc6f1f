package winproc

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/windows/owners"
)

// Integrity levels: the last sub-authority of a token's mandatory label.
const (
	integrityHigh   = 0x3000 // SECURITY_MANDATORY_HIGH_RID
	integritySystem = 0x4000 // SECURITY_MANDATORY_SYSTEM_RID
)

// Token reads what decides the process's owner (package owners): its
// token's user SID, whether it is an administrator's enabled, and its
// integrity.
func (h *Handle) Token() (owners.Token, error) {
	var tok windows.Token
	if err := windows.OpenProcessToken(h.h, windows.TOKEN_QUERY, &tok); err != nil {
		return owners.Token{}, fmt.Errorf("token of process %d: %w", h.PID, err)
	}
	defer tok.Close()
	t, err := TokenOf(tok)
	if err != nil {
		return owners.Token{}, fmt.Errorf("token of process %d: %w", h.PID, err)
	}
	return t, nil
}

// TokenOf reads a token (a process's, or a pipe client's impersonated):
// its user SID; Admin when the Administrators group is enabled in it (an
// elevated administrator's, which may open any process but protected
// ones); High when it runs at high integrity or above without that (a
// UIAccess program, a service account at system integrity).
func TokenOf(tok windows.Token) (owners.Token, error) {
	u, err := tok.GetTokenUser()
	if err != nil {
		return owners.Token{}, fmt.Errorf("user: %w", err)
	}
	t := owners.Token{SID: u.User.Sid.String()}
	if t.Admin, err = adminEnabled(tok); err != nil {
		return owners.Token{}, err
	}
	level, err := integrity(tok)
	if err != nil {
		return owners.Token{}, err
	}
	t.High = !t.Admin && level >= integrityHigh
	return t, nil
}

// adminEnabled reports whether the token's groups hold Administrators
// enabled (not for deny only, as in an unelevated administrator's).
func adminEnabled(tok windows.Token) (bool, error) {
	admins, err := windows.CreateWellKnownSid(windows.WinBuiltinAdministratorsSid)
	if err != nil {
		return false, fmt.Errorf("administrators SID: %w", err)
	}
	groups, err := tok.GetTokenGroups()
	if err != nil {
		return false, fmt.Errorf("groups: %w", err)
	}
	for _, g := range groups.AllGroups() {
		if g.Sid.Equals(admins) && g.Attributes&windows.SE_GROUP_ENABLED != 0 && g.Attributes&windows.SE_GROUP_USE_FOR_DENY_ONLY == 0 {
			return true, nil
		}
	}
	return false, nil
}

// integrity is the token's integrity level (its mandatory label's RID).
func integrity(tok windows.Token) (uint32, error) {
	var n uint32
	windows.GetTokenInformation(tok, windows.TokenIntegrityLevel, nil, 0, &n)
	if n == 0 || n > 1024 {
		return 0, fmt.Errorf("integrity level: size %d", n)
	}
	buf := make([]byte, n)
	if err := windows.GetTokenInformation(tok, windows.TokenIntegrityLevel, &buf[0], n, &n); err != nil {
		return 0, fmt.Errorf("integrity level: %w", err)
	}
	label := (*windows.Tokenmandatorylabel)(unsafe.Pointer(&buf[0]))
	sid := label.Label.Sid
	if sid == nil || !sid.IsValid() || sid.SubAuthorityCount() == 0 {
		return 0, fmt.Errorf("integrity level: no label")
	}
	return sid.SubAuthority(uint32(sid.SubAuthorityCount()) - 1), nil
}
