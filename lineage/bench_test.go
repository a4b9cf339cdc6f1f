package lineage

import (
	"runtime"
	"testing"
	"time"
)

// BenchmarkApplyForkExecExit measures one short-lived child's whole life
// (fork, exec, exit) under a live root, with Retire every 4096 children as
// the agent calls it periodically.
//
//	go test -run x -bench . -benchmem ./lineage/
func BenchmarkApplyForkExecExit(b *testing.B) {
	g := New(Config{Retention: time.Millisecond})
	root := id(1, 1)
	g.Apply(Event{Kind: KindExec, Time: 2, Proc: root, Filename: "/sbin/init", Argv: []string{"init"}})
	argv := []string{"sh", "-c", "true"}
	now := uint64(10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += 1000
		child := id(uint32(2+i%32000), now)
		g.Apply(Event{Kind: KindFork, Time: now, Proc: child, Creator: root, Parent: root, Comm: "init"})
		g.Apply(Event{Kind: KindExec, Time: now + 100, Proc: child, Filename: "/bin/sh", Argv: argv, Comm: "sh"})
		g.Apply(Event{Kind: KindExit, Time: now + 500, Proc: child})
		if i%4096 == 4095 {
			g.Retire(now + 600)
		}
		i++
	}
}

// BenchmarkDescendants measures the enforcer's query on a session of 1000
// processes, three levels deep.
func BenchmarkDescendants(b *testing.B) {
	g := newGraph()
	root := id(1, 1)
	g.Apply(Event{Kind: KindExec, Time: 2, Proc: root, Argv: []string{"init"}})
	pid := uint32(2)
	var add func(creator ID, depth int)
	add = func(creator ID, depth int) {
		for range 10 {
			c := id(pid, uint64(pid)*1000)
			pid++
			g.Apply(forkEv(c, creator))
			g.Apply(execEv(c.Start+1, c, "node", "x.js"))
			if depth < 2 {
				add(c, depth+1)
			}
		}
	}
	add(root, 0)
	b.ReportAllocs()
	for b.Loop() {
		if len(g.Descendants(root)) != 1111 {
			b.Fatal("wrong size")
		}
	}
}

// BenchmarkForkExitAtNodeCap measures a short-lived child's life in a
// graph held at the default node cap by dead children of a live root
// (retention never passes): every DefaultMaxNodes/64 children one
// eviction walk runs, and its cost is part of the average. The longest
// single Apply is reported as max-apply-ms, and the mean of the Applies
// that ran an eviction walk (the graph's lock is held through it) as
// walk-ms.
//
//	go test -run x -bench ForkExitAtNodeCap -benchtime 200000x ./lineage/
func BenchmarkForkExitAtNodeCap(b *testing.B) {
	g := New(Config{Retention: time.Hour})
	root := id(1, 1)
	g.Apply(Event{Kind: KindExec, Time: 2, Proc: root, Filename: "/sbin/init", Argv: []string{"init"}})
	now := uint64(10)
	next := uint32(2)
	life := func() time.Duration {
		now += 1000
		child := id(next, now)
		next = next%4_000_000 + 2
		t := time.Now()
		g.Apply(Event{Kind: KindFork, Time: now, Proc: child, Creator: root, Parent: root, Comm: "sh"})
		d := time.Since(t)
		g.Apply(Event{Kind: KindExit, Time: now + 500, Proc: child})
		return d
	}
	for range DefaultMaxNodes {
		life()
	}
	var longest, walks time.Duration
	evicted, nwalks := g.Stats().Evicted, 0
	b.ReportAllocs()
	for b.Loop() {
		d := life()
		longest = max(longest, d)
		if e := g.stats.evicted; e != evicted {
			evicted, walks, nwalks = e, walks+d, nwalks+1
		}
	}
	b.ReportMetric(float64(longest)/float64(time.Millisecond), "max-apply-ms")
	if nwalks > 0 {
		b.ReportMetric(float64(walks)/float64(nwalks)/float64(time.Millisecond), "walk-ms")
	}
	if s := g.Stats(); s.Tracked > DefaultMaxNodes || s.Evicted == 0 {
		b.Fatalf("cap not held: %+v", s)
	}
}

// BenchmarkForkExitDroppedUnderChurn measures a short-lived child's life
// (fork, exec, exit) under a live shell that init created, where no
// session holds anything: every exit past Config.RecentExits drops an
// older one (recent.go), and Retire runs every 4096 children as the agent
// calls it. It reports the nodes the graph holds at the end: bounded by
// RecentExits, whatever b.N.
//
//	go test -run x -bench DroppedUnderChurn -benchtime 1000000x ./lineage/
func BenchmarkForkExitDroppedUnderChurn(b *testing.B) {
	g := New(Config{})
	seedInit(g)
	apply(g, forkEv(host, initID), execEv(host.Start+1, host, "bash"))
	argv := []string{"sh", "-c", "true"}
	now := 2 * sec
	next := uint32(2000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now += 1000
		child := id(next, now)
		next = next%4_000_000 + 2000
		g.Apply(Event{Kind: KindFork, Time: now, Proc: child, Creator: host, Parent: host, Comm: "bash"})
		g.Apply(Event{Kind: KindExec, Time: now + 100, Proc: child, Filename: "/bin/sh", Argv: argv, Comm: "sh"})
		g.Apply(Event{Kind: KindExit, Time: now + 500, Proc: child})
		if i%4096 == 4095 {
			g.Retire(now + 600)
		}
		i++
	}
	s := g.Stats()
	b.ReportMetric(float64(s.Tracked), "nodes")
	if s.Tracked > 2+DefaultRecentExits {
		b.Fatalf("%d nodes after %d exits: churn kept", s.Tracked, b.N)
	}
}

// BenchmarkLiveProcessBytes reports the heap a live process costs the
// graph (B/process): 10,000 children of a shell, each forked and
// exec'ing `sleep 3600` (the argv as the decoder hands it over, which the
// graph keeps), heap measured after a GC before and after.
func BenchmarkLiveProcessBytes(b *testing.B) {
	const n = 10_000
	var per float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g := New(Config{})
		seedInit(g)
		apply(g, forkEv(host, initID), execEv(host.Start+1, host, "bash"))
		for i := range n {
			c := id(uint32(2000+i), 2*sec+uint64(i)*1000)
			g.Apply(Event{Kind: KindFork, Time: c.Start, Proc: c, Creator: host, Parent: host, Comm: "bash", UID: 1000})
			g.Apply(Event{Kind: KindExec, Time: c.Start + 100, Proc: c, Filename: "/usr/bin/sleep", Argv: []string{"sleep", "3600"}, Comm: "sleep", UID: 1000})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if g.Stats().Alive != n+2 {
			b.Fatalf("%d alive, want %d", g.Stats().Alive, n+2)
		}
		per = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(g)
	}
	b.ReportMetric(per, "B/process")
}
