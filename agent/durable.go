package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// The agent's memory across restarts, in Options.StateDir (package state):
// a checkpoint of everything below, then a journal of every input applied
// since, in the order applied:
//
//	event    a kernel event (argv redacted)
//	op       a tracker operation from the API, with its time
//	report   an enforcer report (with its kill records): the ending is done
//	kernel   the kernel counters last seen, per pin set
//	scan     a read of every process as the graph took it in (Seed at
//	         a first start, Repair after a restore or a loss; argv
//	         redacted): the events after it descend from what it found
//
// Loading applies the checkpoint, then replays the journal through the
// same graph and tracker code, so the result is the state the previous
// agent had after its last journaled record; the endings the replayed
// events and operations decide are pending again, unless a report
// follows. Each event and operation is one record, so a crash that tears
// a batch keeps a prefix of it and the kernel still holds the rest.
// Command lines are written redacted (the state is on tmpfs, which can be
// swapped out), except the mcptrace command itself (stateArgv): after a
// restart, processes the previous agent saw show redacted argv.

// Journal record kinds. (3 was a separate record of pending endings; an
// ending is now pending by the event or operation that decided it.)
const (
	recEvent  state.Kind = 1
	recOp     state.Kind = 2
	recReport state.Kind = 4
	recKernel state.Kind = 5
	recScan   state.Kind = 6
)

// checkpointVersion is the layout of checkpointDoc.
const checkpointVersion = 1

// checkpointDoc is the checkpoint's payload.
type checkpointDoc struct {
	Version   int                   `json:"version"`
	WrittenAt uint64                `json:"written_at_ns"`
	Graph     lineage.State         `json:"graph"`
	Sessions  sessions.TrackerState `json:"sessions"`
	Enforcer  enforcer.Saved        `json:"enforcer"`
	// Reports are the finished endings, oldest first, without records
	// (they are in Enforcer.Records).
	Reports []keyedReport      `json:"reports,omitempty"`
	Pending []sessions.Action  `json:"pending,omitempty"`
	Kernel  kernelSeen         `json:"kernel"`
	Events  map[string]uint64  `json:"events_total"`
	Decode  uint64             `json:"undecodable_total,omitempty"`
	Journal journalCheckpoints `json:"journal"`
}

// journalCheckpoints counts checkpoint-level facts that only grow.
type journalCheckpoints struct {
	Errors uint64 `json:"append_errors_total,omitempty"`
}

// keyedReport is a finished ending's report under its key.
type keyedReport struct {
	Key    string          `json:"key"`
	Report enforcer.Report `json:"report"`
}

// reportRecord is a journaled enforcer report.
type reportRecord struct {
	Key     string                `json:"key"`
	Report  enforcer.Report       `json:"report"`
	Records []enforcer.KillRecord `json:"records,omitempty"`
}

// bootReport says what the last start found and did.
type bootReport struct {
	restored  bool
	problems  []state.Problem
	torn      int
	replayed  int
	loaded    time.Duration
	ready     time.Duration
	procAdded int
	procGone  int
	drained   uint64
	resumed   int
	// saved holds the enforcer's records and counters until the enforcer
	// exists (restoreEnforcer).
	saved enforcer.Saved
}

// load opens the state directory and restores what it holds. A state that
// cannot be used is moved aside with a warning that says so; the agent
// then starts from /proc. It fails only when the directory itself cannot
// be used (permissions, another agent holds it).
func (a *Agent) load() error {
	start := time.Now()
	st, loaded, err := state.Open(state.Options{Dir: a.opts.StateDir, Logger: a.opts.Logger.With("component", "state")})
	if err != nil {
		return fmt.Errorf("open the state directory %s (state.dir): %w", a.opts.StateDir, err)
	}
	a.store = st
	// The state package logs each problem (at warn) with what it moved
	// aside; status shows them too.
	a.boot.problems, a.boot.torn = loaded.Problems, loaded.Torn
	if loaded.Checkpoint == nil {
		if len(loaded.Problems) > 0 {
			var what []string
			for _, p := range loaded.Problems {
				what = append(what, p.What)
			}
			a.log.Warn("saved state unusable (moved aside): starting from /proc; sessions whose tags /proc no longer shows are lost",
				"state_dir", a.opts.StateDir, "problems", strings.Join(what, "; "))
			return nil
		}
		a.log.Info("no saved state: first start on this boot", "state_dir", a.opts.StateDir)
		return nil
	}
	if err := a.restore(loaded); err != nil {
		a.log.Warn("saved state unusable: moved aside, starting from /proc", "err", err)
		// Start over with fresh parts: a half-restored graph must not stay.
		a.graph = newGraph(a.opts)
		a.tracker, _ = sessions.NewTracker(a.graph, a.opts.Sessions, a.opts.Logger.With("component", "sessions"))
		a.pending, a.reports, a.kernel = map[string]sessions.Action{}, newReports(a.opts.Sessions), newKernelSeen()
		a.boot.saved = enforcer.Saved{}
		for i := range a.events {
			a.events[i].Store(0)
		}
		if derr := st.Discard(err.Error()); derr != nil {
			return fmt.Errorf("move the unusable state aside: %w", derr)
		}
		a.boot.problems = append(a.boot.problems, state.Problem{What: err.Error()})
		return nil
	}
	a.boot.restored = true
	a.boot.loaded = time.Since(start)
	a.log.Info("restored the saved state", "processes", a.graph.Stats().Tracked, "sessions", len(a.tracker.Sessions()),
		"pending_endings", len(a.pending), "journal_records", a.boot.replayed, "torn_records", loaded.Torn,
		"took", a.boot.loaded.Round(time.Millisecond))
	return nil
}

// restore applies a checkpoint and replays the journal after it.
func (a *Agent) restore(loaded *state.Loaded) error {
	var doc checkpointDoc
	if err := json.Unmarshal(loaded.Checkpoint, &doc); err != nil {
		return fmt.Errorf("decode checkpoint: %w", err)
	}
	if doc.Version != checkpointVersion {
		return fmt.Errorf("checkpoint layout %d, this agent reads %d", doc.Version, checkpointVersion)
	}
	g, err := lineage.Restore(lineage.Config{Retention: a.opts.Retention, MaxNodes: a.opts.MaxNodes, MaxImages: a.opts.MaxImages, MaxImageBytes: a.opts.MaxImageBytes}, doc.Graph)
	if err != nil {
		return fmt.Errorf("restore the lineage graph: %w", err)
	}
	// Replayed events would log every session's life again: quiet until
	// the replay is done.
	quiet := slog.New(slog.DiscardHandler)
	tr, err := sessions.Restore(g, a.opts.Sessions, quiet, doc.Sessions)
	if err != nil {
		return fmt.Errorf("restore the sessions: %w", err)
	}
	a.graph, a.tracker = g, tr
	a.boot.saved = doc.Enforcer
	for _, r := range doc.Reports {
		if key, ok := tr.UpgradeEndingKey(r.Key); ok {
			a.keepReportLocked(key, r.Report)
		}
	}
	for _, act := range doc.Pending {
		a.pending[act.Key()] = act
	}
	a.kernel = doc.Kernel
	a.kernel.fill()
	for _, k := range eventKinds {
		a.events[k].Store(doc.Events[k.String()])
	}
	a.decodeErr.Store(doc.Decode)
	a.journalErrs = doc.Journal.Errors
	for i, rec := range loaded.Records {
		if err := a.replay(rec); err != nil {
			return fmt.Errorf("replay journal record %d of %d: %w", i+1, len(loaded.Records), err)
		}
	}
	a.boot.replayed = len(loaded.Records)
	tr.SetLogger(a.opts.Logger.With("component", "sessions"))
	return nil
}

// replay applies one journal record as it was applied the first time.
// The actions it produces were journaled as pending records of their own.
func (a *Agent) replay(rec state.Record) error {
	switch rec.Kind {
	case recEvent:
		ev, err := state.DecodeEvent(rec.Data)
		if err != nil {
			return err
		}
		a.graph.Apply(ev)
		a.countEvent(ev.Kind)
		a.markPending(a.tracker.Observe(ev))
		// The history may have lost it to a crash; the same event is
		// the same record there.
		a.historyEvents([]lineage.Event{ev}, func(int) []byte { return rec.Data }, nil)
	case recOp:
		var op sessions.Op
		if err := json.Unmarshal(rec.Data, &op); err != nil {
			return fmt.Errorf("decode op: %w", err)
		}
		if _, res, _ := a.tracker.Do(op); !res.Duplicate {
			a.markPending(res.Actions)
		}
	case recReport:
		var rr reportRecord
		if err := json.Unmarshal(rec.Data, &rr); err != nil {
			return fmt.Errorf("decode report: %w", err)
		}
		// Keys saved before session IDs were scoped by owner lack the
		// owner; a report of a session no longer listed cannot be asked
		// for, but its records and counts are still taken below.
		key, listed := a.tracker.UpgradeEndingKey(rr.Key)
		if !listed {
			for k, act := range a.pending {
				if sessions.LegacyEndingKey(act.End, act.Generation) == rr.Key {
					key = k
				}
			}
		}
		delete(a.pending, key)
		if _, seen := a.reports.Get(key); seen {
			break // kept by the checkpoint already: a report journaled after the cut
		}
		if listed {
			a.keepReportLocked(key, rr.Report)
		}
		var added int
		a.boot.saved.Records, added = appendNew(a.boot.saved.Records, rr.Records)
		if added > 0 || len(rr.Records) == 0 {
			a.boot.saved.Stats.Add(rr.Report) // else the checkpoint counted it too
		}
	case recKernel:
		var k kernelSeen
		if err := json.Unmarshal(rec.Data, &k); err != nil {
			return fmt.Errorf("decode kernel counters: %w", err)
		}
		k.fill()
		a.kernel = k
	case recScan:
		sc, err := state.DecodeScan(rec.Data)
		if err != nil {
			return err
		}
		a.applyScan(sc)
	default:
		return fmt.Errorf("unknown journal record kind %d", rec.Kind)
	}
	return nil
}

// restoreEnforcer gives the enforcer the records and counters loaded.
func (a *Agent) restoreEnforcer() {
	if len(a.boot.saved.Records) > enforcer.RecordLimit {
		a.boot.saved.Records = a.boot.saved.Records[len(a.boot.saved.Records)-enforcer.RecordLimit:]
	}
	a.enf.Restore(a.boot.saved)
	a.boot.saved = enforcer.Saved{}
}

// appendNew appends the records of recs that are not in have: a checkpoint
// taken between the enforcer's report and its journal record holds them
// already.
func appendNew(have, recs []enforcer.KillRecord) ([]enforcer.KillRecord, int) {
	type id struct {
		session string
		gen     uint32
		proc    lineage.ID
		at      int64
		result  string
	}
	seen := make(map[id]bool, len(have))
	for _, r := range have {
		seen[id{r.Session, r.Generation, r.Process, r.At.UnixNano(), r.Result}] = true
	}
	added := 0
	for _, r := range recs {
		if !seen[id{r.Session, r.Generation, r.Process, r.At.UnixNano(), r.Result}] {
			have = append(have, r)
			added++
		}
	}
	return have, added
}

// eventRecord is the journal record of a kernel event, argv redacted
// (stateArgv), encoded at the end of buf: it returns the record and buf
// grown by it. The record's Data aliases buf.
func eventRecord(buf []byte, ev lineage.Event) (state.Record, []byte) {
	ev.Argv = stateArgv(ev.Argv)
	start := len(buf)
	buf = state.AppendEvent(buf, ev)
	return state.Record{Kind: recEvent, Data: buf[start:len(buf):len(buf)]}, buf
}

// stateArgv is argv as the state keeps it: redacted, except the words of
// an mcptrace command line up to "--". A session ID is not a secret (the
// API lists it), and the tracker must read a tag or a marker again after
// a restart exactly as it did: an ID that looks like a token (sk-…) would
// otherwise come back redacted and name another session. The command
// after "--" is redacted as every argv is.
func stateArgv(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	if !sessions.IsCLI(argv[0]) {
		return redact.Argv(argv)
	}
	i := slices.Index(argv, "--")
	if i < 0 {
		return slices.Clone(argv)
	}
	return append(slices.Clone(argv[:i+1]), redact.Argv(argv[i+1:])...)
}

// takeScan has the graph take in a read of every process (applyScan) and
// journals it at the same place among the events, so that a replay takes
// it in where it was taken: the events journaled after it descend from
// processes only the read found (a session begun right after start-up,
// before any checkpoint holds the seed). A read too large for one record
// (or an append that failed) is kept by a checkpoint instead, written
// before takeScan returns.
func (a *Agent) takeScan(sc state.Scan) lineage.RepairResult {
	// Encoded beside the graph's work (5-30 ms for 10,000 processes on
	// the project's machine, docs/benchmarks.md): start-up waits for
	// the longer of the two, not for both.
	encoded := make(chan state.Record, 1)
	go func() { encoded <- scanRecord(sc) }()
	a.mu.Lock()
	res := a.applyScan(sc)
	rec := <-encoded
	fits := len(rec.Data) <= state.MaxRecord
	if fits {
		a.journal([]state.Record{rec})
	}
	failed := a.journalFailed
	a.mu.Unlock()
	if !fits {
		a.log.Info("the process read is larger than a journal record: a checkpoint keeps it", "processes", len(sc.Snapshots), "bytes", len(rec.Data))
	}
	if !fits || failed {
		a.checkpointOrLog()
	}
	return res
}

// applyScan is Graph.Seed, or Graph.Repair when sc.Repair.
func (a *Agent) applyScan(sc state.Scan) lineage.RepairResult {
	if sc.Repair {
		return a.graph.Repair(sc.Snapshots, sc.ReadAt)
	}
	a.graph.Seed(sc.Snapshots, sc.ReadAt)
	return lineage.RepairResult{}
}

// scanRecord is the journal record of a process read, argv redacted
// (stateArgv) in a copy: the graph keeps what was read.
//
// A node's processes share command lines (workers of one server, one
// program started many times): each distinct one is redacted once
// (argvRedactor).
func scanRecord(sc state.Scan) state.Record {
	snaps := make([]lineage.Snapshot, len(sc.Snapshots))
	redacted := argvRedactor{}
	for i, p := range sc.Snapshots {
		p.Argv = redacted.argv(p.Argv)
		snaps[i] = p
	}
	sc.Snapshots = snaps
	return state.Record{Kind: recScan, Data: state.AppendScan(nil, sc)}
}

func jsonRecord(kind state.Kind, v any) state.Record {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("journal record %d: %v", kind, err)) // our own types always marshal
	}
	return state.Record{Kind: kind, Data: b}
}

// journal appends records; a.mu is held. A failed append is logged and
// counted: the state on disk is then behind until the next checkpoint,
// which the agent writes as soon as it can.
func (a *Agent) journal(recs []state.Record) {
	if len(recs) == 0 {
		return
	}
	if err := a.store.Append(recs...); err != nil {
		a.journalErrs++
		a.journalFailed = true
		a.log.Error("journal append failed; a checkpoint is written before the kernel may reuse these events", "records", len(recs), "err", err)
		return
	}
	for _, r := range recs {
		a.journaled += int64(len(r.Data)) + 9
	}
}

// maxJournal is the journal size that makes the agent checkpoint before
// CheckpointInterval: restarts then replay at most this much.
const maxJournal = 32 << 20

func (a *Agent) journalFull() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.journaled >= maxJournal
}

// checkpoint writes the whole state and starts the journal anew. The
// state is copied under a.mu, together with the journal's cut, then
// encoded and written without it.
func (a *Agent) checkpoint() (err error) {
	a.mu.Lock()
	cut := a.store.Cut()
	doc := checkpointDoc{
		Version:   checkpointVersion,
		WrittenAt: procfs.BootTimeNow(),
		Graph:     a.graph.Dump(),
		Sessions:  a.tracker.Dump(),
		Kernel:    a.kernel.clone(),
		Events:    map[string]uint64{},
		Decode:    a.decodeErr.Load(),
		Journal:   journalCheckpoints{Errors: a.journalErrs},
	}
	if a.enf != nil {
		doc.Enforcer = a.enf.Dump()
	} else {
		doc.Enforcer = a.boot.saved
	}
	for _, k := range a.reports.Keys() {
		r, _ := a.reports.Get(k)
		doc.Reports = append(doc.Reports, keyedReport{Key: k, Report: r})
	}
	for _, act := range a.pending {
		doc.Pending = append(doc.Pending, act)
	}
	for _, k := range eventKinds {
		doc.Events[k.String()] = a.events[k].Load()
	}
	a.journaled = 0
	a.mu.Unlock()
	defer func() {
		if err == nil {
			a.mu.Lock()
			a.journalFailed = false
			a.mu.Unlock()
		}
	}()
	// Events before the cut leave the state journal with this
	// checkpoint: the history must hold them first.
	a.flushHistory()
	redactGraph(&doc.Graph)
	if err := a.store.WriteCheckpointFrom(cut, doc.encode); err != nil {
		if errors.Is(err, state.ErrStaleCut) {
			return nil // a newer checkpoint got there first
		}
		return err
	}
	a.mu.Lock()
	a.lastCP = time.Now()
	a.mu.Unlock()
	return nil
}

func (a *Agent) checkpointOrLog() {
	if err := a.checkpoint(); err != nil {
		a.log.Error("checkpoint failed; the journal keeps growing until one succeeds", "err", err)
	}
}

// redactGraph redacts every argv of a graph state in place (stateArgv).
func redactGraph(s *lineage.State) {
	redacted := argvRedactor{}
	for i := range s.Nodes {
		for j := range s.Nodes[i].Images {
			s.Nodes[i].Images[j].Argv = redacted.argv(s.Nodes[i].Images[j].Argv)
		}
	}
}

// argvRedactor redacts each distinct argv once (stateArgv): a node runs
// the same command line many times over (10,000 sleepers, a pool of
// workers), and redaction is most of what writing one costs. Equal argv
// share one redacted slice; nobody modifies it.
type argvRedactor map[string][]string

func (r argvRedactor) argv(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	// Each word with its length before it: no two command lines share
	// a key, whatever bytes their words hold.
	var k strings.Builder
	for _, a := range argv {
		k.WriteString(strconv.Itoa(len(a)))
		k.WriteByte(':')
		k.WriteString(a)
	}
	key := k.String()
	red, ok := r[key]
	if !ok {
		red = stateArgv(argv)
		r[key] = red
	}
	return red
}

// graphKey is where a checkpoint's graph goes in its JSON: the doc is
// encoded without it, with the zero State in its place, and the graph
// streamed into that place (encode). Version and WrittenAt, numbers,
// come before it, so its first occurrence is the key.
const graphKey = `"graph":`

// encode writes the checkpoint to w as json.Marshal would, but its
// graph a node at a time (lineage.State.EncodeJSON): the encoding of
// 10,000 processes is never held whole.
func (d checkpointDoc) encode(w io.Writer) error {
	g := d.Graph
	d.Graph = lineage.State{}
	rest, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	zero, err := json.Marshal(d.Graph)
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	at := bytes.Index(rest, []byte(graphKey))
	if at < 0 || !bytes.HasPrefix(rest[at+len(graphKey):], zero) {
		return fmt.Errorf("encode checkpoint: no %s%s in %.80s", graphKey, zero, rest)
	}
	at += len(graphKey)
	if _, err := w.Write(rest[:at]); err != nil {
		return err
	}
	if err := g.EncodeJSON(w); err != nil {
		return err
	}
	_, err = w.Write(rest[at+len(zero):])
	return err
}
