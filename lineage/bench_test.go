package lineage

import (
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
