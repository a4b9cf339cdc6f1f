package etw

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// The structures handed to advapi32 have the sizes and offsets of the
// Windows SDK's headers (evntrace.h, evntcons.h) on amd64: a wrong one
// would have StartTrace or OpenTrace read garbage.
func TestETWStructuresHaveTheSDKLayout(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the sizes below are amd64's; this is %s", runtime.GOARCH)
	}
	var p traceProperties
	var lf traceLogfile
	var rec eventRecord
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"sizeof(WNODE_HEADER)", unsafe.Sizeof(p.Wnode), 48},
		{"sizeof(EVENT_TRACE_PROPERTIES)", unsafe.Offsetof(p.name), 120},
		{"EVENT_TRACE_PROPERTIES.LoggerThreadId", unsafe.Offsetof(p.LoggerThreadID), 104},
		{"sizeof(EVENT_TRACE)", unsafe.Sizeof(lf.CurrentEvent), 88},
		{"sizeof(TRACE_LOGFILE_HEADER)", unsafe.Sizeof(lf.LogfileHeader), 280},
		{"TRACE_LOGFILE_HEADER.BootTime", unsafe.Offsetof(lf.LogfileHeader.BootTime), 248},
		{"EVENT_TRACE_LOGFILEW.LogfileHeader", unsafe.Offsetof(lf.LogfileHeader), 120},
		{"EVENT_TRACE_LOGFILEW.EventRecordCallback", unsafe.Offsetof(lf.EventRecordCallback), 424},
		{"sizeof(EVENT_TRACE_LOGFILEW)", unsafe.Sizeof(lf), 448},
		{"EVENT_RECORD.UserDataLength", unsafe.Offsetof(rec.UserDataLength), 86},
		{"EVENT_RECORD.UserData", unsafe.Offsetof(rec.UserData), 96},
		{"sizeof(EVENT_RECORD)", unsafe.Sizeof(rec), 112},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
}

func TestMain(m *testing.M) {
	testenv.RunHelper(testenv.WindowsHelpers)
	os.Exit(m.Run())
}

// The Feed of this machine, on real processes (wine's kernel logs no
// process events, so the start is told to it as ETW would): it seeds
// from a real snapshot, reads a new process's command line from its PEB
// through a handle checked against the event's create time, names the
// seeded test process as the creator, and after a loss repairs the
// graph from a new snapshot, in which the process, ended without a stop
// event, is gone.
func TestFeedReadsARealCommandLineAndRepairsAnUnseenExit(t *testing.T) {
	tab, err := owners.Load(filepath.Join(testenv.TempDir(t), "owners.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFeed(lineage.New(lineage.Config{}), tab)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Seed(); err != nil {
		t.Fatal(err)
	}
	child := testenv.Helper("sleep", "--token=s3cr3t", "two words")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	h, err := winproc.Open(uint32(child.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	self, selfCreate, err := winproc.Self()
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ProcessStart{ProcessID: h.PID, CreateTime: h.Create, ParentProcessID: self, ImageName: `\Device\HarddiskVolume1\` + filepath.Base(os.Args[0])})
	clock := f.Translator.Clock
	id := lineage.ID{PID: h.PID, Start: clock.Since(h.Create)}
	p, ok := f.Graph.Get(id)
	if !ok {
		t.Fatalf("the started process %v is not in the graph", id)
	}
	if img := p.Current(); img.ArgvTruncated || !slices.Equal(img.Argv[1:], child.Args[1:]) {
		t.Errorf("argv %q (truncated %v), want %q", img.Argv, img.ArgvTruncated, child.Args)
	}
	// Its owner is its token's.
	tok, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := tab.Owner(tok); p.UID != want || want == owners.Unknown {
		t.Errorf("the started process is owned by %d, its token %+v by %d", p.UID, tok, want)
	}
	if !f.Graph.InCreatorChain(lineage.ID{PID: self, Start: clock.Since(selfCreate)}, id) {
		t.Error("the seeded test process is not the creator of the process it started")
	}
	if err := h.Terminate(1); err != nil {
		t.Fatal(err)
	}
	if done, _ := h.Wait(10 * time.Second); !done {
		t.Fatal("the child did not exit")
	}
	_ = child.Wait()
	if err := f.Losses(Losses{Events: 1}); err != nil {
		t.Fatal(err)
	}
	if p, _ := f.Graph.Get(id); !p.Exited || p.Gaps&lineage.GapNoExit == 0 {
		t.Errorf("after the repair the ended process is %+v, want exited with its exit event lost", p)
	}
}
