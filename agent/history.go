package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// historyState is the agent's side of the history journal: kernel events
// go to it from the consumer (and again from a state replay, which
// repairs what a crash took), and each session's record every
// historyEvery while it changes, until the record of its end is written.
type historyState struct {
	j *history.Journal // nil when there is no history
	// off says why there is none ("" when there is one).
	off string

	kick chan struct{}
	rec  sync.Mutex // serializes recordSession

	mu sync.Mutex
	// written are the sessions recorded since the agent started.
	written map[historyKey]*historyEntry
	// usage is the memory of each session's servers, from the samples.
	usage map[historyKey]*sessionUsage
}

type historyKey struct {
	owner uint32
	id    string
	began uint64
}

func keyOf(s sessions.Session) historyKey { return historyKey{s.Owner, s.ID, s.Began} }

// historyEntry is what the agent keeps of a session it recorded: not the
// record (that is in the store, read back for the next merge; kept here,
// a session of many members would hold their records in the agent's
// memory for as long as it runs), only what tells whether the next one
// changed.
type historyEntry struct {
	sum   [sha256.Size]byte // of the session's own record last written (before the merge), to skip one that did not change
	put   uint64            // its place in the journal's queue
	final bool              // the record of its end is written
}

// sessionUsage is what the samples saw of a session's servers and what
// ran for them: the most they held together, and each one's last RSS.
type sessionUsage struct {
	peak uint64
	last map[lineage.ID]uint64
	cpu  map[lineage.ID]float64 // CPU seconds each used, as last sampled
	// based: an earlier agent recorded the session (this one restarted),
	// and base is what it recorded of its usage, which the columns go on
	// from. cpuBefore is the CPU of each member that ran before this
	// agent started, as this one first sampled it: base counts it.
	based     bool
	base      usageBase
	cpuBefore map[lineage.ID]float64
}

// usageBase is a session's usage as a record holds it.
type usageBase struct {
	peak, killed uint64
	cpu          float64
}

func newSessionUsage() *sessionUsage {
	return &sessionUsage{last: map[lineage.ID]uint64{}, cpu: map[lineage.ID]float64{}, cpuBefore: map[lineage.ID]float64{}}
}

// historyEvery is how often changed sessions are recorded. Every exited
// member stays in the graph for lineage.retention (minutes), so each is
// in some record.
const historyEvery = 5 * time.Second

// recordWait is how long a session's record waits for the journal to
// write the one before it (it is usually written already: PutSession
// wakes the writer); then the record waits for a later round.
const recordWait = 2 * time.Second

// historyDir is the configured directory, "" when the history is off.
func (o *Options) historyDir() string {
	if o.HistoryDir == "-" {
		return ""
	}
	return o.HistoryDir
}

// openHistory opens the journal. Without one the agent runs on: it says
// why once, and status shows it.
func (a *Agent) openHistory() {
	a.hist.kick = make(chan struct{}, 1)
	a.hist.written = map[historyKey]*historyEntry{}
	a.hist.usage = map[historyKey]*sessionUsage{}
	dir := a.opts.historyDir()
	if dir == "" {
		a.hist.off = "turned off (history.dir is empty)"
		a.log.Info("no history is kept: history.dir is empty")
		return
	}
	j, err := history.Open(history.Options{Dir: dir, MaxAge: a.opts.HistoryMaxAge, MaxBytes: a.opts.HistoryMaxBytes,
		Logger: a.opts.Logger.With("component", "history")})
	if err != nil {
		a.hist.off = err.Error()
		if state.InUse(a.opts.StateDir) {
			// Another agent holds the state too: this start fails on
			// it next, and that is the reason to say first.
			a.log.Debug("no history is kept: its store cannot be opened", "history_dir", dir, "err", err)
			return
		}
		a.log.Error("no history is kept: its store cannot be opened; fix history.dir or set it empty", "history_dir", dir, "err", err)
		return
	}
	a.hist.j = j
	a.log.Info("keeping the history", "store", j.Path(), "max_age", a.opts.HistoryMaxAge, "max_bytes", a.opts.HistoryMaxBytes)
}

// historyEvents hands a batch of kernel events, as journaled (recs), to
// the history; it never waits for the writer.
func (a *Agent) historyEvents(evs []lineage.Event, data func(i int) []byte, buf []history.Event) []history.Event {
	if a.hist.j == nil {
		return buf
	}
	buf = buf[:0]
	for i, ev := range evs {
		buf = append(buf, history.Event{Time: ev.Time, PID: ev.Proc.PID, Kind: uint8(ev.Kind), UID: ev.UID, Data: data(i)})
	}
	a.hist.j.Events(buf)
	return buf
}

// flushHistory waits until the history holds every event handed to it
// so far: the checkpoint that follows drops them from the state journal,
// whose replay can no longer repair them.
func (a *Agent) flushHistory() {
	if a.hist.j == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.hist.j.Flush(ctx); err != nil {
		a.log.Warn("the history writer is behind at a checkpoint: until it catches up, a crash of the agent would take the events it holds from the history (the state journal no longer has them)", "err", err)
	}
}

// recordHistory writes the record of every session that changed, every
// historyEvery and when kicked (an ending finished), until ctx ends;
// then once more (Run closes the journal after it).
func (a *Agent) recordHistory(ctx context.Context) {
	if a.hist.j == nil {
		return
	}
	t := time.NewTicker(historyEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.recordSessions()
			return
		case <-t.C:
		case <-a.hist.kick:
		}
		a.recordSessions()
	}
}

func (a *Agent) kickHistory() {
	select {
	case a.hist.kick <- struct{}{}:
	default:
	}
}

// recordSessions writes the record of each session that changed since
// it was last written.
func (a *Agent) recordSessions() {
	if a.hist.j == nil || a.apiServer() == nil {
		return
	}
	listed := map[historyKey]bool{}
	for _, s := range a.tracker.Sessions() {
		listed[keyOf(s)] = true
		a.recordSession(s)
	}
	a.hist.mu.Lock()
	for k := range a.hist.written {
		if !listed[k] {
			delete(a.hist.written, k)
			delete(a.hist.usage, k)
		}
	}
	a.hist.mu.Unlock()
}

// recordSession writes s's record if it changed since it was last
// written. The ending calls it too, once the enforcer is done and before
// the containers it stopped are forgotten.
func (a *Agent) recordSession(s sessions.Session) {
	srv := a.apiServer()
	if a.hist.j == nil || srv == nil {
		return
	}
	a.hist.rec.Lock() // one record of a session at a time: each merges the last
	defer a.hist.rec.Unlock()
	k := keyOf(s)
	a.hist.mu.Lock()
	e := a.hist.written[k]
	a.hist.mu.Unlock()
	if e != nil && e.final {
		return
	}
	rec := srv.Record(s)
	redactRecord(&rec)
	// Unchanged since it was last written, but for the time it was read:
	// nothing to write, and the store is not read.
	now := rec.Now
	rec.Now = 0
	b, err := json.Marshal(rec)
	rec.Now = now
	if err != nil {
		a.log.Error("history: encoding a session record", "session", s.ID, "err", err)
		return
	}
	// The usage columns change the record too: a peak that grew, CPU
	// by whole seconds.
	b = fmt.Appendf(b, "\x00%s", a.usageMark(k))
	sum := sha256.Sum256(b)
	_, ended := rec.Reports[0]
	final := s.State == sessions.Ended && ended
	if e != nil && sum == e.sum && final == e.final {
		return
	}
	if e == nil {
		e = &historyEntry{}
	}
	// What was written before (by this agent, or by an earlier one
	// before a restart) holds the members that have left the graph since.
	old, oldSum, ok, err := a.storedRecord(s, e.put)
	if err != nil {
		// Its last record is not written yet: merging with the one
		// before would drop the members only that one holds. The next
		// round tries again (e is unchanged).
		a.log.Warn("history: a session's record waits for the writer; it is written at a later round", "session", s.ID, "err", err)
		return
	}
	if ok {
		rec = api.MergeRecords(old, rec)
		if e.put == 0 {
			// Recorded by an earlier agent: its usage columns go on.
			a.baseUsage(k, oldSum)
		}
	}
	// Parents from /proc only for a record that is written: a session
	// that did not change costs no /proc read.
	srv.RefreshRecord(&rec)
	b, _ = json.Marshal(rec)
	hs := a.summary(s, rec)
	hs.Detail = b
	e.sum, e.final = sum, final
	e.put = a.hist.j.PutSession(hs)
	a.hist.mu.Lock()
	a.hist.written[k] = e
	if final {
		delete(a.hist.usage, k)
	}
	a.hist.mu.Unlock()
}

// storedRecord is what was recorded of s so far, by this agent or an
// earlier one, once the journal has written this agent's last record of
// it (put, its place in the queue; 0 for none). The error says the
// journal has not within recordWait.
func (a *Agent) storedRecord(s sessions.Session, put uint64) (api.SessionRecord, history.Session, bool, error) {
	if put != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), recordWait)
		err := a.hist.j.FlushTo(ctx, put)
		cancel()
		if err != nil {
			return api.SessionRecord{}, history.Session{}, false, err
		}
	}
	hs, ok, err := a.hist.j.SessionAt(s.Owner, s.ID, a.hist.j.Wall(s.Began))
	if err != nil || !ok {
		return api.SessionRecord{}, history.Session{}, false, nil
	}
	var rec api.SessionRecord
	if err := json.Unmarshal(hs.Detail, &rec); err != nil {
		a.log.Warn("history: an earlier record of a session cannot be read; it is replaced", "session", s.ID, "err", err)
		return api.SessionRecord{}, history.Session{}, false, nil
	}
	return rec, hs, true, nil
}

// baseUsage takes what an earlier agent recorded of a session's usage
// (hs, its record's summary) as where this agent's columns go on from.
func (a *Agent) baseUsage(k historyKey, hs history.Session) {
	a.hist.mu.Lock()
	defer a.hist.mu.Unlock()
	u := a.hist.usage[k]
	if u == nil {
		u = newSessionUsage()
		a.hist.usage[k] = u
	}
	if !u.based {
		u.based = true
		u.base = usageBase{peak: hs.PeakRSS, killed: hs.KilledRSSBytes(), cpu: hs.CPUSeconds}
	}
}

// summary is the listing of a session in the history, as its owner sees
// it: owner and root see it in `mcptrace history`, nobody else does.
func (a *Agent) summary(s sessions.Session, rec api.SessionRecord) history.Session {
	j := a.hist.j
	hs := history.Session{Owner: s.Owner, ID: s.ID, Origin: s.Origin, Began: j.Wall(s.Began), EndReason: s.EndReason, Written: time.Now()}
	// Every process the record holds, whoever may see it: the index
	// `tree PID --at` looks a pid up in (api.pastTree narrows the answer).
	hs.PIDs = make([]uint32, 0, len(rec.Members)+len(rec.ContainerProcesses))
	for _, p := range rec.Members {
		hs.PIDs = append(hs.PIDs, p.ID.PID)
	}
	for _, cp := range rec.ContainerProcesses {
		hs.PIDs = append(hs.PIDs, cp.Process.ID.PID)
	}
	if s.State == sessions.Ended && s.EndedAt != 0 {
		hs.Ended = j.Wall(s.EndedAt)
	}
	d := api.Detail(api.Caller{UID: s.Owner}, rec, false)
	hs.Members, hs.Killed, hs.Containers = len(d.Processes), d.Session.Killed, len(d.Containers)
	for _, e := range d.Endings {
		if e.Enforcement != nil {
			hs.Survivors += e.Enforcement.Survivors
		}
	}
	killed := map[lineage.ID]bool{}
	for _, k := range d.Kills {
		if k.Result == enforcer.ResultKilled {
			killed[k.Process] = true
		}
	}
	for i, p := range d.Processes {
		if p.ID == s.Root {
			hs.Host = roles.Name(p)
			continue
		}
		if i < len(d.Roles) && (d.Roles[i].Role == roles.Server || d.Roles[i].Role == roles.Container) && d.Roles[i].Server != "" && !slices.Contains(hs.Servers, d.Roles[i].Server) {
			hs.Servers = append(hs.Servers, d.Roles[i].Server)
		}
	}
	a.hist.mu.Lock()
	if u := a.hist.usage[keyOf(s)]; u != nil {
		hs.PeakRSS = u.peak
		for id, c := range u.cpu {
			hs.CPUSeconds += c
			if u.based {
				hs.CPUSeconds -= u.cpuBefore[id] // the earlier agent's base has it
			}
		}
		for id, rss := range u.last {
			if killed[id] {
				hs.KilledRSS += rss
			}
		}
		if u.based {
			hs.PeakRSS = max(hs.PeakRSS, u.base.peak)
			hs.KilledRSS += u.base.killed
			hs.CPUSeconds += u.base.cpu
		}
	}
	a.hist.mu.Unlock()
	return hs
}

// usageMark is what of a session's usage changes its record: its peak,
// and its CPU in whole seconds.
func (a *Agent) usageMark(k historyKey) string {
	a.hist.mu.Lock()
	defer a.hist.mu.Unlock()
	u := a.hist.usage[k]
	if u == nil {
		return ""
	}
	var cpu float64
	for _, c := range u.cpu {
		cpu += c
	}
	return fmt.Sprintf("%d/%d", u.peak, int64(cpu))
}

// noteUsage keeps what a sample saw of a session's servers and what ran
// for them (everything but the host).
func (a *Agent) noteUsage(s sessions.Session, members []lineage.ID, rss []uint64, cpu []float64) {
	if a.hist.j == nil {
		return
	}
	var sum uint64
	a.hist.mu.Lock()
	defer a.hist.mu.Unlock()
	k := keyOf(s)
	u := a.hist.usage[k]
	if u == nil {
		u = newSessionUsage()
		a.hist.usage[k] = u
	}
	for i, id := range members {
		if rss[i] > 0 {
			u.last[id] = rss[i]
			sum += rss[i]
		}
		if cpu[i] > 0 {
			if _, seen := u.cpu[id]; !seen && id.Start < a.ops.startedBoot {
				// Ran before this agent: the CPU it used until now is
				// in an earlier agent's record, if there is one.
				u.cpuBefore[id] = cpu[i]
			}
			u.cpu[id] = cpu[i]
		}
	}
	u.peak = max(u.peak, sum)
}

// redactRecord redacts every argv of rec in place, as the state journal
// does (stateArgv); the images are copied, the graph's are shared.
func redactRecord(rec *api.SessionRecord) {
	red := func(p *lineage.Process) {
		ims := slices.Clone(p.Images)
		for i := range ims {
			ims[i].Argv = stateArgv(ims[i].Argv)
		}
		p.Images = ims
	}
	for i := range rec.Members {
		red(&rec.Members[i])
	}
	for i := range rec.ContainerProcesses {
		red(&rec.ContainerProcesses[i].Process)
	}
	rec.Records = slices.Clone(rec.Records)
	for i := range rec.Records {
		rec.Records[i].Argv = redact.Argv(rec.Records[i].Argv)
	}
}

// historyNote says something in the history about what the agent lost
// or repaired, for whoever reads it later.
func (a *Agent) historyNote(what string, count uint64) {
	if a.hist.j != nil {
		a.hist.j.AddNote(history.Note{At: time.Now(), What: what, Count: count})
	}
}

// closeHistory writes what is queued and closes the store.
func (a *Agent) closeHistory() {
	if a.hist.j == nil {
		return
	}
	if err := a.hist.j.Close(); err != nil {
		a.log.Error("history: closing the store", "err", err)
	}
}

// historyStatus is the history as status shows it.
func (a *Agent) historyStatus() api.HistoryStatus {
	if a.hist.j == nil {
		return api.HistoryStatus{Off: a.hist.off}
	}
	st := a.hist.j.Stats()
	return api.HistoryStatus{Store: a.hist.j.Path(), Stats: &st}
}

var errNoHistory = errors.New("no history is kept on this node")

// History is the journal the API reads past sessions from.
func (a *Agent) History() (*history.Journal, error) {
	if a.hist.j == nil {
		return nil, fmt.Errorf("%w (%s)", errNoHistory, a.hist.off)
	}
	return a.hist.j, nil
}
