package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/internal/version"
	"github.com/mcptrace/mcptrace/procfs"
)

// operatorState is what the agent tells the people who run it, beside
// its counters: when it started, how it was installed (and so how it is
// started again), and the last problems it logged.
type operatorState struct {
	started time.Time
	// startedBoot is the same on the boot clock (process start times').
	startedBoot uint64
	install     api.Install
	problems    *problemLog
}

// newOperatorState notes the agent's start and puts opts.Logger behind
// the problem log.
func newOperatorState(opts *Options) operatorState {
	p := &problemLog{}
	opts.Logger = slog.New(problemHandler{next: opts.Logger.Handler(), log: p})
	return operatorState{started: time.Now(), startedBoot: procfs.BootTimeNow(), install: api.DetectInstall(), problems: p}
}

// agentStatus is the agent process for Status.
func (a *Agent) agentStatus() api.AgentStatus {
	ready := false
	select {
	case <-a.ready:
		ready = true
	default:
	}
	return api.AgentStatus{Build: version.Get(), PID: os.Getpid(), Started: a.ops.started, Install: a.ops.install, Ready: ready}
}

// kernelStatus is the kernel side for Status.
func (a *Agent) kernelStatus() api.KernelStatus {
	ks := api.KernelStatus{Release: kernelRelease(), PinDir: pinDirShown(a.opts.PinDir)}
	s := a.sensor
	if s == nil {
		return ks
	}
	ks.Attached = true
	ks.SignalAtFork = s.KillsChildrenAtFork()
	if a.opts.engineSocket() != "" {
		if err := s.RequestsErr(); err != nil {
			ks.RequestsOff = err.Error()
		}
	}
	if us, err := s.MapUsage(); err == nil {
		for _, u := range us {
			if u.Name == "doomed" {
				ks.Doomed, ks.DoomedMax = u.Entries, u.Max
			}
		}
	}
	return ks
}

// leakStatus sums up the leaks of the last metrics sample.
func leakStatus(pic exporter.Picture) api.LeakStatus {
	if pic.At.IsZero() {
		return api.LeakStatus{}
	}
	ls := api.LeakStatus{SampledAgoSeconds: max(time.Since(pic.At).Seconds(), 0.001)}
	for _, s := range pic.Servers {
		ls.Orphaned += s.Orphaned
		ls.OrphanedRSS += s.OrphanedRSS
		ls.Duplicates += s.Duplicates
		ls.Idle += s.Idle
	}
	for _, u := range pic.Unowned {
		ls.Unowned += u.Servers
		ls.UnownedRSS += u.RSSBytes
	}
	return ls
}

// problemLog keeps the last warnings and errors the agent logged, for
// status: the few lines that say what went wrong without reading the
// journal. A message logged again right after itself counts as a
// repeat, so one noisy problem does not push the others out.
type problemLog struct {
	mu   sync.Mutex
	last []api.Problem
}

const (
	// maxProblems is how many problems status keeps; maxProblemText
	// bounds each one's text.
	maxProblems    = 8
	maxProblemText = 400
)

func (p *problemLog) add(pr api.Problem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.last); n > 0 && p.last[n-1].What == pr.What && p.last[n-1].Level == pr.Level {
		p.last[n-1].At = pr.At
		p.last[n-1].Repeats++
		return
	}
	if len(p.last) == maxProblems {
		p.last = append(p.last[:0], p.last[1:]...)
	}
	p.last = append(p.last, pr)
}

func (p *problemLog) list() []api.Problem {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]api.Problem(nil), p.last...)
}

// problemHandler hands every record to next, and those of level warning
// and above to log too.
type problemHandler struct {
	next  slog.Handler
	log   *problemLog
	attrs string // added by WithAttrs, as key=value
	group string
}

func (h problemHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h problemHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(r.Message)
		b.WriteString(h.attrs)
		r.Attrs(func(a slog.Attr) bool {
			writeAttr(&b, h.group, a)
			return b.Len() < maxProblemText
		})
		what := b.String()
		if len(what) > maxProblemText {
			what = strings.ToValidUTF8(what[:maxProblemText], "") + "…"
		}
		h.log.add(api.Problem{At: r.Time, Level: r.Level.String(), What: what})
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h problemHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		writeAttr(&b, h.group, a)
	}
	return problemHandler{next: h.next.WithAttrs(as), log: h.log, attrs: b.String(), group: h.group}
}

func (h problemHandler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return problemHandler{next: h.next.WithGroup(name), log: h.log, attrs: h.attrs, group: g}
}

// writeAttr writes " key=value", the component attribute left out (the
// message says where it comes from well enough).
func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	if a.Key == "component" || a.Equal(slog.Attr{}) {
		return
	}
	key := a.Key
	if group != "" {
		key = group + "." + key
	}
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, ga := range v.Group() {
			writeAttr(b, key, ga)
		}
		return
	}
	s := v.String()
	if strings.ContainsAny(s, " \"=") {
		s = fmt.Sprintf("%q", s)
	}
	fmt.Fprintf(b, " %s=%s", key, s)
}

// probes are the agent's /healthz and /readyz (exporter.WithProbes).
func (a *Agent) probes() exporter.Probes {
	return exporter.Probes{Live: a.live, Ready: a.readyErr}
}

// lockWait bounds how long the liveness probe waits for the agent's
// lock: every change of the graph and the sessions takes it briefly, so
// a lock held this long is an agent that stopped working.
const lockWait = 5 * time.Second

// live says what is stuck, nil when nothing is: the agent's lock can
// be taken, and the metrics sampler has sampled within three intervals
// (once the first was due).
func (a *Agent) live() error {
	deadline := time.Now().Add(lockWait)
	for !a.mu.TryLock() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not live: the agent's lock has been held for over %v", lockWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.mu.Unlock()
	bound := max(3*a.opts.SampleInterval, time.Minute)
	since := a.ops.started
	if pic := a.Picture(); !pic.At.IsZero() {
		since = pic.At
	}
	if a.opts.MetricsAddress != "" && time.Since(since) > bound {
		return fmt.Errorf("not live: no metrics sample for %v (metrics.sample-interval is %v)", time.Since(since).Round(time.Second), a.opts.SampleInterval)
	}
	return nil
}

// readyErr says why the agent does not serve yet, or no longer.
func (a *Agent) readyErr() error {
	select {
	case <-a.ready:
	default:
		return fmt.Errorf("not ready: the agent is starting")
	}
	if !a.mu.TryLock() {
		return nil // busy, not stopped: live says whether it is stuck
	}
	stopping := a.stopping
	a.mu.Unlock()
	if stopping {
		return fmt.Errorf("not ready: the agent is stopping")
	}
	return nil
}
