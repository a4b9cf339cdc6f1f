package exporter

import (
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/roles"
)

// SessionView is one session as the agent's sampler saw it: its state,
// the kind of host it runs under, and its members with their roles.
type SessionView struct {
	Active   bool
	HostKind string
	// Owner is the session owner's uid: it never becomes a label, but
	// bounds how many server names one user can put on the endpoint.
	Owner   uint32
	Members []MemberView
}

// MemberView is one member of a session.
type MemberView struct {
	ID     lineage.ID
	Role   roles.Role
	Server string // roles.Member.Server
	Alive  bool
	// Orphaned: alive although its session, its generation (a destroy
	// marker ended it) or its sub-session ended: what the enforcer could
	// not or may not end (audit mode, spared across a privilege boundary,
	// survivors) or has not ended yet.
	Orphaned bool
	// RSSBytes and CPUSeconds are read from /proc for live members.
	RSSBytes   uint64
	CPUSeconds float64
	// Idle: a live server that did no read or write for
	// metrics.idle-after.
	Idle bool
}

// SessionKey and the other keys are the label sets of the picture's
// metrics.
type SessionKey struct {
	Active   bool
	HostKind string
}

// MemberKey counts live members of active sessions by role.
type MemberKey struct {
	HostKind string
	Role     roles.Role
}

// ServerKey names one kind of server under one kind of host.
type ServerKey struct {
	HostKind string
	Server   string
}

// ServerStats is what the picture knows of the servers of one ServerKey.
type ServerStats struct {
	// Live server processes of active sessions, and the memory and CPU
	// of every live member running for them (wrappers, the server, what
	// it started).
	Live       int
	RSSBytes   uint64
	CPUSeconds float64
	// Orphaned members attributed to this server (Server "" for those of
	// none), and their memory.
	Orphaned    int
	OrphanedRSS uint64
	// Duplicates: live servers of this identity beyond the first under
	// one active session, summed over sessions.
	Duplicates int
	// Idle live servers.
	Idle int
	// Owners counts the processes above (live and orphaned) by session
	// owner.
	Owners map[uint32]OwnerCount
}

// OwnerCount is what one owner has under one ServerKey.
type OwnerCount struct{ Processes, Orphaned int }

// Picture is the node at one sample.
type Picture struct {
	At       time.Time
	Took     time.Duration
	Sessions map[SessionKey]int
	Members  map[MemberKey]int
	Servers  map[ServerKey]*ServerStats
	// Unowned are the leaked MCP servers no session owns (mcptrace
	// orphans), from the agent's last look for them; nil when it has not
	// looked.
	Unowned map[UnownedKey]UnownedStats
}

// UnownedKey groups leaked servers that no session owns: the host kind
// that started them (or "unknown"), the kind of evidence ("host-gone",
// "superseded") and how sure it is ("certain", "likely").
type UnownedKey struct{ HostKind, Kind, Confidence string }

// UnownedStats add up one group of leaked servers: the servers, every
// live process from the top of each one's leaked chain down, and their
// resident memory.
type UnownedStats struct {
	Servers, Processes int
	RSSBytes           uint64
}

// add sums s's counts into t (not its owners).
func (t *ServerStats) add(s *ServerStats) {
	t.Live += s.Live
	t.RSSBytes += s.RSSBytes
	t.CPUSeconds += s.CPUSeconds
	t.Orphaned += s.Orphaned
	t.OrphanedRSS += s.OrphanedRSS
	t.Duplicates += s.Duplicates
	t.Idle += s.Idle
}

// HiddenLabel is the server name of every server on /metrics when names
// are not shown (metrics.server-names false).
const HiddenLabel = "hidden"

// WithoutServerNames is p with every server's name HiddenLabel, the
// counts summed: what /metrics shows where users should not learn each
// other's servers. Members of no server ("") stay apart. p is not
// changed.
func WithoutServerNames(p Picture) Picture {
	out := p
	out.Servers = make(map[ServerKey]*ServerStats, len(p.Servers))
	for k, s := range p.Servers {
		if k.Server != "" {
			k.Server = HiddenLabel
		}
		t := out.Servers[k]
		if t == nil {
			t = &ServerStats{Owners: map[uint32]OwnerCount{}}
			out.Servers[k] = t
		}
		t.add(s)
		for u, c := range s.Owners {
			oc := t.Owners[u]
			oc.Processes += c.Processes
			oc.Orphaned += c.Orphaned
			t.Owners[u] = oc
		}
	}
	return out
}

// Build aggregates sampled sessions into a Picture. Each process should
// appear in one view only (the agent gives top-level sessions, whose
// members include their sub-sessions').
func Build(views []SessionView) Picture {
	p := Picture{Sessions: map[SessionKey]int{}, Members: map[MemberKey]int{}, Servers: map[ServerKey]*ServerStats{}}
	server := func(k ServerKey) *ServerStats {
		s := p.Servers[k]
		if s == nil {
			s = &ServerStats{Owners: map[uint32]OwnerCount{}}
			p.Servers[k] = s
		}
		return s
	}
	count := map[string]int{} // live servers per identity in one session
	for _, v := range views {
		p.Sessions[SessionKey{v.Active, v.HostKind}]++
		clear(count)
		for _, m := range v.Members {
			if !m.Alive {
				continue
			}
			k := ServerKey{v.HostKind, m.Server}
			if m.Orphaned || !v.Active {
				s := server(k)
				s.Orphaned++
				s.OrphanedRSS += m.RSSBytes
				oc := s.Owners[v.Owner]
				oc.Processes++
				oc.Orphaned++
				s.Owners[v.Owner] = oc
				continue
			}
			p.Members[MemberKey{v.HostKind, m.Role}]++
			if m.Server == "" || m.Role == roles.Host {
				continue
			}
			s := server(k)
			s.RSSBytes += m.RSSBytes
			s.CPUSeconds += m.CPUSeconds
			oc := s.Owners[v.Owner]
			oc.Processes++
			s.Owners[v.Owner] = oc
			if m.Role != roles.Server {
				continue
			}
			s.Live++
			if m.Idle {
				s.Idle++
			}
			if count[m.Server]++; count[m.Server] > 1 {
				s.Duplicates++
			}
		}
	}
	return p
}
