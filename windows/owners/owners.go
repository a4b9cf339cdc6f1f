package owners

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Owner numbers.
const (
	// Root is the owner of SYSTEM's and elevated tokens.
	Root uint32 = 0
	// FirstUID is the first number a user SID gets: above every uid a
	// Linux-shaped tool would show, so a number is never read as one.
	FirstUID uint32 = 1 << 20
	// Unknown is the owner of a token whose user has no number (over
	// MaxOwners, or not saved): it matches no session owner but root.
	Unknown uint32 = 0xFFFFFFFE
)

// MaxOwners bounds the SIDs a Table numbers.
const MaxOwners = 65536

// SystemSID is the LocalSystem account's SID.
const SystemSID = "S-1-5-18"

// Token is what decides an owner: a process's or a caller's token.
type Token struct {
	// SID is the token's user SID, as a string ("S-1-5-21-…-1001").
	SID string
	// Admin: the token has the Administrators group (S-1-5-32-544)
	// enabled: an elevated administrator's, which may open any process
	// but protected ones. An unelevated administrator's token has the
	// group for deny only, and is not Admin.
	Admin bool
	// High: the token runs at high integrity or above without being
	// Admin (a UIAccess program, a service account at system
	// integrity): its user's medium-integrity tokens cannot open it, so
	// it is an owner of its own.
	High bool
}

// key is what a number is given to: a user, and whether at high
// integrity.
type key struct {
	sid  string
	high bool
}

// sidRe is a SID's string form: revision 1, an authority, and at most 15
// sub-authorities (SID_MAX_SUB_AUTHORITIES), each a 32-bit number.
var sidRe = regexp.MustCompile(`^S-1-[0-9]{1,15}(-[0-9]{1,10}){0,15}$`)

// ValidSID reports whether s is a SID's string form.
func ValidSID(s string) bool { return sidRe.MatchString(s) }

// ErrFull is what Owner wraps for a new SID beyond MaxOwners.
var ErrFull = errors.New("too many owners")

// ErrNotNumbered is what Owner wraps for a SID it never numbers: the
// per-service, per-logon and virtual accounts Windows makes on its own
// (NT SERVICE\…, Window Manager, Font Driver Host, IIS application
// pools, Hyper-V machines), which would use numbers up without ever
// owning a session. Their processes are Unknown's: root's sessions alone
// end them.
var ErrNotNumbered = errors.New("a service or virtual account, not numbered")

// notNumbered are the prefixes of the SIDs Owner never numbers.
var notNumbered = []string{"S-1-5-80-", "S-1-5-82-", "S-1-5-83-", "S-1-5-90-", "S-1-5-96-"}

// Table numbers user SIDs for good. It is safe for concurrent use.
type Table struct {
	path string // "" keeps nothing on disk (tests)

	mu    sync.Mutex
	byKey map[key]uint32
	byUID map[uint32]key
	next  uint32
}

// file is the Table's file.
type file struct {
	Version int     `json:"version"`
	Owners  []entry `json:"owners"`
}

type entry struct {
	SID  string `json:"sid"`
	High bool   `json:"high,omitempty"`
	UID  uint32 `json:"uid"`
}

const fileVersion = 1

// Load reads the table kept at path; a missing file is an empty table.
// An entry no Table could have written (a bad SID, a number out of range,
// a SID or number twice) makes the file unusable: an error, never a
// table that would name an owner wrongly.
func Load(path string) (*Table, error) {
	t := &Table{path: path, byKey: map[key]uint32{}, byUID: map[uint32]key{}, next: FirstUID}
	if path == "" {
		return t, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("owners: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("owners: %s: %w", path, err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("owners: %s: version %d, want %d", path, f.Version, fileVersion)
	}
	if len(f.Owners) > MaxOwners {
		return nil, fmt.Errorf("owners: %s: %d owners, more than %d", path, len(f.Owners), MaxOwners)
	}
	for _, e := range f.Owners {
		switch {
		case !ValidSID(e.SID) || e.SID == SystemSID:
			return nil, fmt.Errorf("owners: %s: %q is not a user SID", path, e.SID)
		case e.UID < FirstUID || e.UID >= FirstUID+MaxOwners:
			return nil, fmt.Errorf("owners: %s: %s has number %d, out of range", path, e.SID, e.UID)
		case t.byKey[key{e.SID, e.High}] != 0 || t.byUID[e.UID] != key{}:
			return nil, fmt.Errorf("owners: %s: %s or %d twice", path, e.SID, e.UID)
		}
		t.byKey[key{e.SID, e.High}], t.byUID[e.UID] = e.UID, key{e.SID, e.High}
		t.next = max(t.next, e.UID+1)
	}
	return t, nil
}

// Owner is tok's owner number: Root for SYSTEM's and Admin tokens; else
// the number of the user at its integrity (High or not), given and saved
// the first time it is seen. It returns Unknown and an error when it
// cannot (a malformed SID, a service or virtual account, the table full,
// the file not written). Unknown is no owner: it must match none.
func (t *Table) Owner(tok Token) (uint32, error) {
	if !ValidSID(tok.SID) {
		return Unknown, fmt.Errorf("owners: %q is not a SID", truncate(tok.SID))
	}
	if tok.Admin || tok.SID == SystemSID {
		return Root, nil
	}
	for _, p := range notNumbered {
		if strings.HasPrefix(tok.SID, p) {
			return Unknown, fmt.Errorf("owners: %s: %w", tok.SID, ErrNotNumbered)
		}
	}
	k := key{tok.SID, tok.High}
	t.mu.Lock()
	defer t.mu.Unlock()
	if uid, ok := t.byKey[k]; ok {
		return uid, nil
	}
	if len(t.byKey) >= MaxOwners || t.next >= FirstUID+MaxOwners {
		return Unknown, fmt.Errorf("owners: %s: %w (%d)", tok.SID, ErrFull, MaxOwners)
	}
	uid := t.next
	t.byKey[k], t.byUID[uid] = uid, k
	if err := t.save(); err != nil {
		delete(t.byKey, k)
		delete(t.byUID, uid)
		return Unknown, err
	}
	t.next++
	return uid, nil
}

// SID is the user SID that has number uid, and whether at high
// integrity.
func (t *Table) SID(uid uint32) (sid string, high, ok bool) {
	if uid == Root {
		return SystemSID, true, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k, ok := t.byUID[uid]
	return k.sid, k.high, ok
}

// Len is how many user SIDs have a number.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}

// save writes the table whole, atomically; t.mu is held.
func (t *Table) save() error {
	if t.path == "" {
		return nil
	}
	f := file{Version: fileVersion}
	for k, uid := range t.byKey {
		f.Owners = append(f.Owners, entry{SID: k.sid, High: k.high, UID: uid})
	}
	slices.SortFunc(f.Owners, func(a, b entry) int { return int(int64(a.UID) - int64(b.UID)) })
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(t.path), filepath.Base(t.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("owners: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("owners: writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), t.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("owners: %w", err)
	}
	return nil
}

// truncate bounds a string an error repeats.
func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
