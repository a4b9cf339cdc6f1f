package lineage

import (
	"fmt"
	"slices"
	"testing"
)

func TestImagesKeepTheFirstAndTheLatest(t *testing.T) {
	g := New(Config{MaxImages: 3})
	seedInit(g)
	apply(g, forkEv(host, initID))
	for i := range 10 {
		apply(g, execEv(host.Start+1+uint64(i), host, "loop", fmt.Sprint(i)))
	}
	p := mustGet(t, g, host)
	want := [][]string{{"/sbin/init"}, {"loop", "8"}, {"loop", "9"}} // inherited from init, then the latest two
	if got := argvs(p); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("images %q, want %q", got, want)
	}
	if p.Images[0].Source != SourceInherited {
		t.Errorf("first image is %s, want the inherited one", p.Images[0].Source)
	}
	if p.ImagesDropped != 8 || g.Stats().ImagesDropped != 8 {
		t.Errorf("dropped %d (stats %d), want 8", p.ImagesDropped, g.Stats().ImagesDropped)
	}
	// An exec that falls among the dropped ones is dropped too.
	apply(g, execEv(host.Start+5, host, "late"))
	if p := mustGet(t, g, host); len(p.Images) != 3 || p.ImagesDropped != 9 {
		t.Errorf("after a late exec: %d images, %d dropped, want 3 and 9", len(p.Images), p.ImagesDropped)
	}
	checkInvariants(t, g)
}

func TestNodeCapEvictsTheOldestDeadBranchFirst(t *testing.T) {
	// Cap 10, slack 1: reaching 10 nodes evicts down to 9.
	g := New(Config{MaxNodes: 10})
	seedInit(g)
	apply(g, forkEv(host, initID)) // 2 nodes, alive
	a, b, b1 := id(10, 2*sec), id(11, 2*sec+1), id(12, 2*sec+2)
	c, c1 := id(13, 2*sec+3), id(14, 2*sec+4)
	d := id(15, 2*sec+5)
	apply(g,
		forkEv(a, host), forkEv(b, host), forkEv(b1, b), forkEv(c, host), forkEv(c1, c), forkEv(d, host),
		exitEv(5*sec, a, 0),  // a: dead, last exit 5s
		exitEv(3*sec, b, 0),  // b's branch: dead, last exit 4s (b1)
		exitEv(4*sec, b1, 0), //
		exitEv(1*sec, c, 0),  // c: dead first, but c1 lives: never evicted
		exitEv(6*sec, d, 0),  // d: dead, newest
	) // 8 nodes
	if s := g.Stats(); s.Evicted != 0 || s.Tracked != 8 {
		t.Fatalf("under the cap: %+v", s)
	}
	var evicted []ID
	for i := range 5 { // the first brings the graph to 9 nodes, each next one to the cap
		x := id(100+uint32(i), 7*sec+uint64(i))
		before := g.Processes()
		apply(g, forkEv(x, host))
		for _, p := range before {
			if _, ok := g.Get(p.ID); !ok {
				evicted = append(evicted, p.ID)
			}
		}
		checkInvariants(t, g)
	}
	// b's branch goes first (deepest first), then a, then d; c stays for
	// its live child.
	if want := []ID{b1, b, a, d}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v, want %v", evicted, want)
	}
	if _, ok := g.Get(c); !ok {
		t.Error("c was evicted while its child c1 lives")
	}
	if s := g.Stats(); s.Evicted != 4 || s.OverCap != 0 {
		t.Errorf("Evicted %d OverCap %d, want 4 and 0", s.Evicted, s.OverCap)
	}
}

func TestNodeCapNeverEvictsLiveProcessesAndCountsOverCap(t *testing.T) {
	g := New(Config{MaxNodes: 10})
	seedInit(g)
	apply(g, forkEv(host, initID))
	var live []ID
	for i := range 20 {
		x := id(100+uint32(i), 2*sec+uint64(i))
		live = append(live, x)
		apply(g, forkEv(x, host))
	}
	for _, x := range live {
		if p, ok := g.Get(x); !ok || p.Exited {
			t.Fatalf("live process %v evicted", x)
		}
	}
	s := g.Stats()
	// At 10 nodes nothing can go; the graph looks again every slack (1)
	// new nodes and counts each one admitted over the cap.
	if s.Tracked != 22 || s.Evicted != 0 || s.OverCap != 12 {
		t.Errorf("Tracked %d Evicted %d OverCap %d, want 22, 0, 12", s.Tracked, s.Evicted, s.OverCap)
	}
	// Once some exit, the next new process makes room again.
	for _, x := range live[:15] {
		apply(g, exitEv(3*sec, x, 0))
	}
	apply(g, forkEv(id(500, 4*sec), host))
	if s := g.Stats(); s.Tracked != 9 || s.Evicted != 14 {
		t.Errorf("after exits: Tracked %d Evicted %d, want 9 and 14", s.Tracked, s.Evicted)
	}
	checkInvariants(t, g)
}

func TestRestoreKeepsDroppedAndEvictedCounts(t *testing.T) {
	cfg := Config{MaxNodes: 10, MaxImages: 2}
	g := New(cfg)
	seedInit(g)
	apply(g, forkEv(host, initID))
	for i := range 5 {
		apply(g, execEv(host.Start+1+uint64(i), host, "x", fmt.Sprint(i)))
	}
	for i := range 12 {
		x := id(100+uint32(i), 2*sec+uint64(i))
		apply(g, forkEv(x, host), exitEv(x.Start+1, x, 0))
	}
	before := g.Stats()
	if before.Evicted == 0 || before.ImagesDropped == 0 {
		t.Fatalf("the caps did nothing: %+v", before)
	}
	r := viaJSON(t, g, cfg)
	after := r.Stats()
	if after.ImagesDropped != before.ImagesDropped || after.Evicted != before.Evicted || after.OverCap != before.OverCap {
		t.Errorf("restored counts %+v, want %+v", after, before)
	}
	if p := mustGet(t, r, host); p.ImagesDropped != mustGet(t, g, host).ImagesDropped {
		t.Errorf("restored node dropped %d images, original %d", p.ImagesDropped, mustGet(t, g, host).ImagesDropped)
	}
	// A smaller image cap on restore applies to the saved nodes.
	r2, err := Restore(Config{MaxNodes: 10, MaxImages: 2}, g.Dump())
	if err != nil {
		t.Fatal(err)
	}
	if p := mustGet(t, r2, host); len(p.Images) > 2 {
		t.Errorf("restored node keeps %d images, cap 2", len(p.Images))
	}
}

func TestImageByteCapEvictsTheOldestDeadBranchFirst(t *testing.T) {
	// 4 KiB of empty arguments: 4096 strings, the costliest image the
	// kernel's capture allows.
	empty := make([]string, 4096)
	cost := (&Process{Images: []Image{{Argv: empty}}}).ImageBytes()
	g := New(Config{MaxImageBytes: 10 * cost})
	seedInit(g)
	apply(g, forkEv(host, initID))
	var ids []ID
	for i := range 30 {
		x := id(100+uint32(i), 2*sec+uint64(i))
		ids = append(ids, x)
		apply(g, forkEv(x, host), Event{Kind: KindExec, Time: x.Start + 1, Proc: x, Filename: "/x", Argv: empty})
		if i < 25 {
			apply(g, exitEv(x.Start+2, x, 0))
		}
		checkInvariants(t, g)
	}
	s := g.Stats()
	if s.ImageBytes > 10*cost || s.Evicted == 0 {
		t.Errorf("image bytes %d over the cap %d, %d evicted", s.ImageBytes, 10*cost, s.Evicted)
	}
	// The newest dead ones and every live one are kept; the oldest went.
	if _, ok := g.Get(ids[0]); ok {
		t.Error("the oldest dead process was kept")
	}
	for _, x := range ids[25:] {
		if _, ok := g.Get(x); !ok {
			t.Errorf("live process %v evicted", x)
		}
	}
	// Live processes alone past the byte cap are admitted and counted.
	for i := range 20 {
		x := id(500+uint32(i), 5*sec+uint64(i))
		apply(g, forkEv(x, host), Event{Kind: KindExec, Time: x.Start + 1, Proc: x, Filename: "/x", Argv: empty})
	}
	if s := g.Stats(); s.Alive < 27 || s.OverCap == 0 {
		t.Errorf("live processes past the byte cap: %d alive, %d over cap", s.Alive, s.OverCap)
	}
	checkInvariants(t, g)
}
