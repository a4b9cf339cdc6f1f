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
// token's user SID and whether the token is elevated.
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
// its user SID, and elevated when it runs at system integrity, or at high
// integrity elevated (TokenElevation): what may open any process but
// protected ones for termination.
func TokenOf(tok windows.Token) (owners.Token, error) {
	u, err := tok.GetTokenUser()
	if err != nil {
		return owners.Token{}, fmt.Errorf("user: %w", err)
	}
	t := owners.Token{SID: u.User.Sid.String()}
	level, err := integrity(tok)
	if err != nil {
		return owners.Token{}, err
	}
	t.Elevated = level >= integritySystem || level >= integrityHigh && tok.IsElevated()
	return t, nil
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
