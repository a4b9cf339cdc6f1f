package api

import (
	"cmp"
	"slices"
	"strings"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/hosts"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
)

// SessionRecord is everything a session's detail is built from, for
// every caller: what the agent holds of the session in its graph,
// tracker and enforcer (Server.Record), or what the history kept of it.
// Detail narrows a record to what one caller may see, so the live
// answer and the history's go through the same code.
type SessionRecord struct {
	Now     uint64           `json:"now_ns"`
	Session sessions.Session `json:"session"`
	// Members are the session's processes, every uid's; Generations
	// gives each one's generation (SessionDetail.Generations).
	Members     []lineage.Process `json:"members"`
	Generations []uint32          `json:"generations"`
	Containers  []Container       `json:"containers,omitempty"`
	// ContainerProcesses are the processes of Containers.
	ContainerProcesses []ContainerProcess `json:"container_processes,omitempty"`
	// Reports are the enforcer's reports of the session's endings, by
	// generation (0: the session's end), without their records; Records
	// are the kill records of every ending.
	Reports map[uint32]enforcer.Report `json:"reports,omitempty"`
	Records []enforcer.KillRecord      `json:"records,omitempty"`
	// MembersDropped counts the exited members (and container
	// processes) MergeRecords let go past MaxRecordMembers, oldest first.
	MembersDropped int `json:"members_dropped,omitempty"`
}

// MaxRecordMembers bounds the members and container processes a merged
// record keeps: a host that runs for days and starts a process a second
// would otherwise grow its record without end. Kill records are bounded
// by the enforcer (enforcer.RecordLimit).
const MaxRecordMembers = 10_000

// ContainerProcess is a process of the container Containers[Of].
type ContainerProcess struct {
	Of      int             `json:"of"`
	Process lineage.Process `json:"process"`
}

// Record gathers what the agent holds of sess now. Argv is as the graph
// has it (not redacted); parents are the graph's until RefreshRecord.
func (s *Server) Record(sess sessions.Session) SessionRecord {
	rec := SessionRecord{Now: s.Now(), Session: sess, Members: s.Sessions.Members(sess.Ref())}
	if s.Containers != nil {
		rec.Containers = s.Containers(sess)
		for i, ct := range rec.Containers {
			if ct.Init.IsZero() {
				continue
			}
			for _, p := range s.Graph.Descendants(ct.Init) {
				rec.ContainerProcesses = append(rec.ContainerProcesses, ContainerProcess{Of: i, Process: p})
			}
		}
	}
	rec.Generations = s.Sessions.Generations(sess.Ref(), rec.Members)
	// The reports first, then the records (see outcome).
	rec.Reports = s.reports(sess)
	if s.Enforcer != nil {
		rec.Records = s.Enforcer.SessionRecords(sess.Owner, sess.ID)
	}
	return rec
}

// RefreshRecord brings the current parents of rec's processes up to
// date from /proc (Server.Refresh), in place: a reparenting since the
// last event shows. It reads /proc once per live process, so callers do
// it for a record they answer with or write, not for each they compare.
func (s *Server) RefreshRecord(rec *SessionRecord) {
	if s.Refresh == nil {
		return
	}
	s.Refresh(rec.Members)
	procs := make([]lineage.Process, len(rec.ContainerProcesses))
	for i, cp := range rec.ContainerProcesses {
		procs[i] = cp.Process
	}
	s.Refresh(procs)
	for i := range procs {
		rec.ContainerProcesses[i].Process = procs[i]
	}
}

// Detail is rec as c may see it: processes of c's uid only (root:
// all), images that ran under c's uid only, argv redacted unless root
// asks for raw, containers of c's clients, kill records of c's uid, and
// counts from what c may see.
func Detail(c Caller, rec SessionRecord, raw bool) SessionDetail {
	var procs []lineage.Process
	var gens []uint32
	for i, p := range rec.Members {
		if processVisible(c, p) {
			procs = append(procs, p)
			var g uint32
			if i < len(rec.Generations) {
				g = rec.Generations[i]
			}
			gens = append(gens, g)
		}
	}
	members := len(procs)
	alive := 0
	for _, p := range procs {
		if !p.Exited {
			alive++
		}
	}
	o := outcome{reports: rec.Reports, kills: killsFor(c, rec.Records)}
	if o.reports == nil {
		o.reports = map[uint32]enforcer.Report{}
	}
	info := info(c, rec.Session, members, alive, o)
	var cs []Container
	index := map[int]int{} // rec.Containers index → cs index
	for i, ct := range rec.Containers {
		if c.Root() || ct.ClientUID == c.UID {
			index[i] = len(cs)
			cs = append(cs, ct)
		}
	}
	var from []int // for each container process: the index of its container in cs
	for _, cp := range rec.ContainerProcesses {
		if j, ok := index[cp.Of]; ok && processVisible(c, cp.Process) {
			procs = append(procs, cp.Process)
			from = append(from, j)
		}
	}
	present(c, raw, procs)
	rs := Classify(rec.Session, procs[:members])
	clientGen := map[lineage.ID]uint32{}
	for i, p := range procs[:members] {
		clientGen[p.ID] = gens[i]
	}
	for _, i := range from {
		ct := cs[i]
		name := roles.ImageName(ct.Image)
		rs = append(rs, roles.Member{Role: roles.Container, Server: name, Named: name != ""})
		gens = append(gens, clientGen[ct.Client])
	}
	if procs == nil {
		procs = []lineage.Process{}
	}
	dropped := 0
	if c.Root() {
		dropped = rec.MembersDropped
	}
	return SessionDetail{
		MembersDropped: dropped,
		Now:            rec.Now,
		Session:        info,
		Processes:      procs,
		Generations:    gens,
		Roles:          rs,
		Endings:        endings(c, rec.Session, o),
		Kills:          o.kills,
		Containers:     cs,
	}
}

// MergeRecords is what the history keeps of a session recorded twice:
// the newer record, plus the members, containers and kill records only
// the older one still had (processes that left the agent's memory after
// it was written).
func MergeRecords(old, cur SessionRecord) SessionRecord {
	out := cur
	have := make(map[lineage.ID]bool, len(cur.Members))
	for _, p := range cur.Members {
		have[p.ID] = true
	}
	out.Members, out.Generations = slices.Clone(cur.Members), slices.Clone(cur.Generations)
	for len(out.Generations) < len(out.Members) {
		out.Generations = append(out.Generations, 0)
	}
	for i, p := range old.Members {
		if !have[p.ID] {
			out.Members = append(out.Members, p)
			var g uint32
			if i < len(old.Generations) {
				g = old.Generations[i]
			}
			out.Generations = append(out.Generations, g)
		}
	}
	byID := make(map[string]int, len(cur.Containers))
	out.Containers = slices.Clone(cur.Containers)
	for i, ct := range out.Containers {
		byID[ct.ID] = i
	}
	oldIndex := make(map[int]int, len(old.Containers))
	for i, ct := range old.Containers {
		j, ok := byID[ct.ID]
		if !ok {
			j = len(out.Containers)
			byID[ct.ID] = j
			out.Containers = append(out.Containers, ct)
		}
		oldIndex[i] = j
	}
	out.ContainerProcesses = slices.Clone(cur.ContainerProcesses)
	seen := map[lineage.ID]bool{}
	for _, cp := range cur.ContainerProcesses {
		seen[cp.Process.ID] = true
	}
	for _, cp := range old.ContainerProcesses {
		if j, ok := oldIndex[cp.Of]; ok && !seen[cp.Process.ID] {
			out.ContainerProcesses = append(out.ContainerProcesses, ContainerProcess{Of: j, Process: cp.Process})
		}
	}
	if len(old.Reports) > 0 {
		out.Reports = make(map[uint32]enforcer.Report, len(old.Reports)+len(cur.Reports))
		for g, r := range old.Reports {
			out.Reports[g] = r
		}
		for g, r := range cur.Reports {
			out.Reports[g] = r
		}
	}
	out.MembersDropped = old.MembersDropped + cur.MembersDropped
	out.Members, out.Generations, out.ContainerProcesses, out.MembersDropped = boundMembers(out, len(cur.Members))
	type key struct {
		gen       uint32
		proc      lineage.ID
		container string
		at        int64
		result    string
	}
	kept := map[key]bool{}
	out.Records = slices.Clone(cur.Records)
	for _, r := range cur.Records {
		kept[key{r.Generation, r.Process, r.Container, r.At.UnixNano(), r.Result}] = true
	}
	for _, r := range old.Records {
		if !kept[key{r.Generation, r.Process, r.Container, r.At.UnixNano(), r.Result}] {
			out.Records = append(out.Records, r)
		}
	}
	return out
}

// boundMembers drops, past MaxRecordMembers, the oldest exited members
// the agent no longer holds (those after the first keep of rec.Members),
// then the oldest exited container processes.
func boundMembers(rec SessionRecord, keep int) ([]lineage.Process, []uint32, []ContainerProcess, int) {
	over := len(rec.Members) + len(rec.ContainerProcesses) - MaxRecordMembers
	if over <= 0 {
		return rec.Members, rec.Generations, rec.ContainerProcesses, rec.MembersDropped
	}
	dropped := rec.MembersDropped
	// The older members, by exit time, oldest first.
	old := make([]int, 0, len(rec.Members)-keep)
	for i := keep; i < len(rec.Members); i++ {
		old = append(old, i)
	}
	slices.SortFunc(old, func(a, b int) int { return cmpExit(rec.Members[a], rec.Members[b]) })
	gone := map[int]bool{}
	for _, i := range old {
		if over == 0 {
			break
		}
		if rec.Members[i].Exited && rec.Members[i].ID != rec.Session.Root {
			gone[i] = true
			over--
			dropped++
		}
	}
	var ms []lineage.Process
	var gs []uint32
	for i, p := range rec.Members {
		if !gone[i] {
			ms = append(ms, p)
			gs = append(gs, rec.Generations[i])
		}
	}
	cps := rec.ContainerProcesses
	if over > 0 {
		cps = nil
		for _, cp := range rec.ContainerProcesses {
			if over > 0 && cp.Process.Exited {
				over--
				dropped++
				continue
			}
			cps = append(cps, cp)
		}
	}
	return ms, gs, cps, dropped
}

func cmpExit(a, b lineage.Process) int {
	return cmp.Or(cmp.Compare(a.ExitTime, b.ExitTime), cmp.Compare(a.ID.Start, b.ID.Start))
}

// Classify gives each of procs, members of session sess, its role in it
// (roles.ClassifyHost), with what package hosts knows of the host that
// began it: by the rule that did, else by the root's own image. The
// metrics, the live answers and the history's all read roles this way.
func Classify(sess sessions.Session, procs []lineage.Process) []roles.Member {
	if !sess.SparesRoot() {
		return roles.Classify(sess.Root, false, procs)
	}
	var root *lineage.Process
	for i := range procs {
		if procs[i].ID == sess.Root {
			root = &procs[i]
			break
		}
	}
	return roles.ClassifyHost(sess.Root, hosts.Table(strings.TrimPrefix(sess.Origin, sessions.OriginRule), root), procs)
}
