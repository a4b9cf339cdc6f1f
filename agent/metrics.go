package agent

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
)

// sampler keeps what the metrics show between samples: the last picture,
// and for each live server the I/O it had done and when that last moved.
type sampler struct {
	// last is the last picture: readers (scrapes, status) never wait
	// for a sample under way.
	last atomic.Pointer[exporter.Picture]
	mu   sync.Mutex // one sample at a time; guards the fields below
	io   ioWatch
	rd   procfs.UsageReader
	// reaping are the superseded servers ended (or being ended), until
	// they are no longer live servers.
	reaping map[lineage.ID]bool
}

// ioWatch remembers processes' I/O counters from one look to the next,
// to say how long each has done none.
type ioWatch struct {
	io  map[lineage.ID]ioSeen
	seq uint64 // the look under way
}

type ioSeen struct {
	bytes   uint64
	changed time.Time
	seq     uint64 // the look that last saw the process
}

// begin starts a look.
func (w *ioWatch) begin() {
	w.seq++
	if w.io == nil {
		w.io = map[lineage.ID]ioSeen{}
	}
}

// idleFor notes the I/O a process has done by now and returns for how
// long it did none. A process seen for the first time counts from now:
// after an agent restart too.
func (w *ioWatch) idleFor(id lineage.ID, ioBytes uint64, now time.Time) time.Duration {
	seen, ok := w.io[id]
	if !ok || seen.bytes != ioBytes {
		seen = ioSeen{bytes: ioBytes, changed: now}
	}
	seen.seq = w.seq
	w.io[id] = seen
	return now.Sub(seen.changed)
}

// forgetUnseen forgets the processes this look did not see.
func (w *ioWatch) forgetUnseen() {
	for id, seen := range w.io {
		if seen.seq != w.seq {
			delete(w.io, id)
		}
	}
}

// Picture returns the last sampled picture of the node.
func (a *Agent) Picture() exporter.Picture {
	if p := a.sampler.last.Load(); p != nil {
		return *p
	}
	return exporter.Picture{}
}

// Sample samples the node now (sessions, roles, /proc) and keeps the
// result as the picture the metrics show; the agent does it every
// SampleInterval. It returns the picture.
func (a *Agent) Sample() exporter.Picture {
	sm := &a.sampler
	sm.mu.Lock()
	defer sm.mu.Unlock()
	start := time.Now()
	sm.io.begin()
	sm.rd.Root = a.opts.ProcRoot
	all := a.tracker.Sessions()

	// Live members of ended sessions at any depth are orphans; a
	// top-level session's view counts them once, where they are.
	orphans := map[lineage.ID]bool{}
	for _, s := range all {
		if s.State == sessions.Ended && s.Parent != "" {
			for _, p := range a.tracker.MembersBrief(s) {
				if !p.Exited {
					orphans[p.ID] = true
				}
			}
		}
	}
	var views []exporter.SessionView
	var servers []serverSeen
	for _, s := range all {
		if s.Parent != "" {
			continue
		}
		procs := a.members(s)
		var gens []uint32
		active := s.State == sessions.Active
		if active && s.Generation > 1 && s.SparesRoot() {
			gens = a.tracker.Generations(s.Ref(), procs)
		}
		ms := api.Classify(s, procs)
		v := exporter.SessionView{Active: active, HostKind: HostKind(s.Origin), Owner: s.Owner, Members: make([]exporter.MemberView, len(procs))}
		for i, p := range procs {
			m := exporter.MemberView{ID: p.ID, Role: ms[i].Role, Server: ms[i].Server, Alive: !p.Exited}
			m.Orphaned = m.Alive && (!active || orphans[p.ID] || gens != nil && p.ID != s.Root && gens[i] != 0 && gens[i] < s.Generation)
			if m.Alive && (m.Orphaned || m.Server != "" && m.Role != roles.Host) {
				u, err := sm.rd.Read(p.ID)
				switch {
				case errors.Is(err, fs.ErrNotExist):
					m.Alive = false // exited since the graph was read
				case err != nil:
					a.log.Debug("read the usage of a session member", "pid", p.ID.PID, "err", err)
				default:
					m.RSSBytes, m.CPUSeconds = u.RSSBytes, u.CPUSeconds()
					if m.Role == roles.Server && !m.Orphaned {
						idleFor := sm.io.idleFor(p.ID, u.IOBytes, start)
						m.Idle = idleFor >= a.opts.IdleAfter
						if active && p.ID != s.Root && ms[i].Named {
							servers = append(servers, serverSeen{session: s, name: m.Server, command: roles.CommandKey(p), id: p.ID, idleFor: idleFor})
						}
					}
				}
			}
			v.Members[i] = m
		}
		v.Members = append(v.Members, a.containerMembers(s, active, sm)...)
		views = append(views, v)
		var ids []lineage.ID
		var rss []uint64
		var cpu []float64
		for _, m := range v.Members {
			if m.Role != roles.Host {
				ids, rss, cpu = append(ids, m.ID), append(rss, m.RSSBytes), append(cpu, m.CPUSeconds)
			}
		}
		a.noteUsage(s, ids, rss, cpu)
	}
	sm.io.forgetUnseen()
	a.reapSuperseded(servers, a.opts.ReapSupersededAfter)
	pic := exporter.Build(views)
	pic.Unowned = a.unownedPicture(start)
	pic.At, pic.Took = start, time.Since(start)
	sm.last.Store(&pic)
	return pic
}

// containerMembers are the processes of the containers members of s
// started: role container, the image as their server name, orphaned once
// the session ended (a container that outlived its session is a leak).
func (a *Agent) containerMembers(s sessions.Session, active bool, sm *sampler) []exporter.MemberView {
	var out []exporter.MemberView
	claims := a.tracker.ContainersIn(s)
	at := a.attribution(a.tracker.Containers())
	within := make(map[sessions.ClaimKey]bool, len(claims))
	for _, c := range claims {
		within[c.Key()] = true
	}
	counted := map[string]bool{}
	for _, c := range claims {
		v := at.verdicts[c.Key()]
		info := at.info[v.ID]
		if why, _ := at.decide(c, within); why != "" || info.Init.IsZero() || counted[v.ID] {
			continue // only what the session is proven to have started, once
		}
		counted[v.ID] = true
		for _, p := range a.graph.Descendants(info.Init) {
			m := exporter.MemberView{ID: p.ID, Role: roles.Container, Server: roles.ImageName(info.Image), Alive: !p.Exited}
			m.Orphaned = m.Alive && !active
			if m.Alive {
				if u, err := sm.rd.Read(p.ID); err == nil {
					m.RSSBytes, m.CPUSeconds = u.RSSBytes, u.CPUSeconds()
				} else if errors.Is(err, fs.ErrNotExist) {
					m.Alive, m.Orphaned = false, false
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// members returns the members of s with their images, copied one process
// at a time: the tracker's and the graph's locks are held for one
// process's command lines at most, never for a whole session's, so the
// event consumer waits for no sample.
func (a *Agent) members(s sessions.Session) []lineage.Process {
	procs := a.tracker.MembersBrief(s)
	for i := range procs {
		if p, ok := a.graph.Get(procs[i].ID); ok {
			procs[i].Images = p.Images
		}
	}
	return procs
}

// HostKind is the host_kind label of a session's origin: the host rule's
// name, or how the session was declared ("run", "exec", "api").
func HostKind(origin string) string { return strings.TrimPrefix(origin, sessions.OriginRule) }

// sample samples the node every SampleInterval until ctx ends.
func (a *Agent) sample(ctx context.Context) {
	a.Sample()
	t := time.NewTicker(a.opts.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.Sample()
		}
	}
}

// Health is the agent's own state as the metrics show it.
func (a *Agent) Health() exporter.Health {
	st := a.Status()
	h := exporter.Health{
		AliveProcesses: st.Alive, ExitedProcesses: st.Exited, ImageBytes: st.ImageBytes, Repairs: st.Repairs,
		Gaps: st.Gaps, Events: st.Events, Lost: st.Lost, Recovered: st.Recovered,
		Removed:        map[string]uint64{"retired": st.Retired, "evicted": st.Evicted, "folded": st.Folded, "dropped": st.Dropped},
		PendingEndings: st.PendingEndings, JournalErrors: st.State.JournalErrors,
		Kills: map[exporter.KillKey]uint64{},

		ContainerAttribution: st.Containers.Attribution == "on",
		Containers:           map[string]int{"attributed": st.Containers.Claimed - st.Containers.Unattributed, "unattributed": st.Containers.Unattributed},
		ContainerClaims: map[string]uint64{"claimed": st.Sessions.ContainersClaimed, "contested": st.Sessions.ContainersContested,
			"refused": st.Sessions.ContainersRefused, "ignored": st.Sessions.ContainersIgnored},
	}
	if hs := st.History.Stats; hs != nil {
		h.History, h.HistoryBytes = true, hs.FileBytes
		h.HistoryRecords = map[string]uint64{"written": hs.Events + hs.Sessions, "dropped": hs.Dropped, "failed": hs.Failed, "evicted": 0}
		for _, n := range hs.Evicted {
			h.HistoryRecords["evicted"] += n
		}
	}
	if a.sensor != nil {
		if n, overUID, err := a.sensor.RequestDrops(); err == nil {
			h.ContainerClaims["unread"], h.ContainerClaims["over-uid-budget"] = n, overUID
		}
	}
	if srv := a.apiServer(); srv != nil {
		as := srv.APIStatus()
		h.Requests = as.Requests
		h.Refused = map[string]uint64{"total-cap": as.RefusedTotalCap, "uid-cap": as.RefusedUIDCap,
			"identity": as.RefusedIdentity, "gone": as.RefusedGone, "oversize": as.Oversize, "history-busy": as.RefusedHistoryBusy}
	}
	// The failures the alerts watch exist from the start at 0, so the
	// first one is an increase Prometheus sees.
	for _, reason := range []string{sessions.ReasonRootExit, sessions.ReasonRootGone, sessions.ReasonMarker,
		sessions.ReasonSessionEnd, sessions.ReasonParentEnded, ReasonSuperseded} {
		for _, class := range []string{enforcer.ClassFailed, enforcer.ClassSurvivor, enforcer.ClassRefused} {
			h.Kills[exporter.KillKey{Reason: reason, Result: class}] = 0
		}
	}
	if a.enf != nil {
		es := a.enf.Stats()
		for k, n := range es.Kills {
			reason, class, _ := strings.Cut(k, "/")
			h.Kills[exporter.KillKey{Reason: reason, Result: class}] = n
		}
		h.Endings = exporter.Histogram{Bounds: enforcer.EndingBuckets, Counts: es.Endings.Counts, Count: es.Endings.Count, Sum: es.Endings.Sum}
	}
	if a.sensor != nil {
		if us, err := a.sensor.MapUsage(); err == nil {
			for _, u := range us {
				h.Maps = append(h.Maps, exporter.MapUsage{Name: u.Name, Entries: u.Entries, Max: u.Max})
			}
		} else {
			a.log.Warn("count the entries of the BPF maps for the metrics", "err", err)
		}
	}
	return h
}
