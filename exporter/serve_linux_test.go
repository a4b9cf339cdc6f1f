package exporter

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// Helper processes: the test binary run again (testenv.HelperEnv).
func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"hog": helperHog, "scrape": helperScrape})
	os.Exit(m.Run())
}

// hogConns is how many connections the hog keeps trying to hold: more
// than MaxConnections, so that only a bound per peer keeps a slot for
// anyone else.
const hogConns = 3 * MaxConnections

// helperHog is issue 31's attack on the metrics endpoint, harder: it
// keeps hogConns keep-alive connections to EXPORTER_TEST_ADDR, sends
// GET / (and on every other one GET /metrics) on each every 500 ms, and
// opens a new one at once for every one closed. It says "hogging" once
// it has gone round once, then goes on until killed.
func helperHog() {
	addr := os.Getenv("EXPORTER_TEST_ADDR")
	type slot struct {
		c  net.Conn
		br *bufio.Reader
	}
	slots := make([]slot, hogConns)
	for round := 0; ; round++ {
		for i := range slots {
			if slots[i].c == nil {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				slots[i] = slot{c, bufio.NewReader(c)}
			}
			path := "/"
			if i%2 == 1 {
				path = "/metrics"
			}
			s := slots[i]
			s.c.SetDeadline(time.Now().Add(time.Second))
			_, err := fmt.Fprintf(s.c, "GET %s HTTP/1.1\r\nHost: mcptrace\r\n\r\n", path)
			if err == nil {
				var resp *http.Response
				if resp, err = http.ReadResponse(s.br, nil); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			if err != nil {
				s.c.Close()
				slots[i] = slot{}
			}
		}
		if round == 0 {
			fmt.Println("hogging")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// helperScrape scrapes EXPORTER_TEST_ADDR's /metrics 10 times, each on
// a connection of its own, as a Prometheus of its own uid would, and
// prints the slowest and every failure.
func helperScrape() {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var worst time.Duration
	for i := range 10 {
		start := time.Now()
		resp, err := client.Get("http://" + os.Getenv("EXPORTER_TEST_ADDR") + "/metrics")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err != nil {
			fmt.Printf("scrape %d failed: %v\n", i+1, err)
		}
		worst = max(worst, time.Since(start))
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("slowest %v\n", worst.Round(time.Millisecond))
}

// A registry with nothing to sample, as the agent's before its first.
func emptyHandler(t *testing.T, p *Peers) http.Handler {
	reg := NewRegistry(func() (Picture, Health) { return Picture{}, Health{} }, p)
	return Handler(reg, testenv.Logger(t, slog.LevelWarn))
}

// TestScrapesGetThroughWhileAnotherUserHoldsAllItCan is issue 31's
// attack (8 keep-alive connections of uid 65534 kept every scrape
// waiting 10 s) made harder: uid 65534 keeps trying to hold three times
// the total of connections, asking / and /metrics on each. Root's
// scrapes, each on a connection of its own as a restarted Prometheus
// opens one, are all answered within a second, and the endpoint counts
// what it refused the hog. With one bound for everyone (the total
// alone), the hog holds every slot and this fails.
func TestScrapesGetThroughWhileAnotherUserHoldsAllItCan(t *testing.T) {
	testenv.Root(t)
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPeers()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, l, emptyHandler(t, p), p) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	addr := l.Addr().String()

	hog := exec.Command(testenv.SelfForEveryone(t), "-test.run=^$")
	hog.Env = testenv.HelperEnv("hog", "EXPORTER_TEST_ADDR="+addr)
	hog.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	hog.Stderr = os.Stderr
	out, err := hog.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hog.Process.Kill()
		hog.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "hogging" {
		t.Fatalf("hog: %q", line)
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	scrapes := testenv.Sized(20, 10)
	var worst time.Duration
	var last string
	for i := range scrapes {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/metrics")
		took := time.Since(start)
		if err != nil {
			t.Fatalf("scrape %d of %d as root, after %v: %v", i+1, scrapes, took.Round(time.Millisecond), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("scrape %d as root: %d %s", i+1, resp.StatusCode, b)
		}
		worst, last = max(worst, took), string(b)
		time.Sleep(250 * time.Millisecond)
	}
	// And a scraper of another uid than root's, bound per peer as the
	// hog is: a Prometheus running as its own user.
	sc := exec.Command(testenv.SelfForEveryone(t), "-test.run=^$")
	sc.Env = testenv.HelperEnv("scrape", "EXPORTER_TEST_ADDR="+addr)
	sc.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4243, Gid: 4243}}
	theirs, err := sc.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(theirs), "slowest ") {
		t.Errorf("uid 4243's scrapes beside the hog: %v\n%s", err, theirs)
	} else if d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(string(theirs), "slowest "))); err != nil || d > time.Second {
		t.Errorf("uid 4243's slowest scrape: %s, want under 1s", theirs)
	}
	p.mu.Lock()
	held := p.conns["uid 65534"]
	p.mu.Unlock()
	refused := p.Refused()
	t.Logf("%d scrapes as root while uid 65534 tried to hold %d connections: slowest %v; uid 4243's 10: %s; uid 65534 held %d; refused %v",
		scrapes, hogConns, worst.Round(time.Millisecond), strings.TrimSpace(string(theirs)), held, refused)
	if worst > time.Second {
		t.Errorf("the slowest scrape took %v, want under 1s", worst)
	}
	if held > MaxConnectionsPerPeer || refused["peer-cap"] == 0 {
		t.Errorf("uid 65534 holds %d connections (bound %d), %d refused", held, MaxConnectionsPerPeer, refused["peer-cap"])
	}
	if !strings.Contains(last, `mcptrace_metrics_refused_total{reason="peer-cap"}`) {
		t.Errorf("/metrics does not count the refusals:\n%s", last)
	}
}
