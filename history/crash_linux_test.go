package history

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

const (
	crashDirVar = "HISTORY_TEST_DIR"
	crashBatch  = 200
	// crashEventBytes makes a batch about 43 KB: three frames, so that a
	// kill can fall between the frames of one batch.
	crashEventBytes = 200
)

func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"crash": crashChild})
	os.Exit(m.Run())
}

// stored checks that the store holds events 0..n-1 and nothing else, and
// returns n.
func stored(j *Journal) (int, error) {
	n := 0
	var bad error
	err := j.EventsBetween(time.Time{}, time.Unix(1<<33, 0), func(_ time.Time, d []byte) bool {
		want := ev(n, crashEventBytes).Data
		if string(d) != string(want) {
			bad = fmt.Errorf("record %d is not event %d (a torn or invented record)", n, n)
			return false
		}
		n++
		return true
	})
	return n, cmpErr(err, bad)
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// crashChild opens the store, says how many events it holds ("L n"), and
// then queues batches of crashBatch events forever, saying "A n" each
// time Flush returned with n events written.
func crashChild() {
	say := func(format string, args ...any) { os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n") }
	c := &clock{now: t0.Add(time.Hour)}
	j, err := Open(Options{Dir: os.Getenv(crashDirVar), BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: time.Millisecond})
	if err != nil {
		say("X Open: %v", err)
		os.Exit(3)
	}
	n, err := stored(j)
	if err != nil {
		say("X %v", err)
		os.Exit(3)
	}
	say("L %d", n)
	for {
		batch := make([]Event, crashBatch)
		for i := range batch {
			batch[i] = ev(n+i, crashEventBytes)
		}
		j.Events(batch)
		if err := j.Flush(context.Background()); err != nil {
			say("X Flush: %v", err)
			os.Exit(3)
		}
		n += crashBatch
		say("A %d", n)
		// A pause, so that 20 rounds write a bounded store (well within
		// the default MaxBytes: retention would remove the first events
		// this test counts on) and a kill falls as often between
		// batches as within one.
		time.Sleep(time.Millisecond)
	}
}

// TestSIGKILLWhileWritingLosesAtMostTheBatchInFlight kills a writer 20
// times at random moments: the store opens every time, holds every batch
// whose Flush returned, at most the one batch after it, and no part of
// a batch.
func TestSIGKILLWhileWritingLosesAtMostTheBatchInFlight(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	acked := 0
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = testenv.HelperEnv("crash", crashDirVar+"="+dir)
		_, out := testenv.StartPiped(t, cmd)
		if !out.Scan() {
			t.Fatalf("round %d: the child said nothing: %v", round, out.Err())
		}
		line := out.Text()
		if !strings.HasPrefix(line, "L ") {
			t.Fatalf("round %d: %s", round, line)
		}
		have, _ := strconv.Atoi(strings.TrimPrefix(line, "L "))
		if have%crashBatch != 0 || have < acked || have > acked+crashBatch {
			t.Fatalf("round %d: the store holds %d events; %d were acknowledged, batches are %d", round, have, acked, crashBatch)
		}
		acked = have
		deadline := time.Now().Add(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		for time.Now().Before(deadline) && out.Scan() {
			line = out.Text()
			if strings.HasPrefix(line, "X ") {
				t.Fatalf("round %d: %s", round, line)
			}
			if a, ok := strings.CutPrefix(line, "A "); ok {
				acked, _ = strconv.Atoi(a)
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// What it said after the deadline was still said.
		for out.Scan() {
			if a, ok := strings.CutPrefix(out.Text(), "A "); ok {
				acked, _ = strconv.Atoi(a)
			}
		}
		t.Logf("round %d: %d events acknowledged when killed", round, acked)
	}
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	defer j.Close()
	n, err := stored(j)
	if err != nil || n < acked || n > acked+crashBatch {
		t.Fatalf("after 20 kills the store holds %d events (%v); %d were acknowledged", n, err, acked)
	}
}
